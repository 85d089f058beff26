"""LocalStorage benchmarks: kassette's hot paths as ratios against a raw baseline of the same run.

Three measures, each against a baseline measured in the same process run, interleaved and
repeated, so a shared, noisy machine moves both sides together and the ratio stays meaningful:

  step    per-step cost of `ctx.step` (a workflow of N live steps, ~1 KB JSON results) over a raw
          `os.write` + `os.fsync` of the same encoded line to another file on the same
          filesystem, the two interleaved step by step; `--only step` adds its floor: the
          result's JSON round trip (encode, decode) plus the same write+fsync, the least any
          step that hands back what a replay would can cost, over write+fsync again
  replay  per-entry cost of re-invoking a run whose journal has 1,000 steps and no terminal
          entry (`start(run_id=...)` replays everything, then completes) over `json.loads` of
          the same lines
  memory  peak RSS of a fresh child process that replays a 100,000-entry journal, over the
          journal's size on disk (the child's RSS before replaying is reported too)

Run from a checkout: `python benchmarks/bench_local.py` (about half a minute) or
`python benchmarks/bench_local.py --quick` (a few seconds, a smoke run). `--dir` picks where the
journals go (default: the system temporary directory); fsync costs depend on that filesystem.
Exit status is 0 when every measure meets its target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from kassette import Context, LocalStorage, kassette
from kassette._journal import encode, format_timestamp

STEP_NAME = "chat"
_WORDS = (
    "The failing check is the nightly integration suite; the stack trace points at the retry "
    "wrapper around the payment client, which swallows a timeout and returns an empty body. "
    "Proposed fix: surface the timeout as an error, add a bounded retry with jitter, and log "
    "the request id.\nSteps:\n1. patch client.py\n2. add a regression test\n3. re-run CI."
)


def llm_result(i: int) -> dict[str, Any]:
    """A realistic step result: a chat-completion-like response, ~1 KB as JSON."""
    return {
        "id": f"chatcmpl-{i:010d}",
        "object": "chat.completion",
        "created": 1_767_225_600 + i,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": f"[{i}] {_WORDS}"},
            }
        ],
        "usage": {
            "prompt_tokens": 512 + i % 97,
            "completion_tokens": 143 + i % 13,
            "total_tokens": 655 + i % 97 + i % 13,
        },
        "tool_calls": [
            {"id": f"call_{i:06d}", "name": "read_file", "arguments": {"path": f"m{i % 50}.py"}},
            {"id": f"call_{i:06d}b", "name": "run_tests", "arguments": {"filter": "payments"}},
        ],
        "system_fingerprint": "fp_3aa7262c27",
    }


def step_entries(count: int, *, session: int = 1) -> Iterator[dict[str, Any]]:
    """A journal as kassette writes it: a `start`, then `count` steps named STEP_NAME."""
    timestamp = format_timestamp(1_767_225_600.0)
    yield {
        "type": "start",
        "session": session,
        "offset": 0,
        "timestamp": timestamp,
        "metadata": {"steps": count},
        "version": "bench-v1",
    }
    for i in range(count):
        yield {
            "type": "step",
            "session": session,
            "offset": i + 1,
            "timestamp": timestamp,
            "stepId": STEP_NAME if i == 0 else f"{STEP_NAME}#{i + 1}",
            "name": STEP_NAME,
            "result": llm_result(i),
            "durationMs": 812.345,
        }


def write_journal(path: Path, count: int) -> int:
    """Write a `count`-step journal to `path` (streamed); return its size in bytes."""
    with open(path, "wb") as file:
        for entry in step_entries(count):
            file.write(encode(entry))
    return path.stat().st_size


def constant(value: Any) -> Callable[[], Any]:
    return lambda: value


class RawAppends:
    """The baseline of (a): `os.write` + `os.fsync` of one given line to a file of its own,
    timed (wall and CPU seconds, summed)."""

    def __init__(self, path: Path, lines: list[bytes]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lines = lines
        self.wall = self.cpu = 0.0

    def append(self, number: int) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        os.write(self.fd, self.lines[number])
        os.fsync(self.fd)
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu

    def close(self) -> None:
        os.close(self.fd)


class RoundTrips(RawAppends):
    """The least any durable step that hands back what a replay would can do, timed: encode
    the result, decode that text (the round trip), write its line and fsync. No step id, no
    replay lookup, no lock, no entry: kassette's step over write+fsync cannot beat this."""

    def __init__(self, path: Path, lines: list[bytes], results: list[Any]) -> None:
        super().__init__(path, lines)
        self.results = results
        self.encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

    def append(self, number: int) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        json.loads(self.encoder.encode(self.results[number]))
        os.write(self.fd, self.lines[number])
        os.fsync(self.fd)
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu


