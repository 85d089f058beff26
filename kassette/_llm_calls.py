"""Model calls read as data: the one place that knows what a provider's response looks like.

A *model call* is a `step` entry whose `result` is a model provider's response as the API sent
it, with an optional `call` field `{"provider", "method", "request"}` next to it
(docs/journal-format.md). The response is one of:

- OpenAI: a chat completion (`"object": "chat.completion"`), a Responses API response
  (`"object": "response"`), or for a stream `{"stream": [...]}` of chat completion chunks or of
  Responses events (`response.created`, `response.output_text.delta`, ...,
  `response.completed`);
- Anthropic: a Messages API message (`"type": "message"`), or for a stream `{"stream": [...]}`
  of its server-sent events as JSON (`message_start`, `content_block_start`,
  `content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`).

`read_llm_call(entry)` (or `read_llm_result(result, call)`) says whether a step is a model
call and reads it into a `LLMCall`: provider, method, request, model, the assistant's text,
its tool calls, the finish reason and the token usage in one vocabulary for every provider, the
prompt, and a comparable form without the fields that differ between two identical answers.
An entry without `call` (older journals, upstream's) is a model call when its result has one
of the shapes above. `response_from_text(call, text)` writes the response of the same provider,
method and shape that carries another text: what a fork edit journals.

Standard library only: the core (fork edits) reads model calls too.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kassette._model_responses import anthropic_events as _anthropic_events
from kassette._model_responses import anthropic_message as _anthropic_message
from kassette._model_responses import as_dict as _dict
from kassette._model_responses import chat_chunks as _chat_chunks
from kassette._model_responses import chat_completion as _chat_completion
from kassette._model_responses import dicts as _dicts
from kassette._model_responses import index as _index
from kassette._model_responses import is_stream as _is_stream
from kassette._model_responses import openai_response as _openai_response
from kassette._model_responses import response_events as _response_events
from kassette._model_responses import template as _template
from kassette._model_streams import collapsed as _collapsed
from kassette._model_streams import expanded as _expanded
from kassette._model_usage import ENDED as _ENDED
from kassette._model_usage import MAX_COUNT as MAX_COUNT
from kassette._model_usage import TokenUsage
from kassette._model_usage import anthropic_usage as _anthropic_usage
from kassette._model_usage import chat_usage as _chat_usage
from kassette._model_usage import messages_usage as _messages_usage
from kassette._model_usage import openai_usage as _openai_usage
from kassette._model_usage import responses_usage as _responses_usage

__all__ = [
    "FINISH_REASONS",
    "OPAQUE_FIELDS",
    "PROVIDERS",
    "VOLATILE_FIELDS",
    "LLMCall",
    "TokenUsage",
    "describe_response",
    "finish_reason",
    "prompt_of",
    "read_llm_call",
    "read_llm_fields",
    "read_llm_result",
    "response_from_text",
    "response_method",
    "same_response_shape",
    "text_of_content",
    "tool_arguments",
    "without_fields",
]

PROVIDERS = ("openai", "anthropic")
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
"""The finish reasons every provider's own is mapped to (an unknown one is kept as sent)."""

VOLATILE_FIELDS = frozenset(
    {
        "id",
        "created",
        "created_at",
        "completed_at",
        "system_fingerprint",
        "usage",
        "service_tier",
        "sequence_number",
        "item_id",
        "call_id",
        "obfuscation",
        "durationMs",
        "duration_ms",
        "timings",
    }
)
"""Fields of a response that differ between two calls that gave the same answer: ids,
timestamps, the serving machine, usage, timings. `LLMCall.comparable()` leaves them out."""

# What each provider's finish reason means in `FINISH_REASONS`' words.
_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "max_output_tokens": "length",
}
_CHAT, _RESPONSES, _MESSAGES = "chat.completions.create", "responses.create", "messages.create"
# the SDKs' stream helpers: see `response_method`
_SHAPE_OF_METHOD = {"messages.stream": _MESSAGES, "chat.completions.stream": _CHAT}
_RESPONSE_NAMES = {
    ("openai", _CHAT): "OpenAI chat completion",
    ("openai", _RESPONSES): "OpenAI Responses API response",
    ("anthropic", _MESSAGES): "Anthropic message",
}
_ANTHROPIC_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
# a tool's arguments are the model's own data: never stripped as volatile
OPAQUE_FIELDS = frozenset({"input", "arguments", "partial_json"})


