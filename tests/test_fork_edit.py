"""Forks that edit their fork point (`result=`), per-run params (`ctx.params`), forks into an
existing run id (a retry of the same fork, else `RunExistsError`) and `RunResult.unreplayed`."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from kassette import (
    InputMismatchError,
    InvalidArgumentError,
    MemoryStorage,
    NotSerializableError,
    RunExistsError,
    TerminalRunError,
    kassette,
)
from kassette.core import fork_run, open_run, read_journal, run_status


def make_writer(storage: MemoryStorage, calls: Counter[str], **options: Any) -> Any:
    @kassette(storage=storage, **options)
    def writer(ctx: Any, topic: str) -> dict[str, Any]:
        def call(name: str, value: Any) -> Any:
            calls[name] += 1
            return value

        outline = ctx.step("outline", lambda: call("outline", f"outline of {topic}"))
        draft = ctx.step("draft", lambda: call("draft", f"draft from {outline}"))
        verdict = ctx.suspend("review") if ctx.params.get("review") else "unreviewed"
        final = ctx.step("final", lambda: call("final", f"{draft} ({verdict})"))
        return {"final": final, "params": dict(ctx.params)}

    return writer


@pytest.fixture
def storage() -> MemoryStorage:
    return MemoryStorage()


def _entries(storage: MemoryStorage, run_id: str) -> list[dict[str, Any]]:
    return list(read_journal(storage, run_id).entries)


def test_a_fork_with_a_result_records_the_step_edited_and_never_runs_it(
    storage: MemoryStorage,
) -> None:
    calls: Counter[str] = Counter()
    writer = make_writer(storage, calls)
    writer.start("tides", run_id="source")
    before = storage.read("source")
    calls.clear()
    result = writer.fork("source", step="draft", new_run_id="mine", result="my own draft")
    assert result.status == "success"
    assert result.result["final"] == "my own draft (unreviewed)"
    assert calls == Counter(final=1)  # outline replayed, draft edited, final live
    entries = _entries(storage, "mine")
    start, edited = entries[2], entries[3]
    assert start["type"] == "start" and start["source"] == {"runId": "source", "fromOffset": 2}
    assert {k: edited[k] for k in ("type", "stepId", "name", "result", "edited")} == {
        "type": "step",
        "stepId": "draft",
        "name": "draft",
        "result": "my own draft",
        "edited": True,
    }
    assert edited["session"] == start["session"] and "durationMs" not in edited
    assert storage.read("source") == before
    assert result.unreplayed == ()


def test_a_fork_with_a_result_at_a_suspend_or_its_resume_delivers_that_value(
    storage: MemoryStorage,
) -> None:
    calls: Counter[str] = Counter()
    writer = make_writer(storage, calls)
    waiting = writer.start("tides", run_id="waiting", params={"review": True})
    assert waiting.status == "suspended"
    suspend = next(e for e in _entries(storage, "waiting") if e["type"] == "suspend")
    forked = writer.fork("waiting", offset=suspend["offset"], new_run_id="ok", result="fine")
    assert (forked.status, forked.result["final"]) == (
        "success",
        "draft from outline of tides (fine)",
    )
    kinds = [(e["type"], e.get("edited")) for e in _entries(storage, "ok")[suspend["offset"] :]]
    assert kinds[:3] == [("start", None), ("suspend", None), ("resume", True)]

    writer.resume("waiting", "review", "meh")
    resume = next(e for e in _entries(storage, "waiting") if e["type"] == "resume")
    again = writer.fork("waiting", offset=resume["offset"], new_run_id="again", result="great")
    assert again.result["final"].endswith("(great)")
    assert calls["draft"] == 1  # one draft, three continuations


def test_a_fork_with_a_result_refuses_what_cannot_be_edited_and_writes_nothing(
    storage: MemoryStorage,
) -> None:
    @kassette(storage=storage)
    def sleeper(ctx: Any, _: Any) -> int:
        ctx.sleep(0)
        ctx.parallel({"a": lambda b: b.step("x", lambda: 1)})
        return 1

    sleeper.start(None, run_id="s")
    for offset, message in ((1, "a sleep step"), (2, "a parallel step"), (0, "a start entry")):
        with pytest.raises(InvalidArgumentError, match=message):
            sleeper.fork("s", offset=offset, new_run_id="x", result=5)
    end = len(_entries(storage, "s"))
    with pytest.raises(InvalidArgumentError, match=r"past the end|no entry at offset"):
        sleeper.fork("s", offset=end, new_run_id="x", result=5)
    writer = make_writer(storage, Counter())
    writer.start("t", run_id="w")
    with pytest.raises(NotSerializableError):
        writer.fork("w", step="draft", new_run_id="x", result={1, 2})
    assert storage.read("x") is None


def test_the_async_workflow_and_the_core_fork_with_a_result(storage: MemoryStorage) -> None:
    calls: Counter[str] = Counter()

    @kassette(storage=storage)
    async def agent(ctx: Any, _: Any) -> str:
        first = await ctx.step("first", lambda: calls.update(["first"]) or "live")
        return f"{first} then {await ctx.step('second', lambda: 'two')}"

    asyncio.run(agent.start(None, run_id="a"))
    result = asyncio.run(agent.fork("a", step="first", new_run_id="b", result="edited"))
    assert (result.status, result.result) == ("success", "edited then two")
    assert fork_run(storage, "a", step="first", new_run_id="c", result=None) == "c"
    assert asyncio.run(agent.start(run_id="c")).result == "None then two"
    assert calls == Counter(first=1)


def test_forking_into_an_existing_run_is_a_retry_of_that_same_fork_only(
    storage: MemoryStorage,
) -> None:
    writer = make_writer(storage, Counter())
    writer.start("tides", run_id="source")
    writer.start("other", run_id="plain")
    fork_run(storage, "source", step="final", new_run_id="branch")  # written, not yet run
    assert writer.fork("source", step="final", new_run_id="branch").status == "success"
    with pytest.raises(TerminalRunError):
        writer.fork("source", step="final", new_run_id="branch")
    with pytest.raises(RunExistsError, match="is a fork of source at offset 3"):
        writer.fork("source", step="draft", new_run_id="branch")  # ended, yet not a retry
    with pytest.raises(RunExistsError, match="exists and is not a fork"):
        writer.fork("source", step="draft", new_run_id="plain")
    fork_run(storage, "source", step="draft", new_run_id="edit", result="x")
    with pytest.raises(InputMismatchError, match="another edited result"):
        writer.fork("source", step="draft", new_run_id="edit", result="y")
    assert writer.fork("source", step="draft", new_run_id="edit", result="x").status == "success"


def test_params_are_recorded_read_only_and_the_same_on_every_replay(
    storage: MemoryStorage,
) -> None:
    writer = make_writer(storage, Counter())
    first = writer.start("tides", run_id="r", params={"review": True, "temperature": 0.3})
    assert first.status == "suspended"
    done = writer.resume("r", "review", "ok")
    assert done.result["params"] == {"review": True, "temperature": 0.3}
    start = _entries(storage, "r")[0]
    assert start["params"] == {"review": True, "temperature": 0.3}
    assert writer.start("x", run_id="plain").result["params"] == {}
    assert "params" not in _entries(storage, "plain")[0]

    @kassette(storage=storage)
    def mutates(ctx: Any, _: Any) -> None:
        ctx.params["temperature"] = 2  # a mappingproxy refuses

    refused = mutates.start(None, run_id="m", params={"temperature": 1})
    assert refused.error is not None and refused.error.name == "TypeError"
    assert read_journal(storage, "m").state.params == {"temperature": 1}


def test_a_retry_with_other_params_is_a_metadata_mismatch(storage: MemoryStorage) -> None:
    writer = make_writer(storage, Counter())
    writer.start("tides", run_id="r", params={"review": True})
    with pytest.raises(InputMismatchError, match="different params"):
        writer.start("tides", run_id="r", params={"review": False})
    with pytest.raises(InputMismatchError):
        writer.start("tides", run_id="r", params={})
    assert writer.start("tides", run_id="r").status == "suspended"  # None: as recorded
    assert writer.start("tides", run_id="r", params={"review": True}).status == "suspended"
    with open_run(storage, "core", params={"a": 1}) as run:
        assert dict(run.params) == {"a": 1}
    with pytest.raises(InvalidArgumentError, match="must be a JSON object"):
        writer.start("tides", run_id="bad", params=[("a", 1)])  # type: ignore[arg-type]
    with pytest.raises(NotSerializableError):
        writer.start("tides", run_id="bad", params={"a": {1, 2}})
    assert storage.read("bad") is None


def test_a_fork_keeps_its_sources_params_unless_given_its_own(storage: MemoryStorage) -> None:
    writer = make_writer(storage, Counter())
    writer.start("tides", run_id="source", params={"temperature": 0.3})
    same = writer.fork("source", step="final", new_run_id="same")
    own = writer.fork("source", step="final", new_run_id="own", params={"temperature": 1.5})
    none = writer.fork("source", step="final", new_run_id="none", params={})
    assert same.result["params"] == {"temperature": 0.3}
    assert own.result["params"] == {"temperature": 1.5}
    assert none.result["params"] == {}
    assert read_journal(storage, "own").state.params == {"temperature": 1.5}
    fork_run(storage, "source", step="final", new_run_id="open", params={"temperature": 1.5})
    with pytest.raises(InputMismatchError, match="different params"):
        writer.fork("source", step="final", new_run_id="open", params={"temperature": 0.3})
    retried = writer.fork("source", step="final", new_run_id="open")  # None: as recorded
    assert retried.result["params"] == {"temperature": 1.5}


def test_unreplayed_names_recorded_steps_the_forks_code_no_longer_has(
    storage: MemoryStorage,
) -> None:
    writer = make_writer(storage, Counter())
    writer.start("tides", run_id="source")

    @kassette(storage=storage)
    def renamed(ctx: Any, topic: str) -> str:
        ctx.step("sketch", lambda: "a sketch")  # was "outline"
        return str(ctx.step("final", lambda: "done"))

    result = renamed.fork("source", step="final", new_run_id="renamed")
    assert (result.status, result.unreplayed) == ("success", ("outline", "draft"))
    assert writer.fork("source", step="final", new_run_id="same").unreplayed == ()
    assert run_status(storage, "renamed").status == "completed"


# -- model calls: an edit by text (standard library only; the SDK tests are in
#    tests/integrations/test_edit_by_text.py) ---------------------------------------------


def recorded_model_call(storage: MemoryStorage) -> dict[str, Any]:
    """A run whose one step is an Anthropic message with its request, recorded by hand."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "The first draft."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 4},
    }
    call = {"provider": "anthropic", "method": "messages.create",
            "request": {"model": "claude-x", "max_tokens": 50,
                        "messages": [{"role": "user", "content": "Draft it"}]}}  # fmt: skip
    with open_run(storage, "model", input="topic") as run:
        run.begin_step("messages.create").record(message, call=call)  # type: ignore[arg-type]
    return message


