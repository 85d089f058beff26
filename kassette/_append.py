"""The append protocol: how kassette writes a journal, and how it knows a write landed.

Every append is a compare-and-swap on the storage token of the last read (`token=None` creates
the run). A write that reports failure may still have landed (a timeout after the commit, a
retried request conflicting with its own first attempt), so a failure is settled by reading
the journal back: entries that are there count as written, and nothing is journaled twice.
`commit` adds the session's rules on top: a newer session there means this one is fenced
(`FencedError`, or `RunCancelledError` when that session canceled the run); otherwise it retries
at the new token, backing off on the injected clock after I/O errors. `GroupCommit` is how an
open session appends: entries appended concurrently (parallel branches) are numbered as they
come and written together, one `commit_all` (one write and fsync on `LocalStorage`) for all.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from kassette._clock import Backoff, Clock
from kassette._codec import (
    TERMINAL_TYPES,
    Entry,
    encode,
    encode_entry,
    format_timestamp,
    read_entry,
)
from kassette._journal import Journal
from kassette.errors import (
    ConflictError,
    FencedError,
    JournalCorruptionError,
    RunCancelledError,
    RunNotFoundError,
    StorageError,
    TerminalRunError,
)
from kassette.storage import Snapshot, Storage, validate_run_id

__all__ = [
    "APPEND_ATTEMPTS",
    "READ_ATTEMPTS",
    "GroupCommit",
    "Queued",
    "append",
    "commit",
    "commit_all",
    "landed_token",
    "read",
]

APPEND_ATTEMPTS = 5
READ_ATTEMPTS = 5  # reads of the journal to learn whether a failed write landed
_FIRST_BACKOFF = 0.05  # seconds before the second attempt after an I/O error; doubles after


def read(storage: Storage, run_id: str) -> tuple[Journal, str]:
    """The run's parsed journal and its token; `RunNotFoundError` when there is none."""
    snapshot = storage.read(validate_run_id(run_id))
    if snapshot is None:
        raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
    return Journal.parse(snapshot.data, run_id), snapshot.token


def append(
    storage: Storage,
    run_id: str,
    entries: Sequence[Mapping[str, Any]],
    token: str | None,
    clock: Clock,
    *,
    data: bytes = b"",
) -> str:
    """Append `entries` at `token`: the one way kassette writes a journal. Returns the new token.

    A failed write is resolved by reading the journal back (`_read_back`, until a read
    answers): entries that are there count as written (an ambiguous failure, such as a timeout
    after the write committed, or a retried request conflicting with its own first attempt),
    so nothing is journaled twice. Otherwise the error is raised: `ConflictError` when the
    journal moved, for the caller to re-plan. `data`, when given, is `entries` encoded already.
    """
    data = data or b"".join(encode(entry) for entry in entries)
    try:
        return storage.append(run_id, data, token=token)
    except StorageError as failure:
        snapshot = _read_back(storage, run_id, clock, failure)
        landed = landed_token(snapshot, run_id, entries)
        if landed is None:
            raise
        return landed


def commit(
    storage: Storage, journal: Journal, entry: Entry, token: str, clock: Clock, line: bytes = b""
) -> str:
    """Append `entry` of an open session at `token`, retrying while the session is not fenced.

    `line` is the entry encoded, when the caller has it. Returns the new token. The journal is
    not modified here.
    """
    return commit_all(storage, journal, [entry], token, clock, line)


def commit_all(
    storage: Storage,
    journal: Journal,
    entries: Sequence[Entry],
    token: str,
    clock: Clock,
    data: bytes = b"",
) -> str:
    """`commit` for consecutive entries of one session, written together (a group commit):
    all of them land, or none. `data` is them encoded, when the caller has it."""
    run_id, offset, session = journal.run_id, entries[0]["offset"], entries[0]["session"]
    backoff = Backoff(clock, _FIRST_BACKOFF)
    for _ in range(APPEND_ATTEMPTS):
        try:
            return append(storage, run_id, entries, token, clock, data=data)
        except StorageError as exc:
            failure = exc
        if not isinstance(failure, ConflictError):  # a conflict is settled by the read back
            backoff.pause()
        snapshot = _read_back(storage, run_id, clock, failure)
        landed = landed_token(snapshot, run_id, entries)
        if landed is not None:  # the read-back inside `append` gave up; this one knows
            return landed
        if snapshot is None:
            raise FencedError(
                f"run {run_id} disappeared while session {session} wrote",
                run_id=run_id,
                offset=offset,
            ) from failure
        current = Journal.parse(snapshot.data, run_id)
        if current.max_session > session:
            newer = next(e for e in current.entries if e["session"] > session)
            canceled = current.state.status == "canceled"
            raise (RunCancelledError if canceled else FencedError)(
                f"run {run_id}: session {newer['session']} (offset {newer['offset']}) "
                f"superseded session {session}",
                run_id=run_id,
                offset=newer["offset"],
            ) from failure
        if current.next_offset != offset:
            raise FencedError(
                f"run {run_id}: another writer of session {session} appended at offset {offset}",
                run_id=run_id,
                offset=offset,
            ) from failure
        token = snapshot.token
    raise StorageError(
        f"run {run_id}: append at offset {offset} failed {APPEND_ATTEMPTS} times: {failure}",
        run_id=run_id,
        offset=offset,
    ) from failure


