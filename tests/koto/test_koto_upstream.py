"""Upstream koto's behaviour where agents depend on it, one scenario per behaviour.

Each test drives the real `koto` command in subprocesses, the way upstream's functional suite
does (init, next, evidence, rewind, a terminal state) and checks exit codes, JSON answers,
stderr and the journal. The names say which item of the koto-parity issue each one covers.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from conftest import Koto, Result

POINTER = (
    "[koto] Lost context? `koto status <name>` returns this phase's directive/details/expects.\n\n"
)

ANCHORED = """---
name: anchored
version: "1"
initial_state: work
states:
  work:
    accepts:
      result: {type: enum, values: [ok, retry], required: true}
    transitions:
      - {target: check, when: {result: ok}}
      - {target: work, when: {result: retry}}
  check:
    gates:
      here: {type: command, command: "pwd > gate-ran-in.txt; test -f ready.txt"}
    transitions:
      - {target: done, when: {gates.here.exit_code: 0}}
  done: {terminal: true}
---
## work
Do the work.
## check
koto checks for ready.txt.
## done
Done.
"""


def lines(koto: Koto, name: str) -> int:
    return len(koto.journal(name))


def refused(result: Result, code: str, exit_code: int) -> str:
    assert result.code == exit_code, (result.code, result.stdout, result.stderr)
    error = result.error
    assert error["code"] == code, error
    return str(error["message"])


def test_item1_gates_run_at_the_execution_anchor_and_other_trees_are_refused(
    koto: Koto, tmp_path: Path
) -> None:
    template = str(koto.write("anchored.md", ANCHORED))
    koto.ok("init", "a", "--template", template)
    anchor = os.path.realpath(koto.cwd)
    assert koto.ok("status", "a")["execution_dir"] == anchor

    below = koto.cwd / "src" / "deep"
    below.mkdir(parents=True)
    answer = koto.at(below, "next", "a", "--with-data", '{"result": "ok"}')
    assert answer.code == 0, answer.stderr
    assert (answer.json["state"], answer.json["action"]) == ("check", "gate_blocked")
    assert (koto.cwd / "gate-ran-in.txt").read_text().strip() == anchor  # not in src/deep
    assert not (below / "gate-ran-in.txt").exists()

    # a sibling whose name starts with the anchor's is another tree, not beneath it
    for elsewhere in (tmp_path / "project2", tmp_path / "other"):
        elsewhere.mkdir()
        before = lines(koto, "a")
        message = refused(koto.at(elsewhere, "next", "a"), "execution_anchor_mismatch", 2)
        assert anchor in message
        assert lines(koto, "a") == before  # nothing ran, nothing was journaled

    assert koto.ok("rewind", "a")["state"] == "work"
    koto.write("ready.txt", "")
    assert koto.ok("next", "a", "--with-data", '{"result": "ok"}')["action"] == "done"

    gone = tmp_path / "checkout"
    gone.mkdir()
    koto.ok("init", "b", "--template", template, "--execution-dir", str(gone))
    gone.rmdir()
    refused(koto.at(tmp_path, "next", "b"), "execution_anchor_unresolvable", 3)
    assert koto("init", "c", "--template", template, "--execution-dir", str(gone)).code == 2


def test_item1_a_session_without_an_anchor_adopts_the_first_ticks_directory(koto: Koto) -> None:
    koto.ok("init", "old", "--template", str(koto.write("anchored.md", ANCHORED)))
    journal = koto.journal_path("old")
    first, rest = journal.read_bytes().split(b"\n", 1)
    start = json.loads(first)
    del start["metadata"]["execution_dir"]  # as sessions started before anchors were
    journal.write_bytes(json.dumps(start, separators=(",", ":")).encode() + b"\n" + rest)

    answer = koto.ok("next", "old")
    assert answer["directive"].startswith(
        f"[koto] Session 'old' had no recorded directory; it is now bound to "
        f"{os.path.realpath(koto.cwd)}."
    )
    [adopted] = koto.entries("old", "execution_anchor_adopted")
    assert adopted["anchor"] == os.path.realpath(koto.cwd)
    assert koto.ok("next", "old")["directive"] == "Do the work."  # the notice comes once
    refused(koto.at(koto.root, "next", "old"), "execution_anchor_mismatch", 2)


NESTED = """---
name: nested
version: "1"
initial_state: build
states:
  build:
    gates:
      inner:
        type: command
        command: "python -m kassette.koto._cli next {{SESSION_NAME}} >in.json; echo $? >in.code"
    transitions:
      - {target: done, when: {gates.inner.exit_code: 0}}
  done: {terminal: true}
