"""kassette.integrations.anthropic with the real anthropic SDK against kassette's fake model
server on 127.0.0.1 (`kassette.testing.fake_model_server`), which speaks the Messages API as
JSON and as server-sent events and counts the requests that reach it.

After a crash and a replay, the count must not grow for calls the journal already holds, and
the replayed objects must be the SDK's own types, equal to what the live calls returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic, AsyncAnthropic, Stream
from anthropic.types import (
    Message,
    RawContentBlockDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)

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
from kassette._model_streams import expanded
from kassette.core import read_journal
from kassette.integrations.anthropic import journaled
from kassette.testing import FakeModelServer, fake_model_server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
USER = [{"role": "user", "content": "Write a note about launches"}]
MODEL = "claude-fake"
EVENT_TYPES = [
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop",
]  # fmt: skip


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing is journaled."""


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with fake_model_server() as fake:
        yield fake


@pytest.fixture
def client(server: FakeModelServer) -> Iterator[Anthropic]:
    with Anthropic(
        api_key="test-key", base_url=server.anthropic_base_url, max_retries=0, timeout=30
    ) as sdk:
        yield sdk


def steps(storage: MemoryStorage | LocalStorage, run_id: str) -> list[dict[str, Any]]:
    return [e for e in read_journal(storage, run_id).entries if e["type"] == "step"]


def text_of(events: list[Any]) -> str:
    return "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


def test_a_message_is_recorded_with_its_request_and_replayed_without_one(
    server: FakeModelServer, client: Anthropic
) -> None:
    storage = MemoryStorage()
    seen: list[Message] = []
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(client, ctx)
        reply = llm.messages.create(
            model=MODEL,
            max_tokens=300,
            system="Be terse.",
            messages=USER,
            stop_sequences=anthropic.NOT_GIVEN,
            extra_body={"temperature": 0.5},  # this SDK has no temperature argument
            extra_headers={"anthropic-beta": "x"},
            timeout=20,
        )
        seen.append(reply)
        if crash[0]:
            raise Crash
        return reply.content[0].text  # type: ignore[union-attr]

    with pytest.raises(Crash):
        agent.start("t", run_id="r1")
    assert server.request_count == 1
    crash[0] = False
    result = agent.start("t", run_id="r1")

    assert server.request_count == 1, "the replay made no request"
    live, replayed = seen
    assert type(replayed) is Message
    assert replayed.model_dump() == live.model_dump()
    assert result.result == live.content[0].text  # type: ignore[union-attr]
    [step] = steps(storage, "r1")
    assert step["stepId"] == "messages.create"
    assert step["result"] == live.to_dict(mode="json")
    [(path, body)] = server.requests
    assert path == "/v1/messages"
    assert step["call"] == {"provider": "anthropic", "method": "messages.create", "request": body}
    assert (
        body["temperature"] == 0.5
        and body["system"] == "Be terse."
        and "stop_sequences" not in body
    )
    assert list(step)[-3:] == ["result", "call", "durationMs"]


def test_stream_true_relays_events_live_and_replays_them_one_by_one(
    server: FakeModelServer, client: Anthropic
) -> None:
    storage = MemoryStorage()
    runs: list[list[Any]] = []
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        stream = journaled(client, ctx).messages.create(
            model=MODEL, max_tokens=300, messages=USER, stream=True
        )
        assert issubclass(type(stream), Stream)  # the SDK type (its isinstance varies by version)
        with stream:
            events = list(stream)
        runs.append(events)
        if crash[0]:
            raise Crash
        return text_of(events)

    with pytest.raises(Crash):
        agent.start("t", run_id="s1")
    crash[0] = False
    result = agent.start("t", run_id="s1")

    assert server.request_count == 1
    live, replayed = runs
    assert [type(e) for e in replayed] == [type(e) for e in live]
    assert isinstance(replayed[0], RawMessageStartEvent)
    assert isinstance(replayed[2], RawContentBlockDeltaEvent)
    assert isinstance(replayed[-1], RawMessageStopEvent)
    assert [e.model_dump() for e in replayed] == [e.model_dump() for e in live]
    assert result.result == text_of(live) and len(result.result) > 20
    [step] = steps(storage, "s1")
    assert list(step["result"]) == ["stream"]
    stored = expanded(step["result"])["stream"]  # stored compactly: every event, as sent
    assert stored == [e.to_dict(mode="json") for e in live]
    types = [event["type"] for event in stored]
    assert [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t] == EVENT_TYPES
    assert step["call"]["request"] == server.requests[0][1]
    assert step["call"]["request"]["stream"] is True


