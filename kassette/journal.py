"""The journal: a run's entries, read from its bytes and checked, with the indexes replay needs.

A journal is one entry per line (see docs/journal-format.md and `kassette.codec`). `Journal.parse`
reads one: a torn final line (a crash mid-write) is ignored, anything else it cannot read raises
`JournalCorruptionError`. `Journal.add` folds a live entry in. Both keep the indexes replay needs
(steps, suspends and resumes by id, first record wins) and the run's state (`kassette.state`).

The codec's and the state's names are re-exported here, where they were first defined.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from kassette.codec import (
    KNOWN_TYPES,
    REQUIRED_TEXT,
    TERMINAL_TYPES,
    UTF8_ERRORS,
    CancelEntry,
    CompleteEntry,
    Entry,
    ErrorEntry,
    ErrorPayload,
    KnownEntry,
    ModelCall,
    ResumeEntry,
    Source,
    StartEntry,
    StepEntry,
    SuspendEntry,
    check_entry,
    check_json,
    decode_line,
    decode_vouched,
    encode,
    escapes_surrogate,
    event_id,
    event_name,
    format_timestamp,
    new_run_id,
    parse_timestamp,
    read_entry,
    shallow,
    too_deep,
    validate_name,
)
from kassette.errors import (
    CancelledError,
    EventNameCollisionError,
    EventNotPendingError,
    TerminalRunError,
)
from kassette.state import (
    ErrorInfo,
    RunState,
    RunStatus,
    Status,
    html_table,
    reduce_entry,
    reduce_run,
)

__all__ = [
    "KNOWN_TYPES",
    "REQUIRED_TEXT",
    "TERMINAL_TYPES",
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
    "ModelCall",
    "ResumeEntry",
    "RunState",
    "RunStatus",
    "Source",
    "StartEntry",
    "Status",
    "StepEntry",
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
_STEP_HEAD = (
    rb'\{"type":"step","session":([1-9][0-9]{0,17}),"offset":(0|[1-9][0-9]{0,17}),'
    rb'"timestamp":"([^"\\\n]*)","stepId":"[^"\\\n]*(?:\\.[^"\\\n]*)*","name":"'
)
_STEP_LINE = re.compile(_STEP_HEAD)
# a whole step line (without its `\n`), ending its object: `.*` goes to the line's end at once
# (groups: session and offset as written, `1,"offset":7`; session; offset; timestamp)
# (possessive: what follows a part never matches its last character, and backtracking costs)
_STEP_LINE_WHOLE = re.compile(
    rb'\{"type":"step","session":(([1-9][0-9]{0,17}+),"offset":(0|[1-9][0-9]{0,17}+)),'
    rb'"timestamp":"([^"\\\n]*+)","stepId":"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+","name":".*\}',
    re.DOTALL,
)
_ENVELOPE = operator.itemgetter(1)  # of a `_STEP_LINE_WHOLE` match: `1,"offset":7`
_NO_STATE = RunState()  # a run with no entries (immutable: shared)
_WRITTEN_KEPT = 4096  # how many offsets `_written` keeps written out, per session
_written_kept: dict[bytes, list[bytes]] = {}


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
        decoding step lines: a step's result does not change the run's status.

        A step line as kassette and upstream write it (`_STEP_LINE`) is checked for its
        envelope (type, session, the offset expected there, a timestamp), its `stepId` and
        `name`, for text and for ending its object; the rest (its result) is read by replay,
        `dump` and `kassette.explore`.
        Every other line is decoded and checked as `parse` does. When the checks made over the
        whole journal at once vouch for every line's text, the step lines are matched and
        checked by C loops, not one Python iteration each (`_vouched_status`): `kassette list`
        folds every run.
        """
        data = bytes(data)
        end = data.rfind(b"\n") + 1  # the complete lines end here; a torn line may follow
        # Checks that hold for every line when they hold for all of them at once, made in C
        # over the whole journal (the torn line too, which can only fail them); a step line
        # is checked on its own for what they do not show.
        text = data.isascii() or _is_text(data[:end])
        few_brackets = shallow(data)
        no_escape = not escapes_surrogate(data)
        if text and few_brackets and no_escape:
            status = _vouched_status(data, run_id)
            if status is not None:
                return status
        return _status_line_by_line(data, run_id, end, text, few_brackets, no_escape)

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
        """Raise `TerminalRunError` (`CancelledError` for a cancel) if the run has ended."""
        terminal = self.terminal
        if terminal is None:
            return
        error = CancelledError if terminal["type"] == "cancel" else TerminalRunError
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
        state, entries = self.state, self.entries
        if not entries:
            return _status(self.run_id, state, self.max_session, 0, 0, None, None)
        created = state.created_offset if state.created_offset is not None else 0
        return _status(
            self.run_id,
            state,
            self.max_session,
            len(entries),
            self.step_entries,
            entries[created].get("timestamp"),
            entries[-1].get("timestamp"),
        )


