"""Every error kassette raises, in one tree.

    KassetteError
    ├── FencedError              a newer session owns the run; this writer must stop
    ├── RunLockedError           another live process holds the run (transient: redeliver later)
    ├── TerminalRunError         the run already ended (complete, error or cancel)
    │   └── RunCancelledError    ... by a cancel, possibly while this session ran
    ├── EventNotPendingError     resume of an event the run is not waiting for
    ├── EventNameCollisionError  a bare event name matches several pending suspends
    ├── RunNotFoundError         (also a LookupError)
    ├── RunExistsError           a fork into a run id that holds another run
    ├── StorageNotFoundError     (also a LookupError) a `file:` directory that is not there
    ├── StorageError             I/O failed (transient)
    │   └── ConflictError        a conditional append lost a race (handled inside kassette)
    ├── InvalidArgumentError     (also a ValueError) bad run id, step name, fork point, ...
    ├── NotSerializableError     (also a TypeError) a value that is not plain JSON
    └── ReplayError              a re-invocation can never succeed: a dispatcher acks these
        ├── VersionMismatchError
        ├── InputMismatchError   `start` with another input than the run's
        ├── ReplayMismatchError
        └── JournalCorruptionError

In IPython and Jupyter these errors show as a few lines: what happened and what to do
(`_render_traceback_`); `%xmode Plain`, then `%tb`, shows the full traceback.

`Suspended` is a `BaseException`, not part of the tree: it is control flow, and `except
Exception` in user code must not swallow it. None of these is journaled as a run's `error`,
but one: a `ReplayError` in the session that created a fork (its copied prefix no longer
replays) ends that fork failed with it, so no fork is left `running` with nothing of its own.

`CancelledError` and `MetadataMismatchError` are the deprecated former names of
`RunCancelledError` and `InputMismatchError` (the same classes; a `DeprecationWarning` on use).
"""

import warnings

__all__ = [
    "ConflictError",
    "EventNameCollisionError",
    "EventNotPendingError",
    "FencedError",
    "InputMismatchError",
    "InvalidArgumentError",
    "JournalCorruptionError",
    "KassetteError",
    "NotSerializableError",
    "ReplayError",
    "ReplayMismatchError",
    "RunCancelledError",
    "RunExistsError",
    "RunLockedError",
    "RunNotFoundError",
    "StorageError",
    "StorageNotFoundError",
    "Suspended",
    "TerminalRunError",
    "VersionMismatchError",
]


class KassetteError(Exception):
    """Root of kassette's errors; carries the run and, where it applies, the step and offset."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.step_id = step_id
        self.offset = offset

    def _render_traceback_(self) -> list[str]:
        """What IPython and Jupyter show for it: the error and what to do, in a few lines;
        `%xmode Plain`, then `%tb`, shows the full traceback (see kassette._tracebacks)."""
        from kassette._tracebacks import short_traceback

        return short_traceback(self)


class FencedError(KassetteError):
    """A newer session has written to the run, so this (older) session may not append."""


class RunLockedError(KassetteError):
    """Another live process holds the run's lock. Transient: redeliver later."""


class TerminalRunError(KassetteError):
    """The run has already completed, failed or been canceled."""


class RunCancelledError(TerminalRunError):
    """The run was canceled (before this call, or by another process while it ran)."""


class EventNotPendingError(KassetteError):
    """`resume` named an event the run is neither waiting for nor has received."""


class EventNameCollisionError(KassetteError):
    """A bare event name matches several pending suspends; resume by event id instead."""


class RunNotFoundError(KassetteError, LookupError):
    """No journal exists for the run id."""


class RunExistsError(KassetteError):
    """A fork named a run id that already holds a run other than that same fork."""


class StorageNotFoundError(KassetteError, LookupError):
    """The storage named does not exist (a `file:` directory that is not there)."""


class StorageError(KassetteError):
    """The storage backend failed. Transient: the same call may succeed later."""


class ConflictError(StorageError):
    """A conditional append found the journal changed since it was read.

    Backends raise it; the core re-reads and either retries or raises `FencedError`, so users
    only see it from a backend they call directly.
    """


class InvalidArgumentError(KassetteError, ValueError):
    """Bad input detected before anything is written: a run id, step name, fork point, ..."""


class NotSerializableError(KassetteError, TypeError):
    """A value that must be journaled is not plain JSON (sets, bytes, objects, NaN, ...)."""


class ReplayError(KassetteError):
    """The journal and the caller disagree in a way no re-invocation can fix."""


class VersionMismatchError(ReplayError):
    """The workflow's `version` differs from the version the run was started with."""


class InputMismatchError(ReplayError):
    """`start` was given a different input than the run was started with."""


class ReplayMismatchError(ReplayError):
    """At a step id the journal records something other than what the code asks for."""


class JournalCorruptionError(ReplayError):
    """A line that is not the torn final line cannot be read, or offsets are not dense."""


class Suspended(BaseException):
    """Raised inside a workflow when it must wait for events; ends the invocation."""

    def __init__(self, events: tuple[str, ...], *, run_id: str | None = None) -> None:
        super().__init__(f"waiting for {', '.join(events)}")
        self.events = events
        self.run_id = run_id

    def __reduce__(self) -> "tuple[type[Suspended], tuple[tuple[str, ...]], dict[str, object]]":
        # the default rebuilds from `args` (the message), which is not what __init__ takes
        return type(self), (self.events,), self.__dict__


_RENAMED = {"CancelledError": "RunCancelledError", "MetadataMismatchError": "InputMismatchError"}


def __getattr__(name: str) -> type[KassetteError]:
    """The former names of renamed errors, for one release (docs/reference.md, decisions)."""
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(
            f"kassette.errors.{name} is deprecated; use {new} (the same class)",
            DeprecationWarning,
            stacklevel=2,
        )
        error: type[KassetteError] = globals()[new]
        return error
    raise AttributeError(f"module 'kassette.errors' has no attribute {name!r}")
