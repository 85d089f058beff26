"""Upstream koto's functional scenarios for decisions, `skip_if`, reserved evidence kinds, the
state file's name and the legacy-gates warning (issue 16), run the way upstream's suite runs
them: each step is one `koto` process (init, next, decisions or evidence, rewind, a terminal
state), checked by exit code, JSON answer, stderr and the journal file.
"""

from __future__ import annotations

import json

import pytest
from conftest import Koto, Result

REVIEW = """---
name: review
version: "1"
initial_state: assess
variables:
  PR: {required: true}
states:
  assess:
    accepts:
      verdict: {type: enum, values: [approve, revise], required: true}
    transitions:
      - {target: merge, when: {verdict: approve}}
      - {target: assess, when: {verdict: revise}}
  merge:
    accepts:
      merged: {type: boolean, required: true}
    transitions:
      - target: done
  done: {terminal: true}
---
## assess
Review {{PR}}.
## merge
Merge it.
## done
Done.
"""


def state_file_exists(koto: Koto, name: str) -> bool:
    """Upstream's step `the state file for "NAME" exists`."""
    return (koto.session_dir(name) / f"koto-{name}.state.jsonl").is_file()


def refused(result: Result, code: str, exit_code: int) -> str:
    assert result.code == exit_code, (result.code, result.stdout, result.stderr)
    assert b"Traceback" not in result.stderr
    answer = result.json
    if isinstance(answer["error"], dict):
        assert answer["error"]["code"] == code, answer
        return str(answer["error"]["message"])
    assert answer["code"] == code, answer
    return str(answer["error"])


def record(koto: Koto, name: str, choice: str, rationale: str, *alternatives: str) -> Result:
    payload: dict[str, object] = {"choice": choice, "rationale": rationale}
    if alternatives:
        payload["alternatives_considered"] = list(alternatives)
    return koto("decisions", "record", name, "--with-data", json.dumps(payload))


# -- decisions ---------------------------------------------------------------------------------


def test_decisions_are_recorded_in_a_state_listed_per_epoch_and_left_behind_by_rewind(
    koto: Koto,
) -> None:
    template = str(koto.write("review.md", REVIEW))
    assert koto.ok("init", "pr", "--template", template, "--var", "PR=7") == {
        "name": "pr",
        "state": "assess",
    }
    assert koto.ok("next", "pr")["action"] == "evidence_required"
    assert koto.ok("decisions", "list", "pr") == {
        "state": "assess",
        "decisions": {"count": 0, "items": []},
    }

    first = record(koto, "pr", "split the PR", "two concerns", "keep it whole")
    assert (first.code, first.json) == (0, {"state": "assess", "decisions_recorded": 1})
    second = record(koto, "pr", "ask for tests", "no coverage of the parser")
    assert second.json == {"state": "assess", "decisions_recorded": 2}
    listed = koto.ok("decisions", "list", "pr")
    assert listed["state"] == "assess" and listed["decisions"]["count"] == 2
    items = listed["decisions"]["items"]
    assert [(i["choice"], i["rationale"]) for i in items] == [
        ("split the PR", "two concerns"),
        ("ask for tests", "no coverage of the parser"),
    ]
    assert items[0]["alternatives_considered"] == ["keep it whole"]
    assert "alternatives_considered" not in items[1] and items[1]["timestamp"].endswith("Z")
    assert koto.ok("status", "pr")["current_state"] == "assess"  # recording does not advance
    recorded = koto.entries("pr", "decision_recorded")
    assert [e["state"] for e in recorded] == ["assess", "assess"]
    assert recorded[0]["decision"] == {
        "alternatives_considered": ["keep it whole"],
        "choice": "split the PR",
        "rationale": "two concerns",
    }

    moved = koto.ok("next", "pr", "--with-data", '{"verdict": "approve"}')
    assert moved["state"] == "merge"
    assert koto.ok("decisions", "list", "pr")["decisions"] == {"count": 0, "items": []}
    assert record(koto, "pr", "squash", "one commit").json["decisions_recorded"] == 1

    assert koto.ok("rewind", "pr")["state"] == "assess"
    back = koto.ok("decisions", "list", "pr")  # the earlier epoch's decisions stay behind
    assert back == {"state": "assess", "decisions": {"count": 0, "items": []}}
    assert record(koto, "pr", "approve after all", "fixed").json["decisions_recorded"] == 1
    assert len(koto.entries("pr", "decision_recorded")) == 4  # the journal keeps them all

    koto.ok("next", "pr", "--with-data", '{"verdict": "approve"}')
    done = koto.ok("next", "pr", "--with-data", '{"merged": true}')
    assert (done["action"], done["state"]) == ("done", "done")
    refused(record(koto, "pr", "x", "y"), "workflow_not_initialized", 2)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"choice": "a"}, "rationale"),
        ({"rationale": "b"}, "choice"),
        ({"choice": "", "rationale": "b"}, "choice"),
        ({"choice": "a", "rationale": "b", "why": "c"}, "why"),
        ({"choice": "a", "rationale": "b", "alternatives_considered": "c"}, "alternatives"),
        ({"choice": 1, "rationale": "b"}, "choice"),
    ],
)
def test_an_invalid_decision_is_refused_and_nothing_is_journaled(
    koto: Koto, payload: dict[str, object], field: str
) -> None:
    koto.ok("init", "pr", "--template", str(koto.write("review.md", REVIEW)), "--var", "PR=7")
    before = koto.journal_path("pr").read_bytes()
    result = koto("decisions", "record", "pr", "--with-data", json.dumps(payload))
    assert field in refused(result, "invalid_submission", 2)
    refused(koto("decisions", "record", "pr", "--with-data", "[1]"), "invalid_submission", 2)
    assert koto("decisions", "record", "pr").code == 2  # --with-data is required
    assert koto.journal_path("pr").read_bytes() == before


