"""A run's journal entries as OpenTelemetry spans: the mapping docs/otel.md tabulates.

`RunTrace` is the one mapping from entries to spans. It takes a run's plain journal entries
(the JSON objects of its lines) in offset order, one `add` at a time, and gives the run's spans
as OTLP/JSON objects (ids in hex, enums as numbers, 64-bit numbers as text): the export
(`kx.to_otlp`, `kx.export(format="otlp")`, `kx.send_otlp`) feeds it every entry of a journal,
and a live tracer can feed it each entry as it is appended.

A *trace* is a run: a root span for the run, a span per session under it, and under those a
span per step, suspend (its wait, until the resume), sleep (until its wake time) and parallel
block, the steps of a parallel branch under their block. Model-call steps carry the GenAI
semantic conventions and the OpenInference attributes Phoenix reads; kassette's own facts sit
under `kassette.`.

The attributes of a model call are `_otlp_calls`'s. Ids are hashes of what identifies the
journal, never random: the run id and the time of the entry that created the run (its first
`start`, or a fork's own `start`), in whole milliseconds. Exporting the same journal twice gives
the same ids; a run deleted and created again, or the same run id in another store, gives other
ids.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kassette._codec import parse_moment, to_json
from kassette._llm_calls import read_llm_result
from kassette._otlp_calls import content, json_text, model_call_attributes
from kassette._state import RunState, reduce_entry

__all__ = [
    "SCOPE",
    "RunTrace",
    "any_value",
    "key_values",
    "nanos",
    "span_id",
    "trace_id",
]

SCOPE = "kassette"
# OTLP's enum numbers (opentelemetry/proto/trace/v1/trace.proto)
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
_RUN_STATUS = {"completed": STATUS_OK, "failed": STATUS_ERROR}
_INT64 = range(-(2**63), 2**63)


def trace_id(run_id: str, created_ms: int) -> str:
    """A run's trace id, in hex: the first 16 bytes of SHA-256 of
    `"kassette-trace\\0" + run_id + "\\0" + created_ms`, where `created_ms` is the time of the
    entry that created the run, in milliseconds since the epoch."""
    key = f"kassette-trace\0{run_id}\0{created_ms}"
    return hashlib.sha256(key.encode()).digest()[:16].hex()


def span_id(run_id: str, created_ms: int, part: str, number: int = 0) -> str:
    """A span's id, in hex: the first 8 bytes of SHA-256 of `"kassette-span\\0" + run_id +
    "\\0" + created_ms + "\\0" + part + "\\0" + number`, where part is `run` (the root span),
    `session` (number: the session) or `entry` (number: the offset)."""
    return _SpanIds(run_id, created_ms)(part, number)


class _SpanIds:
    """`span_id` for one run: the hash of the run's part of the key is taken once."""

    def __init__(self, run_id: str, created_ms: int) -> None:
        self._run = hashlib.sha256(f"kassette-span\0{run_id}\0{created_ms}\0".encode())
        self._found: dict[tuple[str, int], str] = {}

    def __call__(self, part: str, number: int = 0) -> str:
        found = self._found.get((part, number))
        if found is None:
            hashed = self._run.copy()
            hashed.update(f"{part}\0{number}".encode())
            found = self._found[part, number] = hashed.digest()[:8].hex()
        return found


@functools.cache
def version() -> str:
    """kassette's installed version, the instrumentation scope's."""
    try:
        return importlib.metadata.version("kassette")
    except importlib.metadata.PackageNotFoundError:  # a checkout that is not installed
        return ""


def nanos(timestamp: Any) -> int:
    """A journal timestamp (text) as nanoseconds since the epoch, whole milliseconds as the
    journal writes them; 0 for one that does not read."""
    if not isinstance(timestamp, str):
        return 0
    try:
        moment = parse_moment(timestamp)
    except ValueError:
        return 0
    whole = int(moment.timestamp())
    return whole * 1_000_000_000 + moment.microsecond * 1_000


@dataclass
class _Span:
    """A span being built: its end may grow as its children are placed. `part`/`number` name
    it within its run (`run` 0, `session` N, `entry` OFFSET); `parent` is its parent's."""

    part: str
    number: int
    parent: tuple[str, int] | None
    name: str
    start: int
    end: int
    kind: int = KIND_INTERNAL
    attributes: dict[str, Any] = field(default_factory=dict)
    status: int = STATUS_UNSET
    message: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Owner:
    """A run whose own entries a journal holds: its id and creation time (what its ids hash)."""

    run_id: str
    created_ms: int


class RunTrace:
    """The spans of one run's journal, built entry by entry (plain journal entries, in offset
    order: `add`), read with `spans()`.

    A fork's journal begins with the entries it copied from its source: they are the source's
    spans (exported with the source), so a fork's own `start` (the last one with `source`)
    drops what was built before it and remembers where the copied entries came from, for the
    fork's links. `include_content` adds prompts, answers, results and the run's input.

    A fork taken inside its source's own copied prefix links to the run that wrote that
    prefix, which its journal does not name: `runs` (run id -> its source run id and fork
    offset, None for a run that is no fork, and its creation time in ms: the runs known, such
    as the other runs of an export) lets the links go up to it.
    """

    def __init__(
        self,
        run_id: str,
        *,
        include_content: bool = False,
        runs: Mapping[str, tuple[str | None, int | None, int]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.include_content = include_content
        self.runs = runs or {}
        self.state = RunState()
        self._created_ms: int | None = None  # the time of the start that created this run
        self._first_ms = 0  # entry 0's, for a journal that has no start
        self._fork_point: tuple[_Owner, int, str, int] | None = None  # owner, offset, type, session
        self._previous: tuple[int, str, int] | None = None  # offset, type, session
        self._ended = False
        self._reset()

    def _reset(self) -> None:
        self._root = _Span("run", 0, None, f"run {self.run_id}", 0, 0)
        self._sessions: dict[int, _Span] = {}
        self._spans: dict[int, _Span] = {}  # offset -> span
        self._blocks: dict[str, _Span] = {}  # a parallel block's step id -> its span
        self._waits: dict[str, _Span] = {}  # a suspend's event id -> its span, until its resume
        self._events: list[dict[str, Any]] = []
        self._cancel_reason: str | None = None
        self._started = False

    def add(self, entry: Mapping[str, Any], at: int | None = None) -> None:
        """Read the next entry of the journal; `at` is its time in nanoseconds (default: read
        from its `timestamp`)."""
        if self._ended:  # nothing after a terminal entry counts (docs/journal-format.md)
            return
        at = nanos(entry.get("timestamp")) if at is None else at
        kind, offset = entry["type"], entry["offset"]
        if self._previous is None:
            self._first_ms = at // 1_000_000
        if kind != "step":
            before = self.state.created_offset
            self.state = reduce_entry(self.state, entry)
            if kind == "start" and isinstance(entry.get("source"), dict):
                self._forked(entry, at)
            elif self.state.created_offset != before:
                self._created_ms = at // 1_000_000
        self._place(entry, kind, at)
        self._previous = (offset, kind, entry["session"])
        self._ended = self.state.ended_offset is not None

    def _forked(self, entry: Mapping[str, Any], at: int) -> None:
        """A fork's start: what came before it was written by its source (or, for entries a
        fork of a fork copied, by an earlier run), whose creation time is the one known so
        far; the entries from here are this fork's (or the next fork's, in a copy)."""
        writer = _Owner(str(entry["source"].get("runId")), self.created_ms)
        if self._previous is not None:
            offset, kind, session = self._previous
            self._fork_point = (writer, offset, kind, session)
        self._created_ms = at // 1_000_000
        self._reset()

    @property
    def created_ms(self) -> int:
        """The time of the entry that created this run (entry 0's for a journal with no
        start), in milliseconds: with the run id, what its ids are hashes of."""
        return self._created_ms if self._created_ms is not None else self._first_ms

    def _place(self, entry: Mapping[str, Any], kind: str, at: int) -> None:
        number = entry["session"]
        session = self._sessions.get(number)
        if session is None:
            session = _Span("session", number, ("run", 0), f"session {number}", at, at)
            session.attributes = {
                "kassette.run_id": self.run_id,
                "kassette.session": number,
                "openinference.span.kind": "CHAIN",
            }
            self._sessions[number] = session
        if not self._started:
            self._root.start = self._root.end = at
            self._started = True
        span = self._entry_span(entry, kind, at, session)
        if span is not None:
            self._spans[entry["offset"]] = span
        session.end = max(session.end, at)
        if kind == "resume" and (wait := self._waits.pop(_step_id(entry), None)) is not None:
            wait.end = max(wait.end, at)
            wait.status = STATUS_OK
            del wait.attributes["kassette.pending"]
        elif kind == "error":
            error = entry.get("error")
            error = error if isinstance(error, dict) else {}
            for failed in (self._root, session):
                failed.status = STATUS_ERROR
                failed.message = str(error.get("message") or "")
            self._events.append(_exception(at, error))
        elif kind == "cancel":
            reason = entry.get("reason")
            self._cancel_reason = "" if reason is None else str(reason)

    def _entry_span(
        self, entry: Mapping[str, Any], kind: str, at: int, session: _Span
    ) -> _Span | None:
        """The span of a step, suspend or sleep entry (None for the others: a start opens its
        session, a resume ends its suspend's wait, a terminal entry sets the run's status)."""
        step_id = _step_id(entry)
        if kind not in ("step", "suspend", "resume") or (
            kind == "resume" and step_id in self._waits
        ):
            return None
        offset = entry["offset"]
        parent = self._block_of(step_id) or ("session", session.number)
        span = _Span("entry", offset, parent, step_id, at, at, status=STATUS_OK)
        attributes = span.attributes = {
            "kassette.run_id": self.run_id,
            "kassette.session": entry["session"],
            "kassette.offset": offset,
            "kassette.entry_type": kind,
            "kassette.step_id": step_id,
            "openinference.span.kind": "CHAIN",
        }
        if entry.get("edited") is True:
            attributes["kassette.edited"] = True
        if kind != "step":
            event = _text(entry.get("event")) or _text(entry.get("name"))
        if kind == "suspend":
            span.name = f"suspend {event or step_id}"
            span.status = STATUS_UNSET  # a wait is not done until its resume
            attributes["kassette.event"] = event or ""
            attributes["kassette.pending"] = True
            self._waits[step_id] = span
            return span
        if kind == "resume":  # a fork's edited resume, whose suspend was copied
            span.name = f"resume {event or step_id}"
            if self.include_content:
                attributes.update(content("output", entry.get("value")))
            return span
        step_kind = _text(entry.get("kind")) or "step"
        attributes["kassette.kind"] = step_kind
        duration = entry.get("durationMs")
        if isinstance(duration, int | float) and _finite(duration):
            span.start = at - round(duration * 1_000_000)
        result = entry.get("result")
        if step_kind == "sleep":
            wake = result.get("wakeAt") if isinstance(result, dict) else None
            span.end = max(at, nanos(wake))
            span.name = "sleep"
        elif step_kind == "parallel":
            self._blocks[step_id] = span
        else:
            call = read_llm_result(result, entry.get("call"))  # a plain step's
            if call is not None:
                span.kind = KIND_CLIENT
                span.name, found = model_call_attributes(call, self.include_content)
                attributes.update(found)
            elif self.include_content:
                attributes.update(content("output", result))
        return span

    def _block_of(self, step_id: str) -> tuple[str, int] | None:
        """The span of the parallel block a step id is nested in (`block/branch/step`)."""
        parts = step_id.split("/")
        if len(parts) < 3:
            return None
        block = self._blocks.get("/".join(parts[:-2]))
        return ("entry", block.number) if block is not None else None

    def spans(self) -> list[dict[str, Any]]:
        """The run's spans so far, as OTLP/JSON objects: the root, its sessions, its entries.
        Nothing when the journal holds none of this run's own entries."""
        if not self._started:
            return []
        root = self._root
        root.attributes = self._run_attributes()
        root.status = _RUN_STATUS.get(self.state.status, STATUS_UNSET)
        if self.state.status != "failed":
            root.message = ""
        root.events = self._events
        # a parent spans its children (a block its branches' steps, a session its spans, the
        # run its sessions; a step's start is its end less its duration, maybe before the
        # entry that opened its session): children follow their parents, so the latest first
        by_key = {("session", n): s for n, s in self._sessions.items()}
        by_key |= {("entry", offset): span for offset, span in self._spans.items()}
        for offset in sorted(self._spans, reverse=True):
            child = self._spans[offset]
            above = by_key.get(child.parent) if child.parent else None
            if above is not None:
                above.start = min(above.start, child.start)
                above.end = max(above.end, child.end)
        for session in self._sessions.values():
            root.start = min(root.start, session.start)
            root.end = max(root.end, session.end)
        ids = _SpanIds(self.run_id, self.created_ms)
        trace = trace_id(self.run_id, self.created_ms)
        found = [_json_span(ids, trace, root, self._links())]
        found += [_json_span(ids, trace, span, []) for span in self._sessions.values()]
        found += [_json_span(ids, trace, span, []) for span in self._spans.values()]
        return found

    def span_id(self, part: str, number: int = 0) -> str:
        """The id of this run's span `part` (`run`, `session` N, `entry` OFFSET)."""
        return span_id(self.run_id, self.created_ms, part, number)

    def entry_span(self, offset: int) -> dict[str, Any] | None:
        """The span of the entry at `offset` as it stands, without building the others: what
        a live tracer emits as a step ends (None for an entry that has no span)."""
        span = self._spans.get(offset)
        if span is None:
            return None
        ids = _SpanIds(self.run_id, self.created_ms)
        return _json_span(ids, trace_id(self.run_id, self.created_ms), span, [])

    def _run_attributes(self) -> dict[str, Any]:
        state = self.state
        found: dict[str, Any] = {
            "kassette.run_id": self.run_id,
            "kassette.status": state.status,
            "kassette.version": state.version,
            "kassette.params": to_json(state.params or {}),
            "openinference.span.kind": "CHAIN",
            "kassette.cancel_reason": self._cancel_reason,
        }
        source = state.source
        if source is not None:
            # the forks of one source at one offset (a fan-out's branches) share this group
            run, offset = source.get("runId"), source.get("fromOffset")
            found |= {
                "kassette.fork.source_run_id": run,
                "kassette.fork.offset": offset,
                "kassette.fork.group": f"{run}@{offset}",
            }
        if self.include_content:
            if state.created_offset is not None:
                found |= content("input", state.input)
            if state.status == "completed":
                found |= content("output", state.result)
        return {key: value for key, value in found.items() if value is not None}

    def _links(self) -> list[dict[str, Any]]:
        """A fork's links into the trace of the run that wrote the entry before the fork
        point (its source, or the run a fork of a fork copied it from): to that run's root
        span, and to the span of that entry (a step or suspend), else of its session."""
        if self._fork_point is None or self.state.source is None:
            return []
        writer, offset, kind, session = self._fork_point
        fork_offset = self.state.source.get("fromOffset")
        seen = {writer.run_id}
        # a fork point inside the source's own copied prefix: the run above wrote it
        while (known := self.runs.get(writer.run_id)) is not None:
            parent, cut, _ = known
            if parent is None or cut is None or offset >= cut or parent in seen:
                break
            seen.add(parent)
            above = self.runs.get(parent)
            writer = _Owner(parent, above[2] if above is not None else writer.created_ms)
        trace = trace_id(writer.run_id, writer.created_ms)
        point = (
            span_id(writer.run_id, writer.created_ms, "entry", offset)
            if kind in ("step", "suspend")
            else span_id(writer.run_id, writer.created_ms, "session", session)
        )
        root = span_id(writer.run_id, writer.created_ms, "run")
        return [
            {
                "traceId": trace,
                "spanId": span,
                "attributes": key_values(
                    {"kassette.link": name, "kassette.fork.offset": fork_offset}
                ),
            }
            for span, name in ((root, "fork source"), (point, "fork point"))
        ]


def _finite(number: float) -> bool:
    """A duration to subtract: a finite number, not a bool."""
    return not isinstance(number, bool) and math.isfinite(number)


def _step_id(entry: Mapping[str, Any]) -> str:
    """The id a step or an event is journaled under: `stepId`, else `eventId`, else (an
    upstream suspend or resume) its `name`."""
    for key in ("stepId", "eventId"):
        if isinstance(found := entry.get(key), str):
            return found
    name = entry.get("name")
    return name if isinstance(name, str) and entry.get("type") != "step" else ""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _exception(at: int, error: Mapping[str, Any]) -> dict[str, Any]:
    """A failed run's error as OpenTelemetry's `exception` event."""
    attributes = {
        "exception.type": str(error.get("name") or ""),
        "exception.message": str(error.get("message") or ""),
        "exception.stacktrace": str(error.get("traceback") or ""),
    }
    return {"timeUnixNano": str(at), "name": "exception", "attributes": key_values(attributes)}


def _json_span(
    ids: _SpanIds, trace: str, span: _Span, links: list[dict[str, Any]]
) -> dict[str, Any]:
    """A span as OTLP/JSON, with the fields protobuf's JSON mapping writes (defaults left out)."""
    found: dict[str, Any] = {"traceId": trace, "spanId": ids(span.part, span.number)}
    if span.parent is not None:
        found["parentSpanId"] = ids(*span.parent)
    found["name"] = span.name
    found["kind"] = span.kind
    found["startTimeUnixNano"] = str(span.start)
    found["endTimeUnixNano"] = str(max(span.end, span.start))
    found["attributes"] = key_values(span.attributes)
    if span.events:
        found["events"] = span.events
    if links:
        found["links"] = links
    status: dict[str, Any] = {}
    if span.message:
        status["message"] = span.message
    if span.status:
        status["code"] = span.status
    found["status"] = status
    return found


def key_values(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Attributes as OTLP/JSON `KeyValue`s (None values left out).

    Most attributes repeat from span to span (a run id, a step kind, a model name): the
    `KeyValue` of a short text is made once and shared (`_PAIRS`), never to be modified."""
    found = []
    pairs = _PAIRS
    for key, value in attributes.items():  # the common types first: a span has a dozen
        kind = type(value)
        if kind is str:
            pair = pairs.get((key, value))
            if pair is None:
                pair = {"key": key, "value": {"stringValue": value}}
                if len(value) <= _SHARED_TEXT:
                    if len(pairs) >= _SHARED_PAIRS:  # a bound, not an LRU: cheap and enough
                        pairs.clear()
                    pairs[key, value] = pair
            found.append(pair)
        elif kind is int and _INT64_MIN <= value <= _INT64_MAX:
            found.append({"key": key, "value": {"intValue": str(value)}})
        elif kind is float and math.isfinite(value):
            found.append({"key": key, "value": {"doubleValue": value}})
        elif value is not None:
            found.append({"key": key, "value": any_value(value)})
    return found


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PAIRS: dict[tuple[str, str], dict[str, Any]] = {}
_SHARED_TEXT = 200  # characters: a longer text is content, seldom repeated
_SHARED_PAIRS = 65_536


def any_value(value: Any) -> dict[str, Any]:
    """A value as an OTLP/JSON `AnyValue`. An integer past 64 bits is its digits as a string
    (protobuf holds none); NaN and the infinities are protobuf JSON's words for them; a JSON
    object, or a list item that is a list or object, is its JSON text."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)} if value in _INT64 else {"stringValue": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"doubleValue": value}
        word = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return {"doubleValue": word}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list | tuple):
        items = [
            {"stringValue": json_text(item)}
            if isinstance(item, list | tuple | dict)
            else any_value(item)
            for item in value
        ]
        return {"arrayValue": {"values": items}}
    return {"stringValue": json_text(value)}
