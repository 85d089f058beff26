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
from openai import OpenAI

from kassette import LocalStorage
from kassette.core import read_journal
from kassette.testing import fake_model_server

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


def check_demo_store(tmp_path: Path) -> None:
    """The store `make lab` opens: the demo's runs kept, and a 20-branch fan-out whose
    branches answer differently; a second call keeps the store as it is."""
    output = run_example("demo_store.py", tmp_path, "demo-store")
    assert "1. crash" in output and "INC-4821 (completed)" in output  # the demo's story
    assert "forked at draft-reply into 20 branches" in output
    storage = LocalStorage(tmp_path / "demo-store")
    runs = set(storage.list_runs())
    branches = [f"support-1.draft-reply.{number}" for number in range(20)]
    demo = {"INC-4821", "INC-4821-rollback", "INC-4821-feature-flag"}
    assert runs == demo | {"support-1", *branches}
    answers = set()
    for run_id in branches:
        journal = read_journal(storage, run_id)
        status = journal.status()
        assert status.status == "completed"
        assert status.source == {"runId": "support-1", "fromOffset": 2}
        temperature = journal.entries[2]["params"]["temperature"]
        assert temperature == round(branches.index(run_id) * 0.05, 2)
        reply = journal.steps["draft-reply"]["result"]["choices"][0]["message"]["content"]
        assert len(reply.split(". ")) >= 4, reply  # sentences, as a model answers
        answers.add(reply)
    assert len(answers) > 10, "the temperatures should give different answers"
    again = run_example("demo_store.py", tmp_path, "demo-store")
    assert "already holds runs: kept as it is" in again
    assert set(storage.list_runs()) == runs
    # the README's five lines of kx, on that store
    shown = run_example("explore_demo_store.py", tmp_path)
    assert shown.startswith("RunTree: 24 runs, selected support-1.draft-reply.0\n"), shown
    assert "└── support-1.draft-reply.19 (completed, from offset 2, 3 steps)" in shown


def check_dispatcher(tmp_path: Path) -> None:
    rows = [line.split(" -> ") for line in run_example("dispatcher.py", tmp_path).splitlines()]
    decisions = {label.strip(): tuple(outcome.split()) for label, outcome in rows}
    assert decisions == {
        "start INC-1": ("ack", "suspended"),
        "resume INC-1 while another worker holds it": ("redeliver", "RunLockedError"),
        "resume INC-1 human-approval": ("ack", "success"),
        "resume INC-1 human-approval (duplicate)": ("ack", "TerminalRunError"),
        "start INC-2 with an empty ticket": ("ack", "failed"),
        "start INC-3, canceled while it runs": ("ack", "RunCancelledError"),
        "start INC-4 with workflow version v2": ("dead-letter", "VersionMismatchError"),
        "resume INC-5 before it suspends": ("redeliver", "EventNotPendingError"),
        "resume INC-6, a run that does not exist": ("dead-letter", "RunNotFoundError"),
    }
    assert list(tmp_path.iterdir()) == []


def check_agent_loop(tmp_path: Path) -> None:
    directory = tmp_path / "journals"
    output = run_example("agent_loop.py", tmp_path, "--dir", str(directory))
    assert f"(exit -{int(signal.SIGKILL)})" in output
    assert "journaled: think, search, think#2, search#2; status running" in output

    journal = read_journal(LocalStorage(directory), "ask-1")
    assert journal.status().status == "completed"
    assert journal.terminal is not None
    assert journal.terminal["result"] == {"answer": "About 1,395,326 people.", "turns": 4}
    steps = [(e["session"], e["stepId"]) for e in journal.entries if e["type"] == "step"]
    assert steps == [
        (1, "think"), (1, "search"), (1, "think#2"), (1, "search#2"),
        (2, "think#3"), (2, "calculate"), (2, "think#4"),
    ]  # fmt: skip
    # the calls log is the proof: nothing journaled by worker 1 was called again by worker 2
    calls = Counter((directory / ".agent-calls.log").read_text().splitlines())
    assert calls == Counter(
        {"model turn-1": 1, "model turn-2": 1, "model turn-3": 2, "model turn-4": 1,
         "tool search": 2, "tool calculate": 1}
    )  # fmt: skip
    assert "ran live: think#3, calculate, think#4" in output


