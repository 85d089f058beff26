"""Workflows: a function of (ctx, input) made durable by `@kassette(storage=...)`.

Every `start`, `resume` and `fork` opens a session of the run (see `kassette.core`) and calls
the function from the top. `ctx.step`, `ctx.suspend`, `ctx.parallel` and `ctx.sleep` answer
from the journal while it has their ids and run live after that, so a re-invoked run continues
at its first unfinished step. A `def` workflow gets a `Workflow` and a blocking `Context`; an
`async def` one gets an `AsyncWorkflow` and an awaitable `AsyncContext`. Both share one engine
(`kassette._engine`: opening the session, settling the outcome): only the calling of user code
differs, and an async workflow's storage I/O runs in a worker thread of its invocation, so the
event loop never waits on a write.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, overload

from kassette._clock import Clock
from kassette._codec import CallRecord, format_timestamp, parse_timestamp, validate_name
from kassette._dry_replay import DryReplay, Live, difference, explained
from kassette._engine import Engine, RunResult
from kassette._fork import NO_RESULT
from kassette._retry import NO_RETRY, Retry
from kassette._sessions import cancel_run
from kassette._state import RunStatus
from kassette.core import Run, Step, StepIds, run_status
from kassette.errors import (
    InvalidArgumentError,
    KassetteError,
    ReplayMismatchError,
    Suspended,
    TerminalRunError,
)
from kassette.storage import Storage

if TYPE_CHECKING:
    from concurrent.futures import Executor

# `RunResult` is `kassette._engine.RunResult`, re-exported: the public path is `kassette`
__all__ = ["AsyncContext", "AsyncWorkflow", "Context", "RunResult", "Workflow", "kassette"]

I = TypeVar("I")  # noqa: E741 - the workflow's input
R = TypeVar("R")
T = TypeVar("T")
Outcome = tuple[bool, Any]  # (True, the value returned) or (False, the exception raised)


def _live_step(step: Step, retry: Retry | None) -> Generator[float, Outcome, Any]:
    """The retry rule of a live step, for `def` and `async def` workflows alike.

    Yields the seconds to wait before each attempt and is sent how that attempt ended; returns
    the journaled result, or raises the error of the last attempt. kassette's own errors are
    never retried: they say the code or the run is wrong, not that the call was unlucky.
    """
    waits = [0.0, *(retry or NO_RETRY).delays()]
    for attempt, wait in enumerate(waits, start=1):
        ok, value = yield wait
        if ok:
            return step.record(value, attempts=attempt)
        if isinstance(value, KassetteError) or attempt == len(waits):
            raise value
    raise AssertionError("unreachable")


_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})


def _awaitable(value: object) -> TypeGuard[Awaitable[Any]]:
    """`inspect.isawaitable`, answered at once for what steps mostly return (JSON values)."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


def _send(attempts: Generator[float, Outcome, Any], outcome: Outcome) -> tuple[bool, Any]:
    """Tell `_live_step` how an attempt ended: (False, seconds before the next attempt) or
    (True, the journaled result). Its errors propagate."""
    try:
        return False, attempts.send(outcome)
    except StopIteration as recorded:
        return True, recorded.value


