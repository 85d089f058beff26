"""kassette.integrations.openai with the real openai SDK against a fake server on 127.0.0.1.

The server counts the requests it answers: after a crash and a replay, the count must not
grow for calls the journal already holds, and the replayed objects must be the SDK's types,
equal to what the live calls returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
from fake_openai_server import FakeOpenAI
from openai import AsyncOpenAI, OpenAI, Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent

from kassette import (
    AsyncContext,
    Context,
    InvalidArgumentError,
    LocalStorage,
    MemoryStorage,
    ReplayMismatchError,
    kassette,
    open_run,
)
from kassette._journal import encode
from kassette._model_streams import expanded
from kassette.core import read_journal
from kassette.integrations.openai import journaled

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
USER = [{"role": "user", "content": "hello"}]


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing is journaled."""


def steps(storage: MemoryStorage | LocalStorage, run_id: str) -> list[dict[str, Any]]:
    return [e for e in read_journal(storage, run_id).entries if e["type"] == "step"]


def test_chat_completion_is_recorded_and_replayed_without_a_request(
    server: FakeOpenAI, client: OpenAI
) -> None:
    storage = MemoryStorage()
    seen: list[ChatCompletion] = []
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        reply = journaled(client, ctx).chat.completions.create(model="fake-1", messages=USER)
        seen.append(reply)
        if crash[0]:
            raise Crash
        return reply.choices[0].message.content or ""

    with pytest.raises(Crash):
        agent.start("t", run_id="r1")
    assert server.requests["/v1/chat/completions"] == 1
    crash[0] = False
    result = agent.start("t", run_id="r1")

    assert server.total == 1, "the replay made no request"
    assert result.status == "success"
    assert result.result == "reply 1: hello"
    live, replayed = seen
    assert type(replayed) is ChatCompletion
    assert replayed.model_dump() == live.model_dump()
    assert replayed.usage is not None and replayed.usage.total_tokens == 8
    [step] = steps(storage, "r1")
    assert step["stepId"] == "chat.completions.create"
    assert step["result"]["id"] == "chatcmpl-1"
    assert "durationMs" in step


def test_chat_stream_relays_chunks_live_and_replays_them_one_by_one(
    server: FakeOpenAI, client: OpenAI
) -> None:
    storage = MemoryStorage()
    runs: list[list[ChatCompletionChunk]] = []
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        stream = journaled(client, ctx).chat.completions.create(
            model="fake-1", messages=USER, stream=True
        )
        assert isinstance(stream, Stream)
        chunks = []
        with stream:
            for chunk in stream:
                chunks.append(chunk)
        runs.append(chunks)
        if crash[0]:
            raise Crash
        return "".join(c.choices[0].delta.content or "" for c in chunks)

    with pytest.raises(Crash):
        agent.start("t", run_id="s1")
    crash[0] = False
    result = agent.start("t", run_id="s1")

    assert server.total == 1
    assert result.result == "reply 1: hello"
    live, replayed = runs
    assert len(live) == len(replayed) == 4  # three words and the finish chunk
    assert all(type(c) is ChatCompletionChunk for c in replayed)
    assert [c.model_dump() for c in replayed] == [c.model_dump() for c in live]
    [step] = steps(storage, "s1")
    assert list(step["result"]) == ["stream"]
    chunks = expanded(step["result"])["stream"]  # stored compactly: every chunk, as sent
    assert chunks == [c.to_dict(mode="json") for c in live]
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == [
        "reply", " 1:", " hello", None,
    ]  # fmt: skip


