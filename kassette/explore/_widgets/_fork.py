"""ForkExplorer: pick a fork point of a run, press Fork, and compare the new branch.

A fork-point picker and a Fork button (plain ipywidgets) on top of a `RunTree` of the run's
family, with a line saying what a press would fork: pressing Fork calls `workflow.fork(...)`,
so the continuation runs the workflow code the notebook holds now; the new branch then
appears in the tree and, in a `CompareView` below it, side by side with its source, which
stays the run to fork. A Fan out button forks the same point many ways at once (`kx.fan_out`).
"""

from __future__ import annotations

import asyncio
import html
import inspect
import json
from typing import Any

import ipywidgets as widgets
import pandas as pd

from kassette._codec import TERMINAL_TYPES
from kassette._engine import RunResult, run_state
from kassette._fork import last_fork_offset
from kassette._workflow import AsyncWorkflow, Workflow
from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._branches import Branches, fan_out
from kassette.explore._frames import Journals, load
from kassette.explore._lineage import STATUS_COLORS, lineage
from kassette.explore._widgets._awaiting import settle
from kassette.explore._widgets._compare import CompareView
from kassette.explore._widgets._rows import status_color
from kassette.explore._widgets._tree import RunTree

__all__ = ["ForkExplorer"]


class ForkExplorer(widgets.VBox):  # type: ignore[misc]
    """Pick a fork point of a run, press Fork, and compare the new branch with its source.

    The run forked, `source`, is the one picked in `tree` (at first `run_id`); it stays the
    source after a fork, until another run is picked. `step` (a dropdown of the run's steps)
    moves `offset` (a slider) to that step, so it runs again in the fork; `new_run_id` names
    the fork (blank: a random id). `target` says what a press of `fork_button` would do, and
    follows every change of run, offset or name; the press calls `fork()`. `fan_out_button`
    forks the same point into `fan_out_count` branches, or one per params object of the JSON
    list in `fan_out_params`, run concurrently (`fan_out()`, see `kx.fan_out`; `new_run_id`,
    if given, is the branches' prefix). After a fork or a fan-out, `comparison` (a
    `CompareView`, shown below the tree from the first one on) lines up the source and its
    new branches step by step, diffed against the source. Assign `explorer.workflow` after
    redefining the workflow to fork with the new code.
    """

    def __init__(
        self,
        workflow: Workflow[Any, Any] | AsyncWorkflow[Any, Any],
        run_id: str,
        *,
        journals: Journals | None = None,
    ) -> None:
        self._workflow = workflow
        self.results: list[RunResult] = []
        self.step = widgets.Dropdown(description="step", options=[("(by offset)", None)])
        self.offset = widgets.IntSlider(description="offset", min=0, max=0)
        self.new_run_id = widgets.Text(description="new run", placeholder="(random id)")
        self.fork_button = widgets.Button(
            description="Fork", button_style="primary", icon="code-branch"
        )
        self.fan_out_count = widgets.BoundedIntText(description="branches", value=3, min=1, max=256)
        self.fan_out_params = widgets.Text(
            description="params", placeholder='[{"temperature": 0.2}, ...] (or blank)'
        )
        self.fan_out_button = widgets.Button(description="Fan out", icon="sitemap")
        self.fan_outs: list[Branches] = []
        self.target = widgets.HTML()
        self.status = widgets.HTML()
        loaded = journals if journals is not None else load(workflow.storage)
        family = _family(loaded, run_id)
        self.tree = RunTree(family, selected=run_id, workflow=workflow)
        self.comparison = CompareView(family, [run_id])  # shown from the first fork on
        self._source = run_id
        self._shown: list[Any] = [
            widgets.HBox([self.step, self.offset]),
            widgets.HBox([self.new_run_id, self.fork_button]),
            widgets.HBox([self.fan_out_count, self.fan_out_params, self.fan_out_button]),
            self.target,
            self.status,
            self.tree,
        ]
        super().__init__(self._shown)
        self.add_class("kassette-fork-explorer")
        self.target.add_class("kassette-fork-target")
        self.status.add_class("kassette-fork-status")
        self.step.add_class("kassette-fork-step")
        self.fan_out_count.add_class("kassette-fan-out-count")
        self.step.observe(self._step_chosen, names="value")
        self.offset.observe(self._offset_moved, names="value")
        self.new_run_id.observe(self._describe_target, names="value")
        self.tree.observe(self._source_chosen, names="selected")
        self.fork_button.on_click(self._clicked)
        self.fan_out_button.on_click(self._fan_out_clicked)
        self._source_chosen()

    @property
    def workflow(self) -> Workflow[Any, Any] | AsyncWorkflow[Any, Any]:
        """The workflow Fork, Fan out and the tree's resume form call: assign the notebook's
        new definition to fork (and resume) with the new code."""
        return self._workflow

    @workflow.setter
    def workflow(self, workflow: Workflow[Any, Any] | AsyncWorkflow[Any, Any]) -> None:
        self._workflow = workflow
        self.tree.workflow = workflow

    @property
    def source(self) -> str:
        """The run a press of Fork forks: the one last picked in the tree (a fork made here
        does not change it)."""
        return self._source

    def fan_out(self) -> Branches:
        """Fork `source` at `offset` into `fan_out_count` branches, or one per params object
        in `fan_out_params` (a JSON list), run them concurrently, and show them. Pressing
        again re-reports the same branches (`kx.fan_out` is durable): name another prefix in
        `new_run_id` to fan out the same point anew."""
        source, offset = self.source, self.offset.value
        text = self.fan_out_params.value.strip()
        varied: dict[str, Any] = (
            {"params": _params_list(text)} if text else {"n": self.fan_out_count.value}
        )
        prefix = self.new_run_id.value.strip() or None
        self.status.value = f"fanning out <b>{html.escape(source)}</b> at offset {offset}…"
        branches = fan_out(self.workflow, source, offset=offset, prefix=prefix, **varied)
        self.fan_outs.append(branches)
        journals = self._show_family(source)
        counts = branches.frame["status"].value_counts()
        summary = ", ".join(
            f"<span style='color:{status_color(run_state(str(status)))}'>"
            f"{count} {html.escape(str(status))}</span>"
            for status, count in counts.items()
        )
        unreplayed = sorted({s for steps in branches.frame["unreplayed"] for s in steps})
        self.status.value = (
            f"fanned out <b>{html.escape(source)}</b> at offset {offset} into "
            f"{len(branches)} branches ({html.escape(branches.run_ids[0])} …): {summary}"
            + _unreplayed_warning(unreplayed)
        )
        self._compare(journals, [source, *branches.run_ids])
        return branches

    def fork(self) -> RunResult | asyncio.Task[RunResult]:
        """Fork `source` at `offset` and run the continuation, then show the new branch.

        An `AsyncWorkflow` is awaited on the running event loop when there is one (as in
        Jupyter): then a task is returned, and the view updates when it finishes.
        """
        source, offset = self.source, self.offset.value
        new_run_id = self.new_run_id.value.strip() or None
        outcome = self.workflow.fork(source, offset=offset, new_run_id=new_run_id)
        if inspect.isawaitable(outcome):
            self.status.value = f"forking <b>{html.escape(source)}</b> at offset {offset}…"
        return settle(outcome, lambda result: self._forked(source, offset, result), self._failed)

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

    def _fan_out_clicked(self, button: Any = None) -> None:
        try:
            self.fan_out()
        except Exception as exc:  # shown in the widget: a click has no caller to raise to
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.status.value = (
            f"<span style='color:{STATUS_COLORS['failed']}'>"
            f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</span>"
        )

    def _forked(self, source: str, offset: int, result: RunResult) -> RunResult:
        self.results.append(result)
        self.new_run_id.value = ""
        journals = self._show_family(source)
        color = status_color(run_state(result.status))
        self.status.value = (
            f"forked <b>{html.escape(source)}</b> at offset {offset} into "
            f"<b>{html.escape(result.run_id)}</b>: "
            f"<span style='color:{color}'>{html.escape(result.status)}</span>"
            + _unreplayed_warning(list(result.unreplayed))
        )
        self._compare(journals, [source, result.run_id])
        return result

    def _compare(self, journals: Journals, run_ids: list[str]) -> None:
        """Line up the source (the baseline) and its new branches below the tree."""
        self.comparison.update(journals, run_ids, baseline=run_ids[0])
        if self.comparison not in self._shown:
            self._shown.append(self.comparison)
            self.children = tuple(self._shown)

    def _show_family(self, source: str) -> Journals:
        """Reload the source's fork family into the tree, the source still picked."""
        journals = _family(load(self.workflow.storage), source)
        self.tree.update(journals, selected=source)
        return journals

    def _source_chosen(self, change: Any = None) -> None:
        if self.tree.selected is None:
            return
        self._source = str(self.tree.selected)
        entries = self.tree.journals.entries_of(self.source)
        steps = entries[entries["type"] == "step"].drop_duplicates("step_id")
        terminal = entries[entries["type"].isin(sorted(TERMINAL_TYPES))]
        last = last_fork_offset(
            int(terminal["offset"].iloc[0]) if len(terminal) else None, len(entries)
        )
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
        entries = self.tree.journals.entries_of(source)
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


