"""S3Storage against a real S3-protocol server (moto's server mode, see conftest.py) through
real boto3 clients: the conformance suite, runs moving between processes, fencing across
processes, faults injected between boto3 and the server, and bad input."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_proxy import Fault, FaultProxy
from s3_server import make_client
from s3_workflows import EXPECTED, assert_sound, counted_pipeline, object_keys, pipeline

from kassette import (
    FencedError,
    InvalidArgumentError,
    JournalCorruptionError,
    KassetteError,
    StorageError,
    TerminalRunError,
    kassette,
    open_storage,
)
from kassette._journal import Journal, encode
from kassette.core import open_run, read_journal, run_status
from kassette.errors import ConflictError
from kassette.storage._s3 import S3Storage
from kassette.testing import StorageConformance

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "procs" / "s3_worker.py"
TIMEOUT = 120


class TestS3Storage(StorageConformance):
    exclusive_locks = False

    @pytest.fixture
    def storage(self, bucket: str, s3_client: Any) -> S3Storage:
        return S3Storage(bucket, "conformance/runs", client=s3_client)


class TestS3StorageWithoutPrefix(StorageConformance):
    exclusive_locks = False

    @pytest.fixture
    def storage(self, bucket: str, s3_client: Any) -> S3Storage:
        return S3Storage(bucket, client=s3_client)


# -- helpers ---------------------------------------------------------------------------------


def run_worker(environment: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(WORKER), *args],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def reset_auth(endpoint: str, count: str) -> None:
    """moto's switch for checking signatures and IAM policies on every request (0) or not (inf)."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=count.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


@pytest.fixture
def authenticating_server(s3_endpoint: str, bucket: str) -> Iterator[str]:
    """The server checks credentials for the rest of the test (`bucket` exists before)."""
    reset_auth(s3_endpoint, "0")
    try:
        yield s3_endpoint
    finally:
        reset_auth(s3_endpoint, "inf")


# -- the server does what kassette relies on -------------------------------------------------


def test_harness_check_the_test_server_honours_conditional_puts(
    s3_client: Any, bucket: str
) -> None:
    """A check of the test harness (moto behind tests/storage/s3_server.py), not of kassette:
    every S3 test relies on the server refusing a stale `If-Match` and a second
    `If-None-Match: *`, so this states it once. It is also the probe to run against a store."""
    from botocore.exceptions import ClientError

    def code(call: Any) -> tuple[str, int]:
        with pytest.raises(ClientError) as caught:
            call()
        response = caught.value.response
        return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]

    first = s3_client.put_object(Bucket=bucket, Key="k", Body=b"a\n", IfNoneMatch="*")["ETag"]
    assert code(
        lambda: s3_client.put_object(Bucket=bucket, Key="k", Body=b"b\n", IfNoneMatch="*")
    ) == ("PreconditionFailed", 412)
    second = s3_client.put_object(Bucket=bucket, Key="k", Body=b"a\nb\n", IfMatch=first)["ETag"]
    assert code(
        lambda: s3_client.put_object(Bucket=bucket, Key="k", Body=b"a\nc\n", IfMatch=first)
    ) == ("PreconditionFailed", 412)
    assert code(
        lambda: s3_client.put_object(Bucket=bucket, Key="gone", Body=b"x", IfMatch=second)
    ) == ("NoSuchKey", 404)
    assert s3_client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"a\nb\n"
    assert object_keys(s3_client, bucket) == ["k"]


def race_conditional_puts(client: Any, bucket: str, key: str, etag: str) -> list[int]:
    """Four threads put `key` at once, each `If-Match: etag`; the numbers of those that won."""
    from botocore.exceptions import ClientError

    winners: list[int] = []
    barrier = threading.Barrier(4, timeout=30)

    def writer(number: int) -> None:
        barrier.wait()
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"%d" % number, IfMatch=etag)
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "PreconditionFailed"
            return
        winners.append(number)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    return winners


