"""Group commit on LocalStorage: concurrent appends against one write + fsync per entry.

  parallel   a workflow of one `ctx.parallel` block of 8 branches x 50 steps (~300-byte
             results), over 400 raw `os.write` + `os.fsync` of lines of the same size to a file
             of its own in the same directory
  sequential a workflow of 100 sequential steps, over 100 raw write + fsync

Rounds alternate the two sides; medians are printed, and (from the journal) how many entries
each fsync carried on average. Run from a checkout: `python benchmarks/bench_group.py
[--rounds N] [--dir DIR]`; fsync on tmpfs costs nothing, so use a real disk. Exit status 0
when parallel <= 1.0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from kassette import LocalStorage, kassette
from kassette.storage._local import LocalStorage as _Local

RESULT = "x" * 300


class _Counting(_Local):
    appends = 0

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        type(self).appends += 1
        return super().append(run_id, data, token=token)


def raw(directory: Path, count: int, size: int) -> float:
    """`count` write + fsync of `size`-byte lines, appended to a new file beside the journals."""
    line = b"y" * (size - 1) + b"\n"
    (directory / "journals").mkdir(exist_ok=True)
    path = directory / "journals" / f"raw-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, line)
            os.fsync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)


def parallel(ctx: Any, _: Any) -> Any:
    def branch(c: Any) -> int:
        return sum(len(c.step("s", lambda: RESULT)) for _ in range(50))

    return ctx.parallel({f"b{n}": branch for n in range(8)})


def sequential(ctx: Any, _: Any) -> int:
    return sum(len(ctx.step("s", lambda: RESULT)) for _ in range(100))


def timed(storage: LocalStorage, fn: Any) -> tuple[float, int]:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    before = _Counting.appends
    started = time.perf_counter()
    kassette(fn, storage=storage).start(run_id=run_id)
    elapsed = time.perf_counter() - started
    snapshot = storage.read(run_id)
    assert snapshot is not None
    return elapsed, snapshot.data.count(b"\n") * 1000 // max(1, _Counting.appends - before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        directory = Path(folder)
        storage = _Counting(directory / "journals")
        ratios: dict[str, list[float]] = {"parallel": [], "sequential": []}
        seconds: dict[str, list[float]] = {"parallel": [], "sequential": []}
        per_fsync: list[int] = []
        for _ in range(args.rounds):
            elapsed, lines_per_append = timed(storage, parallel)
            seconds["parallel"].append(elapsed)
            ratios["parallel"].append(elapsed / raw(directory, 400, 420))
            per_fsync.append(lines_per_append)
            elapsed, _ = timed(storage, sequential)
            seconds["sequential"].append(elapsed)
            ratios["sequential"].append(elapsed / raw(directory, 100, 420))
    load = os.getloadavg()[0]
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {load:.1f}")
    for name, label in [
        ("parallel", "parallel 8x50 / 400"),
        ("sequential", "sequential 100 / 100"),
    ]:
        print(
            f"{label} write+fsync: {statistics.median(ratios[name]):.2f}x "
            f"({statistics.median(seconds[name]):.2f} s)"
        )
    print(f"entries per append (parallel run): {statistics.median(per_fsync) / 1000:.2f}")
    return 0 if statistics.median(ratios["parallel"]) <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
