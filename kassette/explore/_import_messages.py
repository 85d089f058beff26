"""A model-call span's attributes read into a `SourceCall`, in every vocabulary a tracer uses.

The exact request is `input.value` when it is the request's JSON (OpenInference's
instrumentations write the SDK call's arguments there; kassette's export, the conversation
beside `llm.invocation_parameters`), the exact response `output.value` when it is a
provider's response. Otherwise the parts are read, first found wins (GenAI current, GenAI
indexed, OpenInference):

- messages: `gen_ai.input.messages` (+ `gen_ai.system_instructions`), `gen_ai.prompt.N.*`,
  `llm.input_messages.N.message.*`;
- answer: `gen_ai.output.messages`, `gen_ai.completion.N.*`, `llm.output_messages.N.message.*`;
- parameters: `gen_ai.request.*`, `llm.invocation_parameters`;
- tools: `gen_ai.tool.definitions`, `llm.tools.N.tool.json_schema`;
- tokens: `gen_ai.usage.input_tokens` / `output_tokens` (older: `prompt_tokens` /
  `completion_tokens`), `llm.token_count.prompt` / `completion`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kassette._llm_calls import read_llm_result
from kassette.explore._import_calls import Message, SourceCall, ToolCall

__all__ = ["source_call"]

_INDEXED = re.compile(r"^(\d+)\.(.+)$")
# gen_ai.request.* in each provider's wire words (None: the same word)
_PARAMETERS = {
    "temperature": None,
    "top_p": None,
    "top_k": None,
    "frequency_penalty": None,
    "presence_penalty": None,
    "seed": None,
    "max_tokens": None,
    "choice.count": "n",
    "stop_sequences": "stop",
}


def source_call(provider: str, method: str, attributes: dict[str, Any]) -> SourceCall | str:
    """The call a span's attributes record, or a sentence saying what they lack."""
    call = SourceCall(provider, method)
    parameters = _json(attributes.get("llm.invocation_parameters"))
    parameters = parameters if isinstance(parameters, dict) else {}
    given = _json(attributes.get("input.value"))
    if isinstance(given, dict) and ("messages" in given or "input" in given):
        call.request = {**parameters, **given}
    answer = _json(attributes.get("output.value"))
    if read_llm_result(answer) is not None:  # a provider's response (not, say, its tool calls)
        call.response = answer
    call.model = _text(
        attributes.get("gen_ai.request.model")
        or attributes.get("llm.request.model_name")
        or parameters.get("model")
        or attributes.get("llm.model_name")
    )
    call.response_model = _text(
        attributes.get("gen_ai.response.model")
        or attributes.get("llm.response.model_name")
        or attributes.get("llm.model_name")
    )
    call.response_id = _text(attributes.get("gen_ai.response.id"))
    call.input_tokens = _count(
        attributes,
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.token_count.prompt",
    )
    call.output_tokens = _count(
        attributes,
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
    )
    if call.request is None:
        call.messages = _input_messages(attributes)
        call.parameters = {**parameters, **_request_parameters(attributes, provider, method)}
        call.tools = _tools(attributes)
    if call.response is None:
        found = _answer(attributes)
        if isinstance(found, str):
            return found
        if found is not None:
            call.text, call.tool_calls, call.finish_reason = found
        elif attributes.get("output.mime_type") == "text/plain" and isinstance(
            attributes.get("output.value"), str
        ):
            call.text = attributes["output.value"]
        reasons = attributes.get("gen_ai.response.finish_reasons")
        if isinstance(reasons, list) and reasons:
            call.finish_reason = str(reasons[0])
        elif isinstance(attributes.get("llm.finish_reason"), str) and call.finish_reason is None:
            call.finish_reason = attributes["llm.finish_reason"]
    return call


# -- the request's parts ---------------------------------------------------------------------


def _input_messages(attributes: dict[str, Any]) -> list[Message] | None:
    current = _json(attributes.get("gen_ai.input.messages"))
    if isinstance(current, list):
        system = _json(attributes.get("gen_ai.system_instructions"))
        found = [Message("system", _parts_text(system))] if isinstance(system, list) else []
        for message in current:
            found += _current_message(message)
        return found
    indexed = _indexed(attributes, "gen_ai.prompt.")
    if indexed:
        return [_indexed_message(fields) for _, fields in sorted(indexed.items())]
    openinference = _indexed(attributes, "llm.input_messages.")
    if openinference:
        return [_openinference_message(fields) for _, fields in sorted(openinference.items())]
    return None


