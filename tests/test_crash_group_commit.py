"""Group commit under SIGKILL: a process whose parallel branches append concurrently is killed
in the middle of a group commit (after the write, before the fsync; after the fsync, before any
of its steps returned) and at varied delays; after every kill, every step the worker
acknowledged is in the journal, no step is there twice, and a re-invocation completes the run
with each of the 240 steps once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from kassette import LocalStorage
from kassette.core import read_journal

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "procs" / "group_worker.py"
TIMEOUT = 120


def invoke(directory: Path, acks: Path, kill: str, delay: float | None = None) -> int:
    """Run the worker; return its exit code (-9 when killed)."""
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(directory), str(acks), kill],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    if delay is not None:
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
    _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode in (0, -signal.SIGKILL), err.decode()
    return process.returncode


def check(directory: Path, acks: Path) -> list[str]:
    """Acknowledged steps are all journaled, none twice; returns the journaled step ids."""
    storage = LocalStorage(directory)
    if storage.read("group") is None:
        assert not acks.exists() or acks.read_text() == ""
        return []
    journal = read_journal(storage, "group")
    steps = [e["stepId"] for e in journal.entries if e["type"] == "step"]
    assert len(steps) == len(set(steps)), "a step journaled twice"
    acknowledged = set(acks.read_text().split()) if acks.exists() else set()
    assert acknowledged <= set(steps), f"lost: {sorted(acknowledged - set(steps))[:5]}"
    assert [e["offset"] for e in journal.entries] == list(range(len(journal.entries)))
    return steps


def test_kills_in_the_middle_of_group_commits(tmp_path: Path) -> None:
    kills = 0
    plans: list[tuple[str, float | None]] = [
        (f"{number}:{phase}", None) for number in (1, 2, 4, 6, 9) for phase in ("written", "synced")
    ]
    plans += [("none", delay) for delay in (0.2, 0.35, 0.5, 0.65, 0.8, 1.0)]
    for index, (kill, delay) in enumerate(plans):
        directory, acks = tmp_path / f"s{index}", tmp_path / f"acks{index}"
        code = invoke(directory, acks, kill, delay)
        steps = check(directory, acks)
        if code == -signal.SIGKILL:
            kills += 1
        if code == -signal.SIGKILL:  # re-invoke, as a dispatcher would
            assert invoke(directory, acks, "none") == 0
        steps = check(directory, acks)
        assert len(steps) == 8 * 30 + 1  # the block's own step too
        journal = read_journal(LocalStorage(directory), "group")
        assert journal.status().status == "completed"
    assert kills >= 10  # every precise kill landed (the timed ones may come too late)
    print(f"kills: {kills}")
