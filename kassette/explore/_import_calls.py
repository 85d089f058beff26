"""Model calls rebuilt from what another tool recorded: a request in the provider's wire shape
and a response of that provider, as `journaled(client, ctx)` would have journaled them.

A source (a trace's span, an Inspect model event) gives a `SourceCall`: the provider, the
method, and either the request and the response exactly as sent and received (OpenInference's
`input.value` / `output.value`, Inspect's raw `call`), or their parts in neutral words: the
messages (`Message`), the parameters, the tools, the answer's text and tool calls, the finish
reason and the token counts. `rebuild(call)` writes the step: the request in that provider's
wire shape (OpenAI chat `messages`, Responses `input`, Anthropic `system` + `messages`) and a
response written by `kassette.model_calls.response_from_text`, then given the recorded id,
tool calls, finish reason and usage. What cannot be rebuilt is returned as a sentence, never
guessed: the import stops the run there (`kassette.explore._import_runs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kassette._llm_calls import LLMCall, read_llm_result, response_from_text, tool_arguments

__all__ = ["METHODS", "Message", "SourceCall", "ToolCall", "fill_tool_call_ids", "rebuild"]

_CHAT, _RESPONSES, _MESSAGES = "chat.completions.create", "responses.create", "messages.create"
METHODS = {  # what journaled() journals, per provider
    "openai": (_CHAT, _RESPONSES),
    "anthropic": (_MESSAGES, "messages.stream"),
}
# a finish reason, in any tool's words, in each provider's
_OPENAI_FINISH = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "tool_calls": "tool_calls",
    "tool_call": "tool_calls",
    "tool_use": "tool_calls",
    "content_filter": "content_filter",
}
_ANTHROPIC_FINISH = {
    "stop": "end_turn",
    "end_turn": "end_turn",
    "stop_sequence": "stop_sequence",
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "tool_calls": "tool_use",
    "tool_call": "tool_use",
    "tool_use": "tool_use",
    "refusal": "refusal",
}


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for: its id (may be empty), name and arguments (JSON)."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Message:
    """One message of a conversation in neutral words: a role (`system`, `user`,
    `assistant`, `tool`), its text, the tool calls an assistant message made, the tool call
    a tool message answers."""

    role: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass
class SourceCall:
    """A model call as a source recorded it. `request`/`response`: the exact wire JSON, when
    the source kept it; otherwise the neutral parts below rebuild them."""

    provider: str
    method: str
    request: dict[str, Any] | None = None
    response: Any = None
    messages: list[Message] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


def rebuild(call: SourceCall) -> tuple[dict[str, Any], Any] | str:
    """(the request, the response) of `call` in its provider's shapes, or a sentence saying
    what the source lacks."""
    if call.provider not in METHODS:
        return f"a model call to {call.provider!r}: kassette journals openai and anthropic calls"
    request = call.request if call.request is not None else _request(call)
    if isinstance(request, str):
        return request
    response = _response(call, request)
    if isinstance(response, str):
        return response
    return request, response


# -- the request ---------------------------------------------------------------------------


def _request(call: SourceCall) -> dict[str, Any] | str:
    if not call.messages:
        return "its request's messages were left out of the source (content not captured)"
    model = call.model or call.parameters.get("model")
    if not isinstance(model, str):
        return "its request names no model"
    request: dict[str, Any] = {"model": model}
    if call.provider == "anthropic":
        system = [m.content or "" for m in call.messages if m.role == "system"]
        if system:
            request["system"] = "\n\n".join(system)
        request["messages"] = [_anthropic_message(m) for m in call.messages if m.role != "system"]
    elif call.method == _RESPONSES:
        request["input"] = [_responses_item(m) for m in call.messages]
    else:
        request["messages"] = [_chat_message(m) for m in call.messages]
    request.update({k: v for k, v in call.parameters.items() if k != "model" and v is not None})
    if call.tools:
        request["tools"] = call.tools
    return request


def _chat_message(message: Message) -> dict[str, Any]:
    found: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        found["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments_text(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        found["tool_call_id"] = message.tool_call_id
    return found


def _responses_item(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": message.content or ""}


def _anthropic_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.content or "",
        }
        return {"role": "user", "content": [block]}
    if not message.tool_calls:
        return {"role": message.role, "content": message.content or ""}
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": tool_arguments(c.arguments)}
        for c in message.tool_calls
    ]
    return {"role": message.role, "content": blocks}


# -- the response --------------------------------------------------------------------------


def _response(call: SourceCall, request: dict[str, Any]) -> Any:
    stream = request.get("stream") is True or call.method == "messages.stream"
    if call.response is not None:
        read = read_llm_result(call.response, {"provider": call.provider, "method": call.method})
        if read is not None and read.shape is not None and read.stream == stream:
            return call.response
        if read is not None and read.shape is not None and not stream:
            return call.response
    if call.text is None and not call.tool_calls:
        return "its answer was left out of the source (content not captured)"
    if stream and call.tool_calls:
        return "a streamed answer with tool calls: its events are not in the source"
    model = call.response_model or call.model or str(request.get("model") or "")
    shell = LLMCall(call.provider, call.method, request, {"model": model}, stream)
    response = response_from_text(shell, call.text or "")
    if stream:
        return response  # the text's events; usage and ids are not rebuilt into a stream
    if call.provider == "anthropic":
        _anthropic_answer(response, call)
    elif call.method == _RESPONSES:
        _responses_answer(response, call)
    else:
        _chat_answer(response, call)
    return response


def _chat_answer(response: dict[str, Any], call: SourceCall) -> None:
    choice = response["choices"][0]
    if call.response_id:
        response["id"] = call.response_id
    if call.tool_calls:
        choice["message"]["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments_text(c.arguments)},
            }
            for c in call.tool_calls
        ]
        if not call.text:
            choice["message"]["content"] = None
    choice["finish_reason"] = _finish(call, _OPENAI_FINISH, "tool_calls", "stop")
    given, taken = call.input_tokens or 0, call.output_tokens or 0
    response["usage"] = {
        "prompt_tokens": given,
        "completion_tokens": taken,
        "total_tokens": given + taken,
    }


def _responses_answer(response: dict[str, Any], call: SourceCall) -> None:
    if call.response_id:
        response["id"] = call.response_id
    if not call.text:
        response["output"] = []
    response["output"] += [
        {
            "type": "function_call",
            "id": f"fc_{c.id}",
            "call_id": c.id,
            "name": c.name,
            "arguments": _arguments_text(c.arguments),
            "status": "completed",
        }
        for c in call.tool_calls
    ]
    given, taken = call.input_tokens or 0, call.output_tokens or 0
    response["usage"].update(input_tokens=given, output_tokens=taken, total_tokens=given + taken)


def _anthropic_answer(response: dict[str, Any], call: SourceCall) -> None:
    if call.response_id:
        response["id"] = call.response_id
    if not call.text:
        response["content"] = []
    response["content"] += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": tool_arguments(c.arguments)}
        for c in call.tool_calls
    ]
    response["stop_reason"] = _finish(call, _ANTHROPIC_FINISH, "tool_use", "end_turn")
    response["usage"].update(
        input_tokens=call.input_tokens or 0, output_tokens=call.output_tokens or 0
    )


def _finish(call: SourceCall, words: dict[str, str], tools: str, stop: str) -> str:
    if call.finish_reason is not None:
        return words.get(call.finish_reason, call.finish_reason)
    return tools if call.tool_calls else stop


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


# -- tool call ids a rebuilt answer lacks ------------------------------------------------------


def fill_tool_call_ids(response: Any, provider: str, method: str, request: Any) -> None:
    """Give a rebuilt answer's tool calls what the next request of the run passes back (its
    last assistant turn's tool calls, in order): the ids a source left out, and the
    arguments as the exact text the model wrote (a source may keep them decoded). The code
    that replays the answer passes them back the same way, so its next request matches. Left
    as they are when the next request holds no such turn or another number of calls."""
    if not isinstance(response, dict) or not isinstance(request, dict):
        return
    if provider == "anthropic":
        blocks = [b for b in response.get("content") or [] if b.get("type") == "tool_use"]
        passed = _last_turn(request.get("messages"), "content", "tool_use")
        pairs = [(block, "id", sent.get("id")) for block, sent in _zipped(blocks, passed)]
    elif method == _RESPONSES:
        items = [i for i in response.get("output") or [] if i.get("type") == "function_call"]
        sent_input = request.get("input")
        inputs: list[Any] = sent_input if isinstance(sent_input, list) else []
        passed = [i for i in inputs if isinstance(i, dict) and i.get("type") == "function_call"]
        passed = passed[-len(items) :] if items else []
        pairs = [
            (item, key, sent.get(key))
            for item, sent in _zipped(items, passed)
            for key in ("call_id", "arguments")
        ]
    else:
        choices = response.get("choices") or [{}]
        calls = (choices[0].get("message") or {}).get("tool_calls") or []
        passed = _last_turn(request.get("messages"), "tool_calls", None)
        pairs = []
        for call, sent in _zipped(calls, passed):
            pairs.append((call, "id", sent.get("id")))
            given = sent.get("function")
            function: dict[str, Any] = given if isinstance(given, dict) else {}
            pairs.append((call.get("function") or {}, "arguments", function.get("arguments")))
    for holder, key, value in pairs:
        if not isinstance(value, str) or not value:
            continue
        if key == "arguments":  # the same arguments, as the model spelled them
            if tool_arguments(value) == tool_arguments(holder.get(key)):
                holder[key] = value
        elif not holder.get(key):
            holder[key] = value


def _zipped(ours: list[Any], passed: list[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Our tool calls beside the ones passed back, when there are as many of each."""
    return list(zip(ours, passed, strict=True)) if len(ours) == len(passed) else []


def _last_turn(messages: Any, field: str, kind: str | None) -> list[dict[str, Any]]:
    """The tool calls of the last assistant message that has some."""
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        found = message.get(field)
        parts: list[Any] = found if isinstance(found, list) else []
        calls = [
            part
            for part in parts
            if isinstance(part, dict) and (kind is None or part.get("type") == kind)
        ]
        if calls:
            return calls
    return []
