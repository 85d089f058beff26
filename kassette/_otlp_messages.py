"""A model call's conversation as trace attributes a viewer shows as chat messages.

Two vocabularies, both written (docs/otel.md, "Content"):
- OpenInference's flattened messages, which Phoenix reads: `llm.input_messages.N.message.role`
  / `.content`, `...message.tool_calls.M.tool_call.function.name` / `.arguments`,
  `...message.tool_call_id`, and the same under `llm.output_messages`;
- the GenAI semantic conventions' `gen_ai.input.messages` and `gen_ai.output.messages`: JSON
  lists of `{"role", "parts": [...]}`, a part being `{"type": "text", "content"}`,
  `{"type": "tool_call", "id", "name", "arguments"}` or `{"type": "tool_call_response", "id",
  "response"}`.

A message here is `{"role", "content", "tool_calls": [{"id", "name", "arguments"}],
"tool_call_id"}`, read from an OpenAI chat or Responses request or an Anthropic Messages
request; the answer is the response's text and tool calls (`kassette._llm_calls`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kassette._llm_calls import LLMCall

__all__ = ["input_messages", "model_call_content"]

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def model_call_content(call: LLMCall) -> dict[str, Any]:
    """The attributes of a model call's conversation and answer (with content only): the
    messages in both vocabularies, and `output.value` (the answer's text, or its tool calls as
    JSON when it has no text)."""
    asked = input_messages(call.request or {})
    answer: dict[str, Any] = {
        "role": "assistant",
        "content": call.text,
        "tool_calls": [
            {"id": None, "name": tool.get("name"), "arguments": _arguments(tool.get("arguments"))}
            for tool in call.tool_calls
        ],
        "tool_call_id": None,
    }
    found = _flattened("llm.input_messages", asked) | _flattened("llm.output_messages", [answer])
    found["gen_ai.input.messages"] = _genai(asked)
    output = _genai([answer])
    if call.finish_reason is not None:
        listed = json.loads(output)
        listed[0]["finish_reason"] = call.finish_reason
        output = json.dumps(listed, ensure_ascii=False)
    found["gen_ai.output.messages"] = output
    if call.text or not answer["tool_calls"]:
        found |= {"output.value": call.text, "output.mime_type": "text/plain"}
    else:  # a tool-call-only answer still shows what it asked for
        calls = [{"name": t["name"], "arguments": t["arguments"]} for t in answer["tool_calls"]]
        text = json.dumps({"tool_calls": calls}, ensure_ascii=False)
        found |= {"output.value": text, "output.mime_type": "application/json"}
    return found


def input_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages a request sends, system instructions first, in one shape for every
    provider."""
    found: list[dict[str, Any]] = []
    for key in ("system", "instructions"):
        text = _text_of(request.get(key))
        if text:
            found.append(_message("system", text))
    messages = request.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                found.extend(_read(message))
    given = request.get("input")
    if isinstance(given, str):
        found.append(_message("user", given))
    elif isinstance(given, list):
        for item in given:
            if isinstance(item, dict):
                found.extend(_read(item))
    return found


def _message(
    role: str,
    content: str | None,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    return {
        "role": role,
        "content": content,
        "tool_calls": tool_calls or [],
        "tool_call_id": tool_call_id,
    }


def _read(item: dict[str, Any]) -> list[dict[str, Any]]:
    """One provider message (or a Responses input item) as messages: an Anthropic message
    holding tool results gives one `tool` message per result."""
    kind = item.get("type")
    if kind == "function_call":  # Responses: the model's earlier tool call
        call = {"id": item.get("call_id"), "name": item.get("name"),
                "arguments": _arguments(item.get("arguments"))}  # fmt: skip
        return [_message("assistant", None, [call])]
    if kind == "function_call_output":
        return [_message("tool", _text_of(item.get("output")), None, _str(item.get("call_id")))]
    role = _str(item.get("role")) or "user"
    content = item.get("content")
    calls = [
        {
            "id": call.get("id"),
            "name": _dict(call.get("function")).get("name"),
            "arguments": _arguments(_dict(call.get("function")).get("arguments")),
        }
        for call in _dicts(item.get("tool_calls"))
    ]
    if not isinstance(content, list):
        return [_message(role, _text_of(content), calls, _str(item.get("tool_call_id")))]
    found: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in _dicts(content):
        if block.get("type") == "tool_use":  # Anthropic: the model's tool call
            calls.append({"id": block.get("id"), "name": block.get("name"),
                          "arguments": _arguments(block.get("input"))})  # fmt: skip
        elif block.get("type") == "tool_result":
            result = _text_of(block.get("content"))
            found.append(_message("tool", result, None, _str(block.get("tool_use_id"))))
        elif block.get("type") in _TEXT_PARTS and isinstance(block.get("text"), str):
            texts.append(block["text"])
    if texts or calls or not found:
        found.insert(0, _message(role, "".join(texts) if texts else None, calls))
    return found


def _flattened(prefix: str, messages: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """OpenInference's flattened message attributes."""
    found: dict[str, Any] = {}
    for number, message in enumerate(messages):
        at = f"{prefix}.{number}.message"
        found[f"{at}.role"] = message["role"]
        if message["content"] is not None:
            found[f"{at}.content"] = message["content"]
        if message["tool_call_id"] is not None:
            found[f"{at}.tool_call_id"] = message["tool_call_id"]
        for index, call in enumerate(message["tool_calls"]):
            tool = f"{at}.tool_calls.{index}.tool_call"
            if isinstance(call.get("id"), str):
                found[f"{tool}.id"] = call["id"]
            found[f"{tool}.function.name"] = _str(call.get("name")) or ""
            found[f"{tool}.function.arguments"] = call["arguments"]
    return found


def _genai(messages: Iterable[dict[str, Any]]) -> str:
    """The GenAI conventions' messages, as the JSON text they are exported as."""
    found = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message["tool_call_id"] is not None:
            parts.append({"type": "tool_call_response", "id": message["tool_call_id"],
                          "response": message["content"]})  # fmt: skip
        elif message["content"]:
            parts.append({"type": "text", "content": message["content"]})
        for call in message["tool_calls"]:
            parts.append({"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
                          "arguments": call["arguments"]})  # fmt: skip
        found.append({"role": message["role"], "parts": parts})
    return json.dumps(found, ensure_ascii=False)


def _arguments(value: Any) -> str:
    """A tool call's arguments as the JSON text a provider sends them as."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _text_of(value: Any) -> str | None:
    """A message's content as text: a string, or its text parts joined; other content
    (an image, a tool result's blocks) as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [part.get("text") for part in _dicts(value) if part.get("type") in _TEXT_PARTS]
        texts = [text for text in parts if isinstance(text, str)]
        if texts and len(texts) == len(parts) == len(value):
            return "".join(texts)
    return _arguments(value)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
