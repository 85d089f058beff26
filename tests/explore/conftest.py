"""Fixtures for kassette.explore: one store holding every shape of run a journal can take.

`scenario` runs a small agent workflow (with a fake clock, so timestamps are known) into a
fresh storage and returns it with the ids of the runs it made:

    single      plan, implement, complete
    failed      ... the workflow raises after implementing
    suspended   ... waits for "review" (pending)
    resumed     ... waited for "review", was resumed, completed (two sessions)
    canceled    ... waited for "review", was canceled
    parallel    a parallel block of two branches, then complete
    retried     a step that failed once before succeeding (attempts: 2), and a durable sleep
    forked      a fork of `single` at step "implement", completed
    refork      a fork of `forked` just before its `complete` (offset 4), completed
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage, MemoryStorage, Retry, Storage, Workflow, kassette
from kassette.testing import FakeClock

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = [
    "single",
    "failed",
    "suspended",
    "resumed",
    "canceled",
    "parallel",
    "retried",
    "forked",
    "refork",
]


@dataclass
class Scenario:
    storage: Storage
    clock: FakeClock
    workflow: Workflow[Any, Any]


def make_agent(storage: Storage, clock: FakeClock) -> Workflow[Any, Any]:
    flaky = {"calls": 0}

    def sometimes_fails() -> str:
        flaky["calls"] += 1
        if flaky["calls"] == 1:
            raise ConnectionError("try again")
        return "ok"

    @kassette(storage=storage, clock=clock, version="agent-v1")
    def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        plan = ctx.step("plan", lambda: {"goal": task["goal"], "steps": 2})
        clock.advance(1.5)
        if task.get("parallel"):
            ctx.parallel(
                {
                    "left": lambda branch: branch.step("fetch", lambda: "L"),
                    "right": lambda branch: branch.step("fetch", lambda: "R"),
                },
                name="gather",
            )
        if task.get("flaky"):
            ctx.step("call", sometimes_fails, retry=Retry(max_attempts=2, delay=0.5))
            ctx.sleep(30)
        code = ctx.step("implement", lambda: f"code for {plan['goal']} by {ctx.run_id}")
        clock.advance(2)
        if task.get("fail"):
            raise RuntimeError("2 tests failed")
        if task.get("review"):
            verdict = ctx.suspend("review", reason="please check")
            return {"code": code, "verdict": verdict}
        return {"code": code}

    return agent  # type: ignore[no-any-return]


def populate(storage: Storage) -> Scenario:
    clock = FakeClock()
    agent = make_agent(storage, clock)
    agent.start({"goal": "parse"}, run_id="single")
    agent.start({"goal": "parse", "fail": True}, run_id="failed")
    agent.start({"goal": "parse", "review": True}, run_id="suspended")
    agent.start({"goal": "parse", "review": True}, run_id="resumed")
    clock.advance(60)
    agent.resume("resumed", "review", {"approved": True})
    agent.start({"goal": "parse", "review": True}, run_id="canceled")
    agent.cancel("canceled", "not needed")
    agent.start({"goal": "fan out", "parallel": True}, run_id="parallel")
    agent.start({"goal": "flaky", "flaky": True}, run_id="retried")
    agent.fork("single", step="implement", new_run_id="forked")
    agent.fork("forked", offset=4, new_run_id="refork")
    return Scenario(storage, clock, agent)


@pytest.fixture
def scenario() -> Scenario:
    return populate(MemoryStorage())


@pytest.fixture
def local_scenario(tmp_path: Path) -> Scenario:
    return populate(LocalStorage(tmp_path / "store"))