def test_server_lets_exactly_one_racing_conditional_put_win(s3_client: Any, bucket: str) -> None:
    """What the test server guarantees by serialising requests (moto alone does not, see
    s3_server.py)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible to widen any race
    try:
        for round_number in range(20):
            key = f"race-{round_number}"
            etag = s3_client.put_object(Bucket=bucket, Key=key, Body=b"base")["ETag"]
            winners = race_conditional_puts(s3_client, bucket, key, etag)
            assert len(winners) == 1
            body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert body == b"%d" % winners[0]
    finally:
        sys.setswitchinterval(interval)


# -- layout, tokens, listing -----------------------------------------------------------------


def test_one_object_per_run_under_the_prefix(s3_client: Any, bucket: str) -> None:
    storage = S3Storage(bucket, "team/a/", client=s3_client)
    assert storage.prefix == "team/a" and repr(storage) == f"S3Storage('s3://{bucket}/team/a')"
    result = kassette(pipeline, storage=storage).start({"n": 1}, run_id="r1")
    assert result.status == "success" and result.result == EXPECTED
    assert object_keys(s3_client, bucket) == ["team/a/r1/journal.jsonl"]
    body = s3_client.get_object(Bucket=bucket, Key="team/a/r1/journal.jsonl")["Body"].read()
    snapshot = storage.read("r1")
    assert snapshot is not None and snapshot.data == body
    types = [e["type"] for e in Journal.parse(body, "r1").entries]
    assert types == ["start", "step", "step", "step", "step", "step", "complete"]


def test_list_runs_takes_only_journals_directly_under_the_prefix(
    s3_client: Any, bucket: str
) -> None:
    storage = S3Storage(bucket, "team/a", client=s3_client)
    for run_id in ["r-2", "r.1", "r1"]:
        storage.append(run_id, encode({"type": "start", "session": 1, "offset": 0}), token=None)
    for key in [
        "team/a/notes.txt",
        "team/a/r9/other.json",
        "team/a/nested/x/journal.jsonl",
        "team/a/.hidden/journal.jsonl",
        "team/a-2/r3/journal.jsonl",
        "team/r4/journal.jsonl",
        "r5/journal.jsonl",
    ]:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"{}\n")
    assert list(storage.list_runs()) == ["r-2", "r.1", "r1"]
    assert list(S3Storage(bucket, client=s3_client).list_runs()) == ["r5"]


def test_list_runs_pages_through_more_than_one_listing(
    s3_client: Any, bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    run_ids = [f"run-{number:04d}" for number in range(1005)]  # S3 lists 1000 keys a page
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda run_id: s3_client.put_object(
                    Bucket=bucket, Key=f"p/{run_id}/journal.jsonl", Body=b"{}\n"
                ),
                run_ids,
            )
        )
    listed = list(S3Storage(bucket, "p", client=proxied_client).list_runs())
    assert listed == run_ids
    listings = [e for e in fault_proxy.exchanges if e.method == "GET" and "list-type=2" in e.path]
    assert len(listings) == 2


def test_appends_within_a_session_cost_one_put_each(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    storage = S3Storage(bucket, client=proxied_client)
    assert kassette(pipeline, storage=storage).start(run_id="r1").status == "success"
    methods = [e.method for e in fault_proxy.exchanges]
    assert methods.count("GET") == 1  # the session's first read
    assert methods.count("PUT") == 7  # start, five steps, complete


def test_a_stale_token_conflicts_and_a_fresh_read_recovers(s3_client: Any, bucket: str) -> None:
    line = encode({"type": "start", "session": 1, "offset": 0})
    first = S3Storage(bucket, client=s3_client)
    second = S3Storage(bucket, client=make_client(s3_client.meta.endpoint_url))
    token = first.append("r1", line, token=None)
    snapshot = second.read("r1")
    assert snapshot is not None and snapshot.token == token
    second.append("r1", b'{"b":1}\n', token=snapshot.token)
    with pytest.raises(ConflictError):
        first.append("r1", b'{"a":1}\n', token=token)  # first's cached body is stale
    fresh = first.read("r1")
    assert fresh is not None and fresh.data == line + b'{"b":1}\n'
    first.append("r1", b'{"a":1}\n', token=fresh.token)
    assert s3_client.get_object(Bucket=bucket, Key="r1/journal.jsonl")["Body"].read() == (
        line + b'{"b":1}\n{"a":1}\n'
    )


def test_an_append_replaces_a_torn_final_line(s3_client: Any, bucket: str) -> None:
    start = encode({"type": "start", "session": 1, "offset": 0})
    s3_client.put_object(Bucket=bucket, Key="r1/journal.jsonl", Body=start + b'{"type": "st')
    storage = S3Storage(bucket, client=s3_client)
    snapshot = storage.read("r1")
    assert snapshot is not None
    assert Journal.parse(snapshot.data, "r1").next_offset == 1
    storage.append("r1", b'{"x":1}\n', token=snapshot.token)
    body = s3_client.get_object(Bucket=bucket, Key="r1/journal.jsonl")["Body"].read()
    assert body == start + b'{"x":1}\n'


def test_open_storage_takes_the_endpoint_from_boto3s_environment(
    s3_environment: dict[str, str], s3_client: Any, bucket: str
) -> None:
    storage = open_storage(f"s3://{bucket}/some/prefix/")
    assert isinstance(storage, S3Storage)
    assert (storage.bucket, storage.prefix) == (bucket, "some/prefix")
    assert kassette(pipeline, storage=f"s3://{bucket}/some/prefix").start(run_id="r1").result == (
        EXPECTED
    )
    assert object_keys(s3_client, bucket) == ["some/prefix/r1/journal.jsonl"]
    assert list(open_storage(f"s3://{bucket}").list_runs()) == []


# -- across processes ------------------------------------------------------------------------


def test_a_run_started_in_one_process_is_resumed_in_another_and_forked_in_a_third(
    s3_environment: dict[str, str], bucket: str
) -> None:
    url = f"s3://{bucket}/runs"
    started = run_worker(s3_environment, url, "review-1", "start", "launch")
    assert started["status"] == "suspended"
    resumed = run_worker(s3_environment, url, "review-1", "resume", "alice")
    assert resumed["status"] == "success"
    assert resumed["result"]["draft"] == "plan for launch, approved by alice"
    forked = run_worker(s3_environment, url, "review-1", "fork", "draft", "review-2")
    assert forked == {"runId": "review-2", "status": "success", "result": forked["result"]}
    assert forked["result"]["draft"] == resumed["result"]["draft"]

    storage = open_storage(url)
    pids = {resumed["result"]["plan_pid"], resumed["result"]["draft_pid"]}
    pids.add(forked["result"]["draft_pid"])
    assert len(pids) == 3 and os.getpid() not in pids  # three processes did the work
    assert forked["result"]["plan_pid"] == resumed["result"]["plan_pid"]  # replayed, not rerun
    original, fork = read_journal(storage, "review-1"), read_journal(storage, "review-2")
    assert_sound(original)
    assert_sound(fork)
    assert original.max_session == 2 and original.status().status == "completed"
    assert fork.status().source == {"runId": "review-1", "fromOffset": 5}
    types = [e["type"] for e in fork.entries]
    assert types == ["start", "step", "suspend", "start", "resume", "start", "step", "complete"]
    assert list(storage.list_runs()) == ["review-1", "review-2"]


def test_the_older_of_two_live_sessions_in_two_processes_is_fenced(
    s3_environment: dict[str, str], bucket: str
) -> None:
    url = f"s3://{bucket}"
    environment = {**os.environ, **s3_environment}

    def spawn(first: str, second: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(WORKER), url, "shared", "hold", first, second],
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(process: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = process.communicate("go\n", timeout=TIMEOUT)
        assert process.returncode == 0, err
        return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]

    older = spawn("a", "c")
    try:
        assert older.stdout is not None
        assert json.loads(older.stdout.readline()) == {"ready": 1}
        newer = spawn("b", "d")
        try:
            assert newer.stdout is not None
            assert json.loads(newer.stdout.readline()) == {"ready": 2}
            assert finish(older) == {"session": 1, "outcome": "fenced", "offset": 2}
            assert finish(newer) == {"session": 2, "outcome": "appended"}
        finally:
            newer.kill()
            newer.communicate(timeout=TIMEOUT)
    finally:
        older.kill()
        older.communicate(timeout=TIMEOUT)

    journal = read_journal(open_storage(url), "shared")
    assert_sound(journal)
    assert [(e["type"], e["session"], e.get("stepId")) for e in journal.entries] == [
        ("start", 1, None),
        ("step", 1, "a"),
        ("start", 2, None),
        ("step", 2, "b"),
        ("step", 2, "d"),
    ]


# -- faults between boto3 and the server -----------------------------------------------------


def test_a_dropped_response_after_the_put_landed_does_not_duplicate_the_entry(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any, s3_client: Any
) -> None:
    fault = fault_proxy.inject(Fault("drop", method="PUT", nth=3))  # the step "parse"
    calls: dict[str, int] = {}
    workflow = kassette(counted_pipeline(calls), storage=S3Storage(bucket, client=proxied_client))
    result = workflow.start(run_id="r1")
    assert fault.fired == 1
    assert result.status == "success" and result.result == EXPECTED
    assert calls == dict.fromkeys(["fetch", "parse", "plan", "build", "ship"], 1)
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert [e["type"] for e in journal.entries].count("step") == 5
    assert len(journal.entries) == 7


def test_a_landed_put_whose_read_back_fails_once_is_still_recognised_as_landed(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any, s3_client: Any
) -> None:
    """A lone writer: the PUT of step "parse" lands but its answer is lost, and the read that
    settles it answers 503 once. The writer must read again until it knows, find its own
    entry, and go on: not call it another writer's (`FencedError` strands the run)."""
    dropped = fault_proxy.inject(Fault("drop", method="PUT", nth=3))
    unreadable = fault_proxy.inject(Fault("error", method="GET", nth=2))  # after the open's
    calls: dict[str, int] = {}
    workflow = kassette(counted_pipeline(calls), storage=S3Storage(bucket, client=proxied_client))
    result = workflow.start(run_id="r1")
    assert (dropped.fired, unreadable.fired) == (1, 1)
    faults = [e.fault for e in fault_proxy.exchanges if e.fault]
    assert faults == ["drop", "error"]  # the failed read was the read-back of the lost PUT
    assert result.status == "success" and result.result == EXPECTED
    assert calls == dict.fromkeys(["fetch", "parse", "plan", "build", "ship"], 1)
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert [e["type"] for e in journal.entries] == ["start", *["step"] * 5, "complete"]


