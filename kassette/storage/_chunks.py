"""The chunked journal: how `S3Storage` lays a run's journal out over objects so that N appends
upload O(N) bytes while each append stays one conditional PUT.

A run is a *head* object, `journal.jsonl`, and immutable *chunk* objects,
`journal/GENERATION/NNNNNNNN.jsonl`, numbered from 1. A short run is only a head holding the
whole journal as plain JSONL, exactly the single-object layout kassette and upstream have
always written. Once a head would hold `SHORT_LINES` entries (or `SHORT_BYTES`), it is
rewritten with a header line first
(`{"kassette-journal":2,"run":G,"sealed":S,"first":O,"tail":K,"fanout":F}`) and from then on
holds only a *tail* of at most K entries; everything before it is in chunks 1..S.

`G` is the run's *generation*: random, chosen when its head first gets a header, carried by
every head after it, and part of every chunk's key. A run deleted and started again under the
same id is a new generation, so a writer of the deleted one (paused holding a full head, it
resumes after `delete_run` and seals: the create succeeds, as the delete removed the key)
writes a chunk no head of the new run names, and empties none of its chunks. A head of format 1
(no generation, written before generations) keeps its chunks at `journal/NNNNNNNN.jsonl`.

Every append is one PUT, and that PUT is the append's compare-and-swap:

- the head's tail is not full (fewer than K lines): PUT the head, tail plus the new lines,
  `If-Match` the head's ETag;
- the tail is full: *seal* it: create chunk S+1, the tail plus the new lines, `If-None-Match: *`.
  The head is not touched, so it now lags: chunk S+1 exists although the head says S;
- chunk S+1 exists: PUT the head with `sealed` S+1 and the new lines as its whole tail,
  `If-Match` the head's ETag.

Which of the three applies is a function of the head's bytes (and of whether chunk S+1
exists), the same for every writer, so two writers holding the same state always race on the
same object and exactly one wins. A full head leads to one chunk only: no writer rewrites a full
head. Every `F`-th chunk also holds the `F - 1` small chunks before it, which it replaces for
readers: a run of S chunks reads `S // F + S % F` of them.

Small chunks so replaced are *superseded* once a head naming the merged chunk is committed:
the writer whose catch-up PUT committed it then overwrites them with empty objects
(`Write.superseded`). They are emptied, not deleted, so that a chunk key, once created, stays
created: that is what makes a seal's `If-None-Match: *` a compare-and-swap. Never before that
commit, so every chunk the current head names is whole. A reader that read an older head may
find one of its chunks empty: the head has moved since, so it reads the head again (see
`S3Storage`); an empty or missing chunk under an unchanged head is corruption. A writer that
crashes between its commit and emptying leaves those chunks whole: garbage no reader asks for.

A reader GETs the head; a head without a header is the whole journal (one GET). A head with a
header names its live chunks; when its tail is full the reader also asks for chunk S+1. Costs
per append and per open, and why this shape: docs/object-storage-design.md.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from kassette.errors import JournalCorruptionError

__all__ = [
    "HEAD",
    "Head",
    "Policy",
    "View",
    "Write",
    "chunk_name",
    "live_chunks",
    "new_generation",
    "parse_head",
    "plan_append",
    "superseded_chunks",
]

HEAD = "journal.jsonl"
CHUNKS = "journal/"
FORMAT = 2
"""The header's format: 2 names the run's generation; 1 (no generation) is still read."""
_GENERATION = re.compile(r"[0-9a-f]{1,32}")
TAIL_ENTRIES = 2
"""A header'd head's tail is full at this many lines; the next append seals it into a chunk."""
FANOUT = 16
"""Every FANOUT-th chunk also holds the FANOUT - 1 chunks before it."""
SHORT_LINES = 16
SHORT_BYTES = 64 * 1024
"""A head without a header stays one plain JSONL object while below both."""

_MARK = b'{"kassette-journal":'


def chunk_name(number: int, generation: str = "") -> str:
    """The object name of chunk `number` (from 1) of the run's `generation`, relative to the
    run's prefix ("": a format-1 head's chunks)."""
    if generation:
        return f"{CHUNKS}{generation}/{number:08d}.jsonl"
    return f"{CHUNKS}{number:08d}.jsonl"


def new_generation() -> str:
    """A fresh generation for a run's first chunked head: 48 random bits, so a run deleted and
    started again under its id never shares a chunk key with its former self."""
    return os.urandom(6).hex()


def live_chunks(sealed: int, fanout: int) -> list[int]:
    """The chunks that hold a journal of `sealed` chunks, oldest first."""
    merged = sealed // fanout * fanout
    return [*range(fanout, merged + 1, fanout), *range(merged + 1, sealed + 1)]


def superseded_chunks(sealed: int, fanout: int) -> list[int]:
    """The small chunks no reader of a head with `sealed` chunks needs, to empty once that
    head is committed: when chunk `sealed` merges, the small ones it replaces; else none."""
    if sealed < fanout or sealed % fanout:
        return []
    return list(range(sealed - fanout + 1, sealed))


@dataclass(frozen=True)
class Head:
    """The head object, parsed. `chunked` is False for a plain journal (the legacy layout)."""

    tail: bytes
    chunked: bool = False
    sealed: int = 0
    first: int = 0
    tail_entries: int = TAIL_ENTRIES
    fanout: int = FANOUT
    generation: str = ""  # "" only in a plain head or a format-1 one

    def chunk(self, number: int) -> str:
        """The object name of this run's chunk `number`."""
        return chunk_name(number, self.generation)

    @property
    def full(self) -> bool:
        """Whether the next append seals the tail into chunk `sealed + 1`."""
        return self.chunked and self.tail.count(b"\n") >= self.tail_entries

    def encode(self) -> bytes:
        if not self.chunked:
            return self.tail
        header: dict[str, int | str] = {"kassette-journal": FORMAT, "run": self.generation}
        if not self.generation:  # a format-1 head goes on as one: its chunks keep their names
            header = {"kassette-journal": 1}
        header |= {
            "sealed": self.sealed,
            "first": self.first,
            "tail": self.tail_entries,
            "fanout": self.fanout,
        }
        # the pure-Python encoder (not one-shot): works whatever json.encoder.c_make_encoder is
        text = "".join(json.JSONEncoder(separators=(",", ":")).iterencode(header))
        return text.encode() + b"\n" + self.tail


