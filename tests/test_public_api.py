"""The public surface: `kassette.__all__` is sorted, complete, importable, and leaks nothing."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

import kassette

# names SPEC §2, §4 and §5 promise at the top level
PROMISED = {
    "kassette",
    "Workflow",
    "AsyncWorkflow",
    "Context",
    "AsyncContext",
    "RunResult",
    "RunStatus",
    "ErrorInfo",
    "Retry",
    "open_run",
    "LocalStorage",
    "MemoryStorage",
    "Storage",
    "open_storage",
    "KassetteError",
    "FencedError",
    "RunLockedError",
    "TerminalRunError",
    "RunCancelledError",
    "EventNotPendingError",
    "EventNameCollisionError",
    "RunNotFoundError",
    "RunExistsError",
    "StorageError",
    "ReplayError",
    "VersionMismatchError",
    "InputMismatchError",
    "ReplayMismatchError",
    "JournalCorruptionError",
    "Suspended",
}
# the standard-library-only public packages (docs/reference.md, decision 8)
CORE_MODULES = [
    "kassette",
    "kassette.core",
    "kassette.errors",
    "kassette.storage",
    "kassette.testing",
]
# names SPEC promises that were renamed: still there, with a DeprecationWarning
RENAMED = {
    "CancelledError": "RunCancelledError",
    "MetadataMismatchError": "InputMismatchError",
}


def isort_order(name: str) -> tuple[int, str]:
    """CONSTANTS, then Classes, then functions: the order ruff keeps `__all__` in."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2), name


def test_all_is_sorted_and_unique() -> None:
    assert kassette.__all__ == sorted(kassette.__all__, key=isort_order)
    assert len(set(kassette.__all__)) == len(kassette.__all__)