@dataclass(frozen=True)
class LLMCall:
    """A journaled model call, read: what was asked, of whom, and what came back.

    `provider` is `"openai"` or `"anthropic"`; `method` the API method
    (`chat.completions.create`, `chat.completions.stream`, `responses.create`,
    `messages.create`, `messages.stream`); `request` the request as sent when the entry records
    it (else None); `result` the response as journaled, a stream as its events (`{"stream":
    [event, ...]}`, written out from the journal's compact form); `stream` whether it is a
    recorded stream. The rest is read from the response when first asked for: `model`, `text`,
    `tool_calls`, `finish_reason`, `usage`, `prompt`.
    """

    provider: str
    method: str
    request: dict[str, Any] | None
    result: Any
    stream: bool
    shape: tuple[str, str] | None = field(default=None, repr=False, compare=False)
    """(provider, method) of the result's own shape; None for a result of no known shape."""

    @property
    def model(self) -> str | None:
        """The model the response names (else the request's)."""
        model = _stream_model(self.result["stream"]) if self.stream and self.shape else None
        model = model or _text(_dict(self.result).get("model"))
        if model is None and self.request is not None:
            return _text(self.request.get("model"))
        return model

    @property
    def text(self) -> str:
        """The assistant's text, joined: over the first choice, the output items, the text
        blocks or the stream's deltas."""
        return self._read.text

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls asked for: `[{"name", "arguments"}]`, arguments decoded when they
        are JSON."""
        return self._read.tool_calls

    @property
    def finish_reason(self) -> str | None:
        """One of `FINISH_REASONS`, or the provider's own word when it has no equivalent, None
        when not reported."""
        return self._read.finish_reason

    @property
    def usage(self) -> TokenUsage:
        """The token counts, in one vocabulary for every provider."""
        if self.shape is None or "_read" in self.__dict__:
            return self._read.usage  # read with the rest already
        return _USAGE_READERS[self.shape](self.result)

    @property
    def problems(self) -> tuple[str, ...]:
        """What in the response could only be read leniently (a stream item without an index,
        a token count that is no count), in words; empty when nothing."""
        return (*self._read.problems, *self.usage.problems)

    @property
    def prompt(self) -> str | None:
        """The text of the request's last user message (None without a request or one)."""
        return _prompt(self.request)

    def comparable(self) -> Any:
        """The response without `VOLATILE_FIELDS` (at any depth, but never inside a tool's
        arguments): two calls that gave the same answer compare equal."""
        return without_fields(self.result, VOLATILE_FIELDS)

    @functools.cached_property
    def _read(self) -> _Read:
        # the whole response read once, when a field that needs more than its usage is asked
        return _READERS[self.shape](self.result) if self.shape is not None else _Read()


def text_of_content(content: Any) -> str:
    """A message's content as text: a string, or its text parts (`text`, `input_text`,
    `output_text`) joined by newlines; the one reading of a request message's text."""
    return _content_text(content, "\n")


def tool_arguments(arguments: Any) -> Any:
    """A tool call's arguments: decoded when they are JSON text, else as given."""
    return _decoded(arguments)


def finish_reason(reason: Any) -> str | None:
    """A provider's finish reason (`finish_reason`, `stop_reason`) in `FINISH_REASONS`' words,
    an unknown one as sent, None when it is no text."""
    return _finish(reason)


def prompt_of(request: Mapping[str, Any] | None) -> str | None:
    """The text of the last user message of a chat, Responses or Messages request (None
    without a request or one): `LLMCall.prompt`."""
    return _prompt(request)


def read_llm_call(entry: Mapping[str, Any]) -> LLMCall | None:
    """The model call a journal entry records, or None when it is not one (not a plain `step`
    entry, or a step whose result is no provider's response and which has no `call`). A
    `kind` of null is none, as the runs and entries frames read it."""
    return _read_step(entry, _expanded)


def read_llm_fields(entry: Mapping[str, Any], text: str | None = None) -> LLMCall | None:
    """`read_llm_call(entry)` for reading the call's fields (its model, text, tool calls,
    usage, ...), which are the same, and not its `result`: a stream's runs of deltas are
    joined (`kassette._model_streams.collapsed`), not written out an event each. What
    reads a store's calls as data (`kassette.explore`) reads them so. `text`: the entry's
    JSON text, when the caller has it (a stream with no NUL in it has no mark to look for)."""
    nul_free = text is not None and "\\u0000" not in text
    return _read_step(entry, functools.partial(_collapsed, nul_free=nul_free))


