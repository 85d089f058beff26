"""Storages travel to other processes (a process pool, a Dask worker) by pickling.

A `LocalStorage` pickles as its path, an `S3Storage` as its bucket, prefix, endpoint, region
and client settings (its client is rebuilt where it is unpickled, with that environment's
credentials); a `MemoryStorage` refuses, since a copy would take writes that never come back.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage, MemoryStorage
from kassette.core import open_run, read_journal
from kassette.storage._s3 import S3Storage

READ_IN_CHILD = """
import pickle, sys
from kassette.core import open_run
storage = pickle.loads(sys.stdin.buffer.read())
with open_run(storage, "r1") as run:
    run.record("child", lambda: "from the child")
print(type(storage).__name__, storage.read("r1") is not None)
"""


def _in_child(storage: Any, environment: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", READ_IN_CHILD],
        input=pickle.dumps(storage),
        capture_output=True,
        timeout=120,
        check=True,
        env=environment,
    )
    return done.stdout.decode().strip()


def test_local_storage_pickles_as_its_path_even_while_it_holds_a_run(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "journals")
    with open_run(storage, "r1", input={"x": 1}) as run:
        run.record("parent", lambda: "from the parent")
        copy = pickle.loads(pickle.dumps(storage))  # an open journal and a lock are held here
        assert copy.path == storage.path and copy._open == {}
    assert _in_child(storage) == "LocalStorage True"
    steps = [e.get("stepId") for e in read_journal(storage, "r1").entries if e["type"] == "step"]
    assert steps == ["parent", "child"]


def test_s3_storage_pickles_without_its_client_and_rebuilds_one(
    s3_client: Any, bucket: str, s3_environment: dict[str, str]
) -> None:
    storage = S3Storage(bucket, "team/a", s3_client)
    with open_run(storage, "r1", input=None) as run:
        run.record("parent", lambda: 1)
    data = pickle.dumps(storage)
    assert b"testing" not in data  # no credentials travel
    copy = pickle.loads(data)
    assert (copy.bucket, copy.prefix) == (bucket, "team/a")
    assert copy._client is not s3_client
    assert copy._client.meta.endpoint_url == s3_client.meta.endpoint_url
    assert copy.read("r1") == storage.read("r1")
    environment = {**os.environ, **s3_environment}
    environment.pop("AWS_ENDPOINT_URL")  # the endpoint travels in the pickle, not the env
    assert _in_child(storage, environment) == "S3Storage True"
    steps = [e.get("stepId") for e in read_journal(storage, "r1").entries if e["type"] == "step"]
    assert steps == ["parent", "child"]


def test_memory_storage_refuses_to_pickle_with_a_hint() -> None:
    with pytest.raises(TypeError, match="LocalStorage on a shared filesystem or S3Storage"):
        pickle.dumps(MemoryStorage())
