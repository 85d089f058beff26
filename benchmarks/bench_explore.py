"""kassette.explore benchmark: loading a store into frames, against Arrow's own JSON reader.

A LocalStorage of 1,000 runs x 100 entries (an agent's journal: a start, chat-completion-like
step results of a few hundred bytes, a suspend and resume, more steps, a complete) is loaded
with `kx.load(storage).entries`, and two figures are printed:

  time    the load's wall time over `pyarrow.json.read_json` of the same bytes (all journals
          concatenated, in memory), measured in the same process, interleaved and repeated so
          a noisy machine moves both sides together (target <= 2x)
  memory  the peak RSS a fresh child process adds while loading, over the journals' size on
          disk (target <= 4x)

The journals are written directly in the journal format (`kassette._journal.encode`, one
create per run), which is what the library writes but without an fsync per entry.

A second store, a fork forest of 10,000 runs (`--tree-runs`: 500 tasks, each forked 19 times,
forks of forks among them, a model call per step), gives the explorer's figures:

  tree     building `kx.RunTree` over `kx.load` of the same store (target <= 1x), and the
           number of widget models it creates (target <= 24: the forest is data, not widgets)
  export   `kx.export(partition_by="run_bucket")` (one hive-partitioned write, <= 256
           partitions) over the single-file Parquet export of the same store (target <= 3x);
           and, for the record, `partition_by="run_id"` (a partition, so a Parquet file and a
           directory, per run) over the same single file, with the disk's own floor for that
           many partitions (a directory and a 4 KB file written each, no Parquet) beside it

`--load-only` gives issue 29's load figures alone, at `--load-runs` runs (10,000), each
`kx.load(storage)` over its floor: reading every journal's bytes, joining them and one
`pyarrow.json.read_json` of the lot, measured in the same run, interleaved (target <= 1.3x):

  plain    runs of 30 entries of simple steps (the journal above)
  calls    copies of a researcher's run: 14 chat completions journaled with their requests
           through the OpenAI integration, between 14 tool steps (benchmarks/_agent_journal.py);
           and, for the record, the runs frame's model-call totals (read when first asked for)

Run from a checkout: `python benchmarks/bench_explore.py` (about a minute) or `--quick` (a
smoke run of 100 runs and a 1,000-run forest), `--export-only` for the export figures alone.
`--dir` picks where the journals go (default: a temporary directory). Exit status is 0 when
every figure meets its target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

import pyarrow.json as pa_json

from kassette import LocalStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp

TIME_TARGET = 2.0
MEMORY_TARGET = 4.0
TREE_TARGET = 1.0
MODELS_TARGET = 24
EXPORT_TARGET = 3.0
LOAD_TARGET = 1.3
_TEXT = (
    "The nightly suite fails in the payment client's retry wrapper: a timeout is swallowed and "
    "an empty body returned. Surface the timeout, add a bounded retry with jitter, log the id."
)


def journal(run: int, entries: int) -> bytes:
    """One run's journal: start, steps, a suspend and its resume in a second session, complete."""
    start = 1_767_225_600.0 + run * 600
    lines: list[dict[str, Any]] = []

    def add(kind: str, session: int, **fields: Any) -> None:
        stamp = format_timestamp(start + len(lines) * 1.5)
        lines.append(
            {"type": kind, "session": session, "offset": len(lines), "timestamp": stamp, **fields}
        )

    add("start", 1, metadata={"ticket": f"INC-{run}", "priority": run % 5}, version="bench-v1")
    middle = entries // 2
    session = 1
    while len(lines) < entries - 1:
        if len(lines) == middle:
            add("suspend", 1, eventId="review", event="review", reason="check the patch")
            add("start", 2, metadata={"ticket": f"INC-{run}", "priority": run % 5})
            add("resume", 2, eventId="review", event="review", value={"approved": True})
            session = 2
            continue
        step = len(lines)
        add(
            "step",
            session,
            stepId="chat" if step == 1 else f"chat#{step}",
            name="chat",
            result={
                "id": f"chatcmpl-{run:05d}-{step:03d}",
                "model": "gpt-4o-2024-08-06",
                "content": _TEXT[: 80 + (run * 7 + step * 13) % 100],
                "usage": {"prompt_tokens": 900 + step, "completion_tokens": 40 + step % 60},
            },
            durationMs=round(800 + (run * step) % 1700 + 0.25, 3),
        )
    add("complete", session, result={"resolved": True, "steps": entries - 5})
    return b"".join(encode(line) for line in lines[:entries])


