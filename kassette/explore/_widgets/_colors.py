"""How the run tree colours its nodes: by status, or by a number per run in viridis bins.

A number comes from a numeric column of the runs table, from a fan-out's `Branches` (its
`score`, or another numeric column of `Branches.frame`), or from a mapping of run id to number.
The numbers are cut into `len(SCALE)` equal bins from the lowest to the highest, each drawn in
one colour of viridis, a perceptually uniform sequential map: its lightness rises evenly from
bin to bin, so neighbouring bins stay apart (in grey, and for colour-blind readers too) and the
lighter colour is always the higher number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import pandas as pd
import pyarrow as pa

from kassette.errors import InvalidArgumentError
from kassette.explore._branches import Branches
from kassette.explore._frames import Journals
from kassette.explore._lineage import STATUS_COLORS, Lineage

__all__ = [
    "NO_VALUE_COLOR",
    "OTHER_COLOR",
    "SCALE",
    "ColorBy",
    "legend",
    "node_colors",
    "status_color",
]

ColorBy: TypeAlias = "str | Mapping[str, float] | Branches"
OTHER_COLOR = "#444"  # a status kassette does not know (a newer journal's)
NO_VALUE_COLOR = "#d0d0d0"  # a run without a number: lighter than every bin but the last
# viridis at 0, 1/4, 1/2, 3/4 and 1 (matplotlib's): CIELAB lightness 16, 37, 55, 73, 92
SCALE = ("#440154", "#3b528b", "#21918c", "#5ec962", "#fde725")
_DASH = "\u2013"  # an en dash between a bin's bounds


def status_color(status: str) -> str:
    return STATUS_COLORS.get(status, OTHER_COLOR)


def legend(statuses: Iterable[str]) -> list[tuple[str, str]]:
    """A [status, colour] pair per status colour; "other" too for a status kassette lacks."""
    named = list(STATUS_COLORS.items())
    if any(status not in STATUS_COLORS for status in statuses):
        named.append(("other", OTHER_COLOR))
    return named


def node_colors(
    journals: Journals, lineage: Lineage, color_by: ColorBy, branches: Branches | None = None
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Each run's colour and the legend ([label, colour] pairs) for `color_by`.

    `color_by` is "status"; the name of a numeric column of `journals.runs`, or of
    `branches.frame` when `branches` (a fan-out's result) is given ("score"); a `Branches`
    (its scores); or a mapping of run id to number. Runs without a number are light grey.
    """
    if isinstance(color_by, str) and color_by == "status":
        colors = {node.run_id: status_color(node.status) for node in lineage}
        return colors, legend(node.status for node in lineage)
    name, values = _numbers(journals, color_by, branches)
    numbers = [value for value in values.values() if value is not None]
    low, high = (min(numbers), max(numbers)) if numbers else (0.0, 0.0)
    colors = {}
    for node in lineage:
        value = values.get(node.run_id)
        colors[node.run_id] = NO_VALUE_COLOR if value is None else SCALE[_bin(value, low, high)]
    return colors, [*_bins(name, low, high, bool(numbers)), ("no value", NO_VALUE_COLOR)]


def _numbers(
    journals: Journals, color_by: ColorBy, branches: Branches | None
) -> tuple[str, dict[str, float | None]]:
    """What the colours are named after, and each run's number (None: none, or NaN)."""
    if isinstance(color_by, Branches):
        branches, color_by = color_by, "score"
    if isinstance(color_by, str):
        if branches is not None and color_by in branches.frame.columns:
            frame = branches.frame
            return color_by, _checked(color_by, frame["run_id"], frame[color_by])
        runs = journals.to_arrow("runs")
        if color_by not in runs.column_names:
            hint = (
                f" (pass branches=, the fan-out's Branches, to colour by its {color_by!r})"
                if branches is None
                else ""
            )
            raise InvalidArgumentError(
                f"color_by must be 'status', a numeric column of the runs table (or of "
                f"Branches.frame), a Branches or a mapping of run id to number, not "
                f"{color_by!r}{hint}"
            )
        column = runs.column(color_by)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise InvalidArgumentError(f"color_by column {color_by!r} is not numeric")
        return color_by, _checked(color_by, runs.column("run_id"), column)
    return "value", {str(run_id): _number(value) for run_id, value in color_by.items()}


def _checked(name: str, run_ids: Any, column: Any) -> dict[str, float | None]:
    """The numbers of a frame's or table's column by run id; a column of text is refused."""
    values = column.to_pylist() if isinstance(column, pa.ChunkedArray) else column.tolist()
    if isinstance(column, pd.Series) and not pd.api.types.is_numeric_dtype(column):
        raise InvalidArgumentError(f"color_by column {name!r} is not numeric")
    ids = run_ids.to_pylist() if isinstance(run_ids, pa.ChunkedArray) else run_ids.tolist()
    return {run_id: _number(value) for run_id, value in zip(ids, values, strict=True)}


def _number(value: Any) -> float | None:
    if value is None or pd.isna(value):
        return None
    return float(value)


def _bin(value: float, low: float, high: float) -> int:
    """Which of the equal bins from `low` to `high` `value` falls in (`high` in the last)."""
    if high <= low:
        return len(SCALE) - 1
    share = (value - low) / (high - low)
    return min(len(SCALE) - 1, max(0, int(share * len(SCALE))))


def _bins(name: str, low: float, high: float, any_number: bool) -> list[tuple[str, str]]:
    """A legend item per bin: `score 0.2-0.4` (an en dash, as a minus sign may follow) and its
    colour."""
    if not any_number:
        return []
    if high <= low:
        return [(f"{name} {low:.3g}", SCALE[-1])]
    width = (high - low) / len(SCALE)
    return [
        (f"{name} {low + width * i:.3g}{_DASH}{low + width * (i + 1):.3g}", color)
        for i, color in enumerate(SCALE)
    ]
