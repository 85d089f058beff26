"""kassette.explore benchmark: loading a store into frames, against Arrow's own JSON reader.

A LocalStorage of 1,000 runs x 100 entries (an agent's journal: a start, chat-completion-like
step results of a few hundred bytes, a suspend and resume, more steps, a complete) is loaded
with `kx.load(storage).entries`, and two figures are printed:

  time    the load's wall time over `pyarrow.json.read_json` of the same bytes (all journals
          concatenated, in memory), measured in the same process, interleaved and repeated so
          a noisy machine moves both sides together (target <= 2x)
  memory  the peak RSS a fresh child process adds while loading, over the journals' size on
          disk (target <= 4x)

The journals are written directly in the journal format (`kassette.journal.encode`, one
create per run), which is what the library writes but without an fsync per entry.

Run from a checkout: `python benchmarks/bench_explore.py` (under a minute) or `--quick` (a
smoke run of 100 runs). `--dir` picks where the journals go (default: a temporary directory).
Exit status is 0 when both figures meet their targets, 1 otherwise.
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
from kassette.journal import encode, format_timestamp

TIME_TARGET = 2.0
MEMORY_TARGET = 4.0
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
    parser.add_argument("--dir", type=Path, help="where to write the journals")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return 0
    runs, repeats = (100, 2) if args.quick else (args.runs, args.repeats)
    root = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        size = write_store(root / "journals", runs, args.entries)
        best_load, best_read, ratio = time_ratio(root / "journals", repeats)
        used = memory(root / "journals")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    added = used["peak"] - used["before"]
    entries = runs * args.entries
    print(f"store        {runs} runs x {args.entries} entries, {size / 1e6:.1f} MB on disk")
    print(f"kx.load      {best_load * 1000:8.1f} ms  ({best_load / entries * 1e6:.2f} us/entry)")
    print(f"read_json    {best_read * 1000:8.1f} ms  (pyarrow.json, same bytes, in memory)")
    print(f"time         {ratio:8.2f} x read_json (median of {repeats}; target <= {TIME_TARGET})")
    print(
        f"memory       {added / size:8.2f} x bytes on disk (peak RSS added: {added / 1e6:.0f} MB,"
        f" RSS before: {used['before'] / 1e6:.0f} MB; target <= {MEMORY_TARGET})"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    return 0 if ratio <= TIME_TARGET and added / size <= MEMORY_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