def _adder(lines: list[dict[str, Any]], start: float) -> Any:
    def add(kind: str, session: int, **fields: Any) -> None:
        stamp = format_timestamp(start + len(lines) * 2.0)
        entry = {"type": kind, "session": session, "offset": len(lines), "timestamp": stamp}
        lines.append({**entry, **fields})

    return add


def forest_journals(runs: int, steps: int = 6) -> dict[str, bytes]:
    """A fan-out forest: every 20th run a task, the others forks of it or of an earlier fork."""
    made: dict[str, bytes] = {}
    for run in range(runs):
        task, branch = divmod(run, 20)
        start = 1_767_225_600.0 + run * 30
        source = None if branch == 0 else f"task-{task:04d}-{(branch - 1) // 3 * 3:02d}"
        lines: list[dict[str, Any]] = []
        add = _adder(lines, start)
        add("start", 1, metadata={"task": task}, version="bench-v1")
        session = 1
        for step in range(steps):
            if source is not None and step == 2:
                session = 2
                add("start", 2, metadata={"task": task}, source={"runId": source, "fromOffset": 3})
            add(
                "step",
                session,
                stepId=f"chat#{step}",
                name="chat",
                result={
                    "id": f"chatcmpl-{run}-{step}",
                    "model": "gpt-4o-mini",
                    "content": _TEXT[: 60 + (run + step) % 90],
                    "usage": {"prompt_tokens": 300 + step, "completion_tokens": 20 + run % 40},
                },
                durationMs=400.0 + (run * 7 + step) % 900,
            )
        add("complete", session, result={"score": (run * 37 % 100) / 100})
        made[f"task-{task:04d}-{branch:02d}"] = b"".join(encode(line) for line in lines)
    return made


def forest(directory: Path, runs: int) -> LocalStorage:
    storage = LocalStorage(directory / "forest")
    for run_id, data in forest_journals(runs).items():
        storage.append(run_id, data, token=None)
    return storage


def tree_figures(storage: LocalStorage, runs: int, repeats: int) -> dict[str, float]:
    """RunTree build over kx.load (median of paired ratios) and its widget models."""
    from ipywidgets.widgets.widget import _instances

    ratios, loads, builds, models = [], [], [], 0
    for _ in range(repeats):
        began = time.perf_counter()
        journals = kx.load(storage)
        loaded = time.perf_counter() - began
        before = len(_instances)
        began = time.perf_counter()
        tree = kx.RunTree(journals)
        built = time.perf_counter() - began
        models = len(_instances) - before
        assert len(tree.nodes) == runs
        tree.close()
        loads.append(loaded)
        builds.append(built)
        ratios.append(built / loaded)
    return {
        "load": min(loads),
        "build": min(builds),
        "tree": statistics.median(ratios),
        "models": models,
    }


def export_figures(storage: LocalStorage, directory: Path, repeats: int) -> dict[str, float]:
    """The partitioned exports over the single-file export, each ratio paired in one round
    (medians), and the disk's floor for a partition per run."""
    single: list[float] = []
    timed: dict[str, list[float]] = {"run_bucket": [], "run_id": []}
    ratios: dict[str, list[float]] = {"run_bucket": [], "run_id": []}
    for number in range(repeats):
        began = time.perf_counter()
        kx.export(storage, directory / f"single-{number}", format="parquet")
        single.append(time.perf_counter() - began)
        for column in timed:
            began = time.perf_counter()
            kx.export(storage, directory / f"{column}-{number}", partition_by=column)
            timed[column].append(time.perf_counter() - began)
            ratios[column].append(timed[column][-1] / single[-1])
        shutil.rmtree(directory / f"run_id-{number}")
    floor = directory / "floor"
    runs = sum(1 for _ in storage.list_runs())
    began = time.perf_counter()
    for run in range(runs):
        (floor / f"run_id={run}").mkdir(parents=True)
        (floor / f"run_id={run}" / "part-0-0.parquet").write_bytes(b"x" * 4096)
    floored = time.perf_counter() - began
    return {
        "single": min(single),
        "bucketed": min(timed["run_bucket"]),
        "bucket": statistics.median(ratios["run_bucket"]),
        "partitioned": min(timed["run_id"]),
        "export": statistics.median(ratios["run_id"]),
        "floor": floored,
        "floor_ratio": floored / min(single),
    }


