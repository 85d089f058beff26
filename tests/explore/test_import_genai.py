"""Model-call spans in the GenAI semantic conventions' two forms (the current
`gen_ai.input.messages` / `gen_ai.output.messages` and the older indexed `gen_ai.prompt.N.*` /
`gen_ai.completion.N.*`), rebuilt into requests the real SDKs send: the same call, made by
the code, replays from the import with no request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from kassette import LocalStorage, kassette
from kassette import explore as kx
from kassette.integrations.anthropic import journaled as journaled_anthropic
from kassette.integrations.openai import journaled as journaled_openai
from kassette.testing import fake_model_server

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
    with fake_model_server() as server:

        @kassette(storage=storage)
        def ask(ctx: Any, task: dict[str, str]) -> str:
            if form == "current-openai":
                gpt = journaled_openai(OpenAI(base_url=server.openai_base_url, api_key="k"), ctx)
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
            claude = journaled_anthropic(
                Anthropic(base_url=server.anthropic_base_url, api_key="k"), ctx
            )
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
