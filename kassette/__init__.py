"""kassette: durable agent workflows on an append-only JSONL journal.

Wrap a function in `@kassette(storage=LocalStorage(".kassette"))`; every invocation replays
what the run's journal already holds and continues live at the first unfinished step. Runs
survive crashes, suspend for humans, resume from any process, and fork.
"""

from kassette.core import open_run
from kassette.engine import RunResult
from kassette.errors import (
    CancelledError,
    EventNameCollisionError,
    EventNotPendingError,
    FencedError,
    InvalidArgumentError,
    JournalCorruptionError,
    KassetteError,
    MetadataMismatchError,
    NotSerializableError,
    ReplayError,
    ReplayMismatchError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    StorageError,
    Suspended,
    TerminalRunError,
    VersionMismatchError,
)
from kassette.retry import Retry
from kassette.state import ErrorInfo, RunStatus
from kassette.storage import Storage, open_storage
from kassette.storage.local import LocalStorage
from kassette.storage.memory import MemoryStorage
from kassette.workflow import AsyncContext, AsyncWorkflow, Context, Workflow, kassette

__version__ = "0.1.0"

__all__ = [
    "AsyncContext",
    "AsyncWorkflow",
    "CancelledError",
    "Context",
    "ErrorInfo",
    "EventNameCollisionError",
    "EventNotPendingError",
    "FencedError",
    "InvalidArgumentError",
    "JournalCorruptionError",
    "KassetteError",
    "LocalStorage",
    "MemoryStorage",
    "MetadataMismatchError",
    "NotSerializableError",
    "ReplayError",
    "ReplayMismatchError",
    "Retry",
    "RunExistsError",
    "RunLockedError",
    "RunNotFoundError",
    "RunResult",
    "RunStatus",
    "Storage",
    "StorageError",
    "Suspended",
    "TerminalRunError",
    "VersionMismatchError",
    "Workflow",
    "kassette",
    "open_run",
    "open_storage",
]
