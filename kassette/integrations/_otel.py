"""The code of `kassette.integrations.otel` (its docstring says what it does)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kassette._codec import TERMINAL_TYPES
from kassette._extras import requires
from kassette._otlp_spans import KIND_CLIENT, STATUS_ERROR, STATUS_OK, RunTrace
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
_ENDS_SESSION = TERMINAL_TYPES | {"suspend"}
_STATUS = {STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}
_KIND = {KIND_CLIENT: SpanKind.CLIENT}


class _Emitter(Listener):
    """The trace of each open session of this process (`RunTrace`, the export's own mapping),
    and where its spans go. A session's trace is dropped when the session ends or closes."""

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
        # (run id, session) -> its run's trace, and the offsets of its blocks and waits
        self.sessions: dict[tuple[str, int], tuple[RunTrace, list[int]]] = {}
        self.lock = threading.Lock()

    def opened(self, run_id: str, session: int, entries: Sequence[Mapping[str, Any]]) -> None:
        # the run's past gives the ids (its creation), a fork's source and the open blocks
        trace = RunTrace(run_id, include_content=self.include_content)
        for entry in entries:
            if entry["session"] != session:
                trace.add(entry)
        with self.lock:
            self.sessions[run_id, session] = (trace, [])

    def appended(self, run_id: str, entry: Mapping[str, Any]) -> None:
        try:
            self.entry(run_id, entry)
        except Exception:  # a viewer's trouble never fails the workflow
            _log.exception("kassette: could not emit the span of %s", run_id)

    def closed(self, run_id: str, session: int) -> None:
        with self.lock:  # a session that ended without a final entry (a crash, a fence)
            self.sessions.pop((run_id, session), None)

    def entry(self, run_id: str, entry: Mapping[str, Any]) -> None:
        """Place the entry in its session's trace; emit a step's span as the step ends, and
        the session's, its blocks' and waits' (and the run's, at its end) as the session ends."""
        key = (run_id, entry["session"])
        kind, span = entry["type"], None
        with self.lock:
            found = self.sessions.get(key)
            if found is None:  # a session opened before `instrument()`
                return
            trace, held = found
            trace.add(entry)
            if kind == "suspend" or entry.get("kind") == "parallel":
                held.append(entry["offset"])
            elif kind == "step":
                span = trace.entry_span(entry["offset"])
            if kind in _ENDS_SESSION:
                del self.sessions[key]
        if span is not None:  # a step's, as it ends
            self.emit(span)
        if kind in _ENDS_SESSION:
            wanted = {trace.span_id("session", key[1])}
            wanted |= {trace.span_id("entry", offset) for offset in held}
            if kind in TERMINAL_TYPES:
                wanted.add(trace.span_id("run"))
            for span in trace.spans():
                if span["spanId"] in wanted:
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


def _attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    return {pair["key"]: _value(pair["value"]) for pair in pairs}


def _value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON `AnyValue` as Python (64-bit integers are JSON text)."""
    ((kind, item),) = value.items()
    if kind == "arrayValue":
        return tuple(_value(element) for element in item.get("values", []))
    return int(item) if kind == "intValue" else item
