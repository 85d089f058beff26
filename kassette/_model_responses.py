"""Responses written for a text: what a fork edit of a model call journals.

`kassette._llm_calls.response_from_text` picks the shape (an OpenAI chat completion or its
chunks, a Responses API response or its events, an Anthropic message or its events); the
functions here write it, keeping the recorded response's other fields. Standard library only.
"""

from __future__ import annotations

from typing import Any

# -- writing a response that carries a text --------------------------------------------------


def template(result: Any, provider: str) -> dict[str, Any]:
    """The recorded response (for a stream, the whole response it ended with, or its first
    event's) whose fields an edited response keeps."""
    if not is_stream(result):
        return dict(result) if isinstance(result, dict) else {}
    events = dicts(result["stream"])
    if provider == "anthropic":
        start = next((e for e in events if e.get("type") == "message_start"), {})
        return dict(as_dict(start.get("message")))
    responses = [e["response"] for e in events if isinstance(e.get("response"), dict)]
    return dict(responses[-1]) if responses else dict(events[0]) if events else {}


def chat_completion(template: dict[str, Any], model: str, digest: str, text: str) -> Any:
    return {
        "id": f"chatcmpl-edited-{digest}",
        "object": "chat.completion",
        "created": count(template.get("created")) or 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _no_usage(template, _CHAT_USAGE),
        "system_fingerprint": template.get("system_fingerprint"),
        "service_tier": template.get("service_tier"),
    }


def chat_chunks(recorded: Any, model: str, digest: str, text: str) -> list[dict[str, Any]]:
    """A chat completion stream: the role, the text, the finish, and usage when the recorded
    stream reported it (`stream_options={"include_usage": True}`)."""
    chunks = dicts(recorded.get("stream")) if isinstance(recorded, dict) else []
    first = chunks[0] if chunks else {}
    envelope = {
        "id": f"chatcmpl-edited-{digest}",
        "object": "chat.completion.chunk",
        "created": count(first.get("created")) or 0,
        "model": model,
        "system_fingerprint": first.get("system_fingerprint"),
    }
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": ""}, None),
        ({"content": text}, None),
        ({}, "stop"),
    ]
    stream = [
        {
            **envelope,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": end}],
        }
        for delta, end in deltas
    ]
    recorded_usage = next((chunk for chunk in chunks if chunk.get("usage")), None)
    if recorded_usage is not None:
        stream.append({**envelope, "choices": [], "usage": _no_usage(recorded_usage, _CHAT_USAGE)})
    return stream


def openai_response(template: dict[str, Any], model: str, digest: str, text: str) -> Any:
    response = {
        "object": "response",
        "created_at": template.get("created_at", 0),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "instructions": None,
        "metadata": {},
        "temperature": None,
        "top_p": None,
        **template,
    }
    response.update(
        id=f"resp_edited{digest}",
        model=model,
        status="completed",
        error=None,
        incomplete_details=None,
        output=[_output_message(digest, text, "completed")],
        usage=_no_usage(template, _RESPONSES_USAGE),
    )
    response.pop("output_text", None)
    return response


_CHAT_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
_RESPONSES_USAGE = {
    "input_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 0,
}


def _no_usage(template: dict[str, Any], default: dict[str, Any]) -> dict[str, Any]:
    """The usage of a response no tokens were spent on: `default`, and every count the
    recorded response's usage reports, set to 0."""
    recorded = as_dict(template.get("usage"))
    usage = dict(default)
    for key, value in recorded.items():
        if isinstance(value, dict):
            usage[key] = {**as_dict(default.get(key)), **_no_usage({"usage": value}, {})}
        else:
            usage[key] = 0 if count(value) is not None else value
    return usage


def _output_message(digest: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": f"msg_edited{digest}",
        "role": "assistant",
        "status": status,
        "content": [part] if status == "completed" else [],
    }


def response_events(response: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """The Responses API's events for one message with one text part, in order."""
    done = response["output"][0]
    item_id = done["id"]
    part = done["content"][0]
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**done, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": response},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def anthropic_message(template: dict[str, Any], model: str, digest: str, text: str) -> Any:
    return {
        "id": f"msg_edited{digest}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": _no_usage(template, {"input_tokens": 0, "output_tokens": 0}),
    }


def anthropic_events(message: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """Anthropic's server-sent events for one text block, as JSON, in order."""
    started = {**message, "content": [], "stop_reason": None}
    return [
        {"type": "message_start", "message": started},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 0},
        },
        {"type": "message_stop"},
    ]


# -- small readers shared with kassette._llm_calls ------------------------------------------


def is_stream(result: Any) -> bool:
    return isinstance(result, dict) and len(result) == 1 and isinstance(result.get("stream"), list)


def dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def index(part: dict[str, Any], last: int, problems: list[str], what: str) -> int:
    """A stream item's `index` (0 when absent); one that is no integer continues the item
    before it, noted in `problems` (sorting `None` beside 0 would fail the whole read)."""
    index = part.get("index", 0)
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    problems.append(f"a streamed {what} has index {index!r}: read as part of {what} {last}")
    return last
