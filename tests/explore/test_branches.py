"""kx.fan_out and Branches: forking one point many ways, concurrently and durably."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from kassette import (
    InvalidArgumentError,
    LocalStorage,
    MemoryStorage,
    NotSerializableError,
    RunExistsError,
    Storage,
    kassette,
)
from kassette import explore as kx
from kassette.core import read_journal, run_status
from kassette.explore._branches import FRAME_COLUMNS

PARTIES = 6
BARRIER_LIMIT_S = 60  # a bound: a barrier that never opens breaks and fails the branch


def make_agent(storage: Storage, calls: list[str] | None = None, **extra: Any) -> Any:
    calls = calls if calls is not None else []

    @kassette(storage=storage, **extra)
    def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        def call(name: str, value: Any) -> Any:
            calls.append(f"{ctx.run_id}:{name}")
            return value

        plan = ctx.step("plan", lambda: call("plan", f"plan for {task['goal']}"))
        temperature = ctx.params.get("temperature", 0.0)
        draft = ctx.step("draft", lambda: call("draft", f"{plan} at {temperature}"))
        if task.get("approve"):
            verdict = ctx.suspend("approval")
            return {"draft": draft, "verdict": verdict}
        if task.get("fail") and ctx.run_id.endswith(".1"):
            raise RuntimeError("branch 1 breaks")
        return {"draft": draft, "score": len(ctx.run_id) + len(draft)}

    return agent


@pytest.fixture
def storage() -> MemoryStorage:
    return MemoryStorage()


def test_n_branches_fork_the_step_and_run_it_live_in_each(storage: MemoryStorage) -> None:
    calls: list[str] = []
    agent = make_agent(storage, calls)
    agent.start({"goal": "ship"}, run_id="root")
    branches = kx.fan_out(agent, "root", step="draft", n=3, score=lambda r: r.result["score"])
    assert branches.run_ids == ["root.draft.0", "root.draft.1", "root.draft.2"]
    frame = branches.frame
    assert list(frame.columns) == FRAME_COLUMNS
    assert frame["status"].tolist() == ["success"] * 3
    assert frame["params"].tolist() == [{}, {}, {}]
    for run_id in branches.run_ids:
        assert run_status(storage, run_id).source == {"runId": "root", "fromOffset": 2}
        assert f"{run_id}:plan" not in calls and f"{run_id}:draft" in calls  # replayed, live
    assert frame["score"].tolist() == [len("root.draft.0") + len("plan for ship at 0.0")] * 3
    assert read_journal(storage, "root").entries == read_journal(storage, "root").entries


def test_calling_again_retries_and_forks_nothing_new(storage: MemoryStorage) -> None:
    calls: list[str] = []
    agent = make_agent(storage, calls)
    agent.start({"goal": "ship"}, run_id="root")
    first = kx.fan_out(agent, "root", offset=2, n=2)
    before = {run_id: storage.read(run_id) for run_id in first.run_ids}
    calls.clear()
    again = kx.fan_out(agent, "root", offset=2, n=2)
    assert again.run_ids == first.run_ids == ["root.2.0", "root.2.1"]
    assert calls == []  # finished branches only report their status
    assert {run_id: storage.read(run_id) for run_id in again.run_ids} == before
    assert again.frame["result"].tolist() == first.frame["result"].tolist()
    other = kx.fan_out(agent, "root", offset=2, n=1, prefix="second-try")
    assert other.run_ids == ["second-try.0"]


def test_a_branch_id_holding_another_run_is_refused_before_anything_runs(
    storage: MemoryStorage,
) -> None:
    agent = make_agent(storage)
    agent.start({"goal": "ship"}, run_id="root")
    agent.start({"goal": "other"}, run_id="root.draft.1")
    with pytest.raises(RunExistsError, match=r"root\.draft\.1 already exists and is not a fork"):
        kx.fan_out(agent, "root", step="draft", n=3)
    assert storage.read("root.draft.0") is None
    kx.fan_out(agent, "root", offset=1, n=1, prefix="p")
    with pytest.raises(RunExistsError, match="a fork of root at offset 1"):
        kx.fan_out(agent, "root", offset=2, n=1, prefix="p")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"n": 2, "step": "draft", "offset": 1}, "exactly one of offset or step"),
        ({"n": 2}, "exactly one of offset or step"),
        ({"step": "draft"}, "exactly one of n, params, results or workflows"),
        ({"step": "draft", "n": 2, "params": [{}]}, "got n, params"),
        ({"step": "draft", "n": 0}, "n must be an int >= 1"),
        ({"step": "draft", "n": True}, "n must be an int >= 1"),
        ({"step": "draft", "params": []}, "at least one of params"),
        ({"step": "draft", "params": [1]}, "params must be JSON objects"),
        ({"step": "draft", "params": {"a": 1}}, "expected a list"),
        ({"step": "draft", "results": [{1, 2}]}, "not JSON-serialisable"),
        ({"step": "draft", "workflows": [len]}, "workflows must be kassette workflows"),
        ({"step": "nope", "n": 1}, "has no step 'nope'"),
        ({"step": "draft", "n": 1, "prefix": "../x"}, "invalid run id"),
        ({"step": "draft", "n": 1, "executor": 3}, "executor must be"),
    ],
)
def test_bad_arguments_raise_and_write_nothing(
    storage: MemoryStorage, arguments: dict[str, Any], message: str
) -> None:
    agent = make_agent(storage)
    agent.start({"goal": "ship"}, run_id="root")
    with pytest.raises((InvalidArgumentError, TypeError), match=message):
        kx.fan_out(agent, "root", **arguments)
    assert list(storage.list_runs()) == ["root"]


def test_failures_and_suspends_are_rows_and_resume_reaches_every_branch(
    storage: MemoryStorage,
) -> None:
    agent = make_agent(storage)
    agent.start({"goal": "ship", "fail": True}, run_id="root")
    branches = kx.fan_out(agent, "root", step="draft", n=3, score=lambda r: r.result["score"])
    frame = branches.frame
    assert frame["status"].tolist() == ["success", "failed", "success"]
    assert frame.loc[1, "error"] == "RuntimeError: branch 1 breaks"
    assert math.isnan(frame.loc[1, "score"])
    assert branches.best(k=5) == ["root.draft.0", "root.draft.2"]

    approving = make_agent(MemoryStorage())
    approving.start({"goal": "ship", "approve": True}, run_id="root")
    approving.resume("root", "approval", "fine")
    waiting = kx.fan_out(approving, "root", step="draft", n=3)
    assert waiting.frame["status"].tolist() == ["suspended"] * 3
    assert waiting.resume("approval", "yes") is waiting
    assert waiting.frame["status"].tolist() == ["success"] * 3
    assert [r["verdict"] for r in waiting.frame["result"]] == ["yes"] * 3


def test_a_score_that_raises_is_nan_and_best_ranks_the_rest(storage: MemoryStorage) -> None:
    agent = make_agent(storage)
    agent.start({"goal": "ship"}, run_id="root")

    def score(result: Any) -> float:
        if result.run_id.endswith(".0"):
            raise KeyError("no score")
        return -int(result.run_id[-1])

    branches = kx.fan_out(agent, "root", step="draft", n=4, score=score)
    assert math.isnan(branches.frame.loc[0, "score"])
    assert branches.best() == ["root.draft.1"]
    assert branches.best(k=2) == ["root.draft.1", "root.draft.2"]
    with pytest.raises(InvalidArgumentError):
        branches.best(k=0)


def test_workflows_are_code_variants_on_one_storage(storage: MemoryStorage) -> None:
    agent = make_agent(storage)
    agent.start({"goal": "ship"}, run_id="root")

    def variant(word: str) -> Any:
        @kassette(storage=storage, version=f"v-{word}")
        def changed(ctx: Any, task: dict[str, Any]) -> str:
            ctx.step("plan", lambda: "never called: replayed")
            return str(ctx.step("draft", lambda: word))

        return changed

    branches = kx.fan_out(agent, "root", step="draft", workflows=[variant("a"), variant("b")])
    assert branches.frame["result"].tolist() == ["a", "b"]
    assert [run_status(storage, r).version for r in branches.run_ids] == ["v-a", "v-b"]


def test_journals_and_compare_cover_the_branches(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    agent = make_agent(storage)
    agent.start({"goal": "ship"}, run_id="root")
    branches = kx.fan_out(agent, "root", step="draft", n=2)
    assert branches.journals.run_ids == branches.run_ids
    compared = branches.compare()
    assert list(compared.columns[:3]) == ["root", "root.draft.0", "root.draft.1"]
    assert json.loads(compared.loc["plan", "root.draft.0"]) == "plan for ship"
    assert repr(branches) == "<Branches of root: 2 (2 done (2 succeeded), 0 stopped)>"
    assert "root.draft.1" in branches._repr_html_()


def test_def_branches_run_concurrently_on_threads(tmp_path: Path) -> None:
    barrier = threading.Barrier(PARTIES, timeout=BARRIER_LIMIT_S)
    storage = LocalStorage(tmp_path)

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> int:
        ctx.step("plan", lambda: "plan")
        # every branch must be waiting here at once before any can go on
        return int(ctx.step("meet", lambda: ctx.run_id == "root" or barrier.wait() >= 0))

    agent.start(None, run_id="root")
    branches = kx.fan_out(agent, "root", step="meet", n=PARTIES)
    assert branches.frame["status"].tolist() == ["success"] * PARTIES, branches.frame["error"]
    assert not barrier.broken


def test_async_branches_run_as_tasks_of_one_loop_even_inside_a_running_loop(
    storage: MemoryStorage,
) -> None:
    arrived: list[str] = []
    loops: set[int] = set()
    threads: set[int] = set()
    everyone = {"barrier": None}

    async def meet(run_id: str) -> int:
        if run_id == "root":
            return 0
        if everyone["barrier"] is None:
            everyone["barrier"] = asyncio.Barrier(PARTIES)  # type: ignore[assignment]
        loops.add(id(asyncio.get_running_loop()))
        threads.add(threading.get_ident())
        arrived.append(run_id)
        await asyncio.wait_for(everyone["barrier"].wait(), BARRIER_LIMIT_S)  # type: ignore[attr-defined]
        return len(arrived)

    @kassette(storage=storage)
    async def agent(ctx: Any, task: Any) -> int:
        await ctx.step("plan", lambda: "plan")
        return int(await ctx.step("meet", lambda: meet(ctx.run_id)))

    async def notebook_cell() -> Any:  # a loop is already running here, as in Jupyter
        await agent.start(None, run_id="root")
        return kx.fan_out(agent, "root", step="meet", n=PARTIES)

    branches = asyncio.run(notebook_cell())
    assert branches.frame["status"].tolist() == ["success"] * PARTIES, branches.frame["error"]
    assert branches.frame["result"].tolist() == [PARTIES] * PARTIES
    assert len(loops) == 1 and len(threads) == 1


def test_params_give_each_branch_its_own_ctx_params(storage: MemoryStorage) -> None:
    calls: list[str] = []
    agent = make_agent(storage, calls)
    agent.start({"goal": "ship"}, run_id="root", params={"temperature": 0.1})
    grid = [{"temperature": t} for t in (0.5, 1.5)]
    branches = kx.fan_out(agent, "root", step="draft", params=grid)
    assert branches.frame["params"].tolist() == grid
    drafts = [result["draft"] for result in branches.frame["result"]]
    assert drafts == ["plan for ship at 0.5", "plan for ship at 1.5"]
    same = kx.fan_out(agent, "root", step="draft", n=1, prefix="alike")
    assert same.frame.loc[0, "params"] == {"temperature": 0.1}  # the source's
    runs = kx.load(storage).runs.set_index("run_id")
    assert json.loads(runs.loc["root.draft.1", "params"]) == {"temperature": 1.5}
    calls.clear()
    with pytest.raises(InvalidArgumentError, match=r"root\.draft\.0 is a branch with params"):
        kx.fan_out(agent, "root", step="draft", params=[{"temperature": 9}])
    assert calls == []


def test_results_fork_with_the_step_edited_and_not_run(storage: MemoryStorage) -> None:
    calls: list[str] = []
    agent = make_agent(storage, calls)
    agent.start({"goal": "ship"}, run_id="root")
    calls.clear()
    branches = kx.fan_out(agent, "root", step="draft", results=["mine", {"a": 1}])
    assert [r["draft"] for r in branches.frame["result"]] == ["mine", {"a": 1}]
    assert calls == []  # the plan replayed, the draft edited: nothing called
    entries = branches.journals.entries
    assert entries[entries.edited].run_id.tolist() == branches.run_ids
    again = kx.fan_out(agent, "root", step="draft", results=["mine", {"a": 1}])
    assert again.frame["status"].tolist() == ["success", "success"]
    with pytest.raises(InvalidArgumentError, match='with the edited result "mine", not'):
        kx.fan_out(agent, "root", step="draft", results=["yours", {"a": 1}])


def chat_agent(storage: Storage, calls: list[str], version: str | None = None) -> Any:
    """plan, then a model call ("chat", an OpenAI chat completion), then "finish"."""

    @kassette(storage=storage, version=version)
    def agent(ctx: Any, task: Any) -> str:
        ctx.step("plan", lambda: "plan")

        def chat() -> dict[str, Any]:
            calls.append(ctx.run_id)
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
            }

        reply = ctx.step("chat", chat)
        return str(ctx.step("finish", lambda: f"{version}: {reply['choices'][0]['message']}"))

    return agent


def test_a_fan_out_of_answer_texts_at_a_model_call_is_its_own_on_a_re_call() -> None:
    """A text edit is recorded as a response carrying it: the re-call compares what the fork
    records, not the text (issue 32, item 6)."""
    storage, calls = MemoryStorage(), []
    agent = chat_agent(storage, calls)
    agent.start(None, run_id="root")
    first = kx.fan_out(agent, "root", step="chat", results=["yes", "no"], progress=False)
    assert first.frame["status"].tolist() == ["success", "success"]
    again = kx.fan_out(agent, "root", step="chat", results=["yes", "no"], progress=False)
    assert again.frame["result"].tolist() == first.frame["result"].tolist()
    assert calls == ["root"]  # the edits are never asked of the model
    with pytest.raises(InvalidArgumentError, match=r'branch with the edited result \{"id"'):
        kx.fan_out(agent, "root", step="chat", results=["yes", "maybe"], progress=False)


def test_a_fan_out_of_workflow_versions_is_its_own_on_a_re_call() -> None:
    storage, calls = MemoryStorage(), []
    one, two = chat_agent(storage, calls, "v1"), chat_agent(storage, calls, "v2")
    one.start(None, run_id="root")
    first = kx.fan_out(one, "root", step="finish", workflows=[one, two], progress=False)
    assert [r.split(":")[0] for r in first.frame["result"]] == ["v1", "v2"]
    again = kx.fan_out(one, "root", step="finish", workflows=[one, two], progress=False)
    assert again.frame["result"].tolist() == first.frame["result"].tolist()
    with pytest.raises(InvalidArgumentError, match=r"root\.finish\.1 is a branch of workflow "):
        kx.fan_out(one, "root", step="finish", workflows=[one, one], progress=False)
    with pytest.raises(InvalidArgumentError, match=r"root\.finish\.1 is a branch of workflow "):
        kx.fan_out(one, "root", step="finish", n=2, progress=False)


def test_run_results_are_what_the_invocations_returned_and_results_is_deprecated() -> None:
    storage, calls = MemoryStorage(), []
    agent = chat_agent(storage, calls)
    agent.start(None, run_id="root")
    branches = kx.fan_out(agent, "root", step="chat", n=2, progress=False)
    assert [r.run_id for r in branches.run_results if r] == ["root.chat.0", "root.chat.1"]
    with pytest.warns(DeprecationWarning, match="use Branches.run_results"):
        assert branches.results == branches.run_results


def test_a_branch_that_does_not_replay_a_copied_step_reports_it(storage: MemoryStorage) -> None:
    agent = make_agent(storage)
    agent.start({"goal": "ship"}, run_id="root")

    @kassette(storage=storage)
    def renamed(ctx: Any, task: dict[str, Any]) -> str:
        ctx.step("planning", lambda: "renamed")  # was "plan"
        return str(ctx.step("draft", lambda: "d"))

    branches = kx.fan_out(agent, "root", step="draft", workflows=[agent, renamed])
    assert branches.frame["unreplayed"].tolist() == [[], ["plan"]]


@pytest.mark.parametrize(
    ("value", "named"), [(math.nan, "Out of range float"), ({1, 2}, "set"), (b"yes", "bytes")]
)
def test_resume_refuses_a_value_replay_could_not_read_and_names_it(value: Any, named: str) -> None:
    approving = make_agent(MemoryStorage())
    approving.start({"goal": "ship", "approve": True}, run_id="root")
    waiting = kx.fan_out(approving, "root", step="draft", n=2)
    with pytest.raises(NotSerializableError, match=rf"resumed for 'approval'.*{named}"):
        waiting.resume("approval", value)
    assert waiting.frame["status"].tolist() == ["suspended"] * 2
    waiting.resume("approval", ("yes", 1))  # a tuple comes back as replay will read it: a list
    assert [r["verdict"] for r in waiting.frame["result"]] == [["yes", 1]] * 2
