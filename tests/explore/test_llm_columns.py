"""The column reader of model calls (`kassette.explore._llm_columns`) gives the rows the reader
of one call at a time gives, for every call: the common ones it reads, and the odd ones it
leaves to the other (a field of another type, a key twice, a usage to flag, a tool call's
object arguments, a `call` key it cannot place). Each call below is read both ways, in one
store, and the two `llm_calls` tables and run totals must be equal, cell for cell."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from kassette.explore import _llm, _llm_columns
from kassette.explore._llm import _candidates, llm_calls, run_totals
from kassette.explore._llm_columns import read_columns

ANSWER = "Surface the timeout, add a bounded retry with jitter, and log the request id. "
REQUEST = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You fix flaky tests."},
        {"role": "user", "content": "Ticket 7: the retry wrapper — naïve “quotes” 🚀"},
    ],
    "temperature": 0.3,
}
CHAT_USAGE = {
    "prompt_tokens": 300,
    "completion_tokens": 40,
    "total_tokens": 340,
    "prompt_tokens_details": {"cached_tokens": 128, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 12},
}


def chat(**changes: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": ANSWER, "refusal": None}
    message.update(changes.pop("message", {}))
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
    choice.update(changes.pop("choice", {}))
    result = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-4o-mini",
        "choices": [choice],
        "usage": CHAT_USAGE,
    }
    result.update(changes)
    return result


def claude(**changes: Any) -> dict[str, Any]:
    result = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-5-haiku-20241022",
        "content": [{"type": "text", "text": ANSWER}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 40, "output_tokens": 30, "cache_read_input_tokens": 900},
    }
    result.update(changes)
    return result


OPENAI = {"provider": "openai", "method": "chat.completions.create", "request": REQUEST}
ANTHROPIC = {
    "provider": "anthropic",
    "method": "messages.create",
    "request": {
        "model": "claude-3-5-haiku-20241022",
        "max_tokens": 512,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fix the wrapper."}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "read", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}],
            },
        ],
    },
}
TOOL_CALLS = [
    {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
    },
    {"id": "c2", "type": "function", "function": {"name": "grep", "arguments": "not json {"}},
]
STREAM_EVENTS = [
    {"type": "message_start", "message": {**claude(content=[], stop_reason=None)}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "there"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
    {"type": "message_stop"},
]

# (result, call) pairs, and payloads written as raw JSON text (what no writer of ours makes)
CALLS: list[tuple[Any, Any]] = [
    (chat(), OPENAI),
    (chat(), None),
    (chat(model="gpt-4.1"), OPENAI),
    (chat(model="our-own-model"), OPENAI),
    (chat(model=None), OPENAI),
    (chat(model=7), OPENAI),
    (
        chat(
            message={"content": None, "tool_calls": TOOL_CALLS},
            choice={"finish_reason": "tool_calls"},
        ),
        OPENAI,
    ),
    (chat(message={"content": None, "function_call": {"name": "f", "arguments": "{}"}}), OPENAI),
    (chat(message={"tool_calls": [None, {"id": "x", "function": None}]}), OPENAI),
    (chat(message={"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}), OPENAI),
    (chat(message={"content": [{"type": "text", "text": "parts"}]}), OPENAI),
    (chat(message={"content": ""}), OPENAI),
    (chat(choices=[]), OPENAI),
    (chat(choices=[None]), OPENAI),
    (chat(choices=None), OPENAI),
    (chat(choice={"finish_reason": "length"}), OPENAI),
    (chat(choice={"finish_reason": "a_new_reason"}), OPENAI),
    (chat(choice={"finish_reason": None}), OPENAI),
    (chat(usage=None), OPENAI),
    (chat(usage={"prompt_tokens": 10}), OPENAI),
    (chat(usage={"prompt_tokens": 10, "completion_tokens": 5}), OPENAI),
    (chat(usage={**CHAT_USAGE, "prompt_tokens": -1}), OPENAI),
    (chat(usage={**CHAT_USAGE, "completion_tokens": 2.5}), OPENAI),
    (chat(usage={**CHAT_USAGE, "completion_tokens": "40"}), OPENAI),
    (chat(usage={**CHAT_USAGE, "total_tokens": 2**63}), OPENAI),
    (chat(usage={**CHAT_USAGE, "prompt_tokens": 2**62 + 1}), OPENAI),
    (chat(usage={**CHAT_USAGE, "prompt_tokens": 100}), OPENAI),  # 128 cached of 100
    (chat(usage={**CHAT_USAGE, "completion_tokens": 5, "total_tokens": None}), OPENAI),
    (chat(usage={"input_tokens": 10, "output_tokens": 3}), OPENAI),
    (chat(usage={**CHAT_USAGE, "input_tokens": None, "output_tokens": None}), OPENAI),
    (chat(usage={**CHAT_USAGE, "input_tokens_details": {"cached_tokens": 1}}), OPENAI),
    (chat(usage={**CHAT_USAGE, "prompt_tokens_details": None}), OPENAI),
    (chat(usage={**CHAT_USAGE, "prompt_tokens_details": 3}), OPENAI),
    (chat(usage={**CHAT_USAGE, "prompt_tokens_details": {"cache_write_tokens": 50}}), OPENAI),
    (chat(usage="n/a"), OPENAI),
    (chat(), {**OPENAI, "provider": "anthropic"}),
    (chat(), {"provider": "openai", "method": "chat.completions.create"}),
    (chat(), {**OPENAI, "request": "not an object"}),
    (chat(), {**OPENAI, "request": None}),
    (chat(), {**OPENAI, "request": {"model": "gpt-4o-mini", "input": "one string"}}),
    (
        chat(),
        {
            **OPENAI,
            "request": {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "a"},
                            {"type": "input_text", "text": "b"},
                        ],
                    }
                ]
            },
        },
    ),
    (chat(), {"provider": 5, "method": "chat.completions.create"}),
    (chat(message={"content": 'a "call": {"provider": "x"} in the text \u0000 and a NUL'}), OPENAI),
    (chat(object="chat.completion.chunk"), OPENAI),
    (claude(), ANTHROPIC),
    (claude(), None),
    (claude(model="claude-unknown-7"), ANTHROPIC),
    (claude(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]), ANTHROPIC),
    (
        claude(content=[{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "a"}]),
        ANTHROPIC,
    ),
    (
        claude(
            content=[
                {"type": "text", "text": "a"},
                {"type": "tool_use", "id": "t", "name": "read", "input": {"path": "x"}},
            ],
            stop_reason="tool_use",
        ),
        ANTHROPIC,
    ),
    (claude(content=[]), ANTHROPIC),
    (claude(content=None), ANTHROPIC),
    (claude(content=[None, {"type": "text", "text": "a"}]), ANTHROPIC),
    (claude(content=[{"type": "text", "text": None}]), ANTHROPIC),
    (claude(stop_reason="max_tokens"), ANTHROPIC),
    (claude(usage={"input_tokens": 40}), ANTHROPIC),
    (claude(usage={"input_tokens": -4, "output_tokens": 3}), ANTHROPIC),
    (
        claude(usage={"input_tokens": 2**62, "output_tokens": 1, "cache_read_input_tokens": 2**62}),
        ANTHROPIC,
    ),
    (
        claude(usage={"input_tokens": 4, "output_tokens": 3, "cache_creation_input_tokens": 9}),
        ANTHROPIC,
    ),
    (claude(object="thing"), ANTHROPIC),
    (claude(role="user"), ANTHROPIC),
    (claude(role="user"), None),
    (claude(), OPENAI),
    ({"stream": STREAM_EVENTS}, ANTHROPIC),
    ({"text": "no response at all"}, OPENAI),
]
CALL = '{"provider":"openai","method":"chat.completions.create","request":{"model":"%s"}}'


def raw(result: Any, tail: str) -> str:
    return '{"stepId":"s","name":"s","result":' + json.dumps(result) + tail + "}"


RAW = [  # payloads as text: NaN, spacing, a key twice, a `kind`
    raw(chat(), ',"call":' + (CALL % "m")[:-2] + ',"temperature":NaN}}'),
    raw(chat(), ',"call" : ' + CALL % "m"),
    raw(chat(), ',"call":' + CALL % "a" + ',"call":' + CALL % "b"),
    raw(chat(id={"call": json.loads(CALL % "nested")}), ',"call" :' + CALL % "top"),
    raw(chat(), ',"kind":null'),
    raw(chat(), ',"kind":"step"'),
    raw(chat(), ',"kind":"child"'),
    '{"stepId":"s","name":"s","result":' + json.dumps(chat(model="a"))[:-1] + ',"model":"b"}}',
]


def payload_lines() -> list[str]:
    lines = []
    for number, (result, call) in enumerate(CALLS):
        payload: dict[str, Any] = {"stepId": f"call#{number}", "name": "call", "result": result}
        if call is not None:
            payload["call"] = call
        payload["durationMs"] = 12.5 + number
        lines.append(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
    return lines + RAW


def journal(lines: list[str], run: int = 0) -> bytes:
    """A run of a start and steps of these payloads (their JSON text, as given)."""
    stamp = format_timestamp(1767225600 + run)
    start = {"type": "start", "session": 1, "offset": 0, "timestamp": stamp, "metadata": run}
    text = [encode(start).decode()]
    for offset, line in enumerate(lines, start=1):
        stamp = format_timestamp(1767225600 + run + offset)
        envelope = f'{{"type":"step","session":1,"offset":{offset},"timestamp":"{stamp}"'
        text.append(envelope + "," + line[1:] + "\n")
    return "".join(text).encode()


def store(copies: int = 3) -> MemoryStorage:
    """Runs of every payload above, each after a start, a few times over."""
    storage = MemoryStorage()
    for run in range(copies):
        storage.append(f"run-{run}", journal(payload_lines(), run), token=None)
    return storage


@pytest.fixture(autouse=True)
def bisect_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every odd call above isolated, however many: the store is odd by design."""
    monkeypatch.setattr(_llm_columns, "REFUSED_PARSES", 1000)


