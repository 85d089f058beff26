"""RunTree and ForkExplorer, headless: the data their views draw, and what clicks do."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anywidget
import pytest
from conftest import RUNS, Scenario
from ipywidgets.widgets.widget import _instances

from kassette import AsyncContext, InvalidArgumentError, MemoryStorage, RunNotFoundError, kassette
from kassette import explore as kx
from kassette.core import read_journal, run_status
from kassette.explore._widgets._colors import NO_VALUE_COLOR, SCALE
from kassette.explore._widgets._tree import PAGE
from kassette.testing import FakeClock


def test_run_tree_is_one_model_with_a_node_per_run_coloured_by_status(
    scenario: Scenario,
) -> None:
    before = set(_instances)
    tree = kx.RunTree(kx.load(scenario.storage))
    assert isinstance(tree, anywidget.AnyWidget)
    assert len(set(_instances) - before) == 2  # the tree and its layout, whatever the runs
    assert set(tree.nodes) == set(RUNS)
    assert tree.forest["id"] == [node.run_id for node in tree.lineage]
    colours = {run_id: node.color for run_id, node in tree.nodes.items()}
    assert colours["failed"] == "#c62828" and colours["single"] == "#2e7d32"
    assert colours["suspended"] == "#ef6c00" and colours["canceled"] == "#757575"
    assert tree.nodes["refork"].label == "refork · @4 · 2 steps"
    assert tree.nodes["single"].label == "single · 2 steps"
    assert tree.nodes["refork"].depth == 2 and tree.nodes["refork"].parent_run_id == "forked"
    rows = tree.forest
    single = rows["id"].index("single")
    assert rows["end"][single] == single + 3  # single, forked, refork: folded together
    assert rows["parent"][rows["id"].index("refork")] == rows["id"].index("forked")


def test_run_tree_sends_the_forest_as_data_not_widgets() -> None:
    storage = MemoryStorage()
    for number in range(300):
        storage.append(f"r{number:03d}", b'{"type":"start","session":1,"offset":0}\n', token=None)
    before = set(_instances)
    tree = kx.RunTree(kx.load(storage))
    assert len(set(_instances) - before) == 2
    assert len(tree.forest["id"]) == 300 and len(tree.nodes) == 300


def test_run_tree_legend_names_the_colour_of_each_status(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage))
    legend = {colour: name for name, colour in tree.legend}
    assert list(legend.values()) == ["completed", "failed", "canceled", "suspended", "running"]
    for run_id, node in tree.nodes.items():
        assert legend[node.color] == tree.lineage[run_id].status
    assert "other" not in legend.values()


def test_the_legend_has_other_only_for_a_status_it_does_not_know() -> None:
    from kassette.explore._widgets._colors import legend

    assert ("other", "#444") in legend(["completed", "paused"])
    assert "other" not in dict(legend(["completed", "running"]))


def test_colour_by_a_numeric_column_or_a_mapping(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    tree = kx.RunTree(journals, color_by="steps")
    low, high = SCALE[0], SCALE[-1]
    assert tree.legend[0] == ["steps 2\u20132.6", low] and tree.legend[-2][0] == "steps 4.4\u20135"
    assert tree.nodes["parallel"].color == high  # 5 steps, the most
    assert tree.nodes["single"].color == low
    tree.recolor({"single": 0.1, "forked": 0.9})
    assert tree.nodes["forked"].color == high and tree.nodes["single"].color == low
    assert tree.nodes["failed"].color == NO_VALUE_COLOR
    assert tree.legend[-1] == ["no value", NO_VALUE_COLOR]
    with pytest.raises(InvalidArgumentError, match="not numeric"):
        kx.RunTree(journals, color_by="version")
    with pytest.raises(InvalidArgumentError, match="numeric column"):
        kx.RunTree(journals, color_by="nope")


def scored_fan_out() -> tuple[Any, Any]:
    """A 5-branch fan-out whose scores are 0, 1, 2, 3, 4 (branch i scores i), and its journals."""
    storage = MemoryStorage()

    @kassette(storage=storage)
    def writer(ctx: Any, task: str) -> Any:
        draft = ctx.step("draft", lambda: f"a draft of {task} at {ctx.params.get('t', 0)}")
        return {"draft": draft, "score": ctx.params.get("t", 0) * 10}

    writer.start("an essay", run_id="essay")
    params = [{"t": value / 10} for value in range(5)]
    branches = kx.fan_out(writer, "essay", step="draft", params=params, score=score)
    return branches, kx.load(storage)


def score(result: Any) -> float:
    return float(result.result["score"])


def test_colour_by_a_fan_outs_scores_as_the_docs_show() -> None:
    branches, journals = scored_fan_out()
    assert branches.frame["score"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    by_name = kx.RunTree(journals, color_by="score", branches=branches)
    by_object = kx.RunTree(journals, color_by=branches)
    for tree in (by_name, by_object):
        colours = [tree.nodes[run_id].color for run_id in branches.run_ids]
        assert colours == list(SCALE)  # one bin each, low to high
        assert tree.nodes["essay"].color == NO_VALUE_COLOR  # the source has no score
        assert tree.legend[0][0] == "score 0\u20130.8"
    with pytest.raises(InvalidArgumentError, match="pass branches="):
        kx.RunTree(journals, color_by="score")  # nothing to take scores from
    with pytest.raises(InvalidArgumentError, match="not numeric"):
        kx.RunTree(journals, color_by="params", branches=branches)
    tree = kx.RunTree(journals, branches=branches)
    assert tree.nodes["essay"].color == "#2e7d32"  # by status until recoloured
    tree.recolor("score")  # the tree's branches
    assert tree.nodes[branches.run_ids[-1]].color == SCALE[-1]


def lab(color: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour `#rrggbb`."""
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    xyz = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    fx, fy, fz = (t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def distance(first: str, second: str) -> float:
    """CIE76 colour difference: about 2.3 is just noticeable, 20 clearly different."""
    return sum((a - b) ** 2 for a, b in zip(lab(first), lab(second), strict=True)) ** 0.5


def test_the_number_palette_is_sequential_with_distinct_bins() -> None:
    """Each bin is lighter than the one below it by at least 15 L* (the old purples were 10
    apart and close in hue), evenly, and "no value" is clearly apart from every bin."""
    lightness = [lab(color)[0] for color in SCALE]
    steps = [above - below for below, above in itertools.pairwise(lightness)]
    assert all(step >= 15 for step in steps), steps
    assert max(steps) - min(steps) < 5  # evenly: perceptually uniform
    assert all(distance(a, b) >= 20 for a, b in itertools.pairwise(SCALE))
    assert all(distance(NO_VALUE_COLOR, color) >= 20 for color in SCALE)


def test_forks_are_labelled_with_their_params_and_edited_marks(scenario: Scenario) -> None:
    workflow = scenario.workflow
    workflow.fork("single", step="implement", new_run_id="warm", params={"temperature": 0.7})
    workflow.fork("single", step="implement", new_run_id="mine", result="my code")
    workflow.fork("mine", offset=4, new_run_id="of-mine")  # copies the edit, edits nothing
    tree = kx.RunTree(kx.load(scenario.storage))
    assert tree.nodes["warm"].params == "temperature=0.7"
    assert tree.forest["note"][tree.forest["id"].index("warm")] == "temperature=0.7"
    assert tree.nodes["mine"].edited and not tree.nodes["warm"].edited
    assert not tree.nodes["of-mine"].edited
    tree.select("mine")
    assert tree.details["edited"]
    assert [e["edited"] for e in tree.entries] == [False, False, False, True, False]


def test_selecting_a_node_shows_its_entries(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage))
    assert tree.selected == "single"  # the first run shown: the oldest
    tree.select("resumed")
    assert tree.selected == "resumed"
    entries = read_journal(scenario.storage, "resumed").entries
    assert len(tree.entries) == len(entries) and tree.pages == 1
    assert [e["type"] for e in tree.entries] == [e["type"] for e in entries]
    assert tree.details["run_id"] == "resumed" and tree.details["status"] == "completed"
    assert tree.entries[0]["time"] == "2026-01-01 00:00:10.500"  # with the date
    tree.select("forked")
    assert tree.details["parent_run_id"] == "single" and tree.details["fork_offset"] == 2
    with pytest.raises(RunNotFoundError):
        tree.select("nope")
    tree.selected = "nope"  # a stale click from the browser: ignored
    assert tree.selected == "forked"