def _read_step(entry: Mapping[str, Any], events: Callable[[Any], Any]) -> LLMCall | None:
    """A plain `step` entry's model call (`read_llm_result` with `events`), else None."""
    if entry.get("type") != "step" or entry.get("kind") not in (None, "step"):
        return None
    return read_llm_result(entry.get("result"), entry.get("call"), events=events)


def read_llm_result(
    result: Any, call: Any = None, *, events: Callable[[Any], Any] = _expanded
) -> LLMCall | None:
    """A step's `result` (and its `call` field, if any) read as a model call, or None.

    With a `call` naming a provider and a method, the step is a model call whatever its result
    holds; without one, the result's shape decides (see the module docstring). `events`
    writes out a stream from the journal's compact form.
    """
    result = events(result)
    shape = _shape(result)
    recorded = call if isinstance(call, dict) else {}  # JSON: dicts (abc checks cost more)
    provider, method = recorded.get("provider"), recorded.get("method")
    if isinstance(provider, str) and isinstance(method, str):
        if shape is not None and shape[0] != provider:
            shape = None  # the call's own word wins over a look-alike result
    elif shape is not None:
        provider, method = shape[0], shape[1]
    else:
        return None
    request = recorded.get("request")
    request = request if isinstance(request, dict) else None
    if shape is not None:
        stream = _is_stream(result)
    else:  # a result of no known shape: the request says whether a stream was asked for
        stream = method == "messages.stream" or (request or {}).get("stream") is True
    return LLMCall(provider, method, request, result, stream, shape)


def response_from_text(call: LLMCall, text: str) -> Any:
    """A well-formed response of `call`'s provider, method and shape (a stream for a recorded
    stream) that carries `text` as the whole answer: recorded model, finish reason `stop`, no
    tool calls, zero usage (no tokens were spent on it), a new id derived from the text, and
    the recorded response's other fields. The same text always gives the same response."""
    template = _template(call.result, call.provider)
    model = call.model or ""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
    if call.provider == "anthropic":
        message = _anthropic_message(template, model, digest, text)
        return {"stream": _anthropic_events(message, text)} if call.stream else message
    if _shape(call.result) == ("openai", _RESPONSES) or call.method == _RESPONSES:
        response = _openai_response(template, model, digest, text)
        return {"stream": _response_events(response, text)} if call.stream else response
    if call.stream:
        return {"stream": _chat_chunks(call.result, model, digest, text)}
    return _chat_completion(template, model, digest, text)


def response_method(method: str) -> str:
    """The method whose request and response `method` has: `messages.stream` sends the request
    of `messages.create(stream=True)` to its endpoint and records its events, and
    `chat.completions.stream` those of `chat.completions.create(stream=True)`; every other
    method is its own. The one rule for "a `messages.stream` call is a `messages.create`
    call": what an edit may record, and what a replayed call must match."""
    return _SHAPE_OF_METHOD.get(method, method)


def same_response_shape(call: LLMCall, result: Any) -> bool:
    """Whether `result` is a response of `call`'s provider and API, streamed as `call` was:
    one the code that made `call` can be given instead (a fork edit's whole response)."""
    result = _expanded(result)
    shape = _shape(result)
    method = response_method(call.method)
    return shape == (call.provider, method) and _is_stream(result) == call.stream


def describe_response(call: LLMCall) -> str:
    """What a response of `call`'s kind is called, for messages: `an OpenAI chat completion`,
    `a stream of Anthropic message events ({"stream": [...]})`, ..."""
    method = response_method(call.method)
    name = _RESPONSE_NAMES.get((call.provider, method), f"{call.provider} {method} response")
    if call.stream:
        return f'a stream of {name} events ({{"stream": [...]}})'
    return f"an {name}" if name[0] in "AEIOU" else f"a {name}"


# -- shapes: which provider and method a result looks like ---------------------------------


