"""Token usage in one vocabulary for every provider: what a model call's response reports,
read from OpenAI's and Anthropic's usage objects. Standard library only.

A count is a whole number from 0 to 2**63 - 1 (what a 64-bit column holds); any other value a
response gives for it (negative, past 64 bits, a float, text) is read as not reported, and
`TokenUsage.problems` says so, as it says when the counts contradict each other (more cached
than input tokens, more reasoning than output tokens). One hostile response is read as well
as it can be, flagged, and never breaks a reader of the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kassette._model_responses import as_dict, is_stream

MAX_COUNT = 2**63 - 1  # the largest count an int64 column holds
# the Responses stream events that carry the response as it ended
ENDED = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True)
class TokenUsage:
    """A model call's token counts in one vocabulary for every provider.

    `input_tokens` counts every input token, cached ones included (OpenAI's `prompt_tokens` or
    `input_tokens`; Anthropic's `input_tokens` plus its cache read and cache creation tokens);
    `cached_input_tokens` of them were read from the provider's prompt cache and
    `cache_creation_input_tokens` were written to it. `reasoning_tokens` are part of
    `output_tokens`. A count the response does not report is None, as is one it reports as
    no count can be (negative, past 64 bits, not a whole number): `problems` names each such
    count, and counts that contradict each other, in words (empty when there is none).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    problems: tuple[str, ...] = field(default=(), compare=False)


class _Counts:
    """Reads a usage object's counts, noting every value that is no count."""

    def __init__(self, usage: dict[str, Any]) -> None:
        self.usage = usage
        self.problems: list[str] = []

    def get(self, key: str, within: dict[str, Any] | None = None, name: str = "") -> int | None:
        value = (self.usage if within is None else within).get(key)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
            return value
        shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:21] + "..."
        reason = "negative" if _is_number(value) and value < 0 else "not a 64-bit count"
        self.problems.append(f"usage {name or key} is {shown}: {reason}, read as unknown")
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def openai_usage(usage: Any) -> TokenUsage:
    """Chat completions' `prompt_tokens`/`completion_tokens` or the Responses API's
    `input_tokens`/`output_tokens`, with their details."""
    if not isinstance(usage, dict):
        return TokenUsage()
    counts = _Counts(usage)
    given = counts.get("input_tokens" if "input_tokens" in usage else "prompt_tokens")
    taken = counts.get("output_tokens" if "output_tokens" in usage else "completion_tokens")
    total = counts.get("total_tokens")
    in_key = (
        "input_tokens_details" if usage.get("input_tokens_details") else "prompt_tokens_details"
    )
    out_key = (
        "output_tokens_details"
        if usage.get("output_tokens_details")
        else "completion_tokens_details"
    )
    given_details, taken_details = as_dict(usage.get(in_key)), as_dict(usage.get(out_key))
    return _checked(
        counts,
        input_tokens=given,
        output_tokens=taken,
        total_tokens=total if total is not None else sum_counts(given, taken),
        cached_input_tokens=counts.get("cached_tokens", given_details, f"{in_key}.cached_tokens"),
        cache_creation_input_tokens=counts.get(
            "cache_write_tokens", given_details, f"{in_key}.cache_write_tokens"
        ),
        reasoning_tokens=counts.get(
            "reasoning_tokens", taken_details, f"{out_key}.reasoning_tokens"
        ),
    )


def anthropic_usage(usage: Any) -> TokenUsage:
    """Anthropic's `input_tokens` leave out the cached ones: they are added back here."""
    if not isinstance(usage, dict):
        return TokenUsage()
    counts = _Counts(usage)
    read = counts.get("cache_read_input_tokens")
    written = counts.get("cache_creation_input_tokens")
    given = counts.get("input_tokens")
    if given is not None:
        given += (read or 0) + (written or 0)
    taken = counts.get("output_tokens")
    return _checked(
        counts,
        input_tokens=given,
        output_tokens=taken,
        total_tokens=sum_counts(given, taken),
        cached_input_tokens=read,
        cache_creation_input_tokens=written,
    )


def _checked(counts: _Counts, **read: int | None) -> TokenUsage:
    """The usage, with the counts that contradict each other (or a sum past 64 bits) noted."""
    problems = counts.problems
    given, taken = read["input_tokens"], read["output_tokens"]
    cached = (read["cached_input_tokens"] or 0) + (read.get("cache_creation_input_tokens") or 0)
    if given is not None and cached > given:
        problems.append(f"{cached} cached input tokens but {given} input tokens in all")
    reasoning = read.get("reasoning_tokens")
    if taken is not None and reasoning is not None and reasoning > taken:
        problems.append(f"{reasoning} reasoning tokens but {taken} output tokens in all")
    for name in ("input_tokens", "total_tokens"):
        value = read[name]
        if value is not None and value > MAX_COUNT:  # a sum of counts within range
            problems.append(f"{name} {value} is past 64 bits, read as unknown")
            read[name] = None
    return TokenUsage(**read, problems=tuple(problems))


def sum_counts(first: int | None, second: int | None) -> int | None:
    return first + second if first is not None and second is not None else None


def chat_usage(result: Any) -> TokenUsage:
    """A chat completion's usage; a stream's is on its last chunk that has one (when asked for
    with `stream_options={"include_usage": True}`)."""
    if not is_stream(result):
        return openai_usage(result.get("usage"))
    chunks = result["stream"]
    return openai_usage(next((c["usage"] for c in reversed(chunks) if c.get("usage")), None))


def responses_usage(result: Any) -> TokenUsage:
    """A Responses API response's usage; a stream's is its final response's."""
    if not is_stream(result):
        return openai_usage(result.get("usage"))
    ended = [e.get("response") for e in result["stream"] if e.get("type") in ENDED]
    return openai_usage(as_dict(ended[-1]).get("usage") if ended else None)


def messages_usage(result: Any) -> TokenUsage:
    """An Anthropic message's usage; a stream's is `message_start`'s, updated by each
    `message_delta`'s (its final output count, and any count it repeats)."""
    if not is_stream(result):
        return anthropic_usage(result.get("usage"))
    usage: dict[str, Any] = {}
    for event in result["stream"]:
        kind = event.get("type")
        if kind == "message_start":
            usage.update(as_dict(as_dict(event.get("message")).get("usage")))
        elif kind == "message_delta":
            usage.update({k: v for k, v in as_dict(event.get("usage")).items() if v is not None})
    return anthropic_usage(usage or None)
