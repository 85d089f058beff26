"""The workflow API end to end: start, retry, resume, fork, status and cancel.

Every scenario runs for a `def` and an `async def` workflow (the `kind` fixture) on memory and
local storage, with a FakeClock so nothing really waits.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from workflow_support import (  # noqa: F401 - the *_fixture names are pytest fixtures
    Crash,
    Driver,
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
    AsyncWorkflow,
    ErrorInfo,
    EventNotPendingError,
    InputMismatchError,
    KassetteError,
    ReplayMismatchError,
    RunCancelledError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    RunResult,
    RunStatus,
    TerminalRunError,
    VersionMismatchError,
    Workflow,
    kassette,
)
from kassette._engine import run_state
from kassette.core import cancel_run, fork_run, open_run
from kassette.storage._memory import MemoryStorage
from kassette.testing import FakeClock

# -- start -----------------------------------------------------------------------------------


def test_start_runs_to_success(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, ticket: dict[str, Any]) -> Any:
        analysis = ctx.step("analyze", lambda: {"severity": ticket["n"] * 2})
        return {"outcome": "resolved", "analysis": analysis}

    async def abody(ctx: Any, ticket: dict[str, Any]) -> Any:
        analysis = await ctx.step("analyze", lambda: {"severity": ticket["n"] * 2})
        return {"outcome": "resolved", "analysis": analysis}

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock, version="triage-v1")
    result = wf.start({"n": 21}, run_id="INC-4821")

    assert result == RunResult(
        run_id="INC-4821",
        status="success",
        result={"outcome": "resolved", "analysis": {"severity": 42}},
    )
    assert result.events == () and result.event is None and result.error is None
    journal = entries(storage, "INC-4821")
    assert [e["type"] for e in journal] == ["start", "step", "complete"]
    assert journal[0]["metadata"] == {"n": 21} and journal[0]["version"] == "triage-v1"
    assert journal[0]["session"] == 1 and journal[0]["timestamp"] == "2026-01-01T00:00:00.000Z"
    assert journal[1]["stepId"] == "analyze" and journal[1]["result"] == {"severity": 42}
    assert journal[2]["result"] == result.result


def test_start_without_run_id_makes_a_uuid4_hex(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return ctx.run_id

    async def abody(ctx: Any, _: Any) -> Any:
        return ctx.run_id

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    first, second = wf.start(), wf.start()
    for result in (first, second):
        assert uuid.UUID(hex=result.run_id).version == 4
        assert uuid.UUID(hex=result.run_id).hex == result.run_id
        assert result.result == result.run_id  # ctx.run_id is the run's id
    assert first.run_id != second.run_id
    assert sorted(storage.list_runs()) == sorted([first.run_id, second.run_id])
    assert entries(storage, first.run_id)[0]["metadata"] is None


def test_start_of_a_crashed_run_replays_and_continues(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    calls = {"fetch": 0, "apply": 0}

    def fetch() -> str:
        calls["fetch"] += 1
        return "data"

    def apply() -> str:
        calls["apply"] += 1
        if calls["apply"] == 1:
            raise Crash
        return "applied"

    def body(ctx: Any, _: Any) -> Any:
        return [ctx.step("fetch", fetch), ctx.step("apply", apply)]

    async def abody(ctx: Any, _: Any) -> Any:
        return [await ctx.step("fetch", fetch), await ctx.step("apply", apply)]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(Crash):
        wf.start("in", run_id="r")
    assert wf.status("r").status == "running"
    assert types(storage, "r") == ["start", "step"]

    result = wf.start(run_id="r")  # a retry needs no input: the journal has it
    assert result.status == "success" and result.result == ["data", "applied"]
    assert calls == {"fetch": 1, "apply": 2}
    assert types(storage, "r") == ["start", "step", "start", "step", "complete"]
    assert [e["session"] for e in entries(storage, "r")] == [1, 1, 2, 2, 2]
    assert wf.status("r").sessions == 2


def test_start_of_a_suspended_run_replays_and_stays_suspended(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    calls = []

    def body(ctx: Any, x: int) -> Any:
        ctx.step("prepare", lambda: calls.append(x) or x)
        return ctx.suspend("approval")

    async def abody(ctx: Any, x: int) -> Any:
        await ctx.step("prepare", lambda: calls.append(x) or x)
        return await ctx.suspend("approval")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(7, run_id="r").status == "suspended"
    again = wf.start(7, run_id="r")
    assert again == RunResult("r", "suspended", events=("approval",))
    assert calls == [7]
    assert types(storage, "r") == ["start", "step", "suspend", "start"]


def test_start_with_a_different_input_is_refused(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, x: Any) -> Any:
        return ctx.suspend("go")

    async def abody(ctx: Any, x: Any) -> Any:
        return await ctx.suspend("go")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start({"a": 1}, run_id="r")
    before = raw(storage, "r")
    with pytest.raises(InputMismatchError) as caught:
        wf.start({"a": 2}, run_id="r")
    assert caught.value.run_id == "r"
    assert raw(storage, "r") == before
    assert wf.start({"a": 1}, run_id="r").status == "suspended"  # the same input is a retry


def test_start_or_resume_with_a_different_version_is_refused(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    def body(ctx: Any, x: Any) -> Any:
        return ctx.suspend("go")

    async def abody(ctx: Any, x: Any) -> Any:
        return await ctx.suspend("go")

    v1 = make_workflow(kind, body, abody, storage=storage, clock=clock, version="v1")
    v2 = make_workflow(kind, body, abody, storage=storage, clock=clock, version="v2")
    v1.start(1, run_id="r")
    before = raw(storage, "r")
    with pytest.raises(VersionMismatchError):
        v2.start(1, run_id="r")
    with pytest.raises(VersionMismatchError):
        v2.resume("r", "go", "value")
    assert raw(storage, "r") == before
    assert v1.resume("r", "go", "value").result == "value"


@pytest.fixture(params=["completed", "failed", "canceled"])
def ended_run(request: pytest.FixtureRequest, kind: str, storage: Any, clock: FakeClock) -> Any:
    """A workflow and the id of a run of it that ended the way the parameter says."""
    ending = request.param

    def body(ctx: Any, x: Any) -> Any:
        ctx.suspend("approval")
        if ending == "failed":
            raise RuntimeError("boom")
        return "done"

    async def abody(ctx: Any, x: Any) -> Any:
        await ctx.suspend("approval")
        if ending == "failed":
            raise RuntimeError("boom")
        return "done"

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(1, run_id="r")
    if ending == "canceled":
        wf.cancel("r", "no longer needed")
    else:
        wf.resume("r", "approval", True)
    assert wf.status("r").status == ending
    return ending, wf


def test_ended_runs_refuse_start_and_resume(ended_run: Any, storage: Any) -> None:
    ending, wf = ended_run
    expected = RunCancelledError if ending == "canceled" else TerminalRunError
    before = raw(storage, "r")
    for call in (
        lambda: wf.start(1, run_id="r"),
        lambda: wf.start(run_id="r"),
        lambda: wf.resume("r", "approval", False),
        lambda: wf.resume("r", "other", False),
    ):
        with pytest.raises(expected) as caught:
            call()
        assert caught.value.run_id == "r"
        if ending != "canceled":
            assert not isinstance(caught.value, RunCancelledError)
    assert raw(storage, "r") == before


def test_unknown_run(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, x: Any) -> Any:
        return x

    async def abody(ctx: Any, x: Any) -> Any:
        return x

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    for call in (
        lambda: wf.resume("nope", "event"),
        lambda: wf.status("nope"),
        lambda: wf.cancel("nope"),
        lambda: wf.fork("nope", offset=0),
    ):
        with pytest.raises(RunNotFoundError):
            call()
    assert list(storage.list_runs()) == []


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a b"])
def test_bad_run_ids_are_value_errors(kind: str, storage: Any, clock: FakeClock, bad: str) -> None:
    def body(ctx: Any, x: Any) -> Any:
        return x

    async def abody(ctx: Any, x: Any) -> Any:
        return x

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(ValueError):
        wf.start(1, run_id=bad)
    assert list(storage.list_runs()) == []


# -- steps -----------------------------------------------------------------------------------


def test_step_ids_count_per_name(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        ctx.step("analyze", lambda: 1)
        ctx.step("analyze", lambda: 2)
        ctx.step("other", lambda: 3)
        ctx.step("analyze", lambda: 4)
        ctx.suspend("approval")
        return ctx.suspend("approval")

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.step("analyze", lambda: 1)
        await ctx.step("analyze", lambda: 2)
        await ctx.step("other", lambda: 3)
        await ctx.step("analyze", lambda: 4)
        await ctx.suspend("approval")
        return await ctx.suspend("approval")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    wf.resume("r", "approval", "first")
    assert wf.status("r").pending_events == ("approval#2",)
    steps = step_entries(storage, "r")
    assert {k: v["result"] for k, v in steps.items()} == {
        "analyze": 1,
        "analyze#2": 2,
        "other": 3,
        "analyze#3": 4,
    }
    assert all(e["name"] == k.split("#")[0] for k, e in steps.items())
    suspends = [e["eventId"] for e in entries(storage, "r") if e["type"] == "suspend"]
    assert suspends == ["approval", "approval#2"]


@pytest.mark.parametrize("bad", ["needs#fix", "a/b", ""])
@pytest.mark.parametrize("call", ["step", "suspend"])
def test_bad_names_raise_at_once_and_leave_the_run_open(
    kind: str, storage: Any, clock: FakeClock, bad: str, call: str
) -> None:
    names = {"second": bad}
    calls = []

    def first() -> str:
        calls.append("first")
        return "ok"

    def body(ctx: Any, _: Any) -> Any:
        ctx.step("first", first)
        if call == "step":
            return ctx.step(names["second"], lambda: "second")
        return ctx.suspend(names["second"])

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.step("first", first)
        if call == "step":
            return await ctx.step(names["second"], lambda: "second")
        return await ctx.suspend(names["second"])

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(ValueError, match="name"):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start", "step"]
    assert wf.status("r").status == "running"

    names["second"] = "fixed"
    result = wf.start(run_id="r")
    expected = "second" if call == "step" else None
    assert result.status == ("success" if call == "step" else "suspended")
    assert result.result == expected
    assert calls == ["first"]


def test_a_step_needs_a_callable(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return ctx.step("s", 42)

    async def abody(ctx: Any, _: Any) -> Any:
        return await ctx.step("s", 42)

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(ValueError, match="callable"):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start"]


@pytest.mark.parametrize(
    "value",
    [{1, 2}, b"bytes", object(), float("nan"), float("inf"), {"nested": [1, {2}]}],
    ids=["set", "bytes", "object", "nan", "inf", "nested-set"],
)
def test_unserialisable_step_results_are_type_errors_naming_the_step(
    kind: str, storage: Any, clock: FakeClock, value: Any
) -> None:
    produce = {"convert": lambda: value}

    def body(ctx: Any, _: Any) -> Any:
        ctx.step("load", lambda: "loaded")
        return ctx.step("convert", produce["convert"])

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.step("load", lambda: "loaded")
        return await ctx.step("convert", produce["convert"])

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(TypeError, match="'convert'"):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start", "step"]
    assert "convert" not in step_entries(storage, "r")
    assert wf.status("r").status == "running" and wf.status("r").error is None

    produce["convert"] = lambda: "converted"
    assert wf.start(run_id="r").result == "converted"


def test_unserialisable_workflow_result_or_resume_value_is_not_journaled(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    outcome: dict[str, Any] = {"value": {1, 2}}

    def body(ctx: Any, _: Any) -> Any:
        ctx.suspend("go")
        return outcome["value"]

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.suspend("go")
        return outcome["value"]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    before = raw(storage, "r")
    with pytest.raises(TypeError):
        wf.resume("r", "go", object())
    assert raw(storage, "r") == before

    with pytest.raises(TypeError, match="result"):
        wf.resume("r", "go", "ok")
    assert wf.status("r").status == "running"
    assert "error" not in types(storage, "r") and "complete" not in types(storage, "r")
    outcome["value"] = ("fixed", 1)
    assert wf.start(run_id="r").result == ["fixed", 1]


def test_live_and_replayed_values_agree(kind: str, storage: Any, clock: FakeClock) -> None:
    seen: list[Any] = []

    def body(ctx: Any, _: Any) -> Any:
        seen.append(ctx.step("pair", lambda: (1, (2, 3))))
        seen.append(ctx.step("keys", lambda: {1: "one"}))
        ctx.suspend("go")
        return seen[-2:]

    async def abody(ctx: Any, _: Any) -> Any:
        seen.append(await ctx.step("pair", lambda: (1, (2, 3))))
        seen.append(await ctx.step("keys", lambda: {1: "one"}))
        await ctx.suspend("go")
        return seen[-2:]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    result = wf.resume("r", "go")
    assert seen == [[1, [2, 3]], {"1": "one"}] * 2
    assert result.result == [[1, [2, 3]], {"1": "one"}]


def test_async_step_fn_in_def_workflow_and_sync_fn_in_async_workflow(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    async def fetch_async() -> str:
        return "from-async"

    def fetch_sync() -> str:
        return "from-sync"

    def body(ctx: Any, _: Any) -> Any:
        return [ctx.step("a", fetch_async), ctx.step("b", fetch_sync)]

    async def abody(ctx: Any, _: Any) -> Any:
        return [await ctx.step("a", fetch_async), await ctx.step("b", fetch_sync)]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").result == ["from-async", "from-sync"]
    assert {k: e["result"] for k, e in step_entries(storage, "r").items()} == {
        "a": "from-async",
        "b": "from-sync",
    }


def test_a_completed_step_is_never_re_executed(kind: str, storage: Any, clock: FakeClock) -> None:
    """The journal is the authority: changed code does not change what a step returned."""
    behaviour: dict[str, Any] = {"charge": lambda: {"charged": 10}}
    calls = []

    def charge() -> Any:
        calls.append("charge")
        return behaviour["charge"]()

    def body(ctx: Any, _: Any) -> Any:
        charged = ctx.step("charge", charge)
        ctx.suspend("confirm")
        return charged

    async def abody(ctx: Any, _: Any) -> Any:
        charged = await ctx.step("charge", charge)
        await ctx.suspend("confirm")
        return charged

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")

    def refuse() -> Any:
        raise AssertionError("a recorded step ran again")

    behaviour["charge"] = refuse
    assert wf.start(run_id="r").status == "suspended"
    assert wf.resume("r", "confirm").result == {"charged": 10}
    assert calls == ["charge"]


def test_error_escaping_the_workflow_fails_the_run(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    def body(ctx: Any, _: Any) -> Any:
        ctx.step("ok", lambda: 1)
        raise LookupError("no such ticket")

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.step("ok", lambda: 1)
        raise LookupError("no such ticket")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    result = wf.start(run_id="r")
    assert result == RunResult("r", "failed", error=ErrorInfo("LookupError", "no such ticket"))
    last = entries(storage, "r")[-1]
    assert last["type"] == "error"
    assert last["error"]["name"] == "LookupError"
    assert last["error"]["message"] == "no such ticket"
    assert "LookupError" in last["error"]["traceback"]
    status = wf.status("r")
    assert status.status == "failed" and status.error == ErrorInfo("LookupError", "no such ticket")


def test_kassette_errors_from_user_code_are_not_journaled(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    def body(ctx: Any, _: Any) -> Any:
        raise ReplayMismatchError("raised by hand", run_id=ctx.run_id)

    async def abody(ctx: Any, _: Any) -> Any:
        raise ReplayMismatchError("raised by hand", run_id=ctx.run_id)

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(KassetteError):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start"]
    assert wf.status("r").status == "running"


def test_cancel_while_running_stops_the_session(kind: str, storage: Any, clock: FakeClock) -> None:
    """Another process cancels the run mid-step: the step's result is not journaled."""

    def cancel_elsewhere() -> str:
        cancel_run(storage, "r", "operator")
        return "too late"

    def body(ctx: Any, _: Any) -> Any:
        ctx.step("a", cancel_elsewhere)
        return ctx.step("b", lambda: "never")

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.step("a", cancel_elsewhere)
        return await ctx.step("b", lambda: "never")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    with pytest.raises(RunCancelledError) as caught:
        wf.start(run_id="r")
    assert caught.value.run_id == "r"
    assert types(storage, "r") == ["start", "cancel"]
    assert entries(storage, "r")[-1]["reason"] == "operator"
    assert wf.status("r").status == "canceled"