def test_decisions_on_a_cancelled_or_finished_session_are_refused(koto: Koto) -> None:
    template = str(koto.write("review.md", REVIEW))
    koto.ok("init", "c", "--template", template, "--var", "PR=1")
    koto.ok("cancel", "c")
    refused(record(koto, "c", "a", "b"), "terminal_state", 2)
    koto.ok("init", "f", "--template", template, "--var", "PR=1")
    koto.ok("next", "f", "--with-data", '{"verdict": "approve"}')
    koto.ok("next", "f", "--with-data", '{"merged": false}', "--no-cleanup")
    refused(record(koto, "f", "a", "b"), "terminal_state", 2)
    assert koto.ok("decisions", "list", "f")["state"] == "done"


# -- skip_if ---------------------------------------------------------------------------------

SKIPPING = """---
name: skipping
version: "1"
initial_state: plan
variables:
  FAST: {default: ""}
  MODE: {default: careful}
states:
  plan:
    accepts:
      approach: {type: string, required: true}
    transitions:
      - target: design
  design:
    skip_if: {vars.FAST: {is_set: true}}
    accepts:
      sketch: {type: string, required: true}
    transitions:
      - target: lint
  lint:
    gates:
      clean: {type: command, command: "test -f clean.txt"}
    skip_if: {vars.MODE: quick}
    transitions:
      - {target: test, when: {gates.clean.exit_code: 0}}
      - target: test
  test:
    gates:
      suite: {type: command, command: "test -f passed.txt"}
    skip_if: {gates.suite.exit_code: 0}
    accepts:
      result: {type: enum, values: [pass, fail], required: true}
    transitions:
      - {target: done, when: {result: pass}}
      - {target: plan, when: {result: fail}}
      - target: done
  done: {terminal: true}
---
## plan
Plan.
## design
Sketch the design.
## design_notes
(not a state)
## lint
Lint.
## test
Run the tests.
## done
Done.
"""


def transitions(koto: Koto, name: str) -> list[dict[str, object]]:
    return koto.entries(name, "transitioned")


