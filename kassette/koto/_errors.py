"""Koto's failures: each has a snake_case `code` and the exit code of its class.

`KotoError` is a `kassette.errors.KassetteError`, so one `except KassetteError` catches koto's
failures too. Exit codes follow koto's contract: 0 success (a blocked gate is an answer, not an
error), 1 transient, try again (another writer holds the session, a name collision, rewinding
past the start), 2 the caller's mistake (bad evidence, name, variable or flag; a finished
session; a tick from outside the session's directory or from inside one of its own gates),
3 infrastructure or template (a template that does not compile or was tampered with, a corrupt
journal, storage failing, an output that cannot be written, a session directory that no longer
exists).

`from_kassette` is the one place a failure from the layers below (a kassette error, an
OSError) becomes a koto error.
"""

from __future__ import annotations

from typing import Any

from kassette.errors import (
    FencedError,
    JournalCorruptionError,
    KassetteError,
    RunCancelledError,
    RunLockedError,
    StorageError,
    TerminalRunError,
)

__all__ = [
    "EXIT_CALLER",
    "EXIT_INFRASTRUCTURE",
    "EXIT_OK",
    "EXIT_RETRY",
    "KotoError",
    "from_kassette",
]

EXIT_OK = 0
EXIT_RETRY = 1
EXIT_CALLER = 2
EXIT_INFRASTRUCTURE = 3

_EXIT_CODES = {
    "concurrent_access": EXIT_RETRY,
    "already_exists": EXIT_RETRY,
    "at_initial_state": EXIT_RETRY,
    "not_set": EXIT_RETRY,
    "invalid_submission": EXIT_CALLER,
    "precondition_failed": EXIT_CALLER,
    "terminal_state": EXIT_CALLER,
    "workflow_not_initialized": EXIT_CALLER,
    "execution_anchor_mismatch": EXIT_CALLER,
    "nested_invocation": EXIT_CALLER,
    "invalid_name": EXIT_CALLER,
    "invalid_variable": EXIT_CALLER,
    "invalid_key": EXIT_CALLER,
    "invalid_config": EXIT_CALLER,
    "usage": EXIT_CALLER,
    "template_error": EXIT_INFRASTRUCTURE,
    "persistence_error": EXIT_INFRASTRUCTURE,
    "output_error": EXIT_INFRASTRUCTURE,
    "execution_anchor_unresolvable": EXIT_INFRASTRUCTURE,
    "context_missing": EXIT_INFRASTRUCTURE,
    "internal_error": EXIT_INFRASTRUCTURE,
}


class KotoError(KassetteError):
    """A failure the `koto` command reports as JSON; `details` lists `{field, reason}` items
    and `extra` holds further keys of the JSON error (a template error's file and line)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: list[dict[str, str]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or []
        self.extra = extra or {}

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self.code]


def from_kassette(exc: BaseException, name: str | None = None) -> KotoError:
    """The koto error for a failure underneath koto; a KotoError is returned as it is.

    `name` is the session the failure concerns, if one does."""
    if isinstance(exc, KotoError):
        return exc
    session = f"session {name!r}" if name is not None else "the session store"
    if isinstance(exc, RunCancelledError):
        return KotoError("terminal_state", f"{session} was cancelled")
    if isinstance(exc, TerminalRunError):
        return KotoError("terminal_state", f"{session} has ended")
    if isinstance(exc, FencedError | RunLockedError):
        return KotoError(
            "concurrent_access", f"another koto command wrote to {session}: {exc}; retry"
        )
    if isinstance(exc, JournalCorruptionError):
        return KotoError("persistence_error", f"corrupt session journal: {exc}")
    if isinstance(exc, StorageError | OSError):
        return KotoError("persistence_error", f"storage failed: {exc}")
    return KotoError("persistence_error", str(exc))