def test_an_invocation_holds_the_run(kind: str, storage: Any, clock: FakeClock) -> None:
    seen: list[str] = []

    def try_second_session() -> str:
        try:
            open_run(storage, "r").close()
        except RunLockedError:
            seen.append("locked")
        return "ok"

    def body(ctx: Any, _: Any) -> Any:
        ctx.step("a", try_second_session)
        return ctx.suspend("hold")

    async def abody(ctx: Any, _: Any) -> Any:
        await ctx.step("a", try_second_session)
        return await ctx.suspend("hold")

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").status == "suspended"
    assert seen == ["locked"]
    with open_run(storage, "r", clock=clock) as run:  # released once the invocation ended
        assert run.session == 2


def test_decorator_forms_and_storage_urls(kind: str, clock: FakeClock) -> None:
    if kind == "def":

        @kassette(storage="memory:", version="v1", clock=clock)
        def triage(ctx: Any, ticket: Any) -> Any:
            """Triage a ticket."""
            return ctx.step("analyze", lambda: ticket)

    else:

        @kassette(storage="memory:", version="v1", clock=clock)
        async def triage(ctx: Any, ticket: Any) -> Any:
            """Triage a ticket."""
            return await ctx.step("analyze", lambda: ticket)

    assert isinstance(triage, Workflow if kind == "def" else AsyncWorkflow)
    assert triage.__name__ == "triage" and triage.__doc__ == "Triage a ticket."
    assert "triage" in repr(triage)
    assert Driver(triage).start({"id": 1}, run_id="t").result == {"id": 1}
    assert Driver(triage).status("t").version == "v1"