def make_workflow(
    storage: LocalStorage, timings: list[tuple[float, float]], raw: list[RawAppends] | None = None
) -> Any:
    """A workflow of `steps` chat steps. It appends the wall and CPU seconds its `ctx.step`
    calls took to `timings`; with `raw`, a raw append of the same line (to `raw[-1]`) runs
    next to each step, before it or after it in turn, so both see the same machine."""

    def workflow(ctx: Context, input: dict[str, Any]) -> int:
        steps: int = input["steps"]
        # live steps time ctx.step, not the step functions' work: their results are built first
        prebuilt = [llm_result(i) for i in range(steps)] if input.get("prebuilt") else None
        baseline = raw[-1] if raw else None
        step_wall = step_cpu = 0.0
        for i in range(steps):
            fn = constant(prebuilt[i]) if prebuilt else partial(llm_result, i)
            if baseline is not None and i % 2:
                baseline.append(i)
            wall, cpu = time.perf_counter(), time.process_time()
            ctx.step(STEP_NAME, fn)
            step_wall += time.perf_counter() - wall
            step_cpu += time.process_time() - cpu
            if baseline is not None and not i % 2:
                baseline.append(i)
        timings.append((step_wall, step_cpu))
        return steps

    return kassette(workflow, storage=storage, version="bench-v1")


# -- (a) ctx.step against write+fsync ---------------------------------------------------------


def bench_step(directory: Path, steps: int, rounds: int) -> tuple[float, float, float, float]:
    """Median per-step seconds of ctx.step and of a raw write+fsync of the same line, the two
    interleaved step by step, over `rounds` runs; then the same two in CPU time (fsync's work
    in the kernel included)."""
    storage = LocalStorage(directory / "step")
    timings: list[tuple[float, float]] = []
    raw: list[RawAppends] = []
    workflow = make_workflow(storage, timings, raw)
    # a warm-up run, which also writes the lines the raw appends write
    workflow.start({"steps": steps, "prebuilt": True}, run_id="warmup")
    journal = (storage.path / "warmup.jsonl").read_bytes()
    lines = [line + b"\n" for line in journal.splitlines() if line.startswith(b'{"type":"step"')]
    assert len(lines) == steps
    kassette_times: list[tuple[float, float]] = []
    raw_times: list[tuple[float, float]] = []
    for number in range(rounds):
        raw.append(RawAppends(directory / f"raw-{number}.jsonl", lines))
        try:
            result = workflow.start({"steps": steps, "prebuilt": True}, run_id=f"step-{number}")
        finally:
            raw[-1].close()
        assert result.status == "success", result
        wall, cpu = timings[-1]
        kassette_times.append((wall / steps, cpu / steps))
        raw_times.append((raw[-1].wall / steps, raw[-1].cpu / steps))
    return _medians(kassette_times, raw_times)


def bench_round_trip(directory: Path, steps: int, rounds: int) -> tuple[float, float, float, float]:
    """`bench_step`'s floor: `RoundTrips` against a raw write+fsync, interleaved the same way."""
    results = [llm_result(i) for i in range(steps)]
    lines = [encode({"result": result}) for result in results]  # about the step lines' size
    floor_times: list[tuple[float, float]] = []
    raw_times: list[tuple[float, float]] = []
    for number in range(rounds):
        floor = RoundTrips(directory / f"floor-{number}.jsonl", lines, results)
        raw = RawAppends(directory / f"floor-raw-{number}.jsonl", lines)
        for i in range(steps):
            first, second = (floor, raw) if i % 2 else (raw, floor)
            first.append(i)
            second.append(i)
        floor.close()
        raw.close()
        floor_times.append((floor.wall / steps, floor.cpu / steps))
        raw_times.append((raw.wall / steps, raw.cpu / steps))
    return _medians(floor_times, raw_times)


# -- (b) replay against json.loads ------------------------------------------------------------


