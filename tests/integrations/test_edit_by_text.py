"""Editing a model call with text (issue 20 section 5), through the real SDKs.

A fork (or a fan-out, or `kassette fork --result`) that gives a model-call step a string
journals a well-formed response of that provider carrying the string, marked edited, with the
recorded request kept; the code downstream receives the SDK's own type with that text and the
branch goes on without asking the model again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from kassette import InvalidArgumentError, LocalStorage, MemoryStorage, kassette
from kassette import explore as kx
from kassette._llm_calls import read_llm_call
from kassette.core import read_journal
from kassette.integrations.openai import journaled
from kassette.storage import Storage
from kassette.testing import FakeModelServer, fake_model_server

ROOT = Path(__file__).resolve().parent.parent.parent
MODEL = "gpt-4o-mini"
COMPLETION = {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL, "choices": []}
RESPONSE_EVENTS = [
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", "response.output_text.delta", "response.output_text.done",
    "response.content_part.done", "response.output_item.done", "response.completed",
]  # fmt: skip


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with fake_model_server(seed=3) as server:
        yield server


@pytest.fixture
def client(model_server: FakeModelServer) -> Iterator[OpenAI]:
    with OpenAI(api_key="unused", base_url=model_server.openai_base_url, max_retries=0) as sdk:
        yield sdk


def writer(storage: Storage, client: OpenAI, seen: list[Any], *, method: str = "chat",
           stream: bool = False) -> Any:  # fmt: skip
    """A two-call agent: draft (the step edited), then a review of the draft."""

    @kassette(storage=storage)
    def agent(ctx: Any, topic: str) -> dict[str, Any]:
        model = journaled(client, ctx)
        if method == "chat":
            asked = {"model": MODEL, "messages": [{"role": "user", "content": f"Draft: {topic}"}]}
            if stream:
                chunks = list(model.chat.completions.create(**asked, stream=True))
                seen.append(chunks)
                draft = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                reply = model.chat.completions.create(**asked)
                seen.append(reply)
                draft = reply.choices[0].message.content or ""
        else:
            asked = {"model": MODEL, "input": f"Draft: {topic}"}
            if stream:  # the text as a streaming reader assembles it: from the deltas
                events = list(model.responses.create(**asked, stream=True))
                seen.append(events)
                draft = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            else:
                response = model.responses.create(**asked)
                seen.append(response)
                draft = response.output_text
        review = model.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"Review: {draft}"}]
        )
        return {"draft": draft, "review": review.choices[0].message.content}

    return agent


def draft_step(storage: Storage, run_id: str) -> dict[str, Any]:
    return next(e for e in read_journal(storage, run_id).entries if e["type"] == "step")


@pytest.mark.parametrize(
    ("method", "stream"),
    [("chat", False), ("chat", True), ("responses", False), ("responses", True)],
)
def test_a_fork_edits_a_model_call_with_text_and_the_branch_continues(
    model_server: FakeModelServer, client: OpenAI, method: str, stream: bool
) -> None:
    storage = MemoryStorage()
    seen: list[Any] = []
    agent = writer(storage, client, seen, method=method, stream=stream)
    agent.start("tides", run_id="source")
    asked = model_server.request_count
    source_draft = draft_step(storage, "source")

    forked = agent.fork("source", step=source_draft["stepId"], result="A better draft.",
                        new_run_id="edited")  # fmt: skip

    assert forked.status == "success"
    assert forked.result["draft"] == "A better draft."
    assert model_server.request_count == asked + 1  # only the review asked the model
    edited = [e for e in read_journal(storage, "edited").entries if e.get("edited")]
    assert len(edited) == 1
    entry = edited[0]
    assert entry["call"] == source_draft["call"]  # the recorded request is kept
    assert entry["result"] != source_draft["result"]
    received = seen[-1]
    if not stream:  # the SDK's own type, validated, carrying the text
        kind = ChatCompletion if method == "chat" else Response
        assert type(received) is kind
        kind.model_validate(entry["result"])
    elif method == "responses":  # a well-formed event sequence, its deltas and its end agree
        assert [e.type for e in received] == RESPONSE_EVENTS
        assert [e.sequence_number for e in received] == list(range(len(RESPONSE_EVENTS)))
        [delta] = [e for e in received if e.type == "response.output_text.delta"]
        done = next(e for e in received if e.type == "response.output_text.done")
        completed = received[-1].response
        assert delta.delta == done.text == completed.output_text == "A better draft."
        assert delta.item_id == done.item_id == completed.output[0].id
    else:
        assert [c.choices[0].delta.content for c in received if c.choices] == [
            "", "A better draft.", None,
        ]  # fmt: skip
    # the review (live, downstream) was asked about the edited text
    review_request = model_server.requests[-1][1]
    assert review_request["messages"][-1]["content"] == "Review: A better draft."
    calls = kx.load(storage).llm_calls
    row = calls[(calls["run_id"] == "edited") & ~calls["copied"]].iloc[0]
    assert row["response_text"] == "A better draft."
    assert row["finish_reason"] == "stop"
    if read_llm_call(source_draft).usage.input_tokens is not None:  # type: ignore[union-attr]
        assert row["cost_usd"] == 0  # no tokens were spent on an edit
    else:  # a chat stream reports usage only when asked to: an edit of one does not either
        assert pd.isna(row["cost_usd"])


def test_a_whole_response_is_still_accepted(client: OpenAI) -> None:
    storage = MemoryStorage()
    seen: list[Any] = []
    agent = writer(storage, client, seen)
    agent.start("tides", run_id="source")
    recorded = draft_step(storage, "source")["result"]
    whole = json.loads(json.dumps(recorded))
    whole["choices"][0]["message"]["content"] = "Edited as a whole."
    forked = agent.fork("source", step="chat.completions.create", result=whole)
    assert forked.result["draft"] == "Edited as a whole."
    entry = next(e for e in read_journal(storage, forked.run_id).entries if e.get("edited"))
    assert entry["result"] == whole


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (42, "a number (42)"),
        ({"text": "not a response"}, "an object that is no model response"),
        (
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude",
                "stop_reason": "end_turn",
                "usage": {},
            },
            "an Anthropic message",
        ),
        (["a", "list"], "a list"),
        (None, "null"),
    ],
)
def test_anything_else_is_refused_with_nothing_written(
    client: OpenAI, result: Any, said: str
) -> None:
    storage = MemoryStorage()
    agent = writer(storage, client, [])
    agent.start("tides", run_id="source")
    with pytest.raises(InvalidArgumentError) as raised:
        agent.fork("source", step="chat.completions.create", result=result, new_run_id="bad")
    message = str(raised.value)
    assert said in message
    assert "give the answer's text (a string) or an OpenAI chat completion" in message
    assert storage.read("bad") is None


def test_a_stream_s_edit_must_be_a_stream_or_text(client: OpenAI) -> None:
    storage = MemoryStorage()
    seen: list[Any] = []
    agent = writer(storage, client, seen, stream=True)
    agent.start("tides", run_id="source")
    with pytest.raises(InvalidArgumentError, match="a stream of OpenAI chat completion events"):
        agent.fork("source", step="chat.completions.create", result=COMPLETION, new_run_id="x")
    assert storage.read("x") is None


def test_a_non_model_step_refuses_a_model_response(client: OpenAI) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def plain(ctx: Any, topic: str) -> Any:
        return ctx.step("outline", lambda: {"outline": topic})

    plain.start("tides", run_id="plain")
    with pytest.raises(InvalidArgumentError, match="the step is not a model call"):
        plain.fork("plain", step="outline", result=COMPLETION, new_run_id="x")
    assert storage.read("x") is None
    # its own kind of value, a string included, is fine
    assert plain.fork("plain", step="outline", result="short", new_run_id="y").result == "short"


def test_fan_out_edits_a_model_call_with_texts(
    model_server: FakeModelServer, client: OpenAI
) -> None:
    storage = MemoryStorage()
    agent = writer(storage, client, [])
    agent.start("tides", run_id="source")
    texts = ["First draft.", "Second draft.", "Third draft."]
    branches = kx.fan_out(agent, "source", step="chat.completions.create", results=texts,
                          prefix="drafts")  # fmt: skip
    frame = branches.frame
    assert frame["status"].tolist() == ["success"] * 3
    assert [result["draft"] for result in frame["result"]] == texts
    assert str(frame["cost_usd"].dtype) == "Float64"
    runs = kx.load(storage, run_ids=branches.run_ids).runs.set_index("run_id")
    assert frame["cost_usd"].tolist() == runs.loc[branches.run_ids, "cost_usd"].tolist()


def test_cli_fork_with_a_text_result_journals_a_response(client: OpenAI, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    seen: list[Any] = []
    agent = writer(storage, client, seen)
    agent.start("tides", run_id="source")
    done = subprocess.run(
        [sys.executable, "-m", "kassette", "--storage", f"file:{tmp_path}", "fork", "source",
         "--from-step", "chat.completions.create", "--new-run-id", "cli",
         "--result", '"Typed in a shell."'],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    entry = next(e for e in read_journal(storage, "cli").entries if e.get("edited"))
    ChatCompletion.model_validate(entry["result"])
    assert entry["result"]["choices"][0]["message"]["content"] == "Typed in a shell."
    result = agent.start(run_id="cli")
    assert result.result["draft"] == "Typed in a shell."
    refused = subprocess.run(
        [sys.executable, "-m", "kassette", "--storage", f"file:{tmp_path}", "fork", "source",
         "--from-step", "chat.completions.create", "--new-run-id", "cli2", "--result", "7"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "give the answer's text" in json.loads(refused.stderr)["error"]["message"]
    assert storage.read("cli2") is None


# -- Anthropic --------------------------------------------------------------------------------

CLAUDE = "claude-3-5-haiku-20241022"


@pytest.fixture
def claude(model_server: FakeModelServer) -> Iterator[Any]:
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(api_key="unused", base_url=model_server.anthropic_base_url) as sdk:
        yield sdk


def claude_writer(storage: Storage, client: Any, how: str, seen: list[Any]) -> Any:
    """The same two-call agent on the Anthropic SDK: `how` is `create`, `stream` (create with
    stream=True) or `helper` (messages.stream)."""
    from kassette.integrations.anthropic import journaled as journaled_anthropic

    @kassette(storage=storage)
    def agent(ctx: Any, topic: str) -> dict[str, Any]:
        model = journaled_anthropic(client, ctx)
        asked = {"model": CLAUDE, "max_tokens": 200,
                 "messages": [{"role": "user", "content": f"Draft: {topic}"}]}  # fmt: skip
        if how == "create":
            message = model.messages.create(**asked)
            draft = "".join(block.text for block in message.content if block.type == "text")
        elif how == "stream":
            events = list(model.messages.create(**asked, stream=True))
            seen.append(events)
            draft = "".join(
                e.delta.text
                for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            )
        else:
            with model.messages.stream(**asked) as stream:
                draft = "".join(stream.text_stream)
        review = model.messages.create(
            model=CLAUDE, max_tokens=200,
            messages=[{"role": "user", "content": f"Review: {draft}"}],
        )  # fmt: skip
        return {"draft": draft, "review": review.content[0].text}

    return agent


@pytest.mark.parametrize("how", ["create", "stream", "helper"])
def test_an_anthropic_call_is_edited_with_text(
    model_server: FakeModelServer, claude: Any, how: str
) -> None:
    storage = MemoryStorage()
    seen: list[Any] = []
    agent = claude_writer(storage, claude, how, seen)
    agent.start("tides", run_id="source")
    asked = model_server.request_count
    source_draft = draft_step(storage, "source")
    assert read_llm_call(source_draft) is not None

    forked = agent.fork("source", step=source_draft["stepId"], result="Un meilleur brouillon.")

    assert forked.status == "success"
    assert forked.result["draft"] == "Un meilleur brouillon."
    assert model_server.request_count == asked + 1  # the review only
    entry = next(e for e in read_journal(storage, forked.run_id).entries if e.get("edited"))
    assert entry["call"] == source_draft["call"]
    edited = read_llm_call(entry)
    assert edited is not None
    assert (edited.provider, edited.stream, edited.text) == (
        "anthropic",
        how != "create",
        "Un meilleur brouillon.",
    )
    if how == "create":
        from anthropic.types import Message

        Message.model_validate(entry["result"])
    if how == "stream":  # the events a streaming reader sees: one text delta, then the stop
        received = seen[-1]
        assert [e.type for e in received] == [
            "message_start", "content_block_start", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop",
        ]  # fmt: skip
        assert received[2].delta.text == "Un meilleur brouillon."
        assert received[4].delta.stop_reason == "end_turn"
    with pytest.raises(
        InvalidArgumentError, match=r"an Anthropic message|Anthropic message events"
    ):
        agent.fork("source", step=source_draft["stepId"], result=COMPLETION, new_run_id="bad")
    assert storage.read("bad") is None
