"""The edit of a fork and a run's params, input and result as explore's columns, and the
lineage marks of an edited fork (in explore's text and `kassette tree`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kassette import LocalStorage, MemoryStorage, Storage, kassette
from kassette import explore as kx
from kassette._cli import main


def _runs(storage: Storage) -> Any:
    @kassette(storage=storage)
    def agent(ctx: Any, topic: str) -> dict[str, Any]:
        draft = ctx.step("draft", lambda: f"draft on {topic}")
        return {"final": ctx.step("final", lambda: f"{draft}!"), "t": ctx.params.get("t")}

    agent.start("tides", run_id="source", params={"t": 0.5})
    agent.fork("source", step="draft", new_run_id="edited", result="mine")
    agent.fork("source", step="final", new_run_id="plain", params={"t": 1})
    agent.fork("edited", step="final", new_run_id="of-edited")  # copies the edited entry
    return agent


@pytest.mark.parametrize("canonical", [True, False], ids=["arrow path", "python path"])
def test_entries_have_edited_and_runs_have_params_input_and_result(
    tmp_path: Path, canonical: bool
) -> None:
    storage = LocalStorage(tmp_path)
    _runs(storage)
    if not canonical:  # another key order sends a run down the general path
        path = tmp_path / "edited.jsonl"
        lines = [json.loads(line) for line in path.read_bytes().splitlines()]
        path.write_text("".join(json.dumps(dict(reversed(e.items()))) + "\n" for e in lines))
    journals = kx.load(storage)
    entries = journals.entries
    assert entries["edited"].dtype == bool
    edited = entries[entries.edited]
    assert sorted(zip(edited.run_id, edited.offset, strict=True)) == [
        ("edited", 2),
        ("of-edited", 2),
    ]
    runs = journals.runs.set_index("run_id")
    assert json.loads(runs.loc["source", "params"]) == {"t": 0.5}
    assert json.loads(runs.loc["plain", "params"]) == {"t": 1}
    assert json.loads(runs.loc["edited", "params"]) == {"t": 0.5}  # its source's
    assert {json.loads(runs.loc[r, "input"]) for r in runs.index} == {"tides"}
    assert json.loads(runs.loc["edited", "result"]) == {"final": "mine!", "t": 0.5}
    assert kx.RUN_SCHEMA.field("result").type == kx.RUN_SCHEMA.field("params").type


def test_a_run_that_did_not_complete_has_no_result_and_none_has_params(
    tmp_path: Path,
) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def waits(ctx: Any, _: Any) -> None:
        ctx.suspend("go")

    waits.start(None, run_id="w")
    run = kx.load(storage).runs.iloc[0]
    assert (run["params"], run["input"]) == ("{}", "null")
    assert pd.isna(run["result"])


def test_lineage_and_kassette_tree_mark_an_edited_fork(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    storage = LocalStorage(tmp_path)
    _runs(storage)
    text = str(kx.lineage(kx.load(storage)))
    assert "edited (completed, from offset 1, edited, 2 steps)" in text
    assert "plain (completed, from offset 2, 2 steps)" in text
    assert "of-edited (completed, from offset 3, 2 steps)" in text  # a copy, not its edit
    assert main(["--storage", f"file:{tmp_path}", "tree"]) == 0
    tree = capsysbinary.readouterr().out.decode()
    assert "edited (completed, from offset 1, edited)" in tree
    assert "plain (completed, from offset 2)" in tree
