"""Experiments: one change tried on many recorded runs, scored, and compared with honest statistics.

`experiment(workflow, runs, step=..., variants={...}, score=..., name=...)` forks every source
run at `step` once per (variant, repeat), runs the branches through the fan-out's runner
(`kassette.explore._running`: every executor, `max_workers`, `budget`, progress, and a
`KeyboardInterrupt` that stops at step boundaries), scores each branch, and returns an
`Experiment` whose summary pairs each variant with the baseline by source run.

The experiment is itself a kassette run, `NAME.experiment`, on the workflow's storage: its
input is the design (source runs, step, variants, repeats, baseline, score name, clusters,
order, stop rule) and each score is one of its steps (`score:SOURCE/BRANCH_RUN_ID/score`, one
parallel block per source run). So a score (an LLM judge's included) is computed once:
calling again replays it, and nothing re-bills. Branch `i` of source `S` for variant `V` is
run `NAME.S.V.i`, so calling again with the same name
forks nothing twice and only continues what an interrupt, a budget or a crash left open;
a finished experiment's run is completed and a re-call runs nothing. `kx.load(store)
.experiments` reopens experiments from the store alone (`kassette.explore._experiment_result`).

With `stop_when=kx.decided(alpha)`, source runs go in a seeded random order, a batch at a time
(enough branches to keep `max_workers` busy), and after each batch the pairs are fed, one by one
in that order, to each variant's confidence sequence (`kassette.explore._sequential`); no new
batch is launched once every variant is decided.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kassette._codec import check_json
from kassette._engine import RunResult
from kassette._fork import plan_fork
from kassette._workflow import AsyncWorkflow, Workflow, kassette
from kassette.core import read_journal, run_status
from kassette.errors import (
    InputMismatchError,
    InvalidArgumentError,
    RunExistsError,
    RunNotFoundError,
)
from kassette.explore._branches import check_picklable, is_executor, params_of
from kassette.explore._experiment_result import (
    EXPERIMENT_VERSION,
    RECORDED,
    SCORE_STEP,
    Experiment,
    Live,
    branch_run_id,
    experiment_run_id,
)
from kassette.explore._progress import Budget, Watch, display_for
from kassette.explore._running import (
    INTERRUPT,
    AnyWorkflow,
    Board,
    Branch,
    Halted,
    Outcome,
    Raised,
    Stop,
    interrupts_deferred,
    run_all,
    settle,
)
from kassette.explore._sequential import Decided
from kassette.explore._stats import require_stats

__all__ = ["ExperimentInterrupted", "Variant", "experiment"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_BUSY_DEFAULT = 16  # branches a sequential batch keeps running when max_workers is not given
Score = Callable[[RunResult], float | bool]


@dataclass(frozen=True)
class Variant:
    """What one arm of an experiment changes at the fork point: `params` (merged over the
    source run's params, read as `ctx.params`), an edited `result` for the step (the step is
    then not run), and/or another `workflow` (other code, on the same storage)."""

    params: Mapping[str, Any] | None = None
    result: Any = ...  # ... (Ellipsis): no edited result
    workflow: AnyWorkflow | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "params": None if self.params is None else dict(self.params),
            "result": None if self.result is ... else [self.result],
            "workflow": None if self.workflow is None else self.workflow.version,
        }


class ExperimentInterrupted(KeyboardInterrupt):
    """A `KeyboardInterrupt` that stopped an experiment at its branches' step boundaries.

    `experiment` holds what it reached; the stopped branches' runs stay open and the same
    `kx.experiment` call continues them (scores already journaled are not computed again)."""

    def __init__(self, experiment: Experiment) -> None:
        super().__init__(f"experiment interrupted: {experiment.status_line()}")
        self.experiment = experiment


class _Unfinished(BaseException):
    """Ends the experiment run's invocation without journaling its end: some branch or score
    is missing (stopped, raised), so the run stays open for a re-call to continue."""


class _Part(Board):
    """One batch's board (what `run_all` and `settle` read), every change forwarded to the
    whole experiment's board (what the progress display and the budget read)."""

    def __init__(self, whole: Board, indexes: Sequence[int]) -> None:
        super().__init__(len(indexes))
        self._whole, self._indexes = whole, indexes

    def started(self, index: int) -> None:
        super().started(index)
        self._whole.started(self._indexes[index])

    def ended(self, index: int, outcome: Outcome) -> None:
        super().ended(index, outcome)
        self._whole.ended(self._indexes[index], outcome)


