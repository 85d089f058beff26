"""RunTree: the fork forest of some runs as one widget model, drawn by its own JavaScript.

The forest goes to the browser once, as columns (`_rows.rows`); tree.js draws only the rows
scrolled into view, folds subtrees, filters by run id, status or params, and shows the
selected run's details beside the tree. The selected run's entries are sent when it is
selected, `PAGE` at a time. Everything the browser shows is a traitlet here, so the tree works
headless too: `select()`, `nodes`, `legend`, `details` and `entries` are plain data.
"""

from __future__ import annotations

import inspect
import json
import threading
from typing import Any

import anywidget
import pyarrow as pa
import traitlets

from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._answers import answer_of
from kassette.explore._branches import Branches
from kassette.explore._conversation import call_view
from kassette.explore._frames import Journals
from kassette.explore._lineage import lineage
from kassette.explore._widgets._assets import css, esm
from kassette.explore._widgets._awaiting import settle
from kassette.explore._widgets._colors import ColorBy, node_colors
from kassette.explore._widgets._live import Watcher
from kassette.explore._widgets._rows import PAGE, TreeNode, entries_of, entry_page, rows, run_header
from kassette.explore._widgets._tree_data import SAVED_FOREST, newest, numbers, short_text

__all__ = ["PAGE", "RunTree", "TreeNode", "entry_conversation", "model_call_offsets"]


