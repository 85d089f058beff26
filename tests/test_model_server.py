"""kassette.testing.fake_model_server through the real openai and anthropic SDKs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest

from kassette.testing import FakeModelServer, fake_model_server

PROMPT = "Explain how retry policies keep durable agent workflows safe."
WEATHER_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
            },
        },
    }
]
WEATHER_ANTHROPIC = [
    {
        "name": tool["function"]["name"],
        "description": tool["function"]["description"],
        "input_schema": tool["function"]["parameters"],
    }
    for tool in WEATHER_CHAT
]


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with fake_model_server() as fake:
        yield fake


@pytest.fixture
def oai(server: FakeModelServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="unused", base_url=server.openai_base_url, timeout=30) as client:
        yield client


@pytest.fixture
def claude(server: FakeModelServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        api_key="unused", base_url=server.anthropic_base_url, timeout=30
    ) as client:
        yield client


def chat(client: openai.OpenAI, text: str = PROMPT, **options: Any) -> Any:
    messages = [{"role": "user", "content": text}]
    return client.chat.completions.create(model="gpt-4o-mini", messages=messages, **options)


def message(client: anthropic.Anthropic, text: str = PROMPT, **options: Any) -> Any:
    messages = [{"role": "user", "content": text}]
    return client.messages.create(
        model="claude-3-5-haiku-latest", max_tokens=1024, messages=messages, **options
    )


def reads_like_a_model(text: str, prompt: str = PROMPT) -> None:
    words = text.split()
    assert len(words) >= 20, text
    assert text.count(".") >= 2, text
    prompt_words = {word.strip(".,").lower() for word in prompt.split() if len(word) > 4}
    assert prompt_words & {word.strip(".,").lower() for word in words}, text


def test_chat_completion_reads_like_a_model_with_usage_and_fresh_ids(
    server: FakeModelServer, oai: openai.OpenAI
) -> None:
    first, second = chat(oai, temperature=0), chat(oai, temperature=0)

    reads_like_a_model(first.choices[0].message.content)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.model == "gpt-4o-mini" and first.choices[0].finish_reason == "stop"
    assert first.id.startswith("chatcmpl-") and first.id != second.id
    assert first.created != second.created
    usage = first.usage
    assert usage.prompt_tokens > 5 and usage.completion_tokens > 20
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert [path for path, _body in server.requests] == ["/v1/chat/completions"] * 2
    assert server.requests[0][1]["temperature"] == 0 and server.request_count == 2


def test_chat_stream_ends_with_usage_and_carries_the_same_text(oai: openai.OpenAI) -> None:
    whole = chat(oai, temperature=0.5)
    chunks = list(chat(oai, temperature=0.5, stream=True, stream_options={"include_usage": True}))

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert len(chunks) > 10  # a word per chunk
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_a_long_repeated_prompt_prefix_is_reported_as_cached(oai: openai.OpenAI) -> None:
    document = "The journal is an append-only list of entries. " * 150
    for question, expected_cached in (("What is it?", 0), ("Who writes it?", 1024)):
        messages = [
            {"role": "system", "content": document},
            {"role": "user", "content": question},
        ]
        response = oai.chat.completions.create(model="gpt-4o-mini", messages=messages)
        assert response.usage.prompt_tokens_details.cached_tokens >= expected_cached
        assert (response.usage.prompt_tokens_details.cached_tokens == 0) == (expected_cached == 0)


def test_responses_api_json_and_stream(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="gpt-4o-mini", input=PROMPT, temperature=0)
    with oai.responses.stream(model="gpt-4o-mini", input=PROMPT, temperature=0) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()

    reads_like_a_model(response.output_text)
    assert streamed.output_text == response.output_text
    assert response.id.startswith("resp_") and response.id != streamed.id
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds


def test_anthropic_message_json_and_sse_events(
    server: FakeModelServer, claude: anthropic.Anthropic
) -> None:
    whole = message(claude, system="You are terse.")
    events = list(message(claude, system="You are terse.", stream=True))
    with claude.messages.stream(
        model="claude-3-5-haiku-latest",
        max_tokens=1024,
        system="You are terse.",
        messages=[{"role": "user", "content": PROMPT}],
    ) as stream:
        final = stream.get_final_message()

    reads_like_a_model(whole.content[0].text)
    assert whole.id.startswith("msg_") and whole.stop_reason == "end_turn"
    assert whole.model == "claude-3-5-haiku-latest" and whole.role == "assistant"
    assert whole.usage.input_tokens > 5 and whole.usage.output_tokens > 20
    assert whole.usage.cache_read_input_tokens == 0
    kinds = [event.type for event in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.content[0].text == final.content[0].text
    assert events[-2].usage.output_tokens == whole.usage.output_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert {path for path, _body in server.requests} == {"/v1/messages"}


def test_anthropic_sse_has_event_lines(server: FakeModelServer) -> None:
    import urllib.request

    body = {"model": "claude-3-5-haiku-latest", "max_tokens": 64, "stream": True}
    body["messages"] = [{"role": "user", "content": "Say something about journals."}]
    request = urllib.request.Request(
        f"{server.anthropic_base_url}/v1/messages", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        blocks = response.read().decode().strip().split("\n\n")
    for block in blocks:
        event_line, data_line = block.split("\n")
        assert event_line == f"event: {json.loads(data_line.removeprefix('data: '))['type']}"


def test_openai_tool_call_when_the_user_names_the_tool(oai: openai.OpenAI) -> None:
    asked = "Please use get_weather to check Lisbon."
    response = chat(oai, asked, tools=WEATHER_CHAT)
    streamed = list(chat(oai, asked, tools=WEATHER_CHAT, stream=True))
    plain = chat(oai, "What is a journal?", tools=WEATHER_CHAT)

    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    arguments = json.loads(call.function.arguments)
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert arguments["city"] == "Lisbon" and 1 <= arguments["days"] <= 7
    assert arguments.get("unit", "celsius") in ("celsius", "fahrenheit")
    fragments = [
        c.choices[0].delta.tool_calls[0].function.arguments
        for c in streamed
        if c.choices and c.choices[0].delta.tool_calls
    ]
    assert json.loads("".join(fragments)) == arguments
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    assert plain.choices[0].finish_reason == "stop"

    followed = oai.chat.completions.create(
        model="gpt-4o-mini",
        tools=WEATHER_CHAT,
        messages=[
            {"role": "user", "content": asked},
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18C, sunny"},
        ],
    )
    assert followed.choices[0].finish_reason == "stop"


def test_the_answer_after_a_tool_result_does_not_depend_on_the_call_id(
    oai: openai.OpenAI,
) -> None:
    """The server makes a fresh call id for each tool call; the answer that follows the tool's
    result reads the call (function, arguments) and the result, not the id, so an agent's run
    repeated in another process gets the same answer after its tool loop."""
    asked = "Please use get_weather to check Lisbon."
    calls = [chat(oai, asked, tools=WEATHER_CHAT).choices[0].message for _ in range(2)]
    assert calls[0].tool_calls[0].id != calls[1].tool_calls[0].id
    answers = [
        oai.chat.completions.create(
            model="gpt-4o-mini",
            tools=WEATHER_CHAT,
            temperature=0.9,
            messages=[
                {"role": "user", "content": asked},
                call.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "18C, sunny"},
            ],
        )
        .choices[0]
        .message.content
        for call in calls
    ]
    assert answers[0] and answers[0] == answers[1]


def test_anthropic_tool_use_and_forced_tool(claude: anthropic.Anthropic) -> None:
    asked = message(claude, "Call get_weather for Oslo.", tools=WEATHER_ANTHROPIC)
    forced = message(
        claude,
        "What should I pack?",
        tools=WEATHER_ANTHROPIC,
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    with claude.messages.stream(
        model="claude-3-5-haiku-latest",
        max_tokens=1024,
        tools=WEATHER_ANTHROPIC,
        messages=[{"role": "user", "content": "Call get_weather for Oslo."}],
    ) as stream:
        streamed = stream.get_final_message()

    for response in (asked, forced, streamed):
        assert response.stop_reason == "tool_use"
        text, tool_use = response.content
        assert text.type == "text" and "get_weather" in text.text
        assert tool_use.type == "tool_use" and tool_use.id.startswith("toolu_")
        assert tool_use.name == "get_weather" and set(tool_use.input) >= {"city", "days"}
    assert asked.content[1].input["city"] == "Oslo"
    assert streamed.content[1].input == asked.content[1].input


def test_overloaded_529_is_retried_by_the_sdk_and_every_attempt_counted(
    server: FakeModelServer, claude: anthropic.Anthropic, oai: openai.OpenAI
) -> None:
    server.fail_next(2, status=529)
    assert message(claude).stop_reason == "end_turn"
    assert server.request_count == 3

    server.fail_next(1, status=429)
    assert chat(oai).choices[0].finish_reason == "stop"
    assert server.request_count == 5

    server.fail_next(1)
    with pytest.raises(anthropic.APIStatusError) as anthropic_error:
        message(claude.with_options(max_retries=0))
    assert anthropic_error.value.status_code == 529
    assert anthropic_error.value.body["error"]["type"] == "overloaded_error"
    server.fail_next(1, status=500)
    with pytest.raises(openai.InternalServerError) as openai_error:
        chat(oai.with_options(max_retries=0))
    assert openai_error.value.body["type"] == "server_error"
    assert server.request_count == 7
    assert message(claude).stop_reason == "end_turn"  # nothing left queued


def test_invalid_requests_get_the_providers_400(
    server: FakeModelServer, claude: anthropic.Anthropic
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        claude.messages.create(
            model="claude-3-5-haiku-latest",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=None,  # type: ignore[arg-type]
        )


def test_max_tokens_cuts_the_answer(oai: openai.OpenAI, claude: anthropic.Anthropic) -> None:
    cut = chat(oai, max_completion_tokens=5)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 5
    assert len(cut.choices[0].message.content.split()) <= 5
    short = claude.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=5,
        messages=[{"role": "user", "content": PROMPT}],
    )
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 5


def texts_by_temperature(
    server: FakeModelServer, temperatures: list[float], prompt: str = PROMPT
) -> list[str]:
    with openai.OpenAI(api_key="unused", base_url=server.openai_base_url) as client:
        return [
            chat(client, prompt, temperature=t).choices[0].message.content for t in temperatures
        ]


def test_the_same_request_gets_the_same_answer_and_temperature_zero_ignores_the_seed() -> None:
    with fake_model_server(seed=1) as one, fake_model_server(seed=2) as two:
        assert texts_by_temperature(one, [0.0, 0.0]) == texts_by_temperature(two, [0.0, 0.0])
        assert texts_by_temperature(one, [1.2]) == texts_by_temperature(one, [1.2])
        assert texts_by_temperature(one, [2.0]) != texts_by_temperature(two, [2.0])
        other_prompt = texts_by_temperature(one, [0.0], "Compare journals with databases.")
        assert other_prompt != texts_by_temperature(one, [0.0])
        with anthropic.Anthropic(api_key="unused", base_url=one.anthropic_base_url) as claude:
            seeded = [message(claude, extra_body={"temperature": 0.9}) for _ in range(2)]
        assert seeded[0].content[0].text == seeded[1].content[0].text


def test_answers_vary_more_as_the_temperature_grows(server: FakeModelServer) -> None:
    low = [round(0.02 * step, 2) for step in range(10)]  # 0.0 .. 0.18
    high = [round(1.1 + 0.1 * step, 2) for step in range(10)]  # 1.1 .. 2.0
    prompts = [PROMPT, "Summarise the trade-offs of event sourcing.", "Plan a kayak trip."]
    for prompt in prompts:
        cold = texts_by_temperature(server, low, prompt)
        hot = texts_by_temperature(server, high, prompt)
        assert cold.count(cold[0]) >= 5  # most low temperatures keep the greedy answer
        assert len(set(hot)) >= 8 and cold[0] not in hot
        for text in hot:
            reads_like_a_model(text, prompt)


def test_concurrent_requests_are_all_counted(server: FakeModelServer) -> None:
    client = openai.OpenAI(api_key="unused", base_url=server.openai_base_url)
    with client, ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda n: chat(client, f"Question {n}").id, range(40)))
    assert len(set(ids)) == 40 and server.request_count == 40
    assert sorted(body["messages"][0]["content"] for _path, body in server.requests) == sorted(
        f"Question {n}" for n in range(40)
    )


def test_latency_delays_each_response() -> None:
    # a lower bound only: the server sleeps at least this long before answering
    with fake_model_server(latency=0.2) as server:
        client = openai.OpenAI(api_key="unused", base_url=server.openai_base_url)
        began = time.monotonic()
        chat(client)
        assert time.monotonic() - began >= 0.2
        client.close()
    with pytest.raises(ValueError, match="latency"):
        fake_model_server(latency=-1)


def test_importing_kassette_does_not_import_the_server() -> None:
    code = (
        "import sys, kassette, kassette.testing\n"
        "assert 'kassette.testing._model_server' not in sys.modules\n"
        "assert 'http.server' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_prompt_of_megabytes_is_answered(server: FakeModelServer) -> None:
    """Issue 32 item 19: reading a prompt's topics copied everything before each word (1 MB
    took 7.6 s, 2 MB minutes). A 2 MB prompt of distinct words is answered well within
    the SDK's own 60 s timeout (benchmarks/bench_model_server.py measures the scaling)."""
    words = [f"Topic{index} launches rockets." for index in range(70_000)]
    text = " ".join(words)
    assert len(text) > 2_000_000
    with openai.OpenAI(
        api_key="k", base_url=server.openai_base_url, max_retries=0, timeout=60
    ) as sdk:
        reply = sdk.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": text}]
        )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.prompt_tokens > 200_000
