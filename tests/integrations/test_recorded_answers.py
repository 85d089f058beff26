"""What a journaled client replays and what an edit may record (issue 30 section 4), with the
real SDKs against kassette's fake model server: a step recorded without a `call` replays
only when its result is a real response of the code's provider and method; a fork refuses
another provider's response object and writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic import Anthropic
from model_fixtures import Crash, claude_fixture, gpt_fixture, server_fixture  # noqa: F401 - fixtures
from openai import OpenAI
from openai.types.chat import ChatCompletion

from kassette import InvalidArgumentError, MemoryStorage, ReplayMismatchError, kassette
from kassette.core import read_journal
from kassette.integrations.openai import journaled
from kassette.testing import FakeModelServer

ASKED = {"model": "gpt-fake", "messages": [{"role": "user", "content": "Name a tide"}]}


def written_by_another_writer(gpt: OpenAI, recorded: Any) -> tuple[Any, list[Any]]:
    """A workflow whose first invocation journals `recorded` as a plain step named like the
    client's call (no `call` field), and whose later ones make that call through the client."""
    storage = MemoryStorage()
    seen: list[Any] = []
    first = [True]

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        if first[0]:
            ctx.step("chat.completions.create", lambda: recorded)
            raise Crash
        reply = journaled(gpt, ctx).chat.completions.create(**ASKED)
        seen.append(reply)
        return str(reply.choices[0].message.content)

    with pytest.raises(Crash):
        agent.start("", run_id="legacy")
    first[0] = False
    [step] = [e for e in read_journal(storage, "legacy").entries if e["type"] == "step"]
    assert "call" not in step
    return agent, seen


@pytest.mark.parametrize(
    "recorded",
    [
        {"answer": "Spring tide"},
        "Spring tide",
        {"type": "message", "role": "assistant", "content": [], "model": "claude"},
        {"stream": [{"object": "chat.completion.chunk", "choices": []}]},
    ],
    ids=["a-dict", "a-string", "an-anthropic-message", "a-stream"],
)
def test_a_step_without_call_that_is_no_response_is_a_replay_mismatch(
    server: FakeModelServer, gpt: OpenAI, recorded: Any
) -> None:
    agent, seen = written_by_another_writer(gpt, recorded)
    with pytest.raises(ReplayMismatchError, match=r"chat\.completions\.create"):
        agent.start("", run_id="legacy")
    assert seen == [] and server.request_count == 0


def test_a_step_without_call_that_is_a_real_response_replays_it(
    server: FakeModelServer, gpt: OpenAI
) -> None:
    live = gpt.chat.completions.create(**ASKED)  # type: ignore[call-overload]
    agent, seen = written_by_another_writer(gpt, live.to_dict(mode="json"))
    result = agent.start("", run_id="legacy")
    assert result.status == "success" and server.request_count == 1, "replayed, not asked"
    [replayed] = seen
    assert type(replayed) is ChatCompletion
    assert replayed.model_dump() == live.model_dump()


def test_a_fork_refuses_another_provider_s_response_object_and_writes_nothing(
    server: FakeModelServer, gpt: OpenAI, claude: Anthropic
) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        reply = journaled(gpt, ctx).chat.completions.create(**ASKED)
        return str(reply.choices[0].message.content)

    agent.start("", run_id="source")
    message = claude.messages.create(
        model="claude-fake", max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    )
    with pytest.raises(InvalidArgumentError, match="with an Anthropic message"):
        agent.fork("source", step="chat.completions.create", result=message, new_run_id="f")
    assert storage.read("f") is None

    # the code's own provider's object is what the API sent: accepted as its JSON
    other = gpt.chat.completions.create(**ASKED)  # type: ignore[call-overload]
    forked = agent.fork("source", step="chat.completions.create", result=other, new_run_id="g")
    assert forked.result == other.choices[0].message.content
    [edited] = [e for e in read_journal(storage, "g").entries if e.get("edited")]
    assert edited["result"] == other.to_dict(mode="json")
