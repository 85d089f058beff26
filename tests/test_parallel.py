"""`ctx.parallel`: concurrent branches (threads for `def`, tasks for `async def`), their step
ids, suspends inside branches, errors, and replay checks of the block's shape."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from workflow_support import (  # noqa: F401 - the *_fixture names are pytest fixtures
    Crash,
    clock_fixture,
    entries,
    kind_fixture,
    make_workflow,
    raw,
    step_entries,
    storage_fixture,
    types,
)

from kassette import (
    ErrorInfo,
    EventNameCollisionError,
    ReplayMismatchError,
    RunResult,
)
from kassette.core import read_journal
from kassette.testing import FakeClock

HANDSHAKE_SECONDS = 10


def _gather(kind: str, storage: Any, clock: FakeClock, calls: list[str]) -> Any:
    """Two branches that each record a `fetch` step, then combine their results."""

    def fetch(branch: str) -> Any:
        def fn() -> dict[str, str]:
            calls.append(branch)
            return {"source": branch}

        return fn

    def body(ctx: Any, _: Any) -> Any:
        results = ctx.parallel(
            {
                "credit": lambda c: c.step("fetch", fetch("credit")),
                "fraud": lambda c: [c.step("fetch", fetch("fraud")), c.step("fetch", lambda: 2)],
            },
            name="gather",
        )
        return {"results": results, "after": ctx.step("fetch", lambda: "root")}

    async def abody(ctx: Any, _: Any) -> Any:
        async def credit(c: Any) -> Any:
            return await c.step("fetch", fetch("credit"))

        async def fraud(c: Any) -> Any:
            return [await c.step("fetch", fetch("fraud")), await c.step("fetch", lambda: 2)]

        results = await ctx.parallel({"credit": credit, "fraud": fraud}, name="gather")
        return {"results": results, "after": await ctx.step("fetch", lambda: "root")}

    return make_workflow(kind, body, abody, storage=storage, clock=clock)


def test_results_by_branch_and_scoped_step_ids(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _gather(kind, storage, clock, calls)
    result = wf.start(run_id="r")
    assert result == RunResult(
        "r",
        "success",
        result={
            "results": {"credit": {"source": "credit"}, "fraud": [{"source": "fraud"}, 2]},
            "after": "root",
        },
    )
    steps = step_entries(storage, "r")
    assert set(steps) == {
        "gather",
        "gather/credit/fetch",
        "gather/fraud/fetch",
        "gather/fraud/fetch#2",
        "fetch",
    }
    block = steps["gather"]
    assert block["kind"] == "parallel" and block["name"] == "gather"
    assert block["result"] == {"branches": ["credit", "fraud"]}
    assert all(block["offset"] < s["offset"] for k, s in steps.items() if k != "gather")
    assert steps["gather/credit/fetch"]["name"] == "fetch"
    assert sorted(calls) == ["credit", "fraud"]


def test_fork_at_a_branch_step(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _gather(kind, storage, clock, calls)
    wf.start(run_id="src")
    source = step_entries(storage, "src")
    cut = source["gather/fraud/fetch"]["offset"]
    calls.clear()
    result = wf.fork("src", step="gather/fraud/fetch", new_run_id="dst")
    assert result.status == "success" and result.result == wf.status("src").result
    rerun = sorted(
        key.split("/")[1]
        for key, entry in source.items()
        if key.startswith("gather/") and key.endswith("/fetch") and entry["offset"] >= cut
    )
    assert "fraud" in rerun
    assert sorted(calls) == rerun  # branch steps journaled before the cut are replayed
    assert wf.status("dst").source == {"runId": "src", "fromOffset": cut}


def test_replay_of_a_block_runs_nothing_again(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []

    def body(ctx: Any, _: Any) -> Any:
        results = ctx.parallel({"a": lambda c: c.step("s", lambda: calls.append("a") or "A")})
        return [results, ctx.suspend("hold")]

    async def abody(ctx: Any, _: Any) -> Any:
        async def a(c: Any) -> Any:
            return await c.step("s", lambda: calls.append("a") or "A")

        return [await ctx.parallel({"a": a}), await ctx.suspend("hold")]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    assert wf.resume("r", "hold", 1).result == [{"a": "A"}, 1]
    assert calls == ["a"]
    assert "parallel/a/s" in step_entries(storage, "r")


def test_def_branches_run_in_threads_concurrently(storage: Any, clock: FakeClock) -> None:
    barrier = threading.Barrier(2, timeout=HANDSHAKE_SECONDS)
    threads: dict[str, int] = {}

    def meet(branch: str) -> Any:
        def fn() -> int:
            threads[branch] = threading.get_ident()
            return barrier.wait()  # both branches must be inside their step at once

        return fn

    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel(
            {
                "left": lambda c: c.step("meet", meet("left")),
                "right": lambda c: c.step("meet", meet("right")),
            }
        )

    wf = make_workflow("def", body, body, storage=storage, clock=clock)
    result = wf.start(run_id="r")
    assert result.status == "success"
    assert sorted(result.result.values()) == [0, 1]
    assert threads["left"] != threads["right"]


def test_async_branches_run_as_concurrent_tasks(storage: Any, clock: FakeClock) -> None:
    async def abody(ctx: Any, _: Any) -> Any:
        arrived = {"left": asyncio.Event(), "right": asyncio.Event()}

        def branch(me: str, other: str) -> Any:
            async def handshake() -> str:
                arrived[me].set()
                await asyncio.wait_for(arrived[other].wait(), HANDSHAKE_SECONDS)
                return f"{me} met {other}"

            async def run(c: Any) -> Any:
                return await c.step("meet", handshake)

            return run

        return await ctx.parallel(
            {"left": branch("left", "right"), "right": branch("right", "left")}
        )

    wf = make_workflow("async", abody, abody, storage=storage, clock=clock)
    result = wf.start(run_id="r")
    assert result.result == {"left": "left met right", "right": "right met left"}


def test_branch_contexts(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel({"b": lambda c: [c.run_id, c.session, c.replaying]})

    async def abody(ctx: Any, _: Any) -> Any:
        async def b(c: Any) -> Any:
            return [c.run_id, c.session, c.replaying]

        return await ctx.parallel({"b": b})

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").result == {"b": ["r", 1, False]}


def _suspending(kind: str, storage: Any, clock: FakeClock, calls: list[str]) -> Any:
    """Branch `a` waits for approval-a, `b` for approval-b, `c` just works."""

    def work(name: str) -> Any:
        def fn() -> str:
            calls.append(name)
            return name

        return fn

    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel(
            {
                "a": lambda c: [c.step("prep", work("a")), c.suspend("approval-a")],
                "b": lambda c: c.suspend("approval-b"),
                "c": lambda c: [c.step("one", work("c1")), c.step("two", work("c2"))],
            },
            name="review",
        )

    async def abody(ctx: Any, _: Any) -> Any:
        async def a(c: Any) -> Any:
            return [await c.step("prep", work("a")), await c.suspend("approval-a")]

        async def b(c: Any) -> Any:
            return await c.suspend("approval-b")

        async def c(c: Any) -> Any:
            return [await c.step("one", work("c1")), await c.step("two", work("c2"))]

        return await ctx.parallel({"a": a, "b": b, "c": c}, name="review")

    return make_workflow(kind, body, abody, storage=storage, clock=clock)


def test_a_suspending_branch_suspends_the_block(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _suspending(kind, storage, clock, calls)
    result = wf.start(run_id="r")
    assert result.status == "suspended"
    assert sorted(result.events) == ["review/a/approval-a", "review/b/approval-b"]
    assert result.event == result.events[0]
    assert sorted(calls) == ["a", "c1", "c2"]  # the others ran as far as they could
    assert set(step_entries(storage, "r")) == {
        "review",
        "review/a/prep",
        "review/c/one",
        "review/c/two",
    }
    assert sorted(wf.status("r").pending_events) == sorted(result.events)

    first = wf.resume("r", "approval-b", "yes-b")
    assert first == RunResult("r", "suspended", events=("review/a/approval-a",))
    final = wf.resume("r", "review/a/approval-a", "yes-a")
    assert final == RunResult(
        "r", "success", result={"a": ["a", "yes-a"], "b": "yes-b", "c": ["c1", "c2"]}
    )
    assert sorted(calls) == ["a", "c1", "c2"]


def test_suspended_events_come_in_branch_order(kind: str, storage: Any, clock: FakeClock) -> None:
    """`RunResult.events` follow the branches, whichever branch journaled its suspend first;
    the status lists them in journal order."""

    def b_suspended() -> bool:
        snapshot = storage.read("r")
        return snapshot is not None and b'"eventId":"review/b/approval-b"' in snapshot.data

    def wait_for_b() -> bool:
        for _ in range(HANDSHAKE_SECONDS * 100):
            if b_suspended():
                return True
            time.sleep(0.01)
        return False

    async def await_b() -> bool:
        for _ in range(HANDSHAKE_SECONDS * 100):
            if b_suspended():
                return True
            await asyncio.sleep(0.01)
        return False

    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel(
            {
                "a": lambda c: [c.step("after-b", wait_for_b), c.suspend("approval-a")],
                "b": lambda c: c.suspend("approval-b"),
            },
            name="review",
        )

    async def abody(ctx: Any, _: Any) -> Any:
        async def a(c: Any) -> Any:
            return [await c.step("after-b", await_b), await c.suspend("approval-a")]

        async def b(c: Any) -> Any:
            return await c.suspend("approval-b")

        return await ctx.parallel({"a": a, "b": b}, name="review")

    result = make_workflow(kind, body, abody, storage=storage, clock=clock).start(run_id="r")
    assert result.events == ("review/a/approval-a", "review/b/approval-b")
    assert step_entries(storage, "r")["review/a/after-b"]["result"] is True  # b went first
    pending = read_journal(storage, "r").pending_events
    assert pending == ("review/b/approval-b", "review/a/approval-a")


def test_same_event_name_in_two_branches(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel(
            {"x": lambda c: c.suspend("approve"), "y": lambda c: c.suspend("approve")}, name="p"
        )

    async def abody(ctx: Any, _: Any) -> Any:
        async def branch(c: Any) -> Any:
            return await c.suspend("approve")

        return await ctx.parallel({"x": branch, "y": branch}, name="p")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert sorted(wf.start(run_id="r").events) == ["p/x/approve", "p/y/approve"]
    before = raw(storage, "r")
    with pytest.raises(EventNameCollisionError) as caught:
        wf.resume("r", "approve", 1)
    assert caught.value.run_id == "r" and "p/x/approve" in str(caught.value)
    assert raw(storage, "r") == before

    assert wf.resume("r", "p/y/approve", "Y").events == ("p/x/approve",)
    assert wf.resume("r", "approve", "X").result == {"x": "X", "y": "Y"}  # now unambiguous


def test_a_failing_branch_fails_the_run(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []

    def broken() -> Any:
        raise KeyError("missing")

    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel(
            {
                "bad": lambda c: c.step("s", broken),
                "good": lambda c: c.step("s", lambda: calls.append("good") or 1),
            }
        )

    async def abody(ctx: Any, _: Any) -> Any:
        async def bad(c: Any) -> Any:
            return await c.step("s", broken)

        async def good(c: Any) -> Any:
            return await c.step("s", lambda: calls.append("good") or 1)

        return await ctx.parallel({"bad": bad, "good": good})

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    result = wf.start(run_id="r")
    assert result == RunResult("r", "failed", error=ErrorInfo("KeyError", "'missing'"))
    assert calls == ["good"]
    assert types(storage, "r")[-1] == "error"
    assert "parallel/good/s" in step_entries(storage, "r")


def test_a_crashing_branch_is_not_journaled(kind: str, storage: Any, clock: FakeClock) -> None:
    def crash() -> Any:
        raise Crash

    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel({"a": lambda c: c.step("s", crash)})

    async def abody(ctx: Any, _: Any) -> Any:
        async def a(c: Any) -> Any:
            return await c.step("s", crash)

        return await ctx.parallel({"a": a})

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(Crash):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start", "step"]  # the block entry only
    assert wf.status("r").status == "running"


def test_other_branch_names_on_replay(kind: str, storage: Any, clock: FakeClock) -> None:
    branches = {"names": ["a", "b"]}

    def body(ctx: Any, _: Any) -> Any:
        ctx.parallel({n: (lambda c: c.step("s", lambda: 1)) for n in branches["names"]})
        return ctx.suspend("hold")

    async def abody(ctx: Any, _: Any) -> Any:
        async def branch(c: Any) -> Any:
            return await c.step("s", lambda: 1)

        await ctx.parallel({n: branch for n in branches["names"]})
        return await ctx.suspend("hold")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    branches["names"] = ["b", "a"]  # the same branches in another order still replay
    assert wf.start(run_id="r").status == "suspended"
    branches["names"] = ["a", "c"]
    before_types = types(storage, "r")
    with pytest.raises(ReplayMismatchError) as caught:
        wf.start(run_id="r")
    assert caught.value.step_id == "parallel" and caught.value.offset == 1
    assert types(storage, "r") == [*before_types, "start"]
    assert wf.status("r").status == "suspended"


def test_a_sleep_where_the_journal_has_a_block(kind: str, storage: Any, clock: FakeClock) -> None:
    code = {"parallel": True}

    def body(ctx: Any, _: Any) -> Any:
        if code["parallel"]:
            ctx.parallel({"a": lambda c: 1}, name="sleep")
        else:
            ctx.sleep(1)
        return ctx.suspend("hold")

    async def abody(ctx: Any, _: Any) -> Any:
        async def a(c: Any) -> Any:
            return 1

        if code["parallel"]:
            await ctx.parallel({"a": a}, name="sleep")
        else:
            await ctx.sleep(1)
        return await ctx.suspend("hold")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    code["parallel"] = False
    with pytest.raises(ReplayMismatchError):
        wf.start(run_id="r")


@pytest.mark.parametrize(
    "branches",
    [{}, {"a/b": None}, {"a#2": None}, {"": None}, {"a": "not callable"}, [("a", None)]],
    ids=["empty", "slash", "hash", "blank", "not-callable", "not-a-mapping"],
)
def test_bad_blocks_are_value_errors(
    kind: str, storage: Any, clock: FakeClock, branches: Any
) -> None:
    def branch(c: Any) -> int:
        return 1

    async def abranch(c: Any) -> int:
        return 1

    def fill(fn: Any) -> Any:
        if isinstance(branches, dict):
            return {k: (fn if v is None else v) for k, v in branches.items()}
        return branches

    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel(fill(branch))

    async def abody(ctx: Any, _: Any) -> Any:
        return await ctx.parallel(fill(abranch))

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(ValueError):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start"]
    assert wf.status("r").status == "running"


def test_nested_blocks_and_block_counters(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        def outer(c: Any) -> Any:
            return c.parallel({"x": lambda cc: cc.step("s", lambda: "deep")}, name="inner")

        first = ctx.parallel({"a": outer}, name="outer")
        second = ctx.parallel({"a": lambda c: c.step("s", lambda: "again")}, name="outer")
        return [first, second]

    async def abody(ctx: Any, _: Any) -> Any:
        async def x(cc: Any) -> Any:
            return await cc.step("s", lambda: "deep")

        async def outer(c: Any) -> Any:
            return await c.parallel({"x": x}, name="inner")

        async def again(c: Any) -> Any:
            return await c.step("s", lambda: "again")

        first = await ctx.parallel({"a": outer}, name="outer")
        second = await ctx.parallel({"a": again}, name="outer")
        return [first, second]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").result == [{"a": {"x": "deep"}}, {"a": "again"}]
    assert [e["stepId"] for e in entries(storage, "r") if e["type"] == "step"] == [
        "outer",
        "outer/a/inner",
        "outer/a/inner/x/s",
        "outer#2",
        "outer#2/a/s",
    ]


def test_sleeping_branches(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return ctx.parallel({"slow": lambda c: c.sleep(30), "fast": lambda c: c.sleep(5)})

    async def abody(ctx: Any, _: Any) -> Any:
        async def slow(c: Any) -> Any:
            return await c.sleep(30)

        async def fast(c: Any) -> Any:
            return await c.sleep(5)

        return await ctx.parallel({"slow": slow, "fast": fast})

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").result == {"slow": None, "fast": None}
    steps = step_entries(storage, "r")
    assert steps["parallel/slow/sleep"]["kind"] == "sleep"
    assert steps["parallel/fast/sleep"]["kind"] == "sleep"
    # each branch waits for its own wake-up time; on a fake clock one branch's sleep moves
    # time for the other, so how many sleeps remain depends on who went first, but the run
    # waited for the longest one
    assert 1 <= len(clock.slept) <= 2 and 30 <= sum(clock.slept) <= 35
