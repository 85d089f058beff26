"""The journal: a run's history as one JSON object per line, and everything derived from it.

The format is kassette's real API (see docs/journal-format.md). Each line is an entry with
`type`, `session`, `offset` (dense from 0, assigned at append) and `timestamp`, then fields of
its type; the `TypedDict`s below spell out kassette's own types. A run's state (status,
version, fork source, pending events, result, error) is derived by one pure reducer,
`reduce_entry`, from the entries alone: core, the CLI, explore's Arrow path and koto all fold
with it. Readers skip entry types they do not know, ignore a torn final line (a crash
mid-write), and raise `JournalCorruptionError` for anything else they cannot read.
"""

from __future__ import annotations

import json
import json.scanner
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, NoReturn, NotRequired, TypedDict, TypeVar, overload

from kassette.errors import (
    EventNameCollisionError,
    InvalidArgumentError,
    JournalCorruptionError,
    NotSerializableError,
)

__all__ = [
    "REQUIRED_TEXT",
    "TERMINAL_TYPES",
    "CancelEntry",
    "CompleteEntry",
    "Entries",
    "EntryIndex",
    "ErrorEntry",
    "ErrorInfo",
    "Journal",
    "KnownEntry",
    "ResumeEntry",
    "RunState",
    "RunStatus",
    "Source",
    "StartEntry",
    "StepEntry",
    "SuspendEntry",
    "check_entry",
    "check_json",
    "encode",
    "event_id",
    "event_name",
    "format_timestamp",
    "reduce_entry",
    "reduce_run",
    "validate_name",
]

Entry = dict[str, Any]
_T = TypeVar("_T")
Status = Literal["running", "suspended", "completed", "failed", "canceled"]

TERMINAL_TYPES = frozenset({"complete", "error", "cancel"})
KNOWN_TYPES = frozenset({"start", "step", "suspend", "resume"}) | TERMINAL_TYPES
# The text fields that replay and the run's state are keyed by, per type: each tuple needs one
# of its keys. Upstream (TypeScript) kassette names a suspend's and a resume's event `name`.
REQUIRED_TEXT = {
    "step": (("stepId",), ("name",)),
    "suspend": (("eventId", "name"),),
    "resume": (("eventId", "name"),),
}
# what json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False) builds per
# call; built once, as encoding is on every append's path
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# what json.loads runs once past its checks (its memo of keys is per call: safe to share)
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_STATUS_OF_TERMINAL: dict[str, Status] = {
    "complete": "completed",
    "error": "failed",
    "cancel": "canceled",
}


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
    """Seconds since the epoch for a journal timestamp (any ISO 8601 form Python reads; one
    without a zone is UTC). `ValueError` for anything else."""
    from datetime import UTC, datetime

    moment = datetime.fromisoformat(text)
    return (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment).timestamp()


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


def encode(entry: Mapping[str, Any]) -> bytes:
    """One entry as its journal line: compact JSON, UTF-8, `\\n`-terminated."""
    return (_ENCODER.encode(entry) + "\n").encode()


# -- the entry types ---------------------------------------------------------------------------


class _Envelope(TypedDict):
    """What every entry has; `offset` is dense from 0, `session` counts invocations from 1."""

    session: int
    offset: int
    timestamp: str


class Source(TypedDict):
    """Where a fork came from: the source run and the offset its copied entries stop before."""

    runId: str
    fromOffset: int


class StartEntry(_Envelope):
    """Opens a session. The first start records the run's input; a fork's own start has
    `source`, and `version` names the code that continues the run from there."""

    type: Literal["start"]
    metadata: Any
    version: NotRequired[str]
    source: NotRequired[Source]


class StepEntry(_Envelope):
    """A step's result, replayed instead of running the step again."""

    type: Literal["step"]
    stepId: str
    name: str
    result: Any
    kind: NotRequired[Literal["sleep", "parallel"]]
    attempts: NotRequired[int]
    durationMs: NotRequired[float]


class SuspendEntry(_Envelope):
    """The run waits for an event; pending until a resume with the same `eventId`."""

    type: Literal["suspend"]
    eventId: str
    event: str
    reason: NotRequired[str]
    timeoutAt: NotRequired[str]


class ResumeEntry(_Envelope):
    """The value delivered for a suspend; the first one for an `eventId` is final."""

    type: Literal["resume"]
    eventId: str
    event: str
    value: Any