@dataclass
class _Plan:
    """Everything an experiment call needs, checked before anything is written."""

    workflow: AnyWorkflow
    design: dict[str, Any]
    arms: dict[str, Variant]  # the variants that are branches (the baseline's too unless recorded)
    branches: list[Branch]  # in the run order: by source, then variant, then repeat
    score: Score
    stop_when: Decided | None
    live: Live = field(default_factory=Live)


def experiment(
    workflow: AnyWorkflow,
    runs: Sequence[str] | pd.DataFrame,
    *,
    step: str,
    variants: Mapping[str, Mapping[str, Any] | Variant],
    baseline: str = RECORDED,
    repeats: int = 1,
    score: Score,
    name: str,
    cluster: str | Callable[[Any], Hashable] | None = None,
    stop_when: Decided | None = None,
    seed: int = 0,
    executor: Executor | None = None,
    max_workers: int | None = None,
    budget: Mapping[str, float] | None = None,
    progress: bool = True,
) -> Experiment:
    """Try `variants` of step `step` on the source `runs`, `repeats` times each, and score them.

    `runs` is a list of run ids or a slice of `journals.runs`. `variants` maps a name to a
    params dict (merged over the source's params; `{}` re-runs the step unchanged) or a
    `Variant`. `baseline` is `"recorded"` (each source run's own result, scored as it is, at no
    cost) or the name of a variant (`{"control": {}}`: both arms sample alike). `score` maps a
    branch's `RunResult` to a number or a bool; it is journaled, so it runs once per branch.
    `cluster` (a column of the runs frame, or a function of a source run's input) groups
    source runs for cluster-robust intervals. `stop_when=kx.decided(alpha)` runs the source runs
    in a random order seeded by `seed` and stops launching once every variant is decided.
    `executor`, `max_workers`, `budget` and `progress` are `kx.fan_out`'s.

    Calling again with the same `name` and design continues: nothing is forked or scored twice.
    Another design under a used name raises `InvalidArgumentError`. A `KeyboardInterrupt` stops
    the branches at step boundaries and raises `ExperimentInterrupted`.
    """
    require_stats(imported=False)
    plan = _plan(
        workflow,
        runs,
        step,
        variants,
        baseline,
        repeats,
        score,
        name,
        cluster,
        stop_when,
        seed,
        executor,
        max_workers,
    )
    storage = workflow.storage
    run_id = experiment_run_id(name)
    status = run_status(storage, run_id).status if storage.read(run_id) is not None else None
    if status == "completed":
        _check_design(storage, run_id, plan.design)
        return Experiment(storage, plan.design, live=None)
    if status is None:
        _check_new_branches(storage, plan.branches)
    limit = Budget.of(budget)
    runner: Workflow[Any, Any] = kassette(
        lambda ctx, design: _run(ctx, plan, executor, max_workers, limit, progress),
        storage=storage,
        version=EXPERIMENT_VERSION,
    )
    try:
        runner.start(plan.design, run_id=run_id)
    except InputMismatchError as exc:
        raise _another_design(name) from exc
    except _Unfinished:
        pass
    except KeyboardInterrupt:  # while scoring: the scores journaled so far are kept
        plan.live.interrupted = True
    found = Experiment(storage, plan.design, live=plan.live)
    if plan.live.interrupted:
        raise ExperimentInterrupted(found)
    return found


# -- running: the body of the experiment's own run --------------------------------------------


