"""kassette.explore benchmark: what a watched RunTree costs while nothing changes.

A LocalStorage holding a fork forest of 10,000 runs (`--runs`; bench_explore's forest: 500
tasks forked 19 times, a model call per step) is loaded, and a `kx.RunTree` watches it with
`interval=1.0`. The figure is the CPU time (`time.process_time`: every thread of the process,
user and system) that 10 s (`--seconds`) of idle watching takes, as a share of one core, next
to the same 10 s measured in the same process without watching (the baseline: what an idle
process with the tree costs anyway), alternated `--rounds` times; medians are printed.

  watching   CPU seconds / wall seconds while the tree watches (target <= 0.05: 5% of a core)
  baseline   the same without watching
  poll       one idle `journals.refresh()` (a `stat` per run, no journal read), in ms, and
             the floor under it: `os.stat` of every journal

Then a new run is written and the tree must show it within 10 s (a sanity check that the
watcher does watch).

Run from a checkout: `python benchmarks/bench_watch.py` (about a minute), `--quick` for a
smoke run (1,000 runs, 2 s, one round). Exit status 0 when the target is met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_explore import forest_journals

from kassette import LocalStorage
from kassette import explore as kx

TARGET = 0.05


def cpu_share(seconds: float) -> float:
    """The process's CPU time over `seconds` of wall time, as a share of one core."""
    wall, cpu = time.monotonic(), time.process_time()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.monotonic() - wall)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.rounds = 1_000, 2.0, 1
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        storage = LocalStorage(Path(directory) / "store")
        for run_id, data in forest_journals(args.runs).items():
            storage.append(run_id, data, token=None)
        journals = kx.load(storage)
        tree = kx.RunTree(journals)
        watching, baseline = [], []
        for _ in range(args.rounds):
            tree.watch(1.0)
            watching.append(cpu_share(args.seconds))
            tree.unwatch()
            baseline.append(cpu_share(args.seconds))
        polls, floors = [], []
        paths = [storage.path / f"{run_id}.jsonl" for run_id in storage.list_runs()]
        for _ in range(5):
            started = time.perf_counter()
            assert journals.refresh() is journals
            polls.append(time.perf_counter() - started)
            started = time.perf_counter()
            for path in paths:
                os.stat(path)
            floors.append(time.perf_counter() - started)
        tree.watch(1.0)
        late = forest_journals(1)["task-0000-00"]
        storage.append("late", late, token=None)
        deadline = time.monotonic() + 10  # a bound, not a measurement: a loaded machine is slow
        while time.monotonic() < deadline and "late" not in tree.nodes:
            time.sleep(0.05)
        seen = "late" in tree.nodes
        tree.unwatch()
    share, idle = statistics.median(watching), statistics.median(baseline)
    print(f"{args.runs:,} runs, interval 1.0 s, {args.seconds:g} s x {args.rounds} rounds")
    print(
        f"watching   {share:.4f} of a core  (target <= {TARGET})  rounds: "
        + ", ".join(f"{value:.4f}" for value in watching)
    )
    print(f"baseline   {idle:.4f} of a core  (not watching)")
    print(
        f"poll       {statistics.median(polls) * 1000:.1f} ms idle refresh, "
        f"floor {statistics.median(floors) * 1000:.1f} ms (os.stat of every journal)"
    )
    print(f"a new run shown within 10 s: {'yes' if seen else 'NO'}")
    return 0 if share <= TARGET and seen else 1


if __name__ == "__main__":
    sys.exit(main())
