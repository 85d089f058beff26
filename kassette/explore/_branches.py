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
journals on storage every worker reaches (`s3://`, a shared filesystem). Only `Branch`es and
`RunResult`s cross the executor's boundary; scores are computed here, so `score` may be any
callable.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from kassette._codec import check_json
from kassette._engine import RunResult
from kassette._fork import plan_fork
from kassette._workflow import AsyncWorkflow, Workflow
from kassette.core import read_journal
from kassette.errors import InvalidArgumentError, RunExistsError, RunNotFoundError
from kassette.explore._progress import Budget, Watch, display_for
from kassette.explore._running import (
    AnyWorkflow,
    Board,
    Branch,
    Halted,
    Outcome,
    Raised,
    Resume,
    Stop,
    resume_all,
    run_all,
)

if TYPE_CHECKING:
    from kassette.explore._frames import Journals

__all__ = ["Branches", "FanOutInterrupted", "fan_out"]

RAISED = "raised"  # a branch whose invocation raised: nothing journaled, a re-call retries it
STOPPED = "stopped"  # a branch the fan-out stopped (or never started): open, a re-call continues
FRAME_COLUMNS = [
    "run_id",
    "params",
    "status",
    "result",
    "error",
    "score",
    "unreplayed",
    "stopped_by",
    "cost_usd",
]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class FanOutInterrupted(KeyboardInterrupt):
    """A `KeyboardInterrupt` (Ctrl-C, a kernel interrupt) that stopped a `fan_out`.

    `branches` holds what the fan-out reached: the branches that ended, and those it stopped
    (status "stopped", `stopped_by` "interrupt"), whose runs stay open. The same `fan_out`
    call continues them, replaying what they journaled. It is a `KeyboardInterrupt`, so code
    that does not look for it stops as an interrupt would stop it.
    """

    def __init__(self, branches: Branches) -> None:
        super().__init__(f"fan-out interrupted: {branches!r}")
        self.branches = branches


