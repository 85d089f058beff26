"""Journals as OpenTelemetry traces: one trace per run, in OTLP, for any trace viewer.

The spans of a run are `kassette._otlp_spans.RunTrace`'s (the mapping docs/otel.md
tabulates), built from its plain journal entries. This module turns decoded journals (the
Arrow tables `kx.load` and `kx.export` read) into those entries, and the spans into OTLP:
- `to_otlp`: one `ExportTraceServiceRequest` as OTLP/JSON (a dict);
- `OtlpSink` (`kx.export(format="otlp")`): `traces.jsonl`, one request per line, each a
  bounded batch of runs (`RUNS_PER_REQUEST` runs, about `REQUEST_BYTES` bytes at most), the
  layout of the OpenTelemetry Collector's file exporter, so a reader streams it;
- `kassette.explore._otlp_send.send_otlp`: the same batches as binary protobuf.

OTLP/JSON is written straight from plain dicts by the standard library's C JSON encoder, and
binary protobuf by `_otlp_proto`: the official `opentelemetry-proto` messages are the tests'
oracle (every line parses into `ExportTraceServiceRequest`), not the hot path, so the `otel`
extra is needed by the tests and `send_otlp` users' viewers, not by this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from kassette._otlp_spans import SCOPE, RunTrace, key_values, version

__all__ = [
    "REQUEST_BYTES",
    "RUNS_PER_REQUEST",
    "TRACES_FILE",
    "OtlpSink",
    "batches",
    "json_batches",
    "resource_attributes",
    "run_spans",
    "to_otlp",
]

TRACES_FILE = "traces.jsonl"
RUNS_PER_REQUEST = 100
REQUEST_BYTES = 4_000_000  # a request (a line of traces.jsonl, a POST) holds at most about this
_NANOS_PER_MS = 1_000_000


def resource_attributes() -> list[dict[str, Any]]:
    """The resource every span is exported under: `service.name=kassette`."""
    return key_values({"service.name": "kassette"})


def to_otlp(journals: Any, *, include_content: bool = False) -> dict[str, Any]:
    """The runs of `journals` (a `kx.Journals`) as one OTLP `ExportTraceServiceRequest`, in
    OTLP/JSON: protobuf JSON with trace and span ids in hex, enums as numbers and 64-bit
    numbers as text.

    Message content (prompts, answers as chat messages, step results, run input and result) is
    left out unless `include_content=True`, as the GenAI semantic conventions advise.
    """
    entries, runs = journals.to_arrow("entries"), journals.to_arrow("runs")
    spans = [span for _, found in run_spans(entries, runs, include_content) for span in found]
    return _request(spans)


def _request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    scope = {"name": SCOPE, "version": version()}
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource_attributes()},
                "scopeSpans": [{"scope": scope, "spans": spans}],
            }
        ]
    }


def run_spans(
    entries: pa.Table, runs: pa.Table, include_content: bool
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each run of `runs` that has entries in `entries` (`Journals.entries`' columns), in the
    order of `runs`, with its spans as OTLP/JSON, one run at a time: a run's spans are given as
    soon as its entries are read and `_ROWS` entries are in Python at a time, so memory holds
    one run's spans, not the batch's."""
    ids = runs.column("run_id").to_pylist()
    started = pc.cast(runs.column("started_at"), pa.int64()).to_pylist()
    columns = [runs.column(name).to_pylist() for name in ("parent_run_id", "fork_offset")]
    known = {
        run_id: (parent, offset, ms or 0)
        for run_id, parent, offset, ms in zip(ids, *columns, started, strict=True)
    }
    if not entries.num_rows:
        return
    if not set(ids).issuperset(pc.unique(entries.column("run_id")).to_pylist()):
        entries = entries.filter(pc.is_in(entries.column("run_id"), pa.array(ids, pa.string())))
    entries = _in_order(entries, ids)
    trace: RunTrace | None = None
    for start in range(0, entries.num_rows, _ROWS):
        rows = entries.slice(start, _ROWS)
        moments = pc.cast(rows.column("timestamp"), pa.int64()).to_pylist()
        names = ("run_id", "type", "session", "offset", "value")
        columns = [rows.column(name).to_pylist() for name in names]
        for run_id, kind, session, offset, value, ms in zip(*columns, moments, strict=True):
            if trace is None or trace.run_id != run_id:
                if trace is not None:
                    yield trace.run_id, trace.spans()
                trace = RunTrace(run_id, include_content=include_content, runs=known)
            entry = _loads(value)
            entry["type"], entry["session"], entry["offset"] = kind, session, offset
            trace.add(entry, 0 if ms is None else ms * _NANOS_PER_MS)
    if trace is not None:
        yield trace.run_id, trace.spans()


_ROWS = 8192


