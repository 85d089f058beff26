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
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from kassette._extras import requires
from kassette._llm_calls import TokenUsage

__all__ = ["call_costs", "column_costs", "unpriced_reason"]

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


def column_costs(
    providers: Sequence[str | None], models: Sequence[str | None], counts: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """`call_costs` of calls given column-wise: `counts` has a row per call of its `Counts`
    (every call has its input and output tokens and no usage problem), priced a model at a
    time; NaN where the cost is unknown. The same figures as `call_costs`, to the bit: the
    same products summed in the same order."""
    costs = np.full(len(models), np.nan)
    groups: dict[tuple[str | None, str], list[int]] = {}
    for row, (provider, model) in enumerate(zip(providers, models, strict=True)):
        if model is not None:
            groups.setdefault((provider, model), []).append(row)
    for (provider, model), found in groups.items():
        price = _pricing(provider, model)
        if price is None:
            continue
        rows = np.array(found, dtype=np.int64)
        mine = counts[rows]
        linear = (
            np.ones(len(rows), dtype=bool)
            if price.first_tier is None
            else mine[:, 0] < price.first_tier
        )
        total = np.zeros(int(linear.sum()))
        for kind, rate in enumerate(price.per_token):
            total = total + rate * mine[linear, kind].astype(np.float64)
        costs[rows[linear]] = total
        for row, usage in zip(rows[~linear].tolist(), mine[~linear].tolist(), strict=True):
            costs[row] = price(tuple(usage))
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


@dataclass
class _Price:
    """A model's price: `per_token` (a rate per token kind, `_KINDS`' order) below
    `first_tier` input tokens (None: no tier; 0: not linear, every usage is asked of the
    database through `exact`)."""

    per_token: list[float]
    first_tier: int | None
    exact: Callable[[Counts], Decimal]
    memo: dict[Counts, float] = field(default_factory=dict)

    def __call__(self, counts: Counts) -> float:
        if self.first_tier is None or counts[0] < self.first_tier:
            return sum(rate * count for rate, count in zip(self.per_token, counts, strict=True))
        if counts not in self.memo:
            self.memo[counts] = float(self.exact(counts))
        return self.memo[counts]


@functools.cache
def _pricing(provider: str | None, model: str) -> _Price | None:
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
    return _Price([float(rate) for rate in linear], first_tier, price_of)


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
