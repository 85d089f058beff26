"""Fan-out: fork one point of a run many ways, run the branches concurrently, rank them.

`fan_out(workflow, run_id, step=... | offset=..., n= | params= | results= | workflows=)` forks
the run at one point once per branch and runs every branch to its end (or its next suspend).
Branch run ids are deterministic, `PREFIX.0`, `PREFIX.1`, ..., so the same call made again (after
a crash, a kernel restart, or on purpose) forks nothing new: a branch that exists is retried
like a `start` of an existing run (finished ones only report their status), and a branch that
does not exist yet is forked. A fan-out is as durable as a run.

Branches run on threads (a `def` workflow) or as tasks on one event loop in a thread of its
own (an `async def` one), or on any `concurrent.futures.Executor`:
a `ProcessPoolExecutor`, or Dask's `distributed.Client.get_executor()` across machines, with
journals on storage every worker reaches (`s3://`, a shared filesystem). Only `Branch`es and
`RunResult`s cross the executor's boundary; scores are computed here, so `score` may be any
callable.
"""

from __future__ import annotations

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
from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._branch_ids import check_branches
from kassette.explore._progress import Budget, Watch, display_for
from kassette.explore._running import (
    INTERRUPT,
    AnyWorkflow,
    Board,
    Branch,
    Halted,
    Outcome,
    Raised,
    Resume,
    Stop,
    interrupts_deferred,
    resume_all,
    run_all,
    settle,
)

if TYPE_CHECKING:
    from kassette.explore._frames import Journals

__all__ = ["Branches", "FanOutInterrupted", "fan_out"]

# `Branches.frame`'s two status words beside RunResult's (kassette._engine.run_state reads both
# as "running": the run is open)
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
    that does not look for it stops as an interrupt would stop it. In a notebook, where the
    cell's assignment never happened, `sys.last_value.branches` is the `Branches` afterwards.
    Building it reads no journal (the frame is built when first asked for), and a notebook
    shows it in a few lines (`_render_traceback_`).
    """

    def __init__(self, branches: Branches) -> None:
        super().__init__(f"fan-out of {branches.source} interrupted: {branches.summary()}")
        self.branches = branches

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it: the counts, how to continue, where the branches are."""
        from kassette._tracebacks import short_traceback

        return short_traceback(
            self,
            [
                "Run the same kx.fan_out(...) call again to continue: it replays what the "
                "branches journaled and runs the rest (a finished branch is not run again).",
                "The branches so far: branches = sys.last_value.branches",
            ],
        )


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
    def run_results(self) -> list[RunResult | None]:
        """Each branch's `RunResult` (None where its invocation raised or it was stopped)."""
        return [o if isinstance(o, RunResult) else None for o in self._outcomes]

    @property
    def results(self) -> list[RunResult | None]:
        """Deprecated spelling of `run_results` (`fan_out(results=...)` is what goes in)."""
        warnings.warn(
            "Branches.results is deprecated: use Branches.run_results (fan_out's results= "
            "are the edited results that go in)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.run_results

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

    def counts(self) -> dict[str, int]:
        """How many branches have each `frame` status (read from the outcomes: no journal)."""
        found: dict[str, int] = {}
        for outcome in self._outcomes:
            status = _status_of(outcome)
            found[status] = found.get(status, 0) + 1
        return found

    def summary(self) -> str:
        """`7 done (5 succeeded, 2 failed), 13 stopped`: a branch is done when its invocation
        ended (succeeded, suspended, or failed: failed, canceled or raised); a stopped one is
        not done (a re-call continues it)."""
        counts = self.counts()
        failed = sum(counts.get(status, 0) for status in ("failed", "canceled", RAISED))
        done = {
            "succeeded": counts.get("success", 0),
            "suspended": counts.get("suspended", 0),
            "failed": failed,
        }
        summary = f"{sum(done.values())} done"
        if any(done.values()):
            summary += " (" + ", ".join(f"{n} {word}" for word, n in done.items() if n) + ")"
        return f"{summary}, {counts.get(STOPPED, 0)} stopped"

    def __repr__(self) -> str:
        return f"<Branches of {self.source}: {len(self)} ({self.summary()})>"

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
            self._params_of_source = params_of(self._storage(), self.source)
        return self._params_of_source


def _status_of(outcome: Outcome) -> str:
    if isinstance(outcome, Raised):
        return RAISED
    if isinstance(outcome, Halted):
        return STOPPED
    return outcome.status


def params_of(storage: Any, run_id: str) -> dict[str, Any]:
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
    `{"usd": X}`) stops the fan-out from starting new steps and branches once its own model
    calls (in this and earlier calls, not the copied prefix's) reach it, counted before every
    step and at every branch's end: the calls in flight then finish, so it is passed by at
    most those; `progress` shows a live count
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
    if executor is not None and not isinstance(executor, Executor) and not is_executor(executor):
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
    check_branches(branches, kind, base)
    if isinstance(executor, ProcessPoolExecutor):
        check_picklable(branches[0])
    board = Board(len(branches))
    stop = Stop(across_processes=executor is not None)
    watch = Watch(branches, board, stop, budget=limit, display=display_for(progress))
    # until run_all says otherwise: branches may be running, and a stop flag must outlive them
    interrupted, abandoned = False, True
    try:
        watch.start()
        interrupted, abandoned = run_all(
            branches, executor, max_workers=max_workers, stop=stop, board=board
        )
    except KeyboardInterrupt:  # one that reached past run_all's own handling
        interrupted = True
        stop.set(INTERRUPT)
    finally:
        # what the branches reached, gathered (cheaply: no journal is loaded) with further
        # interrupts held off, so the caller always gets it
        with interrupts_deferred() as caught:
            settle(branches, stop, board)
            watch.close()
            stop.close(abandoned=abandoned)
            outcomes = [o for o in board.outcomes if o is not None]
            found = Branches(branches, outcomes, score=score, executor=executor)
            if interrupted or caught:
                stop.set(INTERRUPT)
                interrupted = True
                error = FanOutInterrupted(found)
    if interrupted:
        raise error
    return found


def is_executor(executor: object) -> bool:
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


def check_picklable(branch: Branch) -> None:
    import pickle

    try:
        pickle.dumps(branch)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise InvalidArgumentError(
            "a ProcessPoolExecutor pickles the workflow: define its function at the top level "
            "of an importable module (not in a notebook) and use LocalStorage or S3Storage, "
            f"or run the branches on Dask, which pickles by value ({exc})"
        ) from exc
