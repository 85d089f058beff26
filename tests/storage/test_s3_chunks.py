"""The chunked journal layout of S3Storage against moto's server (conftest.py) and the fault
proxy (s3_proxy.py): bytes and requests per append and per open, journals written in the
single-object layout (kassette's before chunks, and upstream's) read, resumed and forked,
faults on the PUTs that seal a chunk or catch the head up, and racing writers.

`Chunky` seals a chunk every other append and merges every second chunk, so a five-step
workflow already goes through every kind of PUT; the default policy is used where the
figures matter.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from s3_proxy import Fault, FaultProxy
from s3_server import make_client
from s3_workflows import EXPECTED, assert_sound, counted_pipeline, object_keys, pipeline

from kassette import FencedError, KassetteError, TerminalRunError, kassette
from kassette._journal import Journal, encode
from kassette.core import fork_run, open_run, read_journal, run_status
from kassette.errors import ConflictError, InvalidArgumentError, JournalCorruptionError
from kassette.storage._chunks import HEAD, Policy, live_chunks, parse_head
from kassette.storage._s3 import S3Storage
from kassette.testing import StorageConformance

TIMEOUT = 120
UPSTREAM = Path(__file__).resolve().parents[1] / "explore" / "fixtures" / "upstream"


class Chunky(S3Storage):
    _policy = Policy(short_lines=2, tail_entries=1, fanout=2)


class TestChunkyS3Storage(StorageConformance):
    exclusive_locks = False

    @pytest.fixture
    def storage(self, bucket: str, s3_client: Any) -> S3Storage:
        return Chunky(bucket, "conformance", client=s3_client)


def count_uploads(client: Any) -> list[int]:
    """Bytes of every PutObject body the client sends, as they are sent."""
    sizes: list[int] = []
    client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: sizes.append(int(request.headers.get("Content-Length", 0))),
    )
    return sizes


# -- what an append and an open cost ----------------------------------------------------------


def test_a_long_run_uploads_at_most_four_times_its_journal_one_put_per_append(
    s3_endpoint: str, bucket: str
) -> None:
    client = make_client(s3_endpoint)
    uploads = count_uploads(client)
    storage = S3Storage(bucket, "runs", client=client)
    result = "x" * 200
    with open_run(storage, "long", input=None) as run:
        for number in range(300):
            run.record(f"step-{number}", lambda: result)
        run.complete(None)
    snapshot = storage.read("long")
    assert snapshot is not None
    journal = Journal.parse(snapshot.data, "long")
    appends = [size for size in uploads if size]  # the others empty superseded chunks
    assert len(journal.entries) == 302 and len(appends) == 302  # start, 300 steps, complete
    assert sum(uploads) <= 4 * len(snapshot.data)
    head = parse_head(client.get_object(Bucket=bucket, Key=f"runs/long/{HEAD}")["Body"].read(), "")
    assert head.chunked and head.sealed > head.fanout  # merged chunks too
    merges = head.sealed // head.fanout
    assert len(uploads) - len(appends) == merges * (head.fanout - 1)
    client.close()


def test_opening_a_run_reads_its_head_then_its_live_chunks(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any, s3_client: Any
) -> None:
    storage = S3Storage(bucket, client=s3_client)
    token = None
    for number in range(120):
        token = storage.append("r1", encode({"n": number}), token=token)
    head = parse_head(s3_client.get_object(Bucket=bucket, Key=f"r1/{HEAD}")["Body"].read(), "")
    snapshot = S3Storage(bucket, client=proxied_client).read("r1")
    assert snapshot is not None and snapshot.token == token
    assert snapshot.data == b"".join(encode({"n": number}) for number in range(120))
    gets = [e.path for e in fault_proxy.exchanges if e.method == "GET"]
    assert gets[0] == f"/{bucket}/r1/{HEAD}"
    expected = live_chunks(head.sealed, head.fanout) + ([head.sealed + 1] if head.full else [])
    assert sorted(gets[1:]) == sorted(f"/{bucket}/r1/{head.chunk(n)}" for n in expected)
    assert len(expected) < 120 // 16  # not a GET per entry


def test_a_short_workflow_is_one_plain_object_read_in_one_get(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any, s3_client: Any
) -> None:
    storage = S3Storage(bucket, client=proxied_client)
    assert kassette(pipeline, storage=storage).start(run_id="r1").result == EXPECTED
    assert object_keys(s3_client, bucket) == [f"r1/{HEAD}"]
    body = s3_client.get_object(Bucket=bucket, Key=f"r1/{HEAD}")["Body"].read()
    assert len(Journal.parse(body, "r1").entries) == 7  # plain JSONL, as before chunks
    fault_proxy.clear()
    assert S3Storage(bucket, client=proxied_client).read("r1") is not None
    assert [e.method for e in fault_proxy.exchanges] == ["GET"]


# -- journals in the single-object layout ---------------------------------------------------


def upstream_lines(steps: int) -> bytes:
    """An open upstream-style run: no milliseconds, no durationMs, a torn final line."""
    lines = [
        {
            "type": "start",
            "session": 1,
            "offset": 0,
            "timestamp": "2026-05-08T14:21:03Z",
            "metadata": {"topic": "long"},
        }
    ]
    for number in range(steps):
        lines.append(
            {
                "type": "step",
                "session": 1,
                "offset": number + 1,
                "timestamp": "2026-05-08T14:21:09Z",
                "stepId": "s" if number == 0 else f"s#{number + 1}",
                "name": "s",
                "result": number,
            }
        )
    return b"".join(encode(line) for line in lines) + b'{"type":"st'


def test_a_long_single_object_journal_is_read_resumed_and_forked(
    s3_client: Any, bucket: str
) -> None:
    body = upstream_lines(40)
    s3_client.put_object(Bucket=bucket, Key=f"runs/old/{HEAD}", Body=body)
    storage = S3Storage(bucket, "runs", client=s3_client)
    journal = read_journal(storage, "old")
    assert len(journal.entries) == 41 and journal.status().status == "running"

    def resume(ctx: Any, input: Any) -> int:
        total = sum(ctx.step("s", lambda: -1) for _ in range(40))  # replayed
        return total + sum(ctx.step("more", lambda number=n: number) for n in range(10))

    result = kassette(resume, storage=storage).start(run_id="old")
    assert result.status == "success" and result.result == sum(range(40)) + sum(range(10))
    resumed = read_journal(storage, "old")
    assert_sound(resumed)
    assert len(resumed.entries) == 41 + 1 + 10 + 1
    head = parse_head(
        s3_client.get_object(Bucket=bucket, Key=f"runs/old/{HEAD}")["Body"].read(), ""
    )
    assert head.chunked  # the run continued in the chunked layout

    fork_run(storage, "old", step="s#21", new_run_id="branch")
    forked = kassette(resume, storage=storage).start(run_id="branch")
    assert forked.status == "success"
    journal = read_journal(storage, "branch")
    assert_sound(journal)
    assert journal.status().source == {"runId": "old", "fromOffset": 21}
    assert [e["type"] for e in journal.entries].count("start") == 3  # copied, fork, resume


@pytest.mark.parametrize("name", ["INC-4821.jsonl", "TKT-7.jsonl", "INC-4821-gentle.jsonl"])
def test_upstream_journals_read_the_same_from_a_bucket(
    name: str, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    body = (UPSTREAM / name).read_bytes()
    s3_client.put_object(Bucket=bucket, Key=f"up/{HEAD}", Body=body)
    journal = read_journal(S3Storage(bucket, client=s3_client), "up")
    assert journal.entries == Journal.parse(body, "up").entries
    new = fork_run(S3Storage(bucket, client=s3_client), "up", offset=1, new_run_id="up-2")
    assert (
        read_journal(S3Storage(bucket, client=s3_client), new).entries[:1] == (journal.entries[:1])
    )


def test_a_reader_before_chunks_refuses_a_chunked_head_loudly(s3_client: Any, bucket: str) -> None:
    storage = Chunky(bucket, client=s3_client)
    kassette(pipeline, storage=storage).start(run_id="r1")
    head = s3_client.get_object(Bucket=bucket, Key=f"r1/{HEAD}")["Body"].read()
    with pytest.raises(JournalCorruptionError):
        Journal.parse(head, "r1")  # what kassette before chunks reads at that key


# -- faults on the PUTs of the chunked layout ------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/00000002.jsonl", "/00000003.jsonl", f"/r1/{HEAD}"],  # chunks of any generation
)
@pytest.mark.parametrize("action", ["drop", "error"])
def test_a_lost_or_refused_put_of_a_chunk_or_head_is_resolved_once(
    path: str,
    action: str,
    bucket: str,
    fault_proxy: FaultProxy,
    proxied_client: Any,
    s3_client: Any,
) -> None:
    """Chunk 2 merges chunk 1, chunk 3 is a small one; the head's 3rd PUT catches up after a
    seal."""
    nth = 3 if path.endswith(HEAD) else 1
    fault = fault_proxy.inject(Fault(action, method="PUT", path_contains=path, nth=nth, times=2))
    calls: dict[str, int] = {}
    workflow = kassette(counted_pipeline(calls), storage=Chunky(bucket, client=proxied_client))
    result = workflow.start(run_id="r1")
    assert fault.fired >= 1
    assert result.status == "success" and result.result == EXPECTED
    assert calls == dict.fromkeys(["fetch", "parse", "plan", "build", "ship"], 1)
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert [e["type"] for e in journal.entries] == ["start", *["step"] * 5, "complete"]
    assert {e["session"] for e in journal.entries} == {1}


def test_a_seal_that_arrives_after_the_writer_timed_out_is_refused(
    bucket: str, fault_proxy: FaultProxy, s3_client: Any
) -> None:
    fault = fault_proxy.inject(
        Fault(
            "delay",
            method="PUT",
            path_contains="/00000002.jsonl",
            seconds=TIMEOUT,
            until_overtaken=True,
        )
    )
    calls: dict[str, int] = {}
    impatient = make_client(fault_proxy.url, read_timeout=1)
    workflow = kassette(counted_pipeline(calls), storage=Chunky(bucket, client=impatient))
    result = workflow.start(run_id="r1")
    assert result.status == "success" and result.result == EXPECTED
    assert fault.finished.wait(TIMEOUT)
    late = next(e for e in fault_proxy.exchanges if e.fault == "delay")
    assert late.status == 412 and not late.delivered
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert len(journal.entries) == 7 and set(calls.values()) == {1}
    impatient.close()


@pytest.mark.parametrize("appends", [2, 3])  # then the next one seals, or catches the head up
def test_four_writers_racing_on_one_token_of_a_chunked_run_leave_one_winner(
    appends: int, s3_endpoint: str, bucket: str
) -> None:
    clients = [make_client(s3_endpoint) for _ in range(4)]
    stores = [Chunky(bucket, client=client) for client in clients]
    token = None
    for number in range(appends):
        token = stores[0].append("r1", encode({"n": number}), token=token)
    outcomes: dict[int, str] = {}
    barrier = threading.Barrier(4, timeout=30)

    def writer(number: int) -> None:
        snapshot = stores[number].read("r1")
        assert snapshot is not None and snapshot.token == token
        barrier.wait()
        try:
            stores[number].append("r1", encode({"writer": number}), token=snapshot.token)
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
    assert snapshot is not None
    assert snapshot.data.splitlines()[-1] == encode({"writer": winner}).rstrip()
    assert snapshot.data.count(b"\n") == appends + 1
    for client in clients:
        client.close()


def test_concurrent_invocations_of_a_chunked_run_stay_dense_and_complete(
    s3_endpoint: str, bucket: str
) -> None:
    clients = [make_client(s3_endpoint) for _ in range(4)]
    workflows = [kassette(pipeline, storage=Chunky(bucket, client=c)) for c in clients]
    outcomes: list[str] = []
    barrier = threading.Barrier(4, timeout=30)

    def invoke(number: int) -> None:
        barrier.wait()
        try:
            outcomes.append(workflows[number].start(run_id="race").status)
        except (FencedError, TerminalRunError) as exc:
            outcomes.append(type(exc).__name__)
        except KassetteError as exc:
            outcomes.append(repr(exc))

    threads = [threading.Thread(target=invoke, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert len(outcomes) == 4
    assert set(outcomes) <= {"success", "FencedError", "TerminalRunError"}, outcomes
    for _ in range(3):
        if run_status(workflows[0].storage, "race").status == "completed":
            break
        workflows[0].start(run_id="race")
    journal = read_journal(workflows[0].storage, "race")
    assert_sound(journal)
    assert journal.status().result == EXPECTED
    for client in clients:
        client.close()


# -- listing, deleting, objects beside ------------------------------------------------------


def test_listing_and_deleting_see_a_chunked_run_as_one_run(s3_client: Any, bucket: str) -> None:
    storage = Chunky(bucket, "p", client=s3_client)
    kassette(pipeline, storage=storage).start(run_id="long")
    kassette(pipeline, storage=S3Storage(bucket, "p", client=s3_client)).start(run_id="short")
    storage.write_object("long", "notes/a.md", b"a")
    assert any("/journal/" in key for key in object_keys(s3_client, bucket))
    assert list(storage.list_runs()) == ["long", "short"]
    folded = s3_client.list_objects_v2(Bucket=bucket, Prefix="p/", Delimiter="/journal/")
    assert [p["Prefix"] for p in folded.get("CommonPrefixes", [])] == ["p/long/journal/"]
    storage.delete_run("long")
    assert object_keys(s3_client, bucket) == [f"p/short/{HEAD}"]
    assert list(storage.list_runs()) == ["short"]


def test_a_writer_of_a_deleted_run_never_adds_to_a_later_run_of_the_same_id(
    s3_client: Any, bucket: str
) -> None:
    """A session paused holding a full head resumes after `delete_run` and records a step: its
    seal creates a chunk (the delete removed the key). A run started later under the same id
    runs every step live and never replays that session's results as its own: its chunks are
    keyed by its own generation."""
    with open_run(Chunky(bucket, client=s3_client), "r1") as paused:
        for name in ("fetch", "parse", "plan"):
            paused.record(name, lambda: "from the deleted run")
        head = parse_head(s3_client.get_object(Bucket=bucket, Key=f"r1/{HEAD}")["Body"].read(), "")
        assert head.full and f"r1/{head.chunk(head.sealed + 1)}" not in object_keys(
            s3_client, bucket
        )  # the next append seals chunk sealed + 1
        S3Storage(bucket, client=s3_client).delete_run("r1")
        paused.record("build", lambda: "from the deleted run")  # told it landed
    assert any("/journal/" in key for key in object_keys(s3_client, bucket))  # it did
    calls: dict[str, int] = {}
    later = kassette(counted_pipeline(calls), storage=Chunky(bucket, client=s3_client))
    result = later.start(run_id="r1")
    assert result.status == "success" and result.result == EXPECTED
    assert calls == dict.fromkeys(["fetch", "parse", "plan", "build", "ship"], 1)
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert all(entry.get("result") != "from the deleted run" for entry in journal.entries)
    assert [e["type"] for e in journal.entries] == ["start", *["step"] * 5, "complete"]


def test_a_chunked_runs_stamp_moves_with_every_append_and_with_nothing_else(
    s3_client: Any, bucket: str
) -> None:
    """`run_stamps` lists the head and the chunks with their ETags: each append moves the
    run's stamp (a chunk sealed or the head put), an object beside the run does not."""
    storage = Chunky(bucket, "p", client=s3_client)
    seen = []
    with open_run(storage, "long", input=None) as run:
        for number in range(12):
            run.record(f"step-{number}", lambda: "x" * 40)
            stamps = storage.run_stamps()
            assert list(stamps) == ["long"] and stamps == storage.run_stamps(["long", "gone"])
            seen.append(stamps["long"])
    assert any("/journal/" in key for key in object_keys(s3_client, bucket))  # it chunked
    assert len(set(seen)) == len(seen)  # a new stamp after each append
    before = storage.run_stamps()
    storage.write_object("long", "notes/a.md", b"beside the journal")
    assert storage.run_stamps() == before