def _current_message(message: Any) -> list[Message]:
    """A GenAI `{role, parts}` message; its tool responses are one `tool` message each."""
    if not isinstance(message, dict):
        return []
    role = str(message.get("role") or "user")
    found = message.get("parts")
    parts: list[Any] = found if isinstance(found, list) else []
    responses = [p for p in parts if isinstance(p, dict) and p.get("type") == "tool_call_response"]
    if responses:
        return [
            Message("tool", _plain_text(p.get("response")), tool_call_id=str(p.get("id") or ""))
            for p in responses
        ]
    calls = tuple(
        ToolCall(str(p.get("id") or ""), str(p.get("name") or ""), p.get("arguments"))
        for p in parts
        if isinstance(p, dict) and p.get("type") == "tool_call"
    )
    text = _parts_text(parts)
    return [Message(role, text if text or not calls else None, calls)]


def _indexed_message(fields: dict[str, Any]) -> Message:
    calls = _indexed(fields, "tool_calls.")
    return Message(
        str(fields.get("role") or "user"),
        _text(fields.get("content")),
        tuple(
            ToolCall(str(c.get("id") or ""), str(c.get("name") or ""), c.get("arguments"))
            for _, c in sorted(calls.items())
        ),
        _text(fields.get("tool_call_id")),
    )


def _openinference_message(fields: dict[str, Any]) -> Message:
    content = _text(fields.get("message.content"))
    if content is None:
        contents = _indexed(fields, "message.contents.")
        texts = [
            str(part.get("message_content.text"))
            for _, part in sorted(contents.items())
            if part.get("message_content.type", "text") == "text" and "message_content.text" in part
        ]
        content = "".join(texts) if texts else None
    calls = _indexed(fields, "message.tool_calls.")
    return Message(
        str(fields.get("message.role") or "user"),
        content,
        tuple(
            ToolCall(
                str(c.get("tool_call.id") or ""),
                str(c.get("tool_call.function.name") or ""),
                c.get("tool_call.function.arguments"),
            )
            for _, c in sorted(calls.items())
        ),
        _text(fields.get("message.tool_call_id")),
    )


def _request_parameters(attributes: dict[str, Any], provider: str, method: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, wire in _PARAMETERS.items():
        value = attributes.get(f"gen_ai.request.{key}")
        if value is None:
            continue
        if key == "stop_sequences" and provider == "anthropic":
            wire = "stop_sequences"
        if key == "max_tokens" and method == "responses.create":
            wire = "max_output_tokens"
        found[wire or key] = value
    return found


def _tools(attributes: dict[str, Any]) -> list[dict[str, Any]] | None:
    definitions = _json(attributes.get("gen_ai.tool.definitions"))
    if isinstance(definitions, list):
        return [tool for tool in definitions if isinstance(tool, dict)]
    indexed = _indexed(attributes, "llm.tools.")
    tools = [_json(fields.get("tool.json_schema")) for _, fields in sorted(indexed.items())]
    return [tool for tool in tools if isinstance(tool, dict)] or None


# -- the answer ------------------------------------------------------------------------------


def _answer(
    attributes: dict[str, Any],
) -> tuple[str | None, list[ToolCall], str | None] | str | None:
    """(text, tool calls, finish reason) of the answer, a sentence when the source has a part
    kassette does not rebuild, None when no answer is recorded."""
    current = _json(attributes.get("gen_ai.output.messages"))
    if isinstance(current, list) and current:
        first = current[0] if isinstance(current[0], dict) else {}
        found = first.get("parts")
        parts: list[Any] = found if isinstance(found, list) else []
        if any(isinstance(p, dict) and p.get("type") == "reasoning" for p in parts):
            return "its answer has reasoning items, which kassette does not rebuild"
        (message,) = _current_message(first) or [Message("assistant")]
        finish = first.get("finish_reason")
        return message.content, list(message.tool_calls), _text(finish)
    for prefix, read in (
        ("gen_ai.completion.", _indexed_message),
        ("llm.output_messages.", _openinference_message),
    ):
        indexed = _indexed(attributes, prefix)
        if indexed:
            fields = indexed[min(indexed)]
            message = read(fields)
            return message.content, list(message.tool_calls), _text(fields.get("finish_reason"))
    return None


# -- small readers ----------------------------------------------------------------------------


def _indexed(attributes: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.N.rest` attributes as {N: {rest: value}}."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix):
            match = _INDEXED.match(key[len(prefix) :])
            if match:
                found.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return found


def _parts_text(parts: Any) -> str:
    return "".join(
        str(part.get("content") or "")
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    )


def _plain_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _count(attributes: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
