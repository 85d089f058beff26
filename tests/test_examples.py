"""Every script in examples/ runs, as a user would run it, and does what it says it does.

Each example has a check below that looks at its output *and* at the journals it leaves; an
example without a check fails, so a new example cannot slip in untested.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from kassette import LocalStorage
from kassette.core import read_journal

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name: str, cwd: Path, *args: str) -> str:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("KASSETTE_STORAGE", None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", done.stderr
    return done.stdout


def step_ids(storage: LocalStorage, run_id: str) -> list[str]:
    return [e["stepId"] for e in read_journal(storage, run_id).entries if e["type"] == "step"]


def check_quickstart(tmp_path: Path) -> None:
    first, second = run_example("quickstart.py", tmp_path).splitlines()
    run_id, status, event = first.split()
    assert (status, event) == ("suspended", "human-approval")
    assert second.startswith(f"{run_id} success {{'outcome': 'resolved'")

    journal = read_journal(LocalStorage(tmp_path / ".kassette"), run_id)
    assert journal.status().status == "completed"
    assert [e["type"] for e in journal.entries] == [
        "start", "step", "suspend", "start", "resume", "step", "complete",
    ]  # fmt: skip
    assert journal.resumes["human-approval"]["value"] == {"approved": True}
    assert journal.terminal is not None
    assert journal.terminal["result"]["outcome"] == "resolved"


def check_demo(tmp_path: Path) -> None:
    directory = tmp_path / "journals"
    output = run_example("demo.py", tmp_path, "--dir", str(directory))
    assert len(output.splitlines()) <= 40, "the demo's output should stay short"

    # 1. the first worker really died of SIGKILL, after journaling three steps
    assert f"(exit -{int(signal.SIGKILL)})" in output
    assert "journal: steps read-ticket, analyze, plan; status running" in output
    # 2. the retry replayed those three steps instead of calling them again
    assert "replayed from the journal, not called again: read-ticket, analyze, plan" in output
    assert "ran live: draft-patch, run-tests" in output
    assert "suspended, waiting for human-approval" in output
    # 3. the resume ran only the last step; the calls log is the proof
    assert "ran live: apply-fix; success" in output
    calls = Counter(
        line.split()[1] for line in (directory / ".demo-calls.log").read_text().splitlines()
    )
    printed = re.search(r"calls made: (.*)", output)
    assert printed is not None
    assert printed.group(1) == (
        "read-ticket 1, analyze 1, plan 1, draft-patch 2, run-tests 1, apply-fix 1"
    )
    # 4. two forks re-planned and finished; the shared prefix was never called again
    assert calls == Counter(
        {"read-ticket": 1, "analyze": 1, "plan": 3, "draft-patch": 4, "run-tests": 3,
         "apply-fix": 3}
    )  # fmt: skip
    assert "read-ticket and analyze were called once in all, for the three runs" in output

    storage = LocalStorage(directory)
    source = read_journal(storage, "INC-4821")
    assert source.status().status == "completed"
    assert source.max_session == 3  # killed start, retry, resume
    steps = step_ids(storage, "INC-4821")
    assert len(steps) == len(set(steps)) == 6  # no step journaled twice
    plan_offset = source.steps["plan"]["offset"]
    fixes = set()
    for strategy in ("rollback", "feature-flag"):
        fork = read_journal(storage, f"INC-4821-{strategy}")
        status = fork.status()
        assert status.status == "completed"
        assert status.source == {"runId": "INC-4821", "fromOffset": plan_offset}
        assert fork.steps["plan"]["result"]["strategy"] == strategy
        assert fork.entries[:plan_offset] == source.entries[:plan_offset]
        fixes.add(status.result["fix"])
        assert f"INC-4821-{strategy}" in output
    assert len(fixes) == 2
    # 5. the lineage comes from the kassette command
    assert "python -m kassette --storage file:" in output
    assert "INC-4821 (completed)" in output

    # a second demo in the same directory picks a fresh run id and counts only its own calls
    again = run_example("demo.py", tmp_path, "--dir", str(directory))
    assert "on INC-4822" in again
    assert printed.group(0) in again


def check_demo_default_directory(tmp_path: Path) -> None:
    output = run_example("demo.py", tmp_path)
    match = re.search(r"journals in (\S+)/\n", output)
    assert match is not None
    assert not Path(match.group(1)).exists(), "the temporary journals are removed"
    assert list(tmp_path.iterdir()) == [], "the demo writes nothing in the working directory"


def check_dispatcher(tmp_path: Path) -> None:
    rows = [line.split(" -> ") for line in run_example("dispatcher.py", tmp_path).splitlines()]
    decisions = {label.strip(): tuple(outcome.split()) for label, outcome in rows}
    assert decisions == {
        "start INC-1": ("ack", "suspended"),
        "resume INC-1 while another worker holds it": ("redeliver", "RunLockedError"),
        "resume INC-1 human-approval": ("ack", "success"),
        "resume INC-1 human-approval (duplicate)": ("ack", "TerminalRunError"),
        "start INC-2 with an empty ticket": ("ack", "failed"),
        "start INC-3, canceled while it runs": ("ack", "CancelledError"),
        "start INC-4 with workflow version v2": ("dead-letter", "VersionMismatchError"),
        "resume INC-5 before it suspends": ("redeliver", "EventNotPendingError"),
        "resume INC-6, a run that does not exist": ("dead-letter", "RunNotFoundError"),
    }
    assert list(tmp_path.iterdir()) == []


CHECKS: dict[str, Callable[[Path], None]] = {
    "quickstart.py": check_quickstart,
    "demo.py": check_demo,
    "dispatcher.py": check_dispatcher,
}


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example(name: str, tmp_path: Path) -> None:
    assert name in CHECKS, f"examples/{name} has no check in tests/test_examples.py"
    CHECKS[name](tmp_path)


def test_demo_without_a_directory_cleans_up(tmp_path: Path) -> None:
    check_demo_default_directory(tmp_path)