def test_long_values_are_sent_whole(scenario: Scenario) -> None:
    @kassette(storage=scenario.storage, clock=scenario.clock)
    def long(ctx: Any, size: int) -> str:
        return ctx.step("write", lambda: "line\n" * size)  # type: ignore[no-any-return]

    long.start(500, run_id="long")
    tree = kx.RunTree(kx.load(scenario.storage), selected="long")
    value = next(e["value"] for e in tree.entries if e["id"] == "write")
    assert json.loads(value)["result"] == "line\n" * 500


def test_long_runs_are_sent_a_page_at_a_time() -> None:
    storage, clock = MemoryStorage(), FakeClock()

    @kassette(storage=storage, clock=clock)
    def many(ctx: Any, count: int) -> int:
        for number in range(count):
            ctx.step(f"s{number}", lambda number=number: number)
        return count

    many.start(250, run_id="many")
    tree = kx.RunTree(kx.load(storage))
    assert tree.pages == 3 and len(tree.entries) == PAGE and tree.entries[0]["offset"] == 0
    tree.page = 2
    assert [e["offset"] for e in tree.entries] == list(range(200, 252))
    tree.page = 7  # past the end: the last page
    assert tree.page == 2


def test_a_bad_selection_names_the_run_and_the_store(scenario: Scenario) -> None:
    with pytest.raises(RunNotFoundError, match=r"run typo is not among the 9 runs of") as info:
        kx.RunTree(kx.load(scenario.storage), selected="typo")
    assert info.value.run_id == "typo"
    with pytest.raises(RunNotFoundError, match=r"run typo is not among the 9 runs of"):
        kx.ForkExplorer(scenario.workflow, "typo")