def _run(
    ctx: Any,
    plan: _Plan,
    executor: Executor | None,
    max_workers: int | None,
    budget: Budget | None,
    progress: bool,
) -> dict[str, Any]:
    """Run the branches a batch at a time, score each as a step, stop when decided."""
    live, design = plan.live, plan.design
    per_source = len(plan.arms) * design["repeats"]
    if plan.stop_when is None:
        batch = len(design["order"])
    else:
        batch = max(1, math.ceil((max_workers or _BUSY_DEFAULT) / max(per_source, 1)))
    board = Board(len(plan.branches))
    live.board = board
    live.budget = budget
    stop = Stop(across_processes=executor is not None)
    watch = Watch(plan.branches, board, stop, budget=budget, display=display_for(progress))
    abandoned = True  # until run_all says otherwise: a stop flag must outlive its readers
    scores: dict[str, Any] = {}
    try:
        watch.start()
        for first in range(0, len(design["order"]), batch):
            if stop.is_set() or live.decided_after is not None:
                break
            indexes = list(range(first * per_source, (first + batch) * per_source))
            indexes = [i for i in indexes if i < len(plan.branches)]
            part, branches = _Part(board, indexes), [plan.branches[i] for i in indexes]
            try:
                interrupted, abandoned = run_all(
                    branches, executor, max_workers=max_workers, stop=stop, board=part
                )
            except KeyboardInterrupt:  # one that reached past run_all's own handling
                interrupted = True
                stop.set(INTERRUPT)
            settle(branches, stop, part)
            if interrupted:  # Ctrl-C: no judge is called now; a re-call scores what ended
                live.interrupted = True
                break
            sources = design["order"][first : first + batch]
            _score(ctx, plan, sources, [(i, board.outcomes[i]) for i in indexes], scores)
            if plan.stop_when is not None:
                _decide(plan, first + len(sources), scores)
    finally:
        with interrupts_deferred():  # what the branches reached is gathered whatever comes
            watch.close()
            stop.close(abandoned=abandoned)
    live.stopped_by = stop.reason
    missing = any(isinstance(o, Halted | Raised) for o in board.outcomes) or live.score_errors
    if live.interrupted or stop.reason is not None or missing:
        raise _Unfinished
    return {
        "stopped_early": live.decided_after is not None,
        "decided_after": live.decided_after,
        "sources": len(design["order"]),
    }


def _score(
    ctx: Any,
    plan: _Plan,
    sources: Sequence[str],
    ended: Sequence[tuple[int, Outcome | None]],
    scores: dict[str, Any],
) -> None:
    """Score this batch's branches: per source run, one parallel block `score:SOURCE` of the
    experiment's run whose branches (one per branch run, and the source itself for a recorded
    baseline) each journal one step `score`. The scores of a source run are computed
    concurrently (an LLM judge waits in parallel) and their appends share a group commit; a
    replayed score is not computed again. A source run with a branch that did not end (it
    was stopped, or raised) is scored by the call that finishes it."""
    storage = plan.workflow.storage
    by_source: dict[str, dict[str, Outcome | None]] = {source: {} for source in sources}
    for index, outcome in ended:
        by_source[plan.branches[index].source][plan.branches[index].run_id] = outcome
    for source in sources:
        outcomes = by_source[source]
        if plan.design["baseline"] == RECORDED:
            outcomes = {source: RunResult.from_status(run_status(storage, source)), **outcomes}
        if not all(isinstance(outcome, RunResult) for outcome in outcomes.values()):
            continue
        blocks = {run_id: _scorer(plan, outcome) for run_id, outcome in outcomes.items()}
        found = ctx.parallel(blocks, name=f"{SCORE_STEP}{source}")
        for run_id, value in found.items():
            if isinstance(value, _ScoreFailed):
                plan.live.score_errors[run_id] = value.error
            else:
                scores[run_id] = value


@dataclass(frozen=True)
class _ScoreFailed:
    """A score function that raised: nothing journaled, so a re-call scores it again."""

    error: str


def _scorer(plan: _Plan, outcome: Any) -> Callable[[Any], Any]:
    def compute() -> float | bool | None:
        if outcome.status != "success":
            return None
        value = plan.score(outcome)
        if isinstance(value, bool):
            return value
        number = float(value)
        return number if math.isfinite(number) else None

    def branch(context: Any) -> Any:
        try:
            return context.step("score", compute)
        except Exception as exc:
            return _ScoreFailed(f"{type(exc).__name__}: {exc}")

    return branch


def _decide(plan: _Plan, done: int, scores: Mapping[str, Any]) -> None:
    """Feed the pairs of the first `done` sources (in the run order) to each variant's
    confidence sequence; note after how many pairs every variant was decided."""
    assert plan.stop_when is not None
    design = plan.design
    baseline = design["baseline"]
    others = [name for name in design["variants"] if name != baseline]
    order = design["order"][:done]
    first_decided = []
    for variant in others:
        differences, positions = [], []
        for position, source in enumerate(order, start=1):
            mine = _mean_score(plan, source, variant, scores)
            theirs = _mean_score(plan, source, baseline, scores)
            if mine is not None and theirs is not None:
                differences.append(mine - theirs)
                positions.append(position)
        at = plan.stop_when.first_decision(differences, len(design["order"]), len(others))
        if not at:
            return
        first_decided.append(positions[at - 1])
    if first_decided:
        plan.live.decided_after = max(first_decided)


