"""Streams stored compactly (`kassette._model_streams`, issue 30 section 4): every event comes
back exactly as sent, whatever its strings hold, and a 2,000-token answer streamed through
the real SDKs takes at most 3x its text plus a fixed envelope (it took 16x to 49x)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kassette import MemoryStorage, kassette
from kassette._llm_calls import read_llm_fields
from kassette._model_streams import collapsed, compacted, expanded
from kassette.core import read_journal, read_llm_call
from kassette.integrations.anthropic import journaled as journaled_anthropic
from kassette.integrations.openai import journaled as journaled_openai
from kassette.testing import _model_answers as answers
from kassette.testing import _model_server as server_module
from kassette.testing import fake_model_server

HOW = ["chat", "responses", "anthropic", "chat tool", "anthropic tool"]
TOOL = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def round_trip(events: list[Any]) -> list[Any]:
    """Through the journal's JSON, as a replay reads it."""
    stored = json.loads(json.dumps({"stream": compacted(events)}))
    return expanded(stored)["stream"]  # type: ignore[no-any-return]


def streamed(how: str, answer: Callable[..., Any] | None = None) -> tuple[list[Any], Any, str]:
    """One streamed call through the real SDK, journaled: the live chunks as JSON, the step
    entry, and the text the code assembled."""
    storage = MemoryStorage()
    chunks: list[Any] = []
    texts: list[str] = []
    original = server_module.answer
    if answer is not None:
        server_module.answer = answer  # type: ignore[assignment]
    try:
        with fake_model_server() as server:
            oai = openai.OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)
            claude = anthropic.Anthropic(api_key="k", base_url=server.anthropic_base_url)

            @kassette(storage=storage)
            def agent(ctx: Any, _: str) -> None:
                asked = [{"role": "user", "content": "Weather in Paris, and tides?"}]
                if how.startswith("chat"):
                    tools = [
                        {"type": "function", "function": {"name": "weather", "parameters": TOOL}}
                    ]
                    extra: dict[str, Any] = {"tools": tools, "tool_choice": "required"}
                    stream: Any = journaled_openai(oai, ctx).chat.completions.create(
                        model="gpt-4o-mini", messages=asked, stream=True,
                        stream_options={"include_usage": True},
                        **(extra if "tool" in how else {}),
                    )  # fmt: skip
                    for chunk in stream:
                        chunks.append(chunk.to_dict(mode="json"))
                        texts.extend(c.delta.content or "" for c in chunk.choices)
                elif how == "responses":
                    for event in journaled_openai(oai, ctx).responses.create(
                        model="gpt-4o-mini", input=asked, stream=True
                    ):
                        chunks.append(event.to_dict(mode="json"))
                        if event.type == "response.output_text.delta":
                            texts.append(event.delta)
                else:
                    tools = [{"name": "weather", "input_schema": TOOL}]
                    extra = {"tools": tools, "tool_choice": {"type": "any"}}
                    for event in journaled_anthropic(claude, ctx).messages.create(
                        model="claude-3-5-haiku-latest", max_tokens=4096, messages=asked,
                        stream=True, **(extra if "tool" in how else {}),
                    ):  # fmt: skip
                        chunks.append(event.to_dict(mode="json"))
                        if event.type == "content_block_delta" and event.delta.type == "text_delta":
                            texts.append(event.delta.text)

            assert agent.start("", run_id="r").status == "success"
            oai.close()
            claude.close()
    finally:
        server_module.answer = original  # type: ignore[assignment]
    [step] = [e for e in read_journal(storage, "r").entries if e["type"] == "step"]
    return chunks, step, "".join(texts)


@pytest.mark.parametrize("how", HOW)
def test_a_stored_stream_is_every_event_as_sent(how: str) -> None:
    chunks, step, text = streamed(how)
    assert len(chunks) > 5
    assert expanded(step["result"]) == {"stream": chunks}
    call = read_llm_call(step)
    assert call is not None and call.stream and call.text == text
    assert call.result == {"stream": chunks}
    assert ("tool" in how) == bool(call.tool_calls)


def long_answer(tokens: int) -> Callable[..., Any]:
    sentences: list[str] = []
    while answers.count_tokens(" ".join(sentences)) < tokens:
        turn = (("user", f"Explain tide number {len(sentences)} and the moon"),)
        sentences.append(answers.answer(answers.Prompt("m", turns=turn)).text)
    text = " ".join(" ".join(sentences).split(" ")[: int(tokens * 0.8)])
    original = server_module.answer

    def answer(prompt: Any, *, seed: int = 0) -> Any:
        given = original(prompt, seed=seed)
        return answers.Answer(text, None, "stop", given.prompt_tokens, answers.count_tokens(text))

    return answer


