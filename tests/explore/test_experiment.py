"""kx.experiment end to end on small real workflows (in this process, on threads).

The workflow is `experiment_support.ticket`; every step function and score call is counted in
`calls.log`, so "runs nothing twice" and "never re-bills a score" are counted, not assumed.
Interrupts, SIGKILL and process pools are in test_experiment_processes.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from experiment_support import SOURCES, calls, record_sources, run_experiment, scored, workflow

from kassette import MemoryStorage, kassette
from kassette import explore as kx
from kassette.errors import InvalidArgumentError


def test_an_experiment_pairs_variants_with_the_recorded_baseline_and_a_recall_runs_nothing(
    tmp_path: Path,
) -> None:
    sources = record_sources(tmp_path)
    found = run_experiment(tmp_path)
    frame = found.frame
    assert list(frame.columns) == [
        "source_run_id",
        "variant",
        "repeat",
        "run_id",
        "status",
        "score",
        "cost_usd",
        "tokens",
    ]
    assert len(frame) == SOURCES * (1 + 2 * 2)
    assert set(frame["variant"]) == {"recorded", "boosted", "same"}
    assert (
        frame.loc[frame["variant"] == "boosted", "run_id"]
        .str.match(r"exp\.T\d{3}\.boosted\.[01]")
        .all()
    )
    summary = found.summary()
    assert list(summary["variant"]) == ["boosted", "same"]
    boosted = summary.set_index("variant").loc["boosted"]
    assert boosted.difference == pytest.approx(0.3, abs=0.1)  # the boost, plus the noise
    assert boosted.ci_low > 0 and boosted.p_holm < 0.05 and boosted.pairs == SOURCES
    assert boosted.wins == SOURCES
    before = Counter(calls(tmp_path))
    again = run_experiment(tmp_path)
    assert Counter(calls(tmp_path)) == before  # no step, no score ran again
    assert again.summary().equals(summary)
    reopened = kx.load(tmp_path / "journals").experiments
    assert list(reopened) == ["exp"]
    assert reopened["exp"].summary().equals(summary)
    assert Counter(calls(tmp_path)) == before
    assert sorted(reopened["exp"].design["sources"]) == sources
    assert reopened["exp"].design["score"].endswith("score")


def test_a_control_baseline_an_edited_result_and_other_code_are_variants(tmp_path: Path) -> None:
    sources = record_sources(tmp_path, count=4)
    agent = workflow(tmp_path)
    other = kx.Variant(workflow=workflow(tmp_path), params={"boost": 1.0})
    found = kx.experiment(
        agent,
        sources,
        step="draft",
        variants={"control": {}, "edited": kx.Variant(result=0.99), "other": other},
        baseline="control",
        score=lambda r: r.result["quality"],
        name="kinds",
        progress=False,
    )
    frame = found.frame.set_index(["source_run_id", "variant"])
    assert "recorded" not in set(found.frame["variant"])
    assert (frame.xs("edited", level="variant")["score"] == 0.99).all()
    drafts = Counter(
        step
        for run_id, step in calls(tmp_path)
        if run_id.startswith("kinds.") and ".edited." in run_id
    )
    assert drafts["draft"] == 0  # an edited result is not run
    summary = found.summary().set_index("variant")
    assert summary.loc["other", "difference"] == pytest.approx(
        1.0, abs=0.15
    )  # noise sd 0.1 per run
    assert found.variants == ["control", "edited", "other"]


def test_boolean_scores_are_tested_with_mcnemar(tmp_path: Path) -> None:
    sources = record_sources(tmp_path, count=10)
    found = kx.experiment(
        workflow(tmp_path),
        sources,
        step="draft",
        variants={"boosted": {"boost": 0.4}},
        score=lambda r: bool(r.result["solved"]),
        name="solved",
        progress=False,
    )
    assert str(found.frame["score"].dtype) == "boolean"
    row = found.summary().iloc[0]
    assert row.test == "exact McNemar"
    assert row.wins > 0 and row.losses == 0


def test_the_sequential_stop_says_when_it_decided_and_leaves_the_rest_unrun(tmp_path: Path) -> None:
    sources = record_sources(tmp_path, count=30, polish=0)
    found = kx.experiment(
        workflow(tmp_path),
        sources,
        step="draft",
        variants={"boosted": {"boost": 0.5}},
        score=scored(str(tmp_path)),
        name="seq",
        stop_when=kx.decided(alpha=0.05),
        seed=4,
        max_workers=2,
        progress=False,
    )
    assert found.stopped_early
    assert 10 <= found.decided_after < 30
    frame = found.frame
    branches = frame[frame["variant"] == "boosted"]
    not_run = int((branches["status"] == "not run").sum())
    assert not_run > 0 and branches["score"].isna().sum() == not_run
    line = found.status_line()
    assert line.startswith(f"decided after {found.decided_after} of 30 runs, $0.00")
    assert f"{not_run} branches not run" in line
    # the order is seeded: the branches run are the first of that order
    order = found.design["order"]
    ran = set(branches.loc[branches["status"] == "success", "source_run_id"])
    assert ran == set(order[: len(ran)])
    again = kx.load(tmp_path / "journals").experiments["seq"]
    assert (again.stopped_early, again.decided_after) == (True, found.decided_after)


def test_another_design_under_a_used_name_is_refused_before_anything_runs(tmp_path: Path) -> None:
    sources = record_sources(tmp_path, count=3)
    run_experiment_args = {"step": "draft", "score": lambda r: 1.0, "name": "x", "progress": False}
    kx.experiment(workflow(tmp_path), sources, variants={"a": {"boost": 1}}, **run_experiment_args)
    before = len(calls(tmp_path))
    with pytest.raises(InvalidArgumentError, match="another design"):
        kx.experiment(
            workflow(tmp_path), sources, variants={"a": {"boost": 2}}, **run_experiment_args
        )
    with pytest.raises(InvalidArgumentError, match="no step 'nope'"):
        kx.experiment(
            workflow(tmp_path),
            sources,
            variants={"a": {}},
            **{**run_experiment_args, "step": "nope", "name": "y"},
        )
    with pytest.raises(InvalidArgumentError, match="baseline"):
        kx.experiment(
            workflow(tmp_path),
            sources,
            variants={"a": {}},
            baseline="b",
            **{**run_experiment_args, "name": "z"},
        )
    assert len(calls(tmp_path)) == before


def test_a_score_that_raises_is_retried_by_the_next_call_and_never_recomputed_once_journaled(
    tmp_path: Path,
) -> None:
    sources = record_sources(tmp_path, count=3)
    failing = {"on": True}
    judged: list[str] = []

    def judge(result: object) -> float:
        run_id = result.run_id  # type: ignore[attr-defined]
        judged.append(run_id)
        if failing["on"] and run_id.endswith(".a.0") and run_id.startswith("j.T001"):
            raise ConnectionError("judge unavailable")
        return float(result.result["quality"])  # type: ignore[attr-defined]

    options = {
        "step": "draft",
        "variants": {"a": {"boost": 1}},
        "score": judge,
        "name": "j",
        "progress": False,
    }
    first = kx.experiment(workflow(tmp_path), sources, **options)
    assert "1 scores raised" in first.status_line()
    assert first.frame["score"].isna().sum() == 1
    failing["on"] = False
    judged.clear()
    second = kx.experiment(workflow(tmp_path), sources, **options)
    assert judged == ["j.T001.a.0"]  # only the missing score was computed again
    assert second.frame["score"].notna().all()


def test_the_experiment_in_a_cell_shows_the_summary_and_a_forest_plot(tmp_path: Path) -> None:
    record_sources(tmp_path)
    found = run_experiment(tmp_path)
    page = found._repr_html_()
    assert "boosted" in page and "wins / ties / losses" in page and "paired t" in page
    spec = found.forest().to_dict()
    layers = spec["layer"]

    def values(layer: dict) -> list:
        data = layer["data"]
        return data["values"] if "values" in data else spec["datasets"][data["name"]]

    assert len(layers) == 3
    assert layers[0]["mark"]["type"] == "rule" and values(layers[0]) == [{"zero": 0}]
    assert [v["variant"] for v in values(layers[1])] == ["boosted", "same"]
    summary = found.summary()
    assert [v["ci_low"] for v in values(layers[1])] == pytest.approx(list(summary["ci_low"]))
    power = found.power()
    assert list(power.columns) == [
        "variant",
        "pairs",
        "sd",
        "effect",
        "detectable_effect",
        "runs_needed",
    ]
    assert power.set_index("variant").loc["boosted", "runs_needed"] <= SOURCES


def test_compare_opens_the_pairs_that_differ_most(tmp_path: Path) -> None:
    record_sources(tmp_path)
    found = run_experiment(tmp_path)
    view = found.compare("boosted", pairs=2)
    frame = found.frame
    means = frame.groupby(["source_run_id", "variant"])["score"].mean().unstack()
    top = (means["boosted"] - means["recorded"]).abs().sort_values(ascending=False).index[:2]
    assert view.runs == [top[0], f"exp.{top[0]}.boosted.0", top[1], f"exp.{top[1]}.boosted.0"]
    with pytest.raises(InvalidArgumentError):
        found.compare("recorded")


def test_the_run_tree_puts_each_branch_under_its_source(tmp_path: Path) -> None:
    record_sources(tmp_path)
    run_experiment(tmp_path)
    forest = kx.lineage(kx.load(tmp_path / "journals"))
    children = {node.run_id: {child.run_id for child in node.children} for node in forest}
    for source in ("T000", "T003", "T007"):
        assert children[source] == {
            f"exp.{source}.{v}.{r}" for v in ("boosted", "same") for r in (0, 1)
        }
    runs = kx.load(tmp_path / "journals").runs.set_index("run_id")
    branches = runs[runs.index.str.match(r"exp\.T")]
    assert (branches["parent_run_id"] == branches.index.str.split(".").str[1]).all()


def _completion(tokens: int) -> dict[str, Any]:
    """An OpenAI chat completion, as the integration journals it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10, "total_tokens": tokens},
    }


