"""A frame as a notebook cell shows it: one line per row, long values cut, long tables cut.

What `Journals` shows in a cell (its runs table), as HTML and as text. Every row is one line:
a value longer than its column's width is cut with an ellipsis, and in HTML the whole value is
the cell's `title`, shown on hover. A table longer than pandas' `display.max_rows` shows its
first and last `display.min_rows // 2` rows around one row of ellipses, and says how many rows
it has, as pandas does with a frame. A missing value, whatever the column's type, is one mark.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd

__all__ = ["MISSING_MARK", "frame_html", "frame_text", "shown_rows"]

MISSING_MARK = "\u2013"  # an en dash: one mark for a missing value, whatever the column's type
ELLIPSIS = "\u2026"
WIDTH = 32  # characters: the widest a cell is shown
NARROW = 24  # characters: the widest a JSON cell (params, input, result) is shown
_HOVER = 10_000  # characters: the most of a value a cell's tooltip holds
# On every cell, not the table: JupyterLab's own style for a table's cells lets them wrap.
_LINE = " style='white-space:nowrap'"
_MORE = "\u22ee"  # a vertical ellipsis: the row that stands for the rows not shown


def frame_html(frame: pd.DataFrame, *, title: str, json_columns: Sequence[str] = ()) -> str:
    """`frame` as an HTML table under a bold `title`, each row one line, cut as the module
    says; the table scrolls sideways rather than wrapping."""
    header = "".join(f"<th{_LINE}>{html.escape(str(column))}</th>" for column in frame.columns)
    rows = shown_rows(frame, json_columns=json_columns)
    body = "".join(
        "<tr>" + "".join(_html_cell(short, whole) for short, whole in row) + "</tr>" for row in rows
    )
    table = (
        "<table class='dataframe' style='white-space:nowrap'>"
        f"<thead><tr style='text-align:left'>{header}</tr></thead><tbody>{body}</tbody></table>"
    )
    footer = f"<p>{_count(frame)}</p>" if len(rows) < len(frame) else ""
    return (
        f"<div><p><b>{html.escape(title)}</b></p>"
        f"<div style='overflow-x:auto'>{table}</div>{footer}</div>"
    )


def frame_text(frame: pd.DataFrame, *, title: str, json_columns: Sequence[str] = ()) -> str:
    """`frame` as plain text: `title`, then the table as `frame_html` shows it (each row one
    line, cut the same way), columns aligned."""
    if not len(frame):
        return title
    shown = shown_rows(frame, json_columns=json_columns)
    rows = [[str(column) for column in frame.columns], *([s for s, _ in r] for r in shown)]
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    lines = ["  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip()
             for row in rows]  # fmt: skip
    footer = [_count(frame)] if len(shown) < len(frame) else []
    return "\n".join([title, *lines, *footer])


def shown_rows(
    frame: pd.DataFrame, *, json_columns: Sequence[str] = ()
) -> list[list[tuple[str, str | None]]]:
    """The rows shown, each cell as (what is shown, the whole value when that was cut): all
    rows, or the first and last around a row of ellipses (pandas' display options)."""
    narrow = set(json_columns)
    widths = [NARROW if name in narrow else WIDTH for name in frame.columns]
    head, tail = _shown(len(frame))

    def row(number: int) -> list[tuple[str, str | None]]:
        values = (frame.iat[number, index] for index in range(len(widths)))
        return [_cut(_text(value), width) for value, width in zip(values, widths, strict=True)]

    rows = [row(number) for number in head]
    if tail:
        rows.append([(_MORE, None)] * len(widths))
        rows += [row(number) for number in tail]
    return rows


def _shown(total: int) -> tuple[range, range]:
    """The rows shown first and last: all of them, or as many as pandas' options say."""
    most, fewest = pd.get_option("display.max_rows"), pd.get_option("display.min_rows")
    if most is None or total <= most:
        return range(total), range(0)
    half = max(1, min(fewest or most, most) // 2)
    return range(half), range(total - half, total)


def _count(frame: pd.DataFrame) -> str:
    """What pandas says under a frame it cut: how many rows and columns there are."""
    return f"{len(frame):,} rows \u00d7 {len(frame.columns)} columns"


def _text(value: Any) -> str:
    """One value as one line of text; a missing one as the one mark."""
    if value is None or value is pd.NA or value is pd.NaT:
        return MISSING_MARK
    if isinstance(value, float):
        return MISSING_MARK if math.isnan(value) else format(value, ".6g")
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, str):
        return " ".join(value.split())  # one line: newlines and runs of spaces as one space
    if hasattr(value, "__len__") and not isinstance(value, dict):  # a list column
        return ", ".join(_text(item) for item in value) if len(value) else MISSING_MARK
    return " ".join(str(value).split())


def _cut(text: str, width: int) -> tuple[str, str | None]:
    """The text shown in a cell `width` characters wide, and the whole text if that was cut
    (itself cut at `_HOVER` characters: a tooltip, not a dump of a megabyte result)."""
    if len(text) <= width:
        return text, None
    whole = text if len(text) <= _HOVER else text[: _HOVER - 1] + ELLIPSIS
    return text[: width - 1].rstrip() + ELLIPSIS, whole


def _html_cell(short: str, whole: str | None) -> str:
    if whole is None:
        return f"<td{_LINE}>{html.escape(short)}</td>"
    return f"<td{_LINE} title='{html.escape(whole, quote=True)}'>{html.escape(short)}</td>"