def test_skip_if_on_a_set_variable_chains_through_states_in_one_tick(koto: Koto) -> None:
    template = str(koto.write("skipping.md", SKIPPING))
    koto.ok("init", "s", "--template", template, "--var", "FAST=yes", "--var", "MODE=quick")
    koto.write("passed.txt", "")
    answer = koto.ok("next", "s", "--with-data", '{"approach": "small"}', "--no-cleanup")
    # design (FAST is set), lint (MODE is quick) and test (its suite passed) are skipped
    assert answer["state"] == "done" and answer["action"] == "done"
    skipped = [t for t in transitions(koto, "s") if t.get("condition_type") == "skip_if"]
    assert [(t["from"], t["to"]) for t in skipped] == [
        ("design", "lint"),
        ("lint", "test"),
        ("test", "done"),
    ]
    assert [t["skip_if_matched"] for t in skipped] == [
        {"vars.FAST": {"is_set": True}},
        {"vars.MODE": "quick"},
        {"gates.suite.exit_code": 0},
    ]
    assert skipped[1]["when"] is None  # the gate failed (no clean.txt): the fallback
    assert skipped[2]["when"] is None


def test_skip_if_that_does_not_hold_leaves_the_state_to_the_agent(koto: Koto) -> None:
    template = str(koto.write("skipping.md", SKIPPING))
    koto.ok("init", "s", "--template", template)  # FAST empty, MODE careful
    answer = koto.ok("next", "s", "--with-data", '{"approach": "big"}')
    assert (answer["state"], answer["action"]) == ("design", "evidence_required")
    blocked = koto.ok("next", "s", "--with-data", '{"sketch": "boxes"}')
    assert (blocked["state"], blocked["action"]) == ("lint", "gate_blocked")
    koto.write("clean.txt", "")
    at_test = koto.ok("next", "s")
    assert (at_test["state"], at_test["action"]) == ("test", "evidence_required")
    assert at_test["blocking_conditions"][0]["name"] == "suite"
    assert not [t for t in transitions(koto, "s") if t.get("condition_type") == "skip_if"]
    koto.write("passed.txt", "")  # now the gate the skip tests passes: skipped on the next tick
    finished = koto.ok("next", "s", "--no-cleanup")
    assert finished["state"] == "done"
    assert transitions(koto, "s")[-1]["condition_type"] == "skip_if"


def test_a_rewind_into_a_skipped_state_skips_it_again(koto: Koto) -> None:
    template = str(koto.write("skipping.md", SKIPPING))
    koto.ok("init", "s", "--template", template, "--var", "FAST=1")
    answer = koto.ok("next", "s", "--with-data", '{"approach": "a"}')
    assert (answer["state"], answer["action"]) == ("lint", "gate_blocked")
    assert koto.ok("rewind", "s")["state"] == "design"
    assert koto.ok("status", "s")["current_state"] == "design"
    again = koto.ok("next", "s")
    assert again["state"] == "lint"
    assert [t["from"] for t in transitions(koto, "s") if t.get("condition_type")] == [
        "design",
        "design",
    ]


@pytest.mark.parametrize(
    ("states", "message"),
    [
        (
            "  a:\n    transitions: [{target: b}]\n  b: {terminal: true, skip_if: {vars.X: x}}",
            "E-SKIP-TERMINAL",
        ),
        (
            "  a:\n    skip_if: {pick: one}\n    accepts:\n"
            "      pick: {type: enum, values: [one, two]}\n"
            "    transitions:\n      - {target: b, when: {pick: one}}\n"
            "      - {target: b, when: {pick: two}}\n  b: {terminal: true}",
            None,
        ),
        (
            "  a:\n    skip_if: {vars.Y: x}\n    transitions: [{target: b}]\n  b: {terminal: true}",
            "names no declared variable",
        ),
        (
            "  a:\n    skip_if: {vars.X: {is_set: yes}}\n    transitions: [{target: b}]\n"
            "  b: {terminal: true}",
            "is_set",
        ),
        (
            "  a:\n    skip_if: {pick: three}\n    accepts:\n"
            "      pick: {type: enum, values: [one, two]}\n"
            "    transitions:\n      - {target: b, when: {pick: one}}\n  b: {terminal: true}",
            "not one of the values",
        ),
        (
            "  a:\n    skip_if: {vars.X: x}\n    accepts:\n      pick: {type: string}\n"
            "    transitions:\n      - {target: b, when: {pick: one}}\n  b: {terminal: true}",
            "selects no transition",
        ),
    ],
)
def test_skip_if_is_checked_at_compile_time(koto: Koto, states: str, message: str | None) -> None:
    source = "---\nname: t\nversion: '1'\ninitial_state: a\nvariables:\n  X: {default: ''}\n"
    source += f"states:\n{states}\n---\n## a\nA.\n## b\nB.\n"
    result = koto("template", "compile", str(koto.write("t.md", source)))
    if message is None:
        assert result.code == 0, result.stdout
        assert json.loads(result.stdout)["states"]["a"]["skip_if"] == {"pick": "one"}
        return
    assert message in refused(result, "template_error", 3)


