"""Async workflows on S3 with network latency: storage I/O off the event loop (issue 15, item 4).

Starts a moto S3 server on 127.0.0.1 (the `dev` extra) and adds `--latency` seconds (default
20 ms) to every request the client sends, in the thread that sends it (a botocore
`before-send` hook), as a round trip to a real bucket would. Each row is an `async def`
workflow on `S3Storage`, its medians over `--rounds` rounds (the rows alternate):

  off loop    one `ctx.parallel` block of `--branches` branches x `--steps` steps: the storage
              I/O runs in the invocation's worker thread (this checkout's behaviour)
  on loop     the same block with every storage call made on the event loop, as before this
              change (`kassette._workflow._off_loop` replaced by a direct call): the baseline
  sequential  the same number of steps, one after another, off the loop and on it (the cost
              of the thread hop where there is nothing to overlap)
  8 runs      `--branches` runs of `--steps` sequential steps each, concurrently on one loop,
              off the loop and on it

and prints each row's wall time, its ratio to its baseline, the PUTs of a run and the steps
each carried on average (the session's start and the outcome are PUTs too), the most requests
in flight at once, and the longest the loop went without running a ticker task (a 1 ms
`asyncio.sleep` loop): how long a write held the loop. Step functions return at once, so the
time is the journal's. Exit status 0 when `off loop` takes at most half of `on loop`.

    python benchmarks/bench_async_s3.py [--branches 8] [--steps 10] [--rounds 3] [--latency 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from _moto import BUCKET, moto_client

import kassette._workflow
from kassette import kassette as durable
from kassette.core import read_journal
from kassette.storage._s3 import S3Storage

TARGET = 0.5
RESULT = "x" * 200


class Requests:
    """The client's requests: a `before-send` hook that waits `latency` and counts."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.mutex = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.puts = 0

    def __call__(self, request: Any, **_: Any) -> None:
        with self.mutex:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.puts += request.method == "PUT"
        time.sleep(self.latency)
        with self.mutex:
            self.in_flight -= 1

    def reset(self) -> None:
        with self.mutex:
            self.most_in_flight, self.puts = 0, 0


@contextmanager
def on_loop() -> Iterator[None]:
    """Every storage call of an async workflow made on the event loop, as before."""

    async def direct(io: Any, call: Callable[..., Any], *args: Any) -> Any:
        return call(*args)

    original = kassette._workflow._off_loop
    kassette._workflow._off_loop = direct  # type: ignore[assignment]
    try:
        yield
    finally:
        kassette._workflow._off_loop = original


@dataclass
class Row:
    name: str
    baseline: str
    seconds: list[float] = field(default_factory=list)
    puts: list[float] = field(default_factory=list)
    steps_per_put: list[float] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    stall_ms: list[float] = field(default_factory=list)


def workflows(storage: S3Storage, branches: int, steps: int) -> dict[str, Any]:
    async def block(ctx: Any, _: Any) -> Any:
        async def branch(c: Any) -> None:
            for _ in range(steps):
                await c.step("work", lambda: RESULT)

        await ctx.parallel({f"b{i}": branch for i in range(branches)})

    async def sequential(ctx: Any, _: Any) -> Any:
        for _ in range(branches * steps):
            await ctx.step("work", lambda: RESULT)

    async def short(ctx: Any, _: Any) -> Any:
        for _ in range(steps):
            await ctx.step("work", lambda: RESULT)

    return {
        "block": durable(block, storage=storage),
        "sequential": durable(sequential, storage=storage),
        "short": durable(short, storage=storage),
    }


async def timed(runs: list[Any]) -> tuple[float, float]:
    """Wall seconds of running `runs` (awaitables) concurrently, and the loop's longest stall."""
    done = False
    stall = 0.0

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stall, last = max(stall, now - last), now

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = time.perf_counter()
    results = await asyncio.gather(*runs)
    seconds = time.perf_counter() - started
    done = True
    await ticking
    assert all(r.status == "success" for r in results), results
    return seconds, stall * 1000


def measure(row: Row, storage: S3Storage, requests: Requests, runs: list[tuple[Any, str]]) -> None:
    requests.reset()
    seconds, stall = asyncio.run(timed([wf.start(None, run_id=run_id) for wf, run_id in runs]))
    puts, in_flight = requests.puts, requests.most_in_flight
    steps = sum(
        sum(e["type"] == "step" for e in read_journal(storage, run_id).entries)
        for _, run_id in runs
    )
    row.seconds.append(seconds)
    row.puts.append(puts / len(runs))
    row.steps_per_put.append(steps / puts)
    row.in_flight.append(in_flight)
    row.stall_ms.append(stall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="steps per branch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added per request")
    args = parser.parse_args(argv)

    with moto_client(max_pool_connections=32) as client:
        requests = Requests(args.latency)
        client.meta.events.register("before-send.s3", requests)
        storage = S3Storage(BUCKET, "async", client=client)
        flows = workflows(storage, args.branches, args.steps)
        n = args.branches

        rows = {
            "off loop": Row("off loop", "on loop"),
            "on loop": Row("on loop", "on loop"),
            "sequential off": Row("sequential off", "sequential on"),
            "sequential on": Row("sequential on", "sequential on"),
            f"{n} runs off": Row(f"{n} runs off", f"{n} runs on"),
            f"{n} runs on": Row(f"{n} runs on", f"{n} runs on"),
        }

        def ids(count: int) -> list[str]:
            return [uuid.uuid4().hex for _ in range(count)]

        for _ in range(args.rounds):
            measure(rows["off loop"], storage, requests, [(flows["block"], ids(1)[0])])
            with on_loop():
                measure(rows["on loop"], storage, requests, [(flows["block"], ids(1)[0])])
            sequential = [(flows["sequential"], ids(1)[0])]
            measure(rows["sequential off"], storage, requests, sequential)
            with on_loop():
                sequential = [(flows["sequential"], ids(1)[0])]
                measure(rows["sequential on"], storage, requests, sequential)
            many = [(flows["short"], run_id) for run_id in ids(n)]
            measure(rows[f"{n} runs off"], storage, requests, many)
            with on_loop():
                many = [(flows["short"], run_id) for run_id in ids(n)]
                measure(rows[f"{n} runs on"], storage, requests, many)

    median = statistics.median
    print(
        f"# {args.branches} branches x {args.steps} steps, {args.latency * 1000:.0f} ms per "
        f"request, {args.rounds} rounds; python {sys.version.split()[0]}, {os.cpu_count()} cpus"
    )
    header = [
        "row",
        "wall s",
        "ratio",
        "against",
        "PUTs/run",
        "steps/PUT",
        "max in flight",
        "loop stall ms",
    ]
    table = [header]
    for row in rows.values():
        baseline = median(rows[row.baseline].seconds)
        table.append(
            [
                row.name,
                f"{median(row.seconds):.3f}",
                f"{median(row.seconds) / baseline:.2f}x",
                row.baseline,
                f"{median(row.puts):.0f}",
                f"{median(row.steps_per_put):.2f}",
                f"{max(row.in_flight)}",
                f"{median(row.stall_ms):.0f}",
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
    ratio = median(rows["off loop"].seconds) / median(rows["on loop"].seconds)
    print(f"off loop / on loop: {ratio:.2f}x (target <= {TARGET}x)")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
