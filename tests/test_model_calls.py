"""kassette._llm_calls: every provider's response shape read as one kind of data, and the
response written back for another text."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kassette._llm_calls import (
    FINISH_REASONS,
    VOLATILE_FIELDS,
    LLMCall,
    TokenUsage,
    describe_response,
    read_llm_call,
    read_llm_result,
    response_from_text,
    response_method,
    same_response_shape,
)

# -- responses as each API sends them (trimmed to the fields that matter, ids and all) -------

CHAT = {
    "id": "chatcmpl-A1",
    "object": "chat.completion",
    "created": 1767225600,
    "model": "gpt-4o-mini-2024-07-18",
    "system_fingerprint": "fp_1",
    "service_tier": "default",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Paris.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "Lyon.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        },
    ],
    "usage": {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 10},
    },
}
CHAT_TOOL = {
    **CHAT,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "raw", "arguments": "not json"},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-S1",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_2",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "obfuscation": "xyz",
        **extra,
    }


CHAT_STREAM = {
    "stream": [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": "Hello"}),
        chat_chunk({"content": " world"}),
        chat_chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_9", "function": {"name": "look", "arguments": ""}}
                ]
            }
        ),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
        chat_chunk({}, "length"),
        {
            **chat_chunk({}),
            "choices": [],
            "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
        },
    ]
}

RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1767225600,
    "model": "gpt-4.1-mini",
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "instructions": "Be brief.",
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "temperature": 0.7,
    "top_p": 1.0,
    "metadata": {},
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "Two ", "annotations": []},
                {"type": "output_text", "text": "parts.", "annotations": []},
            ],
        },
    ],
    "usage": {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 0},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 25},
        "total_tokens": 90,
    },
}
RESPONSE_TOOL = {
    **RESPONSE,
    "output": [
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "search",
            "arguments": '{"query": "kassette"}',
            "status": "completed",
        }
    ],
}
RESPONSE_STREAM = {
    "stream": [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {**RESPONSE, "status": "in_progress", "output": [], "usage": None},
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Two ",
        },
        {"type": "response.completed", "sequence_number": 2, "response": RESPONSE},
    ]
}

MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-3-5-haiku-20241022",
    "content": [
        {"type": "text", "text": "Let me check. "},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"id": 7}},
        {"type": "text", "text": "Done."},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "output_tokens": 20,
        "cache_read_input_tokens": 300,
        "cache_creation_input_tokens": 40,
        "service_tier": "standard",
    },
}
MESSAGE_STREAM = {
    "stream": [
        {
            "type": "message_start",
            "message": {
                **MESSAGE,
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "[1, 2]}"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    ]
}


def step(result: Any, call: Any = None, **fields: Any) -> dict[str, Any]:
    entry = {"type": "step", "stepId": "s", "name": "s", "result": result, **fields}
    if call is not None:
        entry["call"] = call
    return entry


def read(result: Any, call: Any = None) -> LLMCall:
    found = read_llm_result(result, call)
    assert found is not None
    return found


# -- reading ----------------------------------------------------------------------------------


def test_a_chat_completion_reads_its_first_choice_and_usage() -> None:
    call = read(CHAT)
    assert (call.provider, call.method, call.stream) == ("openai", "chat.completions.create", False)
    assert call.model == "gpt-4o-mini-2024-07-18"
    assert call.text == "Paris."  # the first choice only
    assert call.tool_calls == []
    assert call.finish_reason == "stop"
    assert call.usage == TokenUsage(
        input_tokens=120,
        output_tokens=30,
        total_tokens=150,
        cached_input_tokens=100,
        reasoning_tokens=10,
    )


def test_chat_tool_calls_decode_json_arguments_and_keep_other_text() -> None:
    call = read(CHAT_TOOL)
    assert call.text == ""
    assert call.tool_calls == [
        {"name": "weather", "arguments": {"city": "Paris"}},
        {"name": "raw", "arguments": "not json"},
    ]
    assert call.finish_reason == "tool_calls"


def test_a_chat_stream_joins_its_deltas_and_tool_call_fragments() -> None:
    call = read(CHAT_STREAM)
    assert (call.provider, call.method, call.stream) == ("openai", "chat.completions.create", True)
    assert call.text == "Hello world"
    assert call.tool_calls == [{"name": "look", "arguments": {"q": "x"}}]
    assert call.finish_reason == "length"
    assert call.usage == TokenUsage(input_tokens=7, output_tokens=4, total_tokens=11)


def test_a_responses_api_response_joins_its_output_text() -> None:
    call = read(RESPONSE)
    assert (call.provider, call.method) == ("openai", "responses.create")
    assert call.text == "Two parts."
    assert call.finish_reason == "stop"
    assert call.usage == TokenUsage(
        input_tokens=50,
        output_tokens=40,
        total_tokens=90,
        cached_input_tokens=20,
        cache_creation_input_tokens=0,
        reasoning_tokens=25,
    )
    tool = read(RESPONSE_TOOL)
    assert tool.tool_calls == [{"name": "search", "arguments": {"query": "kassette"}}]
    assert tool.finish_reason == "tool_calls"


def test_a_responses_stream_reads_as_the_response_it_completed_with() -> None:
    call = read(RESPONSE_STREAM)
    assert (call.method, call.stream) == ("responses.create", True)
    assert (call.text, call.finish_reason, call.usage) == (
        "Two parts.",
        "stop",
        read(RESPONSE).usage,
    )
    cut = {"stream": RESPONSE_STREAM["stream"][:2]}  # never completed
    assert (read(cut).text, read(cut).finish_reason) == ("Two ", None)


@pytest.mark.parametrize(
    ("reason", "normalised"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter")],
)
def test_an_incomplete_response_says_why(reason: str, normalised: str) -> None:
    incomplete = {**RESPONSE, "status": "incomplete", "incomplete_details": {"reason": reason}}
    assert read(incomplete).finish_reason == normalised


def test_an_anthropic_message_joins_text_blocks_and_counts_cached_input() -> None:
    call = read(MESSAGE)
    assert (call.provider, call.method, call.stream) == ("anthropic", "messages.create", False)
    assert call.model == "claude-3-5-haiku-20241022"
    assert call.text == "Let me check. Done."
    assert call.tool_calls == [{"name": "lookup", "arguments": {"id": 7}}]
    assert call.finish_reason == "tool_calls"
    assert call.usage == TokenUsage(
        input_tokens=350,  # 10 uncached + 300 read from the cache + 40 written to it
        output_tokens=20,
        total_tokens=370,
        cached_input_tokens=300,
        cache_creation_input_tokens=40,
    )


def test_an_anthropic_stream_assembles_blocks_deltas_and_usage() -> None:
    call = read(MESSAGE_STREAM)
    assert (call.provider, call.stream) == ("anthropic", True)
    assert call.text == "Hi!"
    assert call.tool_calls == [{"name": "f", "arguments": {"a": [1, 2]}}]
    assert call.finish_reason == "length"
    # message_start's input and cache counts, message_delta's final output count
    assert call.usage == TokenUsage(
        input_tokens=15, output_tokens=12, total_tokens=27, cached_input_tokens=5
    )


@pytest.mark.parametrize(
    ("stop_reason", "normalised"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),  # no equivalent: kept as sent
    ],
)
def test_anthropic_stop_reasons_are_normalised(stop_reason: str, normalised: str) -> None:
    assert read({**MESSAGE, "stop_reason": stop_reason}).finish_reason == normalised


@pytest.mark.parametrize(
    ("reason", "normalised"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
    ],
)
def test_openai_finish_reasons_are_normalised(reason: str, normalised: str) -> None:
    result = copy.deepcopy(CHAT)
    result["choices"][0]["finish_reason"] = reason
    assert read(result).finish_reason == normalised
    assert normalised in FINISH_REASONS


@pytest.mark.parametrize(
    "result",
    [
        "a string",
        42,
        None,
        {"object": "list"},
        {"type": "message", "role": "user"},
        {"stream": []},
        {"stream": [{"object": "chat.completion.chunk"}, "text"]},
        {"stream": [{"type": "content_block_delta"}]},  # no message_start
        {"stream": [CHAT], "other": 1},
    ],
)
def test_other_results_are_not_model_calls(result: Any) -> None:
    assert read_llm_result(result) is None
    assert read_llm_call(step(result)) is None


def test_only_plain_step_entries_are_model_calls() -> None:
    assert read_llm_call(step(CHAT)) is not None
    assert read_llm_call(step(CHAT, kind="sleep")) is None
    assert read_llm_call({"type": "complete", "result": CHAT}) is None


def test_the_call_field_names_provider_method_and_request() -> None:
    request = {
        "model": "gpt-4o-mini",
        "temperature": 0.7,
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "First question"},
            {"role": "assistant", "content": "First answer"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Second"},
                    {"type": "text", "text": "question"},
                ],
            },
        ],
    }
    call = read_llm_call(
        step(CHAT, {"provider": "openai", "method": "chat.completions.create", "request": request})
    )
    assert call is not None
    assert call.request == request
    assert call.prompt == "Second\nquestion"


def test_a_call_field_makes_any_result_a_model_call() -> None:
    call = read_llm_call(
        step(
            "edited by hand",
            {"provider": "anthropic", "method": "messages.create", "request": {"model": "x"}},
        )
    )
    assert call is not None
    assert (call.provider, call.method, call.model, call.text) == (
        "anthropic",
        "messages.create",
        "x",  # from the request when the result has none
        "",
    )
    assert call.prompt is None  # the request has no messages


@pytest.mark.parametrize(
    ("request_", "prompt"),
    [
        ({"input": "Just a string"}, "Just a string"),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                    {"type": "function_call_output", "call_id": "c", "output": "x"},
                ]
            },
            "Hi",
        ),
        (
            {
                "system": "You are a poet.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "A haiku"}]},
                ],
            },
            "A haiku",
        ),
        ({"messages": [{"role": "system", "content": "only a system"}]}, None),
    ],
)
def test_the_prompt_is_the_last_user_message_of_any_api(
    request_: dict[str, Any], prompt: str | None
) -> None:
    call = read(RESPONSE, {"provider": "openai", "method": "responses.create", "request": request_})
    assert call.prompt == prompt


# -- comparable --------------------------------------------------------------------------------


def _renewed(value: Any, counter: list[int]) -> Any:
    """`value` with every volatile field given a fresh value, as a second call would have
    (a tool's input is the model's own answer: kept)."""
    if isinstance(value, dict):
        counter[0] += 1
        return {
            key: f"new-{counter[0]}"
            if key in VOLATILE_FIELDS
            else item
            if key == "input"
            else _renewed(item, counter)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_renewed(item, counter) for item in value]
    return value


@pytest.mark.parametrize(
    "result", [CHAT, CHAT_TOOL, CHAT_STREAM, RESPONSE, RESPONSE_STREAM, MESSAGE, MESSAGE_STREAM]
)
def test_the_same_answer_with_new_ids_and_usage_compares_equal(result: dict[str, Any]) -> None:
    again = _renewed(result, [0])
    assert again != result
    assert read(again).comparable() == read(result).comparable()


def test_a_different_answer_compares_different() -> None:
    other = copy.deepcopy(CHAT)
    other["choices"][0]["message"]["content"] = "Rome."
    assert read(other).comparable() != read(CHAT).comparable()


def test_a_tool_s_own_arguments_are_never_stripped() -> None:
    comparable = read(MESSAGE).comparable()
    assert comparable["content"][1] == {"type": "tool_use", "name": "lookup", "input": {"id": 7}}
    assert "usage" not in comparable and "id" not in comparable


# -- writing a response for a text --------------------------------------------------------


SHAPES = [CHAT, CHAT_TOOL, CHAT_STREAM, RESPONSE, RESPONSE_TOOL, RESPONSE_STREAM, MESSAGE]
SHAPES += [MESSAGE_STREAM]


@pytest.mark.parametrize("recorded", SHAPES)
def test_a_response_from_text_reads_back_as_that_text(recorded: dict[str, Any]) -> None:
    original = read(recorded)
    edited = response_from_text(original, "A better draft")
    call = read(edited)
    assert (call.provider, call.method, call.stream) == (
        original.provider,
        original.method,
        original.stream,
    )
    assert call.model == original.model
    assert call.text == "A better draft"
    assert (call.tool_calls, call.finish_reason) == ([], "stop")
    assert call.usage.input_tokens == 0 and call.usage.output_tokens == 0
    assert edited == response_from_text(original, "A better draft")  # deterministic
    assert (
        response_from_text(original, "Another")["id" if not call.stream else "stream"]
        != (edited["id" if not call.stream else "stream"])
    )


def test_a_response_from_text_keeps_the_recorded_response_s_fields() -> None:
    edited = response_from_text(read(RESPONSE), "x")
    assert (edited["instructions"], edited["temperature"], edited["created_at"]) == (
        "Be brief.",
        0.7,
        RESPONSE["created_at"],
    )
    chat = response_from_text(read(CHAT), "x")
    assert (chat["created"], chat["system_fingerprint"]) == (CHAT["created"], "fp_1")
    # a stream recorded with usage gets a usage chunk, as the API would send it
    assert read(response_from_text(read(CHAT_STREAM), "x")).usage.total_tokens == 0


def _sdk_types(call: LLMCall) -> Any:
    return _adapter(call.provider, call.method, call.stream)


@functools.cache
def _adapter(provider: str, method: str, stream: bool) -> Any:
    """The SDK's own type for a response of that provider, method and shape, strictly checked."""
    pydantic = pytest.importorskip("pydantic")
    if provider == "anthropic":
        anthropic_types = pytest.importorskip("anthropic.types")
        kind = anthropic_types.RawMessageStreamEvent if stream else anthropic_types.Message
    elif method == "responses.create":
        responses = pytest.importorskip("openai.types.responses")
        kind = responses.ResponseStreamEvent if stream else responses.Response
    else:
        chat = pytest.importorskip("openai.types.chat")
        kind = chat.ChatCompletionChunk if stream else chat.ChatCompletion
    return pydantic.TypeAdapter(kind)


