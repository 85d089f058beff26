"""Test helpers: an in-memory backend, a fake clock, and the storage conformance suite.

Every backend proves it keeps kassette's guarantees by subclassing `StorageConformance` in its
own tests and providing a `storage` pytest fixture (a fresh, empty backend per test):

    class TestMyStorage(StorageConformance):
        @pytest.fixture
        def storage(self):
            return MyStorage(...)

The suite uses only `assert`, so it needs pytest to run but does not import it.
"""

import typing
import warnings

from kassette._public import publish as _publish
from kassette.testing._support import FakeClock, StorageConformance, fake_model_server

if typing.TYPE_CHECKING:
    from kassette.testing._model_server import FakeModelServer

__all__ = [
    "FakeClock",
    "FakeModelServer",
    "StorageConformance",
    "fake_model_server",
]

_publish(globals(), "kassette.testing")


def __getattr__(name: str) -> typing.Any:
    # `FakeModelServer` is imported when asked for, so `kassette.testing` stays light
    if name == "FakeModelServer":
        from kassette.testing._model_server import FakeModelServer

        FakeModelServer.__module__ = __name__
        return FakeModelServer
    if name == "MemoryStorage":  # its home is kassette.storage (docs/reference.md, decision 8)
        warnings.warn(
            "kassette.testing.MemoryStorage is deprecated; use kassette.MemoryStorage",
            DeprecationWarning,
            stacklevel=2,
        )
        from kassette.storage import MemoryStorage

        return MemoryStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
