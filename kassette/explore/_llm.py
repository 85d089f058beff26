"""Model calls: the steps whose result is a model API's response, read as data.

A model call is a step whose result is a provider's response (OpenAI chat completions or
Responses API, Anthropic messages, or a stream of either), with its request in the entry's
`call` field when the integration recorded it; `kassette._llm_calls` reads one. Any step with
such a result counts, whatever its name (so calls journaled by other means count too). A
regular expression over the JSON text finds the few candidates; only those are parsed. Each
call's cost comes from `genai-prices` (`kassette.explore._cost`).

A call read leniently says so in its `notes` (a token count that is no count, a stream item
without an index, why its cost is unknown, an error reading it): one hostile response is read
as well as it can be and never keeps the rest of a store from being read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kassette._codec import to_json
from kassette._llm_calls import MAX_COUNT, LLMCall, TokenUsage, read_llm_call
from kassette.explore._cost import call_costs, unpriced_reason

__all__ = ["LLM_CALL_SCHEMA", "llm_calls", "run_totals"]

LLM_CALL_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("step_id", pa.string()),
        pa.field("provider", pa.string()),
        pa.field("model", pa.string()),
        pa.field("prompt", pa.large_string()),
        pa.field("response_text", pa.large_string()),
        pa.field("tool_calls", pa.large_string()),  # JSON: [{"name", "arguments"}, ...]
        pa.field("finish_reason", pa.string()),
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("total_tokens", pa.int64()),
        pa.field("cost_usd", pa.float64()),
        pa.field("duration_ms", pa.float64()),
        pa.field("copied", pa.bool_(), nullable=False),
        pa.field("request", pa.large_string()),  # JSON: the request as sent, when recorded
        # what was read leniently, or why a value is unknown ("; "-separated), else null
        pa.field("notes", pa.large_string()),
    ]
)
# what only a model call's JSON holds: its `call` field, or a response's or stream's marks
_CANDIDATE = (
    r'"call":\s*\{|"object":\s*"(?:chat\.completion(?:\.chunk)?|response)"'
    r'|"type":\s*"(?:response\.completed|message|message_start)"'
)


def llm_calls(entries: pa.Table) -> pa.Table:
    """One row per step of `entries` that is a model call (`LLM_CALL_SCHEMA`)."""
    rows = []
    for (run_id, offset, step_id, duration, copied), call in _model_calls(
        entries, ("run_id", "offset", "step_id", "duration_ms", "copied")
    ):
        try:
            row = _row(call)
        except Exception as exc:  # a response no reader foresaw: its row says so, the rest read
            row = _unread(call, exc)
        rows.append((run_id, offset, step_id, *row[:10], duration, bool(copied), *row[10:]))
    columns = [list(column) for column in zip(*rows, strict=True)] or [
        [] for _ in LLM_CALL_SCHEMA.names
    ]
    at = LLM_CALL_SCHEMA.get_field_index
    priced = list(zip(*(columns[at(n)] for n in ("provider", "model", "cost_usd")), strict=True))
    columns[at("cost_usd")] = call_costs(priced)
    columns[at("notes")] = [
        _notes(problems, unpriced_reason(*call) if cost is None else None)
        for problems, call, cost in zip(
            columns[at("notes")], priced, columns[at("cost_usd")], strict=True
        )
    ]
    arrays = [pa.array(column, f.type) for column, f in zip(columns, LLM_CALL_SCHEMA, strict=True)]
    return pa.Table.from_arrays(arrays, schema=LLM_CALL_SCHEMA)


def _row(call: LLMCall) -> tuple[Any, ...]:
    """A call's columns from `provider` to `cost_usd` (its usage, priced later with the
    others), then `request` and its problems."""
    text = call.text  # reads the whole response once, its usage with it
    usage = call.usage
    return (
        call.provider,
        call.model,
        call.prompt,
        text,
        to_json(call.tool_calls) if call.tool_calls else "[]",
        call.finish_reason,
        usage.input_tokens,
        usage.output_tokens,
        usage.total_tokens,
        usage,
        None if call.request is None else _request_json(call.request),
        call.problems,
    )


def _unread(call: LLMCall, exc: Exception) -> tuple[Any, ...]:
    """The columns of a call whose response could not be read: what is known of it."""
    problem = f"the response could not be read ({type(exc).__name__}: {exc})"
    return (
        call.provider,
        None,
        None,
        None,
        "[]",
        None,
        None,
        None,
        None,
        TokenUsage(),
        None,
        (problem,),
    )


def _request_json(request: Any) -> str | None:
    try:
        return to_json(request)
    except ValueError:  # a foreign writer's NaN: as JSON spells it
        return json.dumps(request, ensure_ascii=False, separators=(",", ":"))


def _notes(problems: tuple[str, ...], unpriced: str | None) -> str | None:
    # a usage problem is said once: in the reason the cost is unknown, when it is that
    found = [p for p in problems if unpriced is None or p not in unpriced]
    found += [unpriced] if unpriced else []
    return "; ".join(dict.fromkeys(found)) or None


def run_totals(entries: pa.Table, run_ids: list[str]) -> tuple[Any, ...]:
    """Per run of `run_ids`, over its own model calls (not a fork's copied ones): how many,
    input tokens, output tokens (None for a sum past 64 bits), and cost in USD (NaN when a
    call's cost is unknown). Reads only what those need of each call: its model and usage,
    not its text. A call whose usage cannot be read counts, with no tokens and no cost."""
    index = {run_id: number for number, run_id in enumerate(run_ids)}
    own = entries.filter(pc.invert(entries.column("copied")))
    size = len(run_ids)
    rows, priced = [], []
    given, taken = [0] * size, [0] * size  # Python's integers: a sum cannot wrap around
    for (run_id,), call in _model_calls(own, ("run_id",)):
        row = index[run_id]
        try:
            usage, model = call.usage, call.model
        except Exception:  # a response no reader foresaw: llm_calls' notes say what
            usage, model = TokenUsage(problems=("unreadable",)), None
        rows.append(row)
        given[row] += usage.input_tokens or 0
        taken[row] += usage.output_tokens or 0
        priced.append((call.provider, model, usage))
    spent = np.array(call_costs(priced), dtype=np.float64)  # None (unknown) becomes NaN
    where = np.array(rows, dtype=np.int64)
    # a NaN among a run's costs makes its sum NaN: one unknown cost, the run's cost unknown
    return (
        np.bincount(where, minlength=size).astype(np.int64),
        [None if n > MAX_COUNT else n for n in given],
        [None if n > MAX_COUNT else n for n in taken],
        np.bincount(where, weights=spent, minlength=size).astype(np.float64),
    )


def _model_calls(
    entries: pa.Table, names: tuple[str, ...]
) -> Iterator[tuple[tuple[Any, ...], LLMCall]]:
    """The columns `names` and the model call of every step entry that is one: a regular
    expression picks the candidates, and only those are parsed."""
    if not entries.num_rows:
        return
    is_candidate = pc.and_(
        pc.equal(entries.column("type"), "step"),
        pc.match_substring_regex(entries.column("value"), _CANDIDATE),
    )
    steps = entries.filter(is_candidate)
    columns = [steps.column(name).to_pylist() for name in (*names, "value")]
    for *fields, value in zip(*columns, strict=True):
        try:
            payload = json.loads(value)
        except ValueError:
            continue
        call = read_llm_call({**payload, "type": "step"}) if isinstance(payload, dict) else None
        if call is not None:
            yield tuple(fields), call
