"""A model call as trace attributes: the GenAI semantic conventions' and OpenInference's
(docs/otel.md, "Model calls"), and JSON values as attribute text."""

from __future__ import annotations

import json
from typing import Any

from kassette._llm_calls import LLMCall
from kassette._otlp_messages import model_call_content

__all__ = ["content", "json_text", "model_call_attributes"]

# request parameters, as GenAI attribute names (several providers' words for one)
_REQUEST_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
    "stop": "gen_ai.request.stop_sequences",
    "stop_sequences": "gen_ai.request.stop_sequences",
}
# what a request holds besides its parameters: the conversation, exported only with content
_CONTENT_FIELDS = frozenset({"messages", "input", "system", "tools", "instructions"})


def model_call_attributes(call: LLMCall, include_content: bool) -> tuple[str, dict[str, Any]]:
    """A model call's span name (`chat MODEL`) and its GenAI semantic conventions' and
    OpenInference attributes (None values left out).

    A response that cannot be read (one bad entry) leaves out what it would have given (the
    answering model, tokens, finish reason, answer), with `kassette.unreadable` saying why;
    one read leniently (a stream's tool-call delta without an index, say) is exported with
    `kassette.notes` saying what was odd: one entry never breaks the export of a store."""
    request = call.request or {}
    found: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": call.provider,
        "kassette.model_call.method": call.method,
        "openinference.span.kind": "LLM",
        "llm.provider": call.provider,
        "llm.system": call.provider,
    }
    requested = request.get("model") if isinstance(request.get("model"), str) else None
    try:
        found |= _response_attributes(call, requested, include_content)
        requested = requested or call.model
        if call.problems:  # read as well as it could be: what `llm_calls.notes` says too
            found["kassette.notes"] = "; ".join(call.problems)
    except Exception as exc:  # any reader's failure on a hostile response
        found["kassette.unreadable"] = f"the model call's response could not be read: {exc!r}"
    span_name = f"chat {requested}" if requested else "chat"
    found["gen_ai.request.model"] = requested
    for key, name in _REQUEST_PARAMETERS.items():
        if key in request and request[key] is not None:
            value = request[key]
            listed = name.endswith("stop_sequences") and isinstance(value, str)
            found[name] = [value] if listed else value
    parameters = {key: value for key, value in request.items() if key not in _CONTENT_FIELDS}
    found["llm.invocation_parameters"] = json_text(parameters)
    if include_content:
        conversation = {key: value for key, value in request.items() if key in _CONTENT_FIELDS}
        found |= content("input", conversation)
    return span_name, {key: value for key, value in found.items() if value is not None}


def _response_attributes(
    call: LLMCall, requested: str | None, include_content: bool
) -> dict[str, Any]:
    """What the response of a model call says: model, id, tokens, finish reason, answer."""
    finish = call.finish_reason  # reads the response once: the usage comes with it
    usage = call.usage
    found: dict[str, Any] = {
        "gen_ai.response.model": call.model,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "llm.model_name": call.model or requested,
        "llm.token_count.prompt": usage.input_tokens,
        "llm.token_count.completion": usage.output_tokens,
        "llm.token_count.total": usage.total_tokens,
    }
    if isinstance(call.result, dict) and isinstance(call.result.get("id"), str):
        found["gen_ai.response.id"] = call.result["id"]
    if finish is not None:
        found["gen_ai.response.finish_reasons"] = [finish]
    if include_content:
        found |= model_call_content(call)
    return found


def content(direction: str, value: Any) -> dict[str, Any]:
    """`input.value` / `output.value` (OpenInference) holding a JSON value (or JSON text)."""
    if value is None:
        return {}
    text = value if isinstance(value, str) else json_text(value)
    return {f"{direction}.value": text, f"{direction}.mime_type": "application/json"}


def json_text(value: Any) -> str:
    """A JSON value as compact text (an attribute's value): by orjson when it can (an int
    past 64 bits it cannot), else by the standard library; what is no JSON, as its repr."""
    if _orjson is not None:
        try:
            return str(_orjson.dumps(value).decode())
        except TypeError:  # an int past 64 bits, a NaN is fine: null
            pass
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON: say what it is rather than fail the export
        return repr(value)


_orjson: Any
try:  # orjson (the otel extra) writes JSON several times faster than the standard library
    import orjson as _orjson
except ImportError:  # pragma: no cover - the standard library's encoder
    _orjson = None
