"""The koto loop end to end, as an agent drives it: init, next, evidence, rewind, cancel."""

from __future__ import annotations

import importlib
import json
import tomllib
from pathlib import Path

from conftest import Koto

TASK = "TASK=the parser"


def test_lifecycle_to_done(koto: Koto) -> None:
    template = koto.template("lifecycle")
    assert koto.ok("init", "job", "--template", template, "--var", TASK) == {
        "name": "job",
        "state": "plan",
    }
    first = koto.ok("next", "job")
    assert first["action"] == "evidence_required"
    assert first["state"] == "plan"
    assert first["advanced"] is False
    assert first["directive"] == (  # a phase with details says where to find them again
        "[koto] Lost context? `koto status <name>` returns this phase's directive/details/expects."
        "\n\nPlan how to build the parser (owner: nobody)."
    )
    assert "one sentence" in first["details"]  # details come on the first arrival ...
    assert first["expects"] == {
        "event_type": "evidence_submitted",
        "fields": {"approach": {"type": "string", "required": True}},
    }
    assert first["blocking_conditions"] == [] and first["error"] is None
    again = koto.ok("next", "job")
    assert "details" not in again  # ... and not on later calls
    assert koto.ok("next", "job", "--full")["details"] == first["details"]

    build = koto.ok("next", "job", "--with-data", '{"approach": "recursive descent"}')
    assert (build["action"], build["state"], build["advanced"]) == (
        "evidence_required",
        "build",
        True,
    )
    assert build["directive"] == "Build the parser in session job."
    assert build["expects"]["options"] == [
        {"target": "review", "when": {"outcome": "ok"}},
        {"target": "plan", "when": {"outcome": "broken"}},
    ]
    assert build["expects"]["fields"]["outcome"] == {
        "type": "enum",
        "required": True,
        "values": ["ok", "broken"],
    }
    review = koto.ok("next", "job", "--with-data", '{"outcome": "ok", "attempts": 2}')
    assert review["state"] == "review"
    done = koto.ok("next", "job", "--with-data", '{"verdict": "approve"}')
    assert done == {
        "action": "done",
        "advanced": True,
        "error": None,
        "expects": None,
        "state": "done",
        "unassigned_children": [],
    }
    # a finished session is cleaned up: it is gone
    assert not koto.session_dir("job").exists()
    gone = koto("next", "job")
    assert gone.code == 2
    assert gone.error["code"] == "workflow_not_initialized"


def test_the_seed_articles_simple_form(koto: Koto) -> None:
    """`##` headings are states, `**Transitions**` lines their edges, no line means terminal."""
    koto.write(
        "review.md",
        '---\nname: review\nversion: "1.0"\ndescription: Code review workflow\nvariables:\n'
        '  PR_URL: ""\n---\n\n## assess\n\nReview the PR at {{PR_URL}}.\n\n'
        "**Transitions**: [feedback]\n\n## feedback\n\nLeave comments.\n\n"
        "**Transitions**: [done]\n\n## done\n\nReview complete.\n",
    )
    koto.ok("init", "r", "--template", "review.md", "--var", "PR_URL=https://example.com/pr/7")
    assess = koto.ok("next", "r")
    assert assess["state"] == "assess"
    assert assess["directive"] == "Review the PR at https://example.com/pr/7."
    assert assess["expects"]["fields"]["transition"]["values"] == ["feedback"]
    assert koto.ok("next", "r", "--with-data", '{"transition": "feedback"}')["state"] == "feedback"
    assert koto.ok("next", "r", "--to", "done", "--no-cleanup")["action"] == "done"