@pytest.mark.parametrize("name", [HEAD, "journal/00000001.jsonl", "journal/x"])
def test_object_names_inside_the_journal_are_refused(
    name: str, s3_client: Any, bucket: str
) -> None:
    storage = S3Storage(bucket, client=s3_client)
    with pytest.raises(InvalidArgumentError, match="journal"):
        storage.write_object("r1", name, b"x")
    assert object_keys(s3_client, bucket) == []


# -- superseded chunks ----------------------------------------------------------------------


def sizes(client: Any, bucket: str, prefix: str) -> dict[str, int]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {item["Key"]: item["Size"] for page in pages for item in page.get("Contents", [])}


def test_a_merge_empties_the_small_chunks_it_replaces(s3_client: Any, bucket: str) -> None:
    storage = S3Storage(bucket, "runs", client=s3_client)
    with open_run(storage, "long", input=None) as run:
        for number in range(300):
            run.record(f"step-{number}", lambda: "x" * 200)
        run.complete(None)
    snapshot = storage.read("long")
    assert snapshot is not None and len(Journal.parse(snapshot.data, "long").entries) == 302
    head = parse_head(
        s3_client.get_object(Bucket=bucket, Key=f"runs/long/{HEAD}")["Body"].read(), ""
    )
    stored = sizes(s3_client, bucket, "runs/long/")
    live = {f"runs/long/{head.chunk(n)}" for n in live_chunks(head.sealed, head.fanout)}
    pending = {f"runs/long/{head.chunk(head.sealed + 1)}"}
    whole = {key for key, size in stored.items() if size and not key.endswith(HEAD)}
    assert live <= whole <= live | pending
    assert len(stored) - len(whole) - 1 == head.sealed // head.fanout * (head.fanout - 1)
    assert sum(stored.values()) <= 1.2 * len(snapshot.data)  # was about 2x