def test_skip_if_on_an_undeclared_gate_is_a_warning(koto: Koto) -> None:
    source = (
        "---\nname: t\nversion: '1'\ninitial_state: a\nstates:\n"
        "  a:\n    skip_if: {gates.ci.exit_code: 0}\n    accepts:\n      ok: {type: boolean}\n"
        "    transitions: [{target: b}]\n  b: {terminal: true}\n---\n## a\nA.\n## b\nB.\n"
    )
    result = koto("init", "w", "--template", str(koto.write("t.md", source)))
    assert result.code == 0
    assert b"W-SKIP-GATE-ABSENT" in result.stderr and b"never holds" in result.stderr
    assert koto.ok("next", "w")["action"] == "evidence_required"  # and it never skips


HOPS = """---
name: hops
version: "1.0"
initial_state: first
states:
  first:
    skip_if:
      vars.HOPS_OFF:
        is_set: false
    transitions:
      - target: second
  second:
    skip_if:
      vars.HOPS_OFF:
        is_set: false
    transitions:
      - target: last
  last:
    terminal: true
---
## first
Skipped while HOPS_OFF is unset.
## second
Skipped too.
## last
Done.
"""


def test_skip_if_may_test_an_undeclared_variable_with_is_set_and_chains(koto: Koto) -> None:
    """Upstream's `skip-if-chain` shape: `vars.X: {is_set: false}` on a variable the template
    does not declare (never set), in two states in a row: it compiles, and one `next` goes
    through both. A value to equal still needs a declared variable."""
    template = str(koto.write("hops.md", HOPS))
    assert koto("template", "compile", template).code == 0
    koto.ok("init", "h", "--template", template)
    answer = koto.ok("next", "h")
    assert (answer["state"], answer["advanced"]) == ("last", True)
    equals = koto.write("equals.md", HOPS.replace("is_set: false", "is_set: x", 1))
    assert "HOPS_OFF" in refused(koto("template", "compile", str(equals)), "template_error", 3)


# -- reserved evidence kinds -------------------------------------------------------------------

KINDS = """---
name: kinds
version: "1"
initial_state: work
states:
  work:
    accepts:
      kind: {type: string, required: true}
      fields: {type: string}
    transitions:
      - target: done
  done: {terminal: true}
---
## work
Say what kind of work it was.
## done
Done.
"""


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "ChildDispatched"},
        {"kind": "ChildRedelegated"},
        {"kind": "RequesterWoken"},
        {"kind": "RequesterRespawn"},
        {"kind": "request_store.result"},
        {"kind": "request_store.anything.else"},
        {"kind": "feature", "fields": {"kind": "ChildDispatched"}},
    ],
)
def test_reserved_audit_event_kinds_are_refused_as_invalid_submission(
    koto: Koto, data: dict[str, object]
) -> None:
    koto.ok("init", "k", "--template", str(koto.write("kinds.md", KINDS)))
    before = koto.journal_path("k").read_bytes()
    message = refused(koto("next", "k", "--with-data", json.dumps(data)), "invalid_submission", 2)
    kind = data["fields"]["kind"] if "fields" in data else data["kind"]  # type: ignore[index]
    assert f"reserved audit-event kind: {kind}" in message  # upstream's words
    assert koto.journal_path("k").read_bytes() == before
    assert koto.ok("next", "k", "--with-data", '{"kind": "feature"}')["state"] == "done"


def test_a_reserved_kind_is_refused_even_by_a_state_that_accepts_nothing(koto: Koto) -> None:
    koto.ok("init", "pr", "--template", str(koto.write("review.md", REVIEW)), "--var", "PR=1")
    result = koto("next", "pr", "--with-data", '{"kind": "ChildDispatched"}')
    assert "reserved" in refused(result, "invalid_submission", 2)
    result = record(koto, "pr", "a", "b")
    assert result.code == 0
    payload = '{"choice": "a", "rationale": "b", "kind": "RequesterWoken"}'
    result = koto("decisions", "record", "pr", "--with-data", payload)
    assert "reserved" in refused(result, "invalid_submission", 2)