def write_store(directory: Path, runs: int, entries: int) -> int:
    storage = LocalStorage(directory)
    size = 0
    for run in range(runs):
        data = journal(run, entries)
        storage.append(f"run-{run:05d}", data, token=None)
        size += len(data)
    return size


def time_ratio(directory: Path, repeats: int) -> tuple[float, float, float]:
    """Best load time, best read_json time (seconds), and the median of the paired ratios."""
    storage = LocalStorage(directory)
    data = b"".join(path.read_bytes() for path in sorted(directory.glob("*.jsonl")))
    loads, reads, ratios = [], [], []
    for _ in range(repeats):
        began = time.perf_counter()
        frame = kx.load(storage).entries
        loaded = time.perf_counter() - began
        began = time.perf_counter()
        table = pa_json.read_json(io.BytesIO(data))
        read = time.perf_counter() - began
        assert len(frame) == table.num_rows
        loads.append(loaded)
        reads.append(read)
        ratios.append(loaded / read)
        del frame, table
    return min(loads), min(reads), statistics.median(ratios)


def read_floor(directory: Path) -> float:
    """Read every journal's bytes, join them, parse them once with pyarrow: the floor."""
    began = time.perf_counter()
    data = b"".join(path.read_bytes() for path in sorted(directory.glob("*.jsonl")))
    pa_json.read_json(io.BytesIO(data))
    return time.perf_counter() - began


def load_ratio(directory: Path, repeats: int) -> dict[str, float]:
    """kx.load over the floor (median of paired ratios), best times, and the runs frame's
    model-call totals (read when first asked for) over the same floor."""
    storage = LocalStorage(directory)
    loads, floors, totals, ratios = [], [], [], []
    for _ in range(repeats):
        floors.append(read_floor(directory))
        began = time.perf_counter()
        journals = kx.load(storage)
        loads.append(time.perf_counter() - began)
        began = time.perf_counter()
        journals.to_arrow("runs")
        totals.append(time.perf_counter() - began)
        ratios.append(loads[-1] / floors[-1])
        del journals
    return {
        "load": min(loads),
        "floor": min(floors),
        "ratio": statistics.median(ratios),
        "low": min(ratios),
        "high": max(ratios),
        "totals": min(totals),
        "totals_ratio": statistics.median(t / f for t, f in zip(totals, floors, strict=True)),
    }


def load_figures(root: Path, runs: int, repeats: int) -> bool:
    """Issue 29's load figures, printed; whether both meet the target."""
    from _agent_journal import agent_journal

    plain, calls = root / "plain", root / "calls"
    write_store(plain, runs, 30)
    run = agent_journal()
    storage = LocalStorage(calls)
    for number in range(runs):
        storage.append(f"agent-{number:05d}", run, token=None)
    met = True
    for name, directory, what in (
        ("plain", plain, "30 entries of simple steps"),
        ("calls", calls, "14 chat completions with requests, 14 tool steps"),
    ):
        size = sum(path.stat().st_size for path in directory.glob("*.jsonl"))
        found = load_ratio(directory, repeats)
        print(f"{name:12} {runs} runs x {what}, {size / 1e6:.0f} MB")
        print(
            f"  kx.load    {found['ratio']:8.2f} x the floor (kx.load {found['load']:.2f} s, "
            f"read+join+read_json {found['floor']:.2f} s; median of {repeats}, "
            f"{found['low']:.2f}-{found['high']:.2f}; target <= {LOAD_TARGET})"
        )
        print(
            f"  totals     {found['totals_ratio']:8.2f} x the floor (the runs frame's model-call "
            f"columns, read when first asked for: {found['totals']:.2f} s)"
        )
        met = met and found["ratio"] <= LOAD_TARGET
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    return met


