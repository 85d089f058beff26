"""Traces as runs: `import_otlp(source, storage)` reads OTLP/JSON and journals one run a trace.

The source is a file of OTLP/JSON: one `ExportTraceServiceRequest` a line, as the
OpenTelemetry Collector's file exporter writes it (and kassette's own `traces.jsonl`), or one
such request as a single JSON document. It is read twice, a line at a time, never whole: the
first pass checks every line and learns on which line each trace's last span is; the second
collects each trace's spans and journals the trace as soon as its last line is read, so only
the traces open at one point of the file are held. A line that is not an OTLP/JSON request
raises `InvalidArgumentError` naming the line before anything is written.

How a trace's spans become steps is `kassette.explore._import_spans`; how a run is written and
reported, `kassette.explore._import_runs`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from kassette.errors import InvalidArgumentError
from kassette.explore._bar import Progress
from kassette.explore._import_runs import ImportReport, Reporter, StepNaming, storage_of
from kassette.explore._import_spans import Span, run_of_trace
from kassette.storage import Storage

__all__ = ["import_otlp"]

_TRACE_ID = re.compile(rb'"traceId"\s*:\s*"([^"]*)"')
_HEX_ID = re.compile(r"[0-9a-fA-F]{16}(?:[0-9a-fA-F]{16})?")
_DOCUMENT_LIMIT = 256 << 20  # bytes: a single JSON document is parsed whole, up to this
_LINES_HINT = (
    "write it as JSON lines (one ExportTraceServiceRequest a line, as the OpenTelemetry "
    "Collector's file exporter does)"
)


def import_otlp(
    source: str | os.PathLike[str],
    storage: Storage | str | os.PathLike[str],
    *,
    step_names: StepNaming = None,
    input: Callable[[Span], Any] | None = None,
    progress: bool | None = None,
) -> ImportReport:
    """Journal each trace of the OTLP/JSON file `source` as a run of `storage`.

    Model-call spans (GenAI semantic conventions, current and indexed, OpenInference, and
    kassette's own) become steps named as `journaled(client, ctx)` names them, with the
    request in the provider's wire shape and a response of that provider; tool spans become
    steps named after the tool; a failed span ends the run's steps (its error is the run's
    `imported.ended`). `step_names` maps those names (a tool's, a model call's method) to the
    step names of your own workflow (a mapping, or a function returning a name or None).
    The run's input is the root span's `input.value` (JSON when it parses), or what
    `input(root_span)` returns. A run gets the trace's `kassette.run_id` if it has one, else
    `otlp-<trace id>`. Importing the same file again writes nothing twice. `progress` draws
    a bar on stderr (None: when stderr is a terminal).
    """
    path = Path(source)
    target = storage_of(storage)
    if not path.is_file():
        raise InvalidArgumentError(f"no OTLP/JSON file at {path}")
    ends: dict[int, list[str]] = {}
    for trace, number in _scan(path).items():
        ends.setdefault(number, []).append(trace)
    show = sys.stderr.isatty() if progress is None else progress
    bar = Progress(sum(map(len, ends.values())), sys.stderr if show else None, label="import")
    open_traces: dict[str, list[Span]] = {}
    with Reporter(target) as reporter:
        try:
            for number, request in _requests(path):
                for span in _spans(request, number, path.name):
                    open_traces.setdefault(span.trace_id, []).append(span)
                for trace in ends.pop(number, ()):
                    spans = open_traces.pop(trace, [])
                    if spans:
                        reporter.write(run_of_trace(trace, spans, path.name, step_names, input))
                    bar.advance(1)
        finally:
            bar.close()
        return reporter.report()


# -- reading -------------------------------------------------------------------------------


def _scan(path: Path) -> dict[str, int]:
    """The first pass: the number of the line each trace ends on (a trace id a link names
    counts too: its trace is then held a little longer). The lines are not parsed: a trace id
    is found by its key, so this pass costs a fraction of the second."""
    last: dict[str, int] = {}
    ids: dict[bytes, str] = {}
    with path.open("rb") as file:
        lines = [file.read()] if _is_document(file) else file
        for number, line in enumerate(lines, start=1):
            for found in _TRACE_ID.findall(line):
                trace = ids.get(found)
                if trace is None:
                    trace = ids[found] = _hex_id(found.decode(), number, path.name, "traceId")
                last[trace] = number
    return last


def _is_document(file: IO[bytes]) -> bool:
    """Whether the file is one JSON document over several lines (else JSON lines)."""
    first_line = file.readline(_DOCUMENT_LIMIT)
    file.seek(0)
    if first_line.lstrip()[:1] != b"{":
        name = Path(str(file.name)).name
        raise InvalidArgumentError(
            f"{name} line 1: not OTLP/JSON (it does not start with a JSON object)"
        )
    return not _parses(first_line)


def _requests(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, request) for each request of the file; a single document is line 1."""
    with path.open("rb") as file:
        if _is_document(file):  # a document over several lines (or a broken first line)
            yield 1, _document(path, file)
            return
        for number, line in enumerate(file, start=1):
            if line.strip():
                yield number, _request(line, number, path.name)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _document(path: Path, file: IO[bytes]) -> dict[str, Any]:
    size = path.stat().st_size
    if size > _DOCUMENT_LIMIT:
        raise InvalidArgumentError(
            f"{path.name}: a single OTLP/JSON document of {size} bytes is more than kassette "
            f"reads whole ({_DOCUMENT_LIMIT} bytes): {_LINES_HINT}"
        )
    return _request(file.read(), 1, path.name)


