"""Sessions in S3: each session's journal and files under one prefix, through kassette's S3Storage.

The journal is the S3Storage run NAME (`{prefix}/NAME/journal.jsonl`, appended by
compare-and-swap); the session's files are objects beside it
(`{prefix}/NAME/template-<sha256>.json`, `{prefix}/NAME/ctx/<sha256>`), so a session started
on one machine continues on another. Both go through one S3Storage and its object methods
(`read_object`, `write_object`, `object_url`, `delete_run`), whose boundary turns every
botocore error into a kassette `StorageError`; nothing here handles botocore. boto3 is
imported only when the store is opened.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kassette.koto.config import Config
from kassette.koto.names import session_dir
from kassette.storage import Storage
from kassette.storage.s3 import S3Storage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["S3Sessions", "open_s3_sessions"]


class S3Sessions:
    """Sessions in an S3 bucket under a prefix (a `SessionStore`)."""

    def __init__(self, home: Path, bucket: str, prefix: str, client: S3Client) -> None:
        self.home = home
        self._storage = S3Storage(bucket, prefix, client=client)

    def storage(self, name: str) -> Storage:
        return self._storage

    def read_file(self, name: str, path: str) -> bytes | None:
        return self._storage.read_object(name, path)

    def write_file(self, name: str, path: str, data: bytes) -> None:
        self._storage.write_object(name, path, data)

    def locate(self, name: str, path: str) -> str:
        return self._storage.object_url(name, path)

    def names(self) -> list[str]:
        return list(self._storage.list_runs())

    def remove(self, name: str) -> None:
        self._storage.delete_run(name)
        shutil.rmtree(session_dir(self.home, name), ignore_errors=True)


def open_s3_sessions(home: Path, config: Config, bucket: str) -> S3Sessions:
    """The S3 store the configuration describes; ImportError without boto3, ValueError for a
    bad bucket or prefix."""
    return S3Sessions(home, bucket, config.get("session.s3.prefix") or "", _client(config))


def _client(config: Config) -> S3Client:
    import os

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