---
## build
A gate that (wrongly) calls koto next on its own session.
## done
Done.
"""


def test_item2_koto_next_inside_a_gate_is_refused_as_nested_invocation(koto: Koto) -> None:
    koto.ok("init", "n", "--template", str(koto.write("nested.md", NESTED)))
    outer = koto("next", "n", "--no-cleanup", KOTO_LOCK_TIMEOUT="30")
    assert outer.code == 0, outer.stderr
    assert outer.json["action"] == "done"
    # refused at once: waiting for the lock the outer tick holds would have taken 30 s and
    # ended in concurrent_access (exit 1)
    assert (koto.cwd / "in.code").read_text().strip() == "2"
    inner = json.loads((koto.cwd / "in.json").read_text())
    assert inner["error"]["code"] == "nested_invocation"
    assert "'n'" in inner["error"]["message"]
    assert [e["to"] for e in koto.entries("n", "transitioned")] == ["build", "done"]

    koto.ok("init", "m", "--template", str(koto.write("anchored.md", ANCHORED)))
    refused(koto("next", "m", KOTO_TICK_SESSION="n"), "nested_invocation", 2)
    assert koto("next", "m", KOTO_TICK_SESSION=" ").code == 0  # a blank marker is no marker


FAILING = """---
name: failing
version: "1"
initial_state: try
states:
  try:
    accepts:
      outcome: {type: enum, values: [shipped, broken], required: true}
    transitions:
      - {target: shipped, when: {outcome: shipped}}
      - {target: gave_up, when: {outcome: broken}}
  shipped: {terminal: true}
  gave_up: {terminal: true, failure: true}
---
## try
Try it.
## shipped
Shipped.
## gave_up
Gave up.
"""


def test_item3_a_failure_terminal_is_reported_in_the_done_answer(koto: Koto) -> None:
    template = str(koto.write("failing.md", FAILING))
    compiled = json.loads(koto("template", "compile", template).stdout)
    assert compiled["states"]["gave_up"] == {
        "directive": "Gave up.",
        "failure": True,
        "terminal": True,
    }
    assert "failure" not in compiled["states"]["shipped"]

    koto.ok("init", "f", "--template", template)
    koto.ok("next", "f", "--with-data", '{"outcome": "shipped"}', "--no-cleanup")
    assert koto.ok("rewind", "f")["state"] == "try"
    done = koto.ok("next", "f", "--with-data", '{"outcome": "broken"}', "--no-cleanup")
    assert done == {
        "action": "done",
        "advanced": True,
        "error": None,
        "expects": None,
        "failure": True,
        "state": "gave_up",
        "unassigned_children": [],
    }
    status = koto.ok("status", "f")
    assert (status["is_terminal"], status["failure"]) == (True, True)

    koto.write(
        "bad.md", FAILING.replace("  shipped: {terminal: true}", "  shipped: {failure: true}")
    )
    bad = koto("template", "compile", "bad.md")
    assert bad.code == 3 and "'failure' marks a terminal state" in bad.json["error"]


LEGACY = """---
name: legacy
version: "1"
initial_state: wait
states:
  wait:
    gates:
      flag: {type: command, command: "test -f flag.txt"}
    transitions:
      - target: done
  done: {terminal: true}