def test_the_stream_helper_journals_when_the_stream_ends_and_replays_it(
    server: FakeModelServer, client: Anthropic
) -> None:
    storage = MemoryStorage()
    seen: list[tuple[str, Message, str]] = []

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(client, ctx)
        with llm.messages.stream(model=MODEL, max_tokens=300, messages=USER) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        with llm.messages.stream(model=MODEL, max_tokens=300, messages=USER) as stream:
            second = stream.get_final_text()  # consumes the stream without reading it
        seen.append((text, final, second))
        ctx.suspend("go")
        return text

    assert agent.start("t", run_id="h1").status == "suspended"
    assert server.request_count == 2
    result = agent.resume("h1", "go")
    assert server.request_count == 2, "the replay made no request"
    (live_text, live_final, live_second), (text, final, second) = seen
    assert text == live_text == result.result and second == live_second == text
    assert final.model_dump() == live_final.model_dump()
    assert final.usage.output_tokens > 0 and final.stop_reason == "end_turn"
    journaled_steps = steps(storage, "h1")
    assert [s["stepId"] for s in journaled_steps] == ["messages.stream", "messages.stream#2"]
    assert journaled_steps[0]["call"]["method"] == "messages.stream"
    assert journaled_steps[0]["call"]["request"] == server.requests[0][1]
    assert journaled_steps[0]["call"]["request"]["stream"] is True


def test_a_stream_closed_before_its_end_is_not_journaled(
    server: FakeModelServer, client: Anthropic
) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(client, ctx)
        with llm.messages.stream(model=MODEL, max_tokens=300, messages=USER) as stream:
            first = next(iter(stream.text_stream))
        return first

    assert agent.start("t", run_id="c1").status == "success"
    assert steps(storage, "c1") == []
    agent.start("t", run_id="c2")
    assert server.request_count == 2


def test_an_overloaded_api_is_retried_by_the_sdk_inside_the_step(
    server: FakeModelServer,
) -> None:
    storage = MemoryStorage()
    patient = Anthropic(
        api_key="test-key", base_url=server.anthropic_base_url, max_retries=2, timeout=30
    )

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(patient, ctx)
        reply = llm.messages.create(model=MODEL, max_tokens=300, messages=USER)
        with llm.messages.stream(model=MODEL, max_tokens=300, messages=USER) as stream:
            streamed = stream.get_final_text()
        ctx.suspend("go")
        return f"{reply.content[0].text} | {streamed}"  # type: ignore[union-attr]

    server.fail_next(2, status=529)  # two 529s, then the answer: three requests for one step
    assert agent.start("t", run_id="o1").status == "suspended"
    assert server.request_count == 4
    assert [path for path, _ in server.requests] == ["/v1/messages"] * 4
    assert len(steps(storage, "o1")) == 2
    assert agent.resume("o1", "go").status == "success"
    assert server.request_count == 4, "the replay made no request"

    impatient = journaled(patient.with_options(max_retries=0), open_run(storage, "o2"))
    server.fail_next(1, status=529)
    with pytest.raises(anthropic.APIStatusError) as caught:
        impatient.messages.create(model=MODEL, max_tokens=300, messages=USER)
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert steps(storage, "o2") == [], "a failed call journals nothing"
    patient.close()


