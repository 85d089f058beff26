"""Journals as OpenTelemetry traces: one trace per run, in OTLP, for any trace viewer.

A *trace* here is what a run's journal already holds, said in OpenTelemetry's words: a root
span for the run, a span per session under it, and under those a span per step, suspend (its
wait, until the resume), sleep (until its wake time) and parallel block, the steps of a
parallel branch under their block. Model-call steps carry the GenAI semantic conventions and
the OpenInference attributes Phoenix reads; kassette's own facts sit under `kassette.`.
docs/otel.md is the mapping table this module implements.

Ids are hashes, never random: the trace id is the first 16 bytes of SHA-256 of the run id,
a span id the first 8 bytes of SHA-256 of (run id, what the span is: the run, a session, an
entry's offset), so exporting the same journals twice gives the same spans and a viewer keeps
one copy. A fork is its own trace: its copied prefix is not exported again, its root span links
to its source's root span and to the source's span at the fork offset.

Built with the official `opentelemetry-proto` messages (the `otel` extra); `to_otlp` gives
protobuf JSON as OTLP/JSON wants it (ids in hex, enums as numbers), `send_otlp` posts binary
protobuf to an OTLP/HTTP endpoint.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from kassette._llm_calls import LLMCall, read_llm_call
from kassette.errors import InvalidArgumentError, StorageError
from kassette.explore._bar import Progress

_HINT = 'OpenTelemetry export needs the opentelemetry-proto package: pip install "kassette[otel]"'

try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2
except ImportError as exc:  # pragma: no cover - exercised in an environment without the extra
    raise ImportError(f"{_HINT} ({exc})") from exc

__all__ = ["OtlpSink", "send_otlp", "span_id", "to_otlp", "trace_id"]

SCOPE = "kassette"
TRACES_FILE = "traces.jsonl"
_SPAN = trace_pb2.Span
_STATUS = trace_pb2.Status
# a run's status, as its root span's status code (suspended, running, canceled: unset)
_RUN_STATUS = {"completed": _STATUS.STATUS_CODE_OK, "failed": _STATUS.STATUS_CODE_ERROR}
# request parameters, as GenAI attribute names (several providers' words for one)
_REQUEST_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
    "stop": "gen_ai.request.stop_sequences",
    "stop_sequences": "gen_ai.request.stop_sequences",
}
# what a request holds besides its parameters: the conversation, exported only with content
_CONTENT_FIELDS = frozenset({"messages", "input", "system", "tools", "instructions"})
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def trace_id(run_id: str) -> bytes:
    """A run's trace id: the first 16 bytes of SHA-256 of its id."""
    return hashlib.sha256(f"kassette-trace\0{run_id}".encode()).digest()[:16]


def span_id(run_id: str, part: str, number: int = 0) -> bytes:
    """A span's id: the first 8 bytes of SHA-256 of (run id, part, number), where part is
    `run` (the root span), `session` (number: the session) or `entry` (number: the offset)."""
    return hashlib.sha256(f"kassette-span\0{run_id}\0{part}\0{number}".encode()).digest()[:8]


@dataclass
class _Span:
    """A span being built: its end may grow as its children are placed."""

    span_id: bytes
    parent: bytes
    name: str
    start: int
    end: int
    kind: int = _SPAN.SPAN_KIND_INTERNAL
    attributes: dict[str, Any] = field(default_factory=dict)
    status: int = _STATUS.STATUS_CODE_UNSET
    message: str = ""
    events: list[trace_pb2.Span.Event] = field(default_factory=list)
    links: list[trace_pb2.Span.Link] = field(default_factory=list)


def to_otlp(journals: Any, *, include_content: bool = False) -> dict[str, Any]:
    """The runs of `journals` (a `kx.Journals`) as one OTLP `ExportTraceServiceRequest`, in
    protobuf JSON as OTLP/JSON has it: ids as hex, enums as numbers, 64-bit numbers as text.

    Message content (prompts, answers, step results, run input and result) is left out unless
    `include_content=True`, as the GenAI semantic conventions advise.
    """
    entries, runs = journals.to_arrow("entries"), journals.to_arrow("runs")
    return otlp_json(request_of(entries, runs, include_content=include_content))


