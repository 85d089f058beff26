"""The journal: a run's entries, read from its bytes and checked, with the indexes replay needs.

A journal is one entry per line (see docs/journal-format.md and `kassette._codec`). `Journal.parse`
reads one: a torn final line (a crash mid-write) is ignored, anything else it cannot read raises
`JournalCorruptionError`. `Journal.add` folds a live entry in. Both keep the indexes replay needs
(steps, suspends and resumes by id, first record wins) and the run's state (`kassette._state`).

The codec's and the state's names are re-exported here, where they were first defined.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from kassette._codec import (
    KNOWN_TYPES,
    REQUIRED_TEXT,
    TERMINAL_TYPES,
    CallRecord,
    CancelEntry,
    CompleteEntry,
    Entry,
    ErrorEntry,
    ErrorPayload,
    KnownEntry,
    ResumeEntry,
    Source,
    StartEntry,
    StepEntry,
    SuspendEntry,
    check_entry,
    check_json,
    decode_line,
    encode,
    event_id,
    event_name,
    format_timestamp,
    new_run_id,
    parse_timestamp,
    read_entry,
    validate_name,
)
from kassette._listing import folded_status, status_of
from kassette._state import (
    ErrorInfo,
    RunState,
    RunStatus,
    Status,
    html_table,
    reduce_entry,
    reduce_run,
)
from kassette.errors import (
    EventNameCollisionError,
    EventNotPendingError,
    RunCancelledError,
    TerminalRunError,
)

__all__ = [
    "KNOWN_TYPES",
    "REQUIRED_TEXT",
    "TERMINAL_TYPES",
    "CallRecord",
    "CancelEntry",
    "CompleteEntry",
    "Entries",
    "Entry",
    "EntryIndex",
    "ErrorEntry",
    "ErrorInfo",
    "ErrorPayload",
    "Journal",
    "KnownEntry",
    "ResumeEntry",
    "RunState",
    "RunStatus",
    "Source",
    "StartEntry",
    "Status",
    "StepEntry",
    "StepIds",
    "SuspendEntry",
    "check_entry",
    "check_json",
    "decode_line",
    "encode",
    "event_id",
    "event_name",
    "format_timestamp",
    "html_table",
    "new_run_id",
    "parse_timestamp",
    "reduce_entry",
    "reduce_run",
    "validate_name",
]

_T = TypeVar("_T")
# a step line as kassette and upstream write it: the envelope in this order, `stepId`, `name`
# (groups: session, offset, timestamp)


class Entries(Sequence[Entry]):
    """A run's entries in offset order, decoded when read.

    An entry parsed from a journal is kept as the position of its line in the journal's bytes,
    and an entry added live as its encoded line, and both are decoded on each access: as
    dicts, a journal takes about five times its size on disk in memory, and replay reads each
    entry once. An entry added without its line is kept as the dict it is.
    """

    __slots__ = ("_data", "_items")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: bytes = b"") -> None:
        self._data = data
        self._items: list[Entry | int | bytes] = []

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...
    def __getitem__(self, index: int | slice) -> Entry | list[Entry]:
        if isinstance(index, slice):
            return [self._decode(item) for item in self._items[index]]
        return self._decode(self._items[index])

    def __iter__(self) -> Iterator[Entry]:
        for item in self._items:
            yield self._decode(item)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Entries):
            other = list(other)
        return list(self) == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))

    def _append(self, item: Entry | int | bytes) -> None:
        self._items.append(item)

    def _decode(self, item: Entry | int | bytes) -> Entry:
        if type(item) is int:
            data = self._data
            return decode_line(data[item : data.index(b"\n", item)])  # type: ignore[no-any-return]
        if type(item) is bytes:
            return decode_line(item)  # type: ignore[no-any-return]
        return item  # type: ignore[return-value]


class EntryIndex(Mapping[str, Entry]):
    """Entries by step or event id, the first entry with each id; decoded when read."""

    __slots__ = ("_entries", "_offsets")

    def __init__(self, entries: Entries) -> None:
        self._entries = entries
        self._offsets: dict[str, int] = {}

    def __getitem__(self, key: str) -> Entry:
        return self._entries[self._offsets[key]]

    @overload
    def get(self, key: str, /) -> Entry | None: ...
    @overload
    def get(self, key: str, /, default: Entry | _T) -> Entry | _T: ...
    def get(self, key: str, /, default: object = None) -> object:
        offset = self._offsets.get(key)
        if offset is None:
            return default
        entries = self._entries
        return entries._decode(entries._items[offset])

    def __contains__(self, key: object) -> bool:
        return key in self._offsets

    def __iter__(self) -> Iterator[str]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def _add(self, key: str, offset: int) -> None:
        self._offsets.setdefault(key, offset)


@dataclass
class Journal:
    """The entries of one run, the indexes replay needs and the run's state, kept up to date
    by `add`.

    `steps`, `suspends` and `resumes` map step and event ids to their first entry: the first
    record is authoritative (a later duplicate, e.g. a second resume, never overrides it).
    """

    run_id: str
    entries: Entries = field(default_factory=Entries)
    steps: EntryIndex = field(init=False)
    suspends: EntryIndex = field(init=False)
    resumes: EntryIndex = field(init=False)
    state: RunState = field(default_factory=RunState)
    max_session: int = 0
    first_start: Entry | None = None
    step_entries: int = 0

    def __post_init__(self) -> None:
        self.steps = EntryIndex(self.entries)
        self.suspends = EntryIndex(self.entries)
        self.resumes = EntryIndex(self.entries)

    @classmethod
    def parse(cls, data: bytes, run_id: str) -> Journal:
        """Read a journal's bytes; a torn final line (no `\\n`) is ignored.

        The journal keeps `data` and decodes its entries again when they are read (see
        `Entries`), so it holds about the journal's size in memory, not five times that.
        """
        data = bytes(data)  # entries are decoded later: the bytes must not change under them
        journal = cls(run_id, Entries(data))
        start, end, number = 0, data.rfind(b"\n") + 1, 0
        while start < end:
            stop = data.index(b"\n", start)
            number += 1
            entry = read_entry(data[start:stop], run_id, len(journal.entries), number)
            journal._fold(entry, start)
            start = stop + 1
        return journal

    @staticmethod
    def status_of(data: bytes, run_id: str) -> RunStatus:
        """The run's status from its journal's bytes, as `parse(...).status()` gives it, without
        decoding step lines (`kassette._listing.status_of`: how `kassette list` reads a run)."""
        return status_of(data, run_id)

    @property
    def next_offset(self) -> int:
        return len(self.entries)

    def add(
        self, entry: Mapping[str, Any], *, line_number: int | None = None, line: bytes = b""
    ) -> None:
        """Check an entry's envelope and fold it into the indexes and the state.

        Given its encoded `line` (as written), the journal keeps that instead of the dict.
        """
        checked = check_entry(entry, self.run_id, len(self.entries), line_number)
        self._fold(checked, line or checked)

    def _fold(self, entry: Entry, item: Entry | int | bytes) -> None:
        """Fold the checked `entry` in, kept in `entries` as `item`: itself, its line, or its
        line's position."""
        self.entries._append(item)
        kind, offset, session = entry["type"], entry["offset"], entry["session"]
        if session > self.max_session:
            self.max_session = session
        if kind == "step":
            self.steps._add(entry["stepId"], offset)
            self.step_entries += 1
            return
        self.state = reduce_entry(self.state, entry)
        if kind == "suspend":
            self.suspends._add(event_id(entry), offset)
        elif kind == "resume":
            self.resumes._add(event_id(entry), offset)
        elif kind == "start" and self.first_start is None:
            self.first_start = entry

    @property
    def version(self) -> str | None:
        return self.state.version

    @property
    def source(self) -> Source | None:
        return self.state.source

    @property
    def terminal(self) -> Entry | None:
        """The entry that ended the run, if one did."""
        ended = self.state.ended_offset
        return self.entries[ended] if ended is not None else None

    def ensure_open(self) -> None:
        """Raise `TerminalRunError` (`RunCancelledError` for a cancel) if the run has ended."""
        terminal = self.terminal
        if terminal is None:
            return
        error = RunCancelledError if terminal["type"] == "cancel" else TerminalRunError
        raise error(
            f"run {self.run_id} already ended with {terminal['type']!r} at offset "
            f"{terminal['offset']}",
            run_id=self.run_id,
            offset=terminal["offset"],
        )

    @property
    def pending_events(self) -> tuple[str, ...]:
        """Ids of suspends with no resume yet, in the order they were journaled."""
        return self.state.pending_events

    def resolve_event(self, event: str) -> tuple[str, bool] | None:
        """Match `event` (an exact event id or a bare event name) to (event id, delivered).

        Returns None when nothing matches; raises `EventNameCollisionError` when a bare name
        matches several pending suspends.
        """
        if event in self.suspends:
            return event, event in self.resumes
        pending = [i for i in self.pending_events if event_name(self.suspends[i]) == event]
        if len(pending) > 1:
            raise EventNameCollisionError(
                f"run {self.run_id}: event {event!r} matches pending suspends "
                f"{', '.join(pending)}; resume one of them by its id",
                run_id=self.run_id,
            )
        if pending:
            return pending[0], False
        delivered = [i for i in self.resumes if event_name(self.resumes[i]) == event]
        return (delivered[0], True) if delivered else None

    def require_event(self, event: str) -> tuple[str, bool]:
        """`resolve_event`, or `EventNotPendingError` when the run never waited for `event`."""
        match = self.resolve_event(event)
        if match is None:
            raise EventNotPendingError(
                f"run {self.run_id} is not waiting for {event!r} (pending: "
                f"{', '.join(self.pending_events) or 'none'})",
                run_id=self.run_id,
            )
        return match

    def timed_out(self, event_id: str, now: float) -> str | None:
        """The `timeoutAt` of the suspend for `event_id` if it has passed at `now`, else None."""
        timeout_at = self.suspends[event_id].get("timeoutAt")
        if timeout_at is not None and parse_timestamp(timeout_at) <= now:
            return timeout_at  # type: ignore[no-any-return]
        return None

    def status(self) -> RunStatus:
        entries = self.entries
        updated = entries[-1].get("timestamp") if entries else None
        return folded_status(
            self.run_id,
            self.state,
            self.max_session,
            len(entries),
            self.step_entries,
            lambda offset: entries[offset].get("timestamp"),
            updated,
        )


class StepIds:
    """Step and event ids for one scope: `name`, `name#2`, ... each prefixed by the scope.

    The root scope has no prefix; a parallel branch's scope is `block/branch/`.
    """

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._counts: dict[str, int] = {}

    def next(self, name: str, what: str = "step") -> str:
        validate_name(name, what)
        count = self._counts.get(name, 0) + 1
        self._counts[name] = count
        return f"{self.prefix}{name}" if count == 1 else f"{self.prefix}{name}#{count}"
