"""Session fencing across real processes on LocalStorage.

Writers race for one run, a paused writer wakes up after its lock was reclaimed, a holder is
SIGKILLed, and a run is canceled under a live worker. `tests/procs/fence_worker.py` is the
worker; every step it records carries its pid and session, so the journal shows who wrote what.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kassette._journal import Journal

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "procs" / "fence_worker.py"
RUN_ID = "fenced-run"
TIMEOUT = 60.0


def spawn(mode: str, directory: Path, **config: Any) -> subprocess.Popen[bytes]:
    """Start a worker; its stdout is an unbuffered pipe read line by line."""
    arguments = {"mode": mode, "dir": str(directory / "journals"), "run_id": RUN_ID, **config}
    return subprocess.Popen(
        [sys.executable, "-S", str(WORKER), json.dumps(arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        bufsize=0,
    )


def read_line(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The worker's next printed line, waiting at most TIMEOUT seconds."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
    assert ready, "worker printed nothing in time"
    line = process.stdout.readline()
    assert line, f"worker exited early: {finish(process)}"
    return json.loads(line)  # type: ignore[no-any-return]


def finish(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Wait for the worker; return its last printed line (its outcome)."""
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError("worker hung") from None
    assert process.returncode == 0, stderr.decode()[-2000:]
    return json.loads(stdout.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


def reap(process: subprocess.Popen[bytes]) -> None:
    """Kill a worker a failed test left behind and close its pipes."""
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.kill()
    process.wait(timeout=TIMEOUT)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def run_worker(mode: str, directory: Path, **config: Any) -> dict[str, Any]:
    return finish(spawn(mode, directory, **config))


def journal_of(directory: Path) -> Journal:
    return Journal.parse((directory / "journals" / f"{RUN_ID}.jsonl").read_bytes(), RUN_ID)


def writers_by_session(journal: Journal) -> dict[int, set[int]]:
    """For each session: the pids found in its step results. Also checks the sessions' shape."""
    starts = Counter(e["session"] for e in journal.entries if e["type"] == "start")
    assert set(starts) == set(range(1, journal.max_session + 1)), starts
    assert all(count == 1 for count in starts.values()), starts
    sessions = [e["session"] for e in journal.entries]
    assert sessions == sorted(sessions), "sessions interleave"
    writers: dict[int, set[int]] = {session: set() for session in starts}
    for entry in journal.entries:
        if entry["type"] == "step":
            assert entry["result"]["session"] == entry["session"], entry
            writers[entry["session"]].add(entry["result"]["pid"])
    return writers


def lockfile(directory: Path) -> Path:
    return directory / "journals" / f"{RUN_ID}.lock"


@pytest.fixture
def stopped() -> Any:
    """Reap (after a SIGCONT) any worker a failing test left stopped."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        reap(process)


@pytest.mark.parametrize("before", ["nothing", "a-session", "a-killed-holder"])
def test_racing_writers_get_one_session_each_or_run_locked(tmp_path: Path, before: str) -> None:
    """Six processes released together: each session is one process's, the rest are locked
    out (also when they all find a dead holder's stale lock to reclaim)."""
    if before == "a-session":
        assert run_worker("write", tmp_path)["outcome"] == "wrote"
    elif before == "a-killed-holder":
        holder = spawn("hold", tmp_path, go=str(tmp_path / "never"))
        try:
            assert read_line(holder)["stage"] == "recorded"
        finally:
            reap(holder)
        assert json.loads(lockfile(tmp_path).read_bytes())["pid"] == holder.pid
    count = 6
    start = tmp_path / "start"
    workers = [
        spawn("race", tmp_path, ready=str(tmp_path / f"ready-{n}"), start=str(start), hold=0.05)
        for n in range(count)
    ]
    try:
        deadline = time.monotonic() + TIMEOUT
        while not all((tmp_path / f"ready-{n}").exists() for n in range(count)):
            assert time.monotonic() < deadline, "workers never got ready"
            time.sleep(0.01)
        start.touch()
        outcomes = [finish(worker) for worker in workers]
    finally:
        for worker in workers:
            reap(worker)
    assert {o["outcome"] for o in outcomes} <= {"wrote", "locked"}, outcomes
    wrote = {o["session"]: o["pid"] for o in outcomes if o["outcome"] == "wrote"}
    locked = {o["pid"] for o in outcomes if o["outcome"] == "locked"}
    assert wrote and len(wrote) + len(locked) == count
    assert len(wrote) == len([o for o in outcomes if o["outcome"] == "wrote"]), outcomes
    journal = journal_of(tmp_path)
    writers = writers_by_session(journal)
    first = 1 if before == "nothing" else 2
    assert set(writers) == set(range(1, first)) | set(wrote)
    for session, pid in wrote.items():
        assert writers[session] == {pid}, (session, writers)
        steps = [e for e in journal.entries if e["session"] == session and e["type"] == "step"]
        assert len(steps) == 3
    assert not any(writers[s] & locked for s in writers)
    assert not lockfile(tmp_path).exists()


def paused_writer(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """A worker that opened session 1, recorded a step and was then SIGSTOPped (lock held)."""
    a = spawn("hold", tmp_path, go=str(tmp_path / "go"))
    stopped.append(a)
    assert read_line(a)["stage"] == "recorded"
    a.send_signal(signal.SIGSTOP)
    return a


def test_a_paused_writer_whose_lock_was_reclaimed_is_fenced(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    a = paused_writer(tmp_path, stopped)
    # a stopped process is alive: its lock holds
    assert run_worker("write", tmp_path)["outcome"] == "locked"
    holder = json.loads(lockfile(tmp_path).read_bytes())
    assert holder["pid"] == a.pid and holder["session"] == 1
    lockfile(tmp_path).unlink()  # an operator reclaims it (say, after moving hosts)
    b = run_worker("write", tmp_path)
    assert b["outcome"] == "wrote" and b["session"] == 2
    (tmp_path / "go").touch()
    a.send_signal(signal.SIGCONT)
    outcome = finish(a)
    assert outcome == {"pid": a.pid, "outcome": "fenced", "session": 1, "error": "FencedError"}
    journal = journal_of(tmp_path)
    assert writers_by_session(journal) == {1: {a.pid}, 2: {b["pid"]}}
    assert [e["type"] for e in journal.entries] == ["start", "step", "start", "step"]
    assert f"after-{a.pid}" not in journal.steps
    assert not lockfile(tmp_path).exists()
    # the run goes on: a later writer opens session 3 behind both of them
    assert run_worker("write", tmp_path)["session"] == 3


def test_a_killed_holders_stale_lock_is_reclaimed(tmp_path: Path) -> None:
    a = spawn("hold", tmp_path, go=str(tmp_path / "never"))
    try:
        assert read_line(a)["stage"] == "recorded"
    finally:
        reap(a)
    assert a.returncode == -signal.SIGKILL
    assert json.loads(lockfile(tmp_path).read_bytes())["pid"] == a.pid  # left behind
    b = run_worker("write", tmp_path)
    assert b["outcome"] == "wrote" and b["session"] == 2
    journal = journal_of(tmp_path)
    assert writers_by_session(journal) == {1: {a.pid}, 2: {b["pid"]}}
    assert not lockfile(tmp_path).exists()


def test_cancel_from_another_process_stops_a_running_worker(tmp_path: Path) -> None:
    worker = spawn("flow", tmp_path, go=str(tmp_path / "go"))
    try:
        assert read_line(worker)["stage"] == "in-step"
        canceled = run_worker("cancel", tmp_path)
        assert canceled["status"] == "canceled" and canceled["sessions"] == 2
        (tmp_path / "go").touch()
        outcome = finish(worker)
    finally:
        reap(worker)
    assert outcome["outcome"] == "canceled" and outcome["error"] == "RunCancelledError"
    journal = journal_of(tmp_path)
    assert [e["type"] for e in journal.entries] == ["start", "step", "cancel"]
    assert journal.entries[-1]["session"] == 2 and journal.entries[-1]["reason"] == "operator"
    assert "second" not in journal.steps
    assert journal.status().status == "canceled"
    assert not lockfile(tmp_path).exists()


def test_cancel_fences_a_paused_low_level_writer(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    a = paused_writer(tmp_path, stopped)
    assert run_worker("cancel", tmp_path)["status"] == "canceled"
    (tmp_path / "go").touch()
    a.send_signal(signal.SIGCONT)
    assert finish(a)["error"] == "RunCancelledError"
    journal = journal_of(tmp_path)
    assert [e["type"] for e in journal.entries] == ["start", "step", "cancel"]
