"""Compare: several runs' step results side by side, aligned by step id.

Forks share their source's entries up to the fork point, so their steps line up by id; the
first step whose result differs (or that only some of the runs reached) is where the
branches diverge. Steps are ordered by the offset where they first appear in any of the runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kassette.codec import to_json
from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._read import unique_run_ids
from kassette.explore.frames import Journals

__all__ = ["FIRST_DIVERGENCE", "compare", "first_divergence", "step_results"]

FIRST_DIVERGENCE = "first_divergence"


def compare(
    journals: Journals, run_ids: Iterable[str], *, values: Literal["json", "python"] = "json"
) -> pd.DataFrame:
    """A frame indexed by `step_id` with one column per run holding that step's result (as
    JSON text, or with `values="python"` as the decoded value; missing where the run has no
    such step), and a boolean `first_divergence` column that is True on the first step where
    the runs differ. The step id is also in `frame.attrs["first_divergence"]` (None when the
    runs agree on every step)."""
    if values not in ("json", "python"):
        raise InvalidArgumentError(f"values must be 'json' or 'python', not {values!r}")
    wanted, order, results = step_results(journals, run_ids)
    cell = _text if values == "json" else _value
    columns: dict[str, list[Any]] = {
        run_id: [cell(results[run_id], step_id) for step_id in order] for run_id in wanted
    }
    divergent = first_divergence(results, wanted, order)
    columns[FIRST_DIVERGENCE] = [step_id == divergent for step_id in order]
    frame = pd.DataFrame(columns, index=pd.Index(order, name="step_id", dtype="str"))
    if values == "python":
        frame[wanted] = frame[wanted].astype(object)
    frame.attrs[FIRST_DIVERGENCE] = divergent
    return frame


def step_results(
    journals: Journals, run_ids: Iterable[str]
) -> tuple[list[str], list[str], dict[str, dict[str, Any]]]:
    """The run ids (without repeats), the step ids in order of first offset, and each run's
    decoded step results by step id."""
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
    return wanted, order, results


def first_divergence(
    results: dict[str, dict[str, Any]], run_ids: list[str], order: list[str]
) -> str | None:
    """The first step (in `order`) whose results differ, or that only some runs have."""
    return next((s for s in order if not _agree(results, run_ids, s)), None)


_MISSING = object()


def _agree(results: dict[str, dict[str, Any]], run_ids: list[str], step_id: str) -> bool:
    values = [results[run_id].get(step_id, _MISSING) for run_id in run_ids]
    return all(value is not _MISSING and value == values[0] for value in values)


def _value(results: dict[str, Any], step_id: str) -> Any:
    return results.get(step_id, pd.NA)


def _text(results: dict[str, Any], step_id: str) -> str | None:
    if step_id not in results:
        return None
    return to_json(results[step_id])
