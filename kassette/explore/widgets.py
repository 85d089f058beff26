"""Widgets: the fork forest to click through, and forking from a notebook.

`RunTree` draws `lineage(journals)` as one button per run, coloured by status (a legend above
says which colour is which) and labelled with run id, fork offset and step count; selecting
one shows that run's entries below the tree. `ForkExplorer` puts a fork-point picker and a
Fork button on top of a `RunTree`, with a line saying what a press would fork: pressing Fork
calls `workflow.fork(...)`, so the continuation runs the workflow code the notebook holds now,
then the new branch appears in the tree and side by side with its source.
Both are plain ipywidgets containers: their state is their children's state.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Coroutine, Iterable
from typing import Any

try:
    import ipywidgets as widgets
    import traitlets
except ImportError as exc:  # pragma: no cover - exercised in a bare environment
    raise ImportError(
        f'kassette.explore widgets need ipywidgets: pip install "kassette[explore]" ({exc})'
    ) from exc

import pandas as pd

from kassette.codec import TERMINAL_TYPES
from kassette.explore.compare import FIRST_DIVERGENCE, compare
from kassette.explore.frames import Journals, load
from kassette.explore.lineage import STATUS_COLORS, Lineage, RunNode, lineage
from kassette.workflow import AsyncWorkflow, RunResult, Workflow

__all__ = ["ForkExplorer", "RunTree"]

_VALUE_WIDTH = 120
_OTHER_COLOR = "#444"  # a status kassette does not know (a newer journal's)


class RunTree(widgets.VBox):  # type: ignore[misc]
    """The fork forest of `journals`: click a run to see its entries.

    `selected` (a traitlet, so it can be observed or set) is the selected run id; `nodes`
    maps run ids to their buttons, `legend` says which colour is which status, and `details`
    is the HTML view of the selected run.
    """

    selected = traitlets.Unicode(None, allow_none=True)

    def __init__(self, journals: Journals, *, selected: str | None = None) -> None:
        self.nodes: dict[str, widgets.Button] = {}
        self.legend = widgets.HTML()
        self.forest = widgets.VBox(layout=widgets.Layout(margin="0 0 8px 0"))
        self.details = widgets.HTML()
        super().__init__([self.legend, self.forest, self.details])
        _name_parts(self, "run-tree", legend="legend", forest="forest", details="details")
        self.observe(self._show_selected, names="selected")
        self.update(journals, selected=selected)

    def update(self, journals: Journals, *, selected: str | None = None) -> None:
        """Show `journals` instead (keeping the selection if that run is still there)."""
        self.journals = journals
        self.lineage: Lineage = lineage(journals)
        self.nodes = {}
        rows = []
        for lead, node in self.lineage.lines():
            button = widgets.Button(
                description=_node_label(node),
                tooltip=f"{node.run_id}: {node.status}",
                layout=widgets.Layout(width="auto"),
                style={
                    "button_color": _color(node.status),
                    "text_color": "white",
                },
            )
            button.on_click(lambda _, run_id=node.run_id: self.select(run_id))
            self.nodes[node.run_id] = button
            indent = widgets.HTML(
                f"<pre style='margin:0;line-height:28px'>{html.escape(lead)}</pre>"
            )
            rows.append(widgets.HBox([indent, button]))
        self.forest.children = rows
        self.legend.value = _legend_html(node.status for node in self.lineage)
        keep = selected if selected is not None else self.selected
        if keep not in self.nodes:
            keep = next(iter(self.nodes), None)
        if keep == self.selected:
            self._show_selected()
        else:
            self.selected = keep

    def select(self, run_id: str) -> None:
        """Select a run, as clicking its node does."""
        self.lineage[run_id]  # raises RunNotFoundError for a run not shown
        self.selected = run_id

    def __repr__(self) -> str:
        return (
            f"RunTree: {len(self.nodes)} run{'s' if len(self.nodes) != 1 else ''}, "
            f"selected {self.selected}\n{self.lineage!r}"
        )

    def _show_selected(self, change: Any = None) -> None:
        for run_id, button in self.nodes.items():
            chosen = run_id == self.selected
            button.style.font_weight = "bold" if chosen else "normal"
            button.layout.border = "3px solid #222" if chosen else "3px solid transparent"
        self.details.value = (
            "" if self.selected is None else _entries_html(self.journals, self.selected)
        )


def _name_parts(widget: widgets.Box, name: str, **parts: str) -> None:
    """CSS classes `kassette-<name>` on a widget and its parts, to style or find them in a page."""
    widget.add_class(f"kassette-{name}")
    for attribute, part in parts.items():
        getattr(widget, attribute).add_class(f"kassette-{part}")


def _color(status: str) -> str:
    return STATUS_COLORS.get(status, _OTHER_COLOR)


def _legend_html(statuses: Iterable[str]) -> str:
    """A swatch per status colour; "other" too when a run shown has a status kassette lacks."""
    named = list(STATUS_COLORS.items())
    if any(status not in STATUS_COLORS for status in statuses):
        named.append(("other", _OTHER_COLOR))
    swatches = "".join(
        f"<span style='margin-right:12px;white-space:nowrap'>"
        f"<span style='display:inline-block;width:12px;height:12px;border-radius:2px;"
        f"vertical-align:middle;margin-right:4px;background:{color}'></span>{status}</span>"
        for status, color in named
    )
    return f"<div style='font-size:90%'>{swatches}</div>"


def _node_label(node: RunNode) -> str:
    parts = [node.run_id]
    if node.fork_offset is not None:
        parts.append(f"@{node.fork_offset}")
    parts.append(f"{node.steps} step{'s' if node.steps != 1 else ''}")
    return " · ".join(parts)


def _entries_html(journals: Journals, run_id: str) -> str:
    """A run's header line and its entries as an HTML table."""
    run = journals.to_arrow("runs")
    row = next(r for r in run.to_pylist() if r["run_id"] == run_id)
    source = (
        f", forked from <b>{html.escape(row['parent_run_id'])}</b> at offset {row['fork_offset']}"
        if row["parent_run_id"] is not None
        else ""
    )
    color = _color(row["status"])
    header = (
        f"<p><b>{html.escape(run_id)}</b> <span style='color:{color}'>{row['status']}</span>"
        f"{source}</p>"
    )
    entries = journals._entries_of(run_id)
    cells = []
    for entry in entries.itertuples(index=False):
        value = (
            entry.value if len(entry.value) <= _VALUE_WIDTH else entry.value[:_VALUE_WIDTH] + "…"
        )
        label = entry.step_id if isinstance(entry.step_id, str) else ""
        time = "" if pd.isna(entry.timestamp) else entry.timestamp.strftime("%H:%M:%S.%f")[:-3]
        cells.append(
            f"<tr><td>{entry.offset}</td><td>{entry.session}</td><td>{html.escape(time)}</td>"
            f"<td>{html.escape(entry.type)}</td><td>{html.escape(label)}</td>"
            f"<td style='text-align:left;font-family:monospace'>{html.escape(value)}</td></tr>"
        )
    head = "".join(
        f"<th>{name}</th>" for name in ("offset", "session", "time", "type", "id", "value")
    )
    return f"{header}<table><thead><tr>{head}</tr></thead><tbody>{''.join(cells)}</tbody></table>"


