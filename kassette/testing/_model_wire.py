"""The wire formats of the fake model server: each provider's request in, its response out.

OpenAI's chat completions (`POST /v1/chat/completions`) and Responses API (`POST /v1/responses`)
and Anthropic's Messages API (`POST /v1/messages`): a request body is read into a `Prompt`, and a
`Reply` (the `Answer` with its ids) is written back as that provider's JSON body or, for
`"stream": true`, as its server-sent events (`Event`: an `event:` name or None, and the data),
with usage and errors in that provider's shapes. `ROUTES` maps each path to its provider and
these readers and writers.

Standard library only, imported by `kassette.testing._model_server`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kassette.testing._model_answers import Answer, Prompt, Tool, text_of

__all__ = ["ROUTES", "Event", "Reply", "Route", "error_body", "invalid_reason"]

Event = tuple[str | None, dict[str, Any]]  # an SSE event's name (None: no `event:` line), data


_ERRORS = {
    "anthropic": {
        400: ("invalid_request_error", "Invalid request"),
        404: ("not_found_error", "Not found"),
        429: ("rate_limit_error", "Number of requests has exceeded your rate limit"),
        500: ("api_error", "Internal server error"),
        529: ("overloaded_error", "Overloaded"),
    },
    "openai": {
        400: ("invalid_request_error", "Invalid request"),
        404: ("invalid_request_error", "Not found"),
        429: ("requests", "Rate limit reached for requests"),
        500: ("server_error", "The server had an error while processing your request."),
        529: ("server_error", "The engine is currently overloaded, please try again later."),
    },
}


class Reply:
    """One request's answer with what every shape of it shares: ids, creation time, cached tokens.

    `created` and the id's `suffix` differ for every response, as a provider's do.
    """

    def __init__(self, answer: Answer, *, created: int, cached: int) -> None:
        self.answer = answer
        self.created = created
        self.suffix = uuid.uuid4().hex[:24]
        self.cached = cached

    def pieces(self) -> list[str]:
        """The text as a stream sends it: a word (with its leading space) per chunk."""
        words = self.answer.text.split(" ")
        return [word if index == 0 else " " + word for index, word in enumerate(words) if word]

    def arguments(self) -> str:
        call = self.answer.tool_call
        return json.dumps(call.arguments) if call else ""

    def argument_pieces(self) -> list[str]:
        arguments = self.arguments()
        return [arguments[index : index + 12] for index in range(0, len(arguments), 12)]


# OpenAI chat completions


def _chat_prompt(body: dict[str, Any]) -> Prompt:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = "\n".join(
        text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    turns = tuple(
        (str(m.get("role")), text_of(m.get("content")) or _calls_text(m.get("tool_calls")))
        for m in messages
        if m.get("role") not in ("system", "developer")
    )
    tools = tuple(
        Tool(f["name"], f.get("description", ""), f.get("parameters") or {})
        for t in body.get("tools") or []
        if isinstance(f := t.get("function"), dict) and "name" in f
    )
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        choice = (choice.get("function") or {}).get("name", "required")
    after_tool = bool(messages) and messages[-1].get("role") == "tool"
    return _prompt(body, system, turns, tools, str(choice), after_tool, "max_completion_tokens")


def _calls_text(calls: Any) -> str:
    """An assistant turn that only calls tools, as the model reads it: the functions and their
    arguments, not the call ids the server made up (fresh each time, they would make the answer
    after a tool result differ from one run of the same agent to the next)."""
    if not isinstance(calls, list):
        return ""
    return json.dumps([c.get("function") for c in calls if isinstance(c, dict)], sort_keys=True)


def _chat_completion(reply: Reply, model: str) -> dict[str, Any]:
    call = reply.answer.tool_call
    message: dict[str, Any] = {"role": "assistant", "content": reply.answer.text or None}
    message["refusal"] = None
    if call:
        message["tool_calls"] = [_chat_tool_call(reply, call.name, reply.arguments())]
    return {
        **_chat_envelope(reply, model, "chat.completion"),
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.answer.finish}
        ],
        "usage": _openai_usage(reply),
    }


def _chat_events(reply: Reply, body: dict[str, Any]) -> Iterator[Event]:
    with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    envelope = _chat_envelope(reply, body["model"], "chat.completion.chunk")
    usage = {"usage": None} if with_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return None, {**envelope, "choices": [choice], **usage}

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in reply.pieces():
        yield chunk({"content": piece})
    call = reply.answer.tool_call
    if call:
        yield chunk({"tool_calls": [{"index": 0, **_chat_tool_call(reply, call.name, "")}]})
        for piece in reply.argument_pieces():
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    yield chunk({}, reply.answer.finish)
    if with_usage:
        yield None, {**envelope, "choices": [], "usage": _openai_usage(reply)}


def _chat_envelope(reply: Reply, model: str, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{reply.suffix}",
        "object": kind,
        "created": reply.created,
        "model": model,
        "service_tier": "default",
        "system_fingerprint": f"fp_{uuid.uuid5(uuid.NAMESPACE_URL, model).hex[:10]}",
    }


def _chat_tool_call(reply: Reply, name: str, arguments: str) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"id": f"call_{reply.suffix}", "type": "function", "function": function}


def _openai_usage(reply: Reply) -> dict[str, Any]:
    prompt, completion = reply.answer.prompt_tokens, reply.answer.completion_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reply.cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


# OpenAI Responses API


def _responses_prompt(body: dict[str, Any]) -> Prompt:
    items = body.get("input") or ""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = [item for item in items if isinstance(item, dict)]
    turns = tuple(
        (str(item.get("role") or item.get("type")), text_of(item.get("content") or [item]))
        for item in items
    )
    tools = tuple(
        Tool(t["name"], t.get("description") or "", t.get("parameters") or {})
        for t in body.get("tools") or []
        if t.get("type") == "function" and "name" in t
    )
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        choice = choice.get("name", "required")
    after_tool = bool(items) and items[-1].get("type") == "function_call_output"
    system = str(body.get("instructions") or "")
    return _prompt(body, system, turns, tools, str(choice), after_tool, "max_output_tokens")


def _response(reply: Reply, body: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": f"resp_{reply.suffix}",
        "object": "response",
        "created_at": reply.created,
        "status": status,
        "model": body["model"],
        "output": [_output_item(reply)] if done else [],
        "output_text": reply.answer.text if done else "",
        "instructions": body.get("instructions"),
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "max_output_tokens": body.get("max_output_tokens"),
        "incomplete_details": None,
        "error": None,
        "metadata": body.get("metadata") or {},
        "usage": _response_usage(reply) if done else None,
    }


def _output_item(reply: Reply, *, done: bool = True) -> dict[str, Any]:
    status = "completed" if done else "in_progress"
    call = reply.answer.tool_call
    if call:
        arguments = reply.arguments() if done else ""
        return {
            "type": "function_call",
            "id": f"fc_{reply.suffix}",
            "call_id": f"call_{reply.suffix}",
            "name": call.name,
            "arguments": arguments,
            "status": status,
        }
    content = [_output_text(reply.answer.text)] if done else []
    return {
        "type": "message",
        "id": f"msg_{reply.suffix}",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _response_events(reply: Reply, body: dict[str, Any]) -> Iterator[Event]:
    item_id = _output_item(reply)["id"]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(reply, body, "in_progress")},
        {"type": "response.in_progress", "response": _response(reply, body, "in_progress")},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": _output_item(reply, done=False),
        },
    ]
    at = {"item_id": item_id, "output_index": 0}
    if reply.answer.tool_call:
        events += [
            {"type": "response.function_call_arguments.delta", **at, "delta": piece}
            for piece in reply.argument_pieces()
        ]
        events.append(
            {"type": "response.function_call_arguments.done", **at, "arguments": reply.arguments()}
        )
    else:
        part = {**at, "content_index": 0}
        text = reply.answer.text
        events.append({"type": "response.content_part.added", **part, "part": _output_text("")})
        events += [
            {"type": "response.output_text.delta", **part, "delta": piece, "logprobs": []}
            for piece in reply.pieces()
        ]
        events.append({"type": "response.output_text.done", **part, "text": text, "logprobs": []})
        events.append({"type": "response.content_part.done", **part, "part": _output_text(text)})
    events.append(
        {"type": "response.output_item.done", "output_index": 0, "item": _output_item(reply)}
    )
    events.append({"type": "response.completed", "response": _response(reply, body)})
    for sequence, event in enumerate(events):
        yield event["type"], {**event, "sequence_number": sequence}


def _response_usage(reply: Reply) -> dict[str, Any]:
    prompt, completion = reply.answer.prompt_tokens, reply.answer.completion_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": reply.cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


# Anthropic Messages API


def _messages_prompt(body: dict[str, Any]) -> Prompt:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    turns = tuple((str(m.get("role")), text_of(m.get("content"))) for m in messages)
    tools = tuple(
        Tool(t["name"], t.get("description") or "", t.get("input_schema") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and "name" in t
    )
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type", "auto")
    name = choice.get("name") if kind == "tool" else {"any": "required"}.get(kind, kind)
    last = messages[-1].get("content") if messages else None
    after_tool = isinstance(last, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in last
    )
    system = text_of(body.get("system") or "")
    return _prompt(body, system, turns, tools, str(name), after_tool, "max_tokens")


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _message(reply: Reply, model: str, *, done: bool = True) -> dict[str, Any]:
    return {
        "id": f"msg_{reply.suffix}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(reply) if done else [],
        "stop_reason": _STOP_REASONS[reply.answer.finish] if done else None,
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, reply.answer.completion_tokens if done else 1),
    }


def _blocks(reply: Reply, *, done: bool = True) -> list[dict[str, Any]]:
    """The content blocks: the text, and a tool call after a line saying which tool it uses."""
    call = reply.answer.tool_call
    if call is None:
        return [{"type": "text", "text": reply.answer.text if done else ""}]
    preface = {"type": "text", "text": f"I'll use the {call.name} tool for this." if done else ""}
    arguments = call.arguments if done else {}
    tool_use = {"type": "tool_use", "id": f"toolu_{reply.suffix}", "name": call.name}
    return [preface, {**tool_use, "input": arguments}]


def _message_events(reply: Reply, body: dict[str, Any]) -> Iterator[Event]:
    model = body["model"]
    yield "message_start", {"type": "message_start", "message": _message(reply, model, done=False)}
    for index, block in enumerate(_blocks(reply, done=False)):
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": block,
            },
        )
        if block["type"] == "text":
            texts = reply.pieces() if reply.answer.text else [_blocks(reply)[0]["text"]]
            pieces = [{"type": "text_delta", "text": piece} for piece in texts]
        else:
            pieces = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in reply.argument_pieces()
            ]
        for delta in pieces:
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    stop = {"stop_reason": _STOP_REASONS[reply.answer.finish], "stop_sequence": None}
    usage = {"output_tokens": reply.answer.completion_tokens}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


def _anthropic_usage(reply: Reply, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": reply.answer.prompt_tokens - reply.cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": reply.cached,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


# the wire


def _prompt(
    body: dict[str, Any],
    system: str,
    turns: tuple[tuple[str, str], ...],
    tools: tuple[Tool, ...],
    tool_choice: str,
    after_tool_result: bool,
    max_tokens_field: str,
) -> Prompt:
    """The prompt of a request: what each provider's reader found, and the shared parameters."""
    temperature = body.get("temperature")
    max_tokens = body.get(max_tokens_field, body.get("max_tokens"))
    seed = body.get("seed")
    return Prompt(
        model=str(body["model"]),
        system=system,
        turns=turns,
        tools=tools,
        tool_choice=tool_choice,
        after_tool_result=after_tool_result,
        temperature=1.0 if temperature is None else float(temperature),
        seed=seed if isinstance(seed, int) else None,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
    )