async def _off_loop(io: Executor | None, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` in `io`'s thread (None: the loop's default executor), awaited. A caller
    that is cancelled stops waiting; the call still runs (a write half done is finished)."""
    import asyncio  # already imported: a loop is running

    return await asyncio.shield(asyncio.get_running_loop().run_in_executor(io, call, *args))


def _run_coroutine(awaitable: Awaitable[T]) -> T:
    """Await from blocking code, also where this thread already runs a loop (Jupyter)."""
    import asyncio  # only workflows that await need it, and it costs ~50 ms to import

    async def wrapper() -> T:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrapper())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, wrapper()).result()


class _ContextBase:
    """What both contexts share: the run, the id scope, and every journal decision."""

    def __init__(self, run: Run, ids: StepIds) -> None:
        self._run = run
        self._ids = ids

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def session(self) -> int:
        return self._run.session

    @property
    def replaying(self) -> bool:
        """True while the journal still holds answers for calls not yet made."""
        return self._run.replaying

    @property
    def params(self) -> Mapping[str, Any]:
        """The run's params (`start(..., params=...)`, or a fork's own or its source's), the
        same on every replay; read-only, `{}` when there are none."""
        return self._run.params

    def begin_step(self, name: str) -> Step:
        """The next step named `name` in this context's id scope (a branch has its own): the
        seam for journaling calls of your own the way `step` does. See `kassette.core.Step`."""
        return self._run.begin_step(name, ids=self._ids)

    def _begin(self, name: str, fn: object) -> Step:
        if not callable(fn):
            raise InvalidArgumentError(
                f"step {name!r} needs a callable, got {fn!r}", run_id=self.run_id
            )
        return self._run.begin_step(name, ids=self._ids)

    def _suspend(self, event: str, timeout: float | None, reason: str | None) -> Any:
        return self._run.wait_for_event(
            event, timeout=timeout, reason=reason, event_id=self._ids.next(event, "event")
        )

    def _sleep_seconds(self, seconds: float) -> float:
        """Journal the wake-up time (or read it back); return how long is left to wait."""
        if not isinstance(seconds, int | float) or seconds < 0:
            raise InvalidArgumentError(
                f"sleep needs seconds >= 0, not {seconds!r}", run_id=self.run_id
            )
        step = self._run.begin_step("sleep", ids=self._ids, kind="sleep")
        clock = self._run.clock
        if step.replayed:
            wake_at = step.result["wakeAt"]
        else:
            wake_at = format_timestamp(clock.time() + seconds)
            step.record({"wakeAt": wake_at})
        return max(0.0, parse_timestamp(wake_at) - clock.time())

    def _branches(self, branches: Mapping[str, Any], name: str) -> dict[str, tuple[Any, Any]]:
        """Journal (or check) the block's branch names; return each branch's (fn, scope)."""
        if not isinstance(branches, Mapping) or not branches:
            raise InvalidArgumentError(
                "parallel needs a non-empty dict of branch callables", run_id=self.run_id
            )
        for branch, fn in branches.items():
            validate_name(branch, "branch")
            if not callable(fn):
                raise InvalidArgumentError(f"branch {branch!r} is not callable", run_id=self.run_id)
        step = self._run.begin_step(name, ids=self._ids, kind="parallel")
        step_id, names = step.step_id, list(branches)
        if not step.replayed:
            step.record({"branches": names})
        elif sorted(step.result.get("branches", [])) != sorted(names):
            raise ReplayMismatchError(
                f"run {self.run_id}: parallel block {step_id} has branches "
                f"{step.result.get('branches')} in the journal, the code runs {names}",
                run_id=self.run_id,
                step_id=step_id,
                offset=step.entry["offset"] if step.entry else None,
            )
        return {b: (branches[b], StepIds(f"{step_id}/{b}/")) for b in names}


def _gather(outcomes: dict[str, tuple[bool, Any]], run_id: str) -> dict[str, Any]:
    """Branch results, or the first error, or one `Suspended` naming every pending event."""
    for ok, value in outcomes.values():
        if not ok and not isinstance(value, Suspended):
            raise value
    events = tuple(e for ok, v in outcomes.values() if not ok for e in v.events)
    if events:
        raise Suspended(events, run_id=run_id)
    return {branch: value for branch, (_, value) in outcomes.items()}


class Context(_ContextBase):
    """The handle a `def` workflow gets: every call blocks until it has its answer."""

    def record_step(
        self,
        step: Step,
        result: Any,
        *,
        attempts: int | None = None,
        call: CallRecord | None = None,
    ) -> Any:
        """Journal the live `result` of a step from `begin_step`: `step.record`, here so that a
        `Context` and an `AsyncContext` record the same way (the latter awaits the write)."""
        return step.record(result, attempts=attempts, call=call)

    def step(
        self, name: str, fn: Callable[[], T | Awaitable[T]], *, retry: Retry | None = None
    ) -> T:
        """Run `fn` once per run and journal its JSON result; on replay return the record."""
        step = self._begin(name, fn)
        if step.replayed:
            return step.result  # type: ignore[no-any-return]
        if retry is None:  # one attempt, whose error is the step's: `_live_step` without a loop
            value = fn()
            return step.record(_run_coroutine(value) if _awaitable(value) else value)  # type: ignore[no-any-return]
        attempts = _live_step(step, retry)
        wait = next(attempts)
        while True:
            self._run.clock.sleep(wait)
            try:
                value = fn()
                outcome: Outcome = (True, _run_coroutine(value) if _awaitable(value) else value)
            except Exception as exc:
                outcome = (False, exc)
            try:
                wait = attempts.send(outcome)
            except StopIteration as recorded:
                return recorded.value  # type: ignore[no-any-return]

    def suspend(
        self, event: str, *, timeout: float | None = None, reason: str | None = None
    ) -> Any:
        """Wait for `event`: ends this invocation as suspended; returns the value on resume."""
        return self._suspend(event, timeout, reason)

    def sleep(self, seconds: float) -> None:
        """Wait durably: after a crash, a replay waits only for what is left."""
        self._run.clock.sleep(self._sleep_seconds(seconds))

    def parallel(
        self, branches: Mapping[str, Callable[[Context], Any]], *, name: str = "parallel"
    ) -> dict[str, Any]:
        """Run branches in threads, each with its own context; return their results by name."""
        scoped = self._branches(branches, name)

        def run_branch(fn: Callable[[Context], Any], ids: StepIds) -> tuple[bool, Any]:
            try:
                value = fn(Context(self._run, ids))
                return True, _run_coroutine(value) if inspect.isawaitable(value) else value
            except BaseException as exc:  # collected, re-raised by _gather
                return False, exc

        from concurrent.futures import ThreadPoolExecutor  # parallel blocks only

        with ThreadPoolExecutor(max_workers=len(scoped)) as pool:
            futures = {b: pool.submit(run_branch, fn, ids) for b, (fn, ids) in scoped.items()}
            outcomes = {b: future.result() for b, future in futures.items()}
        return _gather(outcomes, self.run_id)


class AsyncContext(_ContextBase):
    """The handle an `async def` workflow gets: the same calls, awaited.

    Journal decisions (step ids, offsets, replay checks) are made on the event loop, in the
    order its tasks make the calls; the writes run in `io`, the invocation's worker thread.
    Tasks whose writes queue up while one is in flight share the next (a group commit).
    """

    def __init__(self, run: Run, ids: StepIds, io: Executor | None = None) -> None:
        super().__init__(run, ids)
        self._io = io

    async def _written(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the loop, the entries it appends written in the worker thread;
        returns (or raises) once they are durable."""
        with self._run.deferring_writes() as pending:
            try:
                value = call(*args)
            except BaseException as exc:  # raised once its entries are written (or fail)
                failure: BaseException | None = exc
            else:
                failure = None
        if pending:
            await _off_loop(self._io, self._run.write_deferred, pending)
        if failure is not None:
            raise failure
        return value

    async def record_step(
        self,
        step: Step,
        result: Any,
        *,
        attempts: int | None = None,
        call: CallRecord | None = None,
    ) -> Any:
        """Journal the live `result` of a step from `begin_step`, written in the invocation's
        worker thread so that the event loop never waits on storage: the awaitable
        `step.record`, what an SDK wrapper calls in an async workflow."""
        return await self._written(lambda: step.record(result, attempts=attempts, call=call))

    async def step(
        self, name: str, fn: Callable[[], T | Awaitable[T]], *, retry: Retry | None = None
    ) -> T:
        """Run `fn` once per run and journal its JSON result; on replay return the record."""
        step = self._begin(name, fn)
        if step.replayed:
            return step.result  # type: ignore[no-any-return]
        attempts = _live_step(step, retry)
        wait = next(attempts)
        while True:
            await self._run.clock.sleep_async(wait)
            try:
                value = fn()
                outcome: Outcome = (True, await value if inspect.isawaitable(value) else value)
            except Exception as exc:
                outcome = (False, exc)
            recorded, answer = await self._written(_send, attempts, outcome)
            if recorded:
                return answer  # type: ignore[no-any-return]
            wait = answer

    async def suspend(
        self, event: str, *, timeout: float | None = None, reason: str | None = None
    ) -> Any:
        """Wait for `event`: ends this invocation as suspended; returns the value on resume."""
        return await self._written(self._suspend, event, timeout, reason)

    async def sleep(self, seconds: float) -> None:
        """Wait durably: after a crash, a replay waits only for what is left."""
        await self._run.clock.sleep_async(await self._written(self._sleep_seconds, seconds))

    async def parallel(
        self, branches: Mapping[str, Callable[[AsyncContext], Any]], *, name: str = "parallel"
    ) -> dict[str, Any]:
        """Run branches as tasks, each with its own context; return their results by name."""
        scoped = await self._written(self._branches, branches, name)

        async def run_branch(fn: Callable[[AsyncContext], Any], ids: StepIds) -> tuple[bool, Any]:
            try:
                value = fn(AsyncContext(self._run, ids, self._io))
                return True, await value if inspect.isawaitable(value) else value
            except BaseException as exc:  # collected, re-raised by _gather
                return False, exc

        import asyncio  # already imported: an async workflow is running

        results = await asyncio.gather(*(run_branch(fn, ids) for fn, ids in scoped.values()))
        return _gather(dict(zip(scoped, results, strict=True)), self.run_id)


class Workflow(Engine[I, R]):
    """A durable `def` workflow. Methods block and return when the invocation ends."""

    def _invoke(self, run: Run) -> RunResult:
        with run:
            try:
                value = self.fn(Context(run, run.ids), run.input)
            except BaseException as exc:  # _settle journals or re-raises
                return self._settle(run, exc=exc)
            return self._settle(run, value)

    def start(
        self,
        input: I | None = None,
        *,
        run_id: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run (or, for an existing run id, retry) the workflow until it ends or suspends.

        `params` (a JSON object, `ctx.params`) is recorded with the run; on a retry, None means
        "as recorded" and anything else must equal it (else `InputMismatchError`). A run
        that ended raises `TerminalRunError`, saying where this code now differs from its
        journal (a replay that writes nothing finds it) and how to fork it there."""
        try:
            run = self._open_start(input, run_id, params)
        except TerminalRunError as exc:
            raise self._finished(exc, input) from None
        return self._invoke(run)

    def _finished(self, error: TerminalRunError, input: Any) -> Exception:
        if type(error) is not TerminalRunError or error.run_id is None:
            return error
        dry = DryReplay(self.storage, error.run_id, input, self.version, self.clock)
        try:
            outcome: Any = self._invoke(dry.open())
        except (Exception, Live) as raised:
            outcome = raised
        return explained(error, difference(outcome, dry.recorded_result()), self.__name__)

    def resume(self, run_id: str, event: str, value: Any = None) -> RunResult:
        """Deliver `value` for a pending `event` (name or id) and continue the run."""
        return self._invoke(self._open_resume(run_id, event, value))

    def fork(
        self,
        run_id: str,
        *,
        offset: int | None = None,
        step: str | None = None,
        new_run_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        result: Any = NO_RESULT,
    ) -> RunResult:
        """Copy `run_id`'s entries before the fork point into a new run and continue it live.

        `params`: the fork's own (default: its source's). `result`: record the entry at the
        fork point with this result instead of running it (a step's result, or a suspend's
        delivered value), marked `"edited": true`. Forking into an existing run id retries
        that same fork, else raises `RunExistsError`."""
        return self._invoke(self._open_fork(run_id, offset, step, new_run_id, params, result))

    def status(self, run_id: str) -> RunStatus:
        return run_status(self.storage, run_id)

    def cancel(self, run_id: str, reason: str | None = None) -> RunStatus:
        return cancel_run(self.storage, run_id, reason)


class AsyncWorkflow(Engine[I, R]):
    """A durable `async def` workflow: the same methods as `Workflow`, awaitable.

    Every storage call (opening the session, appends and their read-backs, the outcome,
    releasing the lock) runs in a worker thread of the invocation, one at a time in the order
    the loop asks, so the event loop keeps running other tasks while a write is in flight.
    """

    async def _invoke(self, open_session: Callable[..., Run], *args: Any) -> RunResult:
        from concurrent.futures import ThreadPoolExecutor  # async invocations only

        io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kassette-io")
        try:
            # in this task's context, where `checking_before_steps` may have set a check
            run = await _off_loop(io, contextvars.copy_context().run, open_session, *args)
            try:
                try:
                    value = await self.fn(AsyncContext(run, run.ids, io), run.input)
                except BaseException as exc:  # _settle journals or re-raises
                    return await _off_loop(io, self._settle, run, None, exc)
                return await _off_loop(io, self._settle, run, value)
            finally:  # after every write: the worker runs calls in order
                await _off_loop(io, run.close)
        finally:
            io.shutdown(wait=False)

    async def start(
        self,
        input: I | None = None,
        *,
        run_id: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run (or, for an existing run id, retry) the workflow until it ends or suspends.

        `params` (a JSON object, `ctx.params`) is recorded with the run; on a retry, None means
        "as recorded" and anything else must equal it (else `InputMismatchError`). A run
        that ended raises `TerminalRunError`, saying where this code now differs from its
        journal (a replay that writes nothing finds it) and how to fork it there."""
        try:
            return await self._invoke(self._open_start, input, run_id, params)
        except TerminalRunError as exc:
            if type(exc) is not TerminalRunError or exc.run_id is None:
                raise
            dry = DryReplay(self.storage, exc.run_id, input, self.version, self.clock)
            try:
                outcome: Any = await self._invoke(dry.open)
            except (Exception, Live) as raised:
                outcome = raised
            found = difference(outcome, dry.recorded_result())
            raise explained(exc, found, self.__name__) from None

    async def resume(self, run_id: str, event: str, value: Any = None) -> RunResult:
        """Deliver `value` for a pending `event` (name or id) and continue the run."""
        return await self._invoke(self._open_resume, run_id, event, value)

    async def fork(
        self,
        run_id: str,
        *,
        offset: int | None = None,
        step: str | None = None,
        new_run_id: str | None = None,
        params: Mapping[str, Any] | None = None,
        result: Any = NO_RESULT,
    ) -> RunResult:
        """Copy `run_id`'s entries before the fork point into a new run and continue it live.

        `params`: the fork's own (default: its source's). `result`: record the entry at the
        fork point with this result instead of running it (a step's result, or a suspend's
        delivered value), marked `"edited": true`. Forking into an existing run id retries
        that same fork, else raises `RunExistsError`."""
        return await self._invoke(self._open_fork, run_id, offset, step, new_run_id, params, result)

    async def status(self, run_id: str) -> RunStatus:
        return await _off_loop(None, run_status, self.storage, run_id)

    async def cancel(self, run_id: str, reason: str | None = None) -> RunStatus:
        return await _off_loop(None, cancel_run, self.storage, run_id, reason)


@overload
def kassette(
    fn: Callable[[AsyncContext, I], Coroutine[Any, Any, R]],
    *,
    storage: Storage | str,
    version: str | None = ...,
    clock: Clock | None = ...,
) -> AsyncWorkflow[I, R]: ...
@overload
def kassette(
    fn: Callable[[Context, I], R],
    *,
    storage: Storage | str,
    version: str | None = ...,
    clock: Clock | None = ...,
) -> Workflow[I, R]: ...
@overload
def kassette(
    fn: None = ..., *, storage: Storage | str, version: str | None = ..., clock: Clock | None = ...
) -> Callable[[Callable[..., Any]], Any]: ...
def kassette(
    fn: Callable[..., Any] | None = None,
    *,
    storage: Storage | str,
    version: str | None = None,
    clock: Clock | None = None,
) -> Any:
    """Make `fn(ctx, input)` a durable workflow journaled in `storage`.

    Use as `@kassette(storage=...)` or `kassette(fn, storage=...)`. An `async def` gives an
    `AsyncWorkflow`, a `def` a `Workflow`.
    """

    def wrap(function: Callable[..., Any]) -> Any:
        if inspect.iscoroutinefunction(function):
            return AsyncWorkflow(function, storage, version, clock)
        return Workflow(function, storage, version, clock)

    return wrap if fn is None else wrap(fn)
