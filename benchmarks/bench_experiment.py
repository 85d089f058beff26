"""kx.experiment benchmark: its overhead over plain kx.fan_out, and the summary at scale.

1. 200 source runs x 3 variants x 3 repeats of instant steps: 1,800 branches. The experiment
   (one call: forks, runs, journals 1,800 + 200 scores as steps of its own run) against the
   same 1,800 branches made with 200 plain `kx.fan_out` calls (one per source run, params=
   the 9 variant-repeats) with the same score function. Same storage kind, same thread pool
   size (`max_workers`), fresh names each round, rounds alternate; medians; ratio
   experiment / fan-out (target <= 1.2).
2. `kx.summarize` over 100,000 branch rows (10,000 sources x baseline + 3 variants, with
   repeats), median of a few calls (target < 1 s).

Run from a checkout: `python benchmarks/bench_experiment.py` (a few minutes on LocalStorage)
or `--quick` (fewer sources). `--storage memory` measures without the disk.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

import numpy as np
import pandas as pd

from kassette import LocalStorage, MemoryStorage, kassette
from kassette import explore as kx

VARIANTS = {"a": {"x": 1}, "b": {"x": 2}, "c": {"x": 3}}
REPEATS = 3


def agent(ctx: Any, task: int) -> dict[str, Any]:
    base = ctx.step("read", lambda: task)
    value = ctx.step("draft", lambda: base + ctx.params.get("x", 0))
    return {"value": value}


def score(result: Any) -> float:
    return float(result.result["value"])


def measure(storage: Any, sources: int, rounds: int, workers: int) -> tuple[float, float]:
    workflow = kassette(agent, storage=storage, version="bench")
    ids = [f"s{number}" for number in range(sources)]
    for number, run_id in enumerate(ids):
        workflow.start(number, run_id=run_id)
    params = [dict(p) for p in VARIANTS.values() for _ in range(REPEATS)]
    experiment_s, fan_out_s = [], []
    for number in range(rounds):
        started = time.perf_counter()
        found = kx.experiment(
            workflow,
            ids,
            step="draft",
            variants=VARIANTS,
            repeats=REPEATS,
            score=score,
            name=f"exp{number}",
            max_workers=workers,
            progress=False,
        )
        experiment_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        for run_id in ids:
            branches = kx.fan_out(
                workflow,
                run_id,
                step="draft",
                params=params,
                prefix=f"fan{number}.{run_id}",
                score=score,
                max_workers=workers,
                progress=False,
            ).frame
            assert branches["score"].notna().all()  # scored, as the experiment's branches are
        fan_out_s.append(time.perf_counter() - started)
        assert len(found.frame) == sources * (1 + len(VARIANTS) * REPEATS)
    return statistics.median(experiment_s), statistics.median(fan_out_s)


def measure_summary(rows: int = 100_000, calls: int = 5) -> float:
    rng = np.random.default_rng(0)
    per_source = 1 + len(VARIANTS) * REPEATS  # 10 rows: the recorded baseline and 9 branches
    sources = rows // per_source
    variants = ["recorded"] + [v for v in VARIANTS for _ in range(REPEATS)]
    frame = pd.DataFrame(
        {
            "source_run_id": np.repeat([f"s{n}" for n in range(sources)], per_source),
            "variant": np.tile(variants, sources),
            "repeat": np.tile([0] + [r for _ in VARIANTS for r in range(REPEATS)], sources),
            "score": rng.normal(0, 1, sources * per_source),
        }
    )
    assert len(frame) == rows
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        kx.summarize(frame, baseline="recorded")
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--storage", choices=["local", "memory"], default="local")
    parser.add_argument("--dir", default=None)
    arguments = parser.parse_args()
    sources = 40 if arguments.quick else 200
    rounds = 1 if arguments.quick else 3
    workers = 8
    directory = Path(tempfile.mkdtemp(prefix="bench-experiment-", dir=arguments.dir))
    try:
        storage = LocalStorage(directory) if arguments.storage == "local" else MemoryStorage()
        experiment_s, fan_out_s = measure(storage, sources, rounds, workers)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    branches = sources * len(VARIANTS) * REPEATS
    ratio = experiment_s / fan_out_s
    print(
        f"{sources} sources x {len(VARIANTS)} variants x {REPEATS} repeats = {branches} branches "
        f"({arguments.storage}, {workers} workers): experiment {experiment_s:.2f} s, "
        f"{sources} fan_out calls {fan_out_s:.2f} s, ratio {ratio:.2f}x (target <= 1.2)"
    )
    summary_s = measure_summary()
    print(f"kx.summarize over 100,000 branch rows: {summary_s:.3f} s (target < 1 s)")
    return 0 if ratio <= 1.2 and summary_s < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
