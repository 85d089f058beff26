"""Model calls: the steps whose result is a model API's response, with their token counts.

`kassette.integrations.openai` journals each call as a step whose result is the JSON the API
sent: a chat completion (`"object": "chat.completion"`), a Responses API response
(`"object": "response"`), or for a stream `{"stream": [chunk, ...]}` (chat completion chunks,
the last one carrying `usage` when asked for; or Responses events, `response.completed`
carrying the response). Any step with such a result counts, whatever its name (so calls
journaled by other means count too). A regular expression over the JSON text finds the few
candidates; only those are parsed.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["LLM_CALL_SCHEMA", "llm_calls", "token_totals"]

LLM_CALL_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("step_id", pa.string()),
        pa.field("model", pa.string()),
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("total_tokens", pa.int64()),
        pa.field("duration_ms", pa.float64()),
        pa.field("copied", pa.bool_(), nullable=False),
    ]
)
_CANDIDATE = (
    r'"object":\s*"(?:chat\.completion(?:\.chunk)?|response)"|"type":\s*"response\.completed"'
)


def llm_calls(entries: pa.Table) -> pa.Table:
    """One row per step of `entries` whose result is a model API response (`LLM_CALL_SCHEMA`)."""
    if not entries.num_rows:
        return LLM_CALL_SCHEMA.empty_table()
    is_candidate = pc.and_(
        pc.equal(entries.column("type"), "step"),
        pc.match_substring_regex(entries.column("value"), _CANDIDATE),
    )
    steps = entries.filter(is_candidate)
    columns: dict[str, list[Any]] = {name: [] for name in LLM_CALL_SCHEMA.names}
    names = ("run_id", "offset", "step_id", "duration_ms", "copied", "value")
    for run_id, offset, step_id, duration, copied, value in zip(
        *(steps.column(name).to_pylist() for name in names), strict=True
    ):
        try:
            result = json.loads(value).get("result")
        except ValueError:
            continue
        call = _call(result)
        if call is None:
            continue
        model, usage = call
        tokens = _tokens(usage)
        for name, item in (
            ("run_id", run_id),
            ("offset", offset),
            ("step_id", step_id),
            ("model", model),
            ("input_tokens", tokens[0]),
            ("output_tokens", tokens[1]),
            ("total_tokens", tokens[2]),
            ("duration_ms", duration),
            ("copied", bool(copied)),
        ):
            columns[name].append(item)
    return pa.table(columns, schema=LLM_CALL_SCHEMA)


def token_totals(calls: pa.Table, run_ids: list[str]) -> tuple[np.ndarray, ...]:
    """Per run of `run_ids`: its own model calls (not a fork's copied ones), input tokens and
    output tokens."""
    index = {run_id: number for number, run_id in enumerate(run_ids)}
    totals = np.zeros((3, len(run_ids)), dtype=np.int64)
    own = calls.filter(pc.invert(calls.column("copied")))
    for run_id, given, taken in zip(
        *(own.column(name).to_pylist() for name in ("run_id", "input_tokens", "output_tokens")),
        strict=True,
    ):
        row = index[run_id]
        totals[:, row] += (1, given or 0, taken or 0)
    return totals[0], totals[1], totals[2]


def _call(result: Any) -> tuple[str | None, Any] | None:
    """(model, usage) of a recorded response or stream, or None for any other result."""
    if not isinstance(result, dict):
        return None
    kind = result.get("object")
    if kind in ("chat.completion", "response"):
        return _text(result.get("model")), result.get("usage")
    stream = result.get("stream")
    if set(result) != {"stream"} or not isinstance(stream, list) or not stream:
        return None
    chunks = [chunk for chunk in stream if isinstance(chunk, dict)]
    if chunks and all(chunk.get("object") == "chat.completion.chunk" for chunk in chunks):
        usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
        return _text(chunks[0].get("model")), usage
    done = [c.get("response") for c in chunks if c.get("type") == "response.completed"]
    if done and isinstance(done[-1], dict):
        return _text(done[-1].get("model")), done[-1].get("usage")
    return None


def _tokens(usage: Any) -> tuple[int | None, int | None, int | None]:
    """(input, output, total) tokens from either API's usage object."""
    if not isinstance(usage, dict):
        return None, None, None
    given = _count(usage.get("input_tokens", usage.get("prompt_tokens")))
    taken = _count(usage.get("output_tokens", usage.get("completion_tokens")))
    total = _count(usage.get("total_tokens"))
    if total is None and given is not None and taken is not None:
        total = given + taken
    return given, taken, total


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
