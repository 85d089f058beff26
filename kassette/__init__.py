"""kassette: durable agent workflows on an append-only JSONL journal.

Wrap a function in `@kassette(storage=LocalStorage(".kassette"))`; every invocation replays
what the run's journal already holds and continues live at the first unfinished step. Runs
survive crashes, suspend for humans, resume from any process, and fork.
"""

import kassette._public as _public
from kassette._engine import RunResult
from kassette._retry import Retry
from kassette._state import ErrorInfo, RunStatus
from kassette._workflow import AsyncContext, AsyncWorkflow, Context, Workflow, kassette
from kassette.core import open_run
from kassette.errors import (
    ConflictError,
    EventNameCollisionError,
    EventNotPendingError,
    FencedError,
    InputMismatchError,
    InvalidArgumentError,
    JournalCorruptionError,
    KassetteError,
    NotSerializableError,
    ReplayError,
    ReplayMismatchError,
    RunCancelledError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    StorageError,
    StorageNotFoundError,
    Suspended,
    TerminalRunError,
    VersionMismatchError,
)
from kassette.storage import LocalStorage, MemoryStorage, Storage, open_storage

__version__ = "0.1.0"

__all__ = [
    "AsyncContext",
    "AsyncWorkflow",
    "ConflictError",
    "Context",
    "ErrorInfo",
    "EventNameCollisionError",
    "EventNotPendingError",
    "FencedError",
    "InputMismatchError",
    "InvalidArgumentError",
    "JournalCorruptionError",
    "KassetteError",
    "LocalStorage",
    "MemoryStorage",
    "NotSerializableError",
    "ReplayError",
    "ReplayMismatchError",
    "Retry",
    "RunCancelledError",
    "RunExistsError",
    "RunLockedError",
    "RunNotFoundError",
    "RunResult",
    "RunStatus",
    "Storage",
    "StorageError",
    "StorageNotFoundError",
    "Suspended",
    "TerminalRunError",
    "VersionMismatchError",
    "Workflow",
    "kassette",
    "open_run",
    "open_storage",
]

_public.publish(globals(), "kassette")
_public.install_moved_modules()
__getattr__ = _public.deprecated_getattr(
    "kassette",
    {
        "CancelledError": (lambda: RunCancelledError, "kassette.RunCancelledError"),
        "MetadataMismatchError": (lambda: InputMismatchError, "kassette.InputMismatchError"),
    },
)
