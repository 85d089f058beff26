"""OpenTelemetry export benchmark: `kx.export(format="otlp")` against the Parquet export.

A LocalStorage of 10,000 runs x 30 entries (300,000: a start, 28 steps of which every other one
is an OpenAI chat completion journaled with its request, a complete) is exported to
`traces.jsonl` (`kx.export(storage, out, format="otlp")`: every span built with the official
opentelemetry-proto messages and written as OTLP/JSON) and, in the same process, interleaved
and repeated, to Parquet (`kx.export(storage, out)`, the default). Printed: both wall times
(the fastest of the repeats), the median of the paired ratios (target <= 10x: OTLP builds a
span with a dozen attributes per entry where Parquet writes the entry's columns), the spans
written and the file's size.

Run from a checkout: `python benchmarks/bench_otlp.py` (a few minutes on a busy 2-core
machine) or `--quick` (1,000 runs); `--dir` picks where the journals go. Exit status 0 when
the ratio meets its target.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from kassette import LocalStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp

TARGET = 10.0
ENTRIES = 30


def journal(run: int) -> bytes:
    """One run: start, 28 steps (every other one a model call), complete."""
    began = 1_767_225_600.0 + run * 60
    lines: list[dict[str, Any]] = []
    for offset in range(ENTRIES):
        entry: dict[str, Any] = {
            "type": "step",
            "session": 1,
            "offset": offset,
            "timestamp": format_timestamp(began + offset * 1.5),
        }
        if offset == 0:
            entry |= {"type": "start", "metadata": {"ticket": run}, "version": "bench-v1"}
        elif offset == ENTRIES - 1:
            entry |= {"type": "complete", "result": {"resolved": True}}
        elif offset % 2:
            prompt = f"step {offset} of ticket {run}: what next?"
            entry |= {
                "stepId": "chat.completions.create" + (f"#{offset // 2 + 1}" if offset > 1 else ""),
                "name": "chat.completions.create",
                "result": {
                    "id": f"chatcmpl-{run}-{offset}",
                    "object": "chat.completion",
                    "created": int(began),
                    "model": "gpt-4o-mini-2024-07-18",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"do {offset + 1}"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 300 + offset,
                        "completion_tokens": 20 + run % 40,
                        "total_tokens": 320 + offset + run % 40,
                    },
                },
                "call": {
                    "provider": "openai",
                    "method": "chat.completions.create",
                    "request": {
                        "model": "gpt-4o-mini",
                        "messages": [{"role": "user", "content": prompt}],
                        "temperature": 0.7,
                    },
                },
                "durationMs": 400.0 + (run * 7 + offset) % 900,
            }
        else:
            entry |= {
                "stepId": f"tool#{offset // 2}" if offset > 2 else "tool",
                "name": "tool",
                "result": {"rows": offset, "ok": True},
                "durationMs": 12.5,
            }
        lines.append(entry)
    return b"".join(encode(line) for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 runs")
    parser.add_argument("--dir", type=Path, help="where the journals go (default: a temp dir)")
    args = parser.parse_args()
    runs, repeats = (1_000, 2) if args.quick else (10_000, 2)
    root = Path(tempfile.mkdtemp(prefix="bench-otlp-", dir=args.dir))
    try:
        storage = LocalStorage(root / "store")
        for run in range(runs):
            storage.append(f"run-{run:05d}", journal(run), token=None)
        parquet: list[float] = []
        otlp: list[float] = []
        ratios: list[float] = []
        for number in range(repeats):
            began = time.perf_counter()
            kx.export(storage, root / f"parquet-{number}", progress=False)
            parquet.append(time.perf_counter() - began)
            began = time.perf_counter()
            kx.export(storage, root / f"otlp-{number}", format="otlp", progress=False)
            otlp.append(time.perf_counter() - began)
            ratios.append(otlp[-1] / parquet[-1])
        traces = root / "otlp-0" / "traces.jsonl"
        with traces.open(encoding="utf-8") as lines:
            spans = sum(
                len(scope.get("spans", []))
                for line in lines
                for resource in json.loads(line)["resourceSpans"]
                for scope in resource["scopeSpans"]
            )
        ratio = statistics.median(ratios)
        print(f"runs {runs}, entries {runs * ENTRIES}, spans {spans}")
        print(f"parquet export  {min(parquet):8.2f} s")
        size = traces.stat().st_size / 1e6
        print(f"otlp export     {min(otlp):8.2f} s   traces.jsonl {size:.0f} MB")
        print(f"ratio otlp/parquet  {ratio:.2f}x (median of {repeats}; target <= {TARGET}x)")
        return 0 if ratio <= TARGET else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
