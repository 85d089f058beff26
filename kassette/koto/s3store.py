"""Sessions in S3: each session's journal and files under one prefix, through kassette's S3Storage.

The journal is the S3Storage run NAME (`{prefix}/NAME/journal.jsonl`, appended by
compare-and-swap); the session's files sit next to it (`{prefix}/NAME/template-<sha256>.json`,
`{prefix}/NAME/ctx/<sha256>`), so a session started on one machine continues on another. The
files go through the same S3Storage, whose one boundary turns every botocore error into a
kassette `StorageError` (a missing object into `RunNotFoundError`); nothing here handles
botocore. boto3 is imported only when the store is opened.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kassette.errors import RunNotFoundError
from kassette.koto.config import Config
from kassette.koto.names import session_dir
from kassette.storage import Storage
from kassette.storage.s3 import S3Storage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["S3Sessions", "open_s3_sessions"]


class _SessionObjects(S3Storage):
    """An S3Storage that also reads, writes and deletes the objects beside each journal."""

    def object_key(self, name: str, path: str) -> str:
        return f"{self.prefix}/{name}/{path}" if self.prefix else f"{name}/{path}"

    def read_object(self, name: str, path: str) -> bytes | None:
        key = self.object_key(name, path)
        try:
            with self._boundary("read", name, key):
                data: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except RunNotFoundError:  # NoSuchKey
            return None
        return data

    def write_object(self, name: str, path: str, data: bytes) -> None:
        key = self.object_key(name, path)
        with self._boundary("write", name, key):
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete_run(self, name: str) -> None:
        """Delete the journal and every object beside it (idempotent)."""
        base = self.object_key(name, "")
        with self._boundary("remove", name, base):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base
            )
            for page in pages:
                keys: list[Any] = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if keys:
                    self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})


class S3Sessions:
    """Sessions in an S3 bucket under a prefix (a `SessionStore`)."""

    def __init__(self, home: Path, bucket: str, prefix: str, client: S3Client) -> None:
        self.home = home
        self._objects = _SessionObjects(bucket, prefix, client=client)

    def storage(self, name: str) -> Storage:
        return self._objects

    def read_file(self, name: str, path: str) -> bytes | None:
        return self._objects.read_object(name, path)

    def write_file(self, name: str, path: str, data: bytes) -> None:
        self._objects.write_object(name, path, data)

    def locate(self, name: str, path: str) -> str:
        return f"s3://{self._objects.bucket}/{self._objects.object_key(name, path)}"

    def names(self) -> list[str]:
        return list(self._objects.list_runs())

    def remove(self, name: str) -> None:
        self._objects.delete_run(name)
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
