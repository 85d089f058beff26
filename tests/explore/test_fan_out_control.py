"""Bounding and watching a fan-out: `max_workers`, `budget`, `progress`, prefix collisions,
and `best` with nothing scored. (Interrupts, with real processes: test_fan_out_interrupt.py.)"""

from __future__ import annotations

import asyncio
import io
import os
import pty
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kassette import InvalidArgumentError, MemoryStorage, Storage, kassette
from kassette import explore as kx
from kassette.core import read_journal, run_status
from kassette.explore._progress import Progress, Spent, TerminalBar, display_for
from kassette.explore._running import Stop

BARRIER_LIMIT_S = 60  # a bound: a barrier that never fills breaks and fails the branch
TOKENS_PER_CALL = 100


class Peak:
    """How many branches are inside a step at once, at most."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def paired_agent(storage: Storage, peak: Peak, barrier: threading.Barrier) -> Any:
    """Each branch's step waits for a second branch (so at least two run at once)."""

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> str:
        ctx.step("plan", lambda: "plan")

        def work() -> str:
            if ctx.run_id != "root":  # the source runs alone
                with peak:
                    barrier.wait(BARRIER_LIMIT_S)
            return ctx.run_id

        return str(ctx.step("work", work))

    return agent


@pytest.mark.parametrize("pool", [None, 8])
def test_max_workers_caps_the_branches_running_at_once(pool: int | None) -> None:
    storage, peak, barrier = MemoryStorage(), Peak(), threading.Barrier(2)
    agent = paired_agent(storage, peak, barrier)
    agent.start(None, run_id="root")
    executor = ThreadPoolExecutor(pool) if pool else None
    try:
        branches = kx.fan_out(
            agent, "root", step="work", n=8, max_workers=2, executor=executor, progress=False
        )
    finally:
        if executor is not None:
            executor.shutdown()
    assert branches.frame["status"].tolist() == ["success"] * 8
    assert peak.most == 2  # two met at the barrier; a third never ran beside them


def test_max_workers_caps_async_branches_too() -> None:
    storage, peak = MemoryStorage(), Peak()

    @kassette(storage=storage)
    async def agent(ctx: Any, task: Any) -> str:
        async def work() -> str:
            with peak:
                for _ in range(5):  # yield to the loop: other tasks may start meanwhile
                    await asyncio.sleep(0)
            return ctx.run_id

        await ctx.step("plan", lambda: "plan")
        return str(await ctx.step("work", work))

    asyncio.run(agent.start(None, run_id="root"))
    branches = kx.fan_out(agent, "root", step="work", n=6, max_workers=1, progress=False)
    assert branches.frame["status"].tolist() == ["success"] * 6
    assert peak.most == 1
    with pytest.raises(InvalidArgumentError, match="max_workers"):
        kx.fan_out(agent, "root", step="work", n=2, max_workers=0)


