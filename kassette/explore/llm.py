"""Model calls: the steps whose result is a model API's response, read as data.

A model call is a step whose result is a provider's response (OpenAI chat completions or
Responses API, Anthropic messages, or a stream of either), with its request in the entry's
`call` field when the integration recorded it; `kassette.model_calls` reads one. Any step with
such a result counts, whatever its name (so calls journaled by other means count too). A
regular expression over the JSON text finds the few candidates; only those are parsed. Each
call's cost comes from `genai-prices` (`kassette.explore._cost`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kassette.codec import to_json
from kassette.explore._cost import call_costs
from kassette.model_calls import read_model_call

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
    ]
)
# what only a model call's JSON holds: its `call` field, or a response's or stream's marks
_CANDIDATE = (
    r'"call":\s*\{|"object":\s*"(?:chat\.completion(?:\.chunk)?|response)"'
    r'|"type":\s*"(?:response\.completed|message|message_start)"'
)


def llm_calls(entries: pa.Table) -> pa.Table:
    """One row per step of `entries` that is a model call (`LLM_CALL_SCHEMA`)."""
    if not entries.num_rows:
        return LLM_CALL_SCHEMA.empty_table()
    is_candidate = pc.and_(
        pc.equal(entries.column("type"), "step"),
        pc.match_substring_regex(entries.column("value"), _CANDIDATE),
    )
    steps = entries.filter(is_candidate)
    rows: list[tuple[Any, ...]] = []
    names = ("run_id", "offset", "step_id", "duration_ms", "copied", "value")
    for run_id, offset, step_id, duration, copied, value in zip(
        *(steps.column(name).to_pylist() for name in names), strict=True
    ):
        try:
            payload = json.loads(value)
        except ValueError:
            continue
        call = read_model_call({**payload, "type": "step"}) if isinstance(payload, dict) else None
        if call is None:
            continue
        usage = call.usage
        rows.append(
            (
                run_id,
                offset,
                step_id,
                call.provider,
                call.model,
                call.prompt,
                call.text,
                to_json(call.tool_calls),
                call.finish_reason,
                usage.input_tokens,
                usage.output_tokens,
                usage.total_tokens,
                usage,
                duration,
                bool(copied),
                None if call.request is None else to_json(call.request),
            )
        )
    columns = [list(column) for column in zip(*rows, strict=True)] or [
        [] for _ in LLM_CALL_SCHEMA.names
    ]
    at = LLM_CALL_SCHEMA.get_field_index
    pricing = zip(
        columns[at("provider")], columns[at("model")], columns[at("cost_usd")], strict=True
    )
    columns[at("cost_usd")] = call_costs(list(pricing))
    return pa.Table.from_arrays(
        [
            pa.array(column, field.type)
            for column, field in zip(columns, LLM_CALL_SCHEMA, strict=True)
        ],
        schema=LLM_CALL_SCHEMA,
    )


def run_totals(calls: pa.Table, run_ids: list[str]) -> tuple[np.ndarray, ...]:
    """Per run of `run_ids`, over its own model calls (not a fork's copied ones): how many,
    input tokens, output tokens, and cost in USD (NaN when a call's cost is unknown)."""
    index = {run_id: number for number, run_id in enumerate(run_ids)}
    totals = np.zeros((3, len(run_ids)), dtype=np.int64)
    cost = np.zeros(len(run_ids), dtype=np.float64)
    own = calls.filter(pc.invert(calls.column("copied")))
    names = ("run_id", "input_tokens", "output_tokens", "cost_usd")
    for run_id, given, taken, spent in zip(
        *(own.column(name).to_pylist() for name in names), strict=True
    ):
        row = index[run_id]
        totals[:, row] += (1, given or 0, taken or 0)
        cost[row] += np.nan if spent is None else spent  # one unknown cost: the run's unknown
    return totals[0], totals[1], totals[2], cost
