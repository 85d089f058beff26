"""Model-call spans in the GenAI semantic conventions' two forms (the current
`gen_ai.input.messages` / `gen_ai.output.messages` and the older indexed `gen_ai.prompt.N.*` /
`gen_ai.completion.N.*`), rebuilt into requests the real SDKs send: the same call, made by
the code, replays from the import with no request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage, kassette
from kassette import explore as kx
from kassette.integrations.anthropic import journaled as journaled_anthropic
from kassette.integrations.openai import journaled as journaled_openai
from kassette.testing import fake_model_server
from tests.explore.import_support import sdk_clients

TRACE = "5" * 32
QUESTION = "Which fuse blew?"


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for key, value in values.items():
        if isinstance(value, bool):
            found.append({"key": key, "value": {"boolValue": value}})
        elif isinstance(value, int):
            found.append({"key": key, "value": {"intValue": str(value)}})
        elif isinstance(value, float):
            found.append({"key": key, "value": {"doubleValue": value}})
        elif isinstance(value, list):
            items = [{"stringValue": item} for item in value]
            found.append({"key": key, "value": {"arrayValue": {"values": items}}})
        else:
            found.append({"key": key, "value": {"stringValue": value}})
    return found


def trace_file(path: Path, model_span: dict[str, Any]) -> Path:
    root = {
        "traceId": TRACE,
        "spanId": "1" * 16,
        "name": "invoke_agent",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000002000000000",
        "attributes": attributes({"input.value": json.dumps({"question": QUESTION})}),
    }
    span = {
        "traceId": TRACE,
        "spanId": "2" * 16,
        "parentSpanId": "1" * 16,
        "startTimeUnixNano": "1700000000500000000",
        "endTimeUnixNano": "1700000001500000000",
        **model_span,
    }
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [span, root]}]}]}
    path.write_text(json.dumps(request) + "\n")
    return path


CURRENT_OPENAI = {
    "name": "chat gpt-4o-mini",
    "attributes": attributes(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.request.temperature": 0.3,
            "gen_ai.request.seed": 7,
            "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
            "gen_ai.response.id": "chatcmpl-abc",
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.usage.input_tokens": 21,
            "gen_ai.usage.output_tokens": 9,
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": "The kitchen fuse."}],
                        "finish_reason": "stop",
                    }
                ]
            ),
        }
    ),
}

INDEXED_ANTHROPIC = {
    "name": "anthropic.chat",
    "attributes": attributes(
        {
            "gen_ai.system": "anthropic",
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "claude-sonnet-4-5",
            "gen_ai.request.max_tokens": 100,
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "Be brief.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": QUESTION,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "The kitchen fuse.",
            "gen_ai.completion.0.finish_reason": "end_turn",
            "gen_ai.usage.prompt_tokens": 14,
            "gen_ai.usage.completion_tokens": 6,
        }
    ),
}


@pytest.mark.parametrize("form", ["current-openai", "indexed-anthropic"])
def test_genai_model_spans_replay_in_the_sdk_with_zero_requests(form: str, tmp_path: Path) -> None:
    span = CURRENT_OPENAI if form == "current-openai" else INDEXED_ANTHROPIC
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_otlp(trace_file(tmp_path / "t.jsonl", span), storage)
    assert report.run_ids == (f"otlp-{TRACE}",) and report.partial == {}
    (call,) = kx.load(storage).llm_calls.to_dict("records")
    assert call["response_text"] == "The kitchen fuse."
    if form == "current-openai":
        assert (call["model"], call["input_tokens"], call["output_tokens"]) == (
            "gpt-4o-mini-2024-07-18",
            21,
            9,
        )
        assert json.loads(call["request"]) == {
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": QUESTION},
            ],
            "temperature": 0.3,
            "seed": 7,
        }
    else:
        assert (call["model"], call["input_tokens"], call["output_tokens"]) == (
            "claude-sonnet-4-5",
            14,
            6,
        )
        assert call["finish_reason"] == "stop"
    with fake_model_server() as server, sdk_clients(server) as (sdk_gpt, sdk_claude):

        @kassette(storage=storage)
        def ask(ctx: Any, task: dict[str, str]) -> str:
            if form == "current-openai":
                gpt = journaled_openai(sdk_gpt, ctx)
                reply = gpt.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[
                        {"role": "system", "content": "Be brief."},
                        {"role": "user", "content": task["question"]},
                    ],
                    temperature=0.3,
                    seed=7,
                )
                return str(reply.choices[0].message.content)
            claude = journaled_anthropic(sdk_claude, ctx)
            message = claude.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=100,
                system="Be brief.",
                messages=[{"role": "user", "content": task["question"]}],
            )
            return str(message.content[0].text)

        result = ask.start({"question": QUESTION}, run_id=report.run_ids[0])
        assert result.status == "success" and result.result == "The kitchen fuse."
        assert server.request_count == 0


def test_a_span_without_content_is_reported_not_guessed(tmp_path: Path) -> None:
    bare = {
        "name": "chat gpt-4o-mini",
        "attributes": attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 21,
            }
        ),
    }
    report = kx.import_otlp(trace_file(tmp_path / "t.jsonl", bare), tmp_path / "store")
    (missing,) = report.partial[f"otlp-{TRACE}"]
    assert "step chat.completions.create" in missing
    assert "messages were left out of the source (content not captured)" in missing


def test_tool_call_ids_a_source_left_out_come_from_the_request_that_passes_them_back(
    tmp_path: Path,
) -> None:
    """An answer rebuilt from `gen_ai.output.messages` whose tool call has no id gets the id
    the next request passes back, so the code's next request, built from the replayed
    answer, is the recorded one."""
    tool = {"type": "function", "function": {"name": "fuse", "parameters": {"type": "object"}}}
    ask = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    called = {"type": "tool_call", "id": "call_7", "name": "fuse", "arguments": {"room": "k"}}

    def model_span(number: int, messages: list[Any], output: dict[str, Any]) -> dict[str, Any]:
        return {
            "traceId": TRACE,
            "spanId": f"{number:016x}",
            "parentSpanId": "1" * 16,
            "name": "chat gpt-4o-mini",
            "startTimeUnixNano": str(1700000000500000000 + number * 1000),
            "endTimeUnixNano": str(1700000000500000500 + number * 1000),
            "attributes": attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.tool.definitions": json.dumps([tool]),
                    "gen_ai.input.messages": json.dumps(messages),
                    "gen_ai.output.messages": json.dumps([output]),
                    "gen_ai.usage.input_tokens": 5,
                    "gen_ai.usage.output_tokens": 5,
                }
            ),
        }

    first = model_span(2, [ask], {"role": "assistant", "parts": [{**called, "id": None}]})
    tool_span = {
        "traceId": TRACE,
        "spanId": "3" * 16,
        "parentSpanId": "1" * 16,
        "name": "execute_tool fuse",
        "startTimeUnixNano": "1700000000600000000",
        "endTimeUnixNano": "1700000000600000001",
        "attributes": attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fuse",
                "gen_ai.tool.call.result": json.dumps("kitchen"),
            }
        ),
    }
    passed_back = [
        ask,
        {"role": "assistant", "parts": [called]},
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call_7", "response": "kitchen"}],
        },
    ]
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "The kitchen fuse."}]}
    second = model_span(4, passed_back, answer)
    second["startTimeUnixNano"] = "1700000000700000000"
    second["endTimeUnixNano"] = "1700000000800000000"
    path = trace_file(tmp_path / "t.jsonl", first)
    request = json.loads(path.read_text())
    request["resourceSpans"][0]["scopeSpans"][0]["spans"] += [tool_span, second]
    path.write_text(json.dumps(request) + "\n")
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_otlp(path, storage)
    assert report.partial == {}
    with fake_model_server() as server, sdk_clients(server) as (sdk_gpt, _claude):

        @kassette(storage=storage)
        def agent(ctx: Any, task: dict[str, str]) -> str:
            gpt = journaled_openai(sdk_gpt, ctx)
            messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
            reply = gpt.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=[tool]
            )
            (call,) = reply.choices[0].message.tool_calls or []
            room = ctx.step("fuse", lambda: "kitchen")
            messages += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": "fuse", "arguments": call.function.arguments},
                        }
                    ],
                },
                {"role": "tool", "content": room, "tool_call_id": call.id},
            ]
            reply = gpt.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=[tool]
            )
            return str(reply.choices[0].message.content)

        result = agent.start({"question": QUESTION}, run_id=report.run_ids[0])
        assert result.status == "success" and result.result == "The kitchen fuse."
        assert server.request_count == 0
