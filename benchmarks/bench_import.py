"""How fast `kx.import_otlp` journals traces, against the Parquet export of the same runs.

Writes 10,000 traces of 30 spans (300,000 spans) as OTLP/JSON lines, shaped as the
OpenInference instrumentations write them: an agent span, and under it ten model calls
(`input.value` the request, `output.value` the chat completion), ten tool spans and nine
chain spans. Imports them into a `MemoryStorage` and into a `LocalStorage` (a file and an
fsync a run), then exports the local store's runs to Parquet with `kx.export`, and prints
spans a second and the ratio of each import's time to the export's, measured in this run.

    python benchmarks/bench_import.py [--traces N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from kassette import LocalStorage
from kassette import explore as kx
from kassette.storage import MemoryStorage

CALLS = 10  # model calls a trace, each followed by a tool call; 9 chains; 1 agent span


def attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def span(trace: str, number: int, parent: str, name: str, at: int, **attributes: Any) -> Any:
    return {
        "traceId": trace,
        "spanId": f"{number:016x}",
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(at),
        "endTimeUnixNano": str(at + 900_000),
        "attributes": [attribute(key.replace("_", "."), v) for key, v in attributes.items()],
        "status": {"code": 1},
    }


def trace_spans(n: int) -> list[dict[str, Any]]:
    trace = f"{n:032x}"
    root = f"{n * 64:016x}"
    at = 1_700_000_000_000_000_000 + n * 10**9
    spans = [
        span(
            trace,
            n * 64,
            "",
            "agent",
            at,
            openinference_span_kind="AGENT",
            input_value=json.dumps({"ticket": n}),
        )
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Ticket {n}: the printer is on fire."}
    ]
    for call in range(CALLS):
        start = at + (call + 1) * 10_000_000
        request = {"model": "gpt-4o-mini", "messages": messages[-4:], "temperature": 0}
        answer = f"Step {call}: check the toner, then the fuse, then call facilities."
        response = {
            "id": f"chatcmpl-{n}-{call}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 40 + call,
                "completion_tokens": 15,
                "total_tokens": 55 + call,
            },
        }
        chain = n * 64 + 1 + call * 3
        if call:
            spans.append(span(trace, chain, root, "plan", start, openinference_span_kind="CHAIN"))
        spans.append(
            span(
                trace,
                chain + 1,
                root,
                "ChatCompletion",
                start + 1,
                openinference_span_kind="LLM",
                llm_system="openai",
                input_value=json.dumps(request),
                input_mime_type="application/json",
                output_value=json.dumps(response),
                output_mime_type="application/json",
                llm_model_name="gpt-4o-mini",
                llm_token_count_prompt=40 + call,
                llm_token_count_completion=15,
            )
        )
        spans.append(
            span(
                trace,
                chain + 2,
                root,
                "lookup",
                start + 2_000_000,
                openinference_span_kind="TOOL",
                tool_name="lookup",
                output_value=json.dumps({"found": call, "ticket": n}),
                output_mime_type="application/json",
            )
        )
        messages.append({"role": "assistant", "content": answer})
    return spans


def write_traces(path: Path, traces: int, per_line: int = 10) -> int:
    spans = 0
    with path.open("w") as file:
        for first in range(0, traces, per_line):
            batch = [s for n in range(first, min(first + per_line, traces)) for s in trace_spans(n)]
            spans += len(batch)
            request = {
                "resourceSpans": [{"scopeSpans": [{"scope": {"name": "bench"}, "spans": batch}]}]
            }
            file.write(json.dumps(request) + "\n")
    return spans


def timed(work: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    answer = work()
    return time.perf_counter() - started, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=10_000)
    traces = parser.parse_args().traces
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        source = root / "traces.jsonl"
        spans = write_traces(source, traces)
        size = source.stat().st_size / 2**20
        print(f"{traces} traces, {spans} spans, {size:.0f} MB of OTLP/JSON")
        memory_s, report = timed(lambda: kx.import_otlp(source, MemoryStorage()))
        assert len(report.run_ids) == traces and not report.partial
        local = LocalStorage(root / "store")
        local_s, report = timed(lambda: kx.import_otlp(source, local))
        assert len(report.written) == traces
        export_s, summary = timed(lambda: kx.export(local, root / "parquet", progress=False))
        print(f"parquet export of the {summary['runs']} runs: {export_s:.2f} s")
        for name, seconds in (("import into memory", memory_s), ("import into files", local_s)):
            print(
                f"{name}: {seconds:.2f} s, {spans / seconds:,.0f} spans/s, "
                f"{seconds / export_s:.2f}x the parquet export's time"
            )


if __name__ == "__main__":
    main()