class ForkExplorer(widgets.VBox):  # type: ignore[misc]
    """Pick a fork point of a run, press Fork, and compare the new branch with its source.

    The run forked is the one selected in `tree` (at first `run_id`). `step` (a dropdown of
    the run's steps) moves `offset` (a slider) to that step, so it runs again in the fork;
    `new_run_id` names the fork (blank: a random id). `target` says what a press of
    `fork_button` would do, and follows every change of run, offset or name; the press calls
    `fork()`. Assign `explorer.workflow` after redefining the workflow to fork with the new code.
    """

    def __init__(
        self,
        workflow: Workflow[Any, Any] | AsyncWorkflow[Any, Any],
        run_id: str,
        *,
        journals: Journals | None = None,
    ) -> None:
        self.workflow = workflow
        self.results: list[RunResult] = []
        self.step = widgets.Dropdown(description="step", options=[("(by offset)", None)])
        self.offset = widgets.IntSlider(description="offset", min=0, max=0)
        self.new_run_id = widgets.Text(description="new run", placeholder="(random id)")
        self.fork_button = widgets.Button(
            description="Fork", button_style="primary", icon="code-branch"
        )
        self.target = widgets.HTML()
        self.status = widgets.HTML()
        self.comparison = widgets.HTML()
        loaded = journals if journals is not None else load(workflow.storage)
        self.tree = RunTree(_family(loaded, run_id), selected=run_id)
        super().__init__(
            [
                widgets.HBox([self.step, self.offset]),
                widgets.HBox([self.new_run_id, self.fork_button]),
                self.target,
                self.status,
                self.tree,
                self.comparison,
            ]
        )
        _name_parts(self, "fork-explorer", target="fork-target", status="fork-status")
        self.step.observe(self._step_chosen, names="value")
        self.offset.observe(self._offset_moved, names="value")
        self.new_run_id.observe(self._describe_target, names="value")
        self.tree.observe(self._source_chosen, names="selected")
        self.fork_button.on_click(self._clicked)
        self._source_chosen()

    @property
    def source(self) -> str:
        """The run a press of Fork forks: the one selected in the tree."""
        return str(self.tree.selected)

    def fork(self) -> RunResult | asyncio.Task[RunResult]:
        """Fork `source` at `offset` and run the continuation, then show the new branch.

        An `AsyncWorkflow` is awaited on the running event loop when there is one (as in
        Jupyter): then a task is returned, and the view updates when it finishes.
        """
        source, offset = self.source, self.offset.value
        new_run_id = self.new_run_id.value.strip() or None
        outcome = self.workflow.fork(source, offset=offset, new_run_id=new_run_id)
        if isinstance(outcome, RunResult):
            return self._forked(source, offset, outcome)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._forked(source, offset, asyncio.run(_awaited(outcome)))
        task = loop.create_task(_awaited(outcome))
        self.status.value = f"forking <b>{html.escape(source)}</b> at offset {offset}…"
        task.add_done_callback(lambda done: self._finished(source, offset, done))
        return task

    def __repr__(self) -> str:
        step = f" (step {self.step.value})" if self.step.value is not None else ""
        last = self.results[-1] if self.results else None
        done = f"\nlast fork: {last.run_id} ({last.status})" if last else ""
        return f"ForkExplorer: fork {self.source} at offset {self.offset.value}{step}{done}"

    # -- events ------------------------------------------------------------------------------

    def _clicked(self, button: Any = None) -> None:
        try:
            self.fork()
        except Exception as exc:  # shown in the widget: a click has no caller to raise to
            self._failed(exc)

    def _finished(self, source: str, offset: int, task: asyncio.Task[RunResult]) -> None:
        try:
            self._forked(source, offset, task.result())
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.status.value = (
            f"<span style='color:{STATUS_COLORS['failed']}'>"
            f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</span>"
        )

    def _forked(self, source: str, offset: int, result: RunResult) -> RunResult:
        self.results.append(result)
        self.new_run_id.value = ""
        journals = _family(load(self.workflow.storage), source)
        self.tree.update(journals, selected=result.run_id)
        color = _color({"success": "completed"}.get(result.status, result.status))
        self.status.value = (
            f"forked <b>{html.escape(source)}</b> at offset {offset} into "
            f"<b>{html.escape(result.run_id)}</b>: "
            f"<span style='color:{color}'>{html.escape(result.status)}</span>"
        )
        frame = compare(journals, [source, result.run_id])
        self.comparison.value = frame.to_html(na_rep="", escape=True).replace(
            f"<th>{FIRST_DIVERGENCE}</th>", "<th>first divergence</th>"
        )
        return result

    def _source_chosen(self, change: Any = None) -> None:
        if self.tree.selected is None:
            return
        entries = self.tree.journals._entries_of(self.source)
        steps = entries[entries["type"] == "step"].drop_duplicates("step_id")
        terminal = entries[entries["type"].isin(sorted(TERMINAL_TYPES))]
        last = int(terminal["offset"].iloc[0]) if len(terminal) else len(entries)
        options: list[tuple[str, str | None]] = [("(by offset)", None)]
        options += [
            (f"{step_id} (offset {offset})", step_id)
            for step_id, offset in zip(steps["step_id"], steps["offset"], strict=True)
        ]
        self._offsets = dict(zip(steps["step_id"], steps["offset"].astype(int), strict=True))
        self.step.options = options
        self.offset.max = last
        first = next(iter(self._offsets), None)
        self.step.value = first
        if first is None:
            self.offset.value = last
        self._describe_target()

    def _step_chosen(self, change: Any = None) -> None:
        if self.step.value is not None:
            self.offset.value = self._offsets[self.step.value]

    def _offset_moved(self, change: Any = None) -> None:
        if self.step.value is not None and self._offsets[self.step.value] != self.offset.value:
            at = [s for s, o in self._offsets.items() if o == self.offset.value]
            self.step.value = at[0] if at else None
        self._describe_target()

    def _describe_target(self, change: Any = None) -> None:
        if self.tree.selected is None:
            self.target.value = ""
            return
        source, offset = self.source, self.offset.value
        new_run_id = self.new_run_id.value.strip()
        into = f"<b>{html.escape(new_run_id)}</b>" if new_run_id else "a new run (random id)"
        kept = {0: "no entries", 1: "entry 0"}.get(offset, f"entries 0 to {offset - 1}")
        entries = self.tree.journals._entries_of(source)
        at = entries[entries["offset"] == offset]
        then = (
            f"runs again from entry {offset} ({_entry_name(at.iloc[0])})"
            if len(at)
            else "continues after its last entry"
        )
        self.target.value = (
            f"Fork will branch <b>{html.escape(source)}</b> at offset {offset} into {into}: "
            f"it keeps {kept} and {then}."
        )


def _entry_name(entry: pd.Series) -> str:
    """How the fork target names the first entry it does not copy: `step <b>plan</b>`."""
    name = next((v for v in (entry["step_id"], entry["event"]) if isinstance(v, str)), None)
    kind = html.escape(str(entry["type"]))
    return f"{kind} <b>{html.escape(name)}</b>" if name else f"the {kind} entry"


async def _awaited(coroutine: Coroutine[Any, Any, RunResult]) -> RunResult:
    return await coroutine


def _family(journals: Journals, run_id: str) -> Journals:
    """The runs in the same fork tree as `run_id`: its root and every descendant."""
    forest = lineage(journals)
    root = forest.root(run_id)
    members = [root.run_id]
    pending = list(root.children)
    while pending:
        node = pending.pop(0)
        members.append(node.run_id)
        pending.extend(node.children)
    return journals._subset(members)
