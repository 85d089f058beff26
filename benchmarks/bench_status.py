"""Reading status and holding a live run: each cost as a ratio against a baseline of the same run.

  list    `kassette list` (the CLI's function, in process) over a store of N runs (default
          10,000; a start, 8 steps and, in two runs of three, a `complete` each), over the same
          `kassette list` folding each run's status from its fully decoded journal
          (`Journal.parse(...).status()`, what `list` did before it skipped step results), median
          of rounds taken in turn; for step results of ~1 KB (chat-completion-like) and of
          ~300 bytes. `e2e` is the same pair as whole processes (`python -m kassette list`,
          interpreter start and imports included, output to /dev/null). `read_s` is reading every
          journal's bytes (`LocalStorage.read`), the floor of both.
  live    the memory a live run of N steps (default 20,000, ~1 KB results) adds to a fresh
          child process (peak RSS less the RSS before it starts), over the journal's size

Run from a checkout: `python benchmarks/bench_status.py [--runs N] [--steps N] [--rounds N]`;
measure another checkout by running its copy of this script (it imports the checkout it is in).
The live run writes to /dev/shm when there is one (fsync there costs nothing: only memory is
measured). Exit status 0 when every list ratio <= LIST_TARGET and live <= LIVE_TARGET.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kassette import LocalStorage
from kassette._cli import main as cli_main
from kassette._journal import Journal, RunStatus, encode, format_timestamp

LIST_TARGET = 0.5  # list over the full-decode list; see docs/performance.md
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


_FULL_DECODE = """
import sys
sys.path.insert(0, {root!r})
from kassette._journal import Journal
Journal.status_of = staticmethod(lambda data, run_id: Journal.parse(data, run_id).status())
from kassette._cli import main
sys.exit(main(["--storage", "file:" + {directory!r}, "list"]))
"""


calls: list[str] = []  # the runs `full_decode` folded


def full_decode(data: bytes, run_id: str) -> RunStatus:
    """The status as `kassette list` folded it before skipping step results."""
    calls.append(run_id)
    return Journal.parse(data, run_id).status()


def list_once(directory: Path, *, old: bool) -> float:
    """Seconds `kassette list` takes in process; `old`: folding each run in full."""
    out = io.StringIO()
    saved = Journal.status_of
    calls.clear()
    if old:
        Journal.status_of = staticmethod(full_decode)
    try:
        started = time.perf_counter()
        with contextlib.redirect_stdout(out):
            cli_main(["--storage", f"file:{directory}", "list"])
        elapsed = time.perf_counter() - started
    finally:
        Journal.status_of = saved
    if old:  # the baseline really decoded every run
        assert len(calls) == out.getvalue().count("\n"), "the CLI no longer calls status_of"
    return elapsed


def list_process(directory: Path, *, old: bool) -> float:
    """Seconds a `kassette list` process takes, from its start to its exit."""
    root = str(Path(__file__).resolve().parent.parent)
    if old:
        command = [sys.executable, "-c", _FULL_DECODE.format(root=root, directory=str(directory))]
    else:
        command = [sys.executable, "-m", "kassette", "--storage", f"file:{directory}", "list"]
    environment = {**os.environ, "PYTHONPATH": root}
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True, env=environment)
    return time.perf_counter() - started


def measure_list(directory: Path, rounds: int) -> dict[str, float]:
    """Medians of `rounds` rounds, each measure taken in turn within a round."""
    storage = LocalStorage(directory)
    times: dict[str, list[float]] = {"new": [], "old": [], "read": [], "e2e_new": [], "e2e_old": []}
    for number in range(rounds):
        started = time.perf_counter()
        for run_id in storage.list_runs():
            storage.read(run_id)
        times["read"].append(time.perf_counter() - started)
        times["new"].append(list_once(directory, old=False))
        times["old"].append(list_once(directory, old=True))
        if number < 3:  # whole processes: fewer rounds
            times["e2e_new"].append(list_process(directory, old=False))
            times["e2e_old"].append(list_process(directory, old=True))
    return {name: statistics.median(values) for name, values in times.items()}


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
    args = parser.parse_args(argv)
    print(
        f"# python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}"
    )
    figures: dict[str, dict[str, Any]] = {}
    for small in (False, True):
        with tempfile.TemporaryDirectory() as directory:
            write_store(Path(directory), args.runs, small=small)
            listed = measure_list(Path(directory), args.rounds)
        figures["list" + ("-small" if small else "")] = {
            "runs": args.runs,
            "results": "~300 B" if small else "~1 KB",
            "list_s": round(listed["new"], 3),
            "full_decode_s": round(listed["old"], 3),
            "read_s": round(listed["read"], 3),
            "ratio": round(listed["new"] / listed["old"], 2),
            "e2e_s": round(listed["e2e_new"], 3),
            "e2e_full_decode_s": round(listed["e2e_old"], 3),
            "e2e_ratio": round(listed["e2e_new"] / listed["e2e_old"], 2),
            "target": LIST_TARGET,
        }
    added, size = measure_live(args.steps)
    figures["live"] = {
        "steps": args.steps,
        "added_mib": round(added / 2**20, 1),
        "journal_mib": round(size / 2**20, 1),
        "ratio": round(added / size, 2),
        "target": LIVE_TARGET,
    }
    for name, figure in figures.items():
        print(json.dumps({"measure": name, **figure}))
    ratios = [(f["ratio"], f["target"]) for f in figures.values()]
    ratios += [(figures[name]["e2e_ratio"], LIST_TARGET) for name in ("list", "list-small")]
    return 0 if all(ratio <= target for ratio, target in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
