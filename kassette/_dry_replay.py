"""Where a finished run's code now differs from its journal, found by a replay that writes
nothing to the run's storage.

A finished run never runs again: `start` of one raises `TerminalRunError`. When that happens
because the code changed (a prompt, a step added), the user wants to know where, and what to
do: fork the run at that step. `DryReplay` copies the journal up to (not including) its
terminal entry into a `MemoryStorage`, opens a session of the copy, and runs the workflow's
function against it with every step that would run live refused before its function is
called. So no step function runs and no model is asked: only the workflow's own code between
steps runs, as on every replay. The first step the code asks for that the journal does not
have, or a `ReplayMismatchError`, is where the code now differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kassette.core import Run, open_run, read_journal
from kassette.errors import ReplayMismatchError, TerminalRunError
from kassette.storage import MemoryStorage, Storage

__all__ = ["DryReplay", "Live", "explained"]


class Live(BaseException):
    """A step the journal does not have: the dry replay stops before calling its function.
    A `BaseException`, as `Suspended` is: the engine journals nothing for it and `except
    Exception` in the workflow cannot swallow it. `offset` is where a fork runs it: after the
    last step the code replayed."""

    def __init__(self, step_id: str, offset: int) -> None:
        super().__init__(step_id)
        self.step_id = step_id
        self.offset = offset


@dataclass
class DryReplay:
    """A session of an in-memory copy of finished run `run_id`, up to its end."""

    storage: Storage
    run_id: str
    input: Any
    version: str | None
    clock: Any

    def recorded_result(self) -> Any:
        return read_journal(self.storage, self.run_id).state.result

    def open(self) -> Run:
        """The copy's session, whose steps may only replay (`Live` otherwise)."""
        journal = read_journal(self.storage, self.run_id)
        terminal = journal.terminal
        snapshot = self.storage.read(self.run_id)
        assert terminal is not None and snapshot is not None  # a finished run
        lines = snapshot.data.splitlines(keepends=True)[: terminal["offset"]]
        copy = MemoryStorage()
        copy.append(self.run_id, b"".join(lines), token=None)
        run = open_run(copy, self.run_id, input=self.input, version=self.version, clock=self.clock)
        begin_step = run.begin_step
        after = [journal.state.creation_offset + 1]  # the offset after the last step replayed

        def replayed_only(name: str, **options: Any) -> Any:
            step = begin_step(name, **options)
            if not step.replayed:
                raise Live(step.step_id, after[0])
            if step.entry is not None:
                after[0] = max(after[0], step.entry["offset"] + 1)
            return step

        run.begin_step = replayed_only  # type: ignore[method-assign]
        return run


Found = tuple[str | None, int | None, str]  # (step, offset to fork at, how the code differs)


def difference(outcome: BaseException | Any, recorded_result: Any) -> Found:
    """Where and how the code differs, from how the dry replay ended: raised `outcome`, or
    returned it (a `RunResult`)."""
    if isinstance(outcome, Live):
        how = f"the code now runs step {outcome.step_id!r}, which the journal does not have there"
        return outcome.step_id, outcome.offset, how
    if isinstance(outcome, ReplayMismatchError):
        return (
            outcome.step_id,
            outcome.offset,
            f"the code now differs at step {outcome.step_id!r}: {outcome}",
        )
    if isinstance(outcome, BaseException):
        return None, None, f"replaying it with this code raises {type(outcome).__name__}: {outcome}"
    if outcome.unreplayed:
        return None, None, f"the code no longer runs step {outcome.unreplayed[0]!r}"
    if outcome.status == "suspended":
        return None, None, f"the code now waits for {', '.join(outcome.events)}"
    if outcome.status == "failed" and outcome.error is not None:
        return None, None, f"the code now fails: {outcome.error.name}: {outcome.error.message}"
    if outcome.result != recorded_result:
        return None, None, "the code now returns another result"
    return None, None, ""


def explained(error: TerminalRunError, found: Found, workflow: str) -> TerminalRunError:
    """`error` (a finished run started again) with what the dry replay found and what to do."""
    step, offset, how = found
    run_id = error.run_id
    if offset is not None:
        fork = f"{workflow}.fork({run_id!r}, offset={offset})"
        where = f"fork it where step {step!r} is: {fork}"
    else:
        fork = f"{workflow}.fork({run_id!r}, step=...)"
        where = f"fork it at the step to run again: {fork}"
    if how:
        message = (
            f"{error.message}, and {how}. A finished run does not run again: to run the changed "
            f"code from there, {where} (or start a new run id)"
        )
    else:
        message = (
            f"{error.message}, and the code replays it unchanged: {workflow}.status({run_id!r}) "
            f"reads its result; {fork} runs it again from a step"
        )
    return TerminalRunError(message, run_id=run_id, step_id=step, offset=error.offset)