def test_all_holds_exactly_the_public_members() -> None:
    public = {
        name
        for name, value in vars(kassette).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(kassette.__all__)


def test_spec_names_are_exported() -> None:
    assert set(kassette.__all__) >= PROMISED


@pytest.mark.parametrize("name", kassette.__all__)
def test_every_name_imports(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from kassette import {name}", namespace)
    assert namespace[name] is getattr(kassette, name)
    assert getattr(namespace[name], "__module__", "").startswith("kassette")


def test_star_import_gives_all() -> None:
    namespace: dict[str, object] = {}
    exec("from kassette import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(kassette.__all__)


@pytest.mark.parametrize("module_name", CORE_MODULES)
def test_module_all_is_sorted_and_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = module.__all__
    assert names == sorted(names, key=isort_order) and len(set(names)) == len(names)
    for name in names:
        assert not name.startswith("_")
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("kassette")
    assert module.__doc__, f"{module_name} needs a docstring saying what it owns"


def test_version_matches_the_package_metadata() -> None:
    assert kassette.__version__ == importlib.metadata.version("kassette")


def test_core_imports_only_the_standard_library() -> None:
    script = f"""
import sys
before = set(sys.modules)
for name in {CORE_MODULES!r}:
    __import__(name)
foreign = sorted(
    name for name in set(sys.modules) - before
    if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] != "kassette"
)
print(",".join(foreign))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "", f"the core imported {result.stdout.strip()}"


def import_graph() -> dict[str, set[str]]:
    """Which kassette modules each kassette module imports, lazily or not."""
    package = Path(kassette.__file__).parent
    modules = {
        ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(
            ".__init__"
        ): path
        for path in package.rglob("*.py")
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {target for target in targets if target in modules} - {name}
    return graph


def test_no_module_imports_itself_back() -> None:
    """Data flows one way: no cycle of imports, counting the ones inside functions."""
    graph, state, stack = import_graph(), {}, []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert len(graph) > 30 and "kassette.explore._decode" in graph["kassette.explore._export"]
    assert cycles == []


def private_imports() -> list[str]:
    """Every import in the package of a private name (`_x`) from another module, or of a
    private module (`kassette.pkg._x`) from outside its package, counting the ones inside
    functions: what `test_no_private_name_crosses_a_module_boundary` refuses."""
    package = Path(kassette.__file__).parent
    found = []

    def is_module(dotted: str) -> bool:
        path = package.parent.joinpath(*dotted.split("."))
        return path.with_suffix(".py").exists() or (path / "__init__.py").exists()

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for path in sorted(package.rglob("*.py")):
        here = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        here = here.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                pairs = [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs = [
                    tuple(alias.name.rsplit(".", 1)) for alias in node.names if "." in alias.name
                ]
            else:
                continue
            for module, name in pairs:
                if not module.startswith("kassette"):
                    continue
                dotted = f"{module}.{name}"
                target = dotted if is_module(dotted) else module
                parts = target.split(".")
                for depth, part in enumerate(parts):
                    owner = ".".join(parts[:depth])  # the package a private module belongs to
                    # a package's own `__init__` may import its private modules (re-exports)
                    inside = here == owner or here.startswith(owner + ".")
                    if private(part) and not inside:
                        found.append(f"{here}:{node.lineno} imports private module {target}")
                if target == module and private(name) and module != here:
                    found.append(f"{here}:{node.lineno} imports private name {dotted}")
    return found


def test_no_private_name_crosses_a_module_boundary() -> None:
    """Each layer uses only the public names of the ones below it (docs/architecture.md)."""
    assert private_imports() == []


# the other public packages (docs/reference.md, decision 8), with the names each loads lazily
PUBLIC_PACKAGES = {
    **dict.fromkeys(CORE_MODULES, ()),
    "kassette.storage": ("S3Storage",),
    "kassette.testing": ("FakeModelServer",),
    "kassette.explore": (
        "CompareView",
        "ForkExplorer",
        "RunTree",
        "import_inspect",
        "send_otlp",
        "to_otlp",
    ),
    "kassette.integrations.openai": (),
    "kassette.integrations.anthropic": (),
    "kassette.integrations.otel": (),
    "kassette.koto": (),  # the `koto` command is its interface; nothing is imported
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC_PACKAGES))
def test_all_is_exactly_the_public_names(module_name: str) -> None:
    """httpx's rule: a public package's `__all__` is the public names of its namespace, no
    helper (`Any`, `annotations`) and no module leaked, and each name says it lives there
    (`__module__`), unless another public package owns it (kassette re-exports errors)."""
    module = importlib.import_module(module_name)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(module.__all__)
    assert set(module.__all__) - public <= set(PUBLIC_PACKAGES[module_name])  # loaded on use
    assert sorted(dir(module)) == sorted(vars(module)) or set(dir(module)) == set(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ in PUBLIC_PACKAGES, (name, value.__module__)
            assert value.__module__ == module_name or module_name == "kassette"


def test_each_public_name_has_one_home() -> None:
    """No name is in two public packages' `__all__`, except what `kassette` re-exports."""
    homes: dict[str, list[str]] = {}
    for module_name in CORE_MODULES[1:]:
        for name in importlib.import_module(module_name).__all__:
            homes.setdefault(name, []).append(module_name)
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}
    for name in kassette.__all__:
        value = getattr(kassette, name)
        assert getattr(value, "__module__", "kassette") in CORE_MODULES


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_a_renamed_error_still_imports_with_a_warning(old: str) -> None:
    new = RENAMED[old]
    for module in (kassette, kassette.errors):
        with pytest.warns(DeprecationWarning, match=new):
            value = getattr(module, old)
        assert value is getattr(kassette.errors, new)


def test_an_old_module_path_imports_with_a_warning() -> None:
    """Each moved module still imports, as the private module it became, naming the new path;
    in a fresh process, so the warning is not hidden by an earlier import."""
    from kassette._public import MOVED_MODULES

    script = f"""
import importlib, warnings
warnings.simplefilter("error")
moved = {dict((old, private) for old, (private, _) in MOVED_MODULES.items())!r}
for old, private in moved.items():
    try:
        importlib.import_module(old)
    except DeprecationWarning as warning:
        assert private in str(warning), (old, str(warning))
    else:
        raise AssertionError(f"{{old}} imported without a warning")
    warnings.simplefilter("ignore")
    module, target = importlib.import_module(old), importlib.import_module(private)
    # a moved module is the private one, or (names renamed too) a stand-in that reads it
    assert module is target or module.__doc__ == target.__doc__
    warnings.simplefilter("error")
print(len(moved))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert int(result.stdout) == len(MOVED_MODULES) > 20


def test_memory_storage_from_testing_is_deprecated() -> None:
    import kassette.testing

    with pytest.warns(DeprecationWarning, match="kassette.MemoryStorage"):
        assert kassette.testing.MemoryStorage is kassette.MemoryStorage


def test_model_call_names_are_deprecated_spellings_of_llm_call() -> None:
    import kassette.core

    with pytest.warns(DeprecationWarning, match="kassette._llm_calls"):
        import kassette.model_calls as llm_calls
    assert llm_calls.TokenUsage is kassette.core.TokenUsage
    with pytest.warns(DeprecationWarning, match="kassette.core.LLMCall"):
        assert llm_calls.ModelCall is kassette.core.LLMCall
    with pytest.warns(DeprecationWarning, match="kassette.core.read_llm_call"):
        assert llm_calls.read_model_call is kassette.core.read_llm_call