def _request(line: bytes, number: int, name: str) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except ValueError as exc:
        what = "truncated" if not line.endswith(b"\n") else "not JSON"
        raise InvalidArgumentError(f"{name} line {number}: {what} ({exc})") from None
    if not isinstance(request, dict) or not isinstance(request.get("resourceSpans", []), list):
        raise InvalidArgumentError(
            f"{name} line {number}: not an OTLP ExportTraceServiceRequest (no resourceSpans)"
        )
    return request


def _raw_spans(request: dict[str, Any], number: int, name: str) -> Iterator[dict[str, Any]]:
    for resource in request.get("resourceSpans") or []:
        scopes = resource.get("scopeSpans") if isinstance(resource, dict) else None
        for scope in scopes if isinstance(scopes, list) else []:
            spans = scope.get("spans") if isinstance(scope, dict) else None
            if not isinstance(spans, list):
                continue
            for span in spans:
                if not isinstance(span, dict):
                    raise InvalidArgumentError(f"{name} line {number}: a span is not an object")
                yield span


def _spans(request: dict[str, Any], number: int, name: str) -> Iterator[Span]:
    traces: dict[Any, str] = {}  # a request's spans share a few trace ids: checked once each
    for raw in _raw_spans(request, number, name):
        span_id = _hex_id(raw.get("spanId"), number, name, "spanId")
        parent = raw.get("parentSpanId")
        given = raw.get("traceId")
        trace = traces.get(given)
        if trace is None:
            trace = traces[given] = _hex_id(given, number, name, "traceId")
        found = raw.get("status")
        status: dict[str, Any] = found if isinstance(found, dict) else {}
        yield Span(
            trace_id=trace,
            span_id=span_id,
            parent_id=_hex_id(parent, number, name, "parentSpanId") if parent else "",
            name=str(raw.get("name") or ""),
            start=_nanos(raw.get("startTimeUnixNano")),
            end=_nanos(raw.get("endTimeUnixNano")),
            attributes=_attributes(raw.get("attributes")),
            status=_int(status.get("code")),
            message=str(status.get("message") or ""),
            events=[
                (str(event.get("name") or ""), _attributes(event.get("attributes")))
                for event in raw.get("events") or []
                if isinstance(event, dict)
            ],
            line=number,
        )


def _hex_id(value: Any, number: int, name: str, key: str) -> str:
    """An id as hex: OTLP/JSON writes hex, the protobuf JSON mapping base64."""
    if isinstance(value, str) and value:
        if _HEX_ID.fullmatch(value):
            return value.lower()
        try:
            return base64.b64decode(value, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    raise InvalidArgumentError(f"{name} line {number}: a span's {key} is {value!r}, not an id")


def _attributes(items: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in items if isinstance(items, list) else []:
        try:
            key, value = item["key"], item["value"]
            found[key] = value["stringValue"] if "stringValue" in value else _value(value)
        except (KeyError, TypeError):
            continue  # no key, or no value: not an attribute
    return found


def _value(value: Any) -> Any:
    """An OTLP `AnyValue` as a Python value (64-bit integers come as text in JSON)."""
    if not isinstance(value, dict) or not value:
        return None
    kind, item = next(iter(value.items()))
    if kind == "intValue":
        return _int(item)
    if kind == "arrayValue":
        return [_value(v) for v in (item or {}).get("values", [])]
    if kind == "kvlistValue":
        return _attributes((item or {}).get("values"))
    if kind == "bytesValue":
        return item
    return item


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _nanos(value: Any) -> int:
    return _int(value)
