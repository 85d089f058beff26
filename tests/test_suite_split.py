"""tests/conftest.py's lists of slow tests name what exists: a renamed file or function would
otherwise move its slow tests into the fast set without a word."""

from __future__ import annotations

import ast
import importlib.util
from fnmatch import fnmatch
from pathlib import Path

# by its path: every directory of tests has a module named conftest
_SPEC = importlib.util.spec_from_file_location("suite_split", Path(__file__).parent / "conftest.py")
assert _SPEC is not None and _SPEC.loader is not None
_SPLIT = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_SPLIT)
ROOT, SLOW_FILES, SLOW_PATTERNS = _SPLIT.ROOT, _SPLIT.SLOW_FILES, _SPLIT.SLOW_PATTERNS
SLOW_FUNCTIONS = _SPLIT.SLOW_FUNCTIONS


def test_every_slow_file_exists() -> None:
    assert [path for path in SLOW_FILES if not (ROOT / path).is_file()] == []


def test_every_slow_pattern_matches_a_file() -> None:
    files = [path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")]
    assert [p for p in SLOW_PATTERNS if not any(fnmatch(f, p) for f in files)] == []


def test_every_slow_function_exists() -> None:
    missing = []
    for name in SLOW_FUNCTIONS:
        path, function = name.split("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        if function not in defined:
            missing.append(name)
    assert missing == []
