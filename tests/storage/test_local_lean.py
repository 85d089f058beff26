"""Lean appends on LocalStorage: while a process holds a run's lock, each append is one
`write()` and one `fsync`; a cancel, a deletion or a forked child is still noticed at once.

The cross-process cases use real processes: a holder that appends as fast as it can while
another process cancels the run (so the cancel lands in the middle of lean appends), and a
`fork()`ed child that appends through its parent's session.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage
from kassette.core import cancel_run, open_run, read_journal
from kassette.errors import FencedError, RunCancelledError

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0


@pytest.fixture
def syscalls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of the system calls an append may make, made from now on in this process."""
    counts: Counter[str] = Counter()

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    for module, name in [
        (os, "write"),
        (os, "fsync"),
        (os, "fstat"),
        (os, "getpid"),
        (os, "open"),
        (fcntl, "flock"),
    ]:
        monkeypatch.setattr(module, name, counting(name, getattr(module, name)))
    yield counts


def test_a_holders_appends_are_one_write_and_one_fsync(
    storage: LocalStorage, syscalls: Counter[str]
) -> None:
    with open_run(storage, "r1") as run:
        run.record("first", lambda: 1)  # takes the lease (flock, fstat, the fence)
        syscalls.clear()
        for number in range(5):
            run.record(f"s{number}", lambda number=number: number)
        assert dict(syscalls) == {"write": 5, "fsync": 5}
        run.complete("done")
    journal = read_journal(storage, "r1")
    assert journal.status().status == "completed" and journal.status().steps == 6


def test_no_fence_file_is_left_behind(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
        assert (root / "r1.fence").exists()  # held while the session appends lean
    assert sorted(p.name for p in root.iterdir()) == ["r1.jsonl"]
    with open_run(storage, "r2") as run:
        run.record("a", lambda: 1)
        leased = (root / "r2.jsonl").stat().st_ino
        cancel_run(LocalStorage(root), "r2")  # another storage: the holder's file is replaced
        assert (root / "r2.jsonl").stat().st_ino != leased
        with pytest.raises(RunCancelledError, match="superseded"):
            run.record("b", lambda: 2)
    assert sorted(p.name for p in root.iterdir()) == ["r1.jsonl", "r2.jsonl"]


def test_delete_run_fences_a_live_session(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
        LocalStorage(root).delete_run("r1")  # not through the holder's own storage
        with pytest.raises(FencedError, match="disappeared"):
            run.record("b", lambda: 2)
    assert storage.read("r1") is None
    assert list(root.iterdir()) == []


HOLDER = textwrap.dedent(
    """
    import json, sys, time
    from kassette import RunCancelledError, LocalStorage
    from kassette.core import open_run

    directory, run_id = sys.argv[1], sys.argv[2]
    acked = []
    deadline = time.monotonic() + 60
    try:
        with open_run(LocalStorage(directory), run_id) as run:
            run.record("first", lambda: 0)
            print("started", flush=True)
            for number in range(20_000):
                if time.monotonic() > deadline:
                    break
                step = f"s{number}"
                run.record(step, lambda number=number: number)
                acked.append(step)
                time.sleep(0.001)  # a step's own work
        outcome = "ran out"
    except RunCancelledError:
        outcome = "canceled"
    print(json.dumps({"outcome": outcome, "acked": acked}), flush=True)
    """
)


@pytest.mark.parametrize("pause", [0.0, 0.02, 0.1])
def test_a_cancel_from_another_process_lands_between_lean_appends(root: Path, pause: float) -> None:
    """The holder appends lean in a loop; this process cancels the run meanwhile. The cancel
    replaces the journal under the holder, which raises `RunCancelledError` at its next append;
    every step it was told was written is in the journal, which reads (dense offsets) and
    ends with the cancel."""
    run_id = "raced"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], TIMEOUT)
        assert ready and holder.stdout.readline().strip() == b"started"
        time.sleep(pause)
        status = cancel_run(LocalStorage(root), run_id, reason="operator")
        assert status.status == "canceled"
        out, err = holder.communicate(timeout=TIMEOUT)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert holder.returncode == 0, err.decode()[-2000:]
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["outcome"] == "canceled"
    journal = read_journal(LocalStorage(root), run_id)
    assert journal.entries[-1]["type"] == "cancel" and journal.entries[-1]["session"] == 2
    assert set(report["acked"]) <= set(journal.steps), "a step acknowledged but not journaled"
    assert journal.status().status == "canceled"
    assert sorted(p.name for p in root.iterdir()) == [f"{run_id}.jsonl"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_never_appends_through_its_parents_lease(
    storage: LocalStorage, root: Path
) -> None:
    """A child forked mid-session that appends through the inherited session writes like any
    other process (it does not hold the lease), so its parent is fenced at its next append
    instead of writing a second entry at the same offset."""
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                run.record("child", lambda: 2)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with pytest.raises(FencedError):
            run.record("parent", lambda: 3)
    journal = read_journal(storage, "r1")  # parses: every offset once, in order
    assert list(journal.steps) == ["a", "child"]
    assert [e["offset"] for e in journal.entries] == list(range(len(journal.entries)))
    assert sorted(p.name for p in root.iterdir()) == ["r1.jsonl"]


def test_without_mmap_a_session_appends_carefully(
    storage: LocalStorage, syscalls: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that cannot map the fence (or flock it) keeps every append careful."""
    import mmap

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(19, "No such device")

    monkeypatch.setattr(mmap, "mmap", refuse)
    with open_run(storage, "r1") as run:
        run.record("first", lambda: 1)
        syscalls.clear()
        for number in range(3):
            run.record(f"s{number}", lambda number=number: number)
        assert syscalls["flock"] >= 6 and syscalls["fsync"] == 3
    assert read_journal(storage, "r1").status().steps == 4


def test_a_lean_write_racing_a_replacing_writer_is_kept_or_not_acknowledged(
    storage: LocalStorage, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder's lean write lands just after the cancel looked at the journal's file (its
    first `fstat`) and before anything else it does. The cancel must either see that line
    (and copy it) or the holder must not acknowledge it: a step `record` returned must be in
    the journal. (Changing the fence only after reading the size lost this step.)"""
    import threading

    real_fstat = os.fstat
    state = {"armed": False, "acked": False}

    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)  # lean from here

        def late_step() -> None:
            run.record("late", lambda: 2)
            state["acked"] = True

        def fstat(fd: int) -> os.stat_result:
            status = real_fstat(fd)
            if state["armed"] and threading.current_thread() is threading.main_thread():
                state["armed"] = False
                holder = threading.Thread(target=late_step)
                holder.start()
                holder.join(timeout=30)
            return status

        monkeypatch.setattr(os, "fstat", fstat)
        state["armed"] = True
        status = cancel_run(LocalStorage(root), "r1")  # not the holder's storage
        monkeypatch.undo()
        assert status.status == "canceled"
        with pytest.raises(RunCancelledError):
            run.record("after", lambda: 3)
    journal = read_journal(storage, "r1")
    assert journal.entries[-1]["type"] == "cancel"
    assert state["acked"]  # the fence had not moved yet: the holder wrote lean
    assert "late" in journal.steps, "a step was acknowledged and then lost"
