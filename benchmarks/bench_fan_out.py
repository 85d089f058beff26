"""kx.fan_out benchmark: 16 branches of 20 steps on LocalStorage, concurrently and one by one.

The same fan-out is run twice per round, on the default thread pool (every branch at once) and
on a one-thread executor (one branch after another), alternating over a few rounds with a
fresh branch prefix each time; the figures are medians. Each step appends (and fsyncs) one
journal line; with `--latency` it first waits that long, as a step waiting on a model does.
Two rows: the journal alone (`--latency 0`), and steps with a simulated model call.

Then what watching costs, on threads with the journal alone (the worst case: nothing hides
it) and 200 steps per branch (so the display redraws a few dozen times): the fan-out with
`progress=False` (the baseline), with the progress display on (a terminal bar redrawn every
0.2 s into a discarded stream, forced on since the benchmark's stderr may not be a
terminal), and with a `budget` that is never reached (each branch then reads its journal's
new lines at every step boundary). Rounds alternate; ratios to the baseline, medians.

Run from a checkout: `python benchmarks/bench_fan_out.py` (under a minute) or `--quick`.
`--dir` picks where the journals go (fsync on tmpfs costs nothing). Prints the wall times and
the sequential/threads ratio; exit status 0 when threads are faster with model latency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from kassette import LocalStorage, kassette
from kassette import explore as kx

BRANCHES = 16
STEPS = 20
WATCHED_STEPS = 200  # long enough for the progress display to redraw a few dozen times


def make_agent(storage: LocalStorage, latency: float, steps: int = STEPS) -> Any:
    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> int:
        total = ctx.step("plan", lambda: 0)
        for number in range(steps):
            total += ctx.step("think", lambda n=number: time.sleep(latency) or n)
        return int(total)

    return agent


def measure(directory: Path, latency: float, rounds: int) -> tuple[float, float]:
    """Median wall seconds of the fan-out on threads and one branch at a time."""
    storage = LocalStorage(directory / f"latency-{latency}")
    agent = make_agent(storage, latency)
    agent.start(None, run_id="root")
    threads: list[float] = []
    sequential: list[float] = []
    for number in range(rounds):
        for label, times in (("threads", threads), ("sequential", sequential)):
            one = ThreadPoolExecutor(1) if label == "sequential" else None
            started = time.perf_counter()
            branches = kx.fan_out(
                agent, "root", step="think", n=BRANCHES, prefix=f"{label}-{number}", executor=one
            )
            times.append(time.perf_counter() - started)
            if one is not None:
                one.shutdown()
            statuses = set(branches.frame["status"])
            assert statuses == {"success"}, branches.frame
    return statistics.median(threads), statistics.median(sequential)


def measure_watching(directory: Path, rounds: int) -> dict[str, float]:
    """Median wall seconds of the fan-out on threads, unwatched, with progress, with a budget."""
    import io

    from kassette.explore import branches as branches_module
    from kassette.explore._progress import TerminalBar

    storage = LocalStorage(directory / "watching")
    agent = make_agent(storage, 0.0, WATCHED_STEPS)
    agent.start(None, run_id="root")
    shown = branches_module.display_for
    times: dict[str, list[float]] = {"unwatched": [], "progress": [], "budget": []}
    try:
        for number in range(rounds):
            for label, wall in times.items():
                branches_module.display_for = (  # type: ignore[assignment]
                    (lambda progress: TerminalBar(io.StringIO())) if label == "progress" else shown
                )
                started = time.perf_counter()
                branches = kx.fan_out(
                    agent,
                    "root",
                    step="think",
                    n=BRANCHES,
                    prefix=f"{label}-{number}",
                    progress=label == "progress",
                    budget={"tokens": 10**12} if label == "budget" else None,
                )
                wall.append(time.perf_counter() - started)
                assert set(branches.frame["status"]) == {"success"}, branches.frame
    finally:
        branches_module.display_for = shown  # type: ignore[assignment]
    return {label: statistics.median(wall) for label, wall in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round per row")
    parser.add_argument("--dir", type=Path, default=None, help="where the journals go")
    parser.add_argument(
        "--latency", type=float, default=0.01, help="seconds a step waits, as on a model"
    )
    args = parser.parse_args()
    rounds = 1 if args.quick else 3
    directory = Path(tempfile.mkdtemp(prefix="kassette-bench-fan-out-", dir=args.dir))
    try:
        print(
            f"kx.fan_out: {BRANCHES} branches x {STEPS} steps on LocalStorage ({directory}), "
            f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, median of {rounds}"
        )
        print(f"{'steps':<28}{'threads':>10}{'sequential':>12}{'ratio':>8}")
        ratio = 0.0
        for latency in (0.0, args.latency):
            threads, sequential = measure(directory, latency, rounds)
            ratio = sequential / threads
            label = "journal only" if latency == 0 else f"{latency * 1000:g} ms model latency"
            print(f"{label:<28}{threads:>9.2f}s{sequential:>11.2f}s{ratio:>7.1f}x")
        watching = measure_watching(directory, rounds + 2)
        print(f"\nwatching ({WATCHED_STEPS} steps, journal only){'wall':>7}{'ratio':>8}")
        for label, wall in watching.items():
            print(f"{label:<32}{wall:>8.2f}s{wall / watching['unwatched']:>7.2f}x")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0 if ratio > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