class _Threads(MemoryStorage):
    """Records the thread of every append."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[int] = []

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        self.appends.append(threading.get_ident())
        return super().append(run_id, data, token=token)


def test_async_client_in_an_async_workflow(server: FakeModelServer) -> None:
    storage = _Threads()
    sdk = AsyncAnthropic(
        api_key="test-key", base_url=server.anthropic_base_url, max_retries=0, timeout=30
    )
    crash = [True]
    texts: list[tuple[str, str, str, Message]] = []

    @kassette(storage=storage)
    async def agent(ctx: AsyncContext, task: str) -> str:
        llm = journaled(sdk, ctx)
        reply = await llm.messages.create(model=MODEL, max_tokens=300, messages=USER)
        stream = await llm.messages.create(model=MODEL, max_tokens=50, messages=USER, stream=True)
        streamed = text_of([event async for event in stream])
        async with llm.messages.stream(model=MODEL, max_tokens=80, messages=USER) as helper:
            helped = "".join([text async for text in helper.text_stream])
            final = await helper.get_final_message()
        texts.append((reply.content[0].text, streamed, helped, final))  # type: ignore[union-attr]
        if crash[0]:
            raise Crash
        return streamed

    async def main() -> int:
        with pytest.raises(Crash):
            await agent.start("t", run_id="a1")
        crash[0] = False
        assert (await agent.start("t", run_id="a1")).status == "success"
        await sdk.close()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert server.request_count == 3
    assert storage.appends and loop_thread not in storage.appends  # written off the loop
    live, replayed = texts
    assert live[:3] == replayed[:3] and all(live[:3])
    assert type(replayed[3]) is type(live[3])
    assert replayed[3].model_dump() == live[3].model_dump()
    assert [s["call"]["method"] for s in steps(storage, "a1")] == [
        "messages.create", "messages.create", "messages.stream",
    ]  # fmt: skip


def test_a_worker_sigkilled_between_a_response_and_its_append_asks_again(
    server: FakeModelServer, tmp_path: Path
) -> None:
    kill_at = 3  # the stream helper's call: the two calls before it are journaled, replayed
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = [
        sys.executable,
        str(HERE / "anthropic_worker.py"),
        str(tmp_path),
        "k1",
        server.anthropic_base_url,
    ]
    killed = subprocess.run(
        [*worker, str(kill_at)], capture_output=True, text=True, timeout=120, env=environment
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert server.request_count == kill_at  # the killed call's answer had arrived
    journal = read_journal(LocalStorage(tmp_path), "k1")
    assert len([e for e in journal.entries if e["type"] == "step"]) == kill_at - 1

    done = subprocess.run(
        [*worker, "0"], capture_output=True, text=True, timeout=120, env=environment
    )
    assert done.returncode == 0, done.stderr
    assert server.request_count == 3 + 1, "only the killed call was asked again, then the rest"
    bodies = [body for _, body in server.requests]
    assert bodies[kill_at - 1] == bodies[kill_at], "the same request, asked again"
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "success"
    assert all(len(outcome["result"][key]) > 20 for key in ("plan", "draft", "review"))
    journal = read_journal(LocalStorage(tmp_path), "k1")
    assert [(e["session"], e["stepId"]) for e in journal.entries if e["type"] == "step"] == [
        (1 if n < kill_at else 2, step_id)
        for n, step_id in enumerate(["messages.create", "messages.create#2", "messages.stream"], 1)
    ]


# -- a changed request is a replay mismatch ----------------------------------------------------

CONVERSATION = [
    {"role": "user", "content": "Draft a note about the launch."},
    {"role": "assistant", "content": "The launch is on Monday."},
    {"role": "user", "content": [{"type": "text", "text": "Shorter, please."}]},
]


def _replayed_with(
    client: Anthropic, recorded: dict[str, Any], replayed: dict[str, Any], *, helper: bool = False
) -> ReplayMismatchError:
    """Record a call made with `recorded`, then replay the run with `replayed` instead."""
    storage = MemoryStorage()
    kwargs = [recorded]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> None:
        llm = journaled(client, ctx)
        if helper:
            with llm.messages.stream(**kwargs[0]) as stream:
                stream.until_done()
        else:
            answer = llm.messages.create(**kwargs[0])
            if kwargs[0].get("stream"):
                list(answer)
        ctx.suspend("go")

    assert agent.start("t", run_id="m1").status == "suspended"
    kwargs[0] = replayed
    with pytest.raises(ReplayMismatchError) as caught:
        agent.resume("m1", "go")
    return caught.value


BASE = {"model": MODEL, "max_tokens": 300, "messages": CONVERSATION}


@pytest.mark.parametrize(
    ("recorded", "replayed", "expected"),
    [
        (
            {**BASE, "system": "You are a terse editor."},
            {**BASE, "system": "You are a friendly editor."},
            'at system: journal "You are a terse editor.", code "You are a friendly editor."',
        ),
        (
            {**BASE, "extra_body": {"temperature": 0.2}},
            {**BASE, "extra_body": {"temperature": 1.0}},
            "at temperature: journal 0.2, code 1.0",
        ),
        (
            BASE,
            {
                **BASE,
                "messages": [
                    *CONVERSATION[:2],
                    {"role": "user", "content": [{"type": "text", "text": "Longer, please."}]},
                ],
            },
            'at messages[2].content[0].text: journal "Shorter, please.", code "Longer, please."',
        ),
        (
            {**BASE, "stream": True},
            {**BASE, "stream": True, "stop_sequences": ["\n\n"]},
            'at stop_sequences: journal (absent), code ["\\n\\n"]',
        ),
    ],
    ids=["system", "temperature", "deep-message", "stream"],
)
def test_a_changed_request_is_a_replay_mismatch(
    server: FakeModelServer,
    client: Anthropic,
    recorded: dict[str, Any],
    replayed: dict[str, Any],
    expected: str,
) -> None:
    error = _replayed_with(client, recorded, replayed)
    assert server.request_count == 1, "the mismatch made no request"
    message = str(error)
    print(message)  # the message as a user reads it (pytest -s)
    assert f"{expected}. " in message
    assert 'fork the run at this step (workflow.fork("m1", step="messages.create"))' in message
    assert message.endswith("or start a new run")
    assert (error.run_id, error.step_id, error.offset) == ("m1", "messages.create", 1)


def test_a_changed_stream_helper_request_is_a_replay_mismatch(
    server: FakeModelServer, client: Anthropic
) -> None:
    error = _replayed_with(client, BASE, {**BASE, "max_tokens": 100}, helper=True)
    assert server.request_count == 1
    assert "at max_tokens: journal 300, code 100." in str(error)
    assert 'step="messages.stream"' in str(error)


def test_create_and_the_stream_helper_replay_each_other(
    server: FakeModelServer, client: Anthropic
) -> None:
    storage = MemoryStorage()
    helper = [False]
    texts: list[str] = []

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> None:
        llm = journaled(client, ctx, name="draft")
        if helper[0]:
            with llm.messages.stream(**BASE) as stream:
                texts.append(stream.get_final_text())
        else:
            texts.append(text_of(list(llm.messages.create(**BASE, stream=True))))
        ctx.suspend("go")

    agent.start("t", run_id="e1")
    helper[0] = True  # the same request to the same endpoint: the recorded events answer it
    agent.resume("e1", "go")
    assert server.request_count == 1
    assert texts[0] == texts[1] and len(texts[1]) > 20


def test_a_previous_answer_passed_back_is_journaled_as_its_json(
    server: FakeModelServer, client: Anthropic
) -> None:
    storage = MemoryStorage()
    for _ in range(2):
        with open_run(storage, "p1") as run:
            llm = journaled(client, run)
            first = llm.messages.create(model=MODEL, max_tokens=100, messages=USER)
            follow_up = [
                *USER,
                {"role": "assistant", "content": first.content},  # the SDK's TextBlock objects
                {"role": "user", "content": "Go on."},
            ]
            llm.messages.create(model=MODEL, max_tokens=100, messages=iter(follow_up))
    assert server.request_count == 2, "the second session replayed both, the generator too"
    second = steps(storage, "p1")[1]["call"]["request"]
    assert second == server.requests[1][1]
    assert second["messages"][1]["content"] == [block.to_dict() for block in first.content]


def test_a_journal_without_requests_replays_as_before(
    server: FakeModelServer, client: Anthropic, tmp_path: Path
) -> None:
    storage = LocalStorage(tmp_path)
    system = ["You are terse."]

    @kassette(storage=storage)
    def agent(ctx: Context, task: str) -> str:
        llm = journaled(client, ctx)
        reply = llm.messages.create(model=MODEL, max_tokens=100, system=system[0], messages=USER)
        ctx.suspend("go")
        return reply.content[0].text  # type: ignore[union-attr]

    agent.start("t", run_id="old")
    path = tmp_path / "old.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    entries = [json.loads(line) for line in lines]
    assert [("call" in e) for e in entries] == [False, True, False]
    from kassette._journal import encode

    path.write_bytes(b"".join(encode({k: v for k, v in e.items() if k != "call"}) for e in entries))
    system[0] = "You are verbose."  # unnoticed: nothing recorded to compare with
    result = agent.resume("old", "go")
    assert result.result == entries[1]["result"]["content"][0]["text"]
    assert server.request_count == 1


# -- arguments, names, the SDK missing ---------------------------------------------------------


def test_bad_arguments(client: Anthropic) -> None:
    storage = MemoryStorage()
    with open_run(storage, "bad") as run:
        with pytest.raises(InvalidArgumentError, match=r"wraps an anthropic\.Anthropic"):
            journaled(object(), run)  # type: ignore[type-var]
        with pytest.raises(InvalidArgumentError, match="needs the workflow's ctx or a Run"):
            journaled(client, "ctx")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="may not contain"):
            journaled(client, run, name="a/b")
        with pytest.raises(InvalidArgumentError, match="takes no output_format"):
            journaled(client, run).messages.stream(
                model=MODEL, max_tokens=10, messages=USER, output_format=dict
            )


def test_names_passthrough_and_options(server: FakeModelServer, client: Anthropic) -> None:
    storage = MemoryStorage()
    with open_run(storage, "n1") as run:
        llm = journaled(client, run, name="plan")
        llm.messages.create(model=MODEL, max_tokens=50, messages=USER)
        llm.with_options(timeout=60).messages.create(model=MODEL, max_tokens=50, messages=USER)
        assert str(llm.base_url) == str(client.base_url)
    assert [s["stepId"] for s in steps(storage, "n1")] == ["plan", "plan#2"]


def test_without_the_sdk_the_import_error_names_the_extra() -> None:
    program = (
        "import sys; sys.modules['anthropic'] = None\n"
        "try:\n    import kassette.integrations.anthropic\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert 'pip install "kassette[anthropic]"' in done.stdout, done.stderr
