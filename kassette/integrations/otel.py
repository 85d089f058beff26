"""Live OpenTelemetry spans: a run's steps in a trace viewer while the run runs.

`instrument(tracer_provider=None)` makes every run of this process emit, as its entries are
journaled, the spans `kx.to_otlp` gives for the same journal (docs/otel.md): same trace and
span ids, names, parents and attributes. A step's span is emitted when its entry is durable;
the session's span, its parallel blocks and suspends when the session ends (a terminal entry,
or a suspend); the run's root span with the terminal entry. Replay appends nothing, so
replayed steps are not emitted again. A later export of the same journal gives the same ids,
so a viewer keeps one copy (the root span it already has wins).

Spans go through a tracer of the given OpenTelemetry SDK `TracerProvider` (the `otel` extra;
default the global one) to its span processors and exporters (OTLP, console, in memory); the
tracer's id generator gives the mapping's ids.
`uninstrument()` stops it. A failure to emit is logged, never raised into the workflow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from kassette._codec import to_json
from kassette._extras import requires
from kassette.core import Listener, add_listener, remove_listener
from kassette.errors import InvalidArgumentError

with requires("kassette.integrations.otel"):
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import (
        Link,
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
    )


__all__ = ["instrument", "uninstrument"]

_log = logging.getLogger(__name__)
_ENVELOPE = ("type", "session", "offset", "timestamp")
_ENDS_SESSION = frozenset({"complete", "error", "cancel", "suspend"})
_TERMINAL = frozenset({"complete", "error", "cancel"})
_STATUS = {1: StatusCode.OK, 2: StatusCode.ERROR}
_KIND = {3: SpanKind.CLIENT}


class _Emitter(Listener):
    """The rows of each open session of this process, and where their spans go."""

    def __init__(self, provider: TracerProvider, include_content: bool) -> None:
        # the SDK's tracer takes its span and trace ids from the provider's id generator when
        # it is made: this one gives the mapping's own ids, so live spans are the export's
        self.ids = _Ids(provider.id_generator)
        kept = provider.id_generator
        provider.id_generator = self.ids  # type: ignore[assignment]  # any IdGenerator works
        try:
            self.tracer = provider.get_tracer("kassette")
        finally:
            provider.id_generator = kept
        self.include_content = include_content
        self.sessions: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def appended(self, run_id: str, entry: Mapping[str, Any]) -> None:
        try:
            self.entry(run_id, entry)
        except Exception:  # a viewer's trouble never fails the workflow
            _log.exception("kassette: could not emit the span of %s", run_id)

    def closed(self, run_id: str, session: int) -> None:
        with self.lock:  # a session that ended without a final entry (a crash, a fence)
            self.sessions.pop((run_id, session), None)

    def entry(self, run_id: str, entry: Mapping[str, Any]) -> None:
        key = (run_id, int(entry["session"]))
        kind = entry["type"]
        ended = kind in _ENDS_SESSION
        step = kind == "step" and entry.get("kind") != "parallel"
        row = _row(run_id, entry)
        with self.lock:
            rows = self.sessions.setdefault(key, [])
            if not step:
                rows.append(row)  # what the session's own spans need when it ends
            if ended:
                del self.sessions[key]
            # a step's span needs its session's start and the blocks it may sit in, not every
            # step before it: linear in the steps
            snapshot = list(rows) if ended else [*rows, row]
        if not (step or ended):
            return
        for span in _spans(run_id, snapshot, kind, self.include_content):
            attributes = {pair["key"]: _value(pair["value"]) for pair in span["attributes"]}
            offset = attributes.get("kassette.offset")
            if offset is None:  # the session's span; the run's, with a terminal entry
                wanted = ended and ("kassette.session" in attributes or kind in _TERMINAL)
            else:  # a step as it ends; with the session, its parallel blocks and suspends
                wanted = (step and offset == entry["offset"]) or (
                    ended
                    and (
                        attributes["kassette.entry_type"] == "suspend"
                        or attributes.get("kassette.kind") == "parallel"
                    )
                )
            if wanted:
                self.emit(span)

    def emit(self, span: dict[str, Any]) -> None:
        """Start and end the SDK span of an OTLP/JSON span, with its ids and times."""
        trace_id = int(span["traceId"], 16)
        parent = otel_context.Context()  # a root: not under whatever span is current
        if span.get("parentSpanId"):
            above = SpanContext(
                trace_id, int(span["parentSpanId"], 16), False, TraceFlags(TraceFlags.SAMPLED)
            )
            parent = trace.set_span_in_context(NonRecordingSpan(above))
        links = [
            Link(
                SpanContext(int(link["traceId"], 16), int(link["spanId"], 16), False),
                _attributes(link.get("attributes", [])),
            )
            for link in span.get("links", [])
        ]
        with self.ids.given(trace_id, int(span["spanId"], 16)):
            live = self.tracer.start_span(
                span["name"],
                context=parent,
                kind=_KIND.get(span.get("kind", 1), SpanKind.INTERNAL),
                attributes=_attributes(span.get("attributes", [])),
                links=links,
                start_time=int(span["startTimeUnixNano"]),
            )
        for event in span.get("events", []):
            attributes = _attributes(event.get("attributes", []))
            live.add_event(event["name"], attributes, int(event["timeUnixNano"]))
        status = span.get("status", {})
        code = _STATUS.get(status.get("code", 0), StatusCode.UNSET)
        if code is not StatusCode.UNSET:
            description = status.get("message") if code is StatusCode.ERROR else None
            live.set_status(Status(code, description or None))
        live.end(int(span["endTimeUnixNano"]))


class _Ids(IdGenerator):
    """The provider's id generator, except for the ids `given` to the span being started."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner
        self.local = threading.local()

    @contextmanager
    def given(self, trace_id: int, span_id: int) -> Iterator[None]:
        self.local.ids = (trace_id, span_id)
        try:
            yield
        finally:
            self.local.ids = None

    def generate_span_id(self) -> int:
        ids = getattr(self.local, "ids", None)
        return ids[1] if ids else self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = getattr(self.local, "ids", None)
        return ids[0] if ids else self.inner.generate_trace_id()


