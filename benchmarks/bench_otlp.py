"""OpenTelemetry export benchmark: `kx.export(format="otlp")` against the Parquet export.

A LocalStorage of 10,000 runs x 30 entries (300,000: a start, 28 steps of which every other one
is an OpenAI chat completion journaled with its request, a complete) is exported to
`traces.jsonl` (`kx.export(storage, out, format="otlp")`: spans built as OTLP/JSON from the
journal entries, one request per bounded batch of runs) and, in the same process, interleaved
and repeated, to Parquet (`kx.export(storage, out)`, the default). Printed: both wall times
(the fastest of the repeats), spans per second (target >= 20,000), the median of the paired
ratios (target <= 3x, stretch 2x), the lines of `traces.jsonl` and the largest, and the peak
RSS of each export run alone in a fresh process (before: the interpreter with kassette
imported; after: the export's peak), which a batch bounds, not the store.

Run from a checkout: `python benchmarks/bench_otlp.py` (a few minutes on a busy 2-core
machine) or `--quick` (1,000 runs), `--runs N`; `--dir` picks where the journals go. Exit
status 0 when both targets are met.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from kassette import LocalStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp

TARGET = 3.0
SPANS_PER_SECOND = 20_000
ENTRIES = 30
ROOT = Path(__file__).resolve().parent.parent


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


def peak_rss(storage: Path, out: Path, format: str) -> tuple[float, float]:
    """(before, after) peak RSS in MB of one export run alone in a fresh process: VmHWM, the
    process's own high-water mark (getrusage's ru_maxrss would carry this process's over
    exec)."""
    code = (
        "import re; from kassette import explore as kx\n"
        "def hwm():\n"
        "    status = open('/proc/self/status').read()\n"
        "    return int(re.search(r'VmHWM:\\s+(\\d+)', status).group(1))\n"
        "before = hwm()\n"
        f"kx.export({str(storage)!r}, {str(out)!r}, format={format!r}, progress=False)\n"
        "print(before, hwm())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        timeout=3600,
    )
    before, after = (int(word) / 1024 for word in done.stdout.split())
    return before, after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 runs")
    parser.add_argument("--runs", type=int, help="this many runs")
    parser.add_argument("--dir", type=Path, help="where the journals go (default: a temp dir)")
    args = parser.parse_args()
    runs = args.runs or (1_000 if args.quick else 10_000)
    repeats = 2
    root = Path(tempfile.mkdtemp(prefix="bench-otlp-", dir=args.dir))
    try:
        storage = LocalStorage(root / "store")
        for run in range(runs):
            storage.append(f"run-{run:05d}", journal(run), token=None)
        parquet: list[float] = []
        otlp: list[float] = []
        ratios: list[float] = []
        cpu_ratios: list[float] = []  # CPU time (all threads): steadier on a shared machine
        otlp_cpu: list[float] = []
        for number in range(repeats):
            began, cpu = time.perf_counter(), time.process_time()
            kx.export(storage, root / f"parquet-{number}", progress=False)
            parquet.append(time.perf_counter() - began)
            parquet_cpu = time.process_time() - cpu
            began, cpu = time.perf_counter(), time.process_time()
            kx.export(storage, root / f"otlp-{number}", format="otlp", progress=False)
            otlp.append(time.perf_counter() - began)
            otlp_cpu.append(time.process_time() - cpu)
            cpu_ratios.append(otlp_cpu[-1] / parquet_cpu)
            ratios.append(otlp[-1] / parquet[-1])
            shutil.rmtree(root / f"parquet-{number}")
        traces = root / "otlp-0" / "traces.jsonl"
        lines = largest = spans = 0
        with traces.open("rb") as read:
            for line in read:
                lines += 1
                largest = max(largest, len(line))
                spans += sum(
                    len(scope.get("spans", []))
                    for resource_spans in json.loads(line)["resourceSpans"]
                    for scope in resource_spans["scopeSpans"]
                )
        assert (root / "otlp-1" / "traces.jsonl").read_bytes() == traces.read_bytes()
        ratio = statistics.median(ratios)
        rate = spans / min(otlp)
        rss_parquet = peak_rss(root / "store", root / "rss-parquet", "parquet")
        rss_otlp = peak_rss(root / "store", root / "rss-otlp", "otlp")
        size = traces.stat().st_size / 1e6
        largest_mb = largest / 1e6
        cpu_ratio = statistics.median(cpu_ratios)
        print(f"runs {runs}, entries {runs * ENTRIES}, spans {spans}")
        print(f"parquet export  {min(parquet):8.2f} s")
        print(
            f"otlp export     {min(otlp):8.2f} s   {rate:,.0f} spans/s (target >= 20,000);"
            f" {spans / min(otlp_cpu):,.0f} a CPU second"
        )
        print(f"traces.jsonl    {size:.0f} MB in {lines} lines, the largest {largest_mb:.1f} MB")
        print(
            f"ratio otlp/parquet  {ratio:.2f}x (median of {repeats}; target <= {TARGET}x,"
            f" stretch 2x); in CPU time {cpu_ratio:.2f}x"
        )
        print(
            "peak RSS, MB (a fresh process, before -> after the export): parquet"
            f" {rss_parquet[0]:.0f} -> {rss_parquet[1]:.0f}, otlp {rss_otlp[0]:.0f} ->"
            f" {rss_otlp[1]:.0f}"
        )
        return 0 if ratio <= TARGET and rate >= SPANS_PER_SECOND else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