def _child(directory: str) -> None:
    """In a fresh process: the RSS before loading and the peak RSS while loading, in bytes."""
    before = _status("VmRSS")
    frame = kx.load(LocalStorage(directory)).entries
    print(json.dumps({"before": before, "peak": _status("VmHWM"), "rows": len(frame)}))


def _status(field: str) -> int:
    """A size from /proc/self/status, in bytes. (Not `ru_maxrss`: Linux carries it over from
    the parent across fork and exec, so a child would report its parent's peak.)"""
    with open("/proc/self/status") as file:
        for line in file:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def memory(directory: Path) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(directory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 runs, 2 repeats")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tree-runs", type=int, default=10_000)
    parser.add_argument("--export-only", action="store_true", help="the export figures alone")
    parser.add_argument("--load-only", action="store_true", help="issue 29's load figures")
    parser.add_argument("--load-runs", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, help="where to write the journals")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return 0
    runs, repeats = (100, 2) if args.quick else (args.runs, args.repeats)
    tree_runs = 1000 if args.quick else args.tree_runs
    met: list[bool] = []
    root = Path(tempfile.mkdtemp(dir=args.dir))
    if args.load_only:
        try:
            return 0 if load_figures(root, 100 if args.quick else args.load_runs, repeats) else 1
        finally:
            shutil.rmtree(root, ignore_errors=True)
    try:
        if not args.export_only:
            size = write_store(root / "journals", runs, args.entries)
            best_load, best_read, ratio = time_ratio(root / "journals", repeats)
            used = memory(root / "journals")
        storage = forest(root, tree_runs)
        if not args.export_only:
            tree = tree_figures(storage, tree_runs, max(2, repeats // 2))
        export = export_figures(storage, root, max(2, repeats // 2))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not args.export_only:
        added = used["peak"] - used["before"]
        entries = runs * args.entries
        print(f"store        {runs} runs x {args.entries} entries, {size / 1e6:.1f} MB on disk")
        print(
            f"kx.load      {best_load * 1000:8.1f} ms  ({best_load / entries * 1e6:.2f} us/entry)"
        )
        print(f"read_json    {best_read * 1000:8.1f} ms  (pyarrow.json, same bytes, in memory)")
        print(
            f"time         {ratio:8.2f} x read_json (median of {repeats}; target <= {TIME_TARGET})"
        )
        print(
            f"memory       {added / size:8.2f} x bytes on disk (peak RSS added: "
            f"{added / 1e6:.0f} MB, RSS before: {used['before'] / 1e6:.0f} MB; "
            f"target <= {MEMORY_TARGET})"
        )
    print(f"forest       {tree_runs} runs (tasks forked 19 times each)")
    if not args.export_only:
        print(
            f"tree         {tree['tree']:8.2f} x kx.load (RunTree {tree['build'] * 1000:.0f} ms, "
            f"kx.load {tree['load'] * 1000:.0f} ms; target <= {TREE_TARGET})"
        )
        print(f"models       {tree['models']:8d} widget models (target <= {MODELS_TARGET})")
        met += [
            ratio <= TIME_TARGET,
            added / size <= MEMORY_TARGET,
            tree["tree"] <= TREE_TARGET,
            tree["models"] <= MODELS_TARGET,
        ]
    print(
        f"export       {export['bucket']:8.2f} x single file, partition_by='run_bucket' "
        f"({export['bucketed'] * 1000:.0f} ms, one file {export['single'] * 1000:.0f} ms; "
        f"target <= {EXPORT_TARGET})"
    )
    print(
        f"per run      {export['export']:8.2f} x single file, partition_by='run_id' "
        f"({export['partitioned'] * 1000:.0f} ms: a Parquet file per run; no target)"
    )
    print(
        f"disk floor   {export['floor_ratio']:8.2f} x single file ({tree_runs} directories and "
        f"4 KB files, no Parquet: {export['floor'] * 1000:.0f} ms)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    met.append(export["bucket"] <= EXPORT_TARGET)
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
