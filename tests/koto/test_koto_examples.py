"""The example templates in examples/koto/ compile and run to the end."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import Koto

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "koto"


def copy(koto: Koto, name: str) -> str:
    target = koto.cwd / name
    shutil.copyfile(EXAMPLES / name, target)
    return str(target)


def test_code_review(koto: Koto) -> None:
    template = copy(koto, "code-review.md")
    koto.ok("init", "pr-12", "--template", template, "--var", "PR_URL=https://example.com/pr/12")
    assess = koto.ok("next", "pr-12")
    assert "https://example.com/pr/12" in assess["directive"]
    for target in ("feedback", "verify", "feedback", "verify"):
        answer = koto.ok("next", "pr-12", "--with-data", f'{{"transition": "{target}"}}')
        assert answer["state"] == target
    assert koto.ok("next", "pr-12", "--with-data", '{"transition": "done"}')["action"] == "done"


def test_refactor_waits_for_the_plan_and_the_tests(koto: Koto) -> None:
    template = copy(koto, "refactor.md")
    koto.write("checks/test_parser.py", "def test_parser():\n    assert 1 + 1 == 3\n")
    koto.ok(
        "init", "rf", "--template", template, "--var", "TARGET=parser", "--var", "TEST_PATH=checks"
    )
    analyze = koto.ok("next", "rf")
    assert "details" in analyze and analyze["state"] == "analyze"
    plan = koto.ok("next", "rf", "--with-data", '{"impact": "large", "summary": "split it"}')
    assert (plan["state"], plan["action"]) == ("plan", "gate_blocked")
    koto.write("plan.md", "1. split\n2. test\n")
    assert koto("context", "add", "rf", "plan.md", "--from-file", "plan.md").code == 0
    implement = koto.ok("next", "rf")
    assert implement["state"] == "implement"
    verify = koto.ok("next", "rf", "--with-data", '{"status": "done"}')
    assert (verify["state"], verify["action"]) == ("verify", "gate_blocked")
    [failing] = verify["blocking_conditions"]
    assert failing["name"] == "tests" and failing["output"]["exit_code"] == 1
    koto.write("checks/test_parser.py", "def test_parser():\n    assert 1 + 1 == 2\n")
    document = koto.ok("next", "rf")
    assert document["state"] == "document"
    done = koto.ok("next", "rf", "--with-data", '{"docs_updated": true}')
    assert done["action"] == "done"