def _in_order(entries: pa.Table, ids: list[str]) -> pa.Table:
    """`entries` with each run's entries together, in offset order, the runs in the order of
    `ids` (sorted only when they are not: a decoded batch is)."""
    position = pc.index_in(entries.column("run_id"), value_set=pa.array(ids, pa.string()))
    offsets, count = entries.column("offset"), entries.num_rows
    if count < 2:
        return entries
    after, before = position.slice(1), position.slice(0, count - 1)
    rising = pc.greater(offsets.slice(1), offsets.slice(0, count - 1))
    ordered = pc.or_(pc.greater(after, before), pc.and_(pc.equal(after, before), rising))
    if pc.all(ordered).as_py():
        return entries
    keyed = entries.append_column("_position", position)
    keyed = keyed.sort_by([("_position", "ascending"), ("offset", "ascending")])
    return keyed.drop_columns(["_position"])


def json_batches(
    runs: Iterator[tuple[str, list[dict[str, Any]]]],
    *,
    runs_per_request: int | None = None,
    request_bytes: int | None = None,
) -> Iterator[tuple[list[str], int, bytes]]:
    """The runs' spans as OTLP/JSON requests (UTF-8, no newline): each `(run ids, number of
    spans, request)` holding at most `runs_per_request` runs (default `RUNS_PER_REQUEST`) and,
    unless one span is larger, about `request_bytes` bytes (default `REQUEST_BYTES`; a run
    larger than that is split over requests)."""
    return batches(runs, _json_chunks, _json_request, runs_per_request, request_bytes)


def _json_chunks(spans: list[dict[str, Any]]) -> bytes:
    return _dumps(spans)[1:-1]


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _json_loads(text: str) -> Any:
    return json.loads(text)


try:  # orjson (the otel extra) writes the same JSON about 8x faster; floats may read "1e+16"
    import orjson

    _dumps: Callable[[Any], bytes] = orjson.dumps

    def _loads(text: str) -> Any:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # an integer past 64 bits, a NaN: what json reads
            return json.loads(text)

except ImportError:  # pragma: no cover - the standard library's C encoder
    _dumps = _json_dumps
    _loads = _json_loads


def _json_request(chunks: list[bytes]) -> bytes:
    scope = json.dumps({"name": SCOPE, "version": version()}, separators=(",", ":"))
    resource = json.dumps({"attributes": resource_attributes()}, separators=(",", ":"))
    head = f'{{"resourceSpans":[{{"resource":{resource},"scopeSpans":[{{"scope":{scope},"spans":['
    return head.encode() + b",".join(chunks) + b"]}]}]}"


def batches(
    runs: Iterator[tuple[str, list[dict[str, Any]]]],
    encode: Callable[[list[dict[str, Any]]], bytes],
    request: Callable[[list[bytes]], bytes],
    runs_per_request: int | None = None,
    request_bytes: int | None = None,
) -> Iterator[tuple[list[str], int, bytes]]:
    """Requests of the runs' spans, each `(run ids, number of spans, request)`: `encode`
    gives a run's spans as bytes, `request` the request of such chunks. At most
    `runs_per_request` runs (default `RUNS_PER_REQUEST`) and, unless one span is larger, about
    `request_bytes` bytes (default `REQUEST_BYTES`) a request; a run larger than that is split
    over requests, span by span."""
    runs_per_request = runs_per_request or RUNS_PER_REQUEST
    request_bytes = request_bytes or REQUEST_BYTES
    ids: list[str] = []
    chunks: list[bytes] = []
    size = spans = 0
    for run_id, found in runs:
        if not found:
            continue
        chunk = encode(found)
        pieces = [(chunk, len(found))]
        if len(chunk) > request_bytes:  # a huge run: span by span, over several requests
            pieces = [(encode([span]), 1) for span in found]
        for piece, count in pieces:
            if chunks and (size + len(piece) > request_bytes or len(ids) >= runs_per_request):
                yield ids, spans, request(chunks)
                ids, chunks, size, spans = [], [], 0, 0
            if not ids or ids[-1] != run_id:
                ids.append(run_id)
            chunks.append(piece)
            size += len(piece) + 1
            spans += count
    if chunks:
        yield ids, spans, request(chunks)


class OtlpSink:
    """`kx.export(..., format="otlp")`'s sink: `traces.jsonl`, one OTLP/JSON request per
    bounded batch of runs, as the OpenTelemetry Collector's file exporter writes and its file
    receiver reads. Memory is bounded by a read batch, not by the store."""

    def __init__(self, directory: Path, *, include_content: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / TRACES_FILE
        self._file: IO[bytes] = self._path.open("wb")  # closed by close()
        self._include_content = include_content

    def write(self, entries: pa.Table, runs: pa.Table) -> None:
        for _, _, line in json_batches(run_spans(entries, runs, self._include_content)):
            self._file.write(line + b"\n")

    def close(self, runs: pa.Table) -> list[Path]:
        self._file.close()
        return [self._path]
