"""The journal: a run's history as one JSON object per line, and everything derived from it.

The format is kassette's real API (see docs/journal-format.md). Each line is an entry with
`type`, `session`, `offset` (dense from 0, assigned at append) and `timestamp`, then fields of
its type. A run's status, its pending events and its replayable steps are all derived here,
from the entries alone. Readers skip entry types they do not know, ignore a torn final line (a
crash mid-write), and raise `JournalCorruptionError` for anything else they cannot read.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from kassette.errors import (
    EventNameCollisionError,
    InvalidArgumentError,
    JournalCorruptionError,
    NotSerializableError,
)

__all__ = [
    "TERMINAL_TYPES",
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
RunState = Literal["running", "suspended", "completed", "failed", "canceled"]

TERMINAL_TYPES = frozenset({"complete", "error", "cancel"})
KNOWN_TYPES = frozenset({"start", "step", "suspend", "resume"}) | TERMINAL_TYPES
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_REQUIRED_TEXT = {
    "step": ("stepId", "name"),
    "suspend": ("eventId", "event"),
    "resume": ("eventId", "event"),
}
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
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode()  # a lone surrogate passes json.dumps but cannot be written as UTF-8
    except (TypeError, ValueError) as exc:
        raise NotSerializableError(f"{what} is not JSON-serialisable: {exc}") from exc
    return json.loads(text)


def format_timestamp(epoch_seconds: float) -> str:
    """ISO 8601 UTC with milliseconds and `Z`, the journal's one timestamp format."""
    millis = round(epoch_seconds * 1000)  # not int(): 1.001 * 1000 is 1000.999...
    seconds, ms = divmod(millis, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ms:03d}Z"


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch for a journal timestamp (any ISO 8601 form Python reads)."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def encode(entry: Entry) -> bytes:
    """One entry as its journal line: compact JSON, UTF-8, `\\n`-terminated."""
    return (
        json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
    ).encode()


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
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(key)}</th>"
            f"<td style='text-align:left'>{html.escape(json.dumps(value, default=str))}</td></tr>"
            for key, value in self.to_dict().items()
        )
        return f"<table>{rows}</table>"


@dataclass
class Journal:
    """The entries of one run plus the indexes replay and status need, kept up to date by `add`.

    `steps`, `suspends` and `resumes` map step and event ids to their first entry: the first
    record is authoritative (a later duplicate, e.g. a second resume, never overrides it).
    """

    run_id: str
    entries: list[Entry] = field(default_factory=list)
    steps: dict[str, Entry] = field(default_factory=dict)
    suspends: dict[str, Entry] = field(default_factory=dict)
    resumes: dict[str, Entry] = field(default_factory=dict)
    max_session: int = 0
    first_start: Entry | None = None
    version: str | None = None
    source: dict[str, Any] | None = None
    terminal: Entry | None = None

    @classmethod
    def parse(cls, data: bytes, run_id: str) -> Journal:
        """Read a journal's bytes; a torn final line (no `\\n`) is ignored."""
        journal = cls(run_id)
        for number, line in enumerate(_complete_lines(data), start=1):
            try:
                entry = json.loads(line)
            except ValueError:
                entry = None
            if not isinstance(entry, dict):
                raise JournalCorruptionError(
                    f"run {run_id}: line {number} (offset {len(journal.entries)}) is not a JSON"
                    f" object: {line[:80]!r}",
                    run_id=run_id,
                    offset=len(journal.entries),
                )
            journal.add(entry, line_number=number)
        return journal

    @property
    def next_offset(self) -> int:
        return len(self.entries)

    def add(self, entry: Entry, *, line_number: int | None = None) -> None:
        """Check an entry's envelope and fold it into the indexes."""
        expected = len(self.entries)
        where = f"line {line_number if line_number is not None else expected + 1}"
        offset, session = entry.get("offset"), entry.get("session")
        if type(offset) is not int or offset != expected:
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
            raise JournalCorruptionError(
                f"run {self.run_id}: {where} (offset {offset}) lacks a valid type or session",
                run_id=self.run_id,
                offset=offset,
            )
        kind = entry["type"]
        for key in _REQUIRED_TEXT.get(kind, ()):
            if not isinstance(entry.get(key), str):
                raise JournalCorruptionError(
                    f"run {self.run_id}: {kind} entry at {where} (offset {offset}) lacks {key!r}",
                    run_id=self.run_id,
                    offset=offset,
                )
        self.entries.append(entry)
        self.max_session = max(self.max_session, session)
        if kind == "step":
            self.steps.setdefault(entry["stepId"], entry)
        elif kind == "suspend":
            self.suspends.setdefault(entry["eventId"], entry)
        elif kind == "resume":
            self.resumes.setdefault(entry["eventId"], entry)
        elif kind == "start":
            if self.first_start is None:
                self.first_start = entry
            if self.version is None and entry.get("version") is not None:
                self.version = entry["version"]
            if entry.get("source") is not None:  # a fork of a fork copies its parent's link
                self.source = entry["source"]
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
            steps=sum(1 for e in self.entries if e["type"] == "step"),
            pending_events=self.pending_events,
            result=terminal.get("result") if terminal and terminal["type"] == "complete" else None,
            error=error,
            created_at=first.get("timestamp") if first else None,
            updated_at=last.get("timestamp") if last else None,
        )


def _complete_lines(data: bytes) -> Iterator[bytes]:
    """Each `\\n`-terminated line, without its newline; a torn tail is not yielded."""
    start = 0
    end = data.rfind(b"\n") + 1
    while start < end:
        stop = data.index(b"\n", start)
        yield data[start:stop]
        start = stop + 1