@pytest.mark.parametrize("how", HOW[:3])
def test_a_2000_token_stream_takes_at_most_3x_its_text_plus_the_envelope(how: str) -> None:
    chunks, step, text = streamed(how, long_answer(2000))
    assert 1800 <= answers.count_tokens(text) <= 2200
    _, short, _ = streamed(how, long_answer(3))
    envelope = size(short["result"])
    stored = size(step["result"])
    assert stored - envelope <= 3 * len(text.encode()), (stored, envelope, len(text.encode()))
    assert size({"stream": chunks}) > 10 * len(text.encode()), "as sent it is far larger"
    assert expanded(step["result"]) == {"stream": chunks}


@pytest.mark.parametrize(
    "events",
    [
        [],
        [{"type": "a"}],
        [{"type": "d", "text": "\x00"}, {"type": "d", "text": "\x000"}, {"type": "d", "text": "x"}],
        [{"type": "d", "text": "\x00\x00" + "z" * 50}] * 3 + [{"type": "e", "s": "\x000"}],
        [{"n": 1}, {"n": 1.0}, {"n": True}, {"n": 2}, {"n": None}, {"n": "2"}],
        [{"n": 0.0, "t": "a"}, {"n": -0.0, "t": "b"}, {"n": 0.0, "t": "c"}],
        [{"seq": 5, "t": "a"}, {"seq": 6, "t": "b"}, {"seq": 8, "t": "c"}],
        [{"seq": 5}, {"seq": 6}, {"seq": 7}, {"other": 1}],
        [{"a": {}}, {"a": []}, {"a": {"b": 1}}, {"a": [1]}, {"a": [1]}],
        [{"x": "y" * 60, "k" * 60: "y" * 60}, {"x": "y" * 60, "k" * 60: "y" * 60}],
        [{"\x00key": "v", "list": [0, "\x001", {"deep": ["y" * 45, "y" * 45]}]}],
        [{"t": "d", "v": i, "w": -i, "s": str(i), "u": [i]} for i in range(6)],
        [{"t": "d", "text": t, "obfuscation": "pad"} for t in ("a", "b")] + [{"obfuscation": 1}],
    ],
)
def test_any_events_come_back_exactly_but_a_delta_s_padding(events: list[Any]) -> None:
    """Hostile strings (the mark itself, digits after it), numbers of three types, empty
    containers, counters that skip, long repeated keys and values: all come back as sent;
    only an `obfuscation` string (padding) is left out."""
    kept = [
        {k: v for k, v in e.items() if not (k == "obfuscation" and isinstance(v, str))}
        for e in events
    ]
    back = round_trip(events)
    assert json.dumps(back) == json.dumps(kept)  # key order, 1 / 1.0 / true, 0.0 / -0.0
    assert [[type(v) for v in _scalars(e)] for e in back] == [
        [type(v) for v in _scalars(e)] for e in kept
    ]


def _scalars(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in _scalars(item)]
    if isinstance(value, list):
        return [s for item in value for s in _scalars(item)]
    return [value]


def test_a_plain_stream_reads_as_before() -> None:
    plain = {"stream": [{"type": "message_start", "message": {}}, {"type": "message_stop"}]}
    assert expanded(plain) is plain
    assert expanded({"not": "a stream"}) == {"not": "a stream"}


_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(-2, 2, allow_nan=False),
    st.sampled_from([0.0, -0.0, 0, 1, 1.0, True, False]),
    st.sampled_from(["", "a", "\x00", "\x000", "\x00\x00", "x" * 40, "y" * 41]),
    st.text(max_size=3),
)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "delta", "n", "\x00", "k" * 40]), inner, max_size=3
        )
    ),
    max_leaves=8,
)
_EVENT = st.dictionaries(
    st.sampled_from(["type", "delta", "seq", "obfuscation"]), _VALUE, max_size=4
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_EVENT, max_size=12))
def test_any_stream_of_json_events_round_trips(events: list[Any]) -> None:
    kept = [
        {k: v for k, v in e.items() if not (k == "obfuscation" and isinstance(v, str))}
        for e in events
    ]
    # the same text: key order, and 1, 1.0 and true told apart
    assert json.dumps(round_trip(events)) == json.dumps(kept)


# -- collapsed: a stream's runs of deltas joined, for reading its fields ---------------------


def fields(call: Any) -> tuple[Any, ...]:
    assert call is not None
    return (
        call.provider, call.method, call.stream, call.model, call.text, call.tool_calls,
        call.finish_reason, call.usage, call.usage.problems, call.problems, call.prompt,
    )  # fmt: skip


def both_ways(step: dict[str, Any]) -> tuple[Any, Any]:
    """A step's call read with its events written out, and with its runs joined."""
    stored = json.loads(json.dumps(step))  # as the journal gives it
    return fields(read_llm_call(stored)), fields(read_llm_fields(stored))


@pytest.mark.parametrize("how", HOW)
def test_a_collapsed_stream_reads_as_its_events_do(how: str) -> None:
    """Streams of every provider through the real SDKs (text, tool calls), one long."""
    _, step, text = streamed(how, long_answer(300))
    written_out, joined = both_ways(step)
    assert joined == written_out
    assert len(collapsed(step["result"])["stream"]) < len(expanded(step["result"])["stream"]) / 5
    if "tool" not in how:
        assert joined[4] == text


