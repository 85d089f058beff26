"""A model call as a conversation: the messages a person reads instead of the request's JSON.

A *conversation* is the list of messages of one model call, in order: those the request sent
(the system text, the user's turns, the assistant's earlier turns with their tool calls, the
tool results handed back), then the response (`"response": True`): the assistant's answer text
and the tool calls it asks for. Each message is a plain dict:

- `role`: `"system"`, `"user"`, `"assistant"` or `"tool"` (a tool result);
- `text`: its text (a tool result's output as text);
- `tool_calls` (assistant): `[{"name", "arguments", "id"}]`, arguments decoded when JSON;
- `name` (tool): the tool whose result it is, when the conversation names it.

The request is read here, for each provider's wire format: OpenAI chat completions
(`messages`), OpenAI Responses (`instructions` and `input`: a string, or message,
`function_call` and `function_call_output` items) and Anthropic Messages (`system` and
`messages` whose content blocks are `text`, `tool_use` and `tool_result`). The response is
`kassette._llm_calls`' reading (streams included), never read again here.

`call_view(entry, step_id)` is what the widgets show for a model-call step: the conversation,
the model, its tokens and cost, and the raw journal entry as indented JSON (one click away).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kassette._llm_calls import LLMCall, read_llm_result, text_of_content, tool_arguments
from kassette.explore._cost import call_costs

__all__ = ["ROLES", "call_view", "conversation"]

ROLES = ("system", "user", "assistant", "tool")
_SYSTEM_ROLES = frozenset({"system", "developer"})


def conversation(call: LLMCall) -> list[dict[str, Any]]:
    """The messages of a model call: the request's, then the response's (see the module)."""
    request = call.request or {}
    if call.provider == "anthropic":
        messages = _anthropic(request)
    elif "messages" in request:
        messages = _chat(request.get("messages"))
    else:
        messages = _responses(request)
    _name_tool_results(messages)
    answer: dict[str, Any] = {"role": "assistant", "text": call.text, "response": True}
    if call.tool_calls:
        answer["tool_calls"] = [dict(tool) for tool in call.tool_calls]
    return [*messages, answer]


def call_view(entry: Mapping[str, Any], step_id: str) -> dict[str, Any] | None:
    """A model-call step's entry fields (`result`, `call`, ...) as the widgets show it:
    `step_id`, `provider`, `model`, `messages` (its conversation), `finish_reason`,
    `input_tokens`, `output_tokens`, `cost_usd` (None when unpriced) and `raw` (the entry as
    indented JSON). None when the step is not a model call."""
    if entry.get("kind", "step") != "step":
        return None
    call = read_llm_result(entry.get("result"), entry.get("call"))
    if call is None:
        return None
    usage = call.usage
    (cost,) = call_costs([(call.provider, call.model, usage)])
    return {
        "step_id": step_id,
        "provider": call.provider,
        "method": call.method,
        "model": call.model,
        "messages": conversation(call),
        "finish_reason": call.finish_reason,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": cost,
        "raw": json.dumps(dict(entry), indent=2, ensure_ascii=False),
    }


# -- each provider's request -----------------------------------------------------------------


def _chat(turns: Any) -> list[dict[str, Any]]:
    """OpenAI chat completions' `messages`."""
    messages = []
    for turn in _dicts(turns):
        role = _role(turn.get("role"))
        message: dict[str, Any] = {"role": role, "text": text_of_content(turn.get("content"))}
        if role == "tool":
            message["id"] = turn.get("tool_call_id")
            if isinstance(turn.get("name"), str):
                message["name"] = turn["name"]
        calls = [
            _tool_call(_dict(tool.get("function")), tool.get("id"))
            for tool in _dicts(turn.get("tool_calls"))
        ]
        if isinstance(turn.get("function_call"), dict):
            calls.append(_tool_call(turn["function_call"], None))
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
    return messages


def _responses(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """OpenAI Responses' `instructions` and `input`."""
    messages = []
    if isinstance(request.get("instructions"), str):
        messages.append({"role": "system", "text": request["instructions"]})
    given = request.get("input")
    if isinstance(given, str):
        return [*messages, {"role": "user", "text": given}]
    for item in _dicts(given):
        kind = item.get("type", "message")
        if kind == "function_call":
            call = _tool_call({"name": item.get("name"), "arguments": item.get("arguments")}, None)
            call["id"] = item.get("call_id")
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "text": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else text_of_content(output)
            messages.append({"role": "tool", "text": text, "id": item.get("call_id")})
        elif kind == "message":
            role = _role(item.get("role"))
            messages.append({"role": role, "text": text_of_content(item.get("content"))})
    return messages


def _anthropic(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Anthropic Messages' `system` and `messages` (a tool result is a message of its own)."""
    messages = []
    system = request.get("system")
    if system:
        messages.append({"role": "system", "text": text_of_content(system)})
    for turn in _dicts(request.get("messages")):
        role, content = _role(turn.get("role")), turn.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "text": content})
            continue
        blocks = _dicts(content)
        results = [block for block in blocks if block.get("type") == "tool_result"]
        for block in results:
            output = block.get("content")
            text = output if isinstance(output, str) else text_of_content(output)
            result: dict[str, Any] = {"role": "tool", "text": text, "id": block.get("tool_use_id")}
            messages.append(result)
        calls = [
            _tool_call(block, block.get("id"), arguments=block.get("input"))
            for block in blocks
            if block.get("type") == "tool_use"
        ]
        text = text_of_content([block for block in blocks if block not in results])
        if text or calls or not results:
            message: dict[str, Any] = {"role": role, "text": text}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
    return messages


# -- small readers -------------------------------------------------------------------------


def _name_tool_results(messages: list[dict[str, Any]]) -> None:
    """Name each tool result after the tool call it answers (by the call's id)."""
    names = {
        call["id"]: call["name"]
        for message in messages
        for call in message.get("tool_calls", [])
        if call.get("id") is not None
    }
    for message in messages:
        if message["role"] == "tool" and "name" not in message and message.get("id") in names:
            message["name"] = names[message["id"]]


def _tool_call(function: Mapping[str, Any], call_id: Any, **given: Any) -> dict[str, Any]:
    arguments = given["arguments"] if "arguments" in given else function.get("arguments")
    name = function.get("name")
    return {
        "name": name if isinstance(name, str) else None,
        "arguments": tool_arguments(arguments),
        "id": call_id if isinstance(call_id, str) else None,
    }


def _role(role: Any) -> str:
    if role in _SYSTEM_ROLES:
        return "system"
    return role if role in ROLES else "user"


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