def _shape(result: Any) -> tuple[str, str] | None:
    """(provider, method) of a result with a provider's response shape, else None."""
    if not isinstance(result, dict):
        return None
    kind = result.get("object")
    if kind == "chat.completion":
        return "openai", _CHAT
    if kind == "response":
        return "openai", _RESPONSES
    if result.get("type") == "message" and result.get("role") == "assistant":
        return "anthropic", _MESSAGES
    if not _is_stream(result):
        return None
    items = result["stream"]
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    if all(item.get("object") == "chat.completion.chunk" for item in items):
        return "openai", _CHAT
    types = [item.get("type") for item in items]
    if not all(isinstance(kind, str) for kind in types):
        return None
    if all(kind.startswith("response.") or kind == "error" for kind in types):
        return "openai", _RESPONSES
    if "message_start" in types and all(kind in _ANTHROPIC_EVENTS for kind in types):
        return "anthropic", _MESSAGES
    return None


# -- reading each shape ----------------------------------------------------------------------


@dataclass
class _Read:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    problems: list[str] = field(default_factory=list)


def _read_chat(result: Any) -> _Read:
    if _is_stream(result):
        return _read_chat_stream(result["stream"])
    choices = result.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    message = _dict(choice.get("message"))
    calls = [_dict(c.get("function")) for c in _dicts(message.get("tool_calls"))]
    if isinstance(message.get("function_call"), dict):
        calls.append(message["function_call"])
    return _Read(
        text=_content_text(message.get("content"), ""),
        tool_calls=[_tool_call(c.get("name"), c.get("arguments")) for c in calls],
        finish_reason=_finish(choice.get("finish_reason")),
        usage=_openai_usage(result.get("usage")),
    )