class Branches:
    """The branches of one fan-out: their outcomes as a frame, ranked by score.

    `frame` has one row per branch: `run_id`, `params` (the branch's params), `status`
    (a `RunResult` status; "raised" when the invocation raised before it could end the run;
    "stopped" when the fan-out stopped the branch at a step boundary, or never started it),
    `result`, `error`, `score` (NaN where the branch did not succeed or `score` raised),
    `unreplayed` (recorded steps the branch's code did not replay), `stopped_by` (why a
    stopped branch stopped: "interrupt" or "budget"; None otherwise) and `cost_usd` (what the
    branch's own model calls cost, as the runs frame counts it; `<NA>` where unknown or
    where the branch has no journal). Raised and stopped
    branches' runs are open: the same `fan_out` call retries or continues them.
    """

    def __init__(
        self,
        branches: Sequence[Branch],
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
        """Each branch's `RunResult` (None where its invocation raised or it was stopped)."""
        return [o if isinstance(o, RunResult) else None for o in self._outcomes]

    @property
    def frame(self) -> pd.DataFrame:
        """One row per branch; see the class docstring."""
        if self._frame is None:
            rows = [self._row(b, o) for b, o in zip(self._branches, self._outcomes, strict=True)]
            frame = pd.DataFrame(rows, columns=FRAME_COLUMNS[:-1])
            frame["score"] = frame["score"].astype("float64")
            frame["cost_usd"] = self._costs()
            self._frame = frame
        return self._frame

    def best(self, k: int = 1) -> list[str]:
        """The run ids of the `k` highest-scoring branches, best first (NaN scores never).

        Raises `InvalidArgumentError` when the fan-out had no `score`; warns (`RuntimeWarning`)
        and returns `[]` when no branch has a score (none succeeded, or `score` raised)."""
        if type(k) is not int or k < 1:
            raise InvalidArgumentError(f"best needs k >= 1, not {k!r}")
        if self._score is None:
            raise InvalidArgumentError("best ranks by score: pass score= to fan_out")
        frame = self.frame.dropna(subset=["score"])
        if frame.empty:
            counts = self.frame["status"].value_counts()
            statuses = ", ".join(f"{count} {status}" for status, count in counts.items())
            warnings.warn(
                f"best({k}): no branch has a score ({statuses}; a branch is scored only if "
                "it succeeded and score returned a number)",
                RuntimeWarning,
                stacklevel=2,
            )
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
        value = _checked(value, f"the value resumed for {event!r}")
        resumes = [Resume(self._branches[i], event, value) for i in waiting]
        resumed = resume_all(resumes, self._executor)
        for index, outcome in zip(waiting, resumed, strict=True):
            self._outcomes[index] = outcome
        self._frame = None
        return self

    @property
    def journals(self) -> Journals:
        """The branches' journals (`kx.load` of their run ids)."""
        from kassette.explore._frames import load

        return load(self._storage(), run_ids=self.run_ids)

    def compare(
        self,
        *,
        align: Literal["step", "answer", "first"] = "answer",
        values: Literal["text", "json", "python"] = "text",
    ) -> pd.DataFrame:
        """`kx.compare` of the source and every branch: a model call shows its answer text, and
        the request parameters that differ from the source's are in
        `frame.attrs["request_changes"]` (`values="json"`: the raw response). Aligned by
        answer, as CompareView does: a step's tool loop is one row holding its answering call
        (`align="step"`: a row per step id; `align="first"`: the loop's first call)."""
        from kassette.explore._compare import compare
        from kassette.explore._frames import load

        run_ids = [self.source, *self.run_ids]
        return compare(load(self._storage(), run_ids=run_ids), run_ids, values=values, align=align)

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

    def _row(self, branch: Branch, outcome: Outcome) -> dict[str, Any]:
        row: dict[str, Any] = {
            "run_id": branch.run_id,
            "params": branch.params if branch.params is not None else self._source_params(),
            "status": RAISED,
            "result": None,
            "error": None,
            "score": math.nan,
            "unreplayed": [],
            "stopped_by": None,
        }
        if isinstance(outcome, Raised):
            row["error"] = str(outcome.error)
        elif isinstance(outcome, Halted):
            row.update(status=STOPPED, stopped_by=outcome.reason)
        else:
            row.update(
                status=outcome.status,
                result=outcome.result,
                error=str(outcome.error) if outcome.error else None,
                score=self._score_of(outcome),
                unreplayed=list(outcome.unreplayed),
            )
        return row

    def _costs(self) -> pd.Series:
        """Each branch's own model calls' cost (the runs frame's `cost_usd`: the copied
        prefix is the source's), `<NA>` where unknown or where the branch has no journal."""
        from kassette.explore._frames import load

        storage = self._storage()
        try:
            runs = load(storage, run_ids=self.run_ids).runs
        except RunNotFoundError:  # a branch that raised before its fork was written
            existing = [run_id for run_id in self.run_ids if storage.read(run_id) is not None]
            runs = load(storage, run_ids=existing).runs
        costs = runs.set_index("run_id")["cost_usd"].reindex(self.run_ids)
        return costs.reset_index(drop=True).astype("Float64")

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
    max_workers: int | None = None,
    budget: Mapping[str, float] | None = None,
    progress: bool = True,
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
    workflows), at most `max_workers` at once (default: all); `score` maps each successful
    branch's `RunResult` to a number for `Branches.best`. `budget` (`{"tokens": N}` and/or
    `{"usd": X}`) stops the fan-out from starting new steps once its own model calls (in
    this and earlier calls, not the copied prefix's) reach it; `progress` shows a live count
    of branches and tokens (a notebook widget, a bar on a terminal's stderr).

    A branch that fails, suspends, raises or is stopped is a row of `Branches.frame`, never an
    exception from here. A `KeyboardInterrupt` stops every branch before its next step and
    raises `FanOutInterrupted`, whose `branches` holds what ended; the stopped runs stay open
    and the same call continues them. Bad arguments raise `InvalidArgumentError`, a prefix
    holding another fan-out's branches `InvalidArgumentError` naming a prefix to pass, and a
    branch id that holds another run `RunExistsError`, all before anything is written.
    """
    if not isinstance(workflow, Workflow | AsyncWorkflow):
        raise InvalidArgumentError(f"fan_out needs a kassette workflow, not {workflow!r}")
    if executor is not None and not isinstance(executor, Executor) and not _is_executor(executor):
        raise InvalidArgumentError(
            f"executor must be a concurrent.futures.Executor (or Dask's), not {executor!r}"
        )
    if max_workers is not None and (type(max_workers) is not int or max_workers < 1):
        raise InvalidArgumentError(f"max_workers must be an int >= 1, not {max_workers!r}")
    limit = Budget.of(budget)
    kind, variants = _variants(n=n, params=params, results=results, workflows=workflows)
    cut = plan_fork(workflow.storage, run_id, offset, step).offset
    base = _prefix(prefix, run_id, step, cut)
    branches = [
        Branch(
            workflow=variant.get("workflow", workflow),
            source=run_id,
            offset=cut,
            run_id=f"{base}.{index}",
            params=variant.get("params"),
            edit=variant.get("edit"),
        )
        for index, variant in enumerate(variants)
    ]
    _check_branches(branches, kind, base)
    if isinstance(executor, ProcessPoolExecutor):
        _check_picklable(branches[0])
    board = Board(len(branches))
    stop = Stop(across_processes=executor is not None)
    abandoned = True  # until run_all says otherwise: a stop flag must outlive its readers
    try:
        with Watch(branches, board, stop, budget=limit, display=display_for(progress)):
            interrupted, abandoned = run_all(
                branches, executor, max_workers=max_workers, stop=stop, board=board
            )
    finally:
        stop.close(abandoned=abandoned)
    outcomes = [o for o in board.outcomes if o is not None]
    found = Branches(branches, outcomes, score=score, executor=executor)
    if interrupted:
        raise FanOutInterrupted(found)
    return found


def _is_executor(executor: object) -> bool:
    """Dask's `ClientExecutor` is an `Executor`; anything else with `submit` works as well."""
    return callable(getattr(executor, "submit", None))


def _variants(
    *,
    n: int | None,
    params: Sequence[Mapping[str, Any]] | None,
    results: Sequence[Any] | None,
    workflows: Sequence[AnyWorkflow] | None,
) -> tuple[str, list[dict[str, Any]]]:
    """How the branches differ (the argument's name) and each branch's difference."""
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
        return "n", [{} for _ in range(n)]
    listed = _as_list(
        params if params is not None else results if results is not None else workflows
    )
    if not listed:
        raise InvalidArgumentError(f"fan_out needs at least one of {given[0]}")
    if params is not None:
        for item in listed:
            if not isinstance(item, Mapping):
                raise InvalidArgumentError(f"params must be JSON objects (dicts), not {item!r}")
        return "params", [{"params": _checked(dict(item), "params")} for item in listed]
    if results is not None:
        return "results", [{"edit": (_checked(item, "an edited result"),)} for item in listed]
    for item in listed:
        if not isinstance(item, Workflow | AsyncWorkflow):
            raise InvalidArgumentError(f"workflows must be kassette workflows, not {item!r}")
    return "workflows", [{"workflow": item} for item in listed]


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


def _check_branches(branches: Sequence[Branch], kind: str, base: str) -> None:
    """Each branch id may hold only this same fork of the source, with this same difference
    (kind and variant): a re-call that would report another fan-out's branches as its own is
    refused, before anything runs."""
    from kassette.storage import validate_run_id

    source_params: dict[str, Any] | None = None
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
        if source_params is None:
            source_params = _params_of(branch.workflow.storage, branch.source)
        found = _difference(journal, source_params, branch.workflow.version)
        wanted = _difference_of(branch, kind, source_params)
        if found != wanted:
            free = _free_prefix(branch.workflow.storage, f"{base}.{kind}")
            raise InvalidArgumentError(
                f"prefix {base!r} holds another fan-out's branches: {branch.run_id} is "
                f"{_described(found)}, not {_described(wanted)}: pass prefix={free!r}",
                run_id=branch.run_id,
            )


Difference = tuple[str, Any]  # how a branch differs from its source: (kind, variant)


def _difference(journal: Any, source_params: dict[str, Any], version: str | None) -> Difference:
    """How an existing branch differs from its source, as far as its journal tells."""
    edit = _edited_value(journal)
    if edit is not None:
        return "results", edit
    params = journal.state.params or {}
    if params != source_params:
        return "params", params
    if journal.state.version != version:
        return "workflows", journal.state.version
    return "n", None


def _difference_of(branch: Branch, kind: str, source_params: dict[str, Any]) -> Difference:
    """How `branch` will differ from its source (what `_difference` will read back)."""
    if kind == "results":
        return "results", branch.edit
    if kind == "params" and branch.params != source_params:
        return "params", branch.params
    if kind == "workflows":
        return "workflows", branch.workflow.version
    return "n", None  # params equal to the source's read back as a sample


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


def _edited_value(journal: Any) -> tuple[Any] | None:
    """The result (or value) a fork recorded at its fork point, if it edited it."""
    created = journal.state.creation_offset
    for entry in journal.entries[created + 1 : created + 3]:
        if entry.get("edited") is True:
            return (entry["result"] if entry["type"] == "step" else entry.get("value"),)
    return None


def _check_picklable(branch: Branch) -> None:
    import pickle

    try:
        pickle.dumps(branch)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise InvalidArgumentError(
            "a ProcessPoolExecutor pickles the workflow: define its function at the top level "
            "of an importable module (not in a notebook) and use LocalStorage or S3Storage, "
            f"or run the branches on Dask, which pickles by value ({exc})"
        ) from exc
