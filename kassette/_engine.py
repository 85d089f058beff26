"""The workflow engine: what a `def` and an `async def` workflow share, but for calling the
user's function.

An invocation opens a session of the run for `start`, `resume` (delivering the event first)
or `fork` (see `kassette.core`), and ends by turning the way the function ended into a
journaled outcome (`complete`, `error`, nothing for a suspend) and a `RunResult`. `Engine`
is that, and how a workflow pickles (by name where it can); `kassette._workflow` builds
`Workflow` and `AsyncWorkflow` on it, with the contexts the function gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from kassette._clock import Clock, SystemClock
from kassette._codec import check_json, new_run_id
from kassette._state import ErrorInfo, RunStatus, html_table
from kassette.core import Run, open_fork, open_run, read_journal
from kassette.errors import InvalidArgumentError, KassetteError, ReplayError, Suspended
from kassette.storage import Storage, open_storage

__all__ = ["Engine", "RunResult"]

I = TypeVar("I")  # noqa: E741 - the workflow's input
R = TypeVar("R")
ResultStatus = Literal["success", "suspended", "failed", "canceled"]
# the one translation between a stored run's state (RunStatus) and an invocation's outcome
_OUTCOMES: dict[str, ResultStatus] = {
    "completed": "success",
    "suspended": "suspended",
    "failed": "failed",
    "canceled": "canceled",
}
# a fan-out branch no invocation ended (`Branches.frame`'s "raised" and "stopped") is open
_STATES: dict[str, str] = {
    **{outcome: state for state, outcome in _OUTCOMES.items()},
    "raised": "running",
    "stopped": "running",
}


def run_state(outcome: str) -> str:
    """An invocation's outcome (`RunResult.status`, or `Branches.frame`'s status) in
    `RunStatus`'s words: `"completed"` for `"success"`, `"running"` for a fan-out branch that
    `"raised"` or was `"stopped"` (its run is open), the others as they are."""
    return _STATES.get(outcome, outcome)


@dataclass(frozen=True)
class RunResult:
    """How one invocation of a run ended. `events` are the pending events of a suspended run,
    in the order the code waits for them (a parallel block's in the order of its branches).
    `unreplayed` names steps the journal recorded before this invocation that its code never
    replayed: a fork's prefix holds a step the calling code no longer has (renamed, say)."""

    run_id: str
    status: ResultStatus
    result: Any = None
    events: tuple[str, ...] = ()
    error: ErrorInfo | None = None
    unreplayed: tuple[str, ...] = ()

    @property
    def event(self) -> str | None:
        """The first pending event id, or None."""
        return self.events[0] if self.events else None

    @classmethod
    def from_status(cls, status: RunStatus) -> RunResult | None:
        """What an invocation of a run in `status` reports without running anything: its end,
        or the events it waits for; None for a running run (an invocation would continue it)."""
        outcome = _OUTCOMES.get(status.status)
        if outcome is None:
            return None
        if outcome == "suspended":
            return cls(status.run_id, outcome, events=status.pending_events)
        return cls(status.run_id, outcome, result=status.result, error=status.error)

    def __repr__(self) -> str:
        # `unreplayed` is shown only when it names something: it rarely does
        fields = f"run_id={self.run_id!r}, status={self.status!r}, result={self.result!r}, "
        fields += f"events={self.events!r}, error={self.error!r}"
        if self.unreplayed:
            fields += f", unreplayed={self.unreplayed!r}"
        return f"RunResult({fields})"

    def _repr_html_(self) -> str:
        fields = {
            "run_id": self.run_id,
            "status": self.status,
            "result": self.result,
            "events": list(self.events),
            "error": self.error.to_dict() if self.error else None,
        }
        if self.unreplayed:
            fields["unreplayed"] = list(self.unreplayed)
        return html_table(fields)


class Engine(Generic[I, R]):
    """Opening sessions and settling outcomes: everything but calling the user's function.

    The base of `Workflow` and `AsyncWorkflow` (`kassette._workflow`), which add only how the
    function is called (`_invoke`) and the public methods.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        storage: Storage | str,
        version: str | None,
        clock: Clock | None,
    ) -> None:
        self.fn = fn
        self.storage = open_storage(storage)
        self.version = version
        self.clock = clock or SystemClock()
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", type(self).__name__)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.fn.__qualname__} on {self.storage!r}>"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The function travels by name when its module has it at the top level (decorated
        # or not), else as itself: cloudpickle (Dask) takes a notebook's functions by value.
        # The storage, version and clock travel as they are (see the storages' pickling).
        module = getattr(self.fn, "__module__", None)
        name = getattr(self.fn, "__qualname__", "")
        named = module not in (None, "__main__") and _named(module, name) in (self, self.fn)
        fn = (module, name) if named else self.fn
        return _rebuilt, (type(self), fn, self.storage, self.version, self.clock)

    def _open_start(self, input: Any, run_id: str | None, params: Mapping[str, Any] | None) -> Run:
        run_id = run_id if run_id is not None else new_run_id()
        return open_run(
            self.storage,
            run_id,
            input=input,
            version=self.version,
            clock=self.clock,
            params=params,
        )

    def _open_resume(self, run_id: str, event: str, value: Any) -> Run:
        if not isinstance(event, str):
            raise InvalidArgumentError(f"event must be a string, not {event!r}", run_id=run_id)
        value = check_json(value, f"value for event {event!r}")  # before the session opens
        journal = read_journal(self.storage, run_id)
        journal.ensure_open()
        journal.require_event(event)
        run = open_run(self.storage, run_id, version=self.version, clock=self.clock)
        try:
            run.deliver(event, value)
        except BaseException:
            run.close()
            raise
        return run

    def _open_fork(
        self,
        run_id: str,
        offset: int | None,
        step: str | None,
        new_run_id: str | None,
        params: Mapping[str, Any] | None,
        result: Any,
    ) -> Run:
        return open_fork(
            self.storage,
            run_id,
            offset=offset,
            step=step,
            new_run_id=new_run_id,
            version=self.version,
            clock=self.clock,
            params=params,
            result=result,
        )

    @staticmethod
    def _settle(run: Run, value: Any = None, exc: BaseException | None = None) -> RunResult:
        """Turn how the function ended into a journaled outcome and a `RunResult`."""
        terminal = run.journal.terminal
        if (
            terminal is not None
            and terminal["type"] == "cancel"
            and terminal["session"] == run.session
            and (exc is None or isinstance(exc, Exception | Suspended))
        ):
            # a suspend timed out and canceled the run: user code catching that cannot undo it
            return RunResult(run.run_id, "canceled", unreplayed=run.unreplayed)
        if exc is None:
            result = run.complete(value)
            return RunResult(run.run_id, "success", result=result, unreplayed=run.unreplayed)
        if isinstance(exc, Suspended):
            # branches journal their suspends in whatever order their threads or tasks run
            order = {event: index for index, event in enumerate(exc.events)}
            pending = sorted(run.journal.pending_events, key=lambda e: order.get(e, len(order)))
            return RunResult(
                run.run_id, "suspended", events=tuple(pending), unreplayed=run.unreplayed
            )
        if isinstance(exc, ReplayError) and _created_by(run):
            # a fork whose replay of its copied prefix fails would stay `running` forever,
            # with nothing of its own: it ends failed with the error, and the error (whose
            # advice may name it) names a run that exists
            run.fail(exc)
            raise exc
        if isinstance(exc, KassetteError) or not isinstance(exc, Exception):
            raise exc
        run.fail(exc)
        error = ErrorInfo(type(exc).__name__, str(exc))
        return RunResult(run.run_id, "failed", error=error, unreplayed=run.unreplayed)


def _created_by(run: Run) -> bool:
    """Whether `run` is a fork this session created (its own `start` is this session's)."""
    state = run.journal.state
    if state.source is None:
        return False
    return bool(run.journal.entries[state.creation_offset]["session"] == run.session)


def _named(module: str | None, qualname: str) -> Any:
    """The object `module.qualname` names, or None."""
    import sys

    found: Any = sys.modules.get(module or "")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _rebuilt(
    kind: type[Engine[Any, Any]],
    fn: Callable[..., Any] | tuple[str, str],
    storage: Storage,
    version: str | None,
    clock: Clock,
) -> Engine[Any, Any]:
    """An unpickled workflow: `fn` given by (module, qualname) is imported."""
    if isinstance(fn, tuple):
        import importlib

        importlib.import_module(fn[0])
        found = _named(*fn)
        fn = found.fn if isinstance(found, Engine) else found
    return kind(fn, storage, version, clock)