def _chunk(delta: dict[str, Any], **more: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": None, **more.pop("choice", {})}
    return {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
            "choices": [choice], **more}  # fmt: skip


_TEXT = st.text(max_size=4) | st.sampled_from(["\x00", "\x001", "y" * 41])
_ODD = st.sampled_from([None, 1, True, [], {"a": 1}, 1.5, "x"])


def _anthropic_delta(text: Any, index: Any, key: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "d", key: text}}


def _tool_delta(text: Any, index: Any, name: str | None) -> dict[str, Any]:
    function = {"arguments": text, **({"name": name} if name else {})}
    return _chunk({"tool_calls": [{"index": index, "function": function}]})


def _responses_delta(text: Any, kind: str, seq: int) -> dict[str, Any]:
    return {"type": kind, "delta": text, "sequence_number": seq}


_USAGE = {"prompt_tokens": 3, "completion_tokens": 2}
_DELTA = st.one_of(
    # Anthropic: a block's text or tool input, an index that may be odd
    st.builds(
        _anthropic_delta,
        _TEXT | _ODD,
        st.sampled_from([0, 1, 0, True, None, "0"]),
        st.sampled_from(["text", "partial_json", "text"]),
    ),
    # chat: content (with a role, a finish reason, a usage), or a tool call's arguments
    st.builds(lambda text: _chunk({"content": text}), _TEXT | _ODD),
    st.builds(lambda text, role: _chunk({"content": text, "role": role}), _TEXT, _ODD),
    st.builds(
        _tool_delta,
        _TEXT | _ODD,
        st.sampled_from([0, 1, None, True]),
        st.sampled_from([None, "f"]),
    ),
    st.builds(
        lambda text, reason: _chunk({"content": text}, choice={"finish_reason": reason}),
        _TEXT,
        st.sampled_from([None, "stop", "length"]),
    ),
    st.builds(lambda text: _chunk({"content": text}, usage=_USAGE), _TEXT),
    # Responses: text deltas, argument deltas
    st.builds(
        _responses_delta,
        _TEXT | _ODD,
        st.sampled_from(["response.output_text.delta", "response.function_call_arguments.delta"]),
        st.integers(0, 3),
    ),
)
_STARTS = [
    {"type": "message_start", "message": {"model": "claude-3-5-haiku-latest", "usage": {
        "input_tokens": 5, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
                                                                   "name": "weather"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {
        "output_tokens": 9}},
    {"type": "response.created", "response": {"model": "gpt-4o-mini", "output": []}},
    {"type": "response.completed", "response": {"model": "gpt-4o-mini", "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}]}},
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    first=st.lists(st.sampled_from(_STARTS), max_size=3),
    runs=st.lists(st.tuples(_DELTA, st.integers(1, 6)), max_size=4),
    last=st.lists(st.sampled_from(_STARTS), max_size=2),
    call=st.sampled_from([None, {"provider": "anthropic", "method": "messages.create"},
                          {"provider": "openai", "method": "chat.completions.create"},
                          {"provider": "openai", "method": "responses.create"}]),
)  # fmt: skip
def test_any_collapsed_stream_reads_as_its_events_do(
    first: list[Any], runs: list[tuple[Any, int]], last: list[Any], call: Any
) -> None:
    """Runs of alike deltas (texts, odd values, odd indexes, their neighbours) among other
    events, compacted: reading them joined gives every field reading each gives."""
    events = [*first]
    for delta, times in runs:
        for number in range(times):  # a delta whose texts vary along the run, as they do
            events.append(json.loads(json.dumps(delta)))
            if isinstance(text := _leaf(events[-1]), str):
                _set_leaf(events[-1], f"{text}{number}")
    events += last
    step: dict[str, Any] = {"type": "step", "result": {"stream": compacted(events)}}
    if call is not None:
        step["call"] = call
    text = json.dumps(step)
    stored = json.loads(text)
    written_out = read_llm_call(stored)
    for joined in (read_llm_fields(stored), read_llm_fields(stored, text)):  # NULs looked for
        assert (written_out is None) == (joined is None)
        if written_out is not None:
            assert fields(joined) == fields(written_out)


_LEAVES = (("delta", "text"), ("delta", "partial_json"), ("delta",))


def _leaf(event: dict[str, Any]) -> Any:
    if event.get("object") == "chat.completion.chunk":
        delta = event["choices"][0]["delta"]
        calls = delta.get("tool_calls")
        return calls[0]["function"]["arguments"] if calls else delta.get("content")
    for path in _LEAVES:
        value: Any = event
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            return value
    return None


def _set_leaf(event: dict[str, Any], text: str) -> None:
    if event.get("object") == "chat.completion.chunk":
        delta = event["choices"][0]["delta"]
        if delta.get("tool_calls"):
            delta["tool_calls"][0]["function"]["arguments"] = text
        else:
            delta["content"] = text
    elif isinstance(event.get("delta"), dict):
        key = "text" if "text" in event["delta"] else "partial_json"
        event["delta"][key] = text
    else:
        event["delta"] = text
