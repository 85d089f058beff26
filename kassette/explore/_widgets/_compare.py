"""CompareView: many branches side by side, step by step, with a text diff against a baseline.

Steps are aligned by logical step (`align="answer"`: a tool loop `draft`, `search`, `draft#2`
is one row showing its answer, so branches whose paths differ line their answers up) or by
step id (`align="step"`), one column per branch (or, transposed, one row per branch and a
column per step, which reads better beyond ten branches); the first divergence is named at
the top and highlighted. Beyond ten branches the view is an *answer grid* (`compact`): a row
per branch, each answer cut to two lines with "more", so 20 branches fit one screen; the user
picks the steps shown (`columns`), sorts and filters the branches by score, cost, answer
length or params (`sort_by`, `descending`, `query`), and marks branches (keep, a note), which
`view.marks` gives as a frame. Opening a cell shows its model calls as a conversation
(`kassette.explore._conversation`): messages, tool calls and results, tokens, cost, raw JSON.
Each cell is the step's result as text: a model call as its answer
(`kassette.explore._answers`), a string as it is, with its newlines, anything else as indented
JSON; the raw JSON is one toggle away (`values="json"`). Against the baseline branch a cell
shows a diff: word by word for an answer, a unified diff (difflib) of lines otherwise. Steps
where every branch is alike fold into one line (`hide_equal`, on beyond three branches).
One widget model whatever the number of branches.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import anywidget
import pandas as pd
import traitlets

from kassette.errors import InvalidArgumentError
from kassette.explore._answers import word_diff
from kassette.explore._compare import ALIGNS, Comparison, compared
from kassette.explore._conversation import call_view
from kassette.explore._frames import Journals
from kassette.explore._widgets._assets import css, esm
from kassette.explore._widgets._rows import params_text, pretty_json
from kassette.explore._widgets._sifting import filter_error, sifted

__all__ = ["CompareView"]

_MISSING = None
HIDE_EQUAL_BEYOND = 3  # branches: more than this, and equal steps fold by default
TRANSPOSED_BEYOND = 10  # branches: more than this, and the view is a row per branch ...
COMPACT_BEYOND = 10  # ... with each answer cut to two lines (the answer grid)
_DEFAULTED = ("hide_equal", "transposed", "compact")  # picked by the branch count until set
MARK_COLUMNS = ("keep", "note")


class CompareView(anywidget.AnyWidget):
    """Branches `run_ids` of `journals` side by side; `baseline` (default: the first) is what
    the others are diffed against.

    The data the view draws: `steps`, `runs`, `cells` (run id -> text per step, None where
    the run has no such step), `diffs` (run id -> a diff per step, empty where alike: `[op,
    text]` pairs word by word for an answer, unified diff lines otherwise), `differs` (run id
    -> per step, whether it differs from the baseline), `notes` (run id -> per step, the
    request parameters that differ from the baseline's), `edited` (run id -> per step, whether
    a fork recorded it with a given result), `alike` (per step, whether every branch has the
    same result), `answers` (per step, whether it is a model call), `params` (run id -> its
    params as `k=v, ...`, a fan-out's variant) and `first_divergence`.

    How it draws them: `mode` is "values" or "diff", `values` "text" (answers) or "json" (raw
    results). `groups` lists the runs whose every step is the same (the baseline's group
    first); with `group` set the view shows one column per group. `hide_equal` folds the
    steps where every branch is alike into one line (default: on beyond 3 branches);
    `transposed` shows a row per branch and a column per step instead of a column per branch
    (default: on beyond 10 branches); `compact` cuts each cell to two lines with "more"
    (default: on beyond 10 branches). `columns` are the steps shown (empty: every step, less
    those `hide_equal` folds). `align` is "answer" (logical steps, the default), "first" (a
    loop's first call) or "step" (step ids); `loops` (run id -> per step, the step ids a
    logical step folds when more than one) names the tool loops.

    Branches: `sort_by` ("", "score", "cost_usd", "length" or "param:NAME"), `descending` and
    `query` (see `kassette.explore._widgets._sifting`: `temperature>1 kept`) give `order`, the
    branches shown; `facts` (run id -> score, cost_usd, length, params) is what they read.
    `scores` (a mapping of run id to number) gives the scores. Marks set in the view, or
    with `mark()`, are `view.marks` (a frame: run id, keep, note, and the branch's facts).
    `opened` ([run id, step]) selects a cell whose model calls `conversation` shows."""

    _esm = esm("compare.js", "conversation.js")
    _css = css("compare.css", "conversation.css")

    steps: traitlets.List[Any] = traitlets.List().tag(sync=True)
    runs: traitlets.List[Any] = traitlets.List().tag(sync=True)
    params = traitlets.Dict().tag(sync=True)
    baseline = traitlets.Unicode().tag(sync=True)
    cells = traitlets.Dict().tag(sync=True)
    diffs = traitlets.Dict().tag(sync=True)
    differs = traitlets.Dict().tag(sync=True)
    notes = traitlets.Dict().tag(sync=True)
    edited = traitlets.Dict().tag(sync=True)
    alike: traitlets.List[Any] = traitlets.List().tag(sync=True)
    answers: traitlets.List[Any] = traitlets.List().tag(sync=True)
    first_divergence = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    mode = traitlets.Unicode("values").tag(sync=True)
    values = traitlets.Unicode("text").tag(sync=True)
    groups: traitlets.List[Any] = traitlets.List().tag(sync=True)
    group = traitlets.Bool(False).tag(sync=True)
    hide_equal = traitlets.Bool(False).tag(sync=True)
    transposed = traitlets.Bool(False).tag(sync=True)
    compact = traitlets.Bool(False).tag(sync=True)
    columns: traitlets.List[Any] = traitlets.List().tag(sync=True)
    align = traitlets.Unicode("answer").tag(sync=True)
    loops = traitlets.Dict().tag(sync=True)
    facts = traitlets.Dict().tag(sync=True)
    sort_by = traitlets.Unicode("").tag(sync=True)
    descending = traitlets.Bool(False).tag(sync=True)
    query = traitlets.Unicode("").tag(sync=True)
    query_error = traitlets.Unicode("").tag(sync=True)
    order: traitlets.List[Any] = traitlets.List().tag(sync=True)
    _marks = traitlets.Dict().tag(sync=True)
    opened: traitlets.List[Any] = traitlets.List().tag(sync=True)
    conversation = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        journals: Journals,
        run_ids: Iterable[str],
        *,
        baseline: str | None = None,
        values: Literal["text", "json"] = "text",
        align: Literal["answer", "first", "step"] = "answer",
        hide_equal: bool | None = None,
        transposed: bool | None = None,
        compact: bool | None = None,
        scores: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.add_class("kassette-compare")
        self._chosen: set[str] = set()  # options set by the user, not by the branch count
        self._comparison: Comparison | None = None
        self._updating = False
        self._scores = dict(scores or {})
        self.values = _checked("values", values, ("text", "json"))
        self.align = _checked("align", align, ALIGNS)
        for name, given in (
            ("hide_equal", hide_equal),
            ("transposed", transposed),
            ("compact", compact),
        ):
            if given is not None:
                setattr(self, name, given)
                self._chosen.add(name)
        self.update(journals, run_ids, baseline=baseline)
        self.observe(self._baseline_moved, names="baseline")
        self.observe(self._values_moved, names="values")
        self.observe(self._align_moved, names="align")
        self.observe(self._option_set, names=list(_DEFAULTED))
        self.observe(self._sift, names=["sort_by", "descending", "query", "_marks"])
        self.observe(self._open, names="opened")

    def update(
        self, journals: Journals, run_ids: Iterable[str], *, baseline: str | None = None
    ) -> None:
        """Compare `run_ids` of `journals` instead (the baseline is `baseline`, else the first
        of them); the view keeps its mode, its values and the options set by hand, and picks
        `hide_equal` and `transposed` for the new branch count otherwise."""
        comparison = compared(journals, run_ids, align=self.align)
        wanted = comparison.run_ids
        if baseline is not None and baseline not in wanted:
            raise InvalidArgumentError(f"baseline {baseline} is not one of the runs compared")
        self._comparison, self._journals = comparison, journals
        with self.hold_sync():
            self._updating = True  # the observers wait for the whole change
            if "hide_equal" not in self._chosen:
                self.hide_equal = len(wanted) > HIDE_EQUAL_BEYOND
            if "transposed" not in self._chosen:
                self.transposed = len(wanted) > TRANSPOSED_BEYOND
            if "compact" not in self._chosen:
                self.compact = len(wanted) > COMPACT_BEYOND
            self.runs, self.steps = wanted, comparison.steps
            self.columns = [step for step in self.columns if step in comparison.steps]
            self.loops = {
                run_id: [
                    members.get(step, []) if len(members.get(step, [])) > 1 else []
                    for step in comparison.steps
                ]
                for run_id, members in comparison.members.items()
            }
            self.edited = {
                run_id: [bool(entries.get(step, {}).get("edited")) for step in comparison.steps]
                for run_id, entries in comparison.entries.items()
            }
            known = params_text(journals)
            self.params = {run_id: known[run_id] for run_id in wanted if run_id in known}
            self.alike = [comparison.alike(step) for step in comparison.steps]
            self.answers = [
                any(comparison.answer(run_id, step) for run_id in wanted)
                for step in comparison.steps
            ]
            self.first_divergence = comparison.first_divergence
            self.baseline = baseline if baseline is not None else wanted[0]
            self._marks = {run_id: mark for run_id, mark in self._marks.items() if run_id in wanted}
            self._updating = False
            self._draw_cells()
            self.facts = _facts(journals, comparison, self._scores)
            self._sift()
            self._open()

    def __repr__(self) -> str:
        return (
            f"CompareView: {len(self.runs)} runs x {len(self.steps)} steps, baseline "
            f"{self.baseline}, first divergence {self.first_divergence}"
        )

    def _baseline_moved(self, change: Any) -> None:
        if self._updating:
            return
        if change["new"] not in self.runs:
            self.baseline = change["old"]  # a stale choice from the browser: keep the old
            return
        with self.hold_sync():
            self._diff()

    # -- marks, order and conversations -----------------------------------------------------

    @property
    def marks(self) -> pd.DataFrame:
        """The branches marked in the view (or with `mark()`): a frame indexed by `run_id`
        with `keep` (bool), `note` (text), then `params`, `score`, `cost_usd` and `length`."""
        rows = []
        for run_id in self.runs:
            mark = self._marks.get(run_id)
            if not mark or not (mark.get("keep") or mark.get("note")):
                continue
            facts = self.facts.get(run_id, {})
            rows.append(
                {
                    "run_id": run_id,
                    "keep": bool(mark.get("keep")),
                    "note": str(mark.get("note") or ""),
                    "params": facts.get("params"),
                    "score": facts.get("score"),
                    "cost_usd": facts.get("cost_usd"),
                    "length": facts.get("length"),
                }
            )
        columns = ["run_id", *MARK_COLUMNS, "params", "score", "cost_usd", "length"]
        return pd.DataFrame(rows, columns=columns).set_index("run_id")

    def mark(self, run_id: str, *, keep: bool | None = None, note: str | None = None) -> None:
        """Mark a branch as the view's keep box and note field do (None leaves it as it is)."""
        if run_id not in self.runs:
            raise InvalidArgumentError(f"run {run_id} is not one of the runs compared")
        mark = dict(self._marks.get(run_id, {}))
        if keep is not None:
            mark["keep"] = bool(keep)
        if note is not None:
            mark["note"] = note
        self._marks = {**self._marks, run_id: mark}

    def _sift(self, change: Any = None) -> None:
        comparison = self._comparison
        assert comparison is not None
        texts = {
            run_id: "\n".join(answer.text for answer in comparison.answers[run_id].values())
            for run_id in self.runs
        }
        self.query_error = filter_error(self.query) or ""
        self.order = sifted(
            self.runs,
            self.facts,
            self._marks,
            texts,
            sort_by=self.sort_by,
            descending=self.descending,
            query=self.query if not self.query_error else "",
        )

    def _open(self, change: Any = None) -> None:
        """Show the model calls of the cell `opened` names (a loop: each call, its tools)."""
        comparison = self._comparison
        assert comparison is not None
        opened = list(self.opened)
        if len(opened) != 2 or opened[1] not in comparison.members.get(opened[0], {}):
            self.conversation = {}
            return
        run_id, step = opened
        parts = []
        for step_id in comparison.members[run_id][step]:
            entry = comparison.by_step[run_id][step_id]
            shown = call_view(entry, step_id)
            if shown is None:  # a tool step of the loop, or a plain step: its result
                result = entry.get("result")
                text = result if isinstance(result, str) else pretty_json(result)
                shown = {"step_id": step_id, "tool": text}
            parts.append(shown)
        self.conversation = {"run_id": run_id, "step": step, "parts": parts}

    def _align_moved(self, change: Any) -> None:
        if change["new"] not in ALIGNS:
            self.align = change["old"]
            return
        self.update(self._journals, self.runs, baseline=self.baseline)

    def _values_moved(self, change: Any) -> None:
        if change["new"] not in ("text", "json"):
            self.values = change["old"]
            return
        self._draw_cells()

    def _option_set(self, change: Any) -> None:
        if not self._updating:
            self._chosen.add(change["name"])

    def _draw_cells(self) -> None:
        comparison = self._comparison
        assert comparison is not None
        with self.hold_sync():
            self.cells = {
                run_id: [self._shown(run_id, step) for step in comparison.steps]
                for run_id in comparison.run_ids
            }
            self._diff()

    def _shown(self, run_id: str, step_id: str) -> str | None:
        """A step's result as text: a model call's answer (unless values is "json"), a string
        as it is, anything else as indented JSON."""
        assert self._comparison is not None
        results = self._comparison.results[run_id]
        if step_id not in results:
            return _MISSING
        answer = self._comparison.answer(run_id, step_id)
        if answer is not None and self.values == "text":
            return answer.text
        value = results[step_id]
        return value if isinstance(value, str) else pretty_json(value)

    def _diff(self) -> None:
        comparison = self._comparison
        assert comparison is not None
        base, steps = self.baseline, comparison.steps
        texts = self.cells[base]
        differs = {
            run_id: [comparison.key(run_id, s) != comparison.key(base, s) for s in steps]
            for run_id in self.runs
        }
        diffs: dict[str, list[list[Any]]] = {}
        notes: dict[str, list[list[str]]] = {}
        for run_id in self.runs:
            notes[run_id] = [comparison.request_changes(base, run_id, step) for step in steps]
            if run_id == base:
                continue
            diffs[run_id] = [
                _diff(old, new, by_word=self.answers[i] and self.values == "text")
                if differs[run_id][i]
                else []
                for i, (old, new) in enumerate(zip(texts, self.cells[run_id], strict=True))
            ]
        self.differs, self.notes, self.diffs = differs, notes, diffs
        self.groups = comparison.groups(base)


def _facts(
    journals: Journals, comparison: Comparison, scores: Mapping[str, float]
) -> dict[str, dict[str, Any]]:
    """Per run: `score`, `cost_usd` (None for a run without model calls), `length` (the words
    of its last answer) and `params`."""
    runs = journals.to_arrow("runs")
    wanted = ("run_id", "cost_usd", "llm_calls", "params")
    columns = [name for name in wanted if name in runs.column_names]
    known = {row["run_id"]: row for row in runs.select(columns).to_pylist()}
    found = {}
    for run_id in comparison.run_ids:
        row = known.get(run_id, {})
        params = row.get("params")
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError:
                params = None
        answers = [comparison.answers[run_id].get(step) for step in comparison.steps]
        last = next((answer for answer in reversed(answers) if answer is not None), None)
        cost = row.get("cost_usd")
        if not row.get("llm_calls"):
            cost = None  # no model call: no cost to show, rather than a $0.00000 that means none
        found[run_id] = {
            "score": scores.get(run_id),
            "cost_usd": None if cost is None or cost != cost else cost,
            "length": len(last.text.split()) if last is not None else None,
            "params": params if isinstance(params, dict) else {},
        }
    return found


def _checked(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise InvalidArgumentError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _diff(old: str | None, new: str | None, *, by_word: bool) -> list[Any]:
    """This text against the baseline's: word by word (`[op, text]` pairs, see
    `word_diff`) for two answers, else unified diff lines (none when equal)."""
    if old == new:
        return []
    if by_word and old is not None and new is not None:
        return [list(pair) for pair in word_diff(old, new)]
    before = [] if old is None else old.splitlines()
    after = [] if new is None else new.splitlines()
    lines = difflib.unified_diff(before, after, "baseline", "this", n=2, lineterm="")
    return [line for line in lines if not line.startswith(("---", "+++"))]