def _mean_score(plan: _Plan, source: str, variant: str, scores: Mapping[str, Any]) -> float | None:
    """A source run's mean score in one arm, over its scored repeats."""
    if variant == RECORDED:
        value = scores.get(source)
        return None if value is None else float(value)
    name = plan.design["name"]
    values = [
        scores.get(branch_run_id(name, source, variant, r)) for r in range(plan.design["repeats"])
    ]
    present = [float(v) for v in values if v is not None]
    return sum(present) / len(present) if present else None


# -- planning: every check before anything is written -----------------------------------------


def _plan(
    workflow: AnyWorkflow,
    runs: Sequence[str] | pd.DataFrame,
    step: str,
    variants: Mapping[str, Mapping[str, Any] | Variant],
    baseline: str,
    repeats: int,
    score: Score,
    name: str,
    cluster: str | Callable[[Any], Hashable] | None,
    stop_when: Decided | None,
    seed: int,
    executor: Executor | None,
    max_workers: int | None,
) -> _Plan:
    if not isinstance(workflow, Workflow | AsyncWorkflow):
        raise InvalidArgumentError(f"experiment needs a kassette workflow, not {workflow!r}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError(
            f"name must be letters, digits, '_' and '-' (at most 64), not {name!r}"
        )
    if type(repeats) is not int or repeats < 1:
        raise InvalidArgumentError(f"repeats must be an int >= 1, not {repeats!r}")
    if not callable(score):
        raise InvalidArgumentError(f"score must be a function of a RunResult, not {score!r}")
    if stop_when is not None and not isinstance(stop_when, Decided):
        raise InvalidArgumentError(f"stop_when must be kx.decided(alpha), not {stop_when!r}")
    if executor is not None and not is_executor(executor):
        raise InvalidArgumentError(
            f"executor must be a concurrent.futures.Executor, not {executor!r}"
        )
    if max_workers is not None and (type(max_workers) is not int or max_workers < 1):
        raise InvalidArgumentError(f"max_workers must be an int >= 1, not {max_workers!r}")
    if type(seed) is not int:
        raise InvalidArgumentError(f"seed must be an int, not {seed!r}")
    sources = _sources(runs)
    arms = _arms(variants, baseline)
    storage = workflow.storage
    offsets = {}
    for source in sources:
        try:
            offsets[source] = plan_fork(storage, source, None, step).offset
        except RunNotFoundError as exc:
            raise InvalidArgumentError(
                f"source run {source} does not exist", run_id=source
            ) from exc
    order = random.Random(seed).sample(sources, len(sources))
    design: dict[str, Any] = {
        "name": name,
        "workflow": workflow.version,
        "step": step,
        "sources": sources,
        "offsets": offsets,
        "order": order,
        "variants": {key: arm.to_json() for key, arm in arms.items()},
        "baseline": baseline,
        "repeats": repeats,
        "score": getattr(score, "__qualname__", type(score).__name__),
        "clusters": _clusters(storage, runs, sources, cluster),
        "stop_when": None if stop_when is None else stop_when.to_json(),
        "seed": seed,
    }
    design = check_json(design, "the experiment's design")
    branches = []
    source_params: dict[str, dict[str, Any]] = {}
    for source in order:
        for variant, arm in arms.items():
            if variant == RECORDED:
                continue
            params = None
            if arm.params is not None:
                if source not in source_params:
                    source_params[source] = params_of(storage, source)
                params = {**source_params[source], **arm.params}
            for repeat in range(repeats):
                run_id = branch_run_id(name, source, variant, repeat)
                _valid_run_id(run_id)
                branches.append(
                    Branch(
                        workflow=arm.workflow or workflow,
                        source=source,
                        offset=offsets[source],
                        run_id=run_id,
                        params=params,
                        edit=None if arm.result is ... else (arm.result,),
                    )
                )
    if branches and isinstance(executor, ProcessPoolExecutor):
        check_picklable(branches[0])
    return _Plan(
        workflow,
        design,
        {k: v for k, v in arms.items() if k != RECORDED},
        branches,
        score,
        stop_when,
    )


