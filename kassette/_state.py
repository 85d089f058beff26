"""A run's state: what its entries say about it, folded by one pure reducer.

`reduce_entry` takes a `RunState` and a checked entry (see `kassette._codec.check_entry`) and
returns the state after it: status, version, fork source, pending events, result, error.
Every reader folds with it: `Journal`, the CLI, explore's Arrow path and koto. `RunStatus` is
the state as the public API and the CLI report it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from kassette._codec import KNOWN_TYPES, Source, event_id

__all__ = [
    "ErrorInfo",
    "RunState",
    "RunStatus",
    "Status",
    "html_table",
    "reduce_entry",
    "reduce_run",
]

Status = Literal["running", "suspended", "completed", "failed", "canceled"]
_STATUS_OF_TERMINAL: dict[str, Status] = {
    "complete": "completed",
    "error": "failed",
    "cancel": "canceled",
}


def html_table(fields: dict[str, Any]) -> str:
    """Field names and their values as a two-column HTML table (for Jupyter): for reading, so
    JSON with spaces, and anything else as its `str`."""
    rows = "".join(
        f"<tr><th style='text-align:left'>{html.escape(key)}</th>"
        f"<td style='text-align:left'>{html.escape(json.dumps(value, default=str))}</td></tr>"
        for key, value in fields.items()
    )
    return f"<table>{rows}</table>"


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
    `ended_offset` is the offset of the terminal entry; nothing after it counts. `params` and
    `input` are what the entry that created the run records (its `params`, its `metadata`).
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
    params: dict[str, Any] | None = None
    input: Any = None

    @property
    def creation_offset(self) -> int:
        """The offset of the entry whose time is the run's creation time (`created_at`, the
        runs frame's `started_at`) and after which a fork's own entries begin:
        `created_offset`, or entry 0 for a journal whose first entry is no `start`."""
        return 0 if self.created_offset is None else self.created_offset


def reduce_entry(state: RunState, entry: Mapping[str, Any]) -> RunState:
    """The run's state after `entry` (a checked entry; see `check_entry`).

    Pure: `state` is not modified. Steps and entry types kassette does not know leave the
    state as it is, so a reader may fold only the other entries.
      - `start`: the first one with a string `version` sets the version; one with `source`
        (a fork's own start, or a fork of a fork's copy of it) sets the source, and the version
        becomes its own: the code continuing a fork is the fork's. The start that creates the
        run (the first, or a fork's own) sets `params` and `input`.
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
            return state._replace(
                source=source,  # type: ignore[arg-type]
                version=version,
                created_offset=entry["offset"],
                params=_params(entry),
                input=entry.get("metadata"),
            )
        if state.version is not None:
            version = state.version
        if created is not None:
            return state if version == state.version else state._replace(version=version)
        # one copy, by the constructor with every field in order (a third of `_replace`'s
        # cost): a status fold reads a start in every run
        return RunState(
            state.status,
            version,
            state.source,
            state.pending_events,
            state.delivered,
            state.result,
            state.error,
            entry["offset"],
            state.ended_offset,
            _params(entry),
            entry.get("metadata"),
        )
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
    return RunState(  # every field in order, as above
        _STATUS_OF_TERMINAL[kind],
        state.version,
        state.source,
        state.pending_events,
        state.delivered,
        entry.get("result") if kind == "complete" else None,
        ErrorInfo.of(entry.get("error")) if kind == "error" else None,
        state.created_offset,
        entry["offset"],
        state.params,
        state.input,
    )


def _params(start: Mapping[str, Any]) -> dict[str, Any] | None:
    """A start's `params`, when it records a JSON object."""
    params = start.get("params")
    return params if isinstance(params, dict) else None


def reduce_run(entries: Iterable[Mapping[str, Any]]) -> RunState:
    """The state of a run with these entries (checked, in offset order)."""
    state = RunState()
    for entry in entries:
        state = reduce_entry(state, entry)
    return state


def _settled(state: RunState, pending: tuple[str, ...], delivered: frozenset[str]) -> RunState:
    """`state` with these events, and the status that follows from them."""
    return RunState(  # every field in order, as in `reduce_entry`
        "suspended" if pending else "running",
        state.version,
        state.source,
        pending,
        delivered,
        state.result,
        state.error,
        state.created_offset,
        state.ended_offset,
        state.params,
        state.input,
    )


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

    @classmethod
    def of_fields(cls, fields: dict[str, Any]) -> RunStatus:
        """`RunStatus(**fields)` for a `fields` that holds every field and nothing else, built
        at once: a frozen dataclass's `__init__` sets each field through `object.__setattr__`,
        most of the cost of a status when `kassette list` builds one per run.
        tests/test_journal.py checks it against the constructor."""
        status = object.__new__(cls)
        object.__setattr__(status, "__dict__", fields)
        return status

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