def parse_head(body: bytes, run_id: str) -> Head:
    """The head object's bytes as a `Head`; a body without a header is a plain journal."""
    if not body.startswith(_MARK):
        return Head(body)
    line, _, tail = body.partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    fields = ("sealed", "first", "tail", "fanout")
    if (
        not isinstance(header, dict)
        or header.get("kassette-journal") not in (1, FORMAT)
        or (header["kassette-journal"] == 1 and "run" in header)
        or (
            header["kassette-journal"] == FORMAT
            and not (isinstance(header.get("run"), str) and _GENERATION.fullmatch(header["run"]))
        )
        or not all(type(header.get(name)) is int and header[name] >= 0 for name in fields)
        or header["tail"] < 1
        or header["fanout"] < 2
    ):
        raise JournalCorruptionError(
            f"run {run_id}: the journal's head has a header this kassette cannot read "
            f"({line[:120]!r}); a newer kassette may have written it",
            run_id=run_id,
        )
    sealed, first, tail_entries, fanout = (header[name] for name in fields)
    return Head(tail, True, sealed, first, tail_entries, fanout, header.get("run", ""))


@dataclass(frozen=True)
class View:
    """A run's journal as read or last written: the head, and the live chunks' bodies.

    `pending` is the ETag of chunk `head.sealed + 1` when that chunk exists (a sealed tail the
    head has not caught up with); `chunks` then ends with it.
    """

    head: Head
    head_etag: str
    chunks: tuple[bytes, ...] = ()
    chunk_lines: int = 0
    pending: str | None = None

    @property
    def token(self) -> str:
        return self.head_etag if self.pending is None else f"{self.head_etag}|{self.pending}"

    @property
    def data(self) -> bytes:
        """The journal's bytes: the live chunks, then the tail unless a pending chunk holds it."""
        if not self.chunks:
            return self.head.tail
        tail = b"" if self.pending is not None else self.head.tail
        return b"".join((*self.chunks, tail))


