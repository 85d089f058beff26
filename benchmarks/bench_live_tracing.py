"""Live tracing benchmark: one run of many steps, untraced and traced by
`kassette.integrations.otel.instrument()` (issue 30 §2: linear, at most 1.2x untraced).

A `def` workflow of N steps (each returns a small dict) runs on `LocalStorage` in a temporary
directory (what a durable run pays: an fsync per step) and, with `--memory`, on
`MemoryStorage` (no disk: kassette's own append path is the whole floor, the hardest
baseline). The traced runs go through an SDK `TracerProvider`
whose one span processor drops what it is given (what is measured is kassette's side: the
listener, the mapping of entries to spans, the SDK's span objects; not an exporter's I/O).
Runs alternate untraced and traced, repeated; printed: the fastest of each, the median of the
paired ratios, and the spans emitted. A quadratic tracer shows as a ratio that grows with N:
`--steps 2000 --steps 10000` prints both.

Run from a checkout: `python benchmarks/bench_live_tracing.py` (10,000 steps; a minute or
two). Exit status 0 when the ratio at the largest N meets its target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from kassette import LocalStorage, MemoryStorage, kassette
from kassette.integrations import otel

TARGET = 1.2


class Counting(SpanProcessor):
    def __init__(self) -> None:
        self.spans = 0

    def on_end(self, span: Any) -> None:
        self.spans += 1


def run_once(
    steps: int, traced: bool, counter: Counting, provider: TracerProvider, memory: bool = False
) -> float:
    folder = tempfile.TemporaryDirectory()
    storage = MemoryStorage() if memory else LocalStorage(folder.name)

    @kassette(storage=storage)
    def many(ctx: Any, n: int) -> int:
        for i in range(n):
            ctx.step("work", lambda i=i: {"i": i, "text": "a short answer"})
        return n

    if traced:
        otel.instrument(provider)
    try:
        began = time.perf_counter()
        assert many.start(steps, run_id="bench").status == "success"
        return time.perf_counter() - began
    finally:
        otel.uninstrument()
        folder.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, action="append", help="steps per run (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory", action="store_true", help="MemoryStorage, not LocalStorage")
    args = parser.parse_args()
    counter = Counting()
    provider = TracerProvider()
    provider.add_span_processor(counter)
    ratio = float("inf")
    for steps in args.steps or [10_000]:
        untraced, traced, ratios = [], [], []
        for _ in range(args.repeats):
            plain = run_once(steps, False, counter, provider, args.memory)
            before = counter.spans
            live = run_once(steps, True, counter, provider, args.memory)
            emitted = counter.spans - before
            untraced.append(plain)
            traced.append(live)
            ratios.append(live / plain)
        ratio = statistics.median(ratios)
        print(
            f"{'MemoryStorage' if args.memory else 'LocalStorage'}, {steps:,} steps: "
            f"untraced {min(untraced):.3f} s, traced {min(traced):.3f} s "
            f"({emitted:,} spans a run), median ratio {ratio:.2f}x (target <= {TARGET}x)"
        )
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
