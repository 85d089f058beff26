"""Workflow functions for fan-out tests that run branches in other processes.

They live at the top level of an importable module, so a `ProcessPoolExecutor` (plain pickle)
and Dask workers can load them by name. Every step function records its call in a side file
(`calls/RUN.STEP`, one byte per call), so a test can count calls across processes and crashes;
`meet` is a barrier on files that opens only when `parties` branches have reached it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from kassette import LocalStorage, kassette

BARRIER_LIMIT_S = 120  # a bound, not a measurement: a barrier that never opens fails the test


def counted(root: str, run_id: str, step: str, value: Any) -> Any:
    """Record one call of `step` in `run_id` and return `value`."""
    calls = Path(root) / "calls"
    calls.mkdir(exist_ok=True)
    with open(calls / f"{run_id}.{step}", "ab") as file:
        file.write(b".")
    return value


def calls(root: str | Path, run_id: str, step: str) -> int:
    path = Path(root) / "calls" / f"{run_id}.{step}"
    return path.stat().st_size if path.exists() else 0


def meet(root: str, parties: int, who: str) -> int:
    """Wait until `parties` callers have arrived (files in `root/arrived/`); return how many."""
    arrived = Path(root) / "arrived"
    arrived.mkdir(exist_ok=True)
    (arrived / who).touch()
    deadline = time.monotonic() + BARRIER_LIMIT_S
    while time.monotonic() < deadline:
        count = len(os.listdir(arrived))
        if count >= parties:
            return count
        time.sleep(0.01)
    raise TimeoutError(f"{who}: only {len(os.listdir(arrived))} of {parties} arrived")


def block_if_asked(root: str, run_id: str) -> None:
    """While `root/block` exists, an odd-numbered branch stops here (until it is killed)."""
    if not (Path(root) / "block").exists() or int(run_id.rsplit(".", 1)[1]) % 2 == 0:
        return
    (Path(root) / f"blocked.{run_id}").touch()
    for _ in range(6000):  # at most ten minutes
        time.sleep(0.1)
    raise TimeoutError(f"{run_id} was not killed")


def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """plan, draft (varies by `ctx.params` temperature), `task["steps"]` work steps, score."""
    root, run_id = task["root"], ctx.run_id
    ctx.step("plan", lambda: counted(root, run_id, "plan", "plan"))
    params = ctx.params
    draft = ctx.step(
        "draft", lambda: counted(root, run_id, "draft", f"draft@{params.get('temperature', 0)}")
    )
    if task.get("parties") and run_id != task.get("source"):
        ctx.step("meet", lambda: counted(root, run_id, "meet", meet(root, task["parties"], run_id)))
    for number in range(task.get("steps", 0)):
        if number == 1:
            block_if_asked(root, run_id)
        ctx.step("work", lambda n=number: counted(root, run_id, f"work{n}", n))
    score = ctx.step("score", lambda: counted(root, run_id, "score", len(run_id) + len(draft)))
    return {"draft": draft, "score": score, "pid": os.getpid()}


def set_environment(values: dict[str, str]) -> None:
    """Set environment variables in this process (a Dask worker's, through `Client.run`)."""
    os.environ.update(values)


def child_fan_out(root: str) -> None:
    """The process a durability test SIGKILLs: fan out 8 branches of run "root" on threads."""
    from kassette import explore as kx

    workflow = kassette(agent, storage=LocalStorage(Path(root) / "journals"))
    branches = kx.fan_out(workflow, "root", step="draft", n=8)
    print(branches.frame[["run_id", "status"]].to_json(orient="records"), flush=True)


if __name__ == "__main__":
    child_fan_out(sys.argv[1])
