"""Compare: several runs' step results side by side, aligned by step id or by logical step.

Forks share their source's entries up to the fork point, so their steps line up by id; the
first step whose result differs (or that only some of the runs reached) is where the
branches diverge. Steps are ordered by the offset where they first appear in any of the runs.

Branches of an agent take different paths: one calls a tool, so its draft's answer is in
`draft#2`, while another answers in `draft`. Aligned by *logical step* (`align="answer"` or
`"first"`), a step's tool loop is one row (`kassette.explore._loops`): the model calls of one
name with the tool steps between them, keyed by the loop's first step id; its cell is the
loop's answering call (its last model call) or its first call.

Whether two results are the same is decided on their *comparable* form: a step's result as
recorded, except that a model call compares by its answer (see `kassette.explore._answers`),
so a response id or a token count never makes two branches differ, neither at the first
divergence nor in the grouping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kassette._codec import to_json
from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._answers import Answer, answer_of, request_changes
from kassette.explore._frames import Journals
from kassette.explore._loops import logical_steps
from kassette.explore._read import unique_run_ids

__all__ = [
    "ALIGNS",
    "FIRST_DIVERGENCE",
    "REQUEST_CHANGES",
    "STEPS",
    "VALUES",
    "Comparison",
    "compare",
    "compared",
]

FIRST_DIVERGENCE = "first_divergence"
REQUEST_CHANGES = "request_changes"
STEPS = "steps"
VALUES = ("text", "json", "python")
ALIGNS = ("step", "answer", "first")
"""How rows line up runs: by step id; by logical step, a tool loop's answering (last) model
call; by logical step, a tool loop's first model call."""


def compare(
    journals: Journals,
    run_ids: Iterable[str],
    *,
    values: Literal["text", "json", "python"] = "text",
    align: Literal["step", "answer", "first"] = "step",
) -> pd.DataFrame:
    """A frame indexed by `step_id` with one column per run holding that step's result
    (missing where the run has no such step), and a boolean `first_divergence` column that is
    True on the first step where the runs differ. The step id is also in
    `frame.attrs["first_divergence"]` (None when the runs agree on every step).

    `values` says how a result is shown: `"text"` (the default) as JSON text, except a model
    call: its answer text exactly as the model gave it, then a line per tool call it asks for
    (`tool call: search({"q": "..."})`); `"json"` every result as the JSON text recorded;
    `"python"` as the decoded value. Whatever `values`, a model call's response id, tool-call
    ids, timestamps, usage and timings never count as a divergence.

    `align="step"` lines steps up by id. `align="answer"` lines up logical steps: a step's
    tool loop (`draft`, the tool steps, `draft#2`) is one row named by its first step id, and
    its cell is the loop's answering call, its last model call; `align="first"` shows the
    loop's first call instead. `frame.attrs["steps"]` says which step ids each cell folds
    (run id -> row -> step ids).

    The request parameters of a model call that differ from the first run's are in
    `frame.attrs["request_changes"]`: run id -> row -> lines such as `"temperature 0.7 →
    1.3"` (empty when the same), for every model-call cell; never in the cells."""
    if values not in VALUES:
        raise InvalidArgumentError(f"values must be one of {', '.join(VALUES)}, not {values!r}")
    comparison = compared(journals, run_ids, align=align)
    columns: dict[str, list[Any]] = {
        run_id: [comparison.cell(run_id, step_id, values) for step_id in comparison.steps]
        for run_id in comparison.run_ids
    }
    divergent = comparison.first_divergence
    columns[FIRST_DIVERGENCE] = [step_id == divergent for step_id in comparison.steps]
    index = pd.Index(comparison.steps, name="step_id", dtype="str")
    frame = pd.DataFrame(columns, index=index)
    if values == "python":
        frame[comparison.run_ids] = frame[comparison.run_ids].astype(object)
    frame.attrs[FIRST_DIVERGENCE] = divergent
    frame.attrs[REQUEST_CHANGES] = comparison.all_request_changes()
    frame.attrs[STEPS] = {
        run_id: {row: list(steps) for row, steps in members.items()}
        for run_id, members in comparison.members.items()
    }
    return frame


_MISSING = None  # the key of a step the run does not have (a step's own key is never None)


