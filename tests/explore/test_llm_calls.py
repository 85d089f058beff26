"""`Journals.llm_calls` as a researcher reads it: provider, request, prompt, response text, tool
calls, finish reason and cost (from genai-prices), per call, per run and per branch."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
from genai_prices import Usage, calc_price

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from kassette.core import fork_run

REQUEST = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
    ],
    "temperature": 0.7,
}


def chat(text: str, model: str, usage: dict[str, Any], **choice: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": text, **choice.pop("message", {})}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", **choice}],
        "usage": usage,
    }


def openai_call(request: dict[str, Any]) -> dict[str, Any]:
    return {"provider": "openai", "method": "chat.completions.create", "request": request}


MINI_USAGE = {
    "prompt_tokens": 2000,
    "completion_tokens": 300,
    "total_tokens": 2300,
    "prompt_tokens_details": {"cached_tokens": 1500},
}
HAIKU = "claude-3-5-haiku-20241022"
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": HAIKU,
    "content": [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
    },
}
MESSAGE_STREAM = {
    "stream": [
        {
            "type": "message_start",
            "message": {
                **MESSAGE,
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 30, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Oui"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
}
ANTHROPIC_REQUEST = {
    "model": HAIKU,
    "max_tokens": 100,
    "system": "You are terse.",
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
}


def journal(steps: list[dict[str, Any]], start: float = 1.767e9) -> bytes:
    lines = [{"type": "start", "metadata": {}}]
    lines += [{"type": "step", "durationMs": 800.0, **step} for step in steps]
    return b"".join(
        encode(
            {
                "type": line["type"],
                "session": 1,
                "offset": number,
                "timestamp": format_timestamp(start + number),
                **{k: v for k, v in line.items() if k != "type"},
            }
        )
        for number, line in enumerate(lines)
    )


def step(step_id: str, result: Any, call: dict[str, Any] | None = None) -> dict[str, Any]:
    entry = {"stepId": step_id, "name": step_id, "result": result}
    return {**entry, "call": call} if call is not None else entry


def database_cost(model: str, provider: str, **usage: int) -> float:
    """genai-prices' own figure for that usage."""
    return float(calc_price(Usage(**usage), model, provider_id=provider).total_price)


@pytest.fixture
def storage() -> MemoryStorage:
    storage = MemoryStorage()
    steps = [
        step("ask", chat("Paris.", "gpt-4o-mini", MINI_USAGE), openai_call(REQUEST)),
        step(
            "tool",
            MESSAGE,
            {"provider": "anthropic", "method": "messages.create", "request": ANTHROPIC_REQUEST},
        ),
        step("stream", MESSAGE_STREAM),  # no `call`: a model call by its shape
        step("plain", {"object": "list", "note": "not a model call"}),
    ]
    storage.append("calls", journal(steps), token=None)
    return storage


def test_llm_calls_reads_provider_prompt_text_tool_calls_and_finish(
    storage: MemoryStorage,
) -> None:
    calls = kx.load(storage).llm_calls.set_index("step_id")
    assert calls.index.tolist() == ["ask", "tool", "stream"]
    assert calls["provider"].tolist() == ["openai", "anthropic", "anthropic"]
    assert calls["model"].tolist() == ["gpt-4o-mini", HAIKU, HAIKU]
    assert calls["prompt"].tolist()[:2] == ["Capital of France?", "Weather in Paris?"]
    assert pd.isna(calls.loc["stream", "prompt"])  # no request recorded
    assert calls["response_text"].tolist() == ["Paris.", "Checking.", "Oui"]
    assert calls["finish_reason"].tolist() == ["stop", "tool_calls", "stop"]
    assert json.loads(calls.loc["tool", "tool_calls"]) == [
        {"name": "weather", "arguments": {"city": "Paris"}}
    ]
    assert json.loads(calls.loc["ask", "tool_calls"]) == []
    assert json.loads(calls.loc["ask", "request"]) == REQUEST
    assert pd.isna(calls.loc["stream", "request"])
    # Anthropic's input counts the cached tokens too
    assert calls["input_tokens"].tolist() == [2000, 1300, 30]
    assert calls["output_tokens"].tolist() == [300, 40, 9]


def test_cost_is_genai_prices_own_figure_with_cached_tokens_priced_as_such(
    storage: MemoryStorage,
) -> None:
    calls = kx.load(storage).llm_calls.set_index("step_id")
    assert str(calls["cost_usd"].dtype) == "Float64"
    mini = database_cost(
        "gpt-4o-mini", "openai", input_tokens=2000, cache_read_tokens=1500, output_tokens=300
    )
    haiku = database_cost(
        HAIKU,
        "anthropic",
        input_tokens=1300,
        cache_read_tokens=1000,
        cache_write_tokens=200,
        output_tokens=40,
    )
    streamed = database_cost(HAIKU, "anthropic", input_tokens=30, output_tokens=9)
    assert calls["cost_usd"].tolist() == pytest.approx([mini, haiku, streamed], rel=1e-9)
    # the same tokens, none of them cached, cost more
    uncached = database_cost("gpt-4o-mini", "openai", input_tokens=2000, output_tokens=300)
    assert mini < uncached
    runs = kx.load(storage).runs.set_index("run_id")
    assert runs.loc["calls", "cost_usd"] == pytest.approx(mini + haiku + streamed, rel=1e-9)