class CompleteEntry(_Envelope):
    type: Literal["complete"]
    result: Any


class ErrorPayload(TypedDict, total=False):
    name: str
    message: str
    traceback: str


class ErrorEntry(_Envelope):
    type: Literal["error"]
    error: ErrorPayload


class CancelEntry(_Envelope):
    type: Literal["cancel"]
    reason: str | None


KnownEntry = (
    StartEntry | StepEntry | SuspendEntry | ResumeEntry | CompleteEntry | ErrorEntry | CancelEntry
)


def check_entry(entry: object, run_id: str, expected: int, line_number: int | None = None) -> Entry:
    """Return `entry` if it can be the entry at offset `expected`, else raise
    `JournalCorruptionError`: a JSON object with the envelope, and for kassette's own types the
    text fields replay and the run's state are keyed by. Every reader checks with this."""
    if type(entry) is dict:
        offset, session, kind = entry.get("offset"), entry.get("session"), entry.get("type")
        if (
            type(offset) is int
            and offset == expected
            and type(session) is int
            and session >= 1
            and type(kind) is str
        ):
            for keys in REQUIRED_TEXT.get(kind, ()):  # on every entry read: no generators
                for key in keys:
                    if type(entry.get(key)) is str:
                        break
                else:
                    break
            else:
                return entry
    _corrupt(entry, run_id, expected, line_number)


def _corrupt(entry: object, run_id: str, expected: int, line_number: int | None) -> NoReturn:
    """Raise the `JournalCorruptionError` that says what is wrong with `entry`."""
    where = f"line {line_number if line_number is not None else expected + 1}"
    if not isinstance(entry, dict):
        raise JournalCorruptionError(
            f"run {run_id}: {where} (offset {expected}) is not a JSON object",
            run_id=run_id,
            offset=expected,
        )
    offset, session = entry.get("offset"), entry.get("session")
    if type(offset) is not int or offset != expected:
        kind = (
            "duplicate offset"
            if isinstance(offset, int) and offset < expected
            else ("offset gap" if isinstance(offset, int) else "missing offset")
        )
        raise JournalCorruptionError(
            f"run {run_id}: {kind} at {where}: expected offset {expected}, got {offset!r}",
            run_id=run_id,
            offset=expected,
        )
    if type(session) is not int or session < 1 or not isinstance(entry.get("type"), str):
        raise JournalCorruptionError(
            f"run {run_id}: {where} (offset {offset}) lacks a valid type or session",
            run_id=run_id,
            offset=offset,
        )
    keys = next(
        keys
        for keys in REQUIRED_TEXT[entry["type"]]
        if not any(isinstance(entry.get(key), str) for key in keys)
    )
    raise JournalCorruptionError(
        f"run {run_id}: {entry['type']} entry at {where} (offset {offset}) lacks "
        f"{' or '.join(map(repr, keys))}",
        run_id=run_id,
        offset=offset,
    )


def event_id(entry: Mapping[str, Any]) -> str:
    """The id of a checked suspend's or resume's event: `eventId`, or upstream's `name`."""
    value = entry.get("eventId")
    return value if isinstance(value, str) else entry["name"]


def event_name(entry: Mapping[str, Any]) -> str:
    """The event a checked suspend waits for (or a resume delivers): `event`, else its id."""
    value = entry.get("event")
    return value if isinstance(value, str) else event_id(entry)


# -- the run's state: one reducer over the entries -----------------------------------------------


@dataclass(frozen=True)
class ErrorInfo:
    """The `name` and `message` of an error that ended a run."""

    name: str
    message: str

    @classmethod
    def of(cls, error: object) -> ErrorInfo:
        """From an `error` entry's payload, whatever a foreign writer put there."""
        if isinstance(error, dict):
            return cls(str(error.get("name", "Error")), str(error.get("message", "")))
        return cls("Error", str(error))

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message else self.name

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "message": self.message}


class RunState(NamedTuple):
    """What a run's entries say about it, as `reduce_entry` folds them in offset order.

    `created_offset` is the offset of the entry that created the run as it is: its first
    `start`, or for a fork its own `start` (the entries before it are the source's).
    `ended_offset` is the offset of the terminal entry; nothing after it counts.
    """

    status: Status = "running"
    version: str | None = None
    source: Source | None = None
    pending_events: tuple[str, ...] = ()
    delivered: frozenset[str] = frozenset()
    result: Any = None
    error: ErrorInfo | None = None
    created_offset: int | None = None
    ended_offset: int | None = None


