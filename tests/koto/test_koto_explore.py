"""Koto sessions are kassette journals: `kassette dump`, `kassette status` and
`kassette.explore.load` read them, koto's entries showing with their own types."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import Koto


def kassette(koto: Koto, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kassette", *args],
        cwd=koto.cwd,
        env=koto.environment,
        capture_output=True,
        timeout=120,
    )


def drive(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", "TASK=t")
    koto.ok("next", "job")
    koto.ok("next", "job", "--with-data", '{"approach": "a"}')
    assert koto("context", "add", "job", "plan.md", input=b"the plan").code == 0


def test_the_kassette_command_reads_a_session(koto: Koto) -> None:
    drive(koto)
    storage = f"file:{koto.session_dir('job')}"
    dumped = kassette(koto, "--storage", storage, "dump", "koto-job.state")
    assert dumped.returncode == 0
    assert dumped.stdout == koto.journal_path("job").read_bytes()
    status = json.loads(kassette(koto, "--storage", storage, "status", "koto-job.state").stdout)
    assert (status["runId"], status["status"], status["version"]) == (
        "koto-job.state",
        "running",
        "1.0",
    )
    koto.ok("cancel", "job")
    status = json.loads(kassette(koto, "--storage", storage, "status", "koto-job.state").stdout)
    assert status["status"] == "canceled"


def test_explore_loads_a_session(koto: Koto) -> None:
    pytest.importorskip("pandas", reason="kassette.explore needs pandas (the explore extra)")
    pytest.importorskip("pyarrow", reason="kassette.explore needs pyarrow (the explore extra)")
    from kassette import explore

    drive(koto)
    journals = explore.load(f"file:{koto.session_dir('job')}")
    entries = journals.entries
    assert list(entries["type"]) == [
        "start",
        "transitioned",
        "start",
        "instructions_delivered",
        "start",
        "evidence_submitted",
        "transitioned",
        "start",
        "context_added",
    ]
    assert list(entries["offset"]) == list(range(9))
    submitted = entries[entries["type"] == "evidence_submitted"].iloc[0]
    assert json.loads(submitted["value"]) == {"state": "plan", "fields": {"approach": "a"}}
    moved = entries[entries["type"] == "transitioned"].iloc[1]
    assert json.loads(moved["value"])["to"] == "build"
    [run] = journals.runs.to_dict("records")
    assert (run["run_id"], run["status"], run["sessions"]) == ("koto-job.state", "running", 4)
