"""Koto's failures: each has a snake_case `code` and the exit code of its class.

Exit codes follow koto's contract: 0 success (a blocked gate is an answer, not an error),
1 transient, try again (another writer holds the session, a name collision, rewinding past
the start), 2 the caller's mistake (bad evidence, name, variable or flag; a finished session),
3 infrastructure or template (a template that does not compile or was tampered with, a
corrupt journal, storage failing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kassette.koto.template import TemplateError

__all__ = ["EXIT_CALLER", "EXIT_INFRASTRUCTURE", "EXIT_OK", "EXIT_RETRY", "KotoError"]

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
    "invalid_name": EXIT_CALLER,
    "invalid_variable": EXIT_CALLER,
    "invalid_key": EXIT_CALLER,
    "invalid_config": EXIT_CALLER,
    "usage": EXIT_CALLER,
    "template_error": EXIT_INFRASTRUCTURE,
    "persistence_error": EXIT_INFRASTRUCTURE,
    "context_missing": EXIT_INFRASTRUCTURE,
    "internal_error": EXIT_INFRASTRUCTURE,
}


class KotoError(Exception):
    """A failure the `koto` command reports as JSON; `details` lists `{field, reason}` items."""

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
        self.message = message
        self.details = details or []
        self.extra = extra or {}

    @classmethod
    def from_template(cls, exc: TemplateError) -> KotoError:
        """A template that does not compile, with its file, line and every problem."""
        return cls(
            "template_error",
            str(exc),
            extra={"file": exc.path, "line": exc.line, "errors": exc.lines()},
        )

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self.code]
