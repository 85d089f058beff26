"""The append protocol: how kassette writes a journal, and how it knows a write landed.

Every append is a compare-and-swap on the storage token of the last read (`token=None` creates
the run). A write that reports failure may still have landed (a timeout after the commit, a
retried request conflicting with its own first attempt), so a failure is settled by reading
the journal back: entries that are there count as written, and nothing is journaled twice.
`commit` adds the session's rules on top: a newer session there means this one is fenced
(`FencedError`, or `CancelledError` when that session canceled the run); otherwise it retries
at the new token, backing off on the injected clock after I/O errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kassette.clock import Clock
from kassette.codec import Entry, encode
from kassette.errors import (
    CancelledError,
    ConflictError,
    FencedError,
    RunNotFoundError,
    StorageError,
)
from kassette.journal import Journal
from kassette.storage import Snapshot, Storage, validate_run_id

__all__ = ["APPEND_ATTEMPTS", "READ_ATTEMPTS", "append", "commit", "commit_all", "read"]

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
        landed = _landed(snapshot, run_id, entries)
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
    delay = _FIRST_BACKOFF
    for _ in range(APPEND_ATTEMPTS):
        try:
            return append(storage, run_id, entries, token, clock, data=data)
        except StorageError as exc:
            failure = exc
        if not isinstance(failure, ConflictError):
            clock.sleep(delay)
            delay *= 2
        snapshot = _read_back(storage, run_id, clock, failure)
        landed = _landed(snapshot, run_id, entries)
        if landed is not None:  # the read-back inside `append` gave up; this one knows
            return landed
        if snapshot is None:
            raise FencedError(
                f"run {run_id} disappeared while session {session} wrote",
                run_id=run_id,
                offset=offset,
            ) from failure
        current = Journal.parse(snapshot.data, run_id)  # `_landed` parsed it: it reads
        if current.max_session > session:
            newer = next(e for e in current.entries if e["session"] > session)
            canceled = current.state.status == "canceled"
            raise (CancelledError if canceled else FencedError)(
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
    delay = _FIRST_BACKOFF
    for attempt in range(READ_ATTEMPTS):
        try:
            return storage.read(run_id)
        except StorageError as exc:
            if attempt == READ_ATTEMPTS - 1:
                raise exc from failure
        clock.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def _landed(
    snapshot: Snapshot | None, run_id: str, entries: Sequence[Mapping[str, Any]]
) -> str | None:
    """After an append reported failure: the journal's token if `entries` did land (they are
    its last entries, at their own offsets), else None.

    An ambiguous failure (the write committed, its response was lost) must not make the caller
    write the same entries again, nor give up on entries that are in the journal.
    """
    if snapshot is None:
        return None
    return snapshot.token if _ends_with(Journal.parse(snapshot.data, run_id), entries) else None


def _ends_with(journal: Journal, entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `entries` are exactly the journal's last entries, at their own offsets."""
    first = entries[0]["offset"]
    return journal.next_offset == first + len(entries) and journal.entries[first:] == entries