def _vouched_status(data: bytes, run_id: str) -> RunStatus | None:
    """`Journal.status_of` for a journal whose text the journal-wide checks vouch for: the step
    lines are matched and checked by C loops (`map`, `filter`, list comparisons), not one
    Python iteration each, and the other lines decoded by the JSON scanner alone. None when a
    line is not as expected there: the line by line fold then finds what, and says it as
    `parse` does."""
    lines = data.split(b"\n")
    del lines[-1]  # a torn line, or nothing after the last `\n`
    count = len(lines)
    heads = list(map(_STEP_LINE_WHOLE.fullmatch, lines))
    matched = list(filter(None, heads))
    others: list[int] = []  # the lines that are not step lines as kassette writes them
    index = -1
    for _ in range(count - len(matched)):
        index = heads.index(None, index + 1)
        others.append(index)
    max_session = 0
    if matched:
        # each step line's offset is its line's: compared with what the first step line's
        # session writes there, a session and offset at once, or one by one
        session = matched[0][2]
        envelopes, written = list(map(_ENVELOPE, matched)), _written(session, count)
        if others == [0] or others == [0, count - 1]:  # a start, steps, perhaps an end
            in_place = envelopes == written[1 : len(envelopes) + 1]
        else:
            in_place = _in_place(envelopes, written, others)
        if in_place:
            max_session = int(session)
        elif _in_place([step[3] for step in matched], _written(b"", count), others):
            max_session = max(map(int, {step[2] for step in matched}))
        else:
            return None
    state = _NO_STATE
    steps = len(matched)
    stamps: dict[int, Any] = {}  # the timestamps `created_at` may need: entry 0, non-steps
    entry: Entry | None = None
    for index in others:
        entry = decode_vouched(lines[index])
        if entry is None:
            return None
        entry = check_entry(entry, run_id, index, index + 1)
        if entry["session"] > max_session:
            max_session = entry["session"]
        if entry["type"] == "step":
            steps += 1
        else:
            state = reduce_entry(state, entry)
        stamps[index] = entry.get("timestamp")
    if others and others[-1] == count - 1:
        updated = entry.get("timestamp") if entry is not None else None
    elif matched:  # the last line is a step line
        updated = matched[-1][4].decode("utf-8", UTF8_ERRORS)
        if count == 1:
            stamps[0] = updated
    else:
        updated = None
    return _folded(
        run_id, state, max_session, count, steps, stamps, lines[0] if count else b"", updated
    )


def _in_place(values: list[bytes], expected: list[bytes], others: list[int]) -> bool:
    """Whether `values`, one per line but the lines `others`, are `expected` at their lines."""
    start = checked = 0
    for other in others:
        if values[checked : checked + other - start] != expected[start:other]:
            return False
        checked += other - start
        start = other + 1
    return values[checked:] == expected[start : start + len(values) - checked]


def _written(session: bytes, count: int) -> list[bytes]:
    """What a step line of `session` writes for its session and offset (`1,"offset":7`), or
    for its offset alone (`session` empty), for at least the offsets below `count`."""
    kept = _written_kept.get(session, [])
    if len(kept) >= count:
        return kept
    head = session + b',"offset":' if session else b""
    size = max(count, min(2 * len(kept), _WRITTEN_KEPT), 64)
    written = [b"%s%d" % (head, offset) for offset in range(size)]
    if size <= _WRITTEN_KEPT:
        if len(_written_kept) >= 16:  # journals of many sessions: rare; never grow unbounded
            _written_kept.clear()
        _written_kept[session] = written
    return written