def _read_back(
    storage: Storage, run_id: str, clock: Clock, failure: StorageError
) -> Snapshot | None:
    """The journal as it is now, after a write that failed with `failure`: read until a read
    answers (backing off on `clock`), since what the caller does next depends on it. After
    `READ_ATTEMPTS` failed reads, the last read's `StorageError` (caused by `failure`)."""
    backoff = Backoff(clock, _FIRST_BACKOFF, attempts=READ_ATTEMPTS - 1)
    while True:
        try:
            return storage.read(run_id)
        except StorageError as exc:
            if not backoff.wait():
                raise exc from failure


def landed_token(
    snapshot: Snapshot | None, run_id: str, entries: Sequence[Mapping[str, Any]]
) -> str | None:
    """After an append reported failure: the journal's token if `entries` did land (they are
    its last entries, at their own offsets), else None.

    An ambiguous failure (the write committed, its response was lost) must not make the caller
    write the same entries again, nor give up on entries that are in the journal.
    """
    if snapshot is None:
        return None
    return snapshot.token if _ends_with(snapshot.data, run_id, entries) else None


def _ends_with(data: bytes, run_id: str, entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `entries` are exactly the last entries of the journal `data`, at their own
    offsets. Only its last lines are read: a long journal is not parsed to learn this."""
    end = data.rfind(b"\n") + 1  # a torn final line is not an entry
    start = end
    for _ in entries:
        if start == 0:
            return False
        start = data.rfind(b"\n", 0, start - 1) + 1
    first = entries[0]["offset"]
    lines = data[start : end - 1].split(b"\n")
    try:
        last = [read_entry(line, run_id, first + i) for i, line in enumerate(lines)]
    except JournalCorruptionError:  # not where these entries would be, or not entries at all
        return False
    return last == list(entries) and (start > 0 or first == 0)


class GroupCommit:
    """The appends of one open session, at `token`: numbered in the order they come, written
    together when they come concurrently.

    Whichever thread finds no write in progress writes everything queued in one `commit_all`
    (one `write` and one `fsync` on `LocalStorage`), while the others wait for it; an entry is
    returned to its caller only once the write that holds it returned. A failed write fails
    its entries and every entry queued after them (numbered after them, none is written).
    """

    def __init__(
        self, storage: Storage, journal: Journal, session: int, token: str, clock: Clock
    ) -> None:
        self.storage = storage
        self.journal = journal
        self.session = session
        self.token = token
        self.clock = clock
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)  # notified when a write returned
        self._waiting = 0  # threads waiting on `_written`
        self._queue: list[Queued] = []
        self._writing = False
        self._next_offset = journal.next_offset
        self._ending: str | None = None  # the terminal entry queued, not written yet

    def append(
        self, kind: str, fields: dict[str, Any], raw: tuple[str, bytes] | None = None
    ) -> Entry:
        """Journal an entry of `kind` in this session; return it once it is durable.

        `raw` is (a key of `fields`, its value encoded by `check_json_encoded`): the line is
        built around those bytes instead of encoding the value again.
        """
        return self.wait(self.queue(kind, fields, raw))

    def queue(
        self, kind: str, fields: dict[str, Any], raw: tuple[str, bytes] | None = None
    ) -> Queued:
        """Number the entry and queue it (the caller holds whatever orders its entries).
        `TerminalRunError` (`RunCancelledError` for a cancel) once the run ended or is ending."""
        with self._lock:
            self.journal.ensure_open()
            if self._ending is not None:
                raise TerminalRunError(
                    f"run {self.journal.run_id} is ending with {self._ending!r}",
                    run_id=self.journal.run_id,
                )
            # encoded once: the storage writes this line, the journal keeps it
            queued = Queued(
                *encode_entry(
                    kind,
                    self.session,
                    self._next_offset,
                    format_timestamp(self.clock.time()),
                    fields,
                    raw,
                )
            )
            self._queue.append(queued)
            self._next_offset += 1
            if kind in TERMINAL_TYPES:
                self._ending = kind
        return queued

    def wait(self, queued: Queued) -> Entry:
        """Wait until `queued` is written, writing the queue when no other thread is."""
        with self._lock:
            while not queued.done:
                if self._writing:
                    self._waiting += 1
                    try:
                        self._written.wait()
                    finally:
                        self._waiting -= 1
                    continue
                batch, self._queue = self._queue, []
                self._writing = True
                self._lock.release()
                try:
                    token = commit_all(
                        self.storage,
                        self.journal,
                        [item.entry for item in batch],
                        self.token,
                        self.clock,
                        b"".join([item.line for item in batch]),
                    )
                except BaseException as exc:
                    failure: BaseException | None = exc
                else:
                    failure = None
                finally:
                    self._lock.acquire()
                    self._writing = False
                if failure is None:
                    self.token = token
                    for item in batch:
                        self.journal.add(item.entry, line=item.line)
                        item.done = True
                else:  # the entries queued since were numbered after these: none is written
                    for item in (*batch, *self._queue):
                        item.error, item.done = failure, True
                    self._queue = []
                    self._next_offset, self._ending = self.journal.next_offset, None
                if self._waiting:
                    self._written.notify_all()
        if queued.error is not None:
            raise queued.error
        return queued.entry


class Queued:
    """An entry waiting for its group commit."""

    __slots__ = ("done", "entry", "error", "line")

    def __init__(self, entry: Entry, line: bytes) -> None:
        self.entry, self.line = entry, line
        self.done = False
        self.error: BaseException | None = None
