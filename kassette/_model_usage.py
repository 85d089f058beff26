"""Token usage in one vocabulary for every provider: what a model call's response reports,
read from OpenAI's and Anthropic's usage objects. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kassette._model_responses import as_dict, count


@dataclass(frozen=True)
class TokenUsage:
    """A model call's token counts in one vocabulary for every provider.

    `input_tokens` counts every input token, cached ones included (OpenAI's `prompt_tokens` or
    `input_tokens`; Anthropic's `input_tokens` plus its cache read and cache creation tokens);
    `cached_input_tokens` of them were read from the provider's prompt cache and
    `cache_creation_input_tokens` were written to it. `reasoning_tokens` are part of
    `output_tokens`. A count the response does not report is None.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_tokens: int | None = None


def openai_usage(usage: Any) -> TokenUsage:
    """Chat completions' `prompt_tokens`/`completion_tokens` or the Responses API's
    `input_tokens`/`output_tokens`, with their details."""
    if not isinstance(usage, dict):
        return TokenUsage()
    given = count(usage.get("input_tokens", usage.get("prompt_tokens")))
    taken = count(usage.get("output_tokens", usage.get("completion_tokens")))
    total = count(usage.get("total_tokens"))
    given_details = as_dict(usage.get("input_tokens_details") or usage.get("prompt_tokens_details"))
    taken_details = as_dict(
        usage.get("output_tokens_details") or usage.get("completion_tokens_details")
    )
    return TokenUsage(
        input_tokens=given,
        output_tokens=taken,
        total_tokens=total if total is not None else sum_counts(given, taken),
        cached_input_tokens=count(given_details.get("cached_tokens")),
        cache_creation_input_tokens=count(given_details.get("cache_write_tokens")),
        reasoning_tokens=count(taken_details.get("reasoning_tokens")),
    )


def anthropic_usage(usage: Any) -> TokenUsage:
    """Anthropic's `input_tokens` leave out the cached ones: they are added back here."""
    if not isinstance(usage, dict):
        return TokenUsage()
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens"))
    given = count(usage.get("input_tokens"))
    if given is not None:
        given += (read or 0) + (written or 0)
    taken = count(usage.get("output_tokens"))
    return TokenUsage(
        input_tokens=given,
        output_tokens=taken,
        total_tokens=sum_counts(given, taken),
        cached_input_tokens=read,
        cache_creation_input_tokens=written,
    )


def sum_counts(first: int | None, second: int | None) -> int | None:
    return first + second if first is not None and second is not None else None
