"""The journal: a run's history as one JSON object per line, and everything derived from it.

The format is kassette's real API (see docs/journal-format.md). Each line is an entry with
`type`, `session`, `offset` (dense from 0, assigned at append) and `timestamp`, then fields of
its type. A run's status, its pending events and its replayable steps are all derived here,
from the entries alone. Readers skip entry types they do not know, ignore a torn final line (a
crash mid-write), and raise `JournalCorruptionError` for anything else they cannot read.
"""

from __future__ import annotations

import json
import json.scanner
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from kassette.errors import (
    EventNameCollisionError,
    InvalidArgumentError,
    JournalCorruptionError,
    NotSerializableError,
)

__all__ = [
    "TERMINAL_TYPES",
    "Entries",
    "EntryIndex",
    "ErrorInfo",
    "Journal",
    "RunStatus",
    "check_json",
    "encode",
    "format_timestamp",
    "validate_name",
    "validate_run_id",
]

Entry = dict[str, Any]
_T = TypeVar("_T")
RunState = Literal["running", "suspended", "completed", "failed", "canceled"]

TERMINAL_TYPES = frozenset({"complete", "error", "cancel"})
KNOWN_TYPES = frozenset({"start", "step", "suspend", "resume"}) | TERMINAL_TYPES
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_REQUIRED_TEXT = {
    "step": ("stepId", "name"),
    "suspend": ("eventId", "event"),
    "resume": ("eventId", "event"),
}
# what json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False) builds per
# call; built once, as encoding is on every append's path
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# what json.loads runs once past its checks (its memo of keys is per call: safe to share)
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_STATUS_OF_TERMINAL: dict[str, RunState] = {
    "complete": "completed",
    "error": "failed",
    "cancel": "canceled",
}


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is a safe file and object name, else raise before any I/O."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidArgumentError(
            f"invalid run id {run_id!r}: use 1-200 of A-Z a-z 0-9 . _ - , starting with a letter"
            " or digit"
        )
    return run_id


def validate_name(name: object, what: str = "step") -> str:
    """Step, event and branch names are non-empty strings without the reserved `#` and `/`."""
    if not isinstance(name, str) or not name or "#" in name or "/" in name:
        raise InvalidArgumentError(
            f"invalid {what} name {name!r}: names are non-empty and may not contain '#' or '/'"
        )
    return name


def check_json(value: object, what: str) -> Any:
    """Return `value` as replay will see it (via a JSON round trip), or raise a `TypeError`.

    Live code and replayed code must get the same value, so a tuple comes back as a list here
    too. Sets, bytes, arbitrary objects, NaN and infinities are refused.
    """
    try:
        text = _ENCODER.encode(value)
        text.encode()  # a lone surrogate passes json.dumps but cannot be written as UTF-8
    except (TypeError, ValueError) as exc:
        raise NotSerializableError(f"{what} is not JSON-serialisable: {exc}") from exc
    return json.loads(text)


def format_timestamp(epoch_seconds: float) -> str:
    """ISO 8601 UTC with milliseconds and `Z`, the journal's one timestamp format."""
    global _last_second
    millis = round(epoch_seconds * 1000)  # not int(): 1.001 * 1000 is 1000.999...
    seconds, ms = divmod(millis, 1000)
    cached_seconds, prefix = _last_second
    if seconds != cached_seconds:  # strftime is most of the cost; appends come many a second
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _last_second = (seconds, prefix)
    return f"{prefix}.{ms:03d}Z"


_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00")  # (epoch second, its text)


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch for a journal timestamp (any ISO 8601 form Python reads)."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def new_run_id() -> str:
    """A fresh run id: a uuid4 in hex."""
    import uuid  # imported when first needed, to keep `import kassette` light

    return uuid.uuid4().hex


def html_table(fields: dict[str, Any]) -> str:
    """Field names and their JSON values as a two-column HTML table (for Jupyter)."""
    import html

    rows = "".join(
        f"<tr><th style='text-align:left'>{html.escape(key)}</th>"
        f"<td style='text-align:left'>{html.escape(json.dumps(value, default=str))}</td></tr>"
        for key, value in fields.items()
    )
    return f"<table>{rows}</table>"