# -- context ---------------------------------------------------------------------------------


def test_context_run_id_session_and_replaying(kind: str, storage: Any, clock: FakeClock) -> None:
    seen: list[tuple[str, Any]] = []

    def body(ctx: Any, _: Any) -> Any:
        seen.append(("top", (ctx.run_id, ctx.session, ctx.replaying)))
        ctx.step("a", lambda: seen.append(("in-a", ctx.replaying)))
        seen.append(("after-a", ctx.replaying))
        ctx.step("b", lambda: seen.append(("in-b", ctx.replaying)))
        seen.append(("after-b", ctx.replaying))
        ctx.suspend("go")
        seen.append(("after-go", ctx.replaying))
        ctx.step("c", lambda: None)
        return None

    async def abody(ctx: Any, _: Any) -> Any:
        seen.append(("top", (ctx.run_id, ctx.session, ctx.replaying)))
        await ctx.step("a", lambda: seen.append(("in-a", ctx.replaying)))
        seen.append(("after-a", ctx.replaying))
        await ctx.step("b", lambda: seen.append(("in-b", ctx.replaying)))
        seen.append(("after-b", ctx.replaying))
        await ctx.suspend("go")
        seen.append(("after-go", ctx.replaying))
        await ctx.step("c", lambda: None)
        return None

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    assert seen == [
        ("top", ("r", 1, False)),
        ("in-a", False),
        ("after-a", False),
        ("in-b", False),
        ("after-b", False),
    ]
    seen.clear()
    wf.resume("r", "go")
    assert seen == [
        ("top", ("r", 2, True)),
        ("after-a", True),
        ("after-b", True),
        ("after-go", False),
    ]