---
## wait
Waits for flag.txt.
## done
Done.
"""


def test_item4_legacy_gates_are_refused_by_compile_and_a_warning_at_init(koto: Koto) -> None:
    template = str(koto.write("legacy.md", LEGACY))
    strict = koto("template", "compile", template)
    assert strict.code == 3
    assert strict.json["code"] == "template_error"
    [problem] = strict.json["errors"]
    assert "legacy.md:7: D5: state 'wait' has gates (flag)" in problem
    assert "gates.flag.exit_code" in problem and "--allow-legacy-gates" in problem

    allowed = koto("template", "compile", template, "--allow-legacy-gates")
    assert allowed.code == 0
    assert json.loads(allowed.stdout)["states"]["wait"]["gates"]["flag"]["type"] == "command"
    assert b"warning: " in allowed.stderr and b"D5: state 'wait'" in allowed.stderr

    init = koto("init", "l", "--template", template)
    assert init.code == 0 and init.json == {"name": "l", "state": "wait"}
    assert b"warning: " in init.stderr and b"legacy gates" in init.stderr
    quiet = koto("init", "q", "--template", template, "--allow-legacy-gates")
    assert quiet.code == 0 and quiet.stderr == b""

    assert koto.ok("next", "l")["action"] == "gate_blocked"  # a legacy gate only blocks
    koto.write("flag.txt", "")
    assert koto.ok("next", "l")["action"] == "done"


W3 = """---
name: w3
version: "1"
initial_state: start
states:
  start:
    accepts:
      ok: {type: boolean, required: true}
    transitions:
      - {target: finished, when: {ok: true}}
      - {target: build_failed, when: {ok: false}}
  finished: {terminal: true}
  build_failed: {terminal: true}
---
## start
Start.
## finished
Finished.
## build_failed
The build failed.
"""


def test_item5_w3_warns_of_a_failure_named_terminal_without_failure(koto: Koto) -> None:
    koto.write("w3.md", W3)
    template = "w3.md"
    compiled = koto("template", "compile", template)
    assert compiled.code == 0
    assert compiled.stderr.decode().splitlines() == [
        "warning: w3.md:13: W3: terminal state 'build_failed' is named like a failure but "
        "does not set 'failure: true' (set it, or rename the state if it is a success)"
    ]
    assert b"W3" in koto("init", "w", "--template", template).stderr
    koto.write(
        "fixed.md",
        W3.replace(
            "build_failed: {terminal: true}", "build_failed: {terminal: true, failure: true}"
        ),
    )
    assert koto("template", "compile", "fixed.md").stderr == b""


TIMEOUT = """---
name: slow
version: "1"
initial_state: slow
states:
  slow:
    gates:
      hang: {type: command, command: "sleep 30", timeout: 1}
    transitions:
      - {target: done, when: {gates.hang.exit_code: 0}}
  done: {terminal: true}
