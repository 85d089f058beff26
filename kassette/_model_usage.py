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


def _counts(
    usage: dict[str, Any], keys: tuple[tuple[str, str] | None, ...]
) -> tuple[list[Any], list[str]]:
    """The counts at `keys` of `usage` ((details object or "" for `usage` itself, key) pairs;
    None: not reported), each value that is no count read as None and named in the problems."""
    found: list[Any] = []
    problems: list[str] = []
    for at in keys:
        if at is None:
            found.append(None)
            continue
        within, key = at
        value = usage[within].get(key) if within else usage.get(key)
        if value is None or (type(value) is int and 0 <= value <= MAX_COUNT):
            found.append(value)
            continue
        found.append(None)
        shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:21] + "..."
        negative = isinstance(value, int | float) and not isinstance(value, bool) and value < 0
        reason = "negative" if negative else "not a 64-bit count"
        name = f"{within}.{key}" if within else key
        problems.append(f"usage {name} is {shown}: {reason}, read as unknown")
    return found, problems


def openai_usage(usage: Any) -> TokenUsage:
    """Chat completions' `prompt_tokens`/`completion_tokens` or the Responses API's
    `input_tokens`/`output_tokens` (a key of null: not given), with their details."""
    if not isinstance(usage, dict):
        return TokenUsage()
    given_in = (
        "input_tokens_details" if usage.get("input_tokens_details") else "prompt_tokens_details"
    )
    taken_in = (
        "output_tokens_details"
        if usage.get("output_tokens_details")
        else "completion_tokens_details"
    )
    if not isinstance(usage.get(given_in), dict):
        given_in = ""  # no details object: no cached tokens reported
    if not isinstance(usage.get(taken_in), dict):
        taken_in = ""
    (given, taken, total, cached, written, reasoning), problems = _counts(
        usage,
        (
            ("", "input_tokens" if usage.get("input_tokens") is not None else "prompt_tokens"),
            (
                "",
                "output_tokens" if usage.get("output_tokens") is not None else "completion_tokens",
            ),
            ("", "total_tokens"),
            (given_in, "cached_tokens") if given_in else None,
            (given_in, "cache_write_tokens") if given_in else None,
            (taken_in, "reasoning_tokens") if taken_in else None,
        ),
    )
    if total is None:
        total = sum_counts(given, taken)
    return _checked(problems, given, taken, total, cached, written, reasoning)


def anthropic_usage(usage: Any) -> TokenUsage:
    """Anthropic's `input_tokens` leave out the cached ones: they are added back here."""
    if not isinstance(usage, dict):
        return TokenUsage()
    (read, written, given, taken), problems = _counts(
        usage,
        (
            ("", "cache_read_input_tokens"),
            ("", "cache_creation_input_tokens"),
            ("", "input_tokens"),
            ("", "output_tokens"),
        ),
    )
    if given is not None:
        given += (read or 0) + (written or 0)
    return _checked(problems, given, taken, sum_counts(given, taken), read, written, None)


def _checked(
    problems: list[str],
    given: int | None,
    taken: int | None,
    total: int | None,
    cached: int | None,
    written: int | None,
    reasoning: int | None,
) -> TokenUsage:
    """The usage, with the counts that contradict each other (or a sum past 64 bits) noted."""
    if given is not None and (cached or 0) + (written or 0) > given:
        both = (cached or 0) + (written or 0)
        problems.append(f"{both} cached input tokens but {given} input tokens in all")
    if taken is not None and reasoning is not None and reasoning > taken:
        problems.append(f"{reasoning} reasoning tokens but {taken} output tokens in all")
    if given is not None and given > MAX_COUNT:  # a sum of counts within range
        problems.append(f"input_tokens {given} is past 64 bits, read as unknown")
        given = None
    if total is not None and total > MAX_COUNT:
        problems.append(f"total_tokens {total} is past 64 bits, read as unknown")
        total = None
    return TokenUsage(given, taken, total, cached, written, reasoning, tuple(problems))


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
