"""What RunTree keeps small, and what its search and "follow newest" read.

A notebook saves each widget's state (JupyterLab's "save widget state", nbconvert's
`store_widget_state`) and its text form: a forest of 10,000 runs is over a megabyte of JSON,
and its lineage text half a megabyte. So a forest of more than `SAVED_FOREST` characters is not
part of the widget's state: the browser asks the kernel for it over the widget's comm
(`{"kind": "forest"}`) and gets it as one binary buffer, and the tree's text form lists the
first `TEXT_RUNS` runs and how many more there are. A small forest stays in the state, so a
saved notebook still shows it without a kernel.

The search box filters on numbers too (`temperature>1`, `cost_usd>0.002`): `numbers` gives,
per run, the runs table's numeric columns and the params that are numbers, as columns.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kassette.explore._frames import Journals
from kassette.explore._lineage import Lineage

__all__ = ["NUMERIC", "SAVED_FOREST", "TEXT_RUNS", "newest", "numbers", "short_text"]

SAVED_FOREST = 48_000  # characters of forest JSON kept in the saved widget state, at most
TEXT_RUNS = 40  # runs the text form lists
# the runs table's columns a search can compare (name>value), besides the params' numbers
NUMERIC = ("cost_usd", "duration_s", "working_s", "waiting_s", "llm_calls", "input_tokens",
           "output_tokens", "steps", "sessions", "fork_offset")  # fmt: skip


def numbers(journals: Journals, run_ids: list[str]) -> dict[str, list[float | None]]:
    """Each numeric column (name -> one value per run of `run_ids`, None where it has none):
    the runs table's `NUMERIC` columns and every params key whose value is a number."""
    runs = journals.to_arrow("runs")
    rows = pc.index_in(pa.array(run_ids, pa.string()), value_set=runs.column("run_id"))
    found: dict[str, list[float | None]] = {}
    present = [name for name in NUMERIC if name in runs.column_names]
    for name in present:
        values = pc.cast(runs.column(name).take(rows), pa.float64())
        found[name] = pc.if_else(pc.is_nan(values), None, values).to_pylist()
    if "params" in runs.column_names:
        params = runs.column("params").take(rows).to_pylist()
        for index, text in enumerate(params):
            for key, value in _params(text).items():
                if key in present:
                    continue
                if key not in found:
                    found[key] = [None] * len(run_ids)
                found[key][index] = value
    return found


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if value != value else value  # NaN: no value


def _params(text: str | None) -> dict[str, float]:
    """A run's params that are numbers (a fan-out's temperature, top_p, seed...)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {
        str(key): number for key, item in value.items() if (number := _number(item)) is not None
    }


def newest(journals: Journals, run_ids: list[str]) -> str | None:
    """The run of `run_ids` that started last (the last listed, on a tie)."""
    runs = journals.to_arrow("runs").select(["run_id", "started_at"])
    shown = runs.filter(pc.is_in(runs.column("run_id"), pa.array(run_ids, pa.string())))
    place = {run_id: number for number, run_id in enumerate(run_ids)}
    pairs = [
        (started.timestamp() if started is not None else float("-inf"), place[run_id], run_id)
        for run_id, started in zip(
            shown.column("run_id").to_pylist(), shown.column("started_at").to_pylist(), strict=True
        )
    ]
    return max(pairs)[2] if pairs else None


def short_text(lineage: Lineage, count: int, selected: str | None) -> str:
    """The tree's text form: its first `TEXT_RUNS` runs as `kassette tree` draws them."""
    head = f"RunTree: {count} run{'s' if count != 1 else ''}, selected {selected}"
    lines = repr(lineage).split("\n") if count else []
    if len(lines) <= TEXT_RUNS:
        return "\n".join([head, *lines])
    more = len(lines) - TEXT_RUNS
    tail = f"… and {more} more lines (print(kx.lineage(journals)) shows them all)"
    return "\n".join([head, *lines[:TEXT_RUNS], tail])
