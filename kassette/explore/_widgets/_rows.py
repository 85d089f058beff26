"""What the run tree sends to the browser: the forest as columns, colours, a legend, entry pages.

The forest is flattened depth first (parents before children, as `kassette tree` draws it)
into parallel lists, one item per run: `end[i]` is the index just after run i's last
descendant, so the browser folds a subtree by skipping from i to `end[i]`, and `parent[i]`
lets a search keep the path to each match. Plain data, no widget: the tree widget and its
tests share it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from kassette.explore._frames import Journals
from kassette.explore._lineage import Lineage, RunNode
from kassette.explore._widgets._colors import OTHER_COLOR, status_color

__all__ = [
    "PAGE",
    "TreeNode",
    "entries_of",
    "entry_page",
    "pretty_json",
    "rows",
    "run_header",
    "status_color",
]

PAGE = 100  # entries of the selected run sent at a time
FOLDED = 120  # characters: a longer value is folded in the browser, sent with its pretty text
_PARAMS_WIDTH = 60


class TreeNode(NamedTuple):
    """A run as the tree shows it: its label, colour, depth and source."""

    run_id: str
    status: str
    label: str
    color: str
    depth: int
    parent_run_id: str | None
    edited: bool = False
    params: str = ""


def rows(
    journals: Journals, lineage: Lineage, colors: Mapping[str, str]
) -> tuple[dict[str, list[Any]], dict[str, TreeNode]]:
    """The forest as columns for the browser, and the same runs as `TreeNode`s by run id."""
    params = params_text(journals)
    ids: list[str] = []
    labels: list[str] = []
    statuses: list[str] = []
    shades: list[str] = []
    depths: list[int] = []
    parents: list[int] = []
    ends: list[int] = []
    notes: list[str] = []
    marks: list[bool] = []
    nodes: dict[str, TreeNode] = {}
    pending: list[tuple[RunNode, int, int]] = [(root, 0, -1) for root in reversed(lineage.roots)]
    open_rows: list[int] = []  # rows whose `end` is filled in when their subtree is done
    while pending:
        node, depth, parent = pending.pop()
        while open_rows and depths[open_rows[-1]] >= depth:
            ends[open_rows.pop()] = len(ids)
        row, run_id = len(ids), node.run_id
        # edited: a fork that recorded its fork point with a given result (see kx.lineage)
        note, mark, label = params.get(run_id, ""), node.edited, node_label(node)
        color = colors.get(run_id, OTHER_COLOR)
        ids.append(run_id)
        labels.append(label)
        statuses.append(node.status)
        shades.append(color)
        depths.append(depth)
        parents.append(parent)
        ends.append(row + 1)
        notes.append(note)
        marks.append(mark)
        open_rows.append(row)
        source = None if parent < 0 else ids[parent]
        nodes[run_id] = TreeNode(run_id, node.status, label, color, depth, source, mark, note)
        if node.children:
            pending.extend((child, depth + 1, row) for child in reversed(node.children))
    for row in open_rows:
        ends[row] = len(ids)
    columns: dict[str, list[Any]] = {
        "id": ids,
        "label": labels,
        "status": statuses,
        "color": shades,
        "depth": depths,
        "parent": parents,
        "end": ends,
        "note": notes,
        "edited": marks,
    }
    return columns, nodes


def node_label(node: RunNode) -> str:
    """`run · @offset · N steps`: a fork shows the offset it was cut at."""
    steps = f"{node.steps} step{'s' if node.steps != 1 else ''}"
    if node.fork_offset is None:
        return f"{node.run_id} · {steps}"
    return f"{node.run_id} · @{node.fork_offset} · {steps}"


def params_text(journals: Journals) -> dict[str, str]:
    """`k=v, ...` for runs with a `params` column value (a fan-out's branch parameters)."""
    runs = journals.to_arrow("runs")
    if "params" not in runs.column_names:
        return {}
    found = {}
    for run_id, value in zip(
        runs.column("run_id").to_pylist(), runs.column("params").to_pylist(), strict=True
    ):
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        if value is None or value == {} or value == "":
            continue
        if isinstance(value, dict):
            text = ", ".join(f"{key}={_short(item)}" for key, item in value.items())
        else:
            text = _short(value)
        found[run_id] = text if len(text) <= _PARAMS_WIDTH else text[: _PARAMS_WIDTH - 1] + "…"
    return found


def _short(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def run_header(journals: Journals, run_id: str, node: TreeNode) -> dict[str, Any]:
    """The selected run's own fields for the details panel (times as ISO text)."""
    runs = journals.to_arrow("runs")
    found = runs.filter(pc.equal(runs.column("run_id"), run_id)).to_pylist()
    row = found[0] if found else {"run_id": run_id}
    header = {key: _plain(value) for key, value in row.items()}
    header.update(color=status_color(node.status), label=node.label, params=node.params)
    header["edited"] = node.edited
    return header


def entry_page(
    journals: Journals, run_id: str, page: int, *, entries: pa.Table | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Page `page` of a run's entries (`PAGE` at a time) for the browser, and the page count."""
    table = entries if entries is not None else entries_of(journals, run_id)
    pages = max(1, -(-table.num_rows // PAGE))
    page = min(max(page, 0), pages - 1)
    chunk = table.slice(page * PAGE, PAGE)
    copied = "copied" in chunk.column_names
    shown = []
    for entry in chunk.to_pylist():
        shown.append(
            {
                "offset": entry["offset"],
                "session": entry["session"],
                "time": _time(entry["timestamp"]),
                "type": entry["type"],
                "id": entry["step_id"] or entry["event"] or "",
                "value": entry["value"],
                "full": _unfolded(entry["value"]),
                "copied": bool(entry.get("copied")) if copied else False,
                "edited": bool(entry.get("edited")),
            }
        )
    return shown, pages


def pretty_json(value: Any, indent: str = "") -> str:
    """A JSON value as the widgets show it whole: indented JSON, except that a string with
    newlines shows them (a model's answer, say), as a block between triple quotes. The one
    "pretty JSON": the comparison's cells and the tree's unfolded values."""
    inner = indent + "  "
    if isinstance(value, str) and "\n" in value:
        lines = "\n".join(inner + line for line in value.split("\n"))
        return f'"""\n{lines}\n{indent}"""'
    if isinstance(value, dict) and value:
        items = [
            f"{inner}{json.dumps(key, ensure_ascii=False)}: {pretty_json(item, inner)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and value:
        items = [inner + pretty_json(item, inner) for item in value]
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False)


def _unfolded(value: str | None) -> str | None:
    """What a folded value (JSON text longer than `FOLDED`) shows when unfolded, else None."""
    if value is None or len(value) <= FOLDED:
        return None
    try:
        return pretty_json(json.loads(value))
    except ValueError:  # not JSON: shown as it is
        return value


def entries_of(journals: Journals, run_id: str) -> pa.Table:
    table = journals.to_arrow("entries")
    return table.filter(pc.equal(table.column("run_id"), run_id))


def _time(value: datetime | None) -> str:
    """`2026-01-01 00:00:01.500` (UTC): the date too, as runs span days."""
    if value is None:
        return ""
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _plain(value: object) -> Any:
    if isinstance(value, datetime):
        return _time(value) + " UTC"
    if isinstance(value, float) and value != value:
        return None
    return value