def _status_line_by_line(
    data: bytes, run_id: str, end: int, text: bool, few_brackets: bool, no_escape: bool
) -> RunStatus:
    """`Journal.status_of`, a line at a time: the step lines that the journal-wide checks
    (`text`, `few_brackets`, `no_escape`) do not vouch for are checked on their own."""
    state, max_session, steps, count = _NO_STATE, 0, 0, 0
    stamps: dict[int, Any] = {}  # the timestamps `created_at` may need: entry 0, non-steps
    last: Any = None  # the last entry, or the match of the last step line
    session_text = b""  # a step line's session as written, while it repeats
    match_step = _STEP_LINE.match
    start = 0
    while start < end:
        stop = data.index(b"\n", start)
        step = match_step(data, start, stop)
        if (
            step is not None
            and int(step[2]) == count
            and data[stop - 1] == 0x7D  # `}`
            and (
                (text and few_brackets and no_escape)
                or _plain_text(data[start:stop], text, few_brackets, no_escape)
            )
        ):
            if step[1] != session_text:
                session_text = step[1]
                max_session = max(max_session, int(session_text))
            steps += 1
            last = step
        else:
            last = read_entry(data[start:stop], run_id, count, count + 1)
            max_session = max(max_session, last["session"])
            if last["type"] == "step":
                steps += 1
            else:
                state = reduce_entry(state, last)
            stamps[count] = last.get("timestamp")
        count += 1
        start = stop + 1
    if type(last) is not dict and last is not None:  # a step line's match
        last = {"timestamp": last[3].decode("utf-8", UTF8_ERRORS)}
        if count == 1:
            stamps[0] = last["timestamp"]
    stamp = last.get("timestamp") if last is not None else None
    first = data[: data.index(b"\n")] if count else b""
    return _folded(run_id, state, max_session, count, steps, stamps, first, stamp)


def _folded(
    run_id: str,
    state: RunState,
    sessions: int,
    entries: int,
    steps: int,
    stamps: dict[int, Any],
    first_line: bytes,
    updated_at: str | None,
) -> RunStatus:
    """The status a fold of `Journal.status_of` found. `stamps` holds the timestamps of the
    lines it decoded, by offset; entry 0's is read from `first_line` when the fold matched
    it as a step line, since `created_at` may need it."""
    if 0 not in stamps and entries:
        stamps[0] = read_entry(first_line, run_id, 0, 1).get("timestamp")
    created = state.created_offset if state.created_offset is not None else 0
    return _status(run_id, state, sessions, entries, steps, stamps.get(created), updated_at)


def _status(
    run_id: str,
    state: RunState,
    sessions: int,
    entries: int,
    steps: int,
    created_at: str | None,
    updated_at: str | None,
) -> RunStatus:
    # What `RunStatus(...)` builds, its fields given at once: a frozen dataclass's `__init__`
    # sets each of them through `object.__setattr__`, two thirds of the cost (`kassette list`
    # builds one per run). tests/test_journal.py checks this against the constructor.
    status = object.__new__(RunStatus)
    object.__setattr__(
        status,
        "__dict__",
        {
            "run_id": run_id,
            "status": state.status,
            "version": state.version,
            "source": dict(state.source) if state.source is not None else None,
            "sessions": sessions,
            "entries": entries,
            "steps": steps,
            "pending_events": state.pending_events,
            "result": state.result,
            "error": state.error,
            "created_at": created_at,
            "updated_at": updated_at,
        },
    )
    return status


def _plain_text(line: bytes, text: bool, few_brackets: bool, no_escape: bool) -> bool:
    """Whether a step line reads as text and is `plain`, checking only what the journal-wide
    checks (`text`, `few_brackets`, `no_escape`) did not show."""
    return (
        (text or _is_text(line))
        and (few_brackets or not too_deep(line))
        and (no_escape or not escapes_surrogate(line))
    )


def _is_text(line: bytes) -> bool:
    """Whether `line` reads as text by the journal's one rule (`UTF8_ERRORS`)."""
    try:
        line.decode("utf-8", UTF8_ERRORS)
    except UnicodeDecodeError:
        return False
    return True
