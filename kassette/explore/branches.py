"""Fan-out: fork one point of a run many ways, run the branches concurrently, rank them.

`fan_out(workflow, run_id, step=... | offset=..., n= | params= | results= | workflows=)` forks
the run at one point once per branch and runs every branch to its end (or its next suspend).
Branch run ids are deterministic, `PREFIX.0`, `PREFIX.1`, ..., so the same call made again (after
a crash, a kernel restart, or on purpose) forks nothing new: a branch that exists is retried
like a `start` of an existing run (finished ones only report their status), and a branch that
does not exist yet is forked. A fan-out is as durable as a run.

Branches run on threads (a `def` workflow) or as tasks on one event loop (an `async def` one,
also where a notebook's loop is already running), or on any `concurrent.futures.Executor`:
a `ProcessPoolExecutor`, or Dask's `distributed.Client.get_executor()` across machines, with
journals on storage every worker reaches (`s3://`, a shared filesystem). Only `_Branch`es and
`RunResult`s cross the executor's boundary; scores are computed here, so `score` may be any
callable.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from kassette.codec import check_json
from kassette.core import read_journal, run_status
from kassette.engine import ResultStatus, RunResult
from kassette.errors import (
    InvalidArgumentError,
    MetadataMismatchError,
    RunExistsError,
    RunNotFoundError,
)
from kassette.fork import plan_fork
from kassette.state import ErrorInfo, RunStatus
from kassette.workflow import AsyncWorkflow, Workflow

if TYPE_CHECKING:
    from kassette.explore.frames import Journals

__all__ = ["Branches", "fan_out"]

AnyWorkflow = Workflow[Any, Any] | AsyncWorkflow[Any, Any]
RAISED = "raised"  # a branch whose invocation raised: nothing journaled, a re-call retries it
FRAME_COLUMNS = ["run_id", "params", "status", "result", "error", "score", "unreplayed"]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_REPORTED: dict[str, ResultStatus] = {
    "completed": "success",
    "failed": "failed",
    "canceled": "canceled",
}


@dataclass(frozen=True)
class _Branch:
    """One branch, as sent to an executor: what to fork, where to, and how it differs."""

    workflow: AnyWorkflow
    source: str
    offset: int
    run_id: str
    params: dict[str, Any] | None = None
    edit: tuple[Any] | None = None  # (result,): the edited result at the fork point

    def fork_arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {"offset": self.offset, "new_run_id": self.run_id}
        if self.params is not None:
            arguments["params"] = self.params
        if self.edit is not None:
            arguments["result"] = self.edit[0]
        return arguments


@dataclass(frozen=True)
class _Raised:
    """A branch whose invocation raised (a `KassetteError`, or anything else)."""

    run_id: str
    error: ErrorInfo


Outcome = RunResult | _Raised


def _reported(run_id: str, status: RunStatus) -> RunResult | None:
    """The outcome of a branch that needs no new session: it ended, or waits for events."""
    if status.status in _REPORTED:
        return RunResult(run_id, _REPORTED[status.status], result=status.result, error=status.error)
    if status.status == "suspended":
        return RunResult(run_id, "suspended", events=status.pending_events)
    return None  # running, or crashed mid-way: retry it


def _existing(branch: _Branch) -> RunResult | None:
    try:
        status = run_status(branch.workflow.storage, branch.run_id)
    except RunNotFoundError:
        return None
    return _reported(branch.run_id, status)


def _run_branch(branch: _Branch) -> Outcome:
    """Fork (or retry) one branch and run it: what an executor runs. Never raises."""
    try:
        reported = _existing(branch)
        if reported is not None:
            return reported
        workflow = branch.workflow
        if isinstance(workflow, AsyncWorkflow):
            import asyncio

            return asyncio.run(workflow.fork(branch.source, **branch.fork_arguments()))
        return workflow.fork(branch.source, **branch.fork_arguments())
    except Exception as exc:
        return _Raised(branch.run_id, ErrorInfo(type(exc).__name__, str(exc)))


async def _run_branch_async(branch: _Branch) -> Outcome:
    """`_run_branch` for an `AsyncWorkflow`, as a task on the caller's loop."""
    try:
        reported = _existing(branch)
        if reported is not None:
            return reported
        assert isinstance(branch.workflow, AsyncWorkflow)
        return await branch.workflow.fork(branch.source, **branch.fork_arguments())
    except Exception as exc:
        return _Raised(branch.run_id, ErrorInfo(type(exc).__name__, str(exc)))


