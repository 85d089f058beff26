"""Where sessions live: a journal per session, plus the session's files, local or in S3.

A session named NAME is the kassette run NAME. On the local backend (the default) everything
of a session sits in `$KOTO_HOME/sessions/NAME/`: its journal `NAME.jsonl` and lock
(`LocalStorage` on that directory), its compiled template `template-<sha256>.json` and its
context content `ctx/<sha256>`. With `session.backend = "s3"` the journal is the S3Storage
run NAME (`{prefix}/NAME/journal.jsonl`, appended by compare-and-swap) and the files sit next to
it (`{prefix}/NAME/template-<sha256>.json`, `{prefix}/NAME/ctx/<sha256>`), so a session started
on one machine continues on another. Files are content-addressed, so writing one never races.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kassette.errors import StorageError
from kassette.koto.config import Config
from kassette.koto.errors import KotoError
from kassette.storage import Storage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "NAME_PATTERN",
    "LocalSessions",
    "S3Sessions",
    "SessionStore",
    "open_store",
    "validate_name",
]

NAME_PATTERN = "^[a-zA-Z0-9][a-zA-Z0-9._-]*$"
_NAME = re.compile(NAME_PATTERN[1:-1])
_MAX_NAME = 200  # a kassette run id holds at most 200 characters


def validate_name(name: str) -> str:
    """A session name: koto's pattern, at most 200 characters (the run id it becomes)."""
    if not _NAME.fullmatch(name) or len(name) > _MAX_NAME:
        raise KotoError(
            "invalid_name",
            f"invalid session name {name!r}: it contains invalid characters or is too long "
            f"(use 1-{_MAX_NAME} of a-z A-Z 0-9 . _ -, starting with a letter or digit)",
            extra={"allowed_pattern": NAME_PATTERN},
        )
    return name


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


def session_dir(home: Path, name: str) -> Path:
    """The session's local directory: `{{SESSION_DIR}}`, whatever the backend."""
    return home / "sessions" / name


class LocalSessions:
    """Sessions in `$KOTO_HOME/sessions/`, one directory each."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def storage(self, name: str) -> Storage:
        from kassette.storage.local import LocalStorage

        return LocalStorage(session_dir(self.home, name))

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
            if _NAME.fullmatch(name) and (self.home / "sessions" / name / f"{name}.jsonl").exists()
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


class S3Sessions:
    """Sessions in an S3 bucket under a prefix, through one S3Storage."""

    def __init__(self, home: Path, bucket: str, prefix: str, client: S3Client) -> None:
        from kassette.storage.s3 import S3Storage

        self.home = home
        self._storage = S3Storage(bucket, prefix, client=client)
        self.bucket = self._storage.bucket
        self.prefix = self._storage.prefix
        self._client = client

    def _key(self, name: str, path: str) -> str:
        return f"{self.prefix}/{name}/{path}" if self.prefix else f"{name}/{path}"

    def storage(self, name: str) -> Storage:
        return self._storage

    def read_file(self, name: str, path: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self._key(name, path)
        try:
            return self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise _storage_error("read", self.bucket, key, exc) from exc
        except BotoCoreError as exc:
            raise _storage_error("read", self.bucket, key, exc) from exc

    def write_file(self, name: str, path: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self._key(name, path)
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise _storage_error("write", self.bucket, key, exc) from exc

    def locate(self, name: str, path: str) -> str:
        return f"s3://{self.bucket}/{self._key(name, path)}"

    def names(self) -> list[str]:
        try:
            return list(self._storage.list_runs())
        except StorageError as exc:
            raise KotoError("persistence_error", str(exc)) from exc

    def remove(self, name: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        base = self._key(name, "")
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base
            )
            for page in pages:
                keys: list[Any] = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if keys:
                    self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
        except (BotoCoreError, ClientError) as exc:
            raise _storage_error("remove", self.bucket, base, exc) from exc
        import shutil

        shutil.rmtree(session_dir(self.home, name), ignore_errors=True)


def _storage_error(action: str, bucket: str, key: str, exc: Exception) -> KotoError:
    return KotoError("persistence_error", f"cannot {action} s3://{bucket}/{key}: {exc}")


def open_store(home: Path, config: Config) -> SessionStore:
    """The session store the configuration asks for (local unless `session.backend = "s3"`)."""
    if config.get("session.backend") != "s3":
        return LocalSessions(home)
    bucket = config.get("session.s3.bucket")
    if not bucket:
        raise KotoError("invalid_config", "session.backend is s3 but session.s3.bucket is not set")
    try:
        client = _s3_client(config)
        return S3Sessions(home, bucket, config.get("session.s3.prefix") or "", client)
    except ImportError as exc:
        raise KotoError("persistence_error", str(exc)) from exc
    except ValueError as exc:  # a bad bucket name or prefix
        raise KotoError("invalid_config", str(exc)) from exc


def _s3_client(config: Config) -> S3Client:
    try:
        import boto3
    except ImportError as exc:
        raise ImportError(
            'the s3 session backend needs boto3, which is not installed: pip install "kassette[s3]"'
        ) from exc
    arguments: dict[str, Any] = {}
    if config.get("session.s3.endpoint"):
        arguments["endpoint_url"] = config.get("session.s3.endpoint")
    if config.get("session.s3.region"):
        arguments["region_name"] = config.get("session.s3.region")
    access_key = config.get("session.s3.access_key")
    secret_key = config.get("session.s3.secret_key")
    if access_key and secret_key and not os.environ.get("AWS_ACCESS_KEY_ID"):
        arguments["aws_access_key_id"] = access_key
        arguments["aws_secret_access_key"] = secret_key
    return boto3.client("s3", **arguments)
