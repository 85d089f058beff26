"""Hostile values in journaled model calls (issue 32, section 3, items 10, 11 and 13): a token
count past 64 bits or below zero, cached tokens past the input, half a usage, a stream item
without an index. Each is read as well as it can be, flagged in `llm_calls.notes`, never
priced, and the other calls and runs of the store are read as ever."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._llm_calls import read_llm_result
from tests.explore.test_llm_calls import chat, database_cost, journal, step
from tests.explore.test_llm_columns import one_by_one

GOOD_USAGE = {"prompt_tokens": 100, "completion_tokens": 10}


def store_with(bad: dict[str, Any]) -> MemoryStorage:
    """A store of a run with a good call, then `bad`, and a second run of one good call."""
    storage = MemoryStorage()
    good = step("good", chat("ok", "gpt-4o-mini", GOOD_USAGE))
    storage.append("hostile", journal([good, step("bad", bad)]), token=None)
    storage.append("fine", journal([good]), token=None)
    return storage


def read(storage: MemoryStorage) -> tuple[pd.DataFrame, pd.DataFrame]:
    journals = kx.load(storage)
    return journals.llm_calls.set_index(["run_id", "step_id"]), journals.runs.set_index("run_id")


GOOD_COST = database_cost("gpt-4o-mini", "openai", input_tokens=100, output_tokens=10)


def assert_rest_read(calls: pd.DataFrame, runs: pd.DataFrame) -> None:
    """The good calls are priced and their run totals right; the bad one's run cost unknown."""
    assert calls.loc[("hostile", "good"), "cost_usd"] == pytest.approx(GOOD_COST, rel=1e-9)
    assert pd.isna(calls.loc[("hostile", "good"), "notes"])
    assert runs.loc["fine", "cost_usd"] == pytest.approx(GOOD_COST, rel=1e-9)
    assert runs.loc["fine", "input_tokens"] == 100
    assert pd.isna(runs.loc["hostile", "cost_usd"])  # one call's cost unknown: the run's too


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens", "total_tokens"])
def test_a_count_past_64_bits_is_unknown_and_flagged_not_wrapped(field: str) -> None:
    """Item 10: was -9223372036854775808 tokens and $15 trillion in the runs frame, and an
    OverflowError from llm_calls for the whole store."""
    usage = {**GOOD_USAGE, "total_tokens": 110, field: 2**70}
    calls, runs = read(store_with(chat("big", "gpt-4o-mini", usage)))
    bad = calls.loc[("hostile", "bad")]
    column = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}.get(
        field, "total_tokens"
    )
    if field == "total_tokens":  # read as the sum of the two counts it should be
        assert bad["total_tokens"] == 110
    else:
        assert pd.isna(bad[column])
    assert f"usage {field} is {2**70}" in bad["notes"]
    assert "not a 64-bit count" in bad["notes"]
    assert pd.isna(bad["cost_usd"])  # a usage with a count that is none is not priced
    assert "cost unknown" in bad["notes"]
    assert_rest_read(calls, runs)
    # the run counts the tokens it knows; none is negative or wrapped around
    assert runs["input_tokens"].min() >= 0 and runs["output_tokens"].min() >= 0
    assert runs.loc["hostile", "input_tokens"] == 100 + (0 if field == "prompt_tokens" else 100)


def test_run_totals_past_64_bits_are_unknown_not_wrapped() -> None:
    """Each count fits in 64 bits, their sum does not: the run's total is <NA>, not negative."""
    near = 2**62
    usage = {"prompt_tokens": near, "completion_tokens": 1}
    storage = MemoryStorage()
    calls = [step(f"c{n}", chat("x", "my-local-llama", usage)) for n in range(3)]
    storage.append("huge", journal(calls), token=None)
    journals = kx.load(storage)
    assert journals.llm_calls["input_tokens"].tolist() == [near] * 3
    runs = journals.runs.set_index("run_id")
    assert pd.isna(runs.loc["huge", "input_tokens"])
    assert runs.loc["huge", "output_tokens"] == 3