def test_responses_api_with_and_without_stream(server: FakeOpenAI, client: OpenAI) -> None:
    storage = MemoryStorage()
    seen: list[Any] = []

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> dict[str, str]:
        llm = journaled(client, ctx)
        response = llm.responses.create(model="fake-1", input="summarise")
        events = list(llm.responses.create(model="fake-1", input="stream it", stream=True))
        seen.append((response, events))
        approval = ctx.suspend("approve")
        return {"text": response.output_text, "approval": approval, "events": len(events)}

    assert agent.start("t", run_id="x").status == "suspended"
    assert server.requests["/v1/responses"] == 2
    result = agent.resume("x", "approve", "ok")
    assert server.total == 2
    assert result.result == {"text": "reply 1: summarise", "approval": "ok", "events": 6}
    (live_response, live_events), (response, events) = seen
    assert type(response) is Response and response.model_dump() == live_response.model_dump()
    assert [type(e) for e in events] == [type(e) for e in live_events]
    assert isinstance(events[1], ResponseTextDeltaEvent) and events[1].delta == "reply"
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert events[-1].response.output_text == "reply 2: stream it"
    assert [s["stepId"] for s in steps(storage, "x")] == ["responses.create", "responses.create#2"]


class _Threads(MemoryStorage):
    """Records the thread of every append."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[int] = []

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        self.appends.append(threading.get_ident())
        return super().append(run_id, data, token=token)


def test_async_client_in_an_async_workflow(server: FakeOpenAI, async_client: AsyncOpenAI) -> None:
    storage = _Threads()
    crash = [True]
    texts: list[tuple[str, str, str]] = []

    @kassette(storage=storage)
    async def agent(ctx: AsyncContext, task: str) -> str:
        llm = journaled(async_client, ctx)
        reply = await llm.chat.completions.create(model="fake-1", messages=USER)
        stream = await llm.chat.completions.create(model="fake-1", messages=USER, stream=True)
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream])
        events = await llm.responses.create(model="fake-1", input="go", stream=True)
        deltas = "".join([e.delta async for e in events if e.type == "response.output_text.delta"])
        texts.append((reply.choices[0].message.content or "", streamed, deltas))
        if crash[0]:
            raise Crash
        return streamed

    async def main() -> int:
        with pytest.raises(Crash):
            await agent.start("t", run_id="a1")
        crash[0] = False
        assert (await agent.start("t", run_id="a1")).status == "success"
        await async_client.close()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert server.total == 3
    assert storage.appends and loop_thread not in storage.appends  # written off the loop
    assert texts[0] == texts[1] == ("reply 1: hello", "reply 2: hello", "reply 3: go")


@pytest.mark.parametrize(
    ("kill", "asked"),
    [(["3"], 3), (["4", "append"], 4)],
    ids=["after-an-append", "between-an-answer-and-its-append"],
)
def test_a_sigkilled_worker_leaves_the_journaled_calls_for_the_next_one(
    server: FakeOpenAI, tmp_path: Path, kill: list[str], asked: int
) -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = [sys.executable, str(HERE / "openai_worker.py"), str(tmp_path), "k1", server.base_url]
    killed = subprocess.run(
        [*worker, *kill], capture_output=True, text=True, timeout=120, env=environment
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert server.total == asked  # the calls made before the kill, the last answered or not
    journal = read_journal(LocalStorage(tmp_path), "k1")
    assert len([e for e in journal.entries if e["type"] == "step"]) == 3
    done = subprocess.run(
        [*worker, "0"], capture_output=True, text=True, timeout=120, env=environment
    )
    assert done.returncode == 0, done.stderr

    assert server.total == asked + 1, "only the fourth call reached the server again"
    if asked == 4:
        assert server.bodies[3] == server.bodies[4], "the unjournaled call, asked again"
    outcome = json.loads(done.stdout)
    assert outcome == {
        "status": "success",
        "result": {
            "plan": "reply 1: plan the launch",
            "draft": "reply 2: draft it",
            "review": "reply 3: review the draft",
            "summary": f"reply {asked + 1}: summarise",
        },
    }
    journal = read_journal(LocalStorage(tmp_path), "k1")
    assert [(e["session"], e["stepId"]) for e in journal.entries if e["type"] == "step"] == [
        (1, "chat.completions.create"),
        (1, "chat.completions.create#2"),
        (1, "responses.create"),
        (2, "responses.create#2"),
    ]


def test_a_stream_closed_before_its_end_is_not_journaled(
    server: FakeOpenAI, client: OpenAI
) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        stream = journaled(client, ctx).chat.completions.create(
            model="fake-1", messages=USER, stream=True
        )
        with stream:
            first = next(iter(stream))
        return first.choices[0].delta.content or ""

    assert agent.start("t", run_id="c1").result == "reply"
    assert steps(storage, "c1") == []
    agent.start("t", run_id="c2")
    assert server.total == 2


def test_names_scopes_and_passthrough(server: FakeOpenAI, client: OpenAI) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> dict[str, Any]:
        planner = journaled(client, ctx, name="plan")
        planner.chat.completions.create(model="fake-1", messages=USER)
        slow = planner.with_options(timeout=60)  # still journaled, under the same name
        slow.chat.completions.create(model="fake-1", messages=USER)

        def branch(context: Context) -> str:
            llm = journaled(client, context)
            return llm.responses.create(model="fake-1", input="b").output_text

        both = ctx.parallel({"left": branch, "right": branch}, name="fan")
        ctx.suspend("go")
        return {"base_url": str(planner.base_url), **both}

    result = agent.start("t", run_id="n1")
    assert result.status == "suspended"
    ids = {s["stepId"] for s in steps(storage, "n1")}
    assert ids == {
        "plan",
        "plan#2",
        "fan",
        "fan/left/responses.create",
        "fan/right/responses.create",
    }
    assert server.total == 4
    result = agent.resume("n1", "go")
    assert server.total == 4, "the replay, branches included, made no request"
    assert result.result["base_url"] == server.base_url + "/"
    assert sorted([result.result["left"], result.result["right"]]) == ["reply 3: b", "reply 4: b"]


def test_the_low_level_run_api(server: FakeOpenAI, client: OpenAI) -> None:
    storage = MemoryStorage()
    for _ in range(2):
        with open_run(storage, "loop") as run:
            reply = journaled(client, run).chat.completions.create(model="fake-1", messages=USER)
    assert reply.choices[0].message.content == "reply 1: hello"
    assert server.total == 1


def test_a_response_the_sdk_would_not_validate_still_replays(
    server: FakeOpenAI, client: OpenAI
) -> None:
    storage = MemoryStorage()
    replies: list[ChatCompletion] = []

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> None:
        llm = journaled(client, ctx)
        replies.append(llm.chat.completions.create(model="sloppy", messages=USER))
        ctx.suspend("go")

    agent.start("t", run_id="l1")
    agent.resume("l1", "go")
    assert server.total == 1
    live, replayed = replies
    assert type(replayed) is ChatCompletion
    assert "created" not in steps(storage, "l1")[0]["result"]
    assert replayed.choices[0].message.content == live.choices[0].message.content


def test_replaying_a_stream_as_a_response_is_a_mismatch(server: FakeOpenAI, client: OpenAI) -> None:
    storage = MemoryStorage()
    stream = [True]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> None:
        llm = journaled(client, ctx)
        result = llm.chat.completions.create(model="fake-1", messages=USER, stream=stream[0])
        if stream[0]:
            list(result)
        ctx.suspend("go")

    agent.start("t", run_id="m1")
    stream[0] = False
    with pytest.raises(
        ReplayMismatchError, match=r"journal has a stream at chat\.completions\.create"
    ):
        agent.resume("m1", "go")
    assert server.total == 1
    assert read_journal(storage, "m1").status().status == "running"  # resumed, not settled


def test_bad_arguments(client: OpenAI) -> None:
    storage = MemoryStorage()
    with open_run(storage, "bad") as run:
        with pytest.raises(InvalidArgumentError, match=r"wraps an openai\.OpenAI"):
            journaled(object(), run)  # type: ignore[type-var]
        with pytest.raises(InvalidArgumentError, match="needs the workflow's ctx or a Run"):
            journaled(client, "ctx")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="may not contain"):
            journaled(client, run, name="a/b")


def test_without_the_sdk_the_import_error_names_the_extra() -> None:
    program = (
        "import sys; sys.modules['openai'] = None\n"
        "try:\n    import kassette.integrations.openai\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert 'pip install "kassette[openai]"' in done.stdout, done.stderr
    assert "openai" not in subprocess.run(
        [sys.executable, "-c", "import kassette, sys; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout.replace("kassette", "")


# -- the request, journaled with the response, and checked on replay ---------------------------


def test_the_request_is_journaled_as_sent(server: FakeOpenAI, client: OpenAI) -> None:
    storage = MemoryStorage()
    with open_run(storage, "q1") as run:
        llm = journaled(client, run)
        first = llm.chat.completions.create(model="fake-1", messages=USER, temperature=0.7)
        llm.chat.completions.create(
            model="fake-1",
            messages=iter([*USER, first.choices[0].message, {"role": "user", "content": "more"}]),
            temperature=0.7,
            top_p=openai.omit,
            tools=openai.NOT_GIVEN,
            extra_headers={"x-trace": "t-1"},
            extra_query={"trace": "1"},
            extra_body={"seed": 7},
            timeout=20,
        )
        llm.responses.create(model="fake-1", input="go", stream=True, max_output_tokens=50).close()
        list(llm.responses.create(model="fake-1", input="go", stream=True, max_output_tokens=50))

    journaled_steps = steps(storage, "q1")
    assert server.total == 4
    for step, body in zip(journaled_steps, [*server.bodies[:2], server.bodies[3]], strict=True):
        assert step["call"]["provider"] == "openai"
        assert step["call"]["request"] == body, "the request recorded is the body sent"
        assert list(step)[-3:] == ["result", "call", "durationMs"]
    assert [s["call"]["method"] for s in journaled_steps] == [
        "chat.completions.create", "chat.completions.create", "responses.create",
    ]  # fmt: skip
    request = journaled_steps[1]["call"]["request"]
    assert request["seed"] == 7 and "top_p" not in request and "tools" not in request
    assert not {"extra_headers", "extra_query", "extra_body", "timeout"} & set(request)
    assert request["messages"][1] == {"role": "assistant", "content": "reply 1: hello"}
    assert request["messages"][1] == first.choices[0].message.to_dict(mode="json")
    assert journaled_steps[2]["call"]["request"]["stream"] is True
    assert journaled_steps[2]["stepId"] == "responses.create#2", "the closed stream left no step"
    line = storage.read("q1").data.splitlines()[2]
    assert b'"result":{"id":"chatcmpl-2"' in line and b'},"call":{"provider":"openai"' in line

    with open_run(storage, "q1") as run:  # the same code replays: a generator of messages too
        llm = journaled(client, run)
        again = llm.chat.completions.create(model="fake-1", messages=USER, temperature=0.7)
        assert again.choices[0].message.content == "reply 1: hello"
    assert server.total == 4


def _replay_with(
    client: OpenAI, recorded: dict[str, Any], replayed: dict[str, Any], *, method: str = "chat"
) -> tuple[MemoryStorage, ReplayMismatchError]:
    """Record a call made with `recorded`, then replay the run with `replayed` instead."""
    storage = MemoryStorage()
    kwargs = [recorded]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> None:
        llm = journaled(client, ctx)
        create = llm.chat.completions.create if method == "chat" else llm.responses.create
        answer = create(**kwargs[0])
        if kwargs[0].get("stream"):
            list(answer)
        ctx.suspend("go")

    assert agent.start("t", run_id="m1").status == "suspended"
    kwargs[0] = replayed
    with pytest.raises(ReplayMismatchError) as caught:
        agent.resume("m1", "go")
    assert read_journal(storage, "m1").status().status == "running"  # resumed, not settled
    return storage, caught.value


LONG = [
    {"role": "system", "content": "You are a careful editor."},
    {"role": "user", "content": "Draft a note."},
    {"role": "assistant", "content": "Here is a draft of the note about the launch."},
    {"role": "user", "content": "Shorter."},
]


@pytest.mark.parametrize(
    ("recorded", "replayed", "path", "values"),
    [
        (
            {"model": "fake-1", "messages": USER, "temperature": 0.7},
            {"model": "fake-1", "messages": USER, "temperature": 1.3},
            "temperature",
            "journal 0.7, code 1.3",
        ),
        (
            {"model": "fake-1", "messages": LONG},
            {"model": "fake-1", "messages": [*LONG[:2], {**LONG[2], "content": "Other."}, LONG[3]]},
            "messages[2].content",
            'journal "Here is a draft of the note about the launch.", code "Other."',
        ),
        (
            {"model": "fake-1", "messages": USER},
            {"model": "fake-1", "messages": USER, "top_p": 0.5},
            "top_p",
            "journal (absent), code 0.5",
        ),
        (
            {"model": "fake-1", "messages": USER, "stream": True},
            {"model": "fake-2", "messages": USER, "stream": True},
            "model",
            'journal "fake-1", code "fake-2"',
        ),
    ],
    ids=["temperature", "deep-message", "new-parameter", "stream"],
)
def test_a_changed_chat_request_is_a_replay_mismatch(
    server: FakeOpenAI,
    client: OpenAI,
    recorded: dict[str, Any],
    replayed: dict[str, Any],
    path: str,
    values: str,
) -> None:
    _, error = _replay_with(client, recorded, replayed)
    assert server.total == 1, "the mismatch made no request"
    message = str(error)
    assert f"at {path}: {values}." in message
    assert 'workflow.fork("m1", step="chat.completions.create")' in message
    assert "start a new run" in message
    assert (error.run_id, error.step_id, error.offset) == ("m1", "chat.completions.create", 1)


def test_a_changed_responses_request_is_a_replay_mismatch(
    server: FakeOpenAI, client: OpenAI
) -> None:
    notes = "summarise " + "the launch notes " * 9
    recorded = {"model": "fake-1", "input": notes + "the launch notes " + "in a table, " * 9}
    replayed = {"model": "fake-1", "input": notes + "briefly"}
    _, error = _replay_with(client, recorded, replayed, method="responses")
    assert server.total == 1
    # each value shortened to the part around where they start to differ
    journal = 'journal "…es the launch notes the launch notes in a table, in a table,…"'
    assert f'at input: {journal}, code "…es the launch notes briefly".' in str(error)


def test_the_fork_the_mismatch_suggests_asks_the_new_request(
    server: FakeOpenAI, client: OpenAI
) -> None:
    storage = MemoryStorage()
    temperature = [0.7]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(client, ctx)
        reply = llm.chat.completions.create(
            model="fake-1", messages=USER, temperature=temperature[0]
        )
        ctx.suspend("go")
        return reply.choices[0].message.content or ""

    assert agent.start("t", run_id="f1").status == "suspended"
    temperature[0] = 1.3
    with pytest.raises(ReplayMismatchError, match=r"at temperature: journal 0\.7, code 1\.3"):
        agent.resume("f1", "go")
    assert agent.fork("f1", step="chat.completions.create", new_run_id="f2").status == "suspended"
    assert agent.resume("f2", "go").result == "reply 2: hello"
    assert steps(storage, "f2")[0]["call"]["request"]["temperature"] == 1.3
    assert server.total == 2


def test_a_journal_without_requests_replays_as_before(
    server: FakeOpenAI, client: OpenAI, tmp_path: Path
) -> None:
    storage = LocalStorage(tmp_path)
    question = ["hello"]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(client, ctx)
        messages = [{"role": "user", "content": question[0]}]
        reply = llm.chat.completions.create(model="fake-1", messages=messages)
        stream = llm.chat.completions.create(model="fake-1", messages=messages, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream)
        ctx.suspend("go")
        return f"{reply.choices[0].message.content} / {streamed}"

    agent.start("t", run_id="old")
    path = tmp_path / "old.jsonl"
    entries = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert sum("call" in e for e in entries) == 2
    path.write_bytes(b"".join(encode({k: v for k, v in e.items() if k != "call"}) for e in entries))
    question[0] = "a changed question"  # unnoticed: nothing recorded to compare with
    result = agent.resume("old", "go")
    assert result.result == "reply 1: hello / reply 2: hello"
    assert server.total == 2