def _run_all(branches: Sequence[_Branch], executor: Executor | None) -> list[Outcome]:
    """Every branch's outcome, in the branches' order, run concurrently."""
    if not branches:
        return []
    if executor is None and all(isinstance(b.workflow, AsyncWorkflow) for b in branches):
        return _on_one_loop(branches)
    if executor is None:
        with ThreadPoolExecutor(len(branches), thread_name_prefix="kassette-branch") as pool:
            return list(pool.map(_run_branch, branches))
    futures = [executor.submit(_run_branch, branch) for branch in branches]
    return [_outcome_of(branch, future) for branch, future in zip(branches, futures, strict=True)]


def _outcome_of(branch: _Branch, future: Any) -> Outcome:
    """A future's outcome; a worker that died or could not take the task is the branch's."""
    try:
        outcome: Outcome = future.result()
    except Exception as exc:
        return _Raised(branch.run_id, ErrorInfo(type(exc).__name__, str(exc)))
    return outcome


def _on_one_loop(branches: Sequence[_Branch]) -> list[Outcome]:
    """All branches as tasks of one event loop; in a thread of its own when this thread
    already runs a loop (a notebook's), which cannot be blocked on."""
    import asyncio

    async def gather() -> list[Outcome]:
        return list(await asyncio.gather(*(_run_branch_async(b) for b in branches)))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    with ThreadPoolExecutor(1, thread_name_prefix="kassette-fan-out") as pool:
        return pool.submit(asyncio.run, gather()).result()


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


class Branches:
    """The branches of one fan-out: their outcomes as a frame, ranked by score.

    `frame` has one row per branch: `run_id`, `params` (the branch's params), `status`
    (a `RunResult` status, or "raised" when the invocation raised before it could end the
    run), `result`, `error`, `score` (NaN where the branch did not succeed or `score` raised)
    and `unreplayed` (recorded steps the branch's code did not replay).
    """

    def __init__(
        self,
        branches: Sequence[_Branch],
        outcomes: Sequence[Outcome],
        *,
        score: Callable[[RunResult], float] | None,
        executor: Executor | None,
    ) -> None:
        self._branches = list(branches)
        self._outcomes = list(outcomes)
        self._score = score
        self._executor = executor
        self._frame: pd.DataFrame | None = None
        self._params_of_source: dict[str, Any] | None = None

    @property
    def source(self) -> str:
        """The run every branch was forked from."""
        return self._branches[0].source if self._branches else ""

    @property
    def run_ids(self) -> list[str]:
        return [branch.run_id for branch in self._branches]

    @property
    def results(self) -> list[RunResult | None]:
        """Each branch's `RunResult` (None where its invocation raised)."""
        return [o if isinstance(o, RunResult) else None for o in self._outcomes]

    @property
    def frame(self) -> pd.DataFrame:
        """One row per branch; see the class docstring."""
        if self._frame is None:
            rows = [self._row(b, o) for b, o in zip(self._branches, self._outcomes, strict=True)]
            self._frame = pd.DataFrame(rows, columns=FRAME_COLUMNS)
            self._frame["score"] = self._frame["score"].astype("float64")
        return self._frame

    def best(self, k: int = 1) -> list[str]:
        """The run ids of the `k` highest-scoring branches, best first (NaN scores never)."""
        if type(k) is not int or k < 1:
            raise InvalidArgumentError(f"best needs k >= 1, not {k!r}")
        frame = self.frame.dropna(subset=["score"])
        ranked = frame.sort_values("score", ascending=False, kind="stable")
        return ranked["run_id"].head(k).tolist()  # type: ignore[no-any-return]

    def resume(self, event: str, value: Any = None) -> Branches:
        """Deliver `value` for `event` to every suspended branch waiting for it, and run them
        on (concurrently, as the fan-out did). Returns these branches, updated."""
        waiting = [
            index
            for index, outcome in enumerate(self._outcomes)
            if isinstance(outcome, RunResult)
            and outcome.status == "suspended"
            and _waits_for(outcome, event)
        ]
        resumed = _resume_all(
            [self._branches[i] for i in waiting], event, _json(value), self._executor
        )
        for index, outcome in zip(waiting, resumed, strict=True):
            self._outcomes[index] = outcome
        self._frame = None
        return self

    @property
    def journals(self) -> Journals:
        """The branches' journals (`kx.load` of their run ids)."""
        from kassette.explore.frames import load

        return load(self._storage(), run_ids=self.run_ids)

    def compare(self, *, values: Literal["text", "json", "python"] = "text") -> pd.DataFrame:
        """`kx.compare` of the source and every branch, step by step: a model call shows its
        answer and the request parameters that differ from the source's (`values="json"`:
        the raw response)."""
        from kassette.explore.compare import compare
        from kassette.explore.frames import load

        run_ids = [self.source, *self.run_ids]
        return compare(load(self._storage(), run_ids=run_ids), run_ids, values=values)

    def __len__(self) -> int:
        return len(self._branches)

    def __repr__(self) -> str:
        counts = self.frame["status"].value_counts()
        summary = ", ".join(f"{count} {status}" for status, count in counts.items())
        return f"<Branches of {self.source}: {len(self)} ({summary})>"

    def _repr_html_(self) -> str:
        import html

        title = html.escape(repr(self)[1:-1])
        return f"<div><p><b>{title}</b></p>{self.frame.to_html(index=False, na_rep='')}</div>"

    def _storage(self) -> Any:
        return self._branches[0].workflow.storage

    def _row(self, branch: _Branch, outcome: Outcome) -> dict[str, Any]:
        params = branch.params if branch.params is not None else self._source_params()
        if isinstance(outcome, _Raised):
            return {
                "run_id": branch.run_id,
                "params": params,
                "status": RAISED,
                "result": None,
                "error": str(outcome.error),
                "score": math.nan,
                "unreplayed": [],
            }
        return {
            "run_id": branch.run_id,
            "params": params,
            "status": outcome.status,
            "result": outcome.result,
            "error": str(outcome.error) if outcome.error else None,
            "score": self._score_of(outcome),
            "unreplayed": list(outcome.unreplayed),
        }

    def _score_of(self, outcome: RunResult) -> float:
        if self._score is None or outcome.status != "success":
            return math.nan
        try:
            return float(self._score(outcome))
        except Exception:
            return math.nan

    def _source_params(self) -> dict[str, Any]:
        if self._params_of_source is None:
            self._params_of_source = _params_of(self._storage(), self.source)
        return self._params_of_source


