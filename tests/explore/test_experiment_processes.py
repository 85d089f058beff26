"""Experiments in real processes: SIGKILL mid-experiment, SIGINT, and a process pool.

A child process runs `experiment_support.run_experiment` (8 source runs x 2 variants x 2
repeats = 32 branches, each with two polish steps that sleep) and the test kills or interrupts
it part-way, then makes the same call again here. Every step function and every score call
appends a line to `calls.log`, so "nothing ran twice" is counted across processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import experiment_support
import pytest
from experiment_support import SOURCES, calls, record_sources, run_experiment

from kassette import explore as kx
from kassette.core import read_journal

HERE = Path(__file__).parent
WAIT_LIMIT_S = 120
BRANCHES = SOURCES * 2 * 2


def _child(root: Path, mode: str) -> subprocess.Popen[str]:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); "
        "import experiment_support; experiment_support.main()"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-c", code, str(root), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _wait_for(root: Path, step: str, count: int, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        if (
            sum(1 for run_id, name in calls(root) if name == step and run_id.startswith("exp."))
            >= count
        ):
            return
        if child.poll() is not None:
            raise AssertionError(f"child ended early: {child.communicate()}")
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} {step} calls in {WAIT_LIMIT_S} s")


def _branch_calls(root: Path) -> Counter[tuple[str, str]]:
    return Counter((run_id, step) for run_id, step in calls(root) if run_id.startswith("exp."))


def _assert_every_branch_ran_once(root: Path, found: Any, *, in_flight: int = 0) -> None:
    """Every branch was forked once and journaled each step once; no step function ran twice
    but the `in_flight` ones a SIGKILL cut short (their work was never journaled)."""
    frame = found.frame
    branches = frame[frame["variant"] != "recorded"]
    assert len(branches) == BRANCHES
    assert set(branches["status"]) == {"success"}
    assert frame["score"].notna().all()
    storage = experiment_support.workflow(root).storage
    for run_id in branches["run_id"]:
        entries = read_journal(storage, run_id).entries
        forks = [e for e in entries if e["type"] == "start" and e.get("source")]
        steps = [e["stepId"] for e in entries if e["type"] == "step"]
        assert len(forks) == 1 and len(steps) == len(set(steps)), run_id
    counted = _branch_calls(root)
    twice = {key: count for key, count in counted.items() if count > 1}
    assert len(twice) <= in_flight and set(twice.values()) <= {2}, f"ran twice: {twice}"
    # every branch drafted, polished twice and was scored
    for run_id in branches["run_id"]:
        assert all(counted[(run_id, s)] >= 1 for s in ("draft", "polish0", "polish1", "score"))
    # the recorded baseline's source runs were scored once each, never re-run
    every = Counter(calls(root))
    sources = frame.loc[frame["variant"] == "recorded", "source_run_id"]
    assert [every[(source, "score")] for source in sources] == [1] * SOURCES


def test_sigkill_mid_experiment_then_the_same_call_completes_every_branch_once(
    tmp_path: Path,
) -> None:
    record_sources(tmp_path, sleep=0.05)
    before = len(calls(tmp_path))
    child = _child(tmp_path, "threads")
    try:
        _wait_for(tmp_path, "polish0", 6, child)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.communicate(timeout=WAIT_LIMIT_S)
    assert child.returncode == -signal.SIGKILL
    ran_before_kill = len(calls(tmp_path)) - before
    found = run_experiment(tmp_path)  # the same call, in this process
    print(f"\nSIGKILL after {ran_before_kill} calls; re-call: {found.status_line()}")
    # the child ran two branches at a time: at most those two steps were cut short, and the
    # score being computed (in the experiment's own process) at most once more
    _assert_every_branch_ran_once(tmp_path, found, in_flight=3)
    assert found.status_line().startswith(f"{BRANCHES} of {BRANCHES} branches done")
    after = len(calls(tmp_path))
    again = run_experiment(tmp_path)  # completed: a third call runs and scores nothing
    assert len(calls(tmp_path)) == after
    assert again.summary().equals(found.summary())


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_sigint_stops_the_experiment_at_step_boundaries_and_the_same_call_continues(
    tmp_path: Path, mode: str
) -> None:
    record_sources(tmp_path, sleep=0.4)
    child = _child(tmp_path, mode)
    try:
        _wait_for(tmp_path, "polish0", 2, child)
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=WAIT_LIMIT_S)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    ended = json.loads(out.strip().splitlines()[-1])
    assert ended["ended"] == "interrupted", (out, err)
    assert "stopped by interrupt" in ended["line"]
    interrupted_calls = _branch_calls(tmp_path)
    assert max(interrupted_calls.values()) == 1
    found = run_experiment(tmp_path)
    print(f"\n{mode}: interrupted: {ended['line']}; re-call: {found.status_line()}")
    _assert_every_branch_ran_once(tmp_path, found)


def test_a_process_pool_runs_an_experiment_and_load_reopens_it(tmp_path: Path) -> None:
    record_sources(tmp_path)
    with ProcessPoolExecutor(2) as pool:
        found = run_experiment(tmp_path, pool, max_workers=2)
    _assert_every_branch_ran_once(tmp_path, found)
    reopened = kx.load(tmp_path / "journals").experiments["exp"]
    before = len(calls(tmp_path))
    assert reopened.frame.drop(columns=["status"]).equals(found.frame.drop(columns=["status"]))
    assert reopened.summary().equals(found.summary())
    assert len(calls(tmp_path)) == before  # reopening ran nothing
    assert experiment_support.workflow(tmp_path).storage.read(reopened.run_id) is not None
