"""docs/architecture.md draws the import graph between kassette's modules; the code must match.

Run `python tests/test_architecture.py` to print the graph as the code has it, in the form the
document uses (one `module -> what it imports` line per module, packages counted as one).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kassette"
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("explore", "koto", "storage", "integrations")  # drawn as one node each


def unit(module: str) -> str:
    """The node a module is drawn as: `kassette.explore._frames` is `explore`."""
    parts = module.split(".")[1:]
    if not parts:
        return "kassette"
    return parts[0]


def module_graph() -> dict[str, set[str]]:
    """Which nodes each node imports (lazily or not), from the package's source."""
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in PACKAGE.rglob("*.py")
    }
    graph: dict[str, set[str]] = {unit(name): set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in modules and unit(target) != unit(name):
                    graph[unit(name)].add(unit(target))
    return graph


def draw(graph: dict[str, set[str]]) -> str:
    return "".join(
        f"{name} -> {' '.join(sorted(graph[name])) or '(nothing)'}\n" for name in sorted(graph)
    )


def documented() -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"### The module graph\n.*?```text\n(.*?)```", text, re.DOTALL)
    assert match, "docs/architecture.md has no module graph"
    return match.group(1)


def test_the_documented_module_graph_is_the_code_s() -> None:
    assert documented() == draw(module_graph())


def test_the_layers_only_import_downward() -> None:
    """The core layers in order, lowest first: each imports only layers before it."""
    layers = [
        {"_tracebacks"},  # how errors render in IPython: imports nothing of kassette
        {
            "errors",
            "_clock",
            "_lineage",
            "_model_responses",
            "_model_streams",
            "_timestamps",
            "_json_diff",
            "_public",
            "_listeners",
            "_extras",
        },
        {"_codec", "_retry", "storage", "_model_usage"},
        {"_llm_calls"},
        {"_llm_requests"},
        {"_state", "_otlp_messages"},
        {"_otlp_calls"},
        {"_otlp_spans"},  # the one mapping of entries to spans: kx.to_otlp's and live tracing's
        {"_listing"},
        {"_journal"},
        {"_append"},
        {"_fork"},
        {"_sessions"},
        {"_run"},
        {"core"},
        {"_engine", "_dry_replay"},
        {"_workflow", "testing"},  # testing: the fake model server too, off the runtime's floors
        {"kassette"},
        {"explore", "koto"},
        {"integrations"},  # the otel integration emits the spans explore's OTLP mapping makes
        {"_cli"},
        {"__main__"},
    ]
    graph = module_graph()
    assert set().union(*layers) == set(graph)
    below: set[str] = set()
    for layer in layers:
        for name in layer:
            assert graph[name] <= below, f"{name} imports {sorted(graph[name] - below)}"
        below |= layer


if __name__ == "__main__":
    sys.stdout.write(draw(module_graph()))


# NamedTuple's public methods start with an underscore so as not to clash with field names
_PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make"}


def private_reaches() -> list[str]:
    """Every `x._name` in the package where `x` is not `self` or `cls` and either `x` was
    imported from another module (whatever this module defines under the same name: a local
    function called `_append` does not make `Run._append` its own) or `_name` is not defined
    in the same module: a module using another one's private parts."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own, imported = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                own.add(node.attr)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                imported |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in _PUBLIC_UNDERSCORED
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and (
                    node.attr not in own
                    or (isinstance(node.value, ast.Name) and node.value.id in imported)
                )
            ):
                where = path.relative_to(ROOT)
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_modules_private_attributes() -> None:
    assert private_reaches() == []


def test_the_private_attribute_check_sees_a_reach(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    package = tmp_path / "kassette"
    package.mkdir()
    (package / "a.py").write_text("class A:\n    def _hidden(self):\n        return 1\n")
    (package / "b.py").write_text("def use(a):\n    return a._hidden() + a._replace()\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_reaches() == ["kassette/b.py:2: a._hidden"]


def test_the_private_attribute_check_sees_a_reach_behind_a_local_namesake(
    tmp_path: Path,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """What `instrument()` once did: replace `Run._append` from a module that defines a
    function of its own named `_append`."""
    package = tmp_path / "kassette"
    package.mkdir()
    (package / "a.py").write_text("class Run:\n    def _append(self):\n        return 1\n")
    (package / "b.py").write_text(
        "from kassette.a import Run\n\n"
        "def _append(self):\n    return 2\n\n"
        "def patch():\n    Run._append = _append\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_reaches() == ["kassette/b.py:7: Run._append"]
