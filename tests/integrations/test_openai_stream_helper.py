"""OpenAI's stream helper, `chat.completions.stream(...)`, journaled like Anthropic's
`messages.stream` (issue 30 section 4): live, the request reaches the fake model server once
and the chunks are journaled as a `chat.completions.stream` call; replayed, the SDK's own
`ChatCompletionStream` runs over the recorded chunks, with no request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from model_fixtures import Crash, gpt_fixture, server_fixture  # noqa: F401 - fixtures
from openai import AsyncOpenAI, OpenAI

from kassette import MemoryStorage, ReplayMismatchError, kassette
from kassette.core import read_journal, read_llm_call
from kassette.integrations.openai import journaled
from kassette.testing import FakeModelServer

ASKED: dict[str, Any] = {
    "model": "gpt-fake",
    "messages": [{"role": "user", "content": "Describe the spring tides"}],
}


def test_the_chat_stream_helper_is_journaled_and_replayed(
    server: FakeModelServer, gpt: OpenAI
) -> None:
    storage = MemoryStorage()
    seen: list[tuple[list[Any], Any]] = []
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        with journaled(gpt, ctx).chat.completions.stream(**ASKED) as stream:
            events = list(stream)
            final = stream.get_final_completion()
        seen.append((events, final))
        if crash[0]:
            raise Crash
        return str(final.choices[0].message.content)

    with pytest.raises(Crash):
        agent.start("", run_id="h")
    crash[0] = False
    result = agent.start("", run_id="h")

    assert server.request_count == 1, "the replay made no request"
    (live_events, live_final), (events, final) = seen
    assert [e.type for e in events] == [e.type for e in live_events]
    assert "content.delta" in [e.type for e in events]
    assert final.model_dump() == live_final.model_dump()
    assert result.result == live_final.choices[0].message.content and result.result
    [step] = [e for e in read_journal(storage, "h").entries if e["type"] == "step"]
    assert step["stepId"] == "chat.completions.stream"
    assert step["call"]["method"] == "chat.completions.stream"
    [(path, body)] = server.requests
    assert path == "/v1/chat/completions" and body["stream"] is True
    assert step["call"]["request"] == body
    call = read_llm_call(step)
    assert call is not None and call.stream and call.text == result.result


def test_a_changed_stream_helper_request_is_a_mismatch(
    server: FakeModelServer, gpt: OpenAI
) -> None:
    storage = MemoryStorage()
    temperature = [0.0]

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        client = journaled(gpt, ctx)
        with client.chat.completions.stream(**ASKED, temperature=temperature[0]) as stream:
            text = "".join(e.delta for e in stream if e.type == "content.delta")
        if temperature[0] == 0.0:
            raise Crash
        return text

    with pytest.raises(Crash):
        agent.start("", run_id="t")
    temperature[0] = 0.5
    with pytest.raises(ReplayMismatchError, match="temperature"):
        agent.start("", run_id="t")
    assert server.request_count == 1


def test_the_async_chat_stream_helper_is_journaled_and_replayed(
    server: FakeModelServer,
) -> None:
    storage = MemoryStorage()
    seen: list[Any] = []
    crash = [True]
    sdk = AsyncOpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)

    @kassette(storage=storage)
    async def agent(ctx: Any, _: str) -> str:
        client = journaled(sdk, ctx)
        options = {"stream_options": {"include_usage": True}}
        async with client.chat.completions.stream(**ASKED, **options) as stream:
            async for _event in stream:
                pass
            final = await stream.get_final_completion()
        seen.append(final)
        if crash[0]:
            raise Crash
        return str(final.choices[0].message.content)

    async def main() -> None:
        with pytest.raises(Crash):
            await agent.start("", run_id="a")
        crash[0] = False
        assert (await agent.start("", run_id="a")).status == "success"
        await sdk.close()

    asyncio.run(main())
    assert server.request_count == 1
    live, replayed = seen
    assert replayed.model_dump() == live.model_dump()
    [(_, body)] = server.requests
    assert body["stream_options"] == {"include_usage": True}
    assert replayed.usage is not None and replayed.usage.completion_tokens > 0
    [step] = [e for e in read_journal(storage, "a").entries if e["type"] == "step"]
    assert step["call"]["request"] == body
