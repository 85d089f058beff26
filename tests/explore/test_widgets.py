"""RunTree and ForkExplorer, headless: their state and children, and what clicks do."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import ipywidgets as widgets
import pytest
from conftest import RUNS, Scenario

from kassette import AsyncContext, MemoryStorage, RunNotFoundError, kassette
from kassette import explore as kx
from kassette.core import read_journal, run_status
from kassette.testing import FakeClock


def test_run_tree_has_a_node_per_run_coloured_by_status(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage))
    assert isinstance(tree, widgets.VBox)
    assert tree.children == (tree.legend, tree.forest, tree.details)
    assert set(tree.nodes) == set(RUNS)
    assert len(tree.forest.children) == len(RUNS)
    colours = {run_id: button.style.button_color for run_id, button in tree.nodes.items()}
    assert colours["failed"] == "#c62828" and colours["single"] == "#2e7d32"
    assert colours["suspended"] == "#ef6c00" and colours["canceled"] == "#757575"
    assert tree.nodes["refork"].description == "refork · @4 · 2 steps"
    assert tree.nodes["single"].description == "single · 2 steps"
    rows = {row.children[1].description: row.children[0].value for row in tree.forest.children}
    assert "└── " in rows["refork · @4 · 2 steps"]  # drawn under its source


def legend_of(tree: kx.RunTree) -> dict[str, str]:
    """The tree's legend as colour -> status name."""
    return dict(re.findall(r"background:(#[0-9a-f]{6})'></span>([a-z]+)<", tree.legend.value))


def test_run_tree_legend_names_the_colour_of_each_status(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage))
    legend = legend_of(tree)
    assert list(legend.values()) == ["completed", "failed", "canceled", "suspended", "running"]
    for run_id, button in tree.nodes.items():
        assert legend[button.style.button_color] == tree.lineage[run_id].status
    assert "other" not in tree.legend.value
    assert tree.legend._dom_classes == ("kassette-legend",)  # what the browser test finds


def test_the_legend_has_other_only_for_a_status_it_does_not_know() -> None:
    from kassette.explore.widgets import _legend_html

    assert ">other</span>" in _legend_html(["completed", "paused"])
    assert "other" not in _legend_html(["completed", "running"])


def test_selecting_a_node_shows_its_entries(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage))
    assert tree.selected == "single"  # the first run shown: the oldest
    tree.nodes["resumed"].click()
    assert tree.selected == "resumed"
    entries = read_journal(scenario.storage, "resumed").entries
    assert tree.details.value.count("<tr><td>") == len(entries)
    for kind in ("start", "step", "suspend", "resume", "complete"):
        assert f"<td>{kind}</td>" in tree.details.value
    assert "<b>resumed</b>" in tree.details.value and "completed" in tree.details.value
    assert tree.nodes["resumed"].style.font_weight == "bold"
    assert tree.nodes["canceled"].style.font_weight == "normal"
    tree.select("forked")
    assert "forked from <b>single</b> at offset 2" in tree.details.value
    with pytest.raises(RunNotFoundError):
        tree.select("nope")


def test_update_keeps_the_selection_and_shows_new_runs(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage), selected="resumed")
    scenario.workflow.fork("single", step="plan", new_run_id="again")
    tree.update(kx.load(scenario.storage))
    assert tree.selected == "resumed" and "again" in tree.nodes
    assert repr(tree).startswith(
        "RunTree: 10 runs, selected resumed\nsingle (completed, 2 steps)\n"
        "├── again (completed, from offset 1, 2 steps)\n└── forked"
    )


