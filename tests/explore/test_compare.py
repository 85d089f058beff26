"""kx.compare: runs side by side by step id, with the first divergent step marked."""

from __future__ import annotations

import pytest
from conftest import Scenario

from kassette import InvalidArgumentError, RunNotFoundError
from kassette import explore as kx
from kassette.core import fork_run


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