def test_a_budget_stops_the_experiment_and_a_larger_one_continues_it() -> None:
    storage, calls = MemoryStorage(), []

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> int:
        ctx.step("plan", lambda: 0)

        def call() -> dict[str, Any]:
            calls.append(ctx.run_id)
            return _completion(100)

        for _ in range(2):
            ctx.step("chat", call)
        # a step after the calls: its boundary counts the branch's own last call at once
        return int(ctx.step("finish", lambda: task + ctx.params.get("lift", 0)))

    sources = [f"s{n}" for n in range(4)]
    for number, run_id in enumerate(sources):
        agent.start(number, run_id=run_id)
    calls.clear()
    options: dict[str, Any] = {
        "step": "chat",
        "variants": {"lift": {"lift": 1}},
        "score": lambda r: float(r.result),
        "name": "spend",
        "max_workers": 1,
        "progress": False,
    }
    found = kx.experiment(agent, sources, budget={"tokens": 350}, **options)
    # one branch at a time: 100, 200 (the first branch ends), 300 (< 350, so a fourth call
    # starts), 400: the second branch's next step is refused, and nothing else starts
    assert len(calls) == 4
    frame = found.frame[found.frame["variant"] == "lift"]
    assert (frame["status"] == "success").sum() == 1 and (frame["status"] == "stopped").sum() == 3
    line = found.status_line()
    assert "1 of 4 branches done" in line and "of 350 tokens" in line and "by budget" in line
    assert not found.stopped_early
    more = kx.experiment(agent, sources, budget={"tokens": 10_000}, **options)
    assert len(calls) == 8  # the stopped branch continued where it stopped: no call twice
    assert set(more.frame["status"]) == {"success"}
    assert more.summary().iloc[0]["difference"] == pytest.approx(1.0)


def test_an_async_workflow_runs_its_branches_on_one_event_loop(tmp_path: Path) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    async def agent(ctx: Any, task: int) -> int:
        base = await ctx.step("read", lambda: task)
        return int(await ctx.step("draft", lambda: base + ctx.params.get("lift", 0)))

    async def record() -> None:
        for number in range(12):
            await agent.start(number, run_id=f"a{number}")

    asyncio.run(record())
    found = kx.experiment(
        agent,
        [f"a{n}" for n in range(12)],
        step="draft",
        variants={"control": {}, "lift": {"lift": 2}},
        baseline="control",
        repeats=2,
        score=lambda r: float(r.result),
        name="loop",
        progress=False,
    )
    row = found.summary().iloc[0]
    assert (row.variant, row.pairs, row.difference, row.test) == ("lift", 12, 2.0, "paired t")
    assert (row.ci_low, row.ci_high, row.p_value) == (2.0, 2.0, 0.0)  # every pair: exactly +2