@pytest.fixture(scope="module")
def entries() -> pa.Table:
    return kx.load(store()).to_arrow("entries")


def one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `llm_calls` and `run_totals` read every call one at a time."""
    monkeypatch.setattr(_llm, "_read_columns", read_columns_with_nothing)


def test_the_column_reader_takes_the_common_calls(entries: pa.Table) -> None:
    """Not a vacuous comparison: most calls above go through the column reader."""
    values = _candidates(entries).column("value").combine_chunks()
    taken = len(read_columns(values).rows)
    assert taken >= 3 * 20
    assert taken < len(values)  # and some are left to the reader of one call


def test_both_readers_give_the_same_llm_calls(
    entries: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = llm_calls(entries)
    one_by_one(monkeypatch)
    slow = llm_calls(entries)
    assert fast.schema == slow.schema
    assert fast.num_rows == slow.num_rows > 3 * len(CALLS) - 3 * 10
    for name in fast.column_names:
        for row, (a, b) in enumerate(
            zip(fast.column(name).to_pylist(), slow.column(name).to_pylist(), strict=True)
        ):
            same = a == b or (
                isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
            )
            assert same, (name, row, fast.column("step_id")[row].as_py(), a, b)


def test_both_readers_give_the_same_run_totals(
    entries: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ids = sorted(set(entries.column("run_id").to_pylist()))
    fast = run_totals(entries, run_ids)
    one_by_one(monkeypatch)
    slow = run_totals(entries, run_ids)
    assert np.array_equal(fast[0], slow[0]) and fast[1:3] == slow[1:3]
    assert np.array_equal(fast[3], slow[3], equal_nan=True)


def test_a_forks_copied_calls_are_not_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_totals counts a run's own calls: the copied rows are left out by both readers."""
    entries = kx.load(store(copies=1)).to_arrow("entries")
    copied = pc.less(entries.column("offset"), 10)
    entries = entries.set_column(entries.schema.get_field_index("copied"), "copied", copied)
    fast = run_totals(entries, ["run-0"])
    one_by_one(monkeypatch)
    assert fast[0].tolist() == run_totals(entries, ["run-0"])[0].tolist()
    assert fast[0][0] < llm_calls(entries).num_rows