def _read_chat_stream(chunks: list[dict[str, Any]]) -> _Read:
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, last, problems = None, 0, list[str]()
    for chunk in chunks:
        for choice in _dicts(chunk.get("choices")):
            if choice.get("index", 0) != 0:
                continue
            delta = _dict(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            deltas = _dicts(delta.get("tool_calls"))
            if isinstance(delta.get("function_call"), dict):
                deltas.append({"index": -1, "function": delta["function_call"]})
            for part in deltas:
                last = _index(part, last, problems, "tool call")
                slot = calls.setdefault(last, {"name": None, "arguments": ""})
                function = _dict(part.get("function"))
                slot["name"] = slot["name"] or function.get("name")
                if isinstance(function.get("arguments"), str):
                    slot["arguments"] += function["arguments"]
            finish = choice.get("finish_reason") or finish
    return _Read(
        text="".join(text),
        tool_calls=[_tool_call(c["name"], c["arguments"]) for _, c in sorted(calls.items())],
        finish_reason=_finish(finish),
        usage=_chat_usage({"stream": chunks}),
        problems=problems,
    )


def _read_responses(result: Any) -> _Read:
    if not _is_stream(result):
        return _read_response(result)
    events = result["stream"]
    ended = [
        e["response"]
        for e in events
        if e.get("type") in _ENDED and isinstance(e.get("response"), dict)
    ]
    if ended:
        return _read_response(ended[-1])
    started: dict[str, Any] = next(
        (e["response"] for e in events if isinstance(e.get("response"), dict)), {}
    )
    items = [e["item"] for e in events if e.get("type") == "response.output_item.done"]
    read = _read_response({**started, "output": _dicts(items)})
    # a stream cut short has no finished message items: its text is in the deltas
    read.text = "".join(
        e["delta"]
        for e in events
        if e.get("type") == "response.output_text.delta" and isinstance(e.get("delta"), str)
    )
    return read


def _read_response(response: dict[str, Any]) -> _Read:
    text: list[str] = []
    calls = []
    for item in _dicts(response.get("output")):
        if item.get("type") == "message":
            text += [
                part["text"]
                for part in _dicts(item.get("content"))
                if part.get("type") == "output_text" and isinstance(part.get("text"), str)
            ]
        elif item.get("type") == "function_call":
            calls.append(_tool_call(item.get("name"), item.get("arguments")))
    status = response.get("status")
    if status == "completed":
        finish: str | None = "tool_calls" if calls else "stop"
    elif status == "incomplete":
        finish = _finish(_dict(response.get("incomplete_details")).get("reason"))
    else:
        finish = None
    return _Read(
        text="".join(text),
        tool_calls=calls,
        finish_reason=finish,
        usage=_openai_usage(response.get("usage")),
    )


def _read_messages(result: Any) -> _Read:
    if not _is_stream(result):
        blocks = _dicts(result.get("content"))
        return _Read(
            text=_blocks_text(blocks),
            tool_calls=[
                _tool_call(b.get("name"), b.get("input"))
                for b in blocks
                if b.get("type") == "tool_use"
            ],
            finish_reason=_finish(result.get("stop_reason")),
            usage=_anthropic_usage(result.get("usage")),
        )
    message: dict[str, Any] = {}
    blocks_at: dict[int, dict[str, Any]] = {}
    stop, last, problems = None, 0, list[str]()
    for event in result["stream"]:
        kind = event.get("type")
        if kind == "message_start":
            message = _dict(event.get("message"))
        elif kind == "content_block_start":
            last = (
                at
                if type(at := event.get("index", 0)) is int
                else _index(event, last, problems, "content block")
            )
            blocks_at[last] = dict(_dict(event.get("content_block")))
        elif kind == "content_block_delta":
            last = (
                at
                if type(at := event.get("index", 0)) is int
                else _index(event, last, problems, "content block")
            )
            block = blocks_at.setdefault(last, {})
            delta = _dict(event.get("delta"))
            if isinstance(delta.get("text"), str):
                block["text"] = block.get("text", "") + delta["text"]
            if isinstance(delta.get("partial_json"), str):
                block["partial_json"] = block.get("partial_json", "") + delta["partial_json"]
        elif kind == "message_delta":
            stop = _dict(event.get("delta")).get("stop_reason") or stop
    blocks = [blocks_at[index] for index in sorted(blocks_at)]
    for block in blocks:
        if block.get("type") == "tool_use" and "partial_json" in block:
            block["input"] = _decoded(block.pop("partial_json") or "{}")
    read = _read_messages({**message, "content": blocks, "stop_reason": stop, "usage": None})
    read.usage = _messages_usage(result)
    read.problems = problems
    return read


_READERS = {
    ("openai", _CHAT): _read_chat,
    ("openai", _RESPONSES): _read_responses,
    ("anthropic", _MESSAGES): _read_messages,
}


def _stream_model(items: list[Any]) -> str | None:
    """The model a stream names: on its chat chunks, its Responses events' response, or its
    Anthropic `message_start`'s message."""
    for item in items:
        named = item.get("model") or _dict(item.get("response") or item.get("message")).get("model")
        if isinstance(named, str):
            return named
    return None


_USAGE_READERS = {
    ("openai", _CHAT): _chat_usage,
    ("openai", _RESPONSES): _responses_usage,
    ("anthropic", _MESSAGES): _messages_usage,
}


def _prompt(request: Mapping[str, Any] | None) -> str | None:
    """The text of the last user message of a chat, Responses or Messages request."""
    if request is None:
        return None
    messages = request.get("messages", request.get("input"))
    if isinstance(messages, str):
        return messages  # the Responses API's input given as one string
    for message in reversed(messages) if isinstance(messages, list) else ():
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"), "\n")
    return None


# -- small readers -------------------------------------------------------------------------


def without_fields(value: Any, fields: frozenset[str]) -> Any:
    """`value` without the keys in `fields`, at any depth but never inside `OPAQUE_FIELDS`
    (a tool's arguments are the model's own data)."""
    if isinstance(value, dict):
        return {
            key: item if key in OPAQUE_FIELDS else without_fields(item, fields)
            for key, item in value.items()
            if key not in fields
        }
    if isinstance(value, list):
        return [without_fields(item, fields) for item in value]
    return value


def _tool_call(name: Any, arguments: Any) -> dict[str, Any]:
    return {"name": _text(name), "arguments": _decoded(arguments)}


def _decoded(arguments: Any) -> Any:
    """A tool's arguments: decoded when they are JSON text, else as given."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _content_text(content: Any, joiner: str) -> str:
    """A message's content as text: a string, or its text parts (`text`, `input_text`,
    `output_text`) joined."""
    if isinstance(content, str):
        return content
    return _blocks_text(_dicts(content), joiner)


def _blocks_text(blocks: Iterable[dict[str, Any]], joiner: str = "") -> str:
    return joiner.join(
        block["text"]
        for block in blocks
        if block.get("type") in ("text", "input_text", "output_text")
        and isinstance(block.get("text"), str)
    )


def _finish(reason: Any) -> str | None:
    return _FINISH.get(reason, reason) if isinstance(reason, str) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