def otlp_json(request: trace_service_pb2.ExportTraceServiceRequest) -> dict[str, Any]:
    """A request as OTLP/JSON: protobuf JSON with trace and span ids in hex (OTLP's one
    difference from the protobuf JSON mapping, which would give base64)."""
    found: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource in found.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return found


@functools.cache
def _version() -> str:
    """kassette's installed version, the instrumentation scope's."""
    try:
        return importlib.metadata.version("kassette")
    except importlib.metadata.PackageNotFoundError:  # a checkout that is not installed
        return ""


def _hex_ids(item: dict[str, Any]) -> None:
    for key in _ID_FIELDS:
        if key in item:
            item[key] = base64.b64decode(item[key]).hex()


def request_of(
    entries: pa.Table, runs: pa.Table, *, include_content: bool = False
) -> trace_service_pb2.ExportTraceServiceRequest:
    """The OTLP request holding every run of `runs` (one resource, one scope, all spans)."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.CopyFrom(
        resource_pb2.Resource(attributes=_key_values({"service.name": "kassette"}))
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.CopyFrom(common_pb2.InstrumentationScope(name=SCOPE, version=_version()))
    own = entries.filter(pc.invert(entries.column("copied")))
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in own.to_pylist():
        by_run.setdefault(row["run_id"], []).append(row)
    for run in runs.to_pylist():
        rows = sorted(by_run.get(run["run_id"], []), key=lambda row: row["offset"])
        if rows:
            scope_spans.spans.extend(_run_spans(run, rows, include_content))
    return request


def _run_spans(
    run: dict[str, Any], rows: list[dict[str, Any]], include_content: bool
) -> Iterator[trace_pb2.Span]:
    run_id = run["run_id"]
    root_id = span_id(run_id, "run")
    first = _nanos(rows[0]["timestamp"])
    root = _Span(root_id, b"", f"run {run_id}", first, first, attributes=_run_attributes(run))
    root.status = _RUN_STATUS.get(run["status"], _STATUS.STATUS_CODE_UNSET)
    if include_content:
        root.attributes.update(_content("input", run["input"]) | _content("output", run["result"]))
    if run["parent_run_id"] is not None:
        root.links.extend(_fork_links(run["parent_run_id"], run["fork_offset"]))
    sessions: dict[int, _Span] = {}
    spans: dict[int, _Span] = {}  # offset -> span
    blocks: dict[str, _Span] = {}  # a parallel block's step id -> its span
    waits: dict[str, _Span] = {}  # a suspend's event id -> its span, until its resume
    for row in rows:
        session = sessions.get(row["session"])
        at = _nanos(row["timestamp"])
        if session is None:
            number = row["session"]
            session = _Span(
                span_id(run_id, "session", number), root_id, f"session {number}", at, at
            )
            session.attributes = {"kassette.run_id": run_id, "kassette.session": number}
            session.attributes["openinference.span.kind"] = "CHAIN"
            sessions[number] = session
        span = _entry_span(run_id, row, at, session, blocks, waits, include_content)
        if span is not None:
            spans[row["offset"]] = span
        _close(row, at, session, root, waits)
    # a parent spans its children (a block its branches' steps, a session its spans, the run
    # its sessions; a step's start is its end less its duration, maybe before the entry that
    # opened its session): children follow their parents in the journal, so the latest first
    by_id = {span.span_id: span for span in (*sessions.values(), *spans.values())}
    for offset in sorted(spans, reverse=True):
        parent = by_id.get(spans[offset].parent)
        if parent is not None:
            parent.start = min(parent.start, spans[offset].start)
            parent.end = max(parent.end, spans[offset].end)
    for session in sessions.values():
        root.start = min(root.start, session.start)
        root.end = max(root.end, session.end)
    for span in (root, *sessions.values(), *spans.values()):
        yield _message(run_id, span)


def _entry_span(
    run_id: str,
    row: dict[str, Any],
    at: int,
    session: _Span,
    blocks: dict[str, _Span],
    waits: dict[str, _Span],
    include_content: bool,
) -> _Span | None:
    """The span of a step, suspend or sleep entry (None for the others: a start opens its
    session, a resume ends its suspend's wait, a terminal entry sets the run's status)."""
    kind, step_id = row["type"], row["step_id"] or ""
    if kind == "resume" and step_id in waits:
        return None
    if kind not in ("step", "suspend", "resume"):
        return None
    value = json.loads(row["value"])
    parent = _block_of(step_id, blocks) or session.span_id
    attributes: dict[str, Any] = {
        "kassette.run_id": run_id,
        "kassette.session": row["session"],
        "kassette.offset": row["offset"],
        "kassette.entry_type": kind,
        "kassette.step_id": step_id,
        "openinference.span.kind": "CHAIN",
    }
    if row["edited"]:
        attributes["kassette.edited"] = True
    span = _Span(span_id(run_id, "entry", row["offset"]), parent, step_id, at, at)
    span.attributes = attributes
    span.status = _STATUS.STATUS_CODE_OK
    if kind == "suspend":
        span.name = f"suspend {row['event'] or step_id}"
        span.status = _STATUS.STATUS_CODE_UNSET  # a wait is not done until its resume
        attributes["kassette.event"] = row["event"] or ""
        attributes["kassette.pending"] = True
        waits[step_id] = span
        return span
    if kind == "resume":  # a fork's edited resume, whose suspend was copied
        span.name = f"resume {row['event'] or step_id}"
        if include_content:
            attributes.update(_content("output", value.get("value")))
        return span
    step_kind = row["kind"] or "step"
    attributes["kassette.kind"] = step_kind
    if row["duration_ms"] is not None:
        span.start = at - round(row["duration_ms"] * 1_000_000)
    result = value.get("result")
    if step_kind == "sleep":
        wake = result.get("wakeAt") if isinstance(result, dict) else None
        if isinstance(wake, str):
            span.end = max(at, _nanos(datetime.fromisoformat(wake)))
        span.name = "sleep"
    elif step_kind == "parallel":
        blocks[step_id] = span
    else:
        call = read_llm_call({**value, "type": "step"})
        if call is not None:
            _model_call(span, call, include_content)
        elif include_content:
            attributes.update(_content("output", result))
    return span


def _block_of(step_id: str, blocks: dict[str, _Span]) -> bytes | None:
    """The span of the parallel block a step id is nested in (`block/branch/step`)."""
    parts = step_id.split("/")
    if len(parts) < 3:
        return None
    block = blocks.get("/".join(parts[:-2]))
    return block.span_id if block is not None else None


def _close(
    row: dict[str, Any], at: int, session: _Span, root: _Span, waits: dict[str, _Span]
) -> None:
    """What a resume or a terminal entry does to the spans already open."""
    kind = row["type"]
    session.end = max(session.end, at)
    if kind == "resume" and (wait := waits.pop(row["step_id"] or "", None)) is not None:
        wait.end = max(wait.end, at)
        wait.status = _STATUS.STATUS_CODE_OK
        del wait.attributes["kassette.pending"]
    elif kind == "error":
        error = json.loads(row["value"]).get("error") or {}
        for span in (root, session):
            span.status = _STATUS.STATUS_CODE_ERROR
            span.message = str(error.get("message") or "")
        root.events.append(_exception(at, error))
    elif kind == "cancel":
        reason = json.loads(row["value"]).get("reason")
        root.attributes["kassette.cancel_reason"] = "" if reason is None else str(reason)


def _exception(at: int, error: Mapping[str, Any]) -> trace_pb2.Span.Event:
    """A failed run's error as OpenTelemetry's `exception` event."""
    attributes = {
        "exception.type": str(error.get("name") or ""),
        "exception.message": str(error.get("message") or ""),
        "exception.stacktrace": str(error.get("traceback") or ""),
    }
    return trace_pb2.Span.Event(
        time_unix_nano=at, name="exception", attributes=_key_values(attributes)
    )


def _model_call(span: _Span, call: LLMCall, include_content: bool) -> None:
    """GenAI semantic conventions and OpenInference attributes on a model call's span."""
    request = call.request or {}
    requested = request.get("model") if isinstance(request.get("model"), str) else call.model
    model = call.model or requested
    span.name = f"chat {requested}" if requested else "chat"
    span.kind = _SPAN.SPAN_KIND_CLIENT
    usage = call.usage
    found: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": call.provider,
        "gen_ai.request.model": requested,
        "gen_ai.response.model": call.model,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "kassette.model_call.method": call.method,
        "openinference.span.kind": "LLM",
        "llm.model_name": model,
        "llm.provider": call.provider,
        "llm.system": call.provider,
        "llm.token_count.prompt": usage.input_tokens,
        "llm.token_count.completion": usage.output_tokens,
        "llm.token_count.total": usage.total_tokens,
    }
    if isinstance(call.result, dict) and isinstance(call.result.get("id"), str):
        found["gen_ai.response.id"] = call.result["id"]
    if call.finish_reason is not None:
        found["gen_ai.response.finish_reasons"] = [call.finish_reason]
    for key, name in _REQUEST_PARAMETERS.items():
        if key in request and request[key] is not None:
            value = request[key]
            listed = name.endswith("stop_sequences") and isinstance(value, str)
            found[name] = [value] if listed else value
    parameters = {key: value for key, value in request.items() if key not in _CONTENT_FIELDS}
    found["llm.invocation_parameters"] = json.dumps(parameters, ensure_ascii=False)
    if include_content:
        conversation = {key: value for key, value in request.items() if key in _CONTENT_FIELDS}
        found |= _content("input", conversation)
        found |= {"output.value": call.text, "output.mime_type": "text/plain"}
    span.attributes.update({key: value for key, value in found.items() if value is not None})