def encode(entry: Entry) -> bytes:
    """One entry as its journal line: compact JSON, UTF-8, `\\n`-terminated."""
    return (_ENCODER.encode(entry) + "\n").encode()


@dataclass(frozen=True)
class ErrorInfo:
    """The `name` and `message` of an error that ended a run."""

    name: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "message": self.message}


@dataclass(frozen=True)
class RunStatus:
    """A run's state, derived from its journal alone.

    `status` is "running" for a run that is in progress *or* crashed and not yet re-invoked:
    the journal cannot tell them apart, and both are continued by re-invoking.
    """

    run_id: str
    status: RunState
    version: str | None
    source: dict[str, Any] | None
    sessions: int
    entries: int
    steps: int
    pending_events: tuple[str, ...]
    result: Any
    error: ErrorInfo | None
    created_at: str | None
    updated_at: str | None

    def to_dict(self) -> dict[str, Any]:
        """The camelCase JSON object the CLI prints."""
        return {
            "runId": self.run_id,
            "status": self.status,
            "version": self.version,
            "source": self.source,
            "sessions": self.sessions,
            "entries": self.entries,
            "steps": self.steps,
            "pendingEvents": list(self.pending_events),
            "result": self.result,
            "error": self.error.to_dict() if self.error else None,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }

    def _repr_html_(self) -> str:
        return html_table(self.to_dict())