def _params_of(storage: Any, run_id: str) -> dict[str, Any]:
    """The params a run was started (or forked) with; `{}` when none."""
    return dict(read_journal(storage, run_id).state.params or {})


def _waits_for(outcome: RunResult, event: str) -> bool:
    return any(e == event or e.split("#", 1)[0].rsplit("/", 1)[-1] == event for e in outcome.events)


@dataclass(frozen=True)
class _Resume:
    branch: _Branch
    event: str
    value: Any


def _resume_one(resume: _Resume) -> Outcome:
    workflow, run_id = resume.branch.workflow, resume.branch.run_id
    try:
        if isinstance(workflow, AsyncWorkflow):
            import asyncio

            return asyncio.run(workflow.resume(run_id, resume.event, resume.value))
        return workflow.resume(run_id, resume.event, resume.value)
    except Exception as exc:
        return _Raised(run_id, ErrorInfo(type(exc).__name__, str(exc)))


def _resume_all(
    branches: Sequence[_Branch], event: str, value: Any, executor: Executor | None
) -> list[Outcome]:
    resumes = [_Resume(branch, event, value) for branch in branches]
    if not resumes:
        return []
    if executor is None:
        with ThreadPoolExecutor(len(resumes), thread_name_prefix="kassette-branch") as pool:
            return list(pool.map(_resume_one, resumes))
    futures = [executor.submit(_resume_one, resume) for resume in resumes]
    return [_outcome_of(r.branch, f) for r, f in zip(resumes, futures, strict=True)]


# -- planning: every check before anything is written ------------------------------------------


def fan_out(
    workflow: AnyWorkflow,
    run_id: str,
    *,
    step: str | None = None,
    offset: int | None = None,
    n: int | None = None,
    params: Sequence[Mapping[str, Any]] | None = None,
    results: Sequence[Any] | None = None,
    workflows: Sequence[AnyWorkflow] | None = None,
    prefix: str | None = None,
    executor: Executor | None = None,
    score: Callable[[RunResult], float] | None = None,
) -> Branches:
    """Fork `run_id` at one point once per branch and run the branches concurrently.

    The fork point is `step` (a step id: that step runs again in each branch) or `offset`,
    exactly one. The branches vary in exactly one way: `n` (that many, all alike: best-of-n
    sampling), `params` (one per params dict, read in the workflow as `ctx.params`),
    `results` (one per edited result of the step at the fork point, which is not run), or
    `workflows` (one per workflow object: code variants, on the same storage). Branch `i` is
    run `f"{prefix}.{i}"`, `prefix` defaulting to `f"{run_id}.{step or offset}"` (characters a
    run id cannot hold become `_`). Calling again with the same arguments retries: nothing is
    forked twice and finished branches are not run again; for a new set, pass another `prefix`.

    `executor` runs the branches (default: threads, or one event loop for `async def`
    workflows); `score` maps each successful branch's `RunResult` to a number for
    `Branches.best`. A branch that fails, suspends or raises is a row of `Branches.frame`,
    never an exception from here. Bad arguments raise `InvalidArgumentError` and a branch id
    that holds another run raises `RunExistsError`, before anything is written.
    """
    if not isinstance(workflow, Workflow | AsyncWorkflow):
        raise InvalidArgumentError(f"fan_out needs a kassette workflow, not {workflow!r}")
    if executor is not None and not isinstance(executor, Executor) and not _is_executor(executor):
        raise InvalidArgumentError(
            f"executor must be a concurrent.futures.Executor (or Dask's), not {executor!r}"
        )
    variants = _variants(n=n, params=params, results=results, workflows=workflows)
    cut = plan_fork(workflow.storage, run_id, offset, step).offset
    base = _prefix(prefix, run_id, step, cut)
    branches = [
        _Branch(
            workflow=variant.get("workflow", workflow),
            source=run_id,
            offset=cut,
            run_id=f"{base}.{index}",
            params=variant.get("params"),
            edit=variant.get("edit"),
        )
        for index, variant in enumerate(variants)
    ]
    for branch in branches:
        _check_branch_id(branch)
    if isinstance(executor, ProcessPoolExecutor):
        _check_picklable(branches[0])
    outcomes = _run_all(branches, executor)
    return Branches(branches, outcomes, score=score, executor=executor)