def check_loan_underwriting(tmp_path: Path) -> None:
    lines = run_example("loan_underwriting.py", tmp_path).splitlines()
    assert lines[0] == (
        "start      suspended, waiting for checks/credit/credit-review, "
        "checks/appraisal/appraisal-review"
    )
    assert lines[1] == "credit ok  suspended, waiting for checks/appraisal/appraisal-review"
    assert lines[2] == (
        "appraised  success: {'approved': True, 'ltv': 0.877, 'reviewers': ['grace', 'linus']}"
    )
    # the fork replays both reviews and the analysis; only the decision runs again
    assert lines[3] == (
        "fork       loan-1-policy-2026 from offset 10: success: "
        "{'approved': False, 'ltv': 0.877, 'reviewers': ['grace', 'linus']}"
    )
    assert lines[4] == "calls      appraisal x1, credit-report x1, decide x2"
    assert list(tmp_path.iterdir()) == []


def check_deploy_assistant(tmp_path: Path) -> None:
    directory = tmp_path / "journals"
    lines = run_example("deploy_assistant.py", tmp_path, "--dir", str(directory)).splitlines()
    webhooks = [line for line in lines if line.startswith("webhook")]
    assert [line.split(" -> ")[1].split()[:2] for line in webhooks] == [
        ["200", "suspended"], ["200", "suspended"], ["404", "run"], ["200", "success"],
        ["200", "success"], ["409", "run"],
    ]  # fmt: skip
    assert "webhook deploy-9 clarify" in webhooks[2]
    assert "CI jobs dispatched: [('checkout', '7.0.3')]" in lines

    storage = LocalStorage(directory)
    assert sorted(storage.list_runs()) == ["deploy-1", "deploy-2"], "the 404 wrote nothing"
    assert not list(directory.glob("deploy-9*"))
    first, second = read_journal(storage, "deploy-1"), read_journal(storage, "deploy-2")
    # each webhook resumed the run it named, with its own value
    assert first.resumes["clarify"]["value"] == {"text": "7.0.3"}
    assert second.resumes["clarify"]["value"] == {"text": "2.4.1"}
    assert first.resumes["prod-approval"]["value"]["by"] == "sam"
    assert second.resumes["prod-approval"]["value"]["by"] == "kim"
    assert first.status().result == {
        "deployed": True, "job": "job-1", "state": "checkout 7.0.3 live",
    }  # fmt: skip
    assert second.status().result == {"deployed": False, "rejected by": "kim"}
    assert first.steps["sleep"]["kind"] == "sleep"
    assert list(first.steps) == ["understand", "ask", "ask-approval", "dispatch", "sleep", "verify"]
    assert "dispatch" not in second.steps
    assert first.max_session == 3  # start, clarify, approval: the duplicate wrote nothing


def check_coding_agent(tmp_path: Path) -> None:
    lines = run_example("coding_agent.py", tmp_path).splitlines()
    assert [line.split()[:3] for line in lines[:3]] == [
        ["task-1", "regex", "passed=False"],
        ["task-1-alt-1", "split-on-letters", "passed=False"],
        ["task-1-replan", "tokenizer", "passed=True"],
    ]
    # three implementations, but the first plan was asked for once (the replan is the second)
    assert lines[3].split(None, 1)[1] == "implement x3, plan x2, run-tests x3"
    assert lines[4:] == [
        "task-1 (completed)",
        "├── task-1-replan (completed, from offset 1)",
        "└── task-1-alt-1 (completed, from offset 2)",
    ]
    assert list(tmp_path.iterdir()) == []


