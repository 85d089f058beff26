"""Step retries and durable sleep, for `def` and `async def` workflows, on a FakeClock."""

from __future__ import annotations

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

from kassette import ErrorInfo, ReplayMismatchError, Retry, RunNotFoundError, RunResult
from kassette.testing import FakeClock


def _flaky(failures: int, calls: list[int]) -> Any:
    """A step function that raises `failures` times, then returns the attempt number."""

    def fn() -> int:
        calls.append(len(calls) + 1)
        if len(calls) <= failures:
            raise ConnectionError(f"attempt {len(calls)} failed")
        return len(calls)

    return fn


def _retrying(kind: str, storage: Any, clock: FakeClock, fn: Any, retry: Retry | None) -> Any:
    def body(ctx: Any, _: Any) -> Any:
        return ctx.step("call-api", fn, retry=retry)

    async def abody(ctx: Any, _: Any) -> Any:
        return await ctx.step("call-api", fn, retry=retry)

    return make_workflow(kind, body, abody, storage=storage, clock=clock)


# -- retry -----------------------------------------------------------------------------------


def test_retry_until_success_journals_attempts(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[int] = []
    retry = Retry(max_attempts=3, delay=1, backoff_rate=2)
    wf = _retrying(kind, storage, clock, _flaky(2, calls), retry)
    assert wf.start(run_id="r") == RunResult("r", "success", result=3)
    assert calls == [1, 2, 3]
    assert clock.slept == [1, 2]
    step = step_entries(storage, "r")["call-api"]
    assert step["attempts"] == 3 and step["result"] == 3
    assert isinstance(step["durationMs"], float | int) and step["durationMs"] >= 0


def test_first_try_success_writes_no_attempts(kind: str, storage: Any, clock: FakeClock) -> None:
    wf = _retrying(kind, storage, clock, _flaky(0, []), Retry())
    assert wf.start(run_id="r").result == 1
    assert "attempts" not in step_entries(storage, "r")["call-api"]
    assert clock.slept == []


def test_max_delay_caps_the_backoff(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[int] = []
    retry = Retry(max_attempts=5, delay=1, backoff_rate=10, max_delay=5)
    wf = _retrying(kind, storage, clock, _flaky(4, calls), retry)
    assert wf.start(run_id="r").result == 5
    assert clock.slept == [1, 5, 5, 5]


def test_exhausted_retries_fail_the_run(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[int] = []
    wf = _retrying(kind, storage, clock, _flaky(10, calls), Retry(max_attempts=3, delay=1))
    result = wf.start(run_id="r")
    assert result == RunResult(
        "r", "failed", error=ErrorInfo("ConnectionError", "attempt 3 failed")
    )
    assert calls == [1, 2, 3] and clock.slept == [1, 2]
    assert types(storage, "r") == ["start", "error"]
    assert entries(storage, "r")[-1]["error"]["name"] == "ConnectionError"
    assert wf.status("r").status == "failed"


def test_no_retry_by_default(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[int] = []
    wf = _retrying(kind, storage, clock, _flaky(1, calls), None)
    assert wf.start(run_id="r").status == "failed"
    assert calls == [1] and clock.slept == []


def test_kassette_errors_and_base_exceptions_are_not_retried(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    calls: list[str] = []

    def lookup() -> Any:
        calls.append("lookup")
        raise RunNotFoundError("run other not found", run_id="other")

    def crash() -> Any:
        calls.append("crash")
        raise Crash

    wf = _retrying(kind, storage, clock, lookup, Retry(max_attempts=3))
    with pytest.raises(RunNotFoundError):
        wf.start(run_id="r1")
    wf = _retrying(kind, storage, clock, crash, Retry(max_attempts=3))
    with pytest.raises(Crash):
        wf.start(run_id="r2")
    assert calls == ["lookup", "crash"] and clock.slept == []
    assert types(storage, "r1") == ["start"] and types(storage, "r2") == ["start"]


def test_async_step_fn_is_retried(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[int] = []
    flaky = _flaky(1, calls)

    async def fn() -> int:
        return flaky()

    wf = _retrying(kind, storage, clock, fn, Retry(max_attempts=2, delay=0.5))
    assert wf.start(run_id="r").result == 2
    assert clock.slept == [0.5]


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_attempts": 0},
        {"delay": -1},
        {"backoff_rate": 0.5},
        {"max_delay": -1},
    ],
)
def test_bad_retry_policies(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Retry(**arguments)


# -- sleep -----------------------------------------------------------------------------------


class CrashingClock(FakeClock):
    """A FakeClock on which the process 'dies' the first time anything really waits."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_next_sleep = True

    def sleep(self, seconds: float) -> None:
        if self.crash_next_sleep and seconds > 0:
            self.crash_next_sleep = False
            raise Crash
        super().sleep(seconds)


def _sleeper(kind: str, storage: Any, clock: FakeClock, calls: list[str]) -> Any:
    def body(ctx: Any, seconds: float) -> Any:
        ctx.step("before", lambda: calls.append("before"))
        ctx.sleep(seconds)
        ctx.step("after", lambda: calls.append("after"))
        return ctx.suspend("done")

    async def abody(ctx: Any, seconds: float) -> Any:
        await ctx.step("before", lambda: calls.append("before"))
        await ctx.sleep(seconds)
        await ctx.step("after", lambda: calls.append("after"))
        return await ctx.suspend("done")

    return make_workflow(kind, body, abody, storage=storage, clock=clock)


def test_sleep_is_journaled_with_its_wake_time(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _sleeper(kind, storage, clock, calls)
    assert wf.start(90, run_id="r").status == "suspended"
    assert clock.slept == [90]
    sleep = step_entries(storage, "r")["sleep"]
    assert sleep["kind"] == "sleep" and sleep["name"] == "sleep"
    assert sleep["result"] == {"wakeAt": "2026-01-01T00:01:30.000Z"}
    assert sleep["offset"] < step_entries(storage, "r")["after"]["offset"]

    clock.advance(10)
    assert wf.resume("r", "done", "ok").result == "ok"
    assert clock.slept == [90]  # a finished sleep is not slept again
    assert calls == ["before", "after"]


def test_sleep_after_a_crash_waits_only_the_rest(kind: str, storage: Any) -> None:
    clock = CrashingClock()
    calls: list[str] = []
    wf = _sleeper(kind, storage, clock, calls)
    with pytest.raises(Crash):
        wf.start(100, run_id="r")
    assert types(storage, "r") == ["start", "step", "step"]  # `before` and the sleep
    assert step_entries(storage, "r")["sleep"]["result"]["wakeAt"] == "2026-01-01T00:01:40.000Z"

    clock.advance(30)  # the process comes back 30 s later
    assert wf.start(run_id="r").status == "suspended"
    assert clock.slept == [70]
    assert calls == ["before", "after"]


def test_sleep_past_its_wake_time_does_not_wait(kind: str, storage: Any) -> None:
    clock = CrashingClock()
    wf = _sleeper(kind, storage, clock, [])
    with pytest.raises(Crash):
        wf.start(100, run_id="r")
    clock.advance(500)
    assert wf.start(run_id="r").status == "suspended"
    assert clock.slept == []


def test_sleep_ids_count_and_zero_sleeps(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        ctx.sleep(0)
        ctx.sleep(1.5)
        return "woke"

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.sleep(0)
        await ctx.sleep(1.5)
        return "woke"

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").result == "woke"
    steps = step_entries(storage, "r")
    assert list(steps) == ["sleep", "sleep#2"]
    assert steps["sleep#2"]["result"] == {"wakeAt": "2026-01-01T00:00:01.500Z"}
    assert clock.slept == [1.5]


@pytest.mark.parametrize("seconds", [-1, "10", None])
def test_bad_sleep_is_a_value_error(
    kind: str, storage: Any, clock: FakeClock, seconds: Any
) -> None:
    wf = _sleeper(kind, storage, clock, [])
    with pytest.raises(ValueError, match="sleep"):
        wf.start(seconds, run_id="r")
    assert types(storage, "r") == ["start", "step"]
    assert wf.status("r").status == "running"


# -- replay mismatches -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "now"),
    [("step", "sleep"), ("sleep", "step"), ("step", "suspend"), ("suspend", "step")],
)
def test_journal_and_code_disagreeing_at_an_id(
    kind: str, storage: Any, clock: FakeClock, recorded: str, now: str
) -> None:
    """v1 journaled one kind of call at id `sleep`; v2 makes another kind of call there."""
    code = {"call": recorded}

    def body(ctx: Any, _: Any) -> Any:
        if code["call"] == "step":
            ctx.step("sleep", lambda: "a step named sleep")
        elif code["call"] == "sleep":
            ctx.sleep(5)
        else:
            ctx.suspend("sleep")
        return ctx.suspend("hold")

    async def abody(ctx: Any, _: Any) -> Any:
        if code["call"] == "step":
            await ctx.step("sleep", lambda: "a step named sleep")
        elif code["call"] == "sleep":
            await ctx.sleep(5)
        else:
            await ctx.suspend("sleep")
        return await ctx.suspend("hold")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    if recorded == "suspend":
        wf.resume("r", "sleep", "delivered")
    code["call"] = now
    before, before_types = raw(storage, "r"), types(storage, "r")
    with pytest.raises(ReplayMismatchError) as caught:
        wf.start(run_id="r")
    assert caught.value.step_id == "sleep" and caught.value.run_id == "r"
    assert caught.value.offset == 1
    assert raw(storage, "r").startswith(before)
    assert types(storage, "r") == [*before_types, "start"]  # only the session's own start
    assert wf.status("r").error is None


def test_backoff_doubles_on_the_clock_up_to_its_cap_and_its_budget() -> None:
    """`kassette._clock.Backoff`, the one backoff of the append retry, the read back, the cancel,
    koto's wait for a session and the lean append's wait for its lease: it waits on the
    clock it is given, never on `time.sleep`."""
    from kassette._clock import Backoff

    clock = FakeClock()
    counted = Backoff(clock, 0.05, most=0.15, attempts=4)
    assert [counted.wait() for _ in range(5)] == [True, True, True, True, False]
    assert clock.slept == [0.05, 0.1, 0.15, 0.15]
    clock = FakeClock()
    timed = Backoff(clock, 1.0, seconds=6.0)
    while timed.wait():
        pass
    assert clock.slept == [1.0, 2.0, 4.0] and timed.taken == 3  # 7 s >= 6 s: no fourth wait
    clock = FakeClock()
    jittered = Backoff(clock, 0.4, most=0.4, jitter=True)
    for _ in range(20):
        jittered.pause()
    assert all(0 <= slept <= 0.4 for slept in clock.slept) and len(set(clock.slept)) > 1