def test_the_same_text_edit_again_is_a_retry_of_the_same_fork(storage: MemoryStorage) -> None:
    recorded_model_call(storage)
    fork_run(storage, "model", step="messages.create", result="Better.", new_run_id="edit")
    first = _entries(storage, "edit")
    edited = next(e for e in first if e.get("edited"))
    assert edited["result"]["content"] == [{"type": "text", "text": "Better."}]
    assert edited["result"]["model"] == "claude-x"
    assert edited["call"]["request"]["messages"][0]["content"] == "Draft it"
    # the response written for a text is the same every time: a retry, not another fork
    fork_run(storage, "model", step="messages.create", result="Better.", new_run_id="edit")
    with pytest.raises(InputMismatchError):
        fork_run(storage, "model", step="messages.create", result="Other.", new_run_id="edit")


@pytest.mark.parametrize("result", [3.5, True, {"content": "x"}, [], None])
def test_a_model_call_refuses_what_is_not_its_answer(storage: MemoryStorage, result: Any) -> None:
    recorded_model_call(storage)
    with pytest.raises(InvalidArgumentError, match="give the answer's text") as raised:
        fork_run(storage, "model", step="messages.create", result=result, new_run_id="bad")
    assert "an Anthropic message as the API returns it" in str(raised.value)
    assert storage.read("bad") is None