Route = tuple[
    str,  # the provider
    Callable[[dict[str, Any]], Prompt],
    Callable[[Reply, dict[str, Any]], dict[str, Any]],
    Callable[[Reply, dict[str, Any]], Iterator[Event]],
    bool,  # the stream ends with `data: [DONE]`
]
ROUTES: dict[str, Route] = {
    "/v1/chat/completions": (
        "openai",
        _chat_prompt,
        lambda reply, body: _chat_completion(reply, body["model"]),
        _chat_events,
        True,
    ),
    "/v1/responses": ("openai", _responses_prompt, _response, _response_events, False),
    "/v1/messages": (
        "anthropic",
        _messages_prompt,
        lambda reply, body: _message(reply, body["model"]),
        _message_events,
        False,
    ),
}


def error_body(provider: str, status: int, message: str | None = None) -> dict[str, Any]:
    """The error body each provider sends with `status`."""
    kind, default = _ERRORS[provider].get(status, _ERRORS[provider][500])
    if provider == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message or default}}
    return {"error": {"message": message or default, "type": kind, "param": None, "code": None}}


def invalid_reason(provider: str, body: dict[str, Any]) -> str | None:
    """What the provider would reject the request for (a missing required field), if anything."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "model: Field required"
    if provider == "anthropic" and not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    return None
