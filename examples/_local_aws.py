"""A local AWS for the examples: moto's server on 127.0.0.1 answers S3 and SQS, offline.

`start()` starts it on a free port and points boto3 at it through the environment (here and in
every child process): `AWS_ENDPOINT_URL` and dummy credentials. Against real AWS, leave this
out and let boto3 find your endpoint and credentials as usual.
"""

from __future__ import annotations

import logging
import os


def start():
    """Start moto's server on a free loopback port; return it (call `.stop()` at the end)."""
    from moto.server import ThreadedMotoServer  # pip install "moto[server]"

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SQS"):
        os.environ.pop(name, None)
    return server
