"""A real S3-protocol server for tests and benchmarks: moto's server mode on 127.0.0.1.

moto's server is not safe for concurrent requests on one object (see
docs/object-storage-design.md): it checks `If-Match`/`If-None-Match` and then writes without
holding a lock, so two racing conditional PUTs can both succeed, and a PUT closes the replaced
object's buffer while a concurrent GET may still be reading it (a 500). S3 does neither.
`start_server` therefore has moto answer one request at a time, which gives it the atomic
compare-and-swap and the consistent reads every conforming store provides; kassette's code is
unchanged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer
    from mypy_boto3_s3 import S3Client

REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


class _OneRequestAtATime:
    """WSGI middleware: moto handles one request at a time; connections stay concurrent."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.mutex = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with self.mutex:
            return list(self.app(environ, start_response))


def start_server() -> tuple[ThreadedMotoServer, str]:
    """A started moto server on a free loopback port, and its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    wsgi = server._server  # the werkzeug server moto started
    assert wsgi is not None
    wsgi.app = _OneRequestAtATime(wsgi.app)
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def make_client(
    endpoint: str,
    *,
    read_timeout: float = 30,
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
) -> S3Client:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=5,
            read_timeout=read_timeout,
        ),
    )