def _content(direction: str, value: Any) -> dict[str, Any]:
    """`input.value` / `output.value` (OpenInference) holding a JSON value (or JSON text)."""
    if value is None:
        return {}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return {f"{direction}.value": text, f"{direction}.mime_type": "application/json"}


def _run_attributes(run: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "kassette.run_id": run["run_id"],
        "kassette.status": run["status"],
        "kassette.version": run["version"],
        "kassette.params": run["params"],
        "openinference.span.kind": "CHAIN",
    }
    if run["parent_run_id"] is not None:
        source, offset = run["parent_run_id"], run["fork_offset"]
        # the forks of one source at one offset (a fan-out's branches) share this group
        found |= {
            "kassette.fork.source_run_id": source,
            "kassette.fork.offset": offset,
            "kassette.fork.group": f"{source}@{offset}",
        }
    return {key: value for key, value in found.items() if value is not None}


def _fork_links(source: str, offset: int | None) -> list[trace_pb2.Span.Link]:
    """A fork's links: to its source's root span, and to its source's span at the offset."""
    attributes = _key_values({"kassette.link": "fork source", "kassette.fork.offset": offset})
    links = [
        trace_pb2.Span.Link(
            trace_id=trace_id(source), span_id=span_id(source, "run"), attributes=attributes
        )
    ]
    if offset is not None:
        links.append(
            trace_pb2.Span.Link(
                trace_id=trace_id(source),
                span_id=span_id(source, "entry", offset),
                attributes=_key_values(
                    {"kassette.link": "fork point", "kassette.fork.offset": offset}
                ),
            )
        )
    return links