@pytest.mark.parametrize("line", RAW, ids=range(len(RAW)))
def test_each_odd_payload_alone_reads_alike(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Among calls the column reader takes (so no part of it is left to the other reader
    whole), each odd payload gives the row the reader of one call gives."""
    good = json.dumps({"stepId": "g", "name": "g", "result": chat(), "call": OPENAI})
    storage = MemoryStorage()
    lines = [good] * 6 + [line] + [good] * 6
    storage.append("r", journal(lines), token=None)
    entries = kx.load(storage).to_arrow("entries")
    fast = llm_calls(entries).to_pylist()
    one_by_one(monkeypatch)
    assert fast == llm_calls(entries).to_pylist()


def test_a_nested_look_alike_of_the_call_is_not_taken_for_it() -> None:
    """A response holding a `call` object of its own, beside the step's `call` written with
    a space before its colon: the request is the step's."""
    storage = MemoryStorage()
    storage.append("r", journal([RAW[3]]), token=None)
    [row] = llm_calls(kx.load(storage).to_arrow("entries")).to_pylist()
    assert json.loads(row["request"]) == {"model": "top"}


def read_columns_with_nothing(values: pa.Array, *, texts: bool) -> Any:
    return read_columns(values.slice(0, 0), texts=texts)


def test_calls_read_a_part_at_a_time_read_alike(
    entries: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts of 7 calls (of each reader) give the tables one part gives."""
    whole, totals = llm_calls(entries), run_totals(entries, ["run-0", "run-1", "run-2"])
    monkeypatch.setattr(_llm_columns, "PART_ROWS", 7)
    monkeypatch.setattr(_llm, "PART_ROWS", 7)
    assert llm_calls(entries).equals(whole)
    again = run_totals(entries, ["run-0", "run-1", "run-2"])
    assert np.array_equal(again[0], totals[0]) and again[1:3] == totals[1:3]
    assert np.array_equal(again[3], totals[3], equal_nan=True)


def test_many_odd_calls_cost_a_few_parses_then_go_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store where every fourth call is one Arrow refuses: the parts it refuses cost at most
    `REFUSED_PARSES` parses of the whole, and every row is still read alike."""
    monkeypatch.setattr(_llm_columns, "REFUSED_PARSES", 2)
    good = json.dumps({"stepId": "g", "name": "g", "result": chat(), "call": OPENAI})
    odd = json.dumps({"stepId": "o", "name": "o", "result": chat(model=7), "call": OPENAI})
    storage = MemoryStorage()
    storage.append("r", journal(([good] * 3 + [odd]) * 64), token=None)
    entries = kx.load(storage).to_arrow("entries")
    values = _candidates(entries).column("value").combine_chunks()
    parsed: list[int] = []
    real = _llm_columns.pa_json.read_json

    def counted(source: Any, **options: Any) -> Any:
        parsed.append(source.size())
        return real(source, **options)

    monkeypatch.setattr(_llm_columns.pa_json, "read_json", counted)
    read_columns(values)
    whole = parsed[0]
    assert sum(parsed) <= (1 + 2) * whole + len(parsed)  # newline rounding
    fast = llm_calls(entries)
    one_by_one(monkeypatch)
    assert fast.equals(llm_calls(entries))
