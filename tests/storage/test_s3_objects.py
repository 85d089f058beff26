"""S3Storage's objects beside the journals (read_object, write_object, object_url, delete_run)
against the moto server of conftest.py through real boto3 clients: layout under the run's
prefix, coexistence with the journal, deletion scoped to one run, names refused before any
request, and every failure translated into a kassette error at the one boundary.

These are S3Storage extras: the `Storage` protocol keeps its four methods.
"""

from __future__ import annotations

import json
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from s3_proxy import Fault, FaultProxy
from s3_server import make_client

from kassette import InvalidArgumentError, MemoryStorage, StorageError, kassette
from kassette._journal import encode
from kassette.storage import Storage
from kassette.storage._s3 import S3Storage

START = encode({"type": "start", "session": 1, "offset": 0})


def object_keys(client: Any, bucket: str) -> list[str]:
    return sorted(item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", []))


def pipeline(ctx: Any, input: Any) -> str:
    return str(ctx.step("only", lambda: "done"))


def test_the_storage_protocol_keeps_its_four_methods() -> None:
    members = {name for name in vars(Storage) if not name.startswith("_")}
    assert members == {"read", "append", "list_runs", "lock"}
    assert not hasattr(MemoryStorage(), "read_object")


@pytest.mark.parametrize(("prefix", "base"), [("team/a", "team/a/r1/"), ("", "r1/")])
def test_objects_round_trip_under_the_runs_prefix(
    prefix: str, base: str, s3_client: Any, bucket: str
) -> None:
    storage = S3Storage(bucket, prefix, client=s3_client)
    assert storage.read_object("r1", "template-abc.json") is None
    storage.write_object("r1", "template-abc.json", b'{"v": 1}')
    storage.write_object("r1", "ctx/0123", b"\x00binary\xff")
    assert storage.read_object("r1", "template-abc.json") == b'{"v": 1}'
    assert storage.read_object("r1", "ctx/0123") == b"\x00binary\xff"
    assert storage.read_object("r2", "ctx/0123") is None
    storage.write_object("r1", "ctx/0123", b"replaced")
    assert storage.read_object("r1", "ctx/0123") == b"replaced"
    assert object_keys(s3_client, bucket) == [f"{base}ctx/0123", f"{base}template-abc.json"]
    assert storage.object_url("r1", "ctx/0123") == f"s3://{bucket}/{base}ctx/0123"
    stored = s3_client.get_object(Bucket=bucket, Key=f"{base}template-abc.json")
    assert stored["Body"].read() == b'{"v": 1}'
    assert list(storage.list_runs()) == []  # objects without a journal are no run


def test_objects_beside_a_journal_leave_the_run_alone(s3_client: Any, bucket: str) -> None:
    storage = S3Storage(bucket, "runs", client=s3_client)
    workflow = kassette(pipeline, storage=storage)
    assert workflow.start(run_id="r1").result == "done"
    before = storage.read("r1")
    storage.write_object("r1", "notes/one.md", b"one")
    after = storage.read("r1")
    assert before is not None and after is not None and after == before
    assert list(storage.list_runs()) == ["r1"]
    token = storage.append("r2", START, token=None)
    storage.write_object("r2", "ctx/x", b"x")
    storage.append("r2", b'{"x": 1}\n', token=token)  # the token still holds: one PUT away
    snapshot = storage.read("r2")
    assert snapshot is not None and snapshot.data == START + b'{"x": 1}\n'
    assert list(storage.list_runs()) == ["r1", "r2"]


def test_delete_run_removes_the_journal_and_everything_beside_it_and_nothing_else(
    s3_client: Any, bucket: str
) -> None:
    storage = S3Storage(bucket, "team/a", client=s3_client)
    for run_id in ["r1", "r10"]:  # r10 shares r1's first characters, not its prefix
        storage.append(run_id, START, token=None)
        storage.write_object(run_id, "template-x.json", b"t")
        storage.write_object(run_id, "ctx/deep/er", b"c")
    S3Storage(bucket, "team/b", client=s3_client).write_object("r1", "ctx/kept", b"k")
    s3_client.put_object(Bucket=bucket, Key="team/a/r1", Body=b"not under r1/")

    storage.delete_run("r1")
    assert object_keys(s3_client, bucket) == [
        "team/a/r1",
        "team/a/r10/ctx/deep/er",
        "team/a/r10/journal.jsonl",
        "team/a/r10/template-x.json",
        "team/b/r1/ctx/kept",
    ]
    assert storage.read("r1") is None and storage.read_object("r1", "ctx/deep/er") is None
    assert list(storage.list_runs()) == ["r10"]
    storage.delete_run("r1")  # idempotent
    storage.delete_run("never-was")

    token = storage.append("r1", START, token=None)  # the name is free again
    storage.append("r1", b'{"again": 1}\n', token=token)
    snapshot = storage.read("r1")
    assert snapshot is not None and snapshot.data == START + b'{"again": 1}\n'


def test_delete_run_pages_through_more_than_one_listing(
    s3_client: Any, bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    names = [f"ctx/{number:04d}" for number in range(1005)]  # S3 lists and deletes 1000 a call
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda name: s3_client.put_object(Bucket=bucket, Key=f"p/r1/{name}", Body=b"x"),
                names,
            )
        )
    S3Storage(bucket, "p", client=proxied_client).delete_run("r1")
    assert object_keys(s3_client, bucket) == []
    deletes = [e for e in fault_proxy.exchanges if e.method == "POST" and "delete" in e.path]
    assert len(deletes) == 2