def test_update_keeps_the_selection_and_shows_new_runs(scenario: Scenario) -> None:
    tree = kx.RunTree(kx.load(scenario.storage), selected="resumed")
    scenario.workflow.fork("single", step="plan", new_run_id="again")
    tree.update(kx.load(scenario.storage))
    assert tree.selected == "resumed" and "again" in tree.nodes
    assert "again" in tree.forest["id"]
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
    assert explorer.comparison not in explorer.children  # nothing to compare before a fork
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
    assert explorer.tree.selected == "single" and "replan" in explorer.tree.nodes
    assert explorer.source == "single" and explorer.new_run_id.value == ""
    comparison = explorer.comparison  # a CompareView below the tree, diffed against the source
    assert isinstance(comparison, kx.CompareView) and explorer.children[-1] is comparison
    assert comparison.runs == ["single", "replan"] and comparison.baseline == "single"
    assert comparison.steps == ["plan", "implement"]
    assert comparison.first_divergence == "implement"  # plan ran again, to the same result
    assert repr(explorer) == (
        "ForkExplorer: fork single at offset 1 (step plan)\nlast fork: replan (success)"
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
    explorer.tree.select("refork")
    assert explorer.target.value.startswith("Fork will branch <b>refork</b> at offset 1 into")
    explorer.fork_button.click()  # into "again": the run picked stays the one to fork
    assert explorer.source == "refork" and "again" in explorer.tree.nodes
    assert explorer.target.value.startswith(
        "Fork will branch <b>refork</b> at offset 1 into a new run (random id)"
    )
    suspended = kx.ForkExplorer(scenario.workflow, "resumed")
    suspended.offset.value = 3
    assert "runs again from entry 3 (suspend <b>review</b>)" in suspended.target.value
    waiting = kx.ForkExplorer(scenario.workflow, "suspended")
    waiting.offset.value = waiting.offset.max
    assert waiting.target.value.endswith("keeps entries 0 to 3 and continues after its last entry.")


@pytest.mark.parametrize(("run_id", "last"), [("single", 3), ("suspended", 4)])
def test_the_fork_explorer_and_fork_agree_on_the_last_fork_point(
    scenario: Scenario, run_id: str, last: int
) -> None:
    """A completed run forks up to its terminal entry, an open one up to its next offset: the
    explorer's slider ends where `fork` stops accepting, past the terminal entry in both."""
    explorer = kx.ForkExplorer(scenario.workflow, run_id)
    assert explorer.offset.max == last
    explorer.offset.value = last + 1  # the slider keeps the point at its end
    assert explorer.offset.value == last
    with pytest.raises(InvalidArgumentError, match=f"fork offset {last + 1} is past the end"):
        scenario.workflow.fork(run_id, offset=last + 1, new_run_id=f"{run_id}-past")
    with pytest.raises(RunNotFoundError):
        run_status(scenario.storage, f"{run_id}-past")  # nothing written
    explorer.new_run_id.value = f"{run_id}-at-end"
    explorer.fork_button.click()
    status = run_status(scenario.storage, f"{run_id}-at-end")
    assert status.source == {"runId": run_id, "fromOffset": last}


def test_the_fork_runs_the_workflow_code_the_notebook_has_now(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")

    @kassette(storage=scenario.storage, clock=scenario.clock, version="agent-v1")
    def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        ctx.step("plan", lambda: {"goal": task["goal"], "steps": 2})
        code = ctx.step("implement", lambda: "rewritten")
        return {"code": code}

    explorer.workflow = agent
    assert explorer.tree.workflow is agent  # the tree's resume form resumes with it too
    explorer.step.value = "implement"
    explorer.new_run_id.value = "v2"
    explorer.fork_button.click()
    frame = kx.compare(kx.load(scenario.storage), ["single", "v2"])
    assert frame.loc["implement", "v2"] == '"rewritten"'
    assert frame.attrs["first_divergence"] == "implement"


def test_a_failed_fork_is_shown_not_raised(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")
    explorer.new_run_id.value = "forked"  # exists: a fork of single at another offset
    explorer.fork_button.click()
    assert "RunExistsError" in explorer.status.value and explorer.results == []
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
        assert explorer.tree.selected == "main" and "branch" in explorer.tree.nodes

    asyncio.run(notebook())
    assert run_status(storage, "branch").status == "completed"


def test_entries_without_a_timestamp_still_show() -> None:
    storage = MemoryStorage()
    storage.append("odd", b'{"type":"start","session":1,"offset":0}\n', token=None)
    tree = kx.RunTree(kx.load(storage))
    assert tree.entries[0]["type"] == "start" and tree.entries[0]["time"] == ""


def test_the_source_stays_the_run_picked_after_a_fork(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")
    explorer.step.value = "implement"
    explorer.new_run_id.value = "first"
    explorer.fork_button.click()
    explorer.new_run_id.value = "second"
    explorer.fork_button.click()  # the same run again, not the branch just made
    sources = [run_status(scenario.storage, r).source for r in ("first", "second")]
    assert sources == [{"runId": "single", "fromOffset": 2}] * 2
    assert explorer.source == "single" and explorer.offset.value == 2
    assert {"first", "second"} <= set(explorer.tree.nodes)
    explorer.tree.select("first")  # unless the branch is picked
    assert explorer.source == "first"
    assert explorer.target.value.startswith("Fork will branch <b>first</b>")


def test_fan_out_makes_k_branches_or_one_per_params_object(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")
    explorer.step.value = "implement"
    explorer.fan_out_count.value = 3
    explorer.fan_out_button.click()
    [branches] = explorer.fan_outs
    assert branches.run_ids == ["single.2.0", "single.2.1", "single.2.2"]
    assert explorer.status.value.startswith(
        "fanned out <b>single</b> at offset 2 into 3 branches (single.2.0 …):"
    )
    assert "3 success" in explorer.status.value
    assert explorer.comparison.runs == ["single", "single.2.0", "single.2.1", "single.2.2"]
    assert explorer.comparison.baseline == "single"
    assert explorer.source == "single" and "single.2.1" in explorer.tree.nodes
    explorer.fan_out_params.value = '[{"temperature": 0.1}, {"temperature": 0.9}]'
    explorer.new_run_id.value = "grid"
    explorer.fan_out_button.click()
    assert explorer.fan_outs[-1].run_ids == ["grid.0", "grid.1"]
    assert read_journal(scenario.storage, "grid.1").state.params == {"temperature": 0.9}
    assert explorer.new_run_id.value == "grid"  # the prefix stays: pressing again re-reports
    explorer.fan_out_button.click()
    assert explorer.fan_outs[-1].run_ids == ["grid.0", "grid.1"]
    assert explorer.fan_outs[-1].frame["status"].tolist() == ["success"] * 2
    del explorer.fan_outs[-1]
    explorer.fan_out_params.value = '{"temperature": 1}'
    explorer.fan_out_button.click()
    assert "InvalidArgumentError: params must be a JSON list of objects" in explorer.status.value
    assert len(explorer.fan_outs) == 2


def test_a_fork_whose_code_skips_a_copied_step_is_warned_of(scenario: Scenario) -> None:
    explorer = kx.ForkExplorer(scenario.workflow, "single")

    @kassette(storage=scenario.storage, clock=scenario.clock, version="agent-v1")
    def renamed(ctx: Any, task: dict[str, Any]) -> str:
        ctx.step("planning", lambda: "renamed")  # was "plan"
        return str(ctx.step("implement", lambda: "code"))

    explorer.workflow = renamed
    explorer.step.value = "implement"
    explorer.fork_button.click()
    assert explorer.results[-1].unreplayed == ("plan",)
    assert "did not replay the recorded step <b>plan</b>" in explorer.status.value


@pytest.mark.parametrize("widget", [kx.RunTree, kx.CompareView], ids=lambda w: w.__name__)
def test_each_widget_script_carries_the_shared_dom_helpers_once(widget: type) -> None:
    """anywidget loads one ES module per widget: dom.js is prepended to each, not copied."""
    source = Path(__file__).parents[2] / "kassette" / "explore" / "_widgets"
    dom = (source / "dom.js").read_text(encoding="utf-8")
    script: str = widget._esm  # type: ignore[attr-defined]
    assert script.startswith(dom) and script.count("function h(") == 1
    for own in source.glob("*.js"):  # no widget's own file defines it again
        assert own.name == "dom.js" or "function h(" not in own.read_text(encoding="utf-8")
    node = shutil.which("node")
    if node is not None:  # the whole module parses (a browser test loads it for real)
        subprocess.run(
            [node, "--input-type=module", "--check"], input=script, text=True, check=True
        )
