"""Names koto accepts: session names and context keys, and where a session's local files go.

A session name becomes a kassette run id (`koto-NAME.state`), so it follows koto's pattern
and fits the run-id limit. A context key is a relative `/`-separated path. Both are checked
here, and only here, before anything touches a backend.
"""

from __future__ import annotations

import re
from pathlib import Path

from kassette.koto._errors import KotoError

__all__ = ["MAX_KEY_LENGTH", "NAME_PATTERN", "session_dir", "validate_key", "validate_name"]

NAME_PATTERN = "^[a-zA-Z0-9][a-zA-Z0-9._-]*$"
NAME = re.compile(NAME_PATTERN[1:-1])
_MAX_NAME = 200 - len("koto-.state")  # the run id `koto-NAME.state` holds at most 200
MAX_KEY_LENGTH = 255


def validate_name(name: str) -> str:
    """A session name: koto's pattern, at most 200 characters (the run id it becomes)."""
    if not NAME.fullmatch(name) or len(name) > _MAX_NAME:
        raise KotoError(
            "invalid_name",
            f"invalid session name {name!r}: it contains invalid characters or is too long "
            f"(use 1-{_MAX_NAME} of a-z A-Z 0-9 . _ -, starting with a letter or digit)",
            extra={"allowed_pattern": NAME_PATTERN},
        )
    return name


def validate_key(key: str) -> str:
    """A context key: relative, `/`-separated, no empty, `.` or `..` parts (`invalid_key`)."""
    problem = None
    if not key or len(key) > MAX_KEY_LENGTH:
        problem = f"keys have 1-{MAX_KEY_LENGTH} characters"
    elif key.startswith("/"):
        problem = "keys are relative, not absolute paths"
    elif "\\" in key or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        problem = "keys may not contain '\\' or control characters"
    elif any(part in ("", ".", "..") for part in key.split("/")):
        problem = "key parts may not be empty, '.' or '..'"
    if problem:
        raise KotoError("invalid_key", f"invalid context key {key!r}: {problem}")
    return key


def session_dir(home: Path, name: str) -> Path:
    """The session's local directory: `{{SESSION_DIR}}`, whatever the backend."""
    return home / "sessions" / name