def test_a_key_delete_objects_refuses_is_a_storage_error_naming_it(
    s3_client: Any, bucket: str
) -> None:
    """DeleteObjects answers 200 and lists refused keys; a refused key must not pass silently."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:DeleteObject",
                "Resource": f"arn:aws:s3:::{bucket}/runs/r1/ctx/protected",
            }
        ],
    }
    s3_client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    storage = S3Storage(bucket, "runs", client=s3_client)
    storage.append("r1", START, token=None)
    storage.write_object("r1", "ctx/protected", b"p")
    with pytest.raises(StorageError) as caught:
        storage.delete_run("r1")
    assert type(caught.value) is StorageError and caught.value.run_id == "r1"
    message = str(caught.value)
    assert message.startswith(f"cannot delete s3://{bucket}/runs/r1/ctx/protected: ")
    assert "credentials were refused (AccessDenied" in message
    assert object_keys(s3_client, bucket) == ["runs/r1/ctx/protected"]


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/absolute",
        "trailing/",
        "a//b",
        ".",
        "..",
        "../r2/journal.jsonl",
        "ctx/../../escape",
        "a/./b",
        "back\\slash",
        "new\nline",
        "journal.jsonl",
        "x" * 1100,
        7,
    ],
)
def test_an_object_name_that_could_escape_or_alias_is_refused_before_any_request(
    name: Any, bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    storage = S3Storage(bucket, "runs", client=proxied_client)
    for call in (
        lambda: storage.read_object("r1", name),
        lambda: storage.write_object("r1", name, b"x"),
        lambda: storage.object_url("r1", name),
    ):
        with pytest.raises(InvalidArgumentError, match="invalid object name"):
            call()
    assert fault_proxy.exchanges == []


@pytest.mark.parametrize("run_id", ["", "..", "a/b", "../r1", "-dash"])
def test_an_invalid_run_id_is_refused_before_any_request(
    run_id: str, bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    storage = S3Storage(bucket, "runs", client=proxied_client)
    for call in (
        lambda: storage.read_object(run_id, "ctx/a"),
        lambda: storage.write_object(run_id, "ctx/a", b"x"),
        lambda: storage.object_url(run_id, "ctx/a"),
        lambda: storage.delete_run(run_id),
    ):
        with pytest.raises(InvalidArgumentError):
            call()
    assert fault_proxy.exchanges == []


# -- translation at the backend boundary -----------------------------------------------------

OPERATIONS = {
    "read_object": (lambda s: s.read_object("r1", "ctx/a"), "read", "r1/ctx/a"),
    "write_object": (lambda s: s.write_object("r1", "ctx/a", b"x"), "write", "r1/ctx/a"),
    "delete_run": (lambda s: s.delete_run("r1"), "delete", "r1/"),
}


@pytest.mark.parametrize(
    ("operation", "fault", "detail"),
    [
        ("read_object", Fault("error", method="GET", status=503, code="SlowDown"), "SlowDown 503"),
        ("read_object", Fault("error", method="GET", status=403), "credentials were refused"),
        ("write_object", Fault("error", status=500, code="InternalError"), "InternalError 500"),
        ("write_object", Fault("drop"), "Connection was closed"),
        ("delete_run", Fault("error", method="GET", status=503, code="SlowDown"), "SlowDown 503"),
        (
            "delete_run",
            Fault("error", method="POST", path_contains="delete", status=403, code="AccessDenied"),
            "credentials were refused",
        ),
    ],
)
def test_each_failed_request_becomes_one_storage_error(
    operation: str,
    fault: Fault,
    detail: str,
    bucket: str,
    s3_client: Any,
    fault_proxy: FaultProxy,
    proxied_client: Any,
) -> None:
    call, action, key = OPERATIONS[operation]
    S3Storage(bucket, client=s3_client).write_object("r1", "ctx/a", b"there")
    storage = S3Storage(bucket, client=proxied_client)
    fault_proxy.inject(fault)
    with pytest.raises(StorageError) as caught:
        call(storage)
    assert type(caught.value) is StorageError and caught.value.run_id == "r1"
    assert str(caught.value).startswith(f"cannot {action} s3://{bucket}/{key}: ")
    assert detail in str(caught.value)
    assert fault.fired == 1
    assert isinstance(caught.value.__cause__, Exception)
    assert type(caught.value.__cause__).__module__.startswith("botocore")


def test_an_unreachable_endpoint_is_a_storage_error_for_every_object_method(
    bucket: str,
) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(f"http://127.0.0.1:{port}")
    storage = S3Storage(bucket, "runs", client=client)
    for call, action, key in OPERATIONS.values():
        with pytest.raises(StorageError, match=f"cannot {action} s3://{bucket}/runs/{key}: "):
            call(storage)
    client.close()


def test_a_missing_bucket_is_a_clear_storage_error_for_every_object_method(
    s3_client: Any,
) -> None:
    missing = f"kassette-missing-{uuid.uuid4().hex[:12]}"
    storage = S3Storage(missing, client=s3_client)
    for call, _, _ in OPERATIONS.values():
        with pytest.raises(StorageError, match=f"bucket '{missing}' does not exist"):
            call(storage)
    buckets = [b["Name"] for b in s3_client.list_buckets().get("Buckets", [])]
    assert missing not in buckets