@dataclass
class Comparison:
    """Runs aligned by step id or logical step: `run_ids` (no repeats), `steps` (the rows:
    step ids, or logical steps' first step ids, in order of first offset), each run's row
    `entries` by row (the shown step's fields after the envelope: `result`, `call`, ...),
    their `results`, the `answers` of those that are model calls, each result's comparable
    `keys` (equal keys: the same result), `members` (run id -> row -> the step ids the row
    folds, in order) and `by_step` (run id -> step id -> every step's fields)."""

    run_ids: list[str]
    steps: list[str]
    entries: dict[str, dict[str, dict[str, Any]]]
    members: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    by_step: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    align: str = "step"
    results: dict[str, dict[str, Any]] = field(init=False)
    answers: dict[str, dict[str, Answer]] = field(init=False)
    keys: dict[str, dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.results, self.answers, self.keys = {}, {}, {}
        for run_id, steps in self.entries.items():
            self.results[run_id] = {step: entry.get("result") for step, entry in steps.items()}
            read = {step: answer_of(entry) for step, entry in steps.items()}
            self.answers[run_id] = {step: answer for step, answer in read.items() if answer}
            self.keys[run_id] = {
                step: answer.key if answer else _key(self.results[run_id][step])
                for step, answer in read.items()
            }

    def answer(self, run_id: str, step_id: str) -> Answer | None:
        return self.answers[run_id].get(step_id)

    def request_changes(self, baseline: str, run_id: str, step_id: str) -> list[str]:
        """The request parameters of a model call that differ from the baseline run's."""
        base, answer = self.answer(baseline, step_id), self.answer(run_id, step_id)
        if base is None or answer is None or run_id == baseline:
            return []
        return request_changes(base.request, answer.request)

    def all_request_changes(self) -> dict[str, dict[str, list[str]]]:
        """Run id -> row -> the request changes against the first run, per model-call cell."""
        first = self.run_ids[0]
        return {
            run_id: {row: self.request_changes(first, run_id, row) for row in answers}
            for run_id, answers in self.answers.items()
        }

    def key(self, run_id: str, step_id: str) -> str | None:
        return self.keys[run_id].get(step_id, _MISSING)

    def alike(self, step_id: str, run_ids: list[str] | None = None) -> bool:
        """Every run (of `run_ids`, default all) has the step, with the same result."""
        keys = {self.key(run_id, step_id) for run_id in run_ids or self.run_ids}
        return len(keys) == 1 and _MISSING not in keys

    @property
    def first_divergence(self) -> str | None:
        """The first step whose results differ, or that only some runs have."""
        return next((step for step in self.steps if not self.alike(step)), None)

    def groups(self, first: str) -> list[list[str]]:
        """The runs whose every step is the same, `first`'s group first, then in run order."""
        alike: dict[tuple[str | None, ...], list[str]] = {}
        for run_id in self.run_ids:
            shape = tuple(self.key(run_id, step) for step in self.steps)
            alike.setdefault(shape, []).append(run_id)
        return sorted(alike.values(), key=lambda runs: first not in runs)

    def cell(self, run_id: str, step_id: str, values: str) -> Any:
        """A frame's cell for `values` (see `compare`)."""
        results = self.results[run_id]
        if step_id not in results:
            return pd.NA if values == "python" else None
        value = results[step_id]
        if values == "python":
            return value
        answer = self.answer(run_id, step_id)
        if answer is None or values == "json":
            return to_json(value)
        return answer.text


def compared(journals: Journals, run_ids: Iterable[str], *, align: str = "step") -> Comparison:
    """The runs `run_ids` of `journals`, aligned by step id or logical step (`ALIGNS`)."""
    if align not in ALIGNS:
        raise InvalidArgumentError(f"align must be one of {', '.join(ALIGNS)}, not {align!r}")
    wanted = unique_run_ids(run_ids) or []
    if not wanted:
        raise InvalidArgumentError("compare needs at least one run id")
    known = set(journals.run_ids)
    for run_id in wanted:
        if run_id not in known:
            raise RunNotFoundError(f"run {run_id} is not in these journals", run_id=run_id)
    entries = journals.to_arrow("entries")
    steps = entries.filter(
        pc.and_(
            pc.is_in(entries.column("run_id"), pa.array(wanted, pa.string())),
            pc.equal(entries.column("type"), "step"),
        )
    ).select(["run_id", "offset", "step_id", "value"])
    found: dict[str, dict[str, dict[str, Any]]] = {run_id: {} for run_id in wanted}
    offsets: dict[str, dict[str, int]] = {run_id: {} for run_id in wanted}
    seen: dict[str, int] = {}
    for run_id, offset, step_id, value in zip(
        *(steps.column(name).to_pylist() for name in steps.column_names), strict=True
    ):
        if step_id is None or step_id in found[run_id]:
            continue  # the first record of a step id is authoritative
        found[run_id][step_id] = json.loads(value)
        offsets[run_id][step_id] = offset
        seen.setdefault(step_id, len(seen))  # ties of offset: in the order the table has them
    rows: dict[str, dict[str, dict[str, Any]]] = {run_id: {} for run_id in wanted}
    members: dict[str, dict[str, list[str]]] = {run_id: {} for run_id in wanted}
    first_offset: dict[str, tuple[int, int]] = {}
    for run_id, by_step in found.items():
        ordered = sorted(by_step, key=offsets[run_id].__getitem__)
        if align == "step":
            groups = [(step_id, [step_id], step_id) for step_id in ordered]
        else:
            calls = {step_id for step_id in ordered if answer_of(by_step[step_id])}
            groups = [
                (loop.key, loop.steps, loop.calls[-1] if align == "answer" else loop.calls[0])
                if loop.calls
                else (loop.key, loop.steps, loop.key)
                for loop in logical_steps(ordered, calls)
            ]
        for row, folded, shown in groups:
            if row in rows[run_id]:
                continue  # a row key is a step id: never twice in a run
            rows[run_id][row], members[run_id][row] = by_step[shown], folded
            place = (offsets[run_id][folded[0]], seen[folded[0]])
            first_offset[row] = min(place, first_offset.get(row, place))
    order = sorted(first_offset, key=lambda row: first_offset[row])
    return Comparison(wanted, order, rows, members, found, align)


def _key(result: Any) -> str:
    """A result's comparable form as text: equal text, the same result."""
    return json.dumps(result, sort_keys=True, ensure_ascii=False)
