"""Reading status and holding a live run: two costs as ratios against a floor of the same run.

  list    `kassette list` (the CLI's function, in process) over a store of N runs (default
          10,000; a start, 8 steps and, in two runs of three, a `complete` each; step results
          chat-completion-like, ~1 KB, or `--small` ones of ~300 bytes), over reading every
          journal's bytes (`LocalStorage.read` of each run), median of rounds
  live    the memory a live run of N steps (default 20,000, ~1 KB results) adds to a fresh
          child process (peak RSS less the RSS before it starts), over the journal's size

Run from a checkout: `python benchmarks/bench_status.py [--runs N] [--steps N] [--rounds N]`;
measure another checkout by running its copy of this script (it imports the checkout it is in).
The live run writes to /dev/shm when there is one (fsync there costs nothing: only memory is
measured). Exit status 0 when list <= LIST_TARGET and live <= LIVE_TARGET.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kassette import LocalStorage
from kassette.cli import main as cli_main
from kassette.journal import encode, format_timestamp

LIST_TARGET = 2.5  # list over raw reads; see docs/performance.md
LIVE_TARGET = 1.5

_LIVE = """
import os, resource, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
from bench_local import llm_result
from kassette import LocalStorage, kassette
results = [llm_result(i) for i in range(200)]  # made before: the run's entries are measured
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def work(ctx, steps):
    for i in range(steps):
        ctx.step("chat", lambda i=i: results[i % 200])
    return steps
storage = LocalStorage({directory!r})
flow = kassette(work, storage=storage)
before = rss()
flow.start({steps}, run_id="live")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(peak - before, os.path.getsize(os.path.join({directory!r}, "live.jsonl")))
"""


def write_store(directory: Path, runs: int, *, small: bool = False) -> None:
    from bench_local import llm_result

    stamp = format_timestamp(1_767_225_600.0)
    for number in range(runs):
        result = {"text": "x" * 240, "tokens": 123} if small else llm_result(number)
        lines = [{"type": "start", "session": 1, "offset": 0, "timestamp": stamp, "metadata": {}}]
        for step in range(8):
            lines.append(
                {
                    "type": "step",
                    "session": 1,
                    "offset": step + 1,
                    "timestamp": stamp,
                    "stepId": f"s{step}",
                    "name": "s",
                    "result": result,
                }
            )
        if number % 3:
            lines.append({"type": "complete", "session": 1, "offset": 9, "timestamp": stamp})
        (directory / f"run-{number:05d}.jsonl").write_bytes(b"".join(map(encode, lines)))


def measure_list(directory: Path, rounds: int) -> tuple[float, float]:
    storage = LocalStorage(directory)
    listed, raw = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        for run_id in storage.list_runs():
            storage.read(run_id)
        raw.append(time.perf_counter() - started)
        out = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out):
            cli_main(["--storage", f"file:{directory}", "list"])
        listed.append(time.perf_counter() - started)
    return statistics.median(listed), statistics.median(raw)


def measure_live(steps: int) -> tuple[int, int]:
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as directory:
        script = _LIVE.format(
            root=str(Path(__file__).resolve().parent.parent),
            bench=str(Path(__file__).resolve().parent),
            directory=directory,
            steps=steps,
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
    added, size = map(int, done.stdout.split())
    return added, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="~300-byte step results")
    args = parser.parse_args(argv)
    print(
        f"# python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as directory:
        write_store(Path(directory), args.runs, small=args.small)
        listed, raw = measure_list(Path(directory), args.rounds)
    added, size = measure_live(args.steps)
    figures = {
        "list": {
            "runs": args.runs,
            "results": "~300 B" if args.small else "~1 KB",
            "list_s": round(listed, 3),
            "read_s": round(raw, 3),
            "ratio": round(listed / raw, 2),
            "target": LIST_TARGET,
        },
        "live": {
            "steps": args.steps,
            "added_mib": round(added / 2**20, 1),
            "journal_mib": round(size / 2**20, 1),
            "ratio": round(added / size, 2),
            "target": LIVE_TARGET,
        },
    }
    for name, figure in figures.items():
        print(json.dumps({"measure": name, **figure}))
    met = figures["list"]["ratio"] <= LIST_TARGET and figures["live"]["ratio"] <= LIVE_TARGET
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