def test_a_reader_holding_an_older_head_reads_it_again_when_its_chunks_are_emptied(
    s3_client: Any, bucket: str
) -> None:
    writer = Chunky(bucket, client=s3_client)
    token = None
    for number in range(2):
        token = writer.append("r1", encode({"n": number}), token=token)
    old = s3_client.get_object(Bucket=bucket, Key=f"r1/{HEAD}")
    old_head = (old["Body"].read(), old["ETag"])
    generation = parse_head(old_head[0], "r1")
    assert generation.full  # its reader asks for chunk 1, sealed next
    for number in range(2, 9):
        token = writer.append("r1", encode({"n": number}), token=token)
    assert (
        sizes(s3_client, bucket, "r1/")[f"r1/{generation.chunk(1)}"] == 0
    )  # merged into 2, emptied
    heads: list[str] = []

    class Slow(Chunky):
        def _get(self, run_id: str, key: str) -> tuple[bytes, str] | None:
            if key.endswith(HEAD):
                heads.append(key)
                if len(heads) == 1:
                    return old_head  # read before the merge; its chunks are read only now
            return super()._get(run_id, key)

    snapshot = Slow(bucket, client=s3_client).read("r1")
    assert snapshot is not None and snapshot.token == token
    assert snapshot.data == b"".join(encode({"n": number}) for number in range(9))
    assert len(heads) == 2
    with pytest.raises(JournalCorruptionError, match="missing"):  # under a head that stays
        s3_client.delete_object(Bucket=bucket, Key=f"r1/{generation.chunk(2)}")
        Chunky(bucket, client=s3_client).read("r1")


def test_emptying_that_fails_leaves_garbage_and_the_appends_stand(
    bucket: str, fault_proxy: FaultProxy, proxied_client: Any, s3_client: Any
) -> None:
    """Chunk 1's second PUT empties it once chunk 2 merged it: a 503 there is not the
    append's failure."""
    fault = fault_proxy.inject(
        # chunk 1, of the generation the run gets
        Fault("error", method="PUT", path_contains="/00000001.jsonl", nth=2, times=1)
    )
    calls: dict[str, int] = {}
    result = kassette(counted_pipeline(calls), storage=Chunky(bucket, client=proxied_client)).start(
        run_id="r1"
    )
    assert fault.fired == 1
    assert result.status == "success" and result.result == EXPECTED
    assert set(calls.values()) == {1}
    stored = sizes(s3_client, bucket, "r1/")
    head = parse_head(s3_client.get_object(Bucket=bucket, Key=f"r1/{HEAD}")["Body"].read(), "")
    assert stored[f"r1/{head.chunk(1)}"] > 0  # garbage: no head names it
    journal = read_journal(S3Storage(bucket, client=s3_client), "r1")
    assert_sound(journal)
    assert len(journal.entries) == 7
