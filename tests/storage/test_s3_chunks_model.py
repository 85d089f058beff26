"""The chunked journal layout (kassette/storage/_chunks.py) against a model, without a server.

`S3Storage` runs with its two requests (`_get`, `_put`) answered by an in-memory bucket that
applies `If-Match` / `If-None-Match` as S3 does, so Hypothesis can try thousands of
interleavings: several writers with their own caches and stale tokens, PUTs whose answer is
lost after they committed, PUTs held back and delivered late, and the run deleted and started
again under its id while writers of the deleted run still hold its state. After every operation
a fresh reader must see exactly the lines of the run as it is now whose appends were
acknowledged or that landed, in order; every PUT replayed late must be refused.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kassette._journal import Journal, encode
from kassette.errors import ConflictError, JournalCorruptionError, StorageError
from kassette.storage._chunks import (
    HEAD,
    Head,
    Policy,
    live_chunks,
    parse_head,
    plan_append,
)
from kassette.storage._s3 import S3Storage

SMALL = Policy(short_lines=3, short_bytes=10_000, tail_entries=2, fanout=3)


@dataclass
class Bucket:
    """Objects with S3's conditional PUT; `lose_next` commits a PUT, then fails its answer;
    `hold_next` keeps a PUT back (it fails to the writer) for `deliver` to apply later."""

    objects: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    puts: list[tuple[str, bytes, str | None]] = field(default_factory=list)
    held: list[tuple[str, bytes, str | None]] = field(default_factory=list)
    lose_next: bool = False
    hold_next: bool = False
    skip_delete: bool = False  # the writer crashes between its commit and emptying chunks
    gets: int = 0
    emptied: list[str] = field(default_factory=list)

    def put(self, key: str, body: bytes, if_match: str | None) -> str:
        current = self.objects.get(key)
        if if_match is None and current is not None:
            raise ConflictError("exists (412)")
        if if_match is not None and (current is None or current[1] != if_match):
            raise ConflictError("moved (412)")
        etag = f'"{hashlib.md5(body).hexdigest()}"'  # as S3's ETag for one PUT
        self.objects[key] = (body, etag)
        return etag

    def delete(self, prefix: str) -> None:
        for key in [key for key in self.objects if key.startswith(prefix)]:
            del self.objects[key]


class ModelS3(S3Storage):
    """S3Storage whose requests go to a `Bucket` in memory."""

    def __init__(self, bucket: Bucket, policy: Policy = SMALL) -> None:
        self.bucket, self.prefix = "model", ""
        self._views = OrderedDict()
        self._mutex = threading.Lock()
        self._policy = policy
        self.store = bucket

    def _get(self, run_id: str, key: str) -> tuple[bytes, str] | None:
        self.store.gets += 1
        return self.store.objects.get(key)

    def delete_run(self, run_id: str) -> None:
        """What `S3Storage.delete_run` does: forget the run, remove every key under it."""
        with self._mutex:
            self._views.pop(run_id, None)
        self.store.delete(self._base(run_id))

    def _empty_chunks(self, run_id: str, keys: list[str]) -> None:
        if self.store.skip_delete:
            return
        for key in keys:
            assert key in self.store.objects, "a chunk emptied before it was created"
            self.store.objects[key] = (b"", '"d41d8cd98f00b204e9800998ecf8427e"')
            self.store.emptied.append(key)

    def _put(self, action: str, run_id: str, key: str, body: bytes, *, if_match: str | None) -> str:
        self.store.puts.append((key, body, if_match))
        if self.store.hold_next:
            self.store.hold_next = False
            self.store.held.append((key, body, if_match))
            raise StorageError("held back: the writer timed out")
        etag = self.store.put(key, body, if_match)
        if self.store.lose_next:
            self.store.lose_next = False
            raise StorageError("the answer was lost")
        return etag


class LaggingReader(ModelS3):
    """A reader that got the head as it was at `since`, then reads the chunks as they are."""

    def __init__(self, bucket: Bucket, policy: Policy, since: tuple[bytes, str] | None) -> None:
        super().__init__(bucket, policy)
        self.since, self.heads = since, 0

    def _get(self, run_id: str, key: str) -> tuple[bytes, str] | None:
        if key.endswith("/" + HEAD):
            self.heads += 1
            if self.heads == 1:
                return self.since
        return super()._get(run_id, key)


def lines(first: int, count: int) -> list[bytes]:
    return [b'{"n":%d}\n' % number for number in range(first, first + count)]


operations = st.lists(
    st.tuples(
        st.sampled_from(
            ["append", "fresh", "fresh", "fresh", "read", "lose", "hold", "deliver", "crash"]
            + ["delete"] * 2  # a run deleted and started again under its id
        ),
        st.integers(0, 2),  # which writer
        st.integers(1, 3),  # lines in the append
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.sampled_from([SMALL, Policy(2, 10_000, 1, 2), Policy(5, 10_000, 3, 4)]))
def test_any_interleaving_keeps_exactly_the_landed_lines_in_order(
    steps: list[tuple[str, int, int]], policy: Policy
) -> None:
    bucket = Bucket()
    writers = [ModelS3(bucket, policy) for _ in range(3)]
    tokens: list[str | None] = [None, None, None]
    truth: list[bytes] = []
    # held PUTs: their lines, the truth then, and the run's generation they were planned on
    pending: list[tuple[list[bytes], int, int]] = []
    counter = 0
    # the run's deletions so far, the count when each writer's token was got (a writer with an
    # older one holds a deleted run's state), and the PUTs sent since the last deletion
    deletions, known, since = 0, [0, 0, 0], 0
    lagging: list[tuple[tuple[bytes, str] | None, int]] = []  # heads a slow reader got, then
    clean = True  # no deleter crashed, no answer lost: the bucket holds only what is needed
    for action, number, count in steps:
        writer = writers[number]
        lagging.append((bucket.objects.get("r/" + HEAD), len(truth)))
        if action == "delete":  # the others keep what they hold of the deleted run
            writer.delete_run("r")
            deletions, truth, since = deletions + 1, [], len(bucket.puts)
            tokens[number], known[number] = None, deletions
            lagging.clear()
        elif action == "read":
            snapshot = writer.read("r")
            tokens[number], known[number] = (snapshot.token if snapshot else None), deletions
        elif action == "deliver":
            deliver(bucket, pending, truth, deletions)
        else:
            if action == "fresh":  # what the core does after a conflict: read, then append
                snapshot = writer.read("r")
                tokens[number], known[number] = (snapshot.token if snapshot else None), deletions
            # a create lands only on no run; any other append holding a deleted run's state
            # must not reach the run as it is now, whatever it is told
            current = tokens[number] is None or known[number] == deletions
            new = lines(counter, count)
            counter += count
            bucket.lose_next = action == "lose"
            bucket.hold_next = action == "hold"
            bucket.skip_delete = action == "crash"
            try:
                tokens[number] = writer.append("r", b"".join(new), token=tokens[number])
            except ConflictError:
                event("conflict")
            except StorageError:
                if action == "lose":
                    if current:
                        truth.extend(new)  # it committed
                else:
                    pending.append((new, len(truth), deletions if current else -1))
            else:
                if current:
                    truth.extend(new)
                    known[number] = deletions
                else:
                    event("a writer of a deleted run was told its append landed")
            bucket.lose_next = bucket.hold_next = bucket.skip_delete = False
        clean = clean and action not in ("lose", "hold", "crash")
        check(bucket, policy, truth, clean=clean)
        back = (number * 3 + count) * 3  # a head 3 to 27 operations old
        if lagging:
            check_lagging(bucket, policy, truth, lagging[max(0, len(lagging) - back)])
    while bucket.held:
        deliver(bucket, pending, truth, deletions)
        check(bucket, policy, truth)
    for key, body, if_match in bucket.puts[since:]:  # every PUT, delivered once more, is refused
        with pytest.raises(ConflictError):
            bucket.put(key, body, if_match)


def deliver(
    bucket: Bucket,
    pending: list[tuple[list[bytes], int, int]],
    truth: list[bytes],
    deletions: int,
) -> None:
    """Deliver the oldest held PUT; it may land only on the journal it was planned for, or as
    the create of a run that does not exist; planned on a deleted run, it must stay unseen."""
    if not bucket.held:
        return
    key, body, if_match = bucket.held.pop(0)
    added, length, planned_on = pending.pop(0)
    try:
        bucket.put(key, body, if_match)
    except ConflictError:
        event("a late PUT was refused")
        return
    if planned_on != deletions:
        if key == "r/" + HEAD and if_match is None:
            assert truth == [], "a late create landed on a run"
            truth.extend(added)
        event("a late PUT of a deleted run landed")
        return
    assert len(truth) == length, "a late PUT landed on a journal that had moved"
    event("a late PUT landed")
    truth.extend(added)


def check_lagging(
    bucket: Bucket, policy: Policy, truth: list[bytes], old: tuple[tuple[bytes, str] | None, int]
) -> None:
    """A reader that got an older head and reads its chunks only now sees the journal as it
    was then, or later (its chunks gone, it read the head again): never a broken one."""
    since, length = old
    if since is None:
        return
    reader = LaggingReader(bucket, policy, since)
    snapshot = reader.read("r")
    assert snapshot is not None
    now = b"".join(truth)
    assert snapshot.data.startswith(b"".join(truth[:length])) and now.startswith(snapshot.data)
    assert snapshot.data.endswith(b"\n") or not snapshot.data
    if reader.heads > 1:
        event("a lagging reader read the head again")


def check(bucket: Bucket, policy: Policy, truth: list[bytes], *, clean: bool = False) -> None:
    """A fresh reader sees exactly `truth`; when no writer crashed before emptying the chunks
    it superseded and no answer was lost, no chunk a reader of the head does not need holds
    anything."""
    snapshot = ModelS3(bucket, policy).read("r")
    assert (snapshot.data if snapshot else b"") == b"".join(truth)
    head = (
        parse_head(bucket.objects["r/" + HEAD][0], "r") if "r/" + HEAD in bucket.objects else None
    )
    if head is not None and head.chunked:
        event("chunked")
        if head.sealed >= head.fanout:
            event("merged")
        if bucket.emptied:
            event("superseded chunks emptied")
        chunks = {key for key, (body, _) in bucket.objects.items() if key != "r/" + HEAD and body}
        # chunks of a deleted generation, sealed by its writers after the delete, are garbage
        generation = "r/" + head.chunk(0).rpartition("/")[0] + "/"
        chunks = {key for key in chunks if key.startswith(generation)}
        needed = {"r/" + head.chunk(n) for n in live_chunks(head.sealed, head.fanout)}
        assert needed <= chunks
        pending = "r/" + head.chunk(head.sealed + 1)
        if clean:
            assert chunks - {pending} == needed


def test_live_chunks_replace_every_fanout_small_chunks_by_one() -> None:
    assert live_chunks(0, 16) == []
    assert live_chunks(3, 16) == [1, 2, 3]
    assert live_chunks(16, 16) == [16]
    assert live_chunks(35, 16) == [16, 32, 33, 34, 35]
    assert all(len(live_chunks(s, 16)) == s // 16 + s % 16 for s in range(200))


def test_a_short_run_is_one_plain_object_and_one_get() -> None:
    bucket = Bucket()
    storage = ModelS3(bucket, Policy())
    token = None
    for number in range(15):
        token = storage.append("r", encode({"n": number}), token=token)
    assert list(bucket.objects) == ["r/" + HEAD]
    assert not parse_head(bucket.objects["r/" + HEAD][0], "r").chunked
    bucket.gets = 0
    assert ModelS3(bucket, Policy()).read("r") is not None
    assert bucket.gets == 1


def test_a_long_run_uploads_a_few_times_its_size_with_one_put_per_append() -> None:
    bucket = Bucket()
    storage = ModelS3(bucket, Policy())
    token, journal = None, b""
    for number in range(1000):
        line = encode({"n": number, "result": "x" * 200})
        token = storage.append("r", line, token=token)
        journal += line
    sent = sum(len(body) for _, body, _ in bucket.puts)
    assert len(bucket.puts) == 1000
    assert sent <= 4 * len(journal)
    bucket.gets = 0
    snapshot = ModelS3(bucket, Policy()).read("r")
    assert snapshot is not None and snapshot.data == journal
    head = parse_head(bucket.objects["r/" + HEAD][0], "r")
    assert bucket.gets == 1 + len(live_chunks(head.sealed, head.fanout)) + head.full


def test_a_head_that_lags_its_sealed_chunk_is_read_through_it() -> None:
    bucket = Bucket()
    storage = ModelS3(bucket)
    token = storage.append("r", b"".join(lines(0, 3)), token=None)  # a chunked head at once
    assert parse_head(bucket.objects["r/" + HEAD][0], "r").full
    token = storage.append("r", b"".join(lines(3, 1)), token=token)  # seals chunk 1
    head = parse_head(bucket.objects["r/" + HEAD][0], "r")
    assert "|" in token and "r/" + head.chunk(1) in bucket.objects
    snapshot = ModelS3(bucket).read("r")
    assert snapshot is not None and snapshot.token == token
    assert snapshot.data == b"".join(lines(0, 4))


def test_a_missing_chunk_or_an_unknown_header_is_corruption() -> None:
    bucket = Bucket()
    storage = ModelS3(bucket)
    token = None
    for number in range(12):
        token = storage.append("r", b"".join(lines(number, 1)), token=token)
    head = parse_head(bucket.objects["r/" + HEAD][0], "r")
    last = live_chunks(head.sealed, head.fanout)[-1]
    del bucket.objects["r/" + head.chunk(last)]
    with pytest.raises(JournalCorruptionError, match=f"chunk {head.chunk(last)}"):
        ModelS3(bucket).read("r")
    bucket.objects["r/" + HEAD] = (b'{"kassette-journal":3,"sealed":0}\n', '"x"')
    with pytest.raises(JournalCorruptionError, match="newer kassette"):
        ModelS3(bucket).read("r")


def test_a_reader_that_knows_only_the_single_object_layout_refuses_a_chunked_head() -> None:
    head = Head(encode({"type": "start", "session": 1, "offset": 7}), True, 2, 7)
    with pytest.raises(JournalCorruptionError):
        Journal.parse(head.encode(), "r")  # what kassette before chunks does with it


def test_a_legacy_head_with_a_torn_line_is_cut_before_the_append() -> None:
    view = plan_append(None, b'{"a":1}\n{"b"').view('"e"', None)
    write = plan_append(view, b'{"c":3}\n')
    assert write.body == b'{"a":1}\n{"c":3}\n'


def test_a_writer_of_a_deleted_run_never_adds_to_a_later_run_of_the_same_id() -> None:
    """The adversarial review's reproducer: a writer paused holding a full head resumes after
    `delete_run` and seals the next chunk (the create succeeds: the delete removed the key). A
    run started later under the same id must never read that chunk as its own: its chunks are
    keyed by its own generation."""
    bucket = Bucket()
    paused, token = ModelS3(bucket), None
    for number in range(3):
        token = paused.append("r", b"".join(lines(number, 1)), token=token)
    assert parse_head(bucket.objects["r/" + HEAD][0], "r").full
    ModelS3(bucket).delete_run("r")
    deleted = b'{"from":"the deleted run"}\n'
    paused.append("r", deleted, token=token)  # seals a chunk of the deleted run: it lands
    assert any(body == deleted or deleted in body for body, _ in bucket.objects.values())
    later, token, written = ModelS3(bucket), None, []
    for number in range(100, 112):
        line = b"".join(lines(number, 1))
        try:
            token = later.append("r", line, token=token)
        except ConflictError:  # what the core does: read again, then append once more
            snapshot = later.read("r")
            assert snapshot is not None
            token = later.append("r", line, token=snapshot.token)
        written.append(line)
    snapshot = ModelS3(bucket).read("r")
    assert snapshot is not None and snapshot.data == b"".join(written)
    assert deleted not in snapshot.data


def test_a_chunked_head_written_before_generations_is_read_and_continued() -> None:
    """A format-1 head (no generation) keeps its chunks at `journal/NNNNNNNN.jsonl`: read as
    before, and appended to as format 1, so its chunks keep their names."""
    bucket = Bucket()
    chunk = b"".join(lines(0, 3))
    bucket.objects["r/journal/00000001.jsonl"] = (chunk, '"c1"')
    header = b'{"kassette-journal":1,"sealed":1,"first":3,"tail":2,"fanout":3}\n'
    bucket.objects["r/" + HEAD] = (header + b"".join(lines(3, 1)), '"h1"')
    storage = ModelS3(bucket)
    snapshot = storage.read("r")
    assert snapshot is not None and snapshot.data == b"".join(lines(0, 4))
    token = snapshot.token
    for number in range(4, 10):
        token = storage.append("r", b"".join(lines(number, 1)), token=token)
    head = parse_head(bucket.objects["r/" + HEAD][0], "r")
    assert head.generation == "" and bucket.objects["r/" + HEAD][0].startswith(header[:21])
    assert all(key.count("/") == 2 for key in bucket.objects if "/journal/" in key)
    assert ModelS3(bucket).read("r").data == b"".join(lines(0, 10))  # type: ignore[union-attr]
