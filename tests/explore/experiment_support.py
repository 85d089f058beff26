"""Workflows and the child process for the experiment tests.

`ticket` is a small support-ticket agent: `read` the ticket, `draft` an answer (its quality is
the ticket's difficulty plus `ctx.params["boost"]` plus seeded noise), then `polish` steps that
sleep `task["sleep"]` seconds. Every step function appends one line `RUN STEP` to
`ROOT/calls.log` (one small O_APPEND write, so lines from many processes do not mix), and the
score function appends `RUN score` too, so a test counts every call across processes, crashes
and re-calls. Everything is at the top level of an importable module, so a
`ProcessPoolExecutor` loads it by name.

Run as `python -c "import experiment_support; experiment_support.main()" ROOT MODE` (this
directory on `sys.path`), it starts the experiment of
`run_experiment` and prints one JSON line: how it ended.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kassette import LocalStorage, kassette

SOURCES = 8
POLISH_STEPS = 2


def called(root: str, run_id: str, step: str) -> None:
    fd = os.open(Path(root) / "calls.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{run_id} {step}\n".encode())
    finally:
        os.close(fd)


def calls(root: Path) -> list[tuple[str, str]]:
    path = root / "calls.log"
    if not path.exists():
        return []
    return [
        (run_id, step) for run_id, step in (line.split() for line in path.read_text().splitlines())
    ]


def ticket(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    root, run_id = task["root"], ctx.run_id

    def work(step: str, value: Any, seconds: float = 0.0) -> Any:
        called(root, run_id, step)
        time.sleep(seconds)
        return value

    difficulty = ctx.step("read", lambda: work("read", task["difficulty"]))
    boost = float(ctx.params.get("boost", 0.0))
    noise = random.Random(f"{run_id}").gauss(0, 0.1)
    quality = ctx.step("draft", lambda: work("draft", round(difficulty + boost + noise, 6)))
    for number in range(task.get("polish", POLISH_STEPS)):
        ctx.step(f"polish{number}", lambda n=number: work(f"polish{n}", n, task.get("sleep", 0.0)))
    return {"quality": quality, "solved": quality > 0.5}


def scored(root: str) -> Any:
    """A score function that logs each call under `root`."""

    def score(result: Any) -> float:
        called(root, result.run_id, "score")
        return float(result.result["quality"])

    return score


def workflow(root: Path) -> Any:
    return kassette(ticket, storage=LocalStorage(root / "journals"), version="ticket-v1")


def record_sources(root: Path, count: int = SOURCES, **task: Any) -> list[str]:
    agent = workflow(root)
    ids = []
    for number in range(count):
        run_id = f"T{number:03d}"
        agent.start({"root": str(root), "difficulty": 0.2 + 0.05 * number, **task}, run_id=run_id)
        ids.append(run_id)
    return ids


def run_experiment(root: Path, executor: Executor | None = None, **options: Any) -> Any:
    from kassette import explore as kx

    sources = [f"T{number:03d}" for number in range(SOURCES)]
    return kx.experiment(
        workflow(root),
        sources,
        step="draft",
        variants={"boosted": {"boost": 0.3}, "same": {}},
        repeats=2,
        score=scored(str(root)),
        name="exp",
        executor=executor,
        progress=False,
        **options,
    )


def main() -> None:
    root, mode = Path(sys.argv[-2]), sys.argv[-1]
    executor = ProcessPoolExecutor(2) if mode == "processes" else None
    from kassette import explore as kx

    try:
        found = run_experiment(root, executor, max_workers=2)
        print(json.dumps({"ended": "returned", "line": found.status_line()}), flush=True)
    except kx.ExperimentInterrupted as interrupted:
        line = interrupted.experiment.status_line()
        print(json.dumps({"ended": "interrupted", "line": line}), flush=True)
    finally:
        if executor is not None:
            executor.shutdown()


if __name__ == "__main__":
    main()