@pytest.mark.parametrize(
    ("payload", "field", "reason"),
    [
        ({"rationale": "b"}, "choice", "missing required field"),
        ({"choice": "a"}, "rationale", "missing required field"),
        ({"choice": "", "rationale": "b"}, "choice", "must be a non-empty string"),
        ({"choice": "a", "rationale": 3}, "rationale", "must be a non-empty string"),
    ],
)
def test_a_decision_without_its_required_fields_says_so_in_upstreams_words(
    koto: Koto, payload: dict[str, object], field: str, reason: str
) -> None:
    koto.ok("init", "pr", "--template", str(koto.write("review.md", REVIEW)), "--var", "PR=1")
    before = koto.journal_path("pr").read_bytes()
    result = koto("decisions", "record", "pr", "--with-data", json.dumps(payload))
    message = refused(result, "invalid_submission", 2)
    assert f"{field}: {reason}" in message
    assert koto.journal_path("pr").read_bytes() == before


# -- the state file's name ------------------------------------------------------------------


def test_the_state_file_is_upstreams_koto_name_state_jsonl(koto: Koto) -> None:
    koto.ok("init", "hello", "--template", str(koto.write("review.md", REVIEW)), "--var", "PR=1")
    assert state_file_exists(koto, "hello")
    assert not (koto.session_dir("hello") / "hello.jsonl").exists()
    journal = koto.journal("hello")
    assert journal[0]["type"] == "start" and journal[1]["to"] == "assess"
    assert [row["id"] for row in koto.ok("session", "list")] == ["hello"]
    koto.ok("session", "cleanup", "hello")
    assert not koto.session_dir("hello").exists()


def test_a_session_created_under_the_old_name_is_still_read_and_written(koto: Koto) -> None:
    template = str(koto.write("review.md", REVIEW))
    koto.ok("init", "old", "--template", template, "--var", "PR=1")
    legacy = koto.session_dir("old") / "old.jsonl"
    koto.journal_path("old").rename(legacy)  # as koto wrote it before upstream's name
    before = legacy.read_bytes()

    assert koto.ok("status", "old")["current_state"] == "assess"
    assert [row["id"] for row in koto.ok("session", "list")] == ["old"]
    koto.ok("next", "old", "--with-data", '{"verdict": "revise"}')
    assert record(koto, "old", "keep going", "one more pass").code == 0
    assert koto("context", "add", "old", "notes.md", input=b"n").code == 0
    assert koto.ok("decisions", "list", "old")["decisions"]["count"] == 1
    assert legacy.read_bytes().startswith(before) and len(legacy.read_bytes()) > len(before)
    assert not state_file_exists(koto, "old")  # it keeps its own name
    refused(koto("init", "old", "--template", template, "--var", "PR=1"), "already_exists", 1)
    koto.ok("next", "old", "--with-data", '{"verdict": "approve"}')
    assert koto.ok("next", "old", "--with-data", '{"merged": true}')["action"] == "done"
    assert not koto.session_dir("old").exists()  # removed at the end, as any session


# -- the legacy-gates warning ----------------------------------------------------------------


def test_the_legacy_gates_warning_says_legacy_behavior(koto: Koto) -> None:
    source = (
        "---\nname: l\nversion: '1'\ninitial_state: wait\nstates:\n"
        "  wait:\n    gates:\n      flag: {type: command, command: 'test -f flag'}\n"
        "    transitions: [{target: done}]\n  done: {terminal: true}\n---\n"
        "## wait\nWait.\n## done\nDone.\n"
    )
    template = str(koto.write("legacy.md", source))
    init = koto("init", "l", "--template", template)
    assert init.code == 0
    [warning] = init.stderr.decode().splitlines()
    assert warning.startswith("warning: ") and "legacy behavior" in warning
    compiled = koto("template", "compile", template, "--allow-legacy-gates")
    assert b"legacy behavior" in compiled.stderr
    assert koto("init", "q", "--template", template, "--allow-legacy-gates").stderr == b""