def check_view(view: View, run_id: str) -> View:
    """`view` if its chunks hold the entries its head says they do, else corruption."""
    head = view.head
    expected = head.first if view.pending is None else head.first + head.tail.count(b"\n")
    if view.chunk_lines < expected or (view.pending is None and view.chunk_lines != expected):
        raise JournalCorruptionError(
            f"run {run_id}: the journal's chunks hold {view.chunk_lines} entries, its head "
            f"says {expected}",
            run_id=run_id,
            offset=min(view.chunk_lines, expected),
        )
    return view


@dataclass(frozen=True)
class Write:
    """One conditional PUT that appends: `name` gets `body` if it is still at `if_match` (an
    ETag), or, when `if_match` is None, if it does not exist yet."""

    name: str
    body: bytes
    if_match: str | None
    head: Head | None  # the head this PUT writes; None when it seals a chunk
    chunks: tuple[bytes, ...]
    chunk_lines: int
    superseded: tuple[str, ...] = ()
    """Chunks to empty once this PUT is committed (a catch-up to a merged chunk)."""

    def view(self, etag: str, before: View | None) -> View:
        """The journal once this PUT succeeded with `etag`."""
        if self.head is not None:
            return View(self.head, etag, self.chunks, self.chunk_lines)
        assert before is not None  # a seal follows a head
        return View(before.head, before.head_etag, self.chunks, self.chunk_lines, etag)


@dataclass(frozen=True)
class Policy:
    """When a plain head becomes a chunked one, and the rules it then gets. Only new heads
    take these: a chunked head's header carries its own rules, which every writer follows."""

    short_lines: int = SHORT_LINES
    short_bytes: int = SHORT_BYTES
    tail_entries: int = TAIL_ENTRIES
    fanout: int = FANOUT


def plan_append(view: View | None, data: bytes, policy: Policy = Policy()) -> Write:
    """The one PUT that appends `data` (whole lines) to the journal `view`, or creates it."""
    if view is None:
        return _head_write(data, None, policy)
    head = view.head
    tail = _whole_lines(head.tail)  # a torn final line left by a crashed writer is not content
    if not head.chunked:
        return _head_write(tail + data, view.head_etag, policy)
    if view.pending is not None:
        sealed = head.sealed + 1
        caught_up = Head(data, True, sealed, view.chunk_lines, *_rules(head))
        superseded = tuple(map(head.chunk, superseded_chunks(sealed, head.fanout)))
        return Write(
            HEAD, caught_up.encode(), view.head_etag, caught_up, *_chunks(view), superseded
        )
    if not head.full:
        grown = Head(tail + data, True, head.sealed, head.first, *_rules(head))
        return Write(HEAD, grown.encode(), view.head_etag, grown, *_chunks(view))
    number = head.sealed + 1
    chunks, lines = view.chunks, view.chunk_lines
    if number % head.fanout == 0:  # this chunk replaces the small ones since the last such
        small = number - 1 - (number - 1) // head.fanout * head.fanout
        merged = chunks[len(chunks) - small :]
        chunks = chunks[: len(chunks) - small]
        lines -= sum(body.count(b"\n") for body in merged)
        body = b"".join((*merged, tail, data))
    else:
        body = tail + data
    return Write(head.chunk(number), body, None, None, (*chunks, body), lines + body.count(b"\n"))


def _head_write(lines: bytes, etag: str | None, policy: Policy) -> Write:
    """A plain head while it is short; past that, the same lines as a chunked head's tail."""
    head = Head(lines)
    if lines.count(b"\n") >= policy.short_lines or len(lines) >= policy.short_bytes:
        head = Head(
            lines,
            True,
            tail_entries=policy.tail_entries,
            fanout=policy.fanout,
            generation=new_generation(),
        )
    return Write(HEAD, head.encode(), etag, head, (), 0)


def _whole_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


def _rules(head: Head) -> tuple[int, int, str]:
    return head.tail_entries, head.fanout, head.generation


def _chunks(view: View) -> tuple[tuple[bytes, ...], int]:
    return view.chunks, view.chunk_lines
