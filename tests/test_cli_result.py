"""`kassette fork --result JSON`: the fork point recorded with an edited result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage, kassette
from kassette._cli import main
from kassette.core import read_journal


def _source(directory: Path) -> Any:
    @kassette(storage=LocalStorage(directory))
    def agent(ctx: Any, _: Any) -> str:
        first = ctx.step("first", lambda: "computed")
        return f"{first} + {ctx.step('second', lambda: 2)}"

    agent.start(None, run_id="source")
    return agent


def test_fork_with_a_result_writes_the_edited_step(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    agent = _source(tmp_path)
    argv = ["--storage", f"file:{tmp_path}", "fork", "source", "--from-step", "first"]
    assert main([*argv, "--new-run-id", "b", "--result", '{"given": [1, 2]}']) == 0
    assert json.loads(capsysbinary.readouterr().out) == {"runId": "b"}
    entry = read_journal(agent.storage, "b").entries[2]
    assert (entry["result"], entry["edited"]) == ({"given": [1, 2]}, True)
    assert agent.start(run_id="b").result == "{'given': [1, 2]} + 2"
    assert main([*argv, "--new-run-id", "n", "--result", "null"]) == 0
    assert read_journal(agent.storage, "n").entries[2]["result"] is None


@pytest.mark.parametrize(
    "text",
    [
        "{nope",
        "",
        "[1,",
        "NaN",
        "-Infinity",
        "1e999",  # a float that overflows: as NaN, not a NotSerializableError (exit 1)
        '{"x": -1e999}',
        "[" * 3000 + "]" * 3000,  # was a RecursionError traceback and exit 1
        "[" * 101 + "]" * 101,  # deeper than kassette journals (MAX_DEPTH)
        "1" * 5000,  # more digits than int() reads
        '"\\ud800"',  # JSON, but a lone surrogate: was NotSerializableError and exit 1
        '{"note": ["ok", "\\udfff"]}',
        '{"\\udbff": 1}',
        '"\ud800"',  # the character itself, as a caller of main() may pass it
    ],
)
def test_fork_with_bad_json_exits_2_and_writes_nothing(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], text: str
) -> None:
    _source(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["--storage", f"file:{tmp_path}", "fork", "source", "--from-offset", "1"]
    assert main([*argv, "--new-run-id", "b", "--result", text]) == 2
    out, err = capsysbinary.readouterr()
    assert out == b"" and err.count(b"\n") == 1  # one JSON line, no traceback
    assert json.loads(err)["error"]["type"] == "UsageError"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_fork_with_a_result_as_deep_as_kassette_allows_is_recorded(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The depth refusal is the journal's limit (`MAX_DEPTH`), not less."""
    agent = _source(tmp_path)
    deep = "[" * 99 + "]" * 99  # 99 levels inside the entry: within MAX_DEPTH
    argv = ["--storage", f"file:{tmp_path}", "fork", "source", "--from-step", "first"]
    assert main([*argv, "--new-run-id", "deep", "--result", deep]) == 0
    assert json.loads(capsysbinary.readouterr().out) == {"runId": "deep"}
    assert read_journal(agent.storage, "deep").entries[2]["result"] == json.loads(deep)