def test_reasoning_tokens_are_priced_as_the_database_prices_them() -> None:
    storage = MemoryStorage()
    usage = {
        "input_tokens": 500,
        "output_tokens": 2000,
        "total_tokens": 2500,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 1800},
    }
    response = {"id": "r", "object": "response", "model": "o3-mini", "status": "completed",
                "output": [], "usage": usage}  # fmt: skip
    storage.append("reasoning", journal([step("think", response)]), token=None)
    cost = kx.load(storage).llm_calls["cost_usd"].tolist()
    expected = database_cost(
        "o3-mini", "openai", input_tokens=500, output_tokens=2000, output_reasoning_tokens=1800
    )
    assert cost == pytest.approx([expected], rel=1e-9)


def test_an_unknown_model_costs_na_never_zero_and_so_does_its_run() -> None:
    storage = MemoryStorage()
    known = chat("a", "gpt-4o-mini", {"prompt_tokens": 10, "completion_tokens": 2})
    unknown = chat("b", "my-local-llama", {"prompt_tokens": 10, "completion_tokens": 2})
    no_usage = {**chat("c", "gpt-4o-mini", {}), "usage": None}
    storage.append(
        "mixed", journal([step("a", known), step("b", unknown), step("c", no_usage)]), token=None
    )
    storage.append("plain", journal([step("x", {"k": 1})]), token=None)
    journals = kx.load(storage)
    cost = journals.llm_calls.set_index("step_id")["cost_usd"]
    assert cost["a"] > 0
    assert pd.isna(cost["b"]) and pd.isna(cost["c"])
    runs = journals.runs.set_index("run_id")
    assert pd.isna(runs.loc["mixed", "cost_usd"])  # a sum with an unknown part is unknown
    assert runs.loc["plain", "cost_usd"] == 0  # no model call: nothing spent
    assert journals.to_arrow("runs").column("cost_usd").null_count == 1


def test_a_fork_s_copied_calls_cost_only_for_its_source(storage: MemoryStorage) -> None:
    fork_run(storage, "calls", offset=3, new_run_id="fork")  # copies `ask` and `tool`
    cheap = chat("Lyon.", "gpt-4o-mini", {"prompt_tokens": 100, "completion_tokens": 10})
    fork_run(storage, "calls", offset=2, new_run_id="own")
    snapshot = storage.read("own")
    assert snapshot is not None
    line = {"type": "step", "session": 2, "offset": 3, "timestamp": format_timestamp(1.77e9),
            **step("again", cheap, openai_call(REQUEST))}  # fmt: skip
    storage.append("own", encode(line), token=snapshot.token)
    journals = kx.load(storage)
    calls = journals.llm_calls
    assert calls[calls["run_id"] == "fork"]["copied"].tolist() == [True, True]
    runs = journals.runs.set_index("run_id")
    source = calls[calls["run_id"] == "calls"]["cost_usd"].sum()
    assert runs.loc["calls", "cost_usd"] == pytest.approx(source, rel=1e-12)
    assert runs.loc["fork", "cost_usd"] == 0  # every call it holds is its source's
    own = database_cost("gpt-4o-mini", "openai", input_tokens=100, output_tokens=10)
    assert runs.loc["own", "cost_usd"] == pytest.approx(own, rel=1e-9)
    total = journals.sql("select sum(cost_usd) as spent from runs")["spent"].iloc[0]
    assert total == pytest.approx(source + own, rel=1e-9)  # each call counted once


def test_past_a_price_tier_the_database_prices_each_call() -> None:
    """Models whose price changes past some number of input tokens are priced right on both
    sides of it (the linear shortcut holds only below the first tier)."""
    storage = MemoryStorage()
    model = "claude-sonnet-4-5"
    small = dict(MESSAGE, model=model, usage={"input_tokens": 1000, "output_tokens": 100})
    large = dict(MESSAGE, model=model, usage={"input_tokens": 300_000, "output_tokens": 100})
    storage.append("tiers", journal([step("small", small), step("large", large)]), token=None)
    cost = kx.load(storage).llm_calls["cost_usd"].tolist()
    expected = [
        database_cost(model, "anthropic", input_tokens=1000, output_tokens=100),
        database_cost(model, "anthropic", input_tokens=300_000, output_tokens=100),
    ]
    assert cost == pytest.approx(expected, rel=1e-9)
    base_rate = database_cost(model, "anthropic", input_tokens=1000) / 1000
    assert cost[1] > 1.5 * 300_000 * base_rate  # past the tier every token costs more
