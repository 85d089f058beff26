"""Logical steps: a run's steps with each tool loop folded into one.

An agent's step that uses tools is several entries: the model call (`draft`), the tool steps
it asked for (`search`), the model call again with the results (`draft#2`), ... until the
model answers. Step ids of one name are `name`, `name#2`, `name#3` (`kassette.journal.StepIds`).
A *tool loop* is a run of model calls of one name, with only other (non-model) steps between
them: those are its tool steps. A *logical step* is a tool loop, or a step in no loop; it is
keyed by its first step id, so a branch that answered at once (`draft`) and one that called a
tool first (`draft`, `search`, `draft#2`) have the same logical step `draft`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import NamedTuple

__all__ = ["LogicalStep", "logical_steps", "step_name"]

_COUNT = re.compile(r"#\d+$")


class LogicalStep(NamedTuple):
    """`key` (its first step id), `steps` (every step id it folds, in order) and `calls`
    (those that are model calls: the last one answers)."""

    key: str
    steps: list[str]
    calls: list[str]


def step_name(step_id: str) -> str:
    """A step id without its repeat count: `draft#2` -> `draft`."""
    return _COUNT.sub("", step_id)


def logical_steps(step_ids: Sequence[str], calls: Collection[str]) -> list[LogicalStep]:
    """A run's step ids (in journal order) as logical steps; `calls` are the model calls."""
    found: list[LogicalStep] = []
    loop: LogicalStep | None = None
    between: list[str] = []  # steps after the loop's last call: its tools, if it goes on
    for step_id in step_ids:
        if step_id not in calls:
            if loop is None:
                found.append(LogicalStep(step_id, [step_id], []))
            else:
                between.append(step_id)
            continue
        if loop is not None and step_name(step_id) == step_name(loop.key):
            loop.steps.extend([*between, step_id])
            loop.calls.append(step_id)
        else:
            found.extend(LogicalStep(step, [step], []) for step in between)
            loop = LogicalStep(step_id, [step_id], [step_id])
            found.append(loop)
        between = []
    found.extend(LogicalStep(step, [step], []) for step in between)
    return found