def _sources(runs: Sequence[str] | pd.DataFrame) -> list[str]:
    if isinstance(runs, pd.DataFrame):
        if "run_id" not in runs.columns:
            raise InvalidArgumentError("runs must be run ids or a slice of journals.runs")
        sources = [str(run_id) for run_id in runs["run_id"]]
    elif isinstance(runs, str) or not isinstance(runs, Sequence | pd.Series):
        raise InvalidArgumentError(f"runs must be a list of run ids, not {runs!r}")
    else:
        sources = [str(run_id) for run_id in runs]
    if not sources:
        raise InvalidArgumentError("an experiment needs at least one source run")
    if len(set(sources)) != len(sources):
        raise InvalidArgumentError("runs lists a run more than once")
    return sources


def _arms(variants: Mapping[str, Mapping[str, Any] | Variant], baseline: str) -> dict[str, Variant]:
    """The arms in order: the baseline first (`recorded`: no branch), then the variants."""
    if not isinstance(variants, Mapping) or not variants:
        raise InvalidArgumentError(f"variants must be a non-empty dict, not {variants!r}")
    arms: dict[str, Variant] = {}
    for key, value in variants.items():
        if not isinstance(key, str) or not _NAME.match(key) or key == RECORDED:
            raise InvalidArgumentError(
                f"a variant's name must be letters, digits, '_' and '-' (not {RECORDED!r}): {key!r}"
            )
        if isinstance(value, Variant):
            arm = value
        elif isinstance(value, Mapping):
            arm = Variant(params=dict(value))
        else:
            raise InvalidArgumentError(f"variant {key!r} must be a params dict or a kx.Variant")
        if arm.params is not None and not isinstance(arm.params, Mapping):
            raise InvalidArgumentError(f"variant {key!r}: params must be a dict")
        if arm.workflow is not None and not isinstance(arm.workflow, Workflow | AsyncWorkflow):
            raise InvalidArgumentError(f"variant {key!r}: workflow must be a kassette workflow")
        arms[key] = arm
    if baseline != RECORDED and baseline not in arms:
        raise InvalidArgumentError(
            f"baseline must be {RECORDED!r} or one of the variants {list(arms)}, not {baseline!r}"
        )
    if baseline != RECORDED and len(arms) < 2:
        raise InvalidArgumentError("a variant baseline needs at least one other variant")
    first = RECORDED if baseline == RECORDED else baseline
    ordered = {first: arms.get(first, Variant())}
    ordered.update((k, v) for k, v in arms.items() if k != first)
    return ordered


def _clusters(
    storage: Any,
    runs: Sequence[str] | pd.DataFrame,
    sources: Sequence[str],
    cluster: str | Callable[[Any], Hashable] | None,
) -> dict[str, str] | None:
    """Each source run's cluster label (as text), from a runs-frame column or its input."""
    if cluster is None:
        return None
    if isinstance(cluster, str):
        frame = runs if isinstance(runs, pd.DataFrame) and cluster in runs.columns else None
        if frame is None:
            from kassette.explore._frames import load

            frame = load(storage, run_ids=list(sources)).runs
        if cluster not in frame.columns:
            raise InvalidArgumentError(f"cluster {cluster!r} is not a column of the runs frame")
        labels = dict(zip(frame["run_id"].astype(str), frame[cluster], strict=True))
        return {source: str(labels[source]) for source in sources}
    if callable(cluster):
        return {
            source: str(cluster(read_journal(storage, source).state.input)) for source in sources
        }
    raise InvalidArgumentError(f"cluster must be a column name or a function, not {cluster!r}")


def _valid_run_id(run_id: str) -> None:
    from kassette.storage import validate_run_id

    try:
        validate_run_id(run_id)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"branch id {run_id!r} is not a valid run id (too long?): use a shorter name"
        ) from exc


def _check_design(storage: Any, run_id: str, design: dict[str, Any]) -> None:
    recorded = read_journal(storage, run_id).state.input
    if recorded != design:
        raise _another_design(design["name"])


def _another_design(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"experiment {name!r} exists with another design (runs, step, variants, repeats, "
        "baseline, score, clusters, seed or stop rule): pass another name"
    )


def _check_new_branches(storage: Any, branches: Sequence[Branch]) -> None:
    """A new experiment's branch ids may hold only the same fork (a crash before its own run
    was written): anything else is another run, refused before anything is written."""
    for branch in branches:
        try:
            state = read_journal(storage, branch.run_id).state
        except RunNotFoundError:
            continue
        if state.source != {"runId": branch.source, "fromOffset": branch.offset}:
            raise RunExistsError(
                f"{branch.run_id} exists and is not this experiment's branch: pass another name",
                run_id=branch.run_id,
            )
