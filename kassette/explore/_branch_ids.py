"""Whether the branch ids a fan-out is about to use hold its own branches.

A fan-out's branch ids are deterministic (`PREFIX.0`, `PREFIX.1`, ...), so calling it again
continues its branches; but the same ids may hold another fan-out's branches (other params,
other edited results, another workflow version, samples), which a re-call must not report as
its own. `check_branches` reads how each existing branch differs from its source, from its
journal, and compares it with how the planned branch will differ, before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kassette._codec import Entry
from kassette._fork import plan_fork
from kassette.core import read_journal
from kassette.errors import InvalidArgumentError, RunExistsError, RunNotFoundError
from kassette.explore._running import Branch

if TYPE_CHECKING:
    from kassette._journal import Journal

__all__ = ["check_branches"]


def check_branches(branches: Sequence[Branch], kind: str, base: str) -> None:
    """Each branch id may hold only this same fork of the source, with this same difference
    (kind and variant): a re-call that would report another fan-out's branches as its own is
    refused, before anything runs."""
    from kassette.storage import validate_run_id

    source: Journal | None = None
    for branch in branches:
        validate_run_id(branch.run_id)
        try:
            journal = read_journal(branch.workflow.storage, branch.run_id)
        except RunNotFoundError:
            continue
        state, expected = journal.state, {"runId": branch.source, "fromOffset": branch.offset}
        if state.source != expected:
            what = (
                f"a fork of {state.source['runId']} at offset {state.source['fromOffset']}"
                if state.source
                else "not a fork"
            )
            raise RunExistsError(
                f"branch {branch.run_id} already exists and is {what}, not a fork of "
                f"{branch.source} at offset {branch.offset}: pass another prefix",
                run_id=branch.run_id,
            )
        if source is None:
            source = read_journal(branch.workflow.storage, branch.source)
        found = _difference(journal, source)
        wanted = _difference_of(branch, source)
        if found != wanted:
            free = _free_prefix(branch.workflow.storage, f"{base}.{kind}")
            raise InvalidArgumentError(
                f"prefix {base!r} holds another fan-out's branches: {branch.run_id} is "
                f"{_described(found)}, not {_described(wanted)}: pass prefix={free!r}",
                run_id=branch.run_id,
            )


Difference = tuple[str, Any]  # how a branch differs from its source: (kind, variant)


def _difference(journal: Journal, source: Journal) -> Difference:
    """How an existing branch differs from its source, as far as its journal tells: the
    result its fork recorded at the fork point, else its params, else the version its own
    `start` recorded (the workflow that forked it), else nothing (a sample)."""
    created = journal.state.creation_offset
    edit = _edited_value(journal.entries[created + 1 : created + 3])
    if edit is not None:
        return "results", edit
    params = journal.state.params or {}
    if params != (source.state.params or {}):
        return "params", params
    version = journal.entries[created].get("version")
    if version != source.state.version:
        return "workflows", version
    return "n", None


def _difference_of(branch: Branch, source: Journal) -> Difference:
    """How `branch` will differ from its source: what `_difference` will read back once it is
    forked. An edited result is what the fork records for it (a model call's text becomes a
    response of that provider: `plan_fork` says which); params equal to the source's and the
    source's own version read back as a sample."""
    if branch.edit is not None:
        plan = plan_fork(
            branch.workflow.storage, branch.source, branch.offset, None, result=branch.edit[0]
        )
        edit = _edited_value(plan.edits)
        assert edit is not None  # a fork with a result records it as edited
        return "results", edit
    if branch.params is not None and branch.params != (source.state.params or {}):
        return "params", branch.params
    if branch.workflow.version != source.state.version:
        return "workflows", branch.workflow.version
    return "n", None


def _described(difference: Difference) -> str:
    kind, variant = difference
    if kind == "n":
        return "a sample (n=) of the same run"
    if kind == "results":
        return f"a branch with the edited result {json.dumps(variant[0])[:80]}"
    if kind == "params":
        return f"a branch with params {json.dumps(variant)[:80]}"
    return f"a branch of workflow version {variant!r}"


def _free_prefix(storage: Any, wanted: str) -> str:
    """`wanted`, or `wanted-2`, `wanted-3`, ...: the first whose branch 0 does not exist."""
    for number in range(1, 1000):
        candidate = wanted if number == 1 else f"{wanted}-{number}"
        if storage.read(f"{candidate}.0") is None:
            return candidate
    return f"{wanted}-{number}"


def _edited_value(entries: Sequence[Entry]) -> tuple[Any] | None:
    """The result (or value) a fork recorded at its fork point, if it edited it: `entries`
    are the ones after the fork's own `start` (or the edits a fork plans)."""
    for entry in entries[:2]:
        if entry.get("edited") is True:
            return (entry["result"] if entry["type"] == "step" else entry.get("value"),)
    return None
