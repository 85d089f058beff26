"""A moto S3 server on 127.0.0.1 and a boto3 client for it, for the S3 benchmarks (the `dev`
extra): one attempt per request, so what is measured is kassette's requests, not retries."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

BUCKET = "kassette-bench"


@contextmanager
def moto_client(max_pool_connections: int) -> Iterator[Any]:
    """A boto3 S3 client of a fresh moto server holding the empty bucket `BUCKET`."""
    import boto3
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"total_max_attempts": 1}, max_pool_connections=max_pool_connections),
    )
    try:
        client.create_bucket(Bucket=BUCKET)
        yield client
    finally:
        client.close()
        server.stop()
