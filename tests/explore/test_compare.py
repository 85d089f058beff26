"""kx.compare: runs side by side by step id, with the first divergent step marked."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from conftest import Scenario
from ipywidgets.widgets.widget import _instances

from kassette import InvalidArgumentError, MemoryStorage, RunNotFoundError, kassette
from kassette import explore as kx
from kassette.core import fork_run
from kassette.testing import FakeClock


def test_a_fork_diverges_at_the_step_it_ran_again(scenario: Scenario) -> None:
    frame = kx.compare(kx.load(scenario.storage), ["single", "forked"])
    assert list(frame.columns) == ["single", "forked", "first_divergence"]
    assert list(frame.index) == ["plan", "implement"] and frame.index.name == "step_id"
    assert (
        frame.loc["plan", "single"] == frame.loc["plan", "forked"] == '{"goal":"parse","steps":2}'
    )
    assert frame.loc["implement", "single"] == '"code for parse by single"'
    assert frame.loc["implement", "forked"] == '"code for parse by forked"'
    assert frame["first_divergence"].tolist() == [False, True]
    assert frame.attrs["first_divergence"] == "implement"


def test_runs_that_agree_have_no_divergence(scenario: Scenario) -> None:
    frame = kx.compare(kx.load(scenario.storage), ["forked", "refork"])
    assert frame["first_divergence"].tolist() == [False, False]
    assert frame.attrs["first_divergence"] is None


def test_steps_only_some_runs_have(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    frame = kx.compare(journals, ["single", "parallel", "retried"])
    # by the offset each step first appears at in any of the runs
    assert list(frame.index) == [
        "plan",
        "gather",
        "implement",
        "call",
        "gather/left/fetch",
        "sleep",
        "gather/right/fetch",
    ]
    # plan differs (another goal), so it is the first divergence
    assert frame.attrs["first_divergence"] == "plan"
    assert frame["parallel"].isna().sum() == 2  # call, sleep
    assert frame.loc["gather", "parallel"] == '{"branches":["left","right"]}'
    assert frame.loc["gather/left/fetch", "parallel"] == '"L"'


def test_a_step_one_run_lacks_is_a_divergence(scenario: Scenario) -> None:
    fork_run(scenario.storage, "single", step="implement", new_run_id="cut")  # not continued
    frame = kx.compare(kx.load(scenario.storage), ["single", "cut"])
    assert frame["first_divergence"].tolist() == [False, True]
    assert frame["cut"].isna().tolist() == [False, True]


def test_arguments(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    with pytest.raises(RunNotFoundError):
        kx.compare(journals, ["single", "nope"])
    with pytest.raises(InvalidArgumentError):
        kx.compare(journals, [])
    assert list(kx.compare(journals, "single").columns) == ["single", "first_divergence"]


def test_values_python_gives_decoded_values(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    frame = kx.compare(journals, ["single", "forked", "parallel"], values="python")
    assert frame.loc["plan", "single"] == {"goal": "parse", "steps": 2}
    assert frame.loc["implement", "forked"] == "code for parse by forked"
    assert frame.loc["plan", "parallel"] == {"goal": "fan out", "steps": 2}
    assert frame.attrs["first_divergence"] == "plan"
    missing = [step for step in frame.index if frame.loc[step, "single"] is pd.NA]
    assert missing and all(frame.loc[step, "parallel"] is not pd.NA for step in missing)
    with pytest.raises(InvalidArgumentError, match="values must be"):
        kx.compare(journals, ["single"], values="yaml")  # type: ignore[arg-type]


def many_branches(count: int) -> tuple[kx.Journals, list[str]]:
    """A run whose `write` step returns several lines, forked `count - 1` times."""
    storage, clock = MemoryStorage(), FakeClock()
    choice = {"n": 0}

    @kassette(storage=storage, clock=clock)
    def writer(ctx: Any, task: str) -> str:
        ctx.step("plan", lambda: {"task": task})
        text = ctx.step("write", lambda: f"line one\nvariant {choice['n']}\nline three")
        return ctx.step("check", lambda: len(text))  # type: ignore[no-any-return]

    writer.start("t", run_id="b00")
    for number in range(1, count):
        choice["n"] = number % 7
        writer.fork("b00", step="write", new_run_id=f"b{number:02d}")
    return kx.load(storage), [f"b{number:02d}" for number in range(count)]


def test_compare_view_aligns_50_branches_with_diffs_against_a_baseline() -> None:
    journals, runs = many_branches(50)
    before = set(_instances)
    view = kx.CompareView(journals, runs)
    assert len(set(_instances) - before) == 2  # one model (and its layout) for 50 branches
    assert view.runs == runs and view.steps == ["plan", "write", "check"]
    assert view.baseline == "b00" and view.first_divergence == "write"
    assert view.cells["b00"][1] == "line one\nvariant 0\nline three"  # real newlines
    assert view.cells["b00"][0] == '{\n  "task": "t"\n}'
    nested = kx.CompareView(journals, runs[:2])
    assert nested.cells["b00"][2] == "29"  # len(text): plain JSON
    assert view.diffs["b07"][1] == []  # 7 % 7 == 0: the baseline's text
    assert view.diffs["b01"][1] == [
        "@@ -1,3 +1,3 @@",
        " line one",
        "-variant 0",
        "+variant 1",
        " line three",
    ]
    assert len(view.groups) == 7  # branches whose every step is the same, baseline's first
    assert view.groups[0][:3] == ["b00", "b07", "b14"] and view.groups[1][0] == "b01"
    view.baseline = "b01"
    assert "b00" in view.diffs and "b01" not in view.diffs
    assert view.groups[0][:2] == ["b01", "b08"]
    assert view.diffs["b00"][1][2:4] == ["-variant 1", "+variant 0"]
    view.baseline = "nope"  # a stale choice from the browser
    assert view.baseline == "b01"
    assert repr(view) == ("CompareView: 50 runs x 3 steps, baseline b01, first divergence write")
    with pytest.raises(InvalidArgumentError, match="baseline"):
        kx.CompareView(journals, runs[:3], baseline="b09")
    with pytest.raises(RunNotFoundError):
        kx.CompareView(journals, ["b00", "typo"])


def test_nested_strings_keep_their_newlines() -> None:
    from kassette.explore.widgets.compare import _pretty

    assert _pretty({"reply": {"content": "a\nb", "n": [1, "x"]}}) == (
        '{\n  "reply": {\n    "content": """\n      a\n      b\n    """,\n'
        '    "n": [\n      1,\n      "x"\n    ]\n  }\n}'
    )


def test_compare_view_marks_a_step_only_some_branches_have(scenario: Scenario) -> None:
    view = kx.CompareView(kx.load(scenario.storage), ["single", "parallel"])
    missing = [i for i, text in enumerate(view.cells["single"]) if text is None]
    assert missing
    assert all(view.diffs["parallel"][i][0].startswith("@@") for i in missing)


def test_compare_view_update_compares_other_runs_in_the_same_model() -> None:
    journals, runs = many_branches(4)
    view = kx.CompareView(journals, runs[:2])
    view.mode = "diff"
    before = set(_instances)
    view.update(journals, runs, baseline="b02")
    assert set(_instances) == before  # the same model, redrawn
    assert view.runs == runs and view.baseline == "b02" and view.mode == "diff"
    assert sorted(view.diffs) == ["b00", "b01", "b03"]
    assert view.diffs["b03"][1][2:4] == ["-variant 2", "+variant 3"]
    with pytest.raises(InvalidArgumentError, match="baseline"):
        view.update(journals, runs[:2], baseline="b03")
    assert view.runs == runs and view.baseline == "b02"  # a refused update changes nothing
    view.update(journals, runs[3:])
    assert view.runs == ["b03"] and view.baseline == "b03" and view.diffs == {}


def test_equal_steps_fold_by_default_beyond_three_branches() -> None:
    journals, runs = many_branches(4)
    three = kx.CompareView(journals, runs[:3])
    assert three.hide_equal is False and three.transposed is False
    four = kx.CompareView(journals, runs)
    assert four.hide_equal is True
    # plan is alike in every branch; write differs; check is len(text), the same length
    assert four.alike == [True, False, True]
    four.update(journals, runs[:2])  # fewer branches: the default follows the count
    assert four.hide_equal is False
    chosen = kx.CompareView(journals, runs, hide_equal=False)
    chosen.update(journals, [*runs, *runs])
    assert chosen.hide_equal is False  # set by hand: kept
    chosen.hide_equal = True  # as the browser's checkbox does
    chosen.update(journals, runs[:2])
    assert chosen.hide_equal is True


def test_many_branches_are_transposed_and_grouping_counts_distinct_branches() -> None:
    journals, runs = many_branches(12)
    assert kx.CompareView(journals, runs[:10]).transposed is False
    view = kx.CompareView(journals, runs[:11])
    assert view.transposed is True
    assert len(view.groups) == 7  # 11 branches, 7 distinct drafts
    view.transposed = False  # the user's choice outlives an update to more branches
    view.update(journals, runs)
    assert view.transposed is False
    distinct = kx.CompareView(journals, runs[:7])
    assert distinct.groups == [[run] for run in runs[:7]]  # "all 7 distinct"
    assert kx.CompareView(journals, runs, transposed=False).transposed is False