def _params_list(text: str) -> list[dict[str, Any]]:
    """The fan-out params typed in the widget: a JSON list of objects."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"params must be a JSON list of objects: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise InvalidArgumentError(f"params must be a JSON list of objects, not {text}")
    return value


def _unreplayed_warning(steps: list[str]) -> str:
    """A warning that the code did not replay recorded steps (renamed, or dropped)."""
    if not steps:
        return ""
    names = ", ".join(f"<b>{html.escape(step)}</b>" for step in steps)
    return (
        f"<br><span style='color:{STATUS_COLORS['suspended']}'>&#9888; the code did not "
        f"replay the recorded step{'s' if len(steps) > 1 else ''} {names} of the copied "
        "prefix (renamed or removed?)</span>"
    )


def _family(journals: Journals, run_id: str) -> Journals:
    """The runs in the same fork tree as `run_id`: its root and every descendant."""
    forest = lineage(journals)
    if run_id not in forest:
        where = f" of {journals.storage!r}" if journals.storage is not None else ""
        raise RunNotFoundError(
            f"run {run_id} is not among the {len(forest)} runs{where}", run_id=run_id
        )
    root = forest.root(run_id)
    members = [root.run_id]
    pending = list(root.children)
    while pending:
        node = pending.pop(0)
        members.append(node.run_id)
        pending.extend(node.children)
    return journals.subset(members)