def test_invalid_evidence_lists_every_problem(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    koto.ok("next", "job", "--with-data", '{"approach": "x"}')
    bad = {"outcome": "maybe", "notes": 3, "attempts": "two", "tested": "yes", "extra": 1}
    result = koto("next", "job", "--with-data", json.dumps(bad))
    assert result.code == 2
    error = result.error
    assert error["code"] == "invalid_submission"
    reasons = {item["field"]: item["reason"] for item in error["details"]}
    assert set(reasons) == {"outcome", "notes", "attempts", "tested", "extra"}
    assert "ok, broken" in reasons["outcome"]
    assert reasons["notes"] == "must be a string"
    assert reasons["attempts"] == "must be a number"
    assert reasons["tested"] == "must be true or false"
    assert reasons["extra"].startswith("unknown field")
    missing = koto("next", "job", "--with-data", '{"notes": "forgot the outcome", "gates": {}}')
    assert missing.code == 2
    details = {item["field"]: item["reason"] for item in missing.error["details"]}
    assert details == {
        "gates": "'gates' is reserved for gate output",
        "outcome": "required field is missing",
    }
    for payload in ("not json", "[1, 2]"):
        result = koto("next", "job", "--with-data", payload)
        assert (result.code, result.error["code"]) == (2, "invalid_submission")
    # nothing invalid reached the journal, and the state did not move
    assert [e["state"] for e in koto.entries("job", "evidence_submitted")] == ["plan"]
    assert koto.ok("status", "job")["current_state"] == "build"


def test_evidence_from_a_file(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    koto.write("evidence.json", '{"approach": "from a file"}')
    assert koto.ok("next", "job", "--with-data", "@evidence.json")["state"] == "build"
    assert koto.entries("job", "evidence_submitted")[0]["fields"] == {"approach": "from a file"}


def test_enum_routing(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    koto.ok("next", "job", "--with-data", '{"approach": "x"}')
    back = koto.ok("next", "job", "--with-data", '{"outcome": "broken"}')
    assert back["state"] == "plan"
    assert "details" in back  # arriving again at plan delivers its details again
    koto.ok("next", "job", "--with-data", '{"approach": "y"}')
    koto.ok("next", "job", "--with-data", '{"outcome": "ok"}')
    rejected = koto.ok("next", "job", "--with-data", '{"verdict": "reject"}', "--no-cleanup")
    assert (rejected["action"], rejected["state"]) == ("done", "rejected")
    transitions = [(e["from"], e["to"]) for e in koto.entries("job", "transitioned")]
    assert transitions == [
        (None, "plan"),
        ("plan", "build"),
        ("build", "plan"),
        ("plan", "build"),
        ("build", "review"),
        ("review", "rejected"),
    ]


def test_rewind_twice_walks_back_and_keeps_the_old_evidence(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    koto.ok("next", "job", "--with-data", '{"approach": "first"}')
    koto.ok("next", "job", "--with-data", '{"outcome": "ok"}')
    assert koto.ok("rewind", "job") == {"name": "job", "state": "build"}
    assert koto.ok("rewind", "job") == {"name": "job", "state": "plan"}
    at_start = koto("rewind", "job")
    assert at_start.code == 1
    assert "initial state" in at_start.error
    # the evidence given before the rewinds is still in the journal, but no longer counts:
    # plan asks for evidence again instead of moving on
    assert [e["fields"] for e in koto.entries("job", "evidence_submitted")] == [
        {"approach": "first"},
        {"outcome": "ok"},
    ]
    again = koto.ok("next", "job")
    assert (again["action"], again["state"]) == ("evidence_required", "plan")
    assert [(e["from"], e["to"]) for e in koto.entries("job", "rewound")] == [
        ("review", "build"),
        ("build", "plan"),
    ]
    assert koto.ok("next", "job", "--with-data", '{"approach": "second"}')["state"] == "build"


def test_directed_transition(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    koto.ok("next", "job", "--with-data", '{"approach": "x"}')
    jumped = koto.ok("next", "job", "--to", "review")
    assert (jumped["state"], jumped["advanced"]) == ("review", True)
    assert koto.entries("job", "directed_transition")[0]["to"] == "review"
    undeclared = koto("next", "job", "--to", "plan")
    assert (undeclared.code, undeclared.error["code"]) == (2, "precondition_failed")
    both = koto("next", "job", "--to", "done", "--with-data", "{}")
    assert (both.code, both.error["code"]) == (2, "precondition_failed")


def test_cancel(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    assert koto.ok("cancel", "job") == {
        "name": "job",
        "state": "plan",
        "cancelled": True,
        "cleaned_up": False,
    }
    for args in (["next", "job"], ["cancel", "job"], ["rewind", "job"]):
        result = koto(*args)
        assert result.code == 2, args
    assert koto("next", "job").error["code"] == "terminal_state"
    assert koto.entries("job", "cancel")[0]["reason"] == "cancelled by user"
    assert koto.ok("status", "job")["cancelled"] is True
    koto.ok("init", "other", "--template", koto.template("lifecycle"), "--var", TASK)
    assert koto.ok("cancel", "other", "--cleanup")["cleaned_up"] is True
    assert not koto.session_dir("other").exists()


def test_status_is_read_only(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    before = koto.journal("job")
    status = koto.ok("status", "job")
    assert status["current_state"] == "plan"
    assert status["is_terminal"] is False
    assert status["directive"].startswith("Plan how to build the parser")
    assert status["expects"]["fields"] == {"approach": {"type": "string", "required": True}}
    assert len(status["template_hash"]) == 64
    assert koto.journal("job") == before


def test_auto_cleanup_and_no_cleanup(koto: Koto) -> None:
    template = koto.template("lifecycle")
    for name, flags in (("cleaned", []), ("kept", ["--no-cleanup"])):
        koto.ok("init", name, "--template", template, "--var", TASK)
        koto.ok("next", name, "--with-data", '{"approach": "x"}')
        koto.ok("next", name, "--with-data", '{"outcome": "ok"}')
        assert koto.ok("next", name, "--with-data", '{"verdict": "approve"}', *flags)["state"] == (
            "done"
        )
    assert not koto.session_dir("cleaned").exists()
    assert koto.session_dir("kept").exists()
    status = koto.ok("status", "kept")
    assert (status["current_state"], status["is_terminal"]) == ("done", True)
    assert koto.ok("next", "kept", "--no-cleanup")["action"] == "done"
    terminal = koto("next", "kept", "--with-data", '{"verdict": "approve"}')
    assert (terminal.code, terminal.error["code"]) == (2, "terminal_state")
    # a kept session can still be rewound out of its terminal state
    assert koto.ok("rewind", "kept")["state"] == "review"
    assert [row["id"] for row in koto.ok("session", "list")] == ["kept"]
    assert koto.ok("session", "cleanup", "kept") == {"name": "kept", "cleaned_up": True}
    assert koto.ok("session", "cleanup", "kept") == {"name": "kept", "cleaned_up": True}
    assert koto.ok("session", "list") == []


def test_init_collision(koto: Koto) -> None:
    template = koto.template("lifecycle")
    koto.ok("init", "job", "--template", template, "--var", TASK)
    again = koto("init", "job", "--template", template, "--var", TASK)
    assert again.code == 1
    assert "already exists" in again.error
    assert again.json["command"] == "init"


def test_session_names_are_validated(koto: Koto) -> None:
    template = koto.template("lifecycle")
    for name in ("../escape", ".hidden", "", "a/b", "x" * 201, "tilde~1", "_under"):
        result = koto("init", name, "--template", template, "--var", TASK)
        assert result.code == 2, name
        assert "invalid characters" in result.error, name
        assert result.json["allowed_pattern"] == "^[a-zA-Z0-9][a-zA-Z0-9._-]*$"
    assert koto("init", "-looks-like-a-flag", "--template", template).code == 2
    assert koto("next", "../escape").code == 2
    assert koto("session", "dir", "../x").code == 2
    assert koto("init", "ok.name_1-2", "--template", template, "--var", TASK).code == 0


def test_variables(koto: Koto) -> None:
    template = koto.template("vars")
    missing = koto("init", "v", "--template", template)
    assert missing.code == 2
    assert "missing required variable" in missing.error
    unknown = koto("init", "v", "--template", template, "--var", "TARGET_FILE=a", "--var", "NOPE=1")
    assert unknown.code == 2 and "unknown variable 'NOPE'" in unknown.error
    for value in ("a;rm -rf x", "$(whoami)", "a`b`", "it's", 'q"q', "a|b", "a\nb", "a&b", "a>b"):
        refused = koto("init", "v", "--template", template, "--var", f"TARGET_FILE={value}")
        assert refused.code == 2, value
        assert "shell metacharacters" in refused.error, value
    twice = koto(
        "init", "v", "--template", template, "--var", "TARGET_FILE=a", "--var", "TARGET_FILE=b"
    )
    assert twice.code == 2
    assert not koto.session_dir("v").exists()

    koto.ok("init", "v", "--template", template, "--var", "TARGET_FILE=out dir/made.txt")
    first = koto.ok("next", "v")
    assert first["action"] == "gate_blocked"
    session_dir = koto.session_dir("v")
    assert first["directive"] == (
        f"Create out dir/made.txt in fast mode; notes go in {session_dir} for v."
    )
    koto.write("out dir/made.txt", "here")  # the value is quoted for the shell: spaces are fine
    assert koto.ok("next", "v")["action"] == "done"


def test_a_changed_template_file_does_not_affect_a_running_session(koto: Koto) -> None:
    template = koto.template("lifecycle")
    koto.ok("init", "job", "--template", template, "--var", TASK)
    with open(template, "a") as file:
        file.write("\nextra text that changes the source\n")
    assert koto.ok("next", "job")["state"] == "plan"


def test_a_tampered_stored_template_fails_with_exit_3(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    [stored] = koto.session_dir("job").glob("template-*.json")
    stored.write_text(stored.read_text().replace("Plan how to build", "Skip"))
    result = koto("next", "job")
    assert result.code == 3
    assert result.error["code"] == "template_error"
    assert "hash mismatch" in result.error["message"]
    status = koto.ok("status", "job")  # status reports the mismatch instead of failing
    assert status["template_hash_mismatch"]["recorded"] == status["template_hash"]
    assert "directive" not in status
    assert koto("rewind", "job").code == 3
    stored.unlink()
    assert koto("next", "job").code == 3


def test_usage_errors_are_json(koto: Koto) -> None:
    result = koto("next")
    assert result.code == 2
    assert result.error["code"] == "usage"
    result = koto("frobnicate")
    assert result.code == 2 and result.json["code"] == "usage"
    assert koto("--version").stdout.startswith(b"koto")
    help_text = koto("--help").stdout.decode()
    for verb in ("init", "next", "rewind", "cancel", "status", "context", "template", "session"):
        assert f"    {verb} " in help_text
    assert "--with-data" in koto("next", "--help").stdout.decode()


def test_koto_home_defaults_to_dot_koto_in_home(koto: Koto) -> None:
    template = koto.template("lifecycle")
    koto.ok("init", "job", "--template", template, "--var", TASK, KOTO_HOME="")
    default = koto.root / "home" / ".koto" / "sessions" / "job"
    assert (default / "koto-job.state.jsonl").exists()
    assert not koto.session_dir("job").exists()
    assert koto("session", "dir", "job", KOTO_HOME="").stdout.decode() == f"{default}\n"


def test_a_corrupt_journal_is_exit_3(koto: Koto) -> None:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    koto.ok("next", "job", "--with-data", '{"approach": "x"}')
    path = koto.journal_path("job")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b"{not json\n", *lines[3:]]))
    result = koto("next", "job")
    assert result.code == 3
    assert result.error["code"] == "persistence_error"
    assert "corrupt" in result.error["message"]
    listed = koto.ok("session", "list")
    assert listed[0]["id"] == "job" and "corrupt" in listed[0]["error"]


def test_the_console_script_is_declared() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    module, _, function = pyproject["project"]["scripts"]["koto"].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
