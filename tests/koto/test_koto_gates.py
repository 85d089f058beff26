"""Gates: command gates that block, pass and route; timeouts; context gates; auto-advance."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import Koto


def test_a_failing_command_gate_routes_or_blocks(koto: Koto) -> None:
    koto.ok("init", "g", "--template", koto.template("gates"))
    routed = koto.ok("next", "g")  # flag.txt is missing: exit_code 1 routes to fix
    assert (routed["state"], routed["advanced"]) == ("fix", True)
    assert routed["action"] == "gate_blocked"  # ... where fixed.txt is missing too
    assert routed["expects"] is None
    assert routed["blocking_conditions"] == [
        {
            "agent_actionable": False,
            "category": "corrective",
            "name": "fixed",
            "output": {"error": "", "exit_code": 1},
            "status": "failed",
            "type": "command",
        }
    ]
    assert koto.ok("next", "g")["action"] == "gate_blocked"
    koto.write("fixed.txt", "")
    done = koto.ok("next", "g")
    assert (done["action"], done["state"]) == ("done", "passed")


def test_a_passing_gate_advances_in_the_same_call(koto: Koto) -> None:
    koto.ok("init", "g", "--template", koto.template("gates"))
    koto.write("flag.txt", "")
    done = koto.ok("next", "g", "--no-cleanup")
    assert (done["action"], done["state"], done["advanced"]) == ("done", "passed", True)
    [gate] = koto.entries("g", "gate_evaluated")
    assert (gate["state"], gate["gate"], gate["outcome"]) == ("check", "flag", "passed")
    assert gate["output"] == {"exit_code": 0, "error": ""}


def test_gate_with_evidence_fallback(koto: Koto) -> None:
    koto.ok("init", "e", "--template", koto.template("evidence-gate"))
    blocked = koto.ok("next", "e")
    assert (blocked["action"], blocked["state"]) == ("evidence_required", "start")
    assert [c["name"] for c in blocked["blocking_conditions"]] == ["check"]
    assert blocked["expects"]["fields"]["status"]["values"] == ["completed", "blocked"]
    still = koto.ok("next", "e", "--with-data", '{"status": "blocked"}')
    assert (still["action"], still["state"]) == ("evidence_required", "start")
    done = koto.ok("next", "e", "--with-data", '{"status": "completed"}')
    assert (done["action"], done["state"]) == ("done", "done")


def test_a_gate_that_passes_needs_no_evidence(koto: Koto) -> None:
    koto.ok("init", "e", "--template", koto.template("evidence-gate"))
    koto.write("check.txt", "")
    assert koto.ok("next", "e")["state"] == "done"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a killed process nobody reaped yet is dead too
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_command_timeout_kills_the_process_group(koto: Koto) -> None:
    koto.ok("init", "t", "--template", koto.template("timeout"))
    blocked = koto.ok("next", "t")
    assert blocked["action"] == "gate_blocked"
    [condition] = blocked["blocking_conditions"]
    assert condition["status"] == "timed_out"
    assert condition["output"] == {
        "exit_code": -1,
        "error": "timed_out",
        "failure_kind": "timed_out",
    }
    child = int((koto.cwd / "child.pid").read_text())  # the gate's background `sleep 60`
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_context_gates(koto: Koto) -> None:
    koto.ok("init", "c", "--template", koto.template("context"))
    blocked = koto.ok("next", "c")
    assert blocked["action"] == "gate_blocked"
    assert blocked["blocking_conditions"][0]["type"] == "context-exists"
    assert blocked["blocking_conditions"][0]["output"] == {"exists": False, "error": ""}
    assert koto("context", "add", "c", "docs/plan.md", input=b"# the plan\n").code == 0
    review = koto.ok("next", "c")
    assert (review["state"], review["action"]) == ("review", "gate_blocked")
    assert review["blocking_conditions"][0]["output"]["matches"] is False
    koto.write("review.txt", "CHANGES REQUESTED\n")
    assert koto("context", "add", "c", "review.txt", "--from-file", "review.txt").code == 0
    assert koto.ok("next", "c")["blocking_conditions"][0]["output"] == {
        "matches": False,
        "error": "",
    }
    koto.write("review.txt", "APPROVED by someone\n")
    assert koto("context", "add", "c", "review.txt", "--from-file", "review.txt").code == 0
    assert koto.ok("next", "c")["state"] == "done"


def test_auto_advance_through_states_that_need_nothing(koto: Koto) -> None:
    koto.ok("init", "a", "--template", koto.template("chain"))
    three = koto.ok("next", "a")
    assert (three["state"], three["advanced"]) == ("three", True)
    assert [(e["from"], e["to"]) for e in koto.entries("a", "transitioned")][1:] == [
        ("one", "two"),
        ("two", "three"),
    ]


def test_a_cycle_is_a_template_error(koto: Koto) -> None:
    koto.ok("init", "a", "--template", koto.template("chain"))
    koto.ok("next", "a")
    cycle = koto("next", "a", "--with-data", '{"go": true}')
    assert cycle.code == 3
    assert cycle.error["code"] == "template_error"
    assert "cycle" in cycle.error["message"]