def test_fork_explorer_picks_a_point_and_forks(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")
    assert explorer.source == "single"
    assert explorer.step.options == (
        ("(by offset)", None),
        ("plan (offset 1)", "plan"),
        ("implement (offset 2)", "implement"),
    )
    assert explorer.offset.max == 3  # the complete entry: forking there re-runs the ending
    assert set(explorer.tree.nodes) == {"single", "forked", "refork"}  # its family only
    explorer.step.value = "implement"
    assert explorer.offset.value == 2
    explorer.offset.value = 3
    assert explorer.step.value is None
    explorer.step.value = "plan"
    explorer.new_run_id.value = "replan"
    explorer.fork_button.click()
    assert explorer.status.value.startswith("forked <b>single</b> at offset 1 into <b>replan</b>")
    assert [result.run_id for result in explorer.results] == ["replan"]
    status = run_status(scenario.storage, "replan")
    assert status.source == {"runId": "single", "fromOffset": 1}
    assert status.status == "completed"
    assert explorer.tree.selected == "replan" and "replan" in explorer.tree.nodes
    assert explorer.source == "replan" and explorer.new_run_id.value == ""
    page = explorer.comparison.value
    assert "<th>single</th>" in page and "<th>replan</th>" in page
    assert "first divergence" in page
    assert repr(explorer) == (
        "ForkExplorer: fork replan at offset 2 (step plan)\nlast fork: replan (success)"
    )


def test_fork_explorer_says_what_a_press_of_fork_would_fork(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")
    assert explorer.target in explorer.children
    assert "kassette-fork-target" in explorer.target._dom_classes
    assert explorer.target.value == (
        "Fork will branch <b>single</b> at offset 1 into a new run (random id): "
        "it keeps entry 0 and runs again from entry 1 (step <b>plan</b>)."
    )
    explorer.step.value = "implement"
    assert "at offset 2 into" in explorer.target.value
    assert "keeps entries 0 to 1 and runs again from entry 2 (step <b>implement</b>)" in (
        explorer.target.value
    )
    explorer.offset.value = 3
    assert "runs again from entry 3 (the complete entry)" in explorer.target.value
    explorer.new_run_id.value = " again "
    assert "at offset 3 into <b>again</b>:" in explorer.target.value
    explorer.tree.nodes["refork"].click()
    assert explorer.target.value.startswith("Fork will branch <b>refork</b> at offset 1 into")
    explorer.fork_button.click()  # into "again": the new run is selected, so it is next
    assert explorer.source == "again"
    assert explorer.target.value.startswith(
        "Fork will branch <b>again</b> at offset 2 into a new run (random id)"
    )
    suspended = kx.ForkExplorer(scenario.workflow, "resumed")
    suspended.offset.value = 3
    assert "runs again from entry 3 (suspend <b>review</b>)" in suspended.target.value
    waiting = kx.ForkExplorer(scenario.workflow, "suspended")
    waiting.offset.value = waiting.offset.max
    assert waiting.target.value.endswith("keeps entries 0 to 3 and continues after its last entry.")


def test_the_fork_runs_the_workflow_code_the_notebook_has_now(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")

    @kassette(storage=scenario.storage, clock=scenario.clock, version="agent-v1")
    def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        ctx.step("plan", lambda: {"goal": task["goal"], "steps": 2})
        code = ctx.step("implement", lambda: "rewritten")
        return {"code": code}

    explorer.workflow = agent
    explorer.step.value = "implement"
    explorer.new_run_id.value = "v2"
    explorer.fork_button.click()
    frame = kx.compare(kx.load(scenario.storage), ["single", "v2"])
    assert frame.loc["implement", "v2"] == '"rewritten"'
    assert frame.attrs["first_divergence"] == "implement"


def test_a_failed_fork_is_shown_not_raised(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")
    explorer.new_run_id.value = "forked"  # exists, and has ended
    explorer.fork_button.click()
    assert "TerminalRunError" in explorer.status.value and explorer.results == []
    explorer.new_run_id.value = "bad id!"
    explorer.fork_button.click()
    assert "invalid run id" in explorer.status.value


def async_agent(storage: MemoryStorage, clock: FakeClock) -> Any:
    @kassette(storage=storage, clock=clock)
    async def agent(ctx: AsyncContext, task: str) -> str:
        plan = await ctx.step("plan", lambda: f"plan {task}")
        await asyncio.sleep(0)
        return await ctx.step("implement", lambda: f"{plan} by {ctx.run_id}")

    return agent


def test_async_workflow_without_a_running_loop() -> None:
    storage, clock = MemoryStorage(), FakeClock()
    agent = async_agent(storage, clock)
    asyncio.run(agent.start("t", run_id="main"))
    explorer = kx.ForkExplorer(agent, "main")
    explorer.step.value = "implement"
    explorer.new_run_id.value = "branch"
    result = explorer.fork()
    assert not isinstance(result, asyncio.Task)
    assert result.status == "success" and result.result == "plan t by branch"
    assert "branch" in explorer.tree.nodes


def test_async_workflow_on_a_running_loop_as_in_jupyter() -> None:
    storage, clock = MemoryStorage(), FakeClock()
    agent = async_agent(storage, clock)

    async def notebook() -> None:
        await agent.start("t", run_id="main")
        explorer = kx.ForkExplorer(agent, "main")
        explorer.step.value = "implement"
        explorer.new_run_id.value = "branch"
        explorer.fork_button.click()  # returns at once; the fork runs on this loop
        assert explorer.status.value.startswith("forking <b>main</b>") or explorer.results
        for _ in range(100):
            if explorer.results:
                break
            await asyncio.sleep(0.01)
        assert [result.run_id for result in explorer.results] == ["branch"]
        assert explorer.tree.selected == "branch"

    asyncio.run(notebook())
    assert run_status(storage, "branch").status == "completed"


def test_entries_without_a_timestamp_still_show() -> None:
    storage = MemoryStorage()
    storage.append("odd", b'{"type":"start","session":1,"offset":0}\n', token=None)
    tree = kx.RunTree(kx.load(storage))
    assert "<td>start</td>" in tree.details.value