@pytest.mark.parametrize(
    ("usage", "said"),
    [
        ({"prompt_tokens": -500, "completion_tokens": 10}, "usage prompt_tokens is -500: negative"),
        ({"prompt_tokens": 100, "completion_tokens": -7}, "usage completion_tokens is -7"),
        (
            {"prompt_tokens": 100, "completion_tokens": 10,
             "prompt_tokens_details": {"cached_tokens": 5000}},
            "5000 cached input tokens but 100 input tokens in all",
        ),
        (
            {"prompt_tokens": 100, "completion_tokens": 10,
             "prompt_tokens_details": {"cached_tokens": -50}},
            "prompt_tokens_details.cached_tokens is -50: negative",
        ),
        (
            {"prompt_tokens": 100, "completion_tokens": 10,
             "completion_tokens_details": {"reasoning_tokens": 900}},
            "900 reasoning tokens but 10 output tokens in all",
        ),
        ({"completion_tokens": 300}, "the usage reports no input token count"),
        ({"prompt_tokens": 300}, "the usage reports no output token count"),
    ],
)  # fmt: skip
def test_impossible_usage_costs_na_with_its_reason(usage: dict[str, Any], said: str) -> None:
    """Item 11: negative counts, more cached than input tokens and half a usage gave a
    negative cost, or one priced as if the missing half were 0."""
    calls, runs = read(store_with(chat("odd", "gpt-4o-mini", usage)))
    bad = calls.loc[("hostile", "bad")]
    assert pd.isna(bad["cost_usd"])
    assert said in bad["notes"] and "cost unknown" in bad["notes"]
    assert (calls["input_tokens"].dropna() >= 0).all()
    assert_rest_read(calls, runs)


def test_an_anthropic_negative_cache_count_is_not_added_to_the_input() -> None:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-3-5-haiku-latest",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": -90},
    }  # fmt: skip
    calls, runs = read(store_with(message))
    bad = calls.loc[("hostile", "bad")]
    assert bad["input_tokens"] == 100  # the negative cache count is not subtracted
    assert pd.isna(bad["cost_usd"])
    assert "cache_read_input_tokens is -90: negative" in bad["notes"]
    assert_rest_read(calls, runs)


def tool_stream(indexes: list[Any]) -> dict[str, Any]:
    """A chat completion stream whose tool-call deltas carry `indexes`."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini"}
    parts = ['{"city":', '"Paris"}']
    deltas = [
        {"index": index, "function": {"name": "weather"} if n == 0 else {}, "type": "function"}
        | {"function": {**({"name": "weather"} if n == 0 else {}), "arguments": parts[n % 2]}}
        for n, index in enumerate(indexes)
    ]
    chunks = [
        {**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]} for delta in deltas
    ]
    chunks.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks.append({**chunk, "choices": [], "usage": GOOD_USAGE})
    return {"stream": chunks}


def test_a_stream_tool_call_delta_with_index_null_is_read_and_flagged() -> None:
    """Item 13: `"index": null` beside a 0 raised TypeError for the whole store."""
    calls, runs = read(store_with(tool_stream([0, None])))
    bad = calls.loc[("hostile", "bad")]
    assert bad["tool_calls"] == '[{"name":"weather","arguments":{"city":"Paris"}}]'
    assert "a streamed tool call has index None: read as part of tool call 0" in bad["notes"]
    assert bad["finish_reason"] == "tool_calls"
    assert bad["cost_usd"] == pytest.approx(GOOD_COST, rel=1e-9)  # its usage is sound
    assert runs.loc["hostile", "llm_calls"] == 2
    assert runs.loc["fine", "cost_usd"] == pytest.approx(GOOD_COST, rel=1e-9)


def test_an_anthropic_stream_block_with_index_null_is_read_and_flagged() -> None:
    events = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
         "model": "claude-3-5-haiku-latest", "content": [],
         "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_delta", "index": None,
         "delta": {"type": "text_delta", "text": "b"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 2}},
    ]  # fmt: skip
    call = read_llm_result({"stream": events})
    assert call is not None
    assert call.text == "ab"
    assert call.problems == (
        "a streamed content block has index None: read as part of content block 0",
    )


def test_a_response_no_reader_foresaw_is_a_flagged_row_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last line of defence: whatever a reader raises for one call, that call's row says
    so and every other call is read."""
    from kassette import _llm_calls as model_calls

    real = model_calls._read_chat

    def brittle(result: Any) -> Any:
        if result.get("model") == "explodes":
            raise KeyError("boom")
        return real(result)

    monkeypatch.setitem(model_calls._READERS, ("openai", "chat.completions.create"), brittle)
    one_by_one(monkeypatch)  # the column reader reads no chat completion with a reader
    calls, runs = read(store_with(chat("x", "explodes", GOOD_USAGE)))
    bad = calls.loc[("hostile", "bad")]
    assert "the response could not be read (KeyError: 'boom')" in bad["notes"]
    assert pd.isna(bad["cost_usd"])
    assert calls.loc[("hostile", "good"), "response_text"] == "ok"
    assert runs.loc["hostile", "llm_calls"] == 2