@settings(max_examples=30, deadline=None)
@given(recorded=st.sampled_from(SHAPES), text=st.text())
def test_every_response_from_text_is_valid_for_the_provider_s_sdk(
    recorded: dict[str, Any], text: str
) -> None:
    original = read(recorded)
    edited = response_from_text(original, text)
    adapter = _sdk_types(original)
    for item in edited["stream"] if original.stream else [edited]:
        adapter.validate_python(item)  # strict: raises on any missing or mistyped field
    assert read(edited).text == text
    if original.stream:  # what a streaming reader assembles: the deltas carry the text too
        assert _delta_text(edited["stream"]) == text


def _delta_text(events: list[dict[str, Any]]) -> str:
    """The text of a stream's deltas, as code reading the stream event by event joins it: chat
    chunks' `delta.content`, Responses `response.output_text.delta` events, Anthropic
    `text_delta`s."""
    parts = []
    for event in events:
        for choice in event.get("choices") or []:
            parts.append(choice["delta"].get("content") or "")
        if event.get("type") == "response.output_text.delta":
            parts.append(event["delta"])
        if event.get("type") == "content_block_delta" and event["delta"]["type"] == "text_delta":
            parts.append(event["delta"]["text"])
    return "".join(parts)


@pytest.mark.parametrize(
    ("provider", "method"),
    [
        ("openai", "chat.completions.create"),
        ("openai", "responses.create"),
        ("anthropic", "messages.create"),
        ("anthropic", "messages.stream"),
    ],
)
def test_a_response_from_text_needs_only_the_call(provider: str, method: str) -> None:
    recorded = {"provider": provider, "method": method, "request": {"model": "m"}}
    call = read("recorded text", recorded)
    edited = response_from_text(call, "hello")
    again = read(edited)
    assert (again.provider, again.text, again.model) == (provider, "hello", "m")
    assert again.stream == (method == "messages.stream")  # that method records events
    for item in edited["stream"] if again.stream else [edited]:
        _sdk_types(again).validate_python(item)
    if again.stream:
        assert _delta_text(edited["stream"]) == "hello"


def test_a_stream_helper_call_is_a_streamed_create_call_for_edits_and_replay() -> None:
    """`messages.stream` has `messages.create(stream=True)`'s request and response: one rule
    (`response_method`), which both an edit's check and a replayed call's match use."""
    assert response_method("messages.stream") == "messages.create"
    assert response_method("chat.completions.create") == "chat.completions.create"
    request = {"model": "m", "stream": True}
    helper = read("x", {"provider": "anthropic", "method": "messages.stream", "request": request})
    created = read("x", {"provider": "anthropic", "method": "messages.create", "request": request})
    events = response_from_text(created, "an edit")
    assert same_response_shape(helper, events) and same_response_shape(created, events)
    assert describe_response(helper) == describe_response(created)
    plain = read("x", {"provider": "anthropic", "method": "messages.create", "request": {}})
    assert not same_response_shape(helper, response_from_text(plain, "not a stream"))
