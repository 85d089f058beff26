"""Where sessions live: a journal per session, plus the session's files, local or in S3.

A session named NAME is the kassette run NAME. On the local backend (the default) everything
of a session sits in `$KOTO_HOME/sessions/NAME/`: its journal `NAME.jsonl` and lock (the
`file:` storage on that directory), its compiled template `template-<sha256>.json` and its
context content `ctx/<sha256>`. With `session.backend = "s3"` sessions live in a bucket
(`kassette.koto.s3store`). Files are content-addressed, so writing one never races.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Protocol

from kassette.koto.config import Config
from kassette.koto.errors import KotoError
from kassette.koto.names import NAME, session_dir
from kassette.storage import Storage, open_storage

__all__ = ["LocalSessions", "SessionStore", "open_store"]


class SessionStore(Protocol):
    """Journals and files of sessions, on one backend."""

    home: Path

    def storage(self, name: str) -> Storage:
        """The kassette storage holding the journal of run `name`."""
        ...

    def read_file(self, name: str, path: str) -> bytes | None: ...

    def write_file(self, name: str, path: str, data: bytes) -> None: ...

    def locate(self, name: str, path: str) -> str:
        """Where a session file is, as a path or URL, for people to read."""
        ...

    def names(self) -> list[str]: ...

    def remove(self, name: str) -> None:
        """Delete everything of the session (idempotent)."""
        ...


class LocalSessions:
    """Sessions in `$KOTO_HOME/sessions/`, one directory each."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def storage(self, name: str) -> Storage:
        return open_storage(f"file:{session_dir(self.home, name)}")

    def read_file(self, name: str, path: str) -> bytes | None:
        try:
            return (session_dir(self.home, name) / path).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KotoError("persistence_error", f"cannot read {path} of {name}: {exc}") from exc

    def write_file(self, name: str, path: str, data: bytes) -> None:
        target = session_dir(self.home, name) / path
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise KotoError("persistence_error", f"cannot write {path} of {name}: {exc}") from exc

    def locate(self, name: str, path: str) -> str:
        return str(session_dir(self.home, name) / path)

    def names(self) -> list[str]:
        try:
            entries = sorted(os.listdir(self.home / "sessions"))
        except FileNotFoundError:
            return []
        return [
            name
            for name in entries
            if NAME.fullmatch(name) and (self.home / "sessions" / name / f"{name}.jsonl").exists()
        ]

    def remove(self, name: str) -> None:
        import shutil

        directory = session_dir(self.home, name)
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KotoError("persistence_error", f"cannot remove {directory}: {exc}") from exc


def open_store(home: Path, config: Config) -> SessionStore:
    """The session store the configuration asks for (local unless `session.backend = "s3"`)."""
    if config.get("session.backend") != "s3":
        return LocalSessions(home)
    bucket = config.get("session.s3.bucket")
    if not bucket:
        raise KotoError("invalid_config", "session.backend is s3 but session.s3.bucket is not set")
    from kassette.koto.s3store import open_s3_sessions

    try:
        return open_s3_sessions(home, config, bucket)
    except ImportError as exc:
        raise KotoError("persistence_error", str(exc)) from exc
    except ValueError as exc:  # a bad bucket name or prefix
        raise KotoError("invalid_config", str(exc)) from exc