def test_a_whole_response_of_the_provider_is_kept_as_given(storage: MemoryStorage) -> None:
    message = recorded_model_call(storage)
    whole = {**message, "content": [{"type": "text", "text": "Whole."}]}
    fork_run(storage, "model", step="messages.create", result=whole, new_run_id="whole")
    assert next(e for e in _entries(storage, "whole") if e.get("edited"))["result"] == whole


def changed_writer(storage: MemoryStorage, calls: Counter[str]) -> Any:
    """`make_writer` whose code now waits for an event where the journal has its outline."""

    @kassette(storage=storage)
    def writer(ctx: Any, topic: str) -> str:
        ctx.suspend("outline")
        calls["final"] += 1
        return str(ctx.step("final", lambda: "final"))

    return writer


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_fork_whose_replay_fails_ends_failed_with_the_error_never_running(
    storage: MemoryStorage, kind: str
) -> None:
    """It used to stay `running` forever, and the error's advice named that orphan (issue 31,
    section 4): the fork now ends failed with the error, so the run it names exists."""
    from kassette import ReplayMismatchError

    calls: Counter[str] = Counter()
    make_writer(storage, calls).start("kassette", run_id="source")
    calls.clear()
    writer = changed_writer(storage, calls)
    if kind == "async":

        @kassette(storage=storage)
        async def changed(ctx: Any, topic: str) -> str:
            await ctx.suspend("outline")
            return "final"

        def fork() -> Any:
            return asyncio.run(changed.fork("source", step="final", new_run_id="f"))
    else:

        def fork() -> Any:
            return writer.fork("source", step="final", new_run_id="f")

    with pytest.raises(ReplayMismatchError, match="run f: journal has a step at outline") as e:
        fork()
    status = run_status(storage, "f")
    assert status.status == "failed"
    assert status.error is not None and status.error.name == "ReplayMismatchError"
    assert status.error.message == str(e.value)
    assert calls["final"] == 0
    with pytest.raises(TerminalRunError):  # the same fork again: it ended
        fork()


def test_a_fan_out_branch_whose_replay_fails_reads_failed() -> None:
    from kassette import explore as kx

    storage, calls = MemoryStorage(), Counter[str]()
    make_writer(storage, calls).start("kassette", run_id="source")
    branches = kx.fan_out(changed_writer(storage, calls), "source", step="final", n=2)
    assert branches.frame["status"].tolist() == ["failed", "failed"]
    assert (
        branches.frame["error"]
        .str.startswith("ReplayMismatchError: run source.final.0")
        .tolist()[0]
    )
    assert {run_status(storage, r).status for r in branches.run_ids} == {"failed"}
