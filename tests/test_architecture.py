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
    """The node a module is drawn as: `kassette.explore.frames` is `explore`."""
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
        {"errors", "clock", "lineage", "model_calls", "_model_answers"},
        {"codec", "retry", "storage", "_model_wire"},
        {"state", "_model_server"},
        {"listing"},
        {"journal"},
        {"append"},
        {"fork"},
        {"sessions"},
        {"core"},
        {"engine"},
        {"workflow", "testing"},
        {"kassette", "integrations"},
        {"explore", "koto"},
        {"cli"},
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
