"""A worker process for tests/test_crash_group_commit.py: one invocation of a run of 8 parallel
branches x 30 steps on LocalStorage, acknowledging each step once `ctx.step` has returned.

Usage: `python group_worker.py DIR ACKS KILL`. Every acknowledged step id is appended to the
file ACKS (O_APPEND, fsynced) right after its `ctx.step` returns. KILL is `none`, or `N:PHASE`:
SIGKILL this process at the N-th journal write that carries more than one entry (a group
commit), PHASE `written` (written, not fsynced) or `synced` (fsynced, before any of its steps
returns). Re-invokes only a run that has not ended, as a dispatcher would; prints
`{"status": ...}` when the run ends.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from kassette import LocalStorage, RunNotFoundError, kassette

_write, _fsync = os.write, os.fsync


def main(directory: str, acks: str, kill: str) -> None:
    if kill != "none":
        number, phase = kill.split(":")
        state = {"groups": 0, "armed": False}

        def write(fd: int, data: Any) -> int:
            written = _write(fd, data)
            if bytes(data).count(b"\n") > 1 and bytes(data).startswith(b'{"type"'):
                state["groups"] += 1
                if state["groups"] == int(number):
                    if phase == "written":
                        os.kill(os.getpid(), signal.SIGKILL)
                    state["armed"] = True
            return written

        def fsync(fd: int) -> None:
            _fsync(fd)
            if state["armed"]:
                os.kill(os.getpid(), signal.SIGKILL)

        os.write, os.fsync = write, fsync  # type: ignore[assignment]

    ack_fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def workflow(ctx: Any, _: Any) -> str:
        def branch(c: Any, name: str) -> int:
            for number in range(30):
                c.step("s", lambda number=number: number)
                step_id = f"parallel/{name}/s" + ("" if number == 0 else f"#{number + 1}")
                _write(ack_fd, f"{step_id}\n".encode())
                _fsync(ack_fd)
            return 30

        return str(ctx.parallel({f"b{n}": lambda c, n=n: branch(c, f"b{n}") for n in range(8)}))

    durable = kassette(workflow, storage=LocalStorage(directory))
    try:
        status = durable.status("group").status
    except RunNotFoundError:
        status = "new"
    if status in ("new", "running"):  # a timed kill may land after the run ended: a dispatcher
        status = durable.start(run_id="group").status  # re-invokes only an unfinished run
    print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