def check_queue_worker(tmp_path: Path) -> None:
    lines = run_example("queue_worker.py", tmp_path).splitlines()
    assert lines[0].startswith(f"parent    worker-1 exited with -{int(signal.SIGKILL)}")
    handled = [re.match(r"worker-2  delivery (\d+)  (.+?) +-> (\S+) +(.*)", x) for x in lines]
    decisions = [(m.group(2), int(m.group(1)), m.group(3), m.group(4)) for m in handled if m]
    by_message: dict[str, list[tuple[int, str, str]]] = {}
    for label, delivery, decision, why in decisions:
        by_message.setdefault(label, []).append((delivery, decision, why))
    # the killed worker's message came back once, after its visibility timeout, and was acked
    assert by_message["start report-1"] == [(2, "ack", "suspended")]
    approvals = by_message["publish-approval report-1"]
    assert approvals[-1][1:] == ("ack", "success")
    assert all(d[1:] == ("redeliver", "EventNotPendingError") for d in approvals[:-1])
    assert [d for d, _, _ in approvals] == list(range(1, len(approvals) + 1))
    assert by_message["start report-2"] == [(1, "ack", "failed")]
    assert by_message["publish-approval report-9"] == [(1, "dead-letter", "RunNotFoundError")]
    [(_, decision, why)] = by_message["(malformed)"]
    assert decision == "dead-letter"
    assert why.startswith("malformed message body \"{'run_id': 'report-3'\": Expecting")

    assert "parent    report-1: completed" in lines[-7]
    assert lines[-6].startswith('parent    report-2: failed {"name": "ValueError"')
    assert "parent    report-9 was never created: True" in lines
    assert "parent    dead-letter queue: 2 message(s)" in lines
    assert lines[-1] == "parent    tool calls: publish x1, read x1, search x1, summarize x2"


def check_serverless_handler(tmp_path: Path) -> None:
    lines = run_example("serverless_handler.py", tmp_path).splitlines()
    first = re.fullmatch(
        r"invocation 1, pid (\d+): suspended, waiting for \['manager-approval'\]", lines[0]
    )
    second = re.fullmatch(r"invocation 2, pid (\d+): success", lines[1])
    assert first is not None and second is not None
    one, two = first.group(1), second.group(1)
    assert one != two
    assert lines[2] == "  result: 182.4 travel, filed by noor"
    # the second process replayed the first one's steps from S3 and ran only the last step
    assert lines[3] == f"  steps: extract in pid {one}, classify in pid {one}, file in pid {two}"
    assert lines[4].endswith("expenses/claim-77/journal.jsonl: 8 entries")
    assert lines[5] == "  sessions: [1, 2] (one per invocation)"
    assert list(tmp_path.iterdir()) == []


def check_openai_agent(tmp_path: Path) -> None:
    lines = run_example("openai_agent.py", tmp_path).splitlines()
    assert lines[:4] == [
        f"worker 1: SIGKILLed after the draft (exit -{int(signal.SIGKILL)})",
        "          the model answered 2 requests",
        "worker 2: success; journaled: chat.completions.create (session 1), "
        "chat.completions.create#2 (session 1)",
        "          the model answered 2 requests in all",  # the replay sent none
    ]
    # the first worker's answers, asked again here without kassette: the fake model answers
    # the same request the same way, so the second worker's result is the recorded one
    with fake_model_server() as server, OpenAI(api_key="x", base_url=server.openai_base_url) as sdk:

        def ask(text: str) -> str:
            messages = [{"role": "user", "content": text}]
            reply = sdk.chat.completions.create(model="gpt-4o-mini", messages=messages)
            return str(reply.choices[0].message.content)

        plan = ask("Plan a note on durable agents.")
        draft = ask(f"Write it: {plan}")
    assert len(plan.split()) > 20 and plan != draft
    first_paragraphs = [text.split("\n")[0] for text in (plan, draft)]
    assert lines[4:] == [f"plan:  {first_paragraphs[0]}", f"draft: {first_paragraphs[1]}"]
    assert list(tmp_path.iterdir()) == []


CHECKS: dict[str, Callable[[Path], None]] = {
    "quickstart.py": check_quickstart,
    "demo.py": check_demo,
    "demo_store.py": check_demo_store,
    "explore_demo_store.py": check_demo_store,
    "dispatcher.py": check_dispatcher,
    "agent_loop.py": check_agent_loop,
    "loan_underwriting.py": check_loan_underwriting,
    "deploy_assistant.py": check_deploy_assistant,
    "coding_agent.py": check_coding_agent,
    "queue_worker.py": check_queue_worker,
    "serverless_handler.py": check_serverless_handler,
    "openai_agent.py": check_openai_agent,
}


@pytest.mark.parametrize(
    "name", sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))
)
def test_example(name: str, tmp_path: Path) -> None:
    assert name in CHECKS, f"examples/{name} has no check in tests/test_examples.py"
    CHECKS[name](tmp_path)


def test_demo_without_a_directory_cleans_up(tmp_path: Path) -> None:
    check_demo_default_directory(tmp_path)