def completion(tokens: int) -> dict[str, Any]:
    """An OpenAI chat completion, as the integration journals it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10, "total_tokens": tokens},
    }


def spending_agent(storage: Storage, calls: list[str]) -> Any:
    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> str:
        ctx.step("plan", lambda: completion(TOKENS_PER_CALL))  # the source's: not the fan-out's

        def call() -> dict[str, Any]:
            calls.append(ctx.run_id)
            return completion(TOKENS_PER_CALL)

        for _ in range(3):
            ctx.step("chat", call)
        return str(ctx.step("finish", lambda: "done"))

    return agent


def test_a_budget_stops_new_steps_once_the_fan_outs_own_calls_reach_it() -> None:
    storage, calls = MemoryStorage(), []
    agent = spending_agent(storage, calls)
    agent.start(None, run_id="root")
    calls.clear()
    budget = {"tokens": 250}
    branches = kx.fan_out(agent, "root", offset=2, n=4, max_workers=1, budget=budget)
    # branch 0's calls: 100, 200 (< 250, so a third starts), 300: its next step is refused
    assert calls == ["root.2.0"] * 3
    frame = branches.frame
    assert frame["status"].tolist() == ["stopped"] * 4
    assert frame["stopped_by"].tolist() == ["budget"] * 4
    assert {run_status(storage, r).status for r in ["root.2.0"]} == {"running"}  # left open
    again = kx.fan_out(agent, "root", offset=2, n=4, max_workers=1, budget=budget)
    assert calls == ["root.2.0"] * 3  # what earlier calls spent counts: nothing more runs
    assert again.frame["stopped_by"].tolist() == ["budget"] * 4
    more = kx.fan_out(agent, "root", offset=2, n=4, max_workers=1, budget={"tokens": 650})
    assert calls == ["root.2.0"] * 3 + ["root.2.1"] * 3 + ["root.2.2"] * 1
    assert more.frame["status"].tolist() == ["success", "success", "stopped", "stopped"]
    with pytest.raises(InvalidArgumentError, match="budget"):
        kx.fan_out(agent, "root", offset=2, n=4, budget={"dollars": 1})


def test_a_dollar_budget_counts_the_calls_at_their_known_price() -> None:
    from kassette._llm_calls import read_llm_result
    from kassette.explore._cost import call_costs

    call = read_llm_result(completion(TOKENS_PER_CALL))
    assert call is not None
    [price] = call_costs([(call.provider, call.model, call.usage)])
    assert price is not None and price > 0  # gpt-4o-mini is in the price database
    storage, calls = MemoryStorage(), []
    agent = spending_agent(storage, calls)
    agent.start(None, run_id="root")
    calls.clear()
    branches = kx.fan_out(agent, "root", offset=2, n=2, budget={"usd": 2.5 * price})
    assert calls == ["root.2.0"] * 3  # 1x, 2x (< 2.5x: a third starts), 3x: stop
    assert branches.frame["stopped_by"].tolist() == ["budget"] * 2


def test_a_default_prefix_holding_another_kind_of_fan_out_is_refused_naming_a_prefix() -> None:
    storage, calls = MemoryStorage(), []
    agent = spending_agent(storage, calls)
    agent.start(None, run_id="root")
    kx.fan_out(agent, "root", offset=2, params=[{"t": 0.1}, {"t": 0.9}], progress=False)
    calls.clear()
    with pytest.raises(InvalidArgumentError, match=r"root\.2\.0 is a branch with params") as n:
        kx.fan_out(agent, "root", offset=2, n=3, progress=False)
    assert "pass prefix='root.2.n'" in str(n.value)
    with pytest.raises(InvalidArgumentError, match="not a branch with the edited result"):
        kx.fan_out(agent, "root", offset=2, results=["an answer"], progress=False)
    with pytest.raises(InvalidArgumentError, match=r"params \{\"t\": 0\.1\}, not .*0\.5"):
        kx.fan_out(agent, "root", offset=2, params=[{"t": 0.5}], progress=False)
    assert calls == []  # refused before anything ran
    samples = kx.fan_out(agent, "root", offset=2, n=3, prefix="root.2.n", progress=False)
    assert samples.frame["status"].tolist() == ["success"] * 3
    with pytest.raises(InvalidArgumentError, match="is a sample"):
        kx.fan_out(agent, "root", offset=2, params=[{"t": 3}], prefix="root.2.n")
    more = kx.fan_out(agent, "root", offset=2, n=4, prefix="root.2.n", progress=False)
    assert more.frame["status"].tolist() == ["success"] * 4  # more samples of the same kind


def test_best_without_a_scored_branch_warns_or_raises() -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> str:
        ctx.step("plan", lambda: "plan")
        raise RuntimeError("every branch fails")

    agent.start(None, run_id="root")
    branches = kx.fan_out(agent, "root", offset=2, n=3, score=lambda r: 1.0, progress=False)
    with pytest.warns(RuntimeWarning, match=r"no branch has a score \(3 failed"):
        assert branches.best(3) == []
    unscored = kx.fan_out(agent, "root", offset=2, n=3, progress=False)
    with pytest.raises(InvalidArgumentError, match="pass score= to fan_out"):
        unscored.best()


def test_the_terminal_bar_counts_branches_and_tokens() -> None:
    stream = io.StringIO()
    bar = TerminalBar(stream)
    stop = Stop()
    from kassette._engine import RunResult
    from kassette._state import ErrorInfo
    from kassette.explore._running import Halted, Raised

    outcomes = [
        RunResult("a", "success"),
        RunResult("b", "suspended", events=("approval",)),
        Raised("c", ErrorInfo("KeyError", "x")),
        Halted("d", "budget"),
    ]
    stop.set("budget")
    progress = Progress.of(6, 2, outcomes, Spent(3, 1234, 0.0), stop)
    bar.close(progress)
    line = stream.getvalue()
    # the stopped branch is not done: 3 of 6 are (issue 31, section 4)
    assert line.startswith("\rfan-out [############............] 3/6 done")
    assert "2 running · 1 succeeded · 1 failed · 1 suspended · 1 stopped" in line
    assert "3 model calls, 1,234 tokens" in line and "stopping (budget)" in line
    bar.close(Progress.of(4, 0, outcomes, Spent(3, 1234, 0.0), stop))
    assert stream.getvalue().endswith(
        "[##################......] 3/4 done · 0 running · "
        "1 succeeded · 1 failed · 1 suspended · 1 stopped · 3 model calls, 1,234 tokens · "
        "stopped by budget\x1b[K\n"
    )
    assert line.endswith("\n")
    assert display_for(False) is None
    assert display_for(True) is None  # pytest's stderr is not a terminal, nor a notebook


def test_on_a_terminal_the_bar_goes_to_stderr_and_progress_false_silences_it() -> None:
    code = """if True:
        import sys
        from kassette import MemoryStorage, kassette
        from kassette import explore as kx

        @kassette(storage=MemoryStorage())
        def agent(ctx, task):
            ctx.step("plan", lambda: "plan")
            return ctx.step("draft", lambda: "draft")

        agent.start(None, run_id="root")
        kx.fan_out(agent, "root", step="draft", n=3, progress=sys.argv[1] == "on")
    """
    for setting in ("on", "off"):
        leader, follower = pty.openpty()  # stderr is a terminal; stdout a pipe
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [sys.executable, "-c", code, setting],
            stderr=follower,
            stdout=subprocess.PIPE,
            env=env,
            timeout=120,
            check=True,
        )
        os.close(follower)
        shown = b""
        for _ in range(1000):  # until the terminal reports the other side closed
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        os.close(leader)
        assert done.stdout == b""  # the bar never goes to stdout
        if setting == "on":
            assert b"\rfan-out [########################] 3/3 done" in shown, shown
            assert b"3 succeeded" in shown
        else:
            assert shown == b"", shown


class CountingStorage(MemoryStorage):
    """A `MemoryStorage` that counts its reads."""

    reads = 0

    def read(self, run_id: str) -> Any:
        self.reads += 1
        return super().read(run_id)


def test_the_interrupt_and_the_branches_summary_read_no_journal() -> None:
    """Building `FanOutInterrupted` used to load every branch's journal into pandas (3.8 s
    after a 0.3 s step, issue 32 item 8): its counts come from the outcomes in hand."""
    from kassette._engine import RunResult
    from kassette._state import ErrorInfo
    from kassette.explore._running import Branch, Halted, Raised

    storage = CountingStorage()
    agent = kassette(lambda ctx, task: None, storage=storage)
    branches = [Branch(agent, "root", 2, f"root.2.{n}") for n in range(4)]
    outcomes = [
        RunResult("root.2.0", "success"),
        RunResult("root.2.1", "failed", error=ErrorInfo("KeyError", "x")),
        Raised("root.2.2", ErrorInfo("ReplayMismatchError", "y")),
        Halted("root.2.3", "interrupt"),
    ]
    found = kx.Branches(branches, outcomes, score=None, executor=None)
    error = kx.FanOutInterrupted(found)
    assert str(error) == "fan-out of root interrupted: 3 done (1 succeeded, 2 failed), 1 stopped"
    assert repr(found) == "<Branches of root: 4 (3 done (1 succeeded, 2 failed), 1 stopped)>"
    shown = "\n".join(error._render_traceback_())
    assert "Run the same kx.fan_out(...) call again to continue" in shown
    assert "branches = sys.last_value.branches" in shown
    assert storage.reads == 0


def test_a_dollar_budget_counts_a_branchs_last_call_before_the_next_branch_starts() -> None:
    """Each branch's model call is its last step: the budget used to see it only at a later
    step boundary, so all 12 branches ran (issue 30, section 4)."""
    from kassette._llm_calls import read_llm_result as read_model_result
    from kassette.explore._cost import call_costs

    call = read_model_result(completion(TOKENS_PER_CALL))
    assert call is not None
    [price] = call_costs([(call.provider, call.model, call.usage)])
    assert price is not None
    storage, calls = MemoryStorage(), []

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> Any:
        ctx.step("plan", lambda: "plan")

        def chat() -> dict[str, Any]:
            calls.append(ctx.run_id)
            return completion(TOKENS_PER_CALL)

        return ctx.step("chat", chat)

    agent.start(None, run_id="root")
    calls.clear()
    branches = kx.fan_out(
        agent, "root", step="chat", n=12, max_workers=1, budget={"usd": 2.5 * price}
    )
    assert calls == ["root.chat.0", "root.chat.1", "root.chat.2"]  # 1x, 2x, then 3x > 2.5x
    assert branches.frame["status"].tolist() == ["success"] * 3 + ["stopped"] * 9
    assert set(branches.frame["stopped_by"][3:]) == {"budget"}


def test_a_budget_sees_every_call_journaled_before_a_step_starts() -> None:
    """Branch 1 waits until branch 0's call (its last step) is journaled, then comes to its
    own call: with a budget of one call, that step must not start. It used to count only its
    own journal at its step boundaries and the others' at the next look (0.2 s), so calls
    passed the budget by more than the calls in flight (issue 32, item 9)."""
    storage, calls = MemoryStorage(), []

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> Any:
        ctx.step("plan", lambda: "plan")

        def wait() -> str:
            if ctx.run_id.endswith(".1"):
                for _ in range(BARRIER_LIMIT_S * 1000):  # until branch 0's call is journaled
                    if any(
                        e.get("stepId") == "chat"
                        for e in read_journal(storage, "root.wait.0").entries
                        if e["offset"] > 2
                    ):
                        break
                    time.sleep(0.001)
            return "waited"

        def chat() -> dict[str, Any]:
            calls.append(ctx.run_id)
            return completion(TOKENS_PER_CALL)

        ctx.step("wait", wait)
        return ctx.step("chat", chat)

    agent.start(None, run_id="root")
    calls.clear()
    budget = {"tokens": TOKENS_PER_CALL}
    branches = kx.fan_out(agent, "root", step="wait", n=2, max_workers=2, budget=budget)
    assert calls == ["root.wait.0"]
    assert branches.frame["status"].tolist() == ["success", "stopped"]
