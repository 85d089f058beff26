"""The kassette.explore namespace: a sorted `__all__` whose names all resolve, widgets lazily."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys

import pytest

from kassette import explore as kx

MODULES = [
    "kassette.explore",
    "kassette.explore._compare",
    "kassette.explore._export",
    "kassette.explore._frames",
    "kassette.explore._lineage",
    "kassette.explore._widgets",
]


def isort_order(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2), name


@pytest.mark.parametrize("module_name", MODULES)
def test_all_is_sorted_and_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__all__ == sorted(module.__all__, key=isort_order)
    for name in module.__all__:
        assert getattr(module, name) is not None
    assert module.__doc__


def test_spec_names_are_there() -> None:
    assert {"load", "Journals", "lineage", "RunTree", "compare", "ForkExplorer"} <= set(kx.__all__)
    with pytest.raises(AttributeError):
        kx.nothing_here  # noqa: B018


def test_widgets_load_on_first_use() -> None:
    script = (
        "import sys\n"
        "from kassette import explore as kx\n"
        "assert 'ipywidgets' not in sys.modules\n"
        "kx.RunTree\n"
        "assert 'ipywidgets' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_a_missing_extra_names_the_install() -> None:
    script = (
        "import sys\n"
        "sys.modules['pandas'] = None\n"
        "try:\n"
        "    import kassette.explore\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert 'pip install "kassette[explore]"' in done.stdout


def test_no_public_name_hides_a_module_of_the_same_name() -> None:
    """The modules are private (`_compare.py`), as httpx's are: `kx.compare` is the function,
    and `import kassette.explore.compare` finds no module to shadow it."""
    for package in (kx, importlib.import_module("kassette.explore._widgets")):
        for name in package.__all__:
            assert importlib.util.find_spec(f"{package.__name__}.{name}") is None, name
    assert sys.modules["kassette.explore._compare"] is not kx.compare
    assert callable(kx.compare) and callable(kx.lineage) and callable(kx.export)


LAZY = {"RunTree", "CompareView", "ForkExplorer", "to_otlp", "send_otlp"}
HELPERS = {"pandas", "pyarrow", "Any", "TYPE_CHECKING", "annotations", "typing", "widgets"}


def test_dir_lists_the_lazy_names_and_no_imported_helper() -> None:
    listed = set(dir(kx))
    assert listed >= LAZY and set(kx.__all__) == listed
    assert not listed & HELPERS


def test_tab_completion_offers_kassettes_names_and_no_helper() -> None:
    """What `kx.<Tab>` offers in IPython (as JupyterLab's kernel asks it), with Jedi and
    without: the lazy widgets and OTLP functions, and no `pandas`, `Any` or `annotations`."""
    script = (
        "from IPython.core.completer import provisionalcompleter\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_cell('from kassette import explore as kx')\n"
        "for jedi in (True, False):\n"
        "    shell.Completer.use_jedi = jedi\n"
        "    with provisionalcompleter():\n"
        "        found = {c.text.lstrip('.') for c in shell.Completer.completions('kx.', 3)}\n"
        "    print(sorted(name for name in found if not name.startswith('_')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    offers = done.stdout.strip().splitlines()
    assert len(offers) == 2
    for line in offers:
        names = set(ast.literal_eval(line))  # a printed list of names
        assert names >= LAZY, line
        assert not names & HELPERS, line
