"""Fork planning: where a fork cuts its source run, and what the new run starts with.

A fork copies the source's entries before the fork point into a new run, then opens a session
there whose `start` names the source (`{"runId", "fromOffset"}`). This module decides the cut:
exactly one of an offset or a step id (the offset of that step's first `step` entry, so the
step runs live again), never past the source's end. The source is only read.

A fork may also *edit* its fork point: given a `result`, the entry at the cut is recorded in the
new run's first session, after its `start`, with that result instead of being run: a step
entry marked `"edited": true`, or for a suspend (or its resume) the resume that delivers the
result as the event's value, marked the same way. A model call's step (see
`kassette._llm_calls`) is edited with its answer's text, recorded as a response of that
provider carrying it, or with a whole response of the same kind; its `call` is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kassette._append import read
from kassette._codec import Entry, Source, check_json, event_id, event_name
from kassette._journal import Journal
from kassette._llm_calls import (
    describe_response,
    read_llm_call,
    read_llm_result,
    response_from_text,
    same_response_shape,
)
from kassette.errors import InputMismatchError, InvalidArgumentError, RunExistsError
from kassette.storage import Storage

__all__ = ["NO_RESULT", "ForkPlan", "last_fork_offset", "plan_fork"]


class _NoResult:
    def __repr__(self) -> str:
        return "NO_RESULT"


NO_RESULT: Any = _NoResult()  # a fork's `result` when it edits nothing (None is JSON null)


@dataclass(frozen=True)
class ForkPlan:
    """What a fork copies: the source's entries before `offset`, and where they came from."""

    source_run_id: str
    offset: int
    prefix: list[Entry]
    metadata: Any
    params: dict[str, Any] | None = None
    edits: tuple[Entry, ...] = ()  # entries after the fork's start: `type` and fields

    @property
    def source(self) -> Source:
        """The `source` a fork's own `start` records."""
        return {"runId": self.source_run_id, "fromOffset": self.offset}

    def check_same(self, journal: Journal) -> None:
        """A fork into an existing run is a retry only of that same fork (and edit)."""
        run_id, source = journal.run_id, journal.state.source
        if source != self.source:
            what = (
                f"a fork of {source['runId']} at offset {source['fromOffset']}"
                if source
                else "not a fork"
            )
            raise RunExistsError(
                f"cannot fork {self.source_run_id} at offset {self.offset} into {run_id}: that run "
                f"exists and is {what}",
                run_id=run_id,
            )
        if not self.edits:
            return
        created = journal.state.creation_offset
        recorded = [
            {k: v for k, v in entry.items() if k not in ("session", "offset", "timestamp")}
            for entry in journal.entries[created + 1 : created + 1 + len(self.edits)]
        ]
        if recorded != list(self.edits):
            raise InputMismatchError(
                f"run {run_id} is this fork with another edited result at offset {self.offset}",
                run_id=run_id,
            )


def plan_fork(
    storage: Storage,
    run_id: str,
    offset: int | None,
    step: str | None,
    *,
    result: Any = NO_RESULT,
) -> ForkPlan:
    """Where to fork run `run_id`: at `offset`, or at the first `step` entry of step id `step`;
    with `result`, what the entry at that point records instead (see the module docstring)."""
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
    terminal = source.terminal
    last = last_fork_offset(None if terminal is None else terminal["offset"], source.next_offset)
    if cut > last:
        raise InvalidArgumentError(
            f"fork offset {cut} is past the end of run {run_id} "
            f"({'terminal entry at' if source.terminal else 'next offset'} {last})",
            run_id=run_id,
            offset=cut,
        )
    edits = () if result is NO_RESULT else _edits(source.entries, cut, result, run_id)
    return ForkPlan(
        run_id,
        cut,
        source.entries[:cut],
        source.state.input,
        source.state.params,
        edits,
    )


def last_fork_offset(terminal_offset: int | None, next_offset: int) -> int:
    """The last offset a run can be forked at: its terminal entry's, if it ended (a fork there
    runs the ending again), else the offset its next entry would take (a fork there continues
    where the run stands). `plan_fork` refuses a later one; `kx.ForkExplorer` ends its offset
    slider there, so the two never disagree."""
    return next_offset if terminal_offset is None else terminal_offset


def _edits(entries: Sequence[Entry], cut: int, result: Any, run_id: str) -> tuple[Entry, ...]:
    """The entries that record `result` in place of the entry at `cut`."""
    if cut >= len(entries):
        raise InvalidArgumentError(
            f"run {run_id} has no entry at offset {cut} to edit", run_id=run_id, offset=cut
        )
    value = check_json(_as_json(result), f"edited result at offset {cut} of run {run_id}")
    entry = entries[cut]
    kind = entry["type"]
    if kind == "step" and entry.get("kind", "step") == "step":
        edited = {
            "type": "step",
            "stepId": entry["stepId"],
            "name": entry["name"],
            "result": _step_result(entry, value, cut, run_id),
        }
        if "call" in entry:  # the request stays the recorded one: only the answer is edited
            edited["call"] = entry["call"]
        edited["edited"] = True
        return (edited,)
    if kind in ("suspend", "resume"):
        key = event_id(entry)
        resume = {
            "type": "resume",
            "eventId": key,
            "event": event_name(entry),
            "value": value,
            "edited": True,
        }
        if kind == "resume":
            return (resume,)
        suspend = {"type": "suspend", "eventId": key, "event": event_name(entry)}
        if isinstance(entry.get("reason"), str):
            suspend["reason"] = entry["reason"]
        return (suspend, resume)
    what = f"a {entry.get('kind')} step" if kind == "step" else f"a {kind} entry"
    raise InvalidArgumentError(
        f"cannot edit offset {cut} of run {run_id}: it is {what}; only a step's result or a "
        "suspend's value can be edited",
        run_id=run_id,
        offset=cut,
    )


def _step_result(entry: Entry, value: Any, cut: int, run_id: str) -> Any:
    """What an edited step records for `value`. A model call's edit is its answer's text (made
    into a response of that provider) or a whole response of the same kind; any other step
    takes any JSON value but a model's response."""
    step = f"step {entry['stepId']!r} at offset {cut} of run {run_id}"
    call = read_llm_call(entry)
    if call is None:
        given = read_llm_result(value)
        if given is None:
            return value
        raise InvalidArgumentError(
            f"cannot edit {step} with {describe_response(given)}: the step is not a model "
            "call; give the value the step itself returns",
            run_id=run_id,
            step_id=entry["stepId"],
            offset=cut,
        )
    if isinstance(value, str):
        return response_from_text(call, value)
    if same_response_shape(call, value):
        return value
    given = read_llm_result(value)
    what = describe_response(given) if given is not None else f"{_kind_of(value)}"
    raise InvalidArgumentError(
        f"cannot edit {step} with {what}: it is a model call ({call.provider} {call.method}); "
        f"give the answer's text (a string) or {describe_response(call)} as the API returns it",
        run_id=run_id,
        step_id=entry["stepId"],
        offset=cut,
    )


def _as_json(value: Any) -> Any:
    """A provider SDK's response object (the `openai` and `anthropic` SDKs' pydantic models)
    as the JSON the API sent, which is what the shape check reads and a step records; any
    other value as given."""
    dump = getattr(value, "to_dict", None)
    if callable(dump) and callable(getattr(value, "model_dump", None)):
        return dump(mode="json")
    return value


def _kind_of(value: Any) -> str:
    """A JSON value's kind, for messages: `a number`, `an object that is no response`, ..."""
    if isinstance(value, dict):
        return "an object that is no model response"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if value is None:
        return "null"
    return f"a number ({value!r})"
