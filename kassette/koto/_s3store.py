"""The S3 session backend's storage: one `S3Storage` for every session's journal and files.

The journal of session NAME is the S3Storage run NAME (`{prefix}/NAME/journal.jsonl`, appended
by compare-and-swap); its files are objects beside it (`{prefix}/NAME/template-<sha256>.json`,
`{prefix}/NAME/ctx/<sha256>`), so a session started on one machine continues on another.
S3Storage's boundary turns every botocore error into a kassette `StorageError`; nothing here
handles botocore. boto3 is imported only when this backend is configured.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kassette._extras import requires
from kassette.koto._config import Config
from kassette.storage import S3Storage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["open_s3_storage"]


def open_s3_storage(config: Config, bucket: str) -> S3Storage:
    """The S3 storage the configuration describes; ImportError without boto3, a kassette
    `InvalidArgumentError` for a bad bucket or prefix."""
    return S3Storage(bucket, config.get("session.s3.prefix") or "", client=_client(config))


def _client(config: Config) -> S3Client:
    with requires("the s3 session backend"):
        import boto3
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
