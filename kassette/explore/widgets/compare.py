"""CompareView: many branches side by side, step by step, with a text diff against a baseline.

Steps are aligned by step id down the side (the column stays put while the branches scroll
sideways), one column per branch; the first divergence is named at the top and highlighted.
Each cell is the step's result as text (a string as it is, with its newlines; anything else as
indented JSON), and against the baseline branch a unified diff (difflib) of the two texts.
One widget model whatever the number of branches.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any

import anywidget
import traitlets

from kassette.errors import InvalidArgumentError
from kassette.explore.compare import first_divergence, step_results
from kassette.explore.frames import Journals
from kassette.explore.widgets._assets import css, esm

__all__ = ["CompareView"]

_MISSING = None


class CompareView(anywidget.AnyWidget):
    """Branches `run_ids` of `journals` side by side; `baseline` (default: the first) is what
    the others are diffed against. `steps`, `runs`, `cells` (run id -> text per step, None
    where the run has no such step), `diffs` (run id -> diff lines per step, empty where equal)
    and `first_divergence` are the data the view draws; `mode` is "values" or "diff".
    `groups` lists the runs whose every cell is the same (the baseline's group first); with
    `group` set the view shows one column per group instead of one per run."""

    _esm = esm("compare.js")
    _css = css("compare.css")

    steps: traitlets.List[Any] = traitlets.List().tag(sync=True)
    runs: traitlets.List[Any] = traitlets.List().tag(sync=True)
    baseline = traitlets.Unicode().tag(sync=True)
    cells = traitlets.Dict().tag(sync=True)
    diffs = traitlets.Dict().tag(sync=True)
    first_divergence = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    mode = traitlets.Unicode("values").tag(sync=True)
    groups: traitlets.List[Any] = traitlets.List().tag(sync=True)
    group = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self, journals: Journals, run_ids: Iterable[str], *, baseline: str | None = None
    ) -> None:
        super().__init__()
        self.add_class("kassette-compare")
        self.update(journals, run_ids, baseline=baseline)
        self.observe(self._baseline_moved, names="baseline")

    def update(
        self, journals: Journals, run_ids: Iterable[str], *, baseline: str | None = None
    ) -> None:
        """Compare `run_ids` of `journals` instead (the baseline is `baseline`, else the first
        of them); the view keeps its mode."""
        wanted, order, results = step_results(journals, run_ids)
        if baseline is not None and baseline not in wanted:
            raise InvalidArgumentError(f"baseline {baseline} is not one of the runs compared")
        self._results = results
        with self.hold_sync():
            self.runs, self.steps = wanted, order
            self.cells = {
                run_id: [_shown(results[run_id], step) for step in order] for run_id in wanted
            }
            self.first_divergence = first_divergence(results, wanted, order)
            self.baseline = baseline if baseline is not None else wanted[0]
            self._diff()

    def __repr__(self) -> str:
        return (
            f"CompareView: {len(self.runs)} runs x {len(self.steps)} steps, baseline "
            f"{self.baseline}, first divergence {self.first_divergence}"
        )

    def _baseline_moved(self, change: Any) -> None:
        if change["new"] not in self.runs:
            self.baseline = change["old"]  # a stale choice from the browser: keep the old
            return
        self._diff()

    def _diff(self) -> None:
        base = self.cells[self.baseline]
        self.diffs = {
            run_id: [_diff(old, new) for old, new in zip(base, self.cells[run_id], strict=True)]
            for run_id in self.runs
            if run_id != self.baseline
        }
        alike: dict[tuple[str | None, ...], list[str]] = {}
        for run_id in self.runs:
            alike.setdefault(tuple(self.cells[run_id]), []).append(run_id)
        self.groups = sorted(alike.values(), key=lambda runs: self.baseline not in runs)


def _shown(results: dict[str, Any], step_id: str) -> str | None:
    """A step's result as text: a string as it is, anything else as indented JSON."""
    if step_id not in results:
        return _MISSING
    value = results[step_id]
    if isinstance(value, str):
        return value
    return _pretty(value)


def _pretty(value: Any, indent: str = "") -> str:
    """Indented JSON, except that a string with newlines shows them (a model's answer, say),
    as a block between triple quotes."""
    inner = indent + "  "
    if isinstance(value, str) and "\n" in value:
        lines = "\n".join(inner + line for line in value.split("\n"))
        return f'"""\n{lines}\n{indent}"""'
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(key)}: {_pretty(item, inner)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and value:
        items = [inner + _pretty(item, inner) for item in value]
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False)


def _diff(old: str | None, new: str | None) -> list[str]:
    """Unified diff lines from the baseline's text to this one's (none when equal)."""
    if old == new:
        return []
    before = [] if old is None else old.splitlines()
    after = [] if new is None else new.splitlines()
    lines = difflib.unified_diff(before, after, "baseline", "this", n=2, lineterm="")
    return [line for line in lines if not line.startswith(("---", "+++"))]
