"""Compare: several runs' step results side by side, aligned by step id.

Forks share their source's entries up to the fork point, so their steps line up by id; the
first step whose result differs (or that only some of the runs reached) is where the
branches diverge. Steps are ordered by the offset where they first appear in any of the runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kassette.codec import to_json
from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._read import unique_run_ids
from kassette.explore.frames import Journals

__all__ = ["compare"]

FIRST_DIVERGENCE = "first_divergence"


def compare(journals: Journals, run_ids: Iterable[str]) -> pd.DataFrame:
    """A frame indexed by `step_id` with one column per run holding that step's result as
    JSON text (missing where the run has no such step), and a boolean `first_divergence`
    column that is True on the first step where the runs differ. The step id is also in
    `frame.attrs["first_divergence"]` (None when the runs agree on every step)."""
    wanted = unique_run_ids(run_ids) or []
    if not wanted:
        raise InvalidArgumentError("compare needs at least one run id")
    known = set(journals.run_ids)
    for run_id in wanted:
        if run_id not in known:
            raise RunNotFoundError(f"run {run_id} is not in these journals", run_id=run_id)
    entries = journals.to_arrow("entries")
    steps = entries.filter(
        pc.and_(
            pc.is_in(entries.column("run_id"), pa.array(wanted, pa.string())),
            pc.equal(entries.column("type"), "step"),
        )
    ).select(["run_id", "offset", "step_id", "value"])
    results: dict[str, dict[str, Any]] = {run_id: {} for run_id in wanted}
    first_offset: dict[str, int] = {}
    for run_id, offset, step_id, value in zip(
        *(steps.column(name).to_pylist() for name in steps.column_names), strict=True
    ):
        if step_id is None or step_id in results[run_id]:
            continue  # the first record of a step id is authoritative
        results[run_id][step_id] = json.loads(value).get("result")
        first_offset[step_id] = min(offset, first_offset.get(step_id, offset))
    order = sorted(first_offset, key=lambda step_id: first_offset[step_id])
    columns: dict[str, list[Any]] = {
        run_id: [_text(results[run_id], step_id) for step_id in order] for run_id in wanted
    }
    divergent = next((s for s in order if not _agree(results, wanted, s)), None)
    columns[FIRST_DIVERGENCE] = [step_id == divergent for step_id in order]
    frame = pd.DataFrame(columns, index=pd.Index(order, name="step_id", dtype="str"))
    frame.attrs[FIRST_DIVERGENCE] = divergent
    return frame


_MISSING = object()


def _agree(results: dict[str, dict[str, Any]], run_ids: list[str], step_id: str) -> bool:
    values = [results[run_id].get(step_id, _MISSING) for run_id in run_ids]
    return all(value is not _MISSING and value == values[0] for value in values)


def _text(results: dict[str, Any], step_id: str) -> str | None:
    if step_id not in results:
        return None
    return to_json(results[step_id])