def bench_replay(directory: Path, steps: int, rounds: int) -> tuple[float, float, float, float]:
    """Median per-entry seconds of (a replaying `start`, `json.loads` of each line), then the
    same two in CPU time (which waiting for a busy CPU or a disk does not inflate)."""
    storage = LocalStorage(directory / "replay")
    storage.path.mkdir(parents=True)
    template = directory / "replay-template.jsonl"
    write_journal(template, steps)
    data = template.read_bytes()
    lines = data.splitlines()
    entries = len(lines)
    workflow = make_workflow(storage, [])
    kassette_times: list[tuple[float, float]] = []
    loads_times: list[tuple[float, float]] = []

    def run_loads() -> None:
        loads = json.loads
        wall, cpu = time.perf_counter(), time.process_time()
        for line in lines:
            loads(line)
        loads_times.append(
            ((time.perf_counter() - wall) / entries, (time.process_time() - cpu) / entries)
        )

    for number in range(rounds + 1):  # round 0 warms up both sides
        run_id = f"replay-{number}"
        (storage.path / f"{run_id}.jsonl").write_bytes(data)

        def run_kassette(run_id: str = run_id, number: int = number) -> None:
            wall, cpu = time.perf_counter(), time.process_time()
            result = workflow.start(run_id=run_id)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert result.status == "success" and result.result == steps, result
            if number:
                kassette_times.append((wall / entries, cpu / entries))

        first, second = (run_loads, run_kassette) if number % 2 else (run_kassette, run_loads)
        first()
        second()
        if not number:
            loads_times.clear()
    return _medians(kassette_times, loads_times)


def _medians(
    kassette_times: list[tuple[float, float]], baseline_times: list[tuple[float, float]]
) -> tuple[float, float, float, float]:
    """Median wall time of kassette and of the baseline, then their median CPU times."""
    median = statistics.median
    return (
        median(wall for wall, _ in kassette_times),
        median(wall for wall, _ in baseline_times),
        median(cpu for _, cpu in kassette_times),
        median(cpu for _, cpu in baseline_times),
    )


# -- (c) peak RSS of a replay in a fresh process ----------------------------------------------


def replay_child(directory: str, run_id: str) -> None:
    """In a fresh interpreter: RSS before and after replaying `run_id`, as one JSON line."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    storage = LocalStorage(directory)
    workflow = make_workflow(storage, [])
    started = time.perf_counter()
    result = workflow.start(run_id=run_id)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.status == "success", result
    print(json.dumps({"baseline_kib": before, "peak_kib": peak, "seconds": elapsed}))


def bench_memory(directory: Path, entries: int, rounds: int) -> tuple[int, int, int, float]:
    """Medians of the peak RSS and of the RSS before replaying, the journal's size (bytes),
    and the median seconds the replay took."""
    runs = directory / "memory"
    runs.mkdir()
    template = directory / "memory-template.jsonl"
    size = write_journal(template, entries - 1)
    peaks, baselines, seconds = [], [], []
    for number in range(rounds):
        run_id = f"memory-{number}"
        shutil.copyfile(template, runs / f"{run_id}.jsonl")
        output = subprocess.run(
            [sys.executable, __file__, "--replay-child", str(runs), run_id],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        ).stdout
        report = json.loads(output.strip().splitlines()[-1])
        peaks.append(report["peak_kib"] * 1024)
        baselines.append(report["baseline_kib"] * 1024)
        seconds.append(report["seconds"])
        (runs / f"{run_id}.jsonl").unlink()
    median = statistics.median
    return int(median(peaks)), int(median(baselines)), size, median(seconds)


# -- reporting --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    measure: str
    kassette: str
    baseline: str
    ratio: float
    target: float

    @property
    def passed(self) -> bool:
        return self.ratio <= self.target


def filesystem_of(path: Path) -> str:
    """The type of the filesystem `path` is on (from /proc/mounts; "?" elsewhere)."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "?"
    resolved = path.resolve()
    found = [(len(m[1]), m[2]) for m in mounts if len(m) > 2 and resolved.is_relative_to(m[1])]
    return max(found)[1] if found else "?"


def print_table(rows: list[Row]) -> None:
    header = ("measure", "kassette", "baseline", "ratio", "target", "result")
    body = [
        (
            r.measure,
            r.kassette,
            r.baseline,
            f"{r.ratio:.2f}x",
            f"<= {r.target:g}x",
            "pass" if r.passed else "FAIL",
        )
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *body]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))