def _spans(
    run_id: str, rows: list[dict[str, Any]], kind: str, include_content: bool
) -> list[dict[str, Any]]:
    """The OTLP/JSON spans `kx.to_otlp` gives for these rows of one session."""
    import pyarrow as pa

    from kassette.explore import ENTRY_SCHEMA, RUN_SCHEMA, Journals, to_otlp

    entries = pa.Table.from_pylist([{**row, "copied": False} for row in rows], schema=ENTRY_SCHEMA)
    status = {"complete": "completed", "error": "failed", "cancel": "canceled"}
    run: dict[str, Any] = dict.fromkeys(RUN_SCHEMA.names)
    run |= {"run_id": run_id, "status": status.get(kind, "running"), "pending_events": []}
    run |= {"sessions": 1, "steps": 0, "llm_calls": 0, "input_tokens": 0, "output_tokens": 0}
    runs = pa.Table.from_pylist([run], schema=RUN_SCHEMA)
    found = to_otlp(Journals(entries, runs), include_content=include_content)
    return list(found["resourceSpans"][0]["scopeSpans"][0].get("spans", []))


_ACTIVE: dict[str, _Emitter] = {}


def instrument(tracer_provider: Any = None, *, include_content: bool = False) -> None:
    """Emit each run's spans as its entries are journaled, to `tracer_provider` (an SDK
    `TracerProvider`; default: the global one). Calling it again replaces the provider."""
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        raise InvalidArgumentError(
            "instrument needs an OpenTelemetry SDK TracerProvider (opentelemetry.sdk.trace), "
            f"not {provider!r}: set one with trace.set_tracer_provider or pass it"
        )
    uninstrument()
    _ACTIVE["emitter"] = emitter = _Emitter(provider, include_content)
    add_listener(emitter)


def uninstrument() -> None:
    """Stop emitting spans (runs already open stop too)."""
    emitter = _ACTIVE.pop("emitter", None)
    if emitter is not None:
        remove_listener(emitter)


def _row(run_id: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry as a row of `Journals.entries` (what the OTLP mapping reads)."""
    kind = entry["type"]
    step_id = entry.get("stepId") or entry.get("eventId")
    duration = entry.get("durationMs")
    return {
        "run_id": run_id,
        "offset": entry["offset"],
        "session": entry["session"],
        "type": kind,
        "timestamp": datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")),
        "step_id": step_id,
        "name": entry.get("name"),
        "kind": entry.get("kind") or ("step" if kind == "step" else None),
        "event": entry.get("event"),
        "duration_ms": float(duration) if duration is not None else None,
        "edited": entry.get("edited") is True,
        "value": to_json({k: v for k, v in entry.items() if k not in _ENVELOPE}),
    }


def _attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    return {pair["key"]: _value(pair["value"]) for pair in pairs}


def _value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON `AnyValue` as Python (64-bit integers are JSON text)."""
    ((kind, item),) = value.items()
    if kind == "arrayValue":
        return tuple(_value(element) for element in item.get("values", []))
    return int(item) if kind == "intValue" else item