class RunTree(anywidget.AnyWidget):
    """The fork forest of `journals`: click a run to see its entries beside the tree.

    `selected` (a traitlet: observe it, or set it) is the selected run id; `nodes` maps run ids
    to `TreeNode`s (label, colour, depth, source); `legend` is the [label, colour] pairs the
    colours mean; `details` is the selected run's row of the runs table and `entries` the
    page `page` of its entries. `color_by` is "status", a numeric column of the runs table, a
    fan-out's `Branches` (its scores), a numeric column of `branches.frame` when `branches` is
    given (`color_by="score", branches=b`), or a mapping of run id to number: numbers are drawn
    in viridis bins. With `workflow`, a suspended run's details offer a resume form;
    `live=True` (or `watch()`) re-reads changed journals every `interval` seconds, and
    `follow=True` (the "follow newest" box) selects the run that started last each time the
    tree is shown again: a live tree follows the newest run (clicking a run stops following).
    The search box takes words and numeric filters (`temperature>1 cost_usd<=0.002`: the runs
    table's numbers and the params that are numbers).
    """

    _esm = esm("tree.js", "conversation.js")
    _css = css("tree.css", "conversation.css")

    selected = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    # the forest's columns as JSON text: one string, which ipywidgets does not walk item by
    # item; "" for a forest too large to save with the notebook (sent on request: _tree_data)
    _forest = traitlets.Unicode("{}").tag(sync=True)
    _forest_id = traitlets.Int(0).tag(sync=True)  # which forest: bumped whenever it changes
    _forest_runs = traitlets.Int(0).tag(sync=True)
    follow = traitlets.Bool(False).tag(sync=True)
    legend: traitlets.List[Any] = traitlets.List().tag(sync=True)
    details = traitlets.Dict().tag(sync=True)
    entries: traitlets.List[Any] = traitlets.List().tag(sync=True)
    pages = traitlets.Int(1).tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    can_resume = traitlets.Bool(False).tag(sync=True)
    # the details panel's model calls: the page's model-call offsets, the one opened, its view
    llm_offsets: traitlets.List[Any] = traitlets.List().tag(sync=True)
    conversation_offset = traitlets.Int(-1).tag(sync=True)
    conversation = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        journals: Journals,
        *,
        selected: str | None = None,
        color_by: ColorBy = "status",
        branches: Branches | None = None,
        workflow: Any = None,
        live: bool = False,
        interval: float = 1.0,
        follow: bool = False,
    ) -> None:
        super().__init__()
        self.add_class("kassette-run-tree")
        self.workflow = workflow
        self.can_resume = workflow is not None
        self.color_by, self.branches = color_by, branches
        self.nodes: dict[str, TreeNode] = {}
        self.forest: dict[str, list[Any]] = {}  # the columns the browser draws
        self._forest_text = "{}"
        self._entries_table: pa.Table | None = None
        self._watcher: Any = None
        self._lock = threading.RLock()
        self.observe(self._selection_changed, names="selected")
        self.observe(self._page_moved, names="page")
        self.follow = follow
        self.observe(self._on_follow, names="follow")
        self.observe(self._entries_shown, names="entries")
        self.observe(self._conversation_opened, names="conversation_offset")
        self.on_msg(self._message)
        self._show(journals, selected, strict=True)
        if live:
            self.watch(interval)

    # -- the public surface ------------------------------------------------------------------

    def update(self, journals: Journals, *, selected: str | None = None) -> None:
        """Show `journals` instead (keeping the selection if that run is still there)."""
        self._show(journals, selected, strict=False)

    def select(self, run_id: str) -> None:
        """Select a run, as clicking its node does."""
        self.lineage[run_id]  # raises RunNotFoundError for a run not shown
        self.selected = run_id

    def recolor(self, color_by: ColorBy, *, branches: Branches | None = None) -> None:
        """Colour the nodes by status, a numeric column of the runs table (or of
        `branches.frame`: `branches` defaults to the tree's), a `Branches`' scores, or a run
        id -> number mapping."""
        self.color_by, self.branches = color_by, branches or self.branches
        self._show(self.journals, self.selected, strict=False)

    def watch(self, interval: float = 1.0) -> None:
        """Re-read the journals that changed every `interval` seconds, in a background thread."""
        if self.journals.storage is None:
            raise InvalidArgumentError("these journals were not loaded from a storage")
        if not interval > 0:
            raise InvalidArgumentError(
                f"interval must be a positive number of seconds, not {interval!r}"
            )
        self.unwatch()
        self._watcher = Watcher(self.refresh, self._stopped, interval)

    def unwatch(self) -> None:
        """Stop watching (nothing happens if the tree is not watching)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()

    @property
    def watching(self) -> bool:
        return self._watcher is not None

    def resume(self, event: str, value: Any = None) -> Any:
        """`workflow.resume(selected, event, value)`, as the details panel's resume form does;
        then the tree reads the journals again and `message` says how the run ended.

        An `AsyncWorkflow`'s resume is awaited: as a task on the running event loop when there
        is one (as in Jupyter), which is returned at once (`message` says how it ended, an
        error included), else to the end with `asyncio.run`.
        """
        if self.workflow is None:
            raise InvalidArgumentError("this tree has no workflow to resume runs with: pass one")
        if self.selected is None:
            raise InvalidArgumentError("no run is selected")
        outcome = self.workflow.resume(self.selected, event, value)
        if inspect.isawaitable(outcome):
            self.message = f"resuming {event}…"
        return settle(outcome, lambda result: self._resumed(event, result), self._failed)

    def refresh(self) -> None:
        """Read the journals that changed since they were shown, and show them."""
        with self._lock:
            journals = self.journals.refresh()
            if journals is not self.journals:
                self.update(journals)

    def _resumed(self, event: str, result: Any) -> Any:
        if self.journals.storage is not None:
            self.refresh()
        self.message = f"resumed {event}: {getattr(result, 'status', '')}"
        return result

    def _failed(self, exc: BaseException) -> None:
        self.message = f"{type(exc).__name__}: {exc}"

    def _stopped(self, why: str) -> None:
        self._watcher = None
        self.message = why

    def __repr__(self) -> str:
        return short_text(self.lineage, len(self.nodes), self.selected)

    # -- drawing -----------------------------------------------------------------------------

    def _show(self, journals: Journals, selected: str | None, *, strict: bool) -> None:
        with self._lock:
            forest = lineage(journals)
            if strict and selected is not None and selected not in forest:
                where = f" of {journals.storage!r}" if journals.storage is not None else ""
                raise RunNotFoundError(
                    f"run {selected} is not among the {len(forest)} runs{where}", run_id=selected
                )
            self.journals, self.lineage = journals, forest
            colors, legend = node_colors(journals, forest, self.color_by, self.branches)
            columns, self.nodes = rows(journals, forest, colors)
            keep = selected if selected is not None else self.selected
            if self.follow:
                keep = newest(journals, columns["id"])
            if keep not in self.nodes:
                keep = next(iter(self.nodes), None)
            with self.hold_sync():
                self.legend = [list(item) for item in legend]
                self._set_forest(journals, columns)
                if keep == self.selected:
                    self._show_selected(page=self.page)
                else:
                    self.selected = keep

    def _selection_changed(self, change: Any = None) -> None:
        if self.selected is not None and self.selected not in self.nodes:
            self.selected = change["old"] if change else None  # a stale click: keep the old
            return
        with self.hold_sync():
            self._show_selected(page=0)

    def _page_moved(self, change: Any) -> None:
        if self.selected is not None and change["new"] != change["old"]:
            self._show_selected(page=change["new"])

    def _show_selected(self, *, page: int) -> None:
        if self.selected is None:
            self._entries_table = None
            self.details, self.entries, self.pages = {}, [], 1
            return
        run_id = self.selected
        table = entries_of(self.journals, run_id)
        shown, pages = entry_page(self.journals, run_id, page, entries=table)
        self.details = run_header(self.journals, run_id, self.nodes[run_id])
        self.entries, self.pages = shown, pages
        self.page = min(max(page, 0), pages - 1)

    # -- the details panel's conversations ---------------------------------------------------

    def open_conversation(self, offset: int) -> dict[str, Any]:
        """Show the selected run's model call at `offset` as a conversation, as clicking its
        entry does; returns what is shown (`kassette.explore._conversation.call_view`)."""
        self.conversation_offset = offset
        return dict(self.conversation)

    def _entries_shown(self, change: Any = None) -> None:
        with self.hold_sync():
            self.llm_offsets = model_call_offsets(self.entries)
            if self.conversation_offset not in self.llm_offsets:
                self.conversation_offset = -1
            else:
                self._conversation_opened()

    def _conversation_opened(self, change: Any = None) -> None:
        entry = next((e for e in self.entries if e["offset"] == self.conversation_offset), None)
        shown = None if entry is None else entry_conversation(entry)
        where = {"run_id": self.selected, "offset": self.conversation_offset}
        self.conversation = {**where, **shown} if shown else {}

    # -- what is saved, searched and followed (_tree_data.py) ----------------------------------

    def _set_forest(self, journals: Journals, columns: dict[str, list[Any]]) -> None:
        """Show `columns` (with the numbers the search filters on); a large forest goes to the
        browser when it asks (`_send_forest`), not into the saved widget state."""
        columns["numbers"] = numbers(journals, columns["id"])  # type: ignore[assignment]
        self.forest = columns
        text = json.dumps(columns, ensure_ascii=False, separators=(",", ":"))
        self._forest_text = text
        self._forest = text if len(text) <= SAVED_FOREST else ""
        self._forest_runs = len(columns["id"])
        self._forest_id += 1

    def _send_forest(self) -> None:
        self.send({"kind": "forest", "id": self._forest_id}, [self._forest_text.encode()])

    def _on_follow(self, change: Any) -> None:
        if change["new"] and self.nodes:
            run_id = newest(self.journals, list(self.nodes))
            if run_id is not None:
                self.selected = run_id

    def _message(self, widget: Any, content: Any, buffers: Any = None) -> None:
        """The browser's requests: the forest (`{"kind": "forest"}`) and the resume form's
        `{"kind": "resume", "event": E, "value": JSON text}`."""
        if isinstance(content, dict) and content.get("kind") == "forest":
            self._send_forest()
            return
        if not isinstance(content, dict) or content.get("kind") != "resume":
            return
        try:
            text = content.get("value") or "null"
            self.resume(str(content.get("event")), json.loads(text))
        except Exception as exc:  # shown in the widget: a click has no caller to raise to
            self._failed(exc)


def model_call_offsets(entries: list[dict[str, Any]]) -> list[int]:
    """The offsets of the model calls among a page of entries (`_rows.entry_page`)."""
    return [entry["offset"] for entry in entries if entry_conversation(entry, quick=True)]


def entry_conversation(entry: dict[str, Any], *, quick: bool = False) -> dict[str, Any] | None:
    """A page entry's model call as `call_view` shows it (None when it is no model call);
    `quick` only says whether it is one (an empty dict)."""
    if entry.get("type") != "step" or not entry.get("value"):
        return None
    try:
        fields = json.loads(entry["value"])
    except ValueError:
        return None
    if not isinstance(fields, dict) or answer_of(fields) is None:
        return None
    return {"offset": entry["offset"]} if quick else call_view(fields, str(entry.get("id")))
