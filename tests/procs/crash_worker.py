"""A worker process for tests/test_crash.py: drives one 20-step run on LocalStorage, and may
SIGKILL itself at one precise point.

Usage: `python crash_worker.py CONFIG_JSON`, where the config holds `dir` (the storage
directory), `run_id`, `effects` (the side-effect file), `note` (where the kill point is
described just before the kill) and `kill` (a kill spec or null):

- `w:K:PHASE`  the journal write that holds the entry at offset K (with others, when parallel
               branches share a group commit); PHASE is `before` (nothing written),
               `torn` (half the line written), `between` (written, not yet fsynced) or `after`
               (fsynced, before the append returns);
- `a:N:PHASE`  the same, at the N-th journal write this process makes;
- `c:POINT`    creating the journal: `tmpsync` (before the temporary file's fsync), `link`
               (fsynced, not yet linked into place), `linked` (linked, directory not fsynced),
               `dirsync` (directory fsynced);
- `l:N:WHEN`   the N-th lock this process takes (its `link(2)`), `before` or `after` it;
- `s:ID:WHEN`  inside the fn of step ID, `before` or `after` its side effect.

`pace` (seconds, optional) makes every live step body sleep that long first: a lower bound on
how long the run takes, so that a kill the parent sends sooner than that certainly lands.

The worker continues the run as any dispatcher would: a missing or running run is started
(a retry), a suspended one is resumed with the approval; it stops at the end and prints
`{"status": ..., "result": ...}`. Kill hooks patch `os.write`, `os.fsync` and `os.link` of
this process only; the side effects use the unpatched functions.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

_write, _fsync, _link = os.write, os.fsync, os.link

INPUT = {"ticket": "INC-1", "n": 3}
APPROVAL = {"approved": True, "by": "ops"}


def effect(path: str, step_id: str, value: Any, kill: str | None) -> Any:
    """Record `step_id` in the side-effect file (O_APPEND + fsync) before returning `value`."""
    if _pace:
        time.sleep(_pace)
    if kill == f"s:{step_id}:before":
        die(kill, {"stepId": step_id})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _write(fd, f"{step_id}\n".encode())
        _fsync(fd)
    finally:
        os.close(fd)
    if kill == f"s:{step_id}:after":
        die(kill, {"stepId": step_id})
    return value


_note_path = ""
_pace = 0.0


def die(spec: str, details: dict[str, Any]) -> None:
    """Describe the kill point in the note file, then SIGKILL this process."""
    with open(_note_path, "w") as note:
        json.dump({"spec": spec, **details}, note)
    os.kill(os.getpid(), signal.SIGKILL)


class Hooks:
    """Kill points inside kassette's storage I/O, chosen by one spec."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        kind, _, rest = spec.partition(":")
        self.kind = kind
        self.arg, _, self.phase = rest.partition(":")
        self.writes = 0  # journal writes so far
        self.links = 0  # lockfile links so far
        self.offsets: dict[int, tuple[int, dict[str, Any]]] = {}  # fd -> (write number, entry)
        self.other_fsyncs = 0
        self.mutex = threading.Lock()

    def install(self) -> None:
        os.write = self.write
        os.fsync = self.fsync
        os.link = self.link

    def _hit(self, number: int, entry: dict[str, Any], phase: str, lines: int = 1) -> bool:
        """Whether this write (its first entry, and how many it holds) is the kill point."""
        if phase != self.phase:
            return False
        if self.kind == "w":
            return entry.get("offset", -1) <= int(self.arg) < entry.get("offset", -1) + lines
        return self.kind == "a" and number == int(self.arg)

    def _details(self, entry: dict[str, Any], lines: int) -> dict[str, Any]:
        """The write's first entry, and how many entries the write holds (a group commit of
        parallel branches writes several at once)."""
        keys = ("offset", "type", "session", "stepId", "eventId")
        return {key: entry[key] for key in keys if key in entry} | {"lines": lines}

    def write(self, fd: int, data: Any) -> int:
        if bytes(data[:9]) != b'{"type":"':
            return _write(fd, data)
        entry = json.loads(bytes(data).split(b"\n", 1)[0])
        lines = bytes(data).count(b"\n")
        with self.mutex:
            self.writes += 1
            number = self.writes
        self.offsets[fd] = (number, entry, lines)
        if self._hit(number, entry, "before", lines):
            die(self.spec, self._details(entry, lines))
        if self._hit(number, entry, "torn", lines):
            _write(fd, bytes(data[: max(1, len(data) // 2)]))
            die(self.spec, self._details(entry, lines))
        written = _write(fd, data)
        if self._hit(number, entry, "between", lines):
            die(self.spec, self._details(entry, lines))
        return written

    def fsync(self, fd: int) -> None:
        known = self.offsets.pop(fd, None)
        if known is None:  # creating a journal: the temporary file, then the directory
            self.other_fsyncs += 1
            point = {1: "tmpsync", 2: "dirsync"}.get(self.other_fsyncs)
            if self.spec == "c:tmpsync" and point == "tmpsync":
                die(self.spec, {"offset": 0})
            _fsync(fd)
            if self.spec == "c:dirsync" and point == "dirsync":
                die(self.spec, {"offset": 0})
            return
        _fsync(fd)
        if self._hit(known[0], known[1], "after", known[2]):
            die(self.spec, self._details(known[1], known[2]))

    def link(self, source: Any, target: Any, **kwargs: Any) -> None:
        name = os.fspath(target)
        is_lock, hit = name.endswith(".lock"), False
        if is_lock and not os.path.lexists(name):  # an attempt that will take the lock
            self.links += 1
            hit = self.kind == "l" and int(self.arg) == self.links
            if hit and self.phase == "before":
                die(self.spec, {"lock": self.links})
        elif self.spec == "c:link":
            die(self.spec, {"offset": 0})
        _link(source, target, **kwargs)
        if is_lock and hit and self.phase == "after":
            die(self.spec, {"lock": self.links})
        if not is_lock and self.spec == "c:linked":
            die(self.spec, {"offset": 0})


def build(storage_dir: str, effects: str, kill: str | None) -> Any:
    from kassette import LocalStorage, kassette

    def step(ctx: Any, step_id: str, name: str, value: Any) -> Any:
        return ctx.step(name, lambda: effect(effects, step_id, value, kill))

    def branch(letter: str) -> Any:
        def run(ctx: Any) -> Any:
            first = step(ctx, f"fan/{letter}/fetch", "fetch", f"{letter}-data")
            second = step(ctx, f"fan/{letter}/score", "score", len(first) * 10)
            return {"data": first, "score": second}

        return run

    @kassette(storage=LocalStorage(storage_dir), version="crash-v1")
    def twenty(ctx: Any, ticket: Any) -> Any:
        total = 0
        for i in range(1, 6):
            total += step(ctx, f"s{i}", f"s{i}", i * i)
        fan = ctx.parallel({"a": branch("a"), "b": branch("b"), "c": branch("c")}, name="fan")
        total += step(ctx, "s6", "s6", total + 6)
        total += step(ctx, "s7", "s7", total + 7)
        approval = ctx.suspend("approve", reason="needs a human")
        for i in range(8, 15):
            total += step(ctx, f"s{i}", f"s{i}", total % 97 + i)
        return {"ticket": ticket["ticket"], "total": total, "fan": fan, "approval": approval}

    return twenty


def main() -> None:
    global _note_path, _pace
    config = json.loads(sys.argv[1])
    _note_path = config["note"]
    _pace = float(config.get("pace", 0))
    kill = config.get("kill")
    if kill and kill[0] in "wacl":
        Hooks(kill).install()
    from kassette import RunNotFoundError

    workflow = build(config["dir"], config["effects"], kill)
    run_id = config["run_id"]
    outcome: dict[str, Any] = {"status": None}
    for _ in range(4):
        try:
            state = workflow.status(run_id).status
        except RunNotFoundError:
            state = "new"
        if state in ("new", "running"):
            result = workflow.start(INPUT, run_id=run_id)
        elif state == "suspended":
            result = workflow.resume(run_id, "approve", APPROVAL)
        else:
            outcome = {"status": state, "result": workflow.status(run_id).result}
            break
        outcome = {"status": result.status, "result": result.result}
        if result.status != "suspended":
            break
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
