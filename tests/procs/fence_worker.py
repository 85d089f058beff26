"""A worker process for tests/test_fencing.py: one writer (or canceler) of a LocalStorage run.

Usage: `python fence_worker.py CONFIG_JSON`. The config holds `mode`, `dir` (the storage
directory), `run_id`, and per mode:

- `race`   write `ready`, wait for the file `start` to appear, then open a session and record
           three steps named after this pid, pausing `hold` seconds between them;
- `hold`   open a session, record one step, print `{"stage": "recorded", ...}`, wait for the
           file `go`, then record a second step;
- `flow`   the same through the workflow API: step `first`, then step `second` whose fn prints
           `{"stage": "in-step"}` and waits for `go` before returning;
- `write`  open a session and record one step;
- `cancel` cancel the run from this process.

Every step's result holds this process's pid and session. The last line printed is the
outcome: `{"outcome": "wrote" | "locked" | "fenced" | "canceled", "pid": ..., ...}`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from kassette import FencedError, LocalStorage, RunCancelledError, RunLockedError, kassette
from kassette.core import Run, cancel_run, open_run

PID = os.getpid()
WAIT_LIMIT = 60.0


def say(**fields: Any) -> None:
    print(json.dumps({"pid": PID, **fields}), flush=True)


def wait_for(path: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def record(run: Run, name: str) -> Any:
    return run.record(name, lambda: {"pid": PID, "session": run.session, "name": name})


def race(storage: LocalStorage, config: dict[str, Any]) -> None:
    Path(config["ready"]).touch()
    wait_for(config["start"])
    try:
        run = open_run(storage, config["run_id"])
    except RunLockedError:
        say(outcome="locked")
        return
    with run:
        for number in range(1, 4):
            record(run, f"work-{PID}-{number}")
            time.sleep(config["hold"])
    say(outcome="wrote", session=run.session)


def hold(storage: LocalStorage, config: dict[str, Any]) -> None:
    with open_run(storage, config["run_id"]) as run:
        record(run, f"before-{PID}")
        say(stage="recorded", session=run.session)
        wait_for(config["go"])
        try:
            record(run, f"after-{PID}")
        except FencedError as exc:
            say(outcome="fenced", session=run.session, error=type(exc).__name__)
            return
        except RunCancelledError as exc:
            say(outcome="canceled", session=run.session, error=type(exc).__name__)
            return
    say(outcome="wrote", session=run.session)


def flow(storage: LocalStorage, config: dict[str, Any]) -> None:
    def second() -> Any:
        say(stage="in-step")
        wait_for(config["go"])
        return {"pid": PID}

    @kassette(storage=storage)
    def workflow(ctx: Any, _: Any) -> Any:
        ctx.step("first", lambda: {"pid": PID})
        ctx.step("second", second)
        return "done"

    try:
        result = workflow.start({"n": 1}, run_id=config["run_id"])
    except RunCancelledError as exc:
        say(outcome="canceled", error=type(exc).__name__)
        return
    say(outcome="wrote", status=result.status)


def write(storage: LocalStorage, config: dict[str, Any]) -> None:
    try:
        run = open_run(storage, config["run_id"])
    except RunLockedError:
        say(outcome="locked")
        return
    with run:
        record(run, f"write-{PID}")
    say(outcome="wrote", session=run.session)


def cancel(storage: LocalStorage, config: dict[str, Any]) -> None:
    status = cancel_run(storage, config["run_id"], reason="operator")
    say(outcome="canceled", status=status.status, sessions=status.sessions)


def main() -> None:
    config = json.loads(sys.argv[1])
    storage = LocalStorage(config["dir"])
    modes = {"race": race, "hold": hold, "flow": flow, "write": write, "cancel": cancel}
    modes[config["mode"]](storage, config)


if __name__ == "__main__":
    main()
