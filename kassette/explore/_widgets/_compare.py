"""CompareView: many branches side by side, step by step, with a text diff against a baseline.

Steps are aligned by step id, one column per branch (or, transposed, one row per branch and a
column per step, which reads better beyond ten branches); the first divergence is named at
the top and highlighted. Each cell is the step's result as text: a model call as its answer
(`kassette.explore._answers`), a string as it is, with its newlines, anything else as indented
JSON; the raw JSON is one toggle away (`values="json"`). Against the baseline branch a cell
shows a diff: word by word for an answer, a unified diff (difflib) of lines otherwise. Steps
where every branch is alike fold into one line (`hide_equal`, on beyond three branches).
One widget model whatever the number of branches.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, Literal

import anywidget
import traitlets

from kassette.errors import InvalidArgumentError
from kassette.explore._answers import word_diff
from kassette.explore._compare import Comparison, compared
from kassette.explore._frames import Journals
from kassette.explore._widgets._assets import css, esm
from kassette.explore._widgets._rows import params_text, pretty_json

__all__ = ["CompareView"]

_MISSING = None
HIDE_EQUAL_BEYOND = 3  # branches: more than this, and equal steps fold by default
TRANSPOSED_BEYOND = 10  # branches: more than this, and the view is a row per branch
_DEFAULTED = ("hide_equal", "transposed")  # options picked by the branch count until set


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
    (default: on beyond 10 branches)."""

    _esm = esm("compare.js")
    _css = css("compare.css")

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

    def __init__(
        self,
        journals: Journals,
        run_ids: Iterable[str],
        *,
        baseline: str | None = None,
        values: Literal["text", "json"] = "text",
        hide_equal: bool | None = None,
        transposed: bool | None = None,
    ) -> None:
        super().__init__()
        self.add_class("kassette-compare")
        self._chosen: set[str] = set()  # options set by the user, not by the branch count
        self._comparison: Comparison | None = None
        self._updating = False
        self.values = _checked("values", values, ("text", "json"))
        if hide_equal is not None:
            self.hide_equal = hide_equal
            self._chosen.add("hide_equal")
        if transposed is not None:
            self.transposed = transposed
            self._chosen.add("transposed")
        self.update(journals, run_ids, baseline=baseline)
        self.observe(self._baseline_moved, names="baseline")
        self.observe(self._values_moved, names="values")
        self.observe(self._option_set, names=list(_DEFAULTED))

    def update(
        self, journals: Journals, run_ids: Iterable[str], *, baseline: str | None = None
    ) -> None:
        """Compare `run_ids` of `journals` instead (the baseline is `baseline`, else the first
        of them); the view keeps its mode, its values and the options set by hand, and picks
        `hide_equal` and `transposed` for the new branch count otherwise."""
        comparison = compared(journals, run_ids)
        wanted = comparison.run_ids
        if baseline is not None and baseline not in wanted:
            raise InvalidArgumentError(f"baseline {baseline} is not one of the runs compared")
        self._comparison = comparison
        with self.hold_sync():
            self._updating = True  # the observers wait for the whole change
            if "hide_equal" not in self._chosen:
                self.hide_equal = len(wanted) > HIDE_EQUAL_BEYOND
            if "transposed" not in self._chosen:
                self.transposed = len(wanted) > TRANSPOSED_BEYOND
            self.runs, self.steps = wanted, comparison.steps
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
            self._updating = False
            self._draw_cells()

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
