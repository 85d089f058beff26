"""Workflows and the child process for the fan-out interrupt tests.

Every step function appends one line `RUN STEP START_TIME` to `ROOT/calls.log` before it
sleeps (one small O_APPEND write: lines from many processes do not mix), so a test can count
the step functions called after it sent SIGINT, and see whether any step ran twice. The
functions live at the top level of an importable module so a `ProcessPoolExecutor` can load
them by name.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kassette import LocalStorage, kassette

BRANCHES = 16
WORK_STEPS = 3


def called(root: str, run_id: str, step: str) -> None:
    line = f"{run_id} {step} {time.time():.6f}\n".encode()
    fd = os.open(Path(root) / "calls.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def calls(root: Path) -> list[tuple[str, str, float]]:
    path = root / "calls.log"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(run_id, step, float(at)) for run_id, step, at in rows]


def sleepy(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """plan, draft, then WORK_STEPS steps that each sleep `task["sleep"]` seconds."""
    root, run_id = task["root"], ctx.run_id

    def work(step: str, seconds: float) -> str:
        called(root, run_id, step)
        time.sleep(seconds)
        return step

    ctx.step("plan", lambda: work("plan", 0))
    ctx.step("draft", lambda: completion(work("draft", 0)))
    for number in range(WORK_STEPS):
        ctx.step(f"work{number}", lambda n=number: work(f"work{n}", task["sleep"]))
    return {"done": run_id}


def completion(text: str) -> dict[str, Any]:
    """`text` as an OpenAI chat completion (so "draft" is a model call, editable by text)."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100},
    }


async def sleepy_async(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """`sleepy` as an `async def` workflow: its steps await `asyncio.sleep`."""
    root, run_id = task["root"], ctx.run_id

    async def work(step: str, seconds: float) -> str:
        called(root, run_id, step)
        await asyncio.sleep(seconds)
        return step

    await ctx.step("plan", lambda: work("plan", 0))
    await ctx.step("draft", lambda: _completed(work("draft", 0)))
    for number in range(WORK_STEPS):
        await ctx.step(f"work{number}", lambda n=number: work(f"work{n}", task["sleep"]))
    return {"done": run_id}


async def _completed(text: Any) -> dict[str, Any]:
    return completion(await text)


def workflow(root: Path, mode: str, version: str | None = None) -> Any:
    storage = LocalStorage(root / "journals")
    fn = sleepy_async if mode == "loop" else sleepy
    return kassette(fn, storage=storage, version=version)


def variants(root: Path, mode: str, kind: str) -> dict[str, Any]:
    """How the branches of a `kind` fan-out differ: `n`, `results` (an answer's text each, at
    the model call "draft"), or `workflows` (two versions of the code, alternating)."""
    if kind == "results":
        return {"results": [f"answer {number}" for number in range(BRANCHES)]}
    if kind == "workflows":
        two = [workflow(root, mode), workflow(root, mode, "v2")]
        return {"workflows": [two[number % 2] for number in range(BRANCHES)]}
    return {"n": BRANCHES}


def executor_for(mode: str) -> Executor | None:
    if mode == "processes":
        return ProcessPoolExecutor(4)
    if mode == "dask":
        from distributed import Client, LocalCluster

        # workers in this process: worker processes in its group would die of the SIGINT
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=False,
            dashboard_address="127.0.0.1:0",  # None still serves on 8787: two clusters clash
        )
        return Client(cluster).get_executor()  # type: ignore[no-any-return]
    return None


def child(root: Path, mode: str, kind: str = "n") -> int:
    """Fan out "root" at "draft" into BRANCHES branches (differing by `kind`, see `variants`);
    print how it ended as one JSON line. Exit status 130 when interrupted, as a shell reports
    Ctrl-C."""
    from kassette import explore as kx

    executor = executor_for(mode)
    print(json.dumps({"ready": time.time()}), flush=True)
    try:
        branches = kx.fan_out(
            workflow(root, mode),
            "root",
            step="draft",
            executor=executor,
            **variants(root, mode, kind),
        )
    except kx.FanOutInterrupted as interrupted:
        caught = time.time()
        # a test that keeps interrupting stops at the next line; what it sent meanwhile is
        # not for the lines after it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(json.dumps({"caught": caught, "summary": str(interrupted)}), flush=True)
        frame = interrupted.branches.frame
        print(
            json.dumps(
                {
                    "interrupted": caught,
                    "status": frame["status"].tolist(),
                    "stopped_by": frame["stopped_by"].tolist(),
                }
            ),
            flush=True,
        )
        return 130
    frame = branches.frame
    print(json.dumps({"status": frame["status"].tolist()}), flush=True)
    return 0


def child_again(root: Path, mode: str) -> int:
    """`child`, but once interrupted, the same call again in this process at once (as a
    notebook user re-runs the cell): print the re-call's statuses as one JSON line."""
    from kassette import explore as kx

    print(json.dumps({"ready": time.time()}), flush=True)
    call = {"step": "draft", "n": BRANCHES}
    try:
        kx.fan_out(workflow(root, mode), "root", **call)  # type: ignore[arg-type]
    except kx.FanOutInterrupted as interrupted:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(json.dumps({"caught": time.time(), "summary": str(interrupted)}), flush=True)
    branches = kx.fan_out(workflow(root, mode), "root", **call)  # type: ignore[arg-type]
    print(json.dumps({"status": branches.frame["status"].tolist()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(child(Path(sys.argv[1]), sys.argv[2], *sys.argv[3:]))