# -- suspend and resume ----------------------------------------------------------------------


def _approval_flow(kind: str, storage: Any, clock: FakeClock, **suspend: Any) -> Any:
    seen: list[Any] = []

    def body(ctx: Any, _: Any) -> Any:
        first = ctx.suspend("approval", **suspend)
        seen.append(first)
        second = ctx.suspend("review")
        return {"approval": first, "review": second}

    async def abody(ctx: Any, _: Any) -> Any:
        first = await ctx.suspend("approval", **suspend)
        seen.append(first)
        second = await ctx.suspend("review")
        return {"approval": first, "review": second}

    return make_workflow(kind, body, abody, storage=storage, clock=clock), seen


def test_suspend_then_resume_by_name(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, _ = _approval_flow(kind, storage, clock, reason="destructive fix")
    result = wf.start({"t": 1}, run_id="r")
    assert result == RunResult("r", "suspended", events=("approval",))
    assert result.event == "approval"
    suspend = entries(storage, "r")[-1]
    assert suspend["type"] == "suspend"
    assert (suspend["eventId"], suspend["event"], suspend["reason"]) == (
        "approval",
        "approval",
        "destructive fix",
    )
    assert "timeoutAt" not in suspend
    status = wf.status("r")
    assert status.status == "suspended" and status.pending_events == ("approval",)

    assert wf.resume("r", "approval", {"approved": True}).events == ("review",)
    resume = [e for e in entries(storage, "r") if e["type"] == "resume"]
    assert resume[0]["eventId"] == "approval" and resume[0]["value"] == {"approved": True}
    final = wf.resume("r", "review", "lgtm")
    assert final == RunResult(
        "r", "success", result={"approval": {"approved": True}, "review": "lgtm"}
    )


def test_resume_by_exact_event_id(kind: str, storage: Any, clock: FakeClock) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return [ctx.suspend("approval"), ctx.suspend("approval")]

    async def abody(ctx: Any, _: Any) -> Any:
        return [await ctx.suspend("approval"), await ctx.suspend("approval")]

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    wf.start(run_id="r")
    assert wf.resume("r", "approval", 1).events == ("approval#2",)
    assert wf.resume("r", "approval#2", 2).result == [1, 2]


def test_repeated_resume_keeps_the_first_value(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, seen = _approval_flow(kind, storage, clock)
    wf.start(run_id="r")
    assert wf.resume("r", "approval", "first").events == ("review",)
    again = wf.resume("r", "approval", "second")
    assert again == RunResult("r", "suspended", events=("review",))
    assert seen == ["first", "first"]
    resumes = [e for e in entries(storage, "r") if e["type"] == "resume"]
    assert [(e["eventId"], e["value"]) for e in resumes] == [("approval", "first")]
    assert wf.resume("r", "review", "ok").result == {"approval": "first", "review": "ok"}


def test_resume_of_an_event_not_pending(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, _ = _approval_flow(kind, storage, clock)
    wf.start(run_id="r")
    before = raw(storage, "r")
    for event in ("review", "nope", "approval#2"):
        with pytest.raises(EventNotPendingError) as caught:
            wf.resume("r", event, 1)
        assert caught.value.run_id == "r"
    assert raw(storage, "r") == before


def test_resume_needs_a_string_event(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, _ = _approval_flow(kind, storage, clock)
    wf.start(run_id="r")
    before = raw(storage, "r")
    with pytest.raises(ValueError):
        wf.resume("r", 3, 1)
    assert raw(storage, "r") == before


def test_except_exception_cannot_swallow_a_suspension(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    def body(ctx: Any, _: Any) -> Any:
        try:
            return ctx.suspend("approval")
        except Exception:
            return "swallowed"

    async def abody(ctx: Any, _: Any) -> Any:
        try:
            return await ctx.suspend("approval")
        except Exception:
            return "swallowed"

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").status == "suspended"
    assert wf.start(run_id="r").status == "suspended"
    assert wf.resume("r", "approval", "value").result == "value"


@pytest.mark.parametrize("how", ["resume", "retry"])
def test_suspend_timeout_cancels(kind: str, storage: Any, clock: FakeClock, how: str) -> None:
    wf, seen = _approval_flow(kind, storage, clock, timeout=60)
    wf.start(run_id="r")
    suspend = entries(storage, "r")[-1]
    assert suspend["timeoutAt"] == "2026-01-01T00:01:00.000Z"

    clock.advance(61)
    result = wf.resume("r", "approval", "late") if how == "resume" else wf.start(run_id="r")
    assert result == RunResult("r", "canceled")
    cancel = entries(storage, "r")[-1]
    assert cancel["type"] == "cancel" and cancel["reason"] == "timeout"
    assert "resume" not in types(storage, "r")
    assert seen == []
    assert wf.status("r").status == "canceled"
    with pytest.raises(RunCancelledError):
        wf.resume("r", "approval", "later still")


@pytest.mark.parametrize("then", ["return", "raise"])
def test_user_code_catching_the_timeout_cannot_undo_the_cancel(
    kind: str, storage: Any, clock: FakeClock, then: str
) -> None:
    caught: list[str] = []

    def body(ctx: Any, _: Any) -> Any:
        try:
            return ctx.suspend("approval", timeout=60)
        except Exception as exc:
            caught.append(type(exc).__name__)
            if then == "raise":
                raise RuntimeError("gave up") from exc
            return "fallback"

    async def abody(ctx: Any, _: Any) -> Any:
        try:
            return await ctx.suspend("approval", timeout=60)
        except Exception as exc:
            caught.append(type(exc).__name__)
            if then == "raise":
                raise RuntimeError("gave up") from exc
            return "fallback"

    wf = make_workflow(kind, body, abody, storage=storage, clock=clock)
    assert wf.start(run_id="r").status == "suspended"
    clock.advance(120)
    assert wf.start(run_id="r") == RunResult("r", "canceled")
    assert caught == ["RunCancelledError"]
    assert types(storage, "r")[-1] == "cancel" and types(storage, "r").count("cancel") == 1


def test_resume_before_the_timeout_continues(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, seen = _approval_flow(kind, storage, clock, timeout=60)
    wf.start(run_id="r")
    clock.advance(59)
    assert wf.resume("r", "approval", "in time").events == ("review",)
    clock.advance(3600)  # a delivered event no longer times out
    assert wf.resume("r", "review", "ok").result == {"approval": "in time", "review": "ok"}
    assert seen == ["in time", "in time"]


@pytest.mark.parametrize("timeout", [-1, "60"])
def test_bad_timeout_is_a_value_error(
    kind: str, storage: Any, clock: FakeClock, timeout: Any
) -> None:
    wf, _ = _approval_flow(kind, storage, clock, timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        wf.start(run_id="r")
    assert types(storage, "r") == ["start"]


# -- fork ------------------------------------------------------------------------------------


def _pipeline(
    kind: str,
    storage: Any,
    clock: FakeClock,
    label: str,
    calls: list[str],
    version: str | None = None,
) -> Any:
    """plan -> build -> ship; `label` stands for the code version that runs."""

    def plan() -> str:
        calls.append(f"{label}:plan")
        return f"plan-{label}"

    def build() -> str:
        calls.append(f"{label}:build")
        return f"build-{label}"

    def body(ctx: Any, x: Any) -> Any:
        return [x, ctx.step("plan", plan), ctx.step("build", build), ctx.suspend("ship")]

    async def abody(ctx: Any, x: Any) -> Any:
        return [
            x,
            await ctx.step("plan", plan),
            await ctx.step("build", build),
            await ctx.suspend("ship"),
        ]

    return make_workflow(kind, body, abody, storage=storage, clock=clock, version=version)


@pytest.mark.parametrize("point", ["offset", "step"])
def test_fork_replays_the_prefix_and_reruns_the_rest_with_new_code(
    kind: str, storage: Any, clock: FakeClock, point: str
) -> None:
    calls: list[str] = []
    v1 = _pipeline(kind, storage, clock, "v1", calls)
    v1.start("input", run_id="src")
    assert v1.resume("src", "ship", "shipped").result == ["input", "plan-v1", "build-v1", "shipped"]
    source_bytes = raw(storage, "src")
    build_offset = step_entries(storage, "src")["build"]["offset"]

    v2 = _pipeline(kind, storage, clock, "v2", calls)
    calls.clear()
    where = {"offset": build_offset} if point == "offset" else {"step": "build"}
    result = v2.fork("src", new_run_id="dst", **where)

    assert result == RunResult("dst", "suspended", events=("ship",))
    assert calls == ["v2:build"]
    assert raw(storage, "src") == source_bytes
    status = v2.status("dst")
    assert status.source == {"runId": "src", "fromOffset": build_offset}
    copied = entries(storage, "dst")[:build_offset]
    assert copied == entries(storage, "src")[:build_offset]
    fork_start = entries(storage, "dst")[build_offset]
    assert fork_start["type"] == "start" and fork_start["source"] == status.source
    assert fork_start["metadata"] == "input" and fork_start["session"] == 2
    assert v2.resume("dst", "ship", "again").result == ["input", "plan-v1", "build-v2", "again"]
    assert calls == ["v2:build"]
    assert raw(storage, "src") == source_bytes


def test_fork_without_new_run_id_makes_one(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _pipeline(kind, storage, clock, "v1", calls)
    wf.start("input", run_id="src")
    result = wf.fork("src", step="plan")
    assert uuid.UUID(hex=result.run_id).version == 4
    assert wf.status(result.run_id).source == {"runId": "src", "fromOffset": 1}
    assert calls == ["v1:plan", "v1:build", "v1:plan", "v1:build"]


def test_fork_at_a_suspend_offset_waits_again(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _pipeline(kind, storage, clock, "v1", calls)
    wf.start("input", run_id="src")
    wf.resume("src", "ship", "first")
    resume_offset = next(e["offset"] for e in entries(storage, "src") if e["type"] == "resume")
    forked = wf.fork("src", offset=resume_offset, new_run_id="dst")
    assert forked.status == "suspended" and forked.events == ("ship",)
    assert wf.resume("dst", "ship", "second").result[-1] == "second"
    assert calls == ["v1:plan", "v1:build"]


def test_fork_point_past_the_terminal_entry(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _pipeline(kind, storage, clock, "v1", calls)
    wf.start("input", run_id="src")
    wf.resume("src", "ship", "done")
    terminal = entries(storage, "src")[-1]["offset"]
    source_bytes = raw(storage, "src")
    with pytest.raises(ValueError):
        wf.fork("src", offset=terminal + 1, new_run_id="dst")
    with pytest.raises(ValueError):
        wf.fork("src", step="no-such-step", new_run_id="dst")
    with pytest.raises(ValueError):
        wf.fork("src", new_run_id="dst")  # neither offset nor step
    with pytest.raises(ValueError):
        wf.fork("src", offset=1, step="plan", new_run_id="dst")
    with pytest.raises(ValueError):
        wf.fork("src", offset=-1, new_run_id="dst")
    assert raw(storage, "src") == source_bytes
    assert sorted(storage.list_runs()) == ["src"]
    # the terminal offset itself is a fork of everything before the end: it replays to it
    forked = wf.fork("src", offset=terminal, new_run_id="dst")
    assert forked == RunResult("dst", "success", result=["input", "plan-v1", "build-v1", "done"])
    assert calls == ["v1:plan", "v1:build"]


def test_fork_into_an_existing_run(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _pipeline(kind, storage, clock, "v1", calls)
    wf.start("input", run_id="src")
    wf.start("other", run_id="taken")
    wf.fork("src", step="build", new_run_id="dst")
    wf.resume("dst", "ship", "done")
    dst_bytes, taken_bytes = raw(storage, "dst"), raw(storage, "taken")

    with pytest.raises(TerminalRunError):
        wf.fork("src", step="build", new_run_id="dst")
    with pytest.raises(RunExistsError, match="exists and is not a fork"):
        wf.fork("src", step="build", new_run_id="taken")
    src_bytes = raw(storage, "src")
    with pytest.raises(RunExistsError, match="exists and is not a fork"):
        wf.fork("src", step="build", new_run_id="src")
    with pytest.raises(RunExistsError, match="is a fork of src at offset 2"):
        wf.fork("src", offset=1, new_run_id="dst")  # ended, but another fork: not a retry
    with pytest.raises(ValueError):
        wf.fork("src", step="build", new_run_id="../escape")
    assert raw(storage, "dst") == dst_bytes and raw(storage, "taken") == taken_bytes
    assert raw(storage, "src") == src_bytes
    assert sorted(storage.list_runs()) == ["dst", "src", "taken"]


def test_fork_at_offset_zero_reruns_everything(kind: str, storage: Any, clock: FakeClock) -> None:
    calls: list[str] = []
    wf = _pipeline(kind, storage, clock, "v1", calls)
    wf.start("input", run_id="src")
    calls.clear()
    assert wf.fork("src", offset=0, new_run_id="dst").status == "suspended"
    assert calls == ["v1:plan", "v1:build"]
    first = entries(storage, "dst")[0]
    assert first["type"] == "start" and first["session"] == 1 and first["metadata"] == "input"
    assert first["source"] == {"runId": "src", "fromOffset": 0}


def test_a_fork_written_by_fork_run_is_continued_by_start(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    """What the CLI's `kassette fork` does: write the fork; the next start continues it live,
    also with code of another version."""
    calls: list[str] = []
    v1 = _pipeline(kind, storage, clock, "v1", calls, version="v1")
    v1.start("input", run_id="src")
    fork_run(storage, "src", step="build", new_run_id="dst")
    assert types(storage, "dst") == ["start", "step", "start"]
    assert v1.status("dst").status == "running"

    v2 = _pipeline(kind, storage, clock, "v2", calls, version="v2")
    calls.clear()
    assert v2.start(run_id="dst") == RunResult("dst", "suspended", events=("ship",))
    assert calls == ["v2:build"]
    assert v2.status("dst").version == "v2"
    assert v2.resume("dst", "ship", 1).result == ["input", "plan-v1", "build-v2", 1]


def test_repeated_fork_with_the_same_new_run_id_continues_it(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    calls: list[str] = []
    wf = _pipeline(kind, storage, clock, "v1", calls)
    wf.start("input", run_id="src")
    calls.clear()
    assert wf.fork("src", step="build", new_run_id="dst").status == "suspended"
    assert wf.fork("src", step="build", new_run_id="dst").status == "suspended"
    assert calls == ["v1:build"]
    assert types(storage, "dst").count("start") == 3  # src's, the fork's, the retry's
    assert wf.status("dst").source == {"runId": "src", "fromOffset": 2}
    assert wf.resume("dst", "ship", 1).status == "success"


def test_fork_with_a_new_version_can_be_resumed_by_it(
    kind: str, storage: Any, clock: FakeClock
) -> None:
    def body(ctx: Any, x: Any) -> Any:
        return [ctx.step("plan", lambda: "p"), ctx.suspend("ship")]

    async def abody(ctx: Any, x: Any) -> Any:
        return [await ctx.step("plan", lambda: "p"), await ctx.suspend("ship")]

    v1 = make_workflow(kind, body, abody, storage=storage, clock=clock, version="v1")
    v2 = make_workflow(kind, body, abody, storage=storage, clock=clock, version="v2")
    v1.start(1, run_id="src")
    assert v2.fork("src", step="plan", new_run_id="dst").status == "suspended"
    assert v2.status("dst").version == "v2"
    assert v1.status("src").version == "v1"
    with pytest.raises(VersionMismatchError):
        v1.resume("dst", "ship", 1)
    assert v2.resume("dst", "ship", 1).result == ["p", 1]


# -- status and cancel -----------------------------------------------------------------------


def test_status_fields_and_camel_case_dict(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, _ = _approval_flow(kind, storage, clock)
    wf.start({"t": 1}, run_id="r")
    clock.advance(5)
    wf.resume("r", "approval", "yes")
    status = wf.status("r")
    assert isinstance(status, RunStatus)
    assert status == RunStatus(
        run_id="r",
        status="suspended",
        version=None,
        source=None,
        sessions=2,
        entries=5,
        steps=0,
        pending_events=("review",),
        result=None,
        error=None,
        created_at="2026-01-01T00:00:00.000Z",
        updated_at="2026-01-01T00:00:05.000Z",
    )
    assert status.to_dict() == {
        "runId": "r",
        "status": "suspended",
        "version": None,
        "source": None,
        "sessions": 2,
        "entries": 5,
        "steps": 0,
        "pendingEvents": ["review"],
        "result": None,
        "error": None,
        "createdAt": "2026-01-01T00:00:00.000Z",
        "updatedAt": "2026-01-01T00:00:05.000Z",
    }
    done = wf.resume("r", "review", "ok")
    assert wf.status("r").status == "completed"
    assert wf.status("r").result == done.result


def test_cancel(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, _ = _approval_flow(kind, storage, clock)
    wf.start(run_id="r")
    status = wf.cancel("r", "not needed")
    assert isinstance(status, RunStatus)
    assert status.status == "canceled" and status.pending_events == ("approval",)
    cancel = entries(storage, "r")[-1]
    assert cancel["type"] == "cancel" and cancel["reason"] == "not needed"
    assert cancel["session"] == 2
    assert wf.status("r") == status
    before = raw(storage, "r")
    with pytest.raises(RunCancelledError):
        wf.cancel("r")
    assert raw(storage, "r") == before


def test_html_reprs_are_tables(kind: str, storage: Any, clock: FakeClock) -> None:
    wf, _ = _approval_flow(kind, storage, clock)
    result = wf.start({"note": "<b>&</b>"}, run_id="r")
    for shown in (result._repr_html_(), wf.status("r")._repr_html_()):
        assert shown.startswith("<table>") and shown.endswith("</table>")
        assert "<tr>" in shown and "approval" in shown
    failed = RunResult("x", "failed", error=ErrorInfo("ValueError", "<bad>"))
    shown = failed._repr_html_()
    assert "&lt;bad&gt;" in shown and "<bad>" not in shown


def test_record_step_journals_a_begun_step_in_both_kinds_of_workflow() -> None:
    storage, live = MemoryStorage(), []
    call = {"provider": "p", "method": "ask", "request": {"q": 1}}

    def body(ctx: Any, task: str) -> Any:
        step = ctx.begin_step("ask")
        if step.replayed:
            return [step.result, step.call]
        live.append(task)
        return ctx.record_step(step, {"a": (task,)}, call=call)

    async def async_body(ctx: Any, task: str) -> Any:
        step = ctx.begin_step("ask")
        if step.replayed:
            return [step.result, step.call]
        live.append(task)
        return await ctx.record_step(step, {"a": (task,)}, call=call)

    for name, fn in [("sync", body), ("async", async_body)]:
        flow = kassette(fn, storage=storage)
        first = (
            flow.start(name, run_id=name)
            if name == "sync"
            else asyncio.run(flow.start(name, run_id=name))
        )
        assert first.result == {"a": [name]}  # as replay will see it
        fork = flow.fork(name, offset=2, new_run_id=f"{name}-f")
        replayed = fork if name == "sync" else asyncio.run(fork)
        assert replayed.result == [{"a": [name]}, call]
    assert live == ["sync", "async"]


def test_an_invocations_outcome_and_its_runs_stored_state_translate_in_one_place() -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def flow(ctx: Any, n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        if n == 0:
            ctx.suspend("approve")
        return n * 2

    for run_id, n in (("done", 2), ("waits", 0), ("broken", -1)):
        outcome = flow.start(n, run_id=run_id)
        stored = flow.status(run_id)
        assert run_state(outcome.status) == stored.status
        again = RunResult.from_status(stored)
        assert again is not None
        assert (again.status, again.result, again.events) == (
            outcome.status,
            outcome.result,
            outcome.events,
        )
        assert again.error == outcome.error
    # a fan-out branch no invocation ended is open (docs/reference.md, decision 11)
    assert (run_state("raised"), run_state("stopped")) == ("running", "running")
    open_run(storage, "open").close()
    assert RunResult.from_status(flow.status("open")) is None  # running: nothing to report