def reduce_entry(state: RunState, entry: Mapping[str, Any]) -> RunState:
    """The run's state after `entry` (a checked entry; see `check_entry`).

    Pure: `state` is not modified. Steps and entry types kassette does not know leave the
    state as it is, so a reader may fold only the other entries.
      - `start`: the first one with a string `version` sets the version; one with `source`
        (a fork's own start, or a fork of a fork's copy of it) sets the source, and the version
        becomes its own: the code continuing a fork is the fork's.
      - `suspend` makes its event pending unless it was delivered; `resume` delivers it.
      - `complete`, `error`, `cancel`: the first one ends the run, with its result or error.
    """
    kind = entry["type"]
    if kind == "step" or kind not in KNOWN_TYPES or state.ended_offset is not None:
        return state
    if kind == "start":
        version = entry.get("version")
        version = version if isinstance(version, str) else None
        source = entry.get("source")
        created = state.created_offset
        if isinstance(source, dict):
            return state._replace(source=source, version=version, created_offset=entry["offset"])  # type: ignore[arg-type]
        if state.version is None and version is not None:
            state = state._replace(version=version)
        return state if created is not None else state._replace(created_offset=entry["offset"])
    if kind == "suspend":
        key = event_id(entry)
        if key in state.delivered or key in state.pending_events:
            return state
        return _settled(state, (*state.pending_events, key), state.delivered)
    if kind == "resume":
        key = event_id(entry)
        if key in state.delivered:
            return state
        pending = tuple(e for e in state.pending_events if e != key)
        return _settled(state, pending, state.delivered | {key})
    return state._replace(
        status=_STATUS_OF_TERMINAL[kind],
        result=entry.get("result") if kind == "complete" else None,
        error=ErrorInfo.of(entry.get("error")) if kind == "error" else None,
        ended_offset=entry["offset"],
    )


def reduce_run(entries: Iterable[Mapping[str, Any]]) -> RunState:
    """The state of a run with these entries (checked, in offset order)."""
    state = RunState()
    for entry in entries:
        state = reduce_entry(state, entry)
    return state


def _settled(state: RunState, pending: tuple[str, ...], delivered: frozenset[str]) -> RunState:
    """`state` with these events, and the status that follows from them."""
    status: Status = "suspended" if pending else "running"
    return state._replace(status=status, pending_events=pending, delivered=delivered)


@dataclass(frozen=True)
class RunStatus:
    """A run's state, derived from its journal alone.

    `status` is "running" for a run that is in progress *or* crashed and not yet re-invoked:
    the journal cannot tell them apart, and both are continued by re-invoking. `created_at`
    is when the run came to be: its first entry's time, or for a fork its own `start`'s.
    """

    run_id: str
    status: Status
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
            try:
                entry = _decode_line(data[start:stop])
            except ValueError:
                entry = None
            journal._fold(entry, start, number)
            start = stop + 1
        return journal

    @property
    def next_offset(self) -> int:
        return len(self.entries)

    def add(self, entry: Mapping[str, Any], *, line_number: int | None = None) -> None:
        """Check an entry's envelope and fold it into the indexes and the state."""
        self._fold(entry, entry, line_number)  # type: ignore[arg-type]  # a dict at runtime

    def _fold(self, entry: object, item: Entry | int, line_number: int | None) -> None:
        """`add` `entry`, kept in `entries` as `item`: itself, or its line's position."""
        entry = check_entry(entry, self.run_id, len(self.entries), line_number)
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

    def status(self) -> RunStatus:
        state, entries = self.state, self.entries
        created = state.created_offset if state.created_offset is not None else 0
        return RunStatus(
            run_id=self.run_id,
            status=state.status,
            version=state.version,
            source=dict(state.source) if state.source is not None else None,
            sessions=self.max_session,
            entries=len(entries),
            steps=self.step_entries,
            pending_events=state.pending_events,
            result=state.result,
            error=state.error,
            created_at=entries[created].get("timestamp") if entries else None,
            updated_at=entries[-1].get("timestamp") if entries else None,
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