def _message(run_id: str, span: _Span) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace_id(run_id),
        span_id=span.span_id,
        parent_span_id=span.parent,
        name=span.name,
        kind=span.kind,  # type: ignore[arg-type]
        start_time_unix_nano=span.start,
        end_time_unix_nano=max(span.end, span.start),
        attributes=_key_values(span.attributes),
        events=span.events,
        links=span.links,
        status=_STATUS(code=span.status, message=span.message),  # type: ignore[arg-type]
    )


def _key_values(attributes: Mapping[str, Any]) -> list[common_pb2.KeyValue]:
    return [
        common_pb2.KeyValue(key=key, value=_any_value(value))
        for key, value in attributes.items()
        if value is not None
    ]


def _any_value(value: Any) -> common_pb2.AnyValue:
    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, list):
        items = [_any_value(item) for item in value]
        return common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=items))
    if isinstance(value, str):
        return common_pb2.AnyValue(string_value=value)
    return common_pb2.AnyValue(string_value=json.dumps(value, ensure_ascii=False))


def _nanos(moment: datetime | None) -> int:
    if moment is None:
        return 0
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1_000


class OtlpSink:
    """`kx.export(..., format="otlp")`'s sink: `traces.jsonl`, one OTLP/JSON request per
    batch of runs, as the OpenTelemetry Collector's file exporter writes and its file receiver
    reads."""

    def __init__(self, directory: Path, *, include_content: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / TRACES_FILE
        self._file: IO[str] = self._path.open("w", encoding="utf-8")  # closed by close()
        self._include_content = include_content

    def write(self, entries: pa.Table, runs: pa.Table) -> None:
        request = request_of(entries, runs, include_content=self._include_content)
        if request.resource_spans[0].scope_spans[0].spans:
            line = json.dumps(otlp_json(request), ensure_ascii=False, separators=(",", ":"))
            self._file.write(line + "\n")

    def close(self, runs: pa.Table) -> list[Path]:
        self._file.close()
        return [self._path]


def send_otlp(
    journals: Any,
    endpoint: str,
    *,
    headers: Mapping[str, str] | None = None,
    include_content: bool = False,
    progress: bool | None = None,
    timeout: float = 30.0,
    runs_per_request: int = 100,
) -> dict[str, Any]:
    """Post the runs of `journals` (a `kx.Journals`) to an OTLP/HTTP traces endpoint (such as
    `http://127.0.0.1:6006/v1/traces`), as binary protobuf, `runs_per_request` runs a request.

    `headers` are added to each request (an API key). `progress` draws `send_otlp [###...]
    300/1000 runs` on stderr (None: when stderr is a terminal). A request the endpoint refuses
    raises `StorageError` naming the batch (its number and its first and last run ids) and what
    the endpoint said; the batches before it were sent. Returns the numbers of runs, spans and
    requests sent.
    """
    if not endpoint.startswith(("http://", "https://")):
        raise InvalidArgumentError(f"endpoint must be an http:// or https:// URL, not {endpoint!r}")
    if type(runs_per_request) is not int or runs_per_request < 1:
        raise InvalidArgumentError(
            f"runs_per_request must be an int >= 1, not {runs_per_request!r}"
        )
    entries, runs = journals.to_arrow("entries"), journals.to_arrow("runs")
    show = sys.stderr.isatty() if progress is None else progress
    bar = Progress(runs.num_rows, sys.stderr if show else None, label="send_otlp")
    sent = {"runs": 0, "spans": 0, "requests": 0}
    try:
        for number, batch in enumerate(_batches(runs, runs_per_request), start=1):
            ids = batch.column("run_id").to_pylist()
            own = entries.filter(pc.is_in(entries.column("run_id"), pa.array(ids, pa.string())))
            request = request_of(own, batch, include_content=include_content)
            _post(endpoint, request.SerializeToString(), headers, timeout, number, ids)
            sent["runs"] += len(ids)
            sent["spans"] += len(request.resource_spans[0].scope_spans[0].spans)
            sent["requests"] += 1
            bar.advance(len(ids))
    finally:
        bar.close()
    return sent


def _batches(runs: pa.Table, size: int) -> Iterable[pa.Table]:
    for start in range(0, runs.num_rows, size):
        yield runs.slice(start, size)


def _post(
    endpoint: str,
    body: bytes,
    headers: Mapping[str, str] | None,
    timeout: float,
    number: int,
    ids: list[str],
) -> None:
    sent = {**(headers or {}), "Content-Type": "application/x-protobuf"}
    request = urllib.request.Request(endpoint, data=body, headers=sent, method="POST")
    batch = f"batch {number} (runs {ids[0]} .. {ids[-1]}, {len(ids)} runs)"
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        said = exc.read()[:500].decode("utf-8", "replace")
        raise StorageError(f"{endpoint} refused {batch}: HTTP {exc.code} {said}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise StorageError(f"could not send {batch} to {endpoint}: {exc}") from exc