class Entries(Sequence[Entry]):
    """A run's entries in offset order, decoded when read.

    An entry parsed from a journal is kept as the position of its line in the journal's bytes
    and decoded on each access: as dicts, a journal takes about five times its size on disk in
    memory, and replay reads each entry once. Entries added live are kept as the dicts they are.
    """

    __slots__ = ("_data", "_items")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: bytes = b"") -> None:
        self._data = data
        self._items: list[Entry | int] = []

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

    def _append(self, item: Entry | int) -> None:
        self._items.append(item)

    def _decode(self, item: Entry | int) -> Entry:
        if type(item) is int:
            data = self._data
            return _decode_line(data[item : data.index(b"\n", item)])  # type: ignore[no-any-return]
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
    """The entries of one run plus the indexes replay and status need, kept up to date by `add`.

    `steps`, `suspends` and `resumes` map step and event ids to their first entry: the first
    record is authoritative (a later duplicate, e.g. a second resume, never overrides it).
    """

    run_id: str
    entries: Entries = field(default_factory=Entries)
    steps: EntryIndex = field(init=False)
    suspends: EntryIndex = field(init=False)
    resumes: EntryIndex = field(init=False)
    max_session: int = 0
    first_start: Entry | None = None
    version: str | None = None
    source: dict[str, Any] | None = None
    terminal: Entry | None = None
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
            line = data[start:stop]
            number += 1
            try:
                entry = _decode_line(line)
            except ValueError:
                entry = None
            if not isinstance(entry, dict):
                raise JournalCorruptionError(
                    f"run {run_id}: line {number} (offset {len(journal.entries)}) is not a JSON"
                    f" object: {line[:80]!r}",
                    run_id=run_id,
                    offset=len(journal.entries),
                )
            journal._fold(entry, start, number)
            start = stop + 1
        return journal

    @property
    def next_offset(self) -> int:
        return len(self.entries)

    def add(self, entry: Entry, *, line_number: int | None = None) -> None:
        """Check an entry's envelope and fold it into the indexes."""
        self._fold(entry, entry, line_number)

    def _fold(self, entry: Entry, item: Entry | int, line_number: int | None) -> None:
        """`add` `entry`, kept in `entries` as `item`: itself, or its line's position."""
        expected = len(self.entries)
        offset, session = entry.get("offset"), entry.get("session")
        if type(offset) is not int or offset != expected:
            where = _line_label(line_number, expected)
            kind = (
                "duplicate offset"
                if isinstance(offset, int) and offset < expected
                else ("offset gap" if isinstance(offset, int) else "missing offset")
            )
            raise JournalCorruptionError(
                f"run {self.run_id}: {kind} at {where}: expected offset {expected}, got {offset!r}",
                run_id=self.run_id,
                offset=expected,
            )
        if type(session) is not int or session < 1 or not isinstance(entry.get("type"), str):
            where = _line_label(line_number, expected)
            raise JournalCorruptionError(
                f"run {self.run_id}: {where} (offset {offset}) lacks a valid type or session",
                run_id=self.run_id,
                offset=offset,
            )
        kind = entry["type"]
        for key in _REQUIRED_TEXT.get(kind, ()):
            if not isinstance(entry.get(key), str):
                where = _line_label(line_number, expected)
                raise JournalCorruptionError(
                    f"run {self.run_id}: {kind} entry at {where} (offset {offset}) lacks {key!r}",
                    run_id=self.run_id,
                    offset=offset,
                )
        self.entries._append(item)
        if session > self.max_session:
            self.max_session = session
        if kind == "step":
            self.steps._add(entry["stepId"], offset)
            self.step_entries += 1
        elif kind == "suspend":
            self.suspends._add(entry["eventId"], offset)
        elif kind == "resume":
            self.resumes._add(entry["eventId"], offset)
        elif kind == "start":
            if self.first_start is None:
                self.first_start = entry
            if self.version is None and entry.get("version") is not None:
                self.version = entry["version"]
            if entry.get("source") is not None:  # a fork of a fork copies its parent's link
                self.source = entry["source"]
                # the copied entries are the source's; the code continuing a fork is the fork's
                self.version = entry.get("version")
        elif kind in TERMINAL_TYPES and self.terminal is None:
            self.terminal = entry

    @property
    def pending_events(self) -> tuple[str, ...]:
        """Ids of suspends with no resume yet, in the order they were journaled."""
        return tuple(event_id for event_id in self.suspends if event_id not in self.resumes)

    def resolve_event(self, event: str) -> tuple[str, bool] | None:
        """Match `event` (an exact event id or a bare event name) to (event id, delivered).

        Returns None when nothing matches; raises `EventNameCollisionError` when a bare name
        matches several pending suspends.
        """
        if event in self.suspends:
            return event, event in self.resumes
        pending = [i for i in self.pending_events if self.suspends[i]["event"] == event]
        if len(pending) > 1:
            raise EventNameCollisionError(
                f"run {self.run_id}: event {event!r} matches pending suspends "
                f"{', '.join(pending)}; resume one of them by its id",
                run_id=self.run_id,
            )
        if pending:
            return pending[0], False
        delivered = [i for i in self.resumes if self.resumes[i]["event"] == event]
        return (delivered[0], True) if delivered else None

    @property
    def state(self) -> RunState:
        if self.terminal is not None:
            return _STATUS_OF_TERMINAL[self.terminal["type"]]
        return "suspended" if self.pending_events else "running"

    def status(self) -> RunStatus:
        terminal = self.terminal
        error = None
        if terminal is not None and terminal["type"] == "error":
            raw = terminal.get("error") or {}
            error = ErrorInfo(str(raw.get("name", "Error")), str(raw.get("message", "")))
        first, last = (self.entries[0], self.entries[-1]) if self.entries else (None, None)
        return RunStatus(
            run_id=self.run_id,
            status=self.state,
            version=self.version,
            source=self.source,
            sessions=self.max_session,
            entries=len(self.entries),
            steps=self.step_entries,
            pending_events=self.pending_events,
            result=terminal.get("result") if terminal and terminal["type"] == "complete" else None,
            error=error,
            created_at=first.get("timestamp") if first else None,
            updated_at=last.get("timestamp") if last else None,
        )


def _decode_line(line: bytes) -> Any:
    """`json.loads(line)`, less its wrappers: a line that starts with `{"` is UTF-8 and its
    value starts at once, so the C scanner can be called directly.

    Every replayed entry is decoded twice (see `Entries`), so the saving counts.
    """
    if not line.startswith(b'{"'):
        return json.loads(line)
    text = line.decode("utf-8", "surrogatepass")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration as stop:  # the scanner's "no value here", as raw_decode reports it
        raise json.JSONDecodeError("Expecting value", text, stop.value) from None
    if end != len(text) and text[end:].strip(" \t\n\r"):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _line_label(line_number: int | None, offset: int) -> str:
    """Where a bad entry is, for error messages (built only on the error path)."""
    return f"line {line_number if line_number is not None else offset + 1}"
