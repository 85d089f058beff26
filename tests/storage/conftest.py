"""Fixtures for the storage tests: a `LocalStorage` in the test's own folder, and for the S3
backend a real S3-protocol server (moto, see s3_server.py).

One server serves the whole session; every test gets its own bucket. Clients are real boto3
clients with dummy credentials, one attempt (so faults reach kassette instead of botocore's
retries) and short timeouts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from s3_proxy import FaultProxy
from s3_server import ACCESS_KEY, REGION, SECRET_KEY, make_client, start_server

from kassette import LocalStorage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where the test's `LocalStorage` keeps its journals (not created in advance)."""
    return tmp_path / "journals"


@pytest.fixture
def storage(root: Path) -> LocalStorage:
    return LocalStorage(root)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The endpoint URL of a moto server on a free loopback port."""
    server, endpoint = start_server()
    yield endpoint
    server.stop()


@pytest.fixture
def s3_client(s3_endpoint: str) -> Iterator[S3Client]:
    client = make_client(s3_endpoint)
    yield client
    client.close()


@pytest.fixture
def bucket(s3_client: S3Client) -> str:
    """A new, empty bucket for this test."""
    name = f"kassette-test-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def fault_proxy(s3_endpoint: str) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the moto server."""
    parts = urlsplit(s3_endpoint)
    assert parts.hostname is not None and parts.port is not None
    proxy = FaultProxy((parts.hostname, parts.port)).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def proxied_client(fault_proxy: FaultProxy) -> Iterator[S3Client]:
    """A client whose requests pass through `fault_proxy`; it gives up on a reply after 20s
    (moto lists a thousand keys in seconds on a loaded machine)."""
    client = make_client(fault_proxy.url, read_timeout=20)
    yield client
    client.close()


@pytest.fixture
def s3_environment(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """boto3's environment pointing at the moto server, here and for child processes."""
    environment = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/nonexistent/kassette-test-aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/kassette-test-aws-credentials",
    }
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return environment
