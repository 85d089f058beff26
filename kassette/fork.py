"""Fork planning: where a fork cuts its source run, and what the new run starts with.

A fork copies the source's entries before the fork point into a new run, then opens a session
there whose `start` names the source (`{"runId", "fromOffset"}`). This module decides the cut:
exactly one of an offset or a step id (the offset of that step's first `step` entry, so the
step runs live again), never past the source's end. The source is only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kassette.append import read
from kassette.codec import Entry, Source
from kassette.errors import InvalidArgumentError
from kassette.storage import Storage

__all__ = ["ForkPlan", "plan_fork"]


@dataclass(frozen=True)
class ForkPlan:
    """What a fork copies: the source's entries before `offset`, and where they came from."""

    source_run_id: str
    offset: int
    prefix: list[Entry]
    metadata: Any

    @property
    def source(self) -> Source:
        """The `source` a fork's own `start` records."""
        return {"runId": self.source_run_id, "fromOffset": self.offset}


def plan_fork(storage: Storage, run_id: str, offset: int | None, step: str | None) -> ForkPlan:
    """Where to fork run `run_id`: at `offset`, or at the first `step` entry of step id `step`."""
    if (offset is None) == (step is None):
        raise InvalidArgumentError("fork needs exactly one of offset or step", run_id=run_id)
    source = read(storage, run_id)[0]
    if step is not None:
        cut = next(
            (
                e["offset"]
                for e in source.entries
                if e.get("stepId") == step and e["type"] == "step"
            ),
            None,
        )
        if cut is None:
            raise InvalidArgumentError(
                f"run {run_id} has no step {step!r}", run_id=run_id, step_id=step
            )
    else:
        if type(offset) is not int or offset < 0:
            raise InvalidArgumentError(
                f"fork offset must be an int >= 0, not {offset!r}", run_id=run_id
            )
        cut = offset
    last = source.terminal["offset"] if source.terminal else source.next_offset
    if cut > last:
        raise InvalidArgumentError(
            f"fork offset {cut} is past the end of run {run_id} "
            f"({'terminal entry at' if source.terminal else 'next offset'} {last})",
            run_id=run_id,
            offset=cut,
        )
    metadata = source.first_start.get("metadata") if source.first_start else None
    return ForkPlan(run_id, cut, source.entries[:cut], metadata)