def _is_executor(executor: object) -> bool:
    """Dask's `ClientExecutor` is an `Executor`; anything else with `submit` works as well."""
    return callable(getattr(executor, "submit", None))


def _variants(
    *,
    n: int | None,
    params: Sequence[Mapping[str, Any]] | None,
    results: Sequence[Any] | None,
    workflows: Sequence[AnyWorkflow] | None,
) -> list[dict[str, Any]]:
    ways = {"n": n, "params": params, "results": results, "workflows": workflows}
    given = [name for name, value in ways.items() if value is not None]
    if len(given) != 1:
        raise InvalidArgumentError(
            "fan_out needs exactly one of n, params, results or workflows"
            + (f", got {', '.join(given)}" if given else "")
        )
    if n is not None:
        if type(n) is not int or n < 1:
            raise InvalidArgumentError(f"n must be an int >= 1, not {n!r}")
        return [{} for _ in range(n)]
    listed = _as_list(
        params if params is not None else results if results is not None else workflows
    )
    if not listed:
        raise InvalidArgumentError(f"fan_out needs at least one of {given[0]}")
    if params is not None:
        for item in listed:
            if not isinstance(item, Mapping):
                raise InvalidArgumentError(f"params must be JSON objects (dicts), not {item!r}")
        return [{"params": _checked(dict(item), "params")} for item in listed]
    if results is not None:
        return [{"edit": (_checked(item, "an edited result"),)} for item in listed]
    for item in listed:
        if not isinstance(item, Workflow | AsyncWorkflow):
            raise InvalidArgumentError(f"workflows must be kassette workflows, not {item!r}")
    return [{"workflow": item} for item in listed]


def _as_list(values: Iterable[Any] | None) -> list[Any]:
    if values is None or isinstance(values, str | bytes | Mapping):
        raise InvalidArgumentError(f"expected a list, not {values!r}")
    return list(values)


def _checked(value: Any, what: str) -> Any:
    return check_json(value, what)


def _prefix(prefix: str | None, run_id: str, step: str | None, cut: int) -> str:
    from kassette.storage import validate_run_id

    if prefix is None:
        prefix = f"{run_id}.{_UNSAFE.sub('_', step) if step is not None else cut}"
    validate_run_id(f"{prefix}.0")
    return prefix


def _check_branch_id(branch: _Branch) -> None:
    """A branch id may hold only this same fork of the source, with these params and edit:
    a re-call that would report another fan-out's branches is refused, before anything runs."""
    from kassette.storage import validate_run_id

    validate_run_id(branch.run_id)
    try:
        journal = read_journal(branch.workflow.storage, branch.run_id)
    except RunNotFoundError:
        return
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
    if branch.params is not None and branch.params != (state.params or {}):
        raise MetadataMismatchError(
            f"branch {branch.run_id} exists with params {state.params or {}}, not "
            f"{branch.params}: pass another prefix",
            run_id=branch.run_id,
        )
    if branch.edit is not None and _edited_value(journal) != branch.edit:
        raise MetadataMismatchError(
            f"branch {branch.run_id} exists with another edited result: pass another prefix",
            run_id=branch.run_id,
        )


def _edited_value(journal: Any) -> tuple[Any] | None:
    """The result (or value) a fork recorded at its fork point, if it edited it."""
    created = journal.state.created_offset or 0
    for entry in journal.entries[created + 1 : created + 3]:
        if entry.get("edited") is True:
            return (entry["result"] if entry["type"] == "step" else entry.get("value"),)
    return None


def _check_picklable(branch: _Branch) -> None:
    import pickle

    try:
        pickle.dumps(branch)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise InvalidArgumentError(
            "a ProcessPoolExecutor pickles the workflow: define its function at the top level "
            "of an importable module (not in a notebook) and use LocalStorage or S3Storage, "
            f"or run the branches on Dask, which pickles by value ({exc})"
        ) from exc
