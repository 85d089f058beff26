"""The public face of kassette's packages: homes for names, and the paths that moved.

Every module is private (`kassette/_journal.py`, ...), as httpx's are; each public package
re-exports its names and `publish` makes each one say so (`__module__`), so a traceback, a
`repr` and the docs name `kassette.core.Journal`, not the private file that defines it.

Paths and names that users could import before the modules became private keep working for
one release, each with a `DeprecationWarning` naming the new one: `MOVED_MODULES` (an import
hook that hands out the private module under its old name) and `deprecated_getattr` (a module
`__getattr__` for renamed names).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# old module path -> (its private path, where its public names now live)
MOVED_MODULES: dict[str, tuple[str, str]] = {
    **{
        f"kassette.{name}": (f"kassette._{name}", "kassette.core")
        for name in ("codec", "journal", "state", "append", "fork", "sessions", "listing")
    },
    "kassette.timestamps": ("kassette._timestamps", "kassette.core"),
    "kassette.model_calls": ("kassette._llm_calls", "kassette.core"),
    "kassette.lineage": ("kassette._lineage", "kassette.core"),
    "kassette.clock": ("kassette._clock", "kassette.core"),
    "kassette.engine": ("kassette._engine", "kassette"),
    "kassette.workflow": ("kassette._workflow", "kassette"),
    "kassette.retry": ("kassette._retry", "kassette"),
    "kassette.cli": ("kassette._cli", "the kassette command"),
    **{
        f"kassette.storage.{name}": (f"kassette.storage._{name}", "kassette.storage")
        for name in ("local", "memory", "s3", "chunks", "files", "local_append")
    },
    "kassette.explore.widgets": ("kassette.explore._widgets", "kassette.explore"),
}
# names renamed when their module moved: old path -> {old name: new name}
MOVED_NAMES: dict[str, dict[str, str]] = {
    "kassette.model_calls": {"ModelCall": "LLMCall", "read_model_call": "read_llm_call"},
}


def publish(namespace: Mapping[str, Any], package: str) -> None:
    """Give each name in `namespace["__all__"]` that a private module defines `package` as its
    `__module__` (names another public package owns keep theirs)."""
    for name in namespace["__all__"]:
        value = namespace.get(name)  # a lazily loaded name is published when it loads
        if isinstance(value, type | types.FunctionType) and _private(value.__module__):
            value.__module__ = package


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def deprecated_getattr(
    package: str, renamed: Mapping[str, tuple[Callable[[], Any], str]]
) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that still answers each old name in `renamed`
    (old name -> (a function giving the value, the new spelling)), warning as it does."""

    def __getattr__(name: str) -> Any:
        if name in renamed:
            value, new = renamed[name]
            warnings.warn(
                f"{package}.{name} is deprecated; use {new}", DeprecationWarning, stacklevel=2
            )
            return value()
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as the private module it became, with a warning."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        private, home = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} is private now ({private}); import its public names from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(private)
        renamed = MOVED_NAMES.get(spec.name)
        if renamed is not None:  # the old names too, through a stand-in of the old module
            stand_in = types.ModuleType(spec.name, module.__doc__)
            stand_in.__getattr__ = _renamed_or(module, home, renamed)  # type: ignore[method-assign]
            module = stand_in
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """The private module is already executed."""


def _renamed_or(
    module: types.ModuleType, home: str, renamed: Mapping[str, str]
) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if name in renamed:
            warnings.warn(
                f"{name} is deprecated; use {home}.{renamed[name]}",
                DeprecationWarning,
                stacklevel=2,
            )
            name = renamed[name]
        return getattr(module, name)

    return __getattr__


def install_moved_modules() -> None:
    """Let the old module paths import (once per process)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