def timed(label: str, action: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    print(f"  {label} ...", end="", flush=True)
    value = action()
    print(f" {time.perf_counter() - started:.1f}s")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (smaller, fewer)")
    parser.add_argument("--dir", help="where to write journals (default: the system tmp dir)")
    parser.add_argument(
        "--only", choices=["step"], help="measure (a) alone: a live step against write+fsync"
    )
    parser.add_argument("--replay-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay_child:
        replay_child(*args.replay_child)
        return 0
    if args.quick:
        step_n, step_rounds, replay_rounds, memory_n, memory_rounds = 50, 5, 5, 30_000, 1
    else:
        step_n, step_rounds, replay_rounds, memory_n, memory_rounds = 200, 15, 31, 100_000, 3
    replay_n = 1_000
    directory = Path(tempfile.mkdtemp(prefix="kassette-bench-", dir=args.dir))
    try:
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average "
            f"{os.getloadavg()[0]:.1f}, journals on {filesystem_of(directory)} ({directory})"
        )
        step, raw, step_cpu, raw_cpu = timed(
            f"step: {step_rounds} rounds x {step_n} steps",
            lambda: bench_step(directory, step_n, step_rounds),
        )
        if args.only == "step":
            print(
                f"(a) ctx.step / write+fsync: {step / raw:.2f}x ({step * 1e6:.1f} / "
                f"{raw * 1e6:.1f} us, medians of {step_rounds} rounds); in CPU time "
                f"{step_cpu * 1e6:.1f} vs {raw_cpu * 1e6:.1f} us"
            )
            floor, floor_raw, floor_cpu, floor_raw_cpu = timed(
                f"round-trip floor: {step_rounds} rounds x {step_n} steps",
                lambda: bench_round_trip(directory, step_n, step_rounds),
            )
            print(
                f"    floor: encode + decode + write+fsync / write+fsync: {floor / floor_raw:.2f}x "
                f"({floor * 1e6:.1f} / {floor_raw * 1e6:.1f} us); in CPU time "
                f"{floor_cpu * 1e6:.1f} vs {floor_raw_cpu * 1e6:.1f} us"
            )
            return 0 if step / raw <= 1.2 else 1
        replay, loads, replay_cpu, loads_cpu = timed(
            f"replay: {replay_rounds} rounds x {replay_n} steps",
            lambda: bench_replay(directory, replay_n, replay_rounds),
        )
        peak, baseline_rss, size, replay_seconds = timed(
            f"memory: {memory_rounds} child(ren) x {memory_n} entries",
            lambda: bench_memory(directory, memory_n, memory_rounds),
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    us, mib = 1e-6, 1024 * 1024
    rows = [
        Row(
            "(a) ctx.step, per step",
            f"{step / us:.1f} us",
            f"{raw / us:.1f} us write+fsync",
            step / raw,
            1.2,
        ),
        Row(
            f"(b) replay {replay_n} steps, per entry",
            f"{replay / us:.2f} us",
            f"{loads / us:.2f} us json.loads",
            replay / loads,
            3.0,
        ),
        Row(
            f"(c) peak RSS, replay {memory_n} entries",
            f"{peak / mib:.1f} MiB",
            f"{size / mib:.1f} MiB on disk",
            peak / size,
            3.0,
        ),
    ]
    print_table(rows)
    print(
        f"(a) in CPU time: {step_cpu / us:.1f} us vs {raw_cpu / us:.1f} us per step: kassette's "
        f"own work is about {(step_cpu - raw_cpu) / us:.1f} us a step"
    )
    print(
        f"(b) in CPU time: {replay_cpu / us:.2f} us vs {loads_cpu / us:.2f} us per entry "
        f"= {replay_cpu / loads_cpu:.2f}x"
    )
    print(
        f"(c) child RSS before replaying: {baseline_rss / mib:.1f} MiB; growth while "
        f"replaying: {(peak - baseline_rss) / mib:.1f} MiB = {(peak - baseline_rss) / size:.2f}x "
        f"the journal; the replay took {replay_seconds:.2f} s "
        f"({replay_seconds / memory_n / us:.1f} us per entry)"
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
