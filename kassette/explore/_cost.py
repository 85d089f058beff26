"""What model calls cost, in US dollars, from `genai-prices`' maintained price database.

A call is priced from its provider, its model and its token usage (`TokenUsage`): input tokens
at the input rate, those read from or written to the provider's prompt cache at the cache
rates, reasoning tokens as the database prices them, output tokens at the output rate, at
today's prices. A model the database does not know, a call that reports no usage or only half
of it (input or output tokens alone), or usage that is no count or contradicts itself
(`TokenUsage.problems`: a negative count, more cached than input tokens) has no cost (None,
shown as `<NA>`), never 0 nor a negative sum; `unpriced_reason` says why.

Pricing one call through `genai_prices.calc_price` takes a fraction of a millisecond, too slow
for a hundred thousand calls, so each (provider, model) is looked up once: below the first
price tier (a price the database says changes past some number of input tokens) the price is
linear in the token counts, and its rate per token kind is read from the database's own
figure for a few usages; a call past a tier is priced by `calc_price` itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from kassette._extras import requires
from kassette._llm_calls import TokenUsage

__all__ = ["call_costs", "unpriced_reason"]

Counts = tuple[int, int, int, int, int]  # input, cache read, cache write, output, reasoning
_KINDS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "output_reasoning_tokens",
)
# a usage every token kind can grow from by one and stay well-formed (cached and reasoning
# tokens are parts of the input and output)
_BASE: Counts = (4, 1, 1, 2, 1)


def call_costs(calls: Sequence[tuple[str | None, str | None, TokenUsage]]) -> list[float | None]:
    """The cost in USD of each (provider, model, usage), None where it is unknown."""
    costs: list[float | None] = []
    for provider, model, usage in calls:
        # half a usage, or one that is no count, is no price (not one with the rest as 0)
        unknown = usage.input_tokens is None or usage.output_tokens is None or usage.problems
        if model is None or unknown:
            costs.append(None)
        else:
            price = _pricing(provider, model)
            costs.append(None if price is None else price(_counts(usage)))
    return costs


def unpriced_reason(provider: str | None, model: str | None, usage: TokenUsage) -> str | None:
    """Why `call_costs` gives that call no cost, in words (None when it has one)."""
    if model is None:
        return "cost unknown: the call names no model"
    if usage.problems:
        return "cost unknown: " + "; ".join(usage.problems)
    if usage.input_tokens is None and usage.output_tokens is None:
        return "cost unknown: the response reports no token usage"
    if usage.input_tokens is None or usage.output_tokens is None:
        missing = "input" if usage.input_tokens is None else "output"
        return f"cost unknown: the usage reports no {missing} token count"
    if _pricing(provider, model) is None:
        return f"cost unknown: genai-prices does not know {provider or 'the'} model {model!r}"
    return None


def _counts(usage: TokenUsage) -> Counts:
    return (
        usage.input_tokens or 0,
        usage.cached_input_tokens or 0,
        usage.cache_creation_input_tokens or 0,
        usage.output_tokens or 0,
        usage.reasoning_tokens or 0,
    )


@functools.cache
def _pricing(provider: str | None, model: str) -> Callable[[Counts], float] | None:
    """How to price a usage of `model` (None for a model the database does not know)."""
    price_of = functools.partial(_database_price, provider, model)
    try:
        base = price_of(_BASE)
    except LookupError:
        return None
    rates = []
    for kind in range(len(_KINDS)):
        grown = list(_BASE)
        grown[kind] += 1
        whole = {1: 0, 2: 0, 4: 3}.get(kind)  # a cached token is an input token too, ...
        if whole is not None:
            grown[whole] += 1
        rates.append(price_of((grown[0], grown[1], grown[2], grown[3], grown[4])) - base)
    # per token of each kind: an input token; a cache read's difference from an uncached
    # input token; a cache write's; an output token; a reasoning token's difference
    linear = [rates[0], rates[1] - rates[0], rates[2] - rates[0], rates[3], rates[4] - rates[3]]
    if _dot(linear, _BASE) != base:  # not linear after all: ask the database every time
        first_tier: int | None = 0
    else:
        first_tier = min(_tier_starts(provider, model), default=None)
    memo: dict[Counts, float] = {}
    per_token = [float(rate) for rate in linear]

    def price(counts: Counts) -> float:
        if first_tier is None or counts[0] < first_tier:
            return sum(rate * count for rate, count in zip(per_token, counts, strict=True))
        if counts not in memo:
            memo[counts] = float(price_of(counts))
        return memo[counts]

    return price


def _dot(rates: list[Decimal], counts: Counts) -> Decimal:
    return sum((rate * count for rate, count in zip(rates, counts, strict=True)), Decimal(0))


def _tier_starts(provider: str | None, model: str) -> list[int]:
    """The input token counts past which one of the model's prices changes."""
    from genai_prices.types import TieredPrices

    prices = _database_calculation(provider, model, (1, 0, 0, 0, 0)).model_price
    return [
        tier.start
        for price in vars(prices).values()
        if isinstance(price, TieredPrices)
        for tier in price.tiers
    ]


def _database_price(provider: str | None, model: str, counts: Counts) -> Decimal:
    """`genai_prices.calc_price`'s total for that usage (raises `LookupError` for a model or
    provider it does not know)."""
    return _database_calculation(provider, model, counts).total_price  # type: ignore[no-any-return]


def _database_calculation(provider: str | None, model: str, counts: Counts) -> Any:
    with requires("the cost of model calls"):
        from genai_prices import Usage, calc_price
    usage = Usage(**dict(zip(_KINDS, counts, strict=True)))
    return calc_price(usage, model, provider_id=provider)