---
## slow
Slow.
## done
Done.
"""


def test_item5_a_timed_out_gate_reports_its_failure_kind(koto: Koto) -> None:
    koto.ok("init", "s", "--template", str(koto.write("slow.md", TIMEOUT)))
    blocked = koto.ok("next", "s")
    [condition] = blocked["blocking_conditions"]
    assert condition["status"] == "timed_out"
    assert condition["output"] == {
        "exit_code": -1,
        "error": "timed_out",
        "failure_kind": "timed_out",
    }
    [evaluated] = koto.entries("s", "gate_evaluated")
    assert evaluated["output"]["failure_kind"] == "timed_out"


def test_item5_every_next_answer_has_unassigned_children(koto: Koto) -> None:
    koto.ok("init", "u", "--template", str(koto.write("anchored.md", ANCHORED)))
    answers = [
        koto.ok("next", "u"),  # evidence_required
        koto.ok("next", "u", "--with-data", '{"result": "ok"}'),  # gate_blocked
        koto.ok("next", "u", "--to", "done"),  # the --to path, ending at a terminal
    ]
    assert [a["action"] for a in answers] == ["evidence_required", "gate_blocked", "done"]
    assert all(a["unassigned_children"] == [] for a in answers)


def test_item5_a_phase_with_details_always_carries_the_lost_context_pointer(koto: Koto) -> None:
    koto.ok("init", "d", "--template", koto.template("lifecycle"), "--var", "TASK=x")
    first = koto.ok("next", "d")
    again = koto.ok("next", "d")
    assert "details" in first and "details" not in again  # details go out once per arrival
    for answer in (first, again):  # ... but the pointer to them is on every answer
        assert answer["directive"] == POINTER + "Plan how to build x (owner: nobody)."
    build = koto.ok("next", "d", "--with-data", '{"approach": "a"}')
    assert build["directive"] == "Build x in session d."  # no details, no pointer
    assert koto.ok("rewind", "d")["state"] == "plan"
    assert koto.ok("next", "d")["directive"].startswith(POINTER)
    assert koto.ok("status", "d")["directive"] == "Plan how to build x (owner: nobody)."


def _import_cycles(package: Path) -> list[set[str]]:
    """Modules of `package` that import each other, directly or not (lazy imports count)."""
    graph: dict[str, set[str]] = {}
    prefix = "kassette.koto."
    for path in package.glob("*.py"):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "kassette.koto":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
                imported.add(str(node.module)[len(prefix) :].split(".")[0])
            elif isinstance(node, ast.Import):
                imported |= {
                    a.name[len(prefix) :].split(".")[0]
                    for a in node.names
                    if a.name.startswith(prefix)
                }
        graph[path.stem] = imported - {path.stem}

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph.get(start, ()))
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        return seen

    return [{m, n} for m in graph for n in graph[m] if m in reach(n)]


def test_item6_koto_errors_are_kassette_errors_and_imports_flow_one_way(koto: Koto) -> None:
    from kassette.errors import KassetteError
    from kassette.koto._errors import KotoError
    from kassette.koto._template import TemplateError

    assert issubclass(KotoError, KassetteError) and issubclass(TemplateError, KotoError)
    package = Path(__file__).resolve().parents[2] / "kassette" / "koto"
    assert _import_cycles(package) == []
    store = (package / "_store.py").read_text() + (package / "_s3store.py").read_text()
    assert "botocore.exceptions" not in store  # S3Storage translates botocore's errors, once

    bad = koto.write("bad.md", "---\nname: x\n---\n")
    answer = koto("init", "x", "--template", str(bad))
    assert (answer.code, answer.json["code"], answer.json["command"]) == (
        3,
        "template_error",
        "init",
    )


def test_item6_an_unreachable_s3_store_is_a_persistence_error(koto: Koto) -> None:
    pytest.importorskip("boto3")
    koto.home.mkdir(parents=True)
    (koto.home / "config.toml").write_text(
        '[session]\nbackend = "s3"\n[session.s3]\nbucket = "koto-nowhere"\n'
        'endpoint = "http://127.0.0.1:9"\nregion = "us-east-1"\n'
    )
    answer = koto(
        "status",
        "x",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_MAX_ATTEMPTS="1",
        AWS_CONFIG_FILE="/nonexistent/koto-test-aws-config",
    )
    assert answer.code == 3, (answer.stdout, answer.stderr)
    assert answer.json["code"] == "persistence_error"
    assert "s3://koto-nowhere/x/journal.jsonl" in answer.json["error"]
    assert b"Traceback" not in answer.stderr


def test_item7_a_terminal_session_can_be_rewound_so_it_writes_no_kassette_terminal_entry(
    koto: Koto,
) -> None:
    koto.ok("init", "t", "--template", str(koto.write("failing.md", FAILING)))
    done = koto.ok("next", "t", "--with-data", '{"outcome": "broken"}', "--no-cleanup")
    assert (done["state"], done["failure"]) == ("gave_up", True)
    types = {entry["type"] for entry in koto.journal("t")}
    assert not types & {"complete", "error", "cancel"}  # upstream lets a rewind leave it
    assert koto.ok("rewind", "t")["state"] == "try"  # ... and so does koto here
    assert koto.ok("next", "t")["action"] == "evidence_required"
    finished = koto.ok("next", "t", "--with-data", '{"outcome": "shipped"}')
    assert (finished["state"], "failure" in finished) == ("shipped", False)
    assert not koto.session_dir("t").exists()  # without --no-cleanup the session is removed
