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
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kassette._codec import to_json
from kassette._llm_calls import MAX_COUNT, LLMCall, TokenUsage, read_llm_fields
from kassette.explore._cost import call_costs, column_costs, unpriced_reason
from kassette.explore._llm_columns import PART_ROWS, Columns, read_columns, recorded_request

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
    steps = _candidates(entries)
    values = steps.column("value").combine_chunks()
    read = _read_columns(values, texts=True)
    rows = []
    order = []
    names = ("run_id", "offset", "step_id", "duration_ms", "copied")
    for row, (run_id, offset, step_id, duration, copied), call, value in _model_calls(
        steps, names, _others(len(steps), read.rows)
    ):
        try:
            found = _row(call, value)
        except Exception as exc:  # a response no reader foresaw: its row says so, the rest read
            found = _unread(call, exc)
        rows.append((run_id, offset, step_id, *found[:10], duration, bool(copied), *found[10:]))
        order.append(row)
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
    one_by_one = pa.Table.from_arrays(arrays, schema=LLM_CALL_SCHEMA)
    table = pa.concat_tables([_column_table(steps, read), one_by_one])
    where = np.argsort(np.concatenate([read.rows, np.array(order, dtype=np.int64)]), kind="stable")
    return table.take(pa.array(where))


def _column_table(steps: pa.Table, read: Columns) -> pa.Table:
    """The `LLM_CALL_SCHEMA` rows of the calls `read_columns` read."""
    taken = steps.take(pa.array(read.rows))
    providers, models = read.arrays["provider"].to_pylist(), read.arrays["model"].to_pylist()
    costs = column_costs(providers, models, read.counts)
    costs[~read.priced] = np.nan
    unknown = np.flatnonzero(np.isnan(costs)).tolist()
    given, taken_tokens = read.arrays["input_tokens"], read.arrays["output_tokens"]
    notes: list[str | None] = [None] * len(costs)
    for row in unknown:  # few: why each of these costs is unknown
        usage = TokenUsage(given[row].as_py(), taken_tokens[row].as_py())
        notes[row] = unpriced_reason(providers[row], models[row], usage)
    found = {
        **read.arrays,
        **{name: taken.column(name) for name in ("run_id", "offset", "step_id", "duration_ms")},
        "copied": taken.column("copied"),
        "cost_usd": pa.array(costs, from_pandas=True),
        "notes": pa.array(notes, pa.large_string()),
    }
    arrays = [found[name] for name in LLM_CALL_SCHEMA.names]
    return pa.Table.from_arrays(arrays, schema=LLM_CALL_SCHEMA)


def _row(call: LLMCall, value: str) -> tuple[Any, ...]:
    """A call's columns from `provider` to `cost_usd` (its usage, priced later with the
    others), then `request` (its text as recorded, when `recorded_request` finds it in the
    step's JSON text `value`) and its problems."""
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
        None if call.request is None else _request_json(call.request, value),
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


def _request_json(request: dict[str, Any], value: str) -> str | None:
    recorded = recorded_request(value)
    if recorded is not None and recorded[2] == request:
        return recorded[3]
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
    steps = _candidates(entries.filter(pc.invert(entries.column("copied"))))
    read = _read_columns(steps.column("value").combine_chunks(), texts=False)
    size = len(run_ids)
    owners = pc.index_in(
        steps.column("run_id").take(pa.array(read.rows)), pa.array(run_ids, pa.string())
    )
    rows = owners.to_numpy(zero_copy_only=False).astype(np.int64).tolist()
    given = _sums(rows, read.arrays["input_tokens"], size)
    taken = _sums(rows, read.arrays["output_tokens"], size)
    models = read.arrays["model"].to_pylist()
    spent = column_costs(read.arrays["provider"].to_pylist(), models, read.counts)
    spent[~read.priced] = np.nan
    costs: list[Any] = spent.tolist()
    priced = []
    for _, (run_id,), call, _ in _model_calls(steps, ("run_id",), _others(len(steps), read.rows)):
        row = index[run_id]
        try:
            usage, model = call.usage, call.model
        except Exception:  # a response no reader foresaw: llm_calls' notes say what
            usage, model = TokenUsage(problems=("unreadable",)), None
        rows.append(row)
        given[row] += usage.input_tokens or 0
        taken[row] += usage.output_tokens or 0
        priced.append((call.provider, model, usage))
    costs += call_costs(priced)
    spent_all = np.array(costs, dtype=np.float64)  # None (unknown) becomes NaN
    where = np.array(rows, dtype=np.int64)
    # a NaN among a run's costs makes its sum NaN: one unknown cost, the run's cost unknown
    return (
        np.bincount(where, minlength=size).astype(np.int64),
        [None if n > MAX_COUNT else n for n in given],
        [None if n > MAX_COUNT else n for n in taken],
        np.bincount(where, weights=spent_all, minlength=size).astype(np.float64),
    )


def _sums(rows: list[int], counts: pa.Array, size: int) -> list[int]:
    """Per run, the sum of `counts` (null: 0) of the calls in `rows`, as Python integers:
    a sum cannot wrap around."""
    values = pc.fill_null(counts, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    where = np.array(rows, dtype=np.int64)
    roughly = np.bincount(where, weights=values.astype(np.float64), minlength=size)
    if not len(roughly) or roughly.max() < 2**62:
        exact = np.zeros(size, dtype=np.int64)
        np.add.at(exact, where, values)
        return [int(total) for total in exact.tolist()]
    sums = [0] * size
    for row, value in zip(rows, values.tolist(), strict=True):
        sums[row] += value
    return sums


def _read_columns(values: pa.Array, *, texts: bool) -> Columns:
    """`read_columns`, or, should it fail on values no one foresaw, nothing: the reader of
    one call then reads them all (slower, never wrong). tests/explore/test_llm_columns.py
    calls `read_columns` itself, so a failure there is a test's."""
    try:
        return read_columns(values, texts=texts)
    except Exception:
        return read_columns(values.slice(0, 0), texts=texts)


def _candidates(entries: pa.Table) -> pa.Table:
    """The step entries a regular expression finds may be model calls."""
    if not entries.num_rows:
        return entries
    return entries.filter(
        pc.and_(
            pc.equal(entries.column("type"), "step"),
            pc.match_substring_regex(entries.column("value"), _CANDIDATE),
        )
    )


def _others(size: int, read: npt.NDArray[np.int64]) -> list[int]:
    """The rows of `size` that are not in `read`."""
    left = np.ones(size, dtype=bool)
    left[read] = False
    return np.flatnonzero(left).tolist()


def _model_calls(
    steps: pa.Table, names: tuple[str, ...], rows: list[int]
) -> Iterator[tuple[int, tuple[Any, ...], LLMCall, str]]:
    """For each of `rows` of `steps` that is a model call: its row, its columns `names`, the
    call, read by `kassette._llm_calls`, and its JSON text."""
    for at in range(0, len(rows), PART_ROWS):  # a part's values in Python at a time
        part = rows[at : at + PART_ROWS]
        taken = steps.take(pa.array(part, pa.int64()))
        columns = [taken.column(name).to_pylist() for name in (*names, "value")]
        for row, (*fields, value) in zip(part, zip(*columns, strict=True), strict=True):
            try:
                payload = json.loads(value)
            except ValueError:
                continue
            call = (
                read_llm_fields({**payload, "type": "step"}, value)
                if isinstance(payload, dict)
                else None
            )
            if call is not None:
                yield row, tuple(fields), call, value