def test_a_dropped_response_to_the_create_is_recognised_as_landed(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    fault = fault_proxy.inject(Fault("drop", method="PUT", nth=1))
    storage = S3Storage(bucket, client=proxied_client)
    result = kassette(pipeline, storage=storage).start(run_id="r1")
    assert fault.fired == 1
    assert result.status == "success" and result.result == EXPECTED
    journal = read_journal(storage, "r1")
    assert_sound(journal)
    # one session: the create whose answer was lost is not written again, nor abandoned
    assert [e["type"] for e in journal.entries] == ["start", *["step"] * 5, "complete"]
    assert {e["session"] for e in journal.entries} == {1}


def test_a_503_on_put_is_retried(bucket: str, fault_proxy: FaultProxy, proxied_client: Any) -> None:
    fault = fault_proxy.inject(Fault("error", method="PUT", nth=2, times=2, code="SlowDown"))
    calls: dict[str, int] = {}
    storage = S3Storage(bucket, client=proxied_client)
    result = kassette(counted_pipeline(calls), storage=storage).start(run_id="r1")
    assert fault.fired == 2
    assert result.status == "success" and result.result == EXPECTED
    assert calls == dict.fromkeys(["fetch", "parse", "plan", "build", "ship"], 1)
    assert [e.status for e in fault_proxy.exchanges if e.method == "PUT"][1:4] == [503, 503, 200]
    journal = read_journal(storage, "r1")
    assert_sound(journal)
    assert len(journal.entries) == 7


def test_a_503_that_persists_surfaces_as_storage_error_and_a_reinvocation_completes(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    fault_proxy.inject(Fault("error", method="PUT", nth=3, times=100))
    storage = S3Storage(bucket, client=proxied_client)
    workflow = kassette(pipeline, storage=storage)
    with pytest.raises(StorageError, match="ServiceUnavailable"):
        workflow.start(run_id="r1")
    fault_proxy.clear()
    result = workflow.start(run_id="r1")
    assert result.status == "success" and result.result == EXPECTED
    journal = read_journal(storage, "r1")
    assert_sound(journal)
    assert [e["session"] for e in journal.entries if e["type"] == "step"] == [1, 2, 2, 2, 2]


def test_a_put_that_arrives_after_the_client_timed_out_is_refused(
    bucket: str, fault_proxy: FaultProxy, s3_client: Any
) -> None:
    fault = fault_proxy.inject(
        Fault("delay", method="PUT", nth=3, seconds=TIMEOUT, until_overtaken=True)
    )
    calls: dict[str, int] = {}
    impatient = make_client(fault_proxy.url, read_timeout=1)
    storage = S3Storage(bucket, client=impatient)
    result = kassette(counted_pipeline(calls), storage=storage).start(run_id="r1")
    assert result.status == "success" and result.result == EXPECTED
    assert fault.finished.wait(TIMEOUT)  # the late PUT has reached the server
    late = next(e for e in fault_proxy.exchanges if e.fault == "delay")
    assert late.status == 412 and not late.delivered
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert len(journal.entries) == 7 and calls["parse"] == 1
    impatient.close()


def test_four_writers_racing_on_one_token_leave_exactly_one_winner(
    s3_endpoint: str, bucket: str
) -> None:
    clients = [make_client(s3_endpoint) for _ in range(4)]
    stores = [S3Storage(bucket, client=client) for client in clients]
    token = stores[0].append("r1", encode({"type": "start", "session": 1, "offset": 0}), token=None)
    outcomes: dict[int, str] = {}
    barrier = threading.Barrier(4, timeout=30)

    def writer(number: int) -> None:
        snapshot = stores[number].read("r1")
        assert snapshot is not None and snapshot.token == token
        barrier.wait()
        try:
            stores[number].append("r1", b'{"writer":%d}\n' % number, token=snapshot.token)
        except ConflictError:
            outcomes[number] = "conflict"
        else:
            outcomes[number] = "won"

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert sorted(outcomes.values()) == ["conflict", "conflict", "conflict", "won"]
    winner = next(n for n, outcome in outcomes.items() if outcome == "won")
    snapshot = stores[0].read("r1")
    assert snapshot is not None and snapshot.data.endswith(b'{"writer":%d}\n' % winner)
    assert snapshot.data.count(b"\n") == 2
    for client in clients:
        client.close()


def test_four_concurrent_invocations_per_run_stay_dense_and_complete_when_reinvoked(
    s3_endpoint: str, bucket: str
) -> None:
    clients = [make_client(s3_endpoint) for _ in range(4)]
    workflows = [kassette(pipeline, storage=S3Storage(bucket, client=c)) for c in clients]
    outcomes: list[str] = []
    barrier = threading.Barrier(8, timeout=30)

    def invoke(number: int, run_id: str) -> None:
        barrier.wait()
        try:
            outcomes.append(workflows[number].start(run_id=run_id).status)
        except (FencedError, TerminalRunError) as exc:
            outcomes.append(type(exc).__name__)
        except KassetteError as exc:  # anything else is a failure of this test
            outcomes.append(repr(exc))

    threads = [
        threading.Thread(target=invoke, args=(number, run_id))
        for run_id in ["race-a", "race-b"]
        for number in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert len(outcomes) == 8
    assert set(outcomes) <= {"success", "FencedError", "TerminalRunError"}, outcomes
    for run_id in ["race-a", "race-b"]:
        for _ in range(3):  # re-invoke, as a dispatcher would, until the run has ended
            if run_status(workflows[0].storage, run_id).status == "completed":
                break
            workflows[0].start(run_id=run_id)
        journal = read_journal(workflows[0].storage, run_id)
        assert_sound(journal)
        assert journal.status().status == "completed" and journal.status().result == EXPECTED
        step_ids = [e["stepId"] for e in journal.entries if e["type"] == "step"]
        assert step_ids == ["fetch", "parse", "plan", "build", "ship"]
    for client in clients:
        client.close()


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix", ["../escape", "a/../b", "a/..", "/absolute", "a//b", "./a", "a\\b", "a\nb"]
)
def test_a_prefix_that_could_escape_is_refused_before_any_request(
    prefix: str, bucket: str, fault_proxy: FaultProxy, proxied_client: Any, s3_client: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match="prefix"):
        S3Storage(bucket, prefix, client=proxied_client)
    with pytest.raises(InvalidArgumentError):
        open_storage(f"s3://{bucket}/{prefix}")
    assert fault_proxy.exchanges == []
    assert object_keys(s3_client, bucket) == []


@pytest.mark.parametrize(
    "name", ["", "ab", "Upper", "with/slash", "a..b", "-dash", "dash-", "x" * 64, "spa ce"]
)
def test_an_invalid_bucket_name_is_refused_before_any_request(
    name: str, fault_proxy: FaultProxy, proxied_client: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match="bucket"):
        S3Storage(name, client=proxied_client)
    assert fault_proxy.exchanges == []


@pytest.mark.parametrize("url", ["s3:", "s3:/bucket", "s3:bucket", "s3://", "s3:///prefix"])
def test_a_malformed_s3_url_is_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        open_storage(url)


def test_a_missing_bucket_is_a_clear_storage_error(s3_client: Any) -> None:
    missing = f"kassette-missing-{uuid.uuid4().hex[:12]}"
    storage = S3Storage(missing, client=s3_client)
    for call in (
        lambda: storage.read("r1"),
        lambda: list(storage.list_runs()),
        lambda: storage.append("r1", b"{}\n", token=None),
        lambda: kassette(pipeline, storage=storage).start(run_id="r1"),
    ):
        with pytest.raises(StorageError, match=f"bucket '{missing}' does not exist"):
            call()
    buckets = [b["Name"] for b in s3_client.list_buckets().get("Buckets", [])]
    assert missing not in buckets


def test_credentials_the_server_does_not_know_are_refused(
    authenticating_server: str, bucket: str, s3_client: Any
) -> None:
    storage = S3Storage(bucket, client=make_client(authenticating_server, access_key="nobody"))
    with pytest.raises(StorageError, match=r"credentials were refused.*InvalidAccessKeyId"):
        kassette(pipeline, storage=storage).start(run_id="r1")
    with pytest.raises(StorageError, match="InvalidAccessKeyId"):
        list(storage.list_runs())
    reset_auth(authenticating_server, "inf")
    assert object_keys(s3_client, bucket) == []


def test_credentials_without_permission_are_refused(
    s3_endpoint: str, bucket: str, s3_client: Any
) -> None:
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    user = f"no-policy-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    iam.close()
    client = make_client(
        s3_endpoint, access_key=key["AccessKeyId"], secret_key=key["SecretAccessKey"]
    )
    storage = S3Storage(bucket, client=client)
    reset_auth(s3_endpoint, "0")
    try:
        with pytest.raises(StorageError, match=r"credentials were refused.*AccessDenied"):
            kassette(pipeline, storage=storage).start(run_id="r1")
    finally:
        reset_auth(s3_endpoint, "inf")
    assert object_keys(s3_client, bucket) == []
    client.close()


def test_an_object_that_is_not_a_journal_is_corruption_and_is_left_alone(
    s3_client: Any, bucket: str
) -> None:
    key = "runs/r1/journal.jsonl"
    garbage = b"<html>this is not a journal</html>\n{}\n"
    etag = s3_client.put_object(Bucket=bucket, Key=key, Body=garbage)["ETag"]
    storage = S3Storage(bucket, "runs", client=s3_client)
    with pytest.raises(JournalCorruptionError) as caught:
        read_journal(storage, "r1")
    assert caught.value.run_id == "r1"
    with pytest.raises(JournalCorruptionError):
        kassette(pipeline, storage=storage).start(run_id="r1")
    stored = s3_client.get_object(Bucket=bucket, Key=key)
    assert stored["ETag"] == etag and stored["Body"].read() == garbage


def test_an_unreachable_endpoint_is_a_transient_storage_error(bucket: str) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(f"http://127.0.0.1:{port}")
    with pytest.raises(StorageError, match=f"cannot read s3://{bucket}/r1/journal.jsonl"):
        S3Storage(bucket, client=client).read("r1")
    client.close()


def test_without_boto3_the_module_imports_and_creating_a_client_says_what_to_install() -> None:
    script = (
        "import sys\n"
        "sys.modules['boto3'] = None\n"
        "sys.modules['botocore'] = None\n"
        "import kassette.storage._s3\n"
        "from kassette import open_storage\n"
        "try:\n"
        "    open_storage('s3://some-bucket/prefix')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install "kassette[s3]"' in done.stdout


# -- the CLI on S3 ---------------------------------------------------------------------------


def test_cli_verbs_work_on_s3(s3_environment: dict[str, str], bucket: str) -> None:
    url = f"s3://{bucket}/cli"
    workflow = kassette(pipeline, storage=url)
    workflow.start(run_id="done")
    storage = open_storage(url)
    with open_run(storage, "open", input={"q": 1}) as run:
        run.record("only", lambda: 1)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kassette", "--storage", url, *args],
            env={**os.environ, **s3_environment},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    listed = cli("list")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [
        {"runId": "done", "status": "completed"},
        {"runId": "open", "status": "running"},
    ]
    status = cli("status", "done")
    assert status.returncode == 0 and json.loads(status.stdout)["result"] == EXPECTED
    dumped = cli("dump", "done")
    snapshot = storage.read("done")
    assert snapshot is not None and dumped.stdout.encode() == snapshot.data
    forked = cli("fork", "done", "--from-step", "plan", "--new-run-id", "again")
    assert forked.returncode == 0 and json.loads(forked.stdout) == {"runId": "again"}
    assert workflow.start(run_id="again").result == EXPECTED
    canceled = cli("cancel", "open", "--reason", "no longer needed")
    assert canceled.returncode == 0 and json.loads(canceled.stdout)["status"] == "canceled"
    missing = cli("status", "nope")
    assert missing.returncode == 3
    assert_sound(read_journal(storage, "again"))


# -- translation at the backend boundary -----------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        (Fault("error", status=412, code="PreconditionFailed"), ConflictError, "changed"),
        (Fault("error", status=409, code="ConditionalRequestConflict"), ConflictError, "changed"),
        (Fault("error", status=503, code="SlowDown"), StorageError, "SlowDown 503"),
        (Fault("error", status=500, code="InternalError"), StorageError, "InternalError 500"),
        (Fault("error", status=403, code="AccessDenied"), StorageError, "credentials were refused"),
        (Fault("drop"), StorageError, "Connection was closed"),
    ],
)
def test_each_failed_put_becomes_one_kassette_error(
    fault: Fault,
    error: type[Exception],
    message: str,
    bucket: str,
    fault_proxy: FaultProxy,
    proxied_client: Any,
) -> None:
    storage = S3Storage(bucket, client=proxied_client)
    token = storage.append("r1", encode({"type": "start", "session": 1, "offset": 0}), token=None)
    fault_proxy.inject(fault)
    with pytest.raises(StorageError, match=message) as caught:
        storage.append("r1", b'{"x":1}\n', token=token)
    assert type(caught.value) is error and caught.value.run_id == "r1"
    assert fault.fired == 1


def test_a_boto3_without_conditional_puts_is_refused_with_an_upgrade_hint(
    tmp_path: Path,
) -> None:
    import gzip

    import boto3
    import botocore
    import botocore.session

    models = Path(botocore.__file__).parent / "data" / "s3" / "2006-03-01"
    source = next(models.glob("service-2.json*"))
    data = source.read_bytes()
    model = json.loads(gzip.decompress(data) if source.suffix == ".gz" else data)
    del model["shapes"]["PutObjectRequest"]["members"]["IfMatch"]  # as before botocore 1.35.69
    older = tmp_path / "s3" / "2006-03-01"
    older.mkdir(parents=True)
    (older / "service-2.json").write_text(json.dumps(model))
    session = botocore.session.Session()
    session.set_config_variable("data_path", str(tmp_path))
    client = boto3.Session(botocore_session=session).client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with pytest.raises(ImportError, match=r"1\.35\.69 or later: pip install --upgrade"):
        S3Storage("some-bucket", client=client)
    client.close()
