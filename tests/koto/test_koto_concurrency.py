"""One writer per session: concurrent `koto` processes never interleave a session's journal."""

from __future__ import annotations

import json
import time

from conftest import Koto

from kassette._journal import Journal

WAIT = 60  # seconds a test waits for its processes, far above what they need


def check_journal(koto: Koto, name: str) -> Journal:
    """The journal parses, and each kassette session's entries are contiguous."""
    journal = Journal.parse(koto.journal_path(name).read_bytes(), f"koto-{name}.state")
    sessions = [entry["session"] for entry in journal.entries]
    assert sessions == sorted(sessions)
    return journal


def test_two_concurrent_next_calls(koto: Koto) -> None:
    koto.ok("init", "c", "--template", koto.template("concurrent"))
    processes = [koto.start("next", "c") for _ in range(2)]
    answers = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=WAIT)
        assert process.returncode == 0, (stdout, stderr)
        answers.append(json.loads(stdout))
    assert sorted(a["advanced"] for a in answers) == [False, True]
    assert {(a["action"], a["state"]) for a in answers} == {("evidence_required", "ready")}
    journal = check_journal(koto, "c")
    kinds = [entry["type"] for entry in journal.entries]
    assert kinds.count("gate_evaluated") == 1  # the gate ran once: the second call saw `ready`
    assert kinds.count("transitioned") == 2  # the initial one and wait -> ready


def test_concurrent_evidence_is_checked_under_the_lock(koto: Koto) -> None:
    koto.ok("init", "e", "--template", koto.template("lifecycle"), "--var", "TASK=t")
    processes = [
        koto.start("next", "e", "--with-data", json.dumps({"approach": f"plan {n}"}))
        for n in range(3)
    ]
    codes = []
    for process in processes:
        stdout, _ = process.communicate(timeout=WAIT)
        codes.append(process.returncode)
        if process.returncode == 2:  # a later one finds the session already in `build`
            assert json.loads(stdout)["error"]["code"] == "invalid_submission"
    assert sorted(codes) == [0, 2, 2]
    journal = check_journal(koto, "e")
    submitted = [entry for entry in journal.entries if entry["type"] == "evidence_submitted"]
    assert len(submitted) == 1


def test_a_busy_session_is_a_clear_transient_error(koto: Koto) -> None:
    koto.ok("init", "h", "--template", koto.template("hold"))
    holder = koto.start("next", "h")
    started = koto.cwd / "started"
    deadline = time.monotonic() + WAIT
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists()  # the holder's gate runs: it holds the session
    busy = koto("next", "h", KOTO_LOCK_TIMEOUT="0.2")
    assert busy.code == 1
    assert busy.error["code"] == "concurrent_access"
    assert "retry" in busy.error["message"]
    context = koto("context", "add", "h", "k", input=b"x", KOTO_LOCK_TIMEOUT="0")
    assert (context.code, context.json["code"]) == (1, "concurrent_access")
    stdout, _ = holder.communicate(timeout=WAIT)
    assert holder.returncode == 0
    assert json.loads(stdout)["action"] == "done"
