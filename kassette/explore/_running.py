"""Running a fan-out's branches: concurrently, at most `max_workers` at once, and stoppably.

A fan-out stops for one of two reasons: its caller is interrupted (Ctrl-C, a kernel
interrupt), or its budget is spent (`kassette.explore._progress`). Either way it stops
*between steps*: a `Stop` shared with every branch is checked before each step begins
(`kassette.core.checking_before_steps`), and a branch that finds it set raises `Stopped`, a
`BaseException` the workflow engine re-raises without journaling anything. The branch's run
stays open (neither failed nor canceled), so the same `fan_out` call continues it, replaying
what it journaled. A step already running finishes and is journaled; a branch not started yet
is never started.

Branches in this process (threads, one event loop) see the stop through a `threading.Event`;
branches in other processes (a `ProcessPoolExecutor`, Dask workers on this host) through a
flag file in a temporary directory, which travels with the pickled `Stop`. A worker process
that runs a branch ignores SIGINT from then on: Ctrl-C reaches a terminal's whole process group
(and Jupyter interrupts the kernel's), and a worker must finish its step and stop at the flag
rather than die mid-step and break the pool.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from kassette._engine import RunResult
from kassette._state import ErrorInfo, RunStatus
from kassette._workflow import AsyncWorkflow, Workflow
from kassette.core import checking_before_steps, run_status
from kassette.errors import RunNotFoundError

AnyWorkflow = Workflow[Any, Any] | AsyncWorkflow[Any, Any]
INTERRUPT = "interrupt"  # why a branch stopped: the fan-out's caller was interrupted
BUDGET = "budget"  # ... or the fan-out's model calls spent its budget
WAIT_S = 0.2  # how often a waiting fan-out looks up from its futures (for the budget)
# after an interrupt, how long a fan-out on an executor it cannot stop (Dask) waits for its
# running branches to reach a step boundary before it returns without them
OTHER_EXECUTOR_WAIT_S = 10.0


@dataclass(frozen=True)
class Branch:
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
class Raised:
    """A branch whose invocation raised (a `KassetteError`, or anything else)."""

    run_id: str
    error: ErrorInfo


@dataclass(frozen=True)
class Halted:
    """A branch the fan-out stopped (or never started): its run is open, a re-call continues
    it. `reason` is `INTERRUPT` or `BUDGET`."""

    run_id: str
    reason: str


Outcome = RunResult | Raised | Halted


class Stopped(BaseException):
    """Raised before a step when the branch's fan-out has stopped. A `BaseException`, like
    `Suspended`: the engine journals nothing for it and `except Exception` cannot swallow it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Stop:
    """Whether a fan-out has stopped, and why: set once, by its caller; checked by its branches
    before every step (`check`), wherever they run."""

    def __init__(self, *, across_processes: bool = False) -> None:
        self.reason: str | None = None
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._directory = tempfile.mkdtemp(prefix="kassette-fan-out-") if across_processes else None
        self._flag = os.path.join(self._directory, "stop") if self._directory else None
        self._remote = False  # a copy in a worker: only the flag file tells it
        # in this process, what a branch's step boundary also asks (the budget's exact count)
        self.on_step: Callable[[str], None] | None = None

    def set(self, reason: str) -> None:
        """Stop the fan-out (the first reason given is kept)."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            if self._flag is not None:
                with open(self._flag + ".tmp", "w", encoding="utf-8") as file:
                    file.write(reason)
                os.replace(self._flag + ".tmp", self._flag)  # a reader sees the whole reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise `Stopped` if the fan-out has stopped: checked before every step of a branch."""
        if self._event.is_set():
            raise Stopped(self.reason or INTERRUPT)
        if self._remote and self._flag is not None and os.path.exists(self._flag):
            with open(self._flag, encoding="utf-8") as file:
                self.reason = file.read() or INTERRUPT
            self._event.set()
            raise Stopped(self.reason)

    def before_step(self, run_id: str) -> Callable[[], None]:
        """What branch `run_id` checks before each step: `check`, after `on_step` (here)."""
        on_step = self.on_step

        def check() -> None:
            if on_step is not None and not self._event.is_set():
                on_step(run_id)
            self.check()

        return check

    def close(self, *, abandoned: bool) -> None:
        """Remove the flag's directory, unless branches were left running that must see it."""
        if self._directory is not None and not abandoned:
            shutil.rmtree(self._directory, ignore_errors=True)

    def __getstate__(self) -> dict[str, Any]:
        return {"flag": self._flag}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.reason = None
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._directory = None
        self._flag = state["flag"]
        self._remote = True
        self.on_step = None


class Board:
    """What the fan-out knows of its branches while they run: which are running, and the
    outcomes of those that ended. Written by the code running them, read by the progress
    display (`kassette.explore._progress`) from another thread."""

    def __init__(self, count: int) -> None:
        self.outcomes: list[Outcome | None] = [None] * count
        self._running: set[int] = set()
        self._unread: set[int] = set()  # ended since the progress display last read them
        self._lock = threading.Lock()
        # what a branch's end also asks, before the fan-out starts another (the budget's count)
        self.on_end: Callable[[int], None] | None = None

    def started(self, index: int) -> None:
        with self._lock:
            self._running.add(index)

    def ended(self, index: int, outcome: Outcome) -> None:
        with self._lock:
            self._running.discard(index)
            self._unread.add(index)
            self.outcomes[index] = outcome
        if self.on_end is not None:
            self.on_end(index)

    def unread(self, *, everyone: bool = False) -> list[int]:
        """The branches whose journals may have grown since this was last asked: the running
        ones and those that ended since (every branch with `everyone`)."""
        with self._lock:
            indexes = range(len(self.outcomes)) if everyone else self._running | self._unread
            self._unread.clear()
            return sorted(indexes)

    def running(self) -> set[int]:
        with self._lock:
            return set(self._running)

    def snapshot(self) -> tuple[int, list[Outcome]]:
        """(how many branches are running, the outcomes so far)."""
        with self._lock:
            return len(self._running), [o for o in self.outcomes if o is not None]


def reported(run_id: str, status: RunStatus) -> RunResult | None:
    """The outcome of a branch that needs no new session: it ended, or waits for events."""
    return RunResult.from_status(status)  # None: running, stopped, or crashed mid-way: retry


def _existing(branch: Branch) -> RunResult | None:
    try:
        status = run_status(branch.workflow.storage, branch.run_id)
    except RunNotFoundError:
        return None
    return reported(branch.run_id, status)


class _InFlight:
    """The branches running in this process, by run id: a fan-out called again (after a
    second interrupt left a step running in the background) waits for the earlier
    invocation of a branch to end before it continues that branch, so no step runs twice."""

    def __init__(self) -> None:
        self._ended: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def enter(self, run_id: str) -> threading.Event:
        ended = threading.Event()
        with self._lock:
            self._ended[run_id] = ended
        return ended

    def leave(self, run_id: str, ended: threading.Event) -> None:
        with self._lock:
            if self._ended.get(run_id) is ended:
                del self._ended[run_id]
        ended.set()

    def earlier(self, run_id: str) -> threading.Event | None:
        with self._lock:
            return self._ended.get(run_id)


IN_FLIGHT = _InFlight()
_IN_FLIGHT_POLL_S = 0.05


def _wait_for_earlier(branch: Branch, stop: Stop) -> None:
    """Wait until an earlier invocation of this branch in this process has ended (see
    `_InFlight`); this fan-out's own stop still stops the wait."""
    earlier = IN_FLIGHT.earlier(branch.run_id)
    while earlier is not None and not earlier.wait(_IN_FLIGHT_POLL_S):
        stop.check()


async def _await_earlier(branch: Branch, stop: Stop) -> None:
    import asyncio

    earlier = IN_FLIGHT.earlier(branch.run_id)
    while earlier is not None and not earlier.is_set():
        stop.check()
        await asyncio.sleep(_IN_FLIGHT_POLL_S)


def run_branch(branch: Branch, stop: Stop) -> Outcome:
    """Fork (or retry) one branch and run it: what an executor runs. Never raises."""
    try:
        _ignore_interrupts_in_worker()
        _wait_for_earlier(branch, stop)
    except Stopped as stopped:
        return Halted(branch.run_id, stopped.reason)
    ended = IN_FLIGHT.enter(branch.run_id)
    try:
        return _run_branch(branch, stop)
    finally:
        IN_FLIGHT.leave(branch.run_id, ended)


def _run_branch(branch: Branch, stop: Stop) -> Outcome:
    try:
        reported = _existing(branch)
        if reported is not None:
            return reported
        stop.check()  # not started yet when the fan-out stopped: never start
        workflow = branch.workflow
        with checking_before_steps(stop.before_step(branch.run_id)):
            if isinstance(workflow, AsyncWorkflow):
                import asyncio

                return asyncio.run(workflow.fork(branch.source, **branch.fork_arguments()))
            return workflow.fork(branch.source, **branch.fork_arguments())
    except Stopped as stopped:
        return Halted(branch.run_id, stopped.reason)
    except Exception as exc:
        return _raised(branch, exc)


async def run_branch_async(branch: Branch, stop: Stop) -> Outcome:
    """`run_branch` for an `AsyncWorkflow`, as a task of the fan-out's loop."""
    try:
        await _await_earlier(branch, stop)
    except Stopped as stopped:
        return Halted(branch.run_id, stopped.reason)
    ended = IN_FLIGHT.enter(branch.run_id)
    try:
        return await _run_branch_async(branch, stop)
    finally:
        IN_FLIGHT.leave(branch.run_id, ended)


async def _run_branch_async(branch: Branch, stop: Stop) -> Outcome:
    try:
        reported = _existing(branch)
        if reported is not None:
            return reported
        stop.check()
        workflow = branch.workflow
        assert isinstance(workflow, AsyncWorkflow)
        with checking_before_steps(stop.before_step(branch.run_id)):
            return await workflow.fork(branch.source, **branch.fork_arguments())
    except Stopped as stopped:
        return Halted(branch.run_id, stopped.reason)
    except Exception as exc:
        return _raised(branch, exc)


def _raised(branch: Branch, exc: Exception) -> Outcome:
    """A branch whose invocation raised: `Raised`, unless the invocation ended its run (a fork
    whose replay failed is failed with the error), which then reports that end."""
    try:
        ended = _existing(branch)
    except Exception:  # the storage that raised may raise again: the first error tells
        ended = None
    return (
        ended
        if ended is not None
        else Raised(branch.run_id, ErrorInfo(type(exc).__name__, str(exc)))
    )


def _ignore_interrupts_in_worker() -> None:
    """In a worker process's main thread, ignore SIGINT from now on (see the module's doc)."""
    import multiprocessing

    if (
        multiprocessing.parent_process() is not None
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def outcome_of(run_id: str, future: Future[Any]) -> Outcome:
    """A future's outcome; a worker that died or could not take the task is the branch's."""
    if future.cancelled():
        return Halted(run_id, INTERRUPT)
    try:
        outcome: Outcome = future.result()
    except Exception as exc:
        return Raised(run_id, ErrorInfo(type(exc).__name__, str(exc)))
    return outcome


def run_all(
    branches: Sequence[Branch],
    executor: Executor | None,
    *,
    max_workers: int | None,
    stop: Stop,
    board: Board,
) -> tuple[bool, bool]:
    """Run every branch, at most `max_workers` at once, its outcome onto `board` (every
    branch has one when this returns). Returns (interrupted, abandoned): whether the caller
    was interrupted, and whether a second interrupt left branches running, to stop at their
    next step on their own (a running one's row then says "stopped" in advance)."""
    limit = max_workers or len(branches)
    if executor is None and all(isinstance(b.workflow, AsyncWorkflow) for b in branches):
        interrupted, abandoned = _on_one_loop(branches, limit, stop, board)
    elif executor is None:
        pool = ThreadPoolExecutor(limit, thread_name_prefix="kassette-branch")
        interrupted, abandoned = _on_executor(branches, pool, limit, stop, board)
        pool.shutdown(wait=not abandoned, cancel_futures=True)
    else:
        interrupted, abandoned = _on_executor(branches, executor, limit, stop, board)
    return interrupted, abandoned


def settle(branches: Sequence[Branch], stop: Stop, board: Board) -> None:
    """Give every branch without an outcome one: one never started is what an earlier call
    left it (its end), else stopped; one still running (left to stop on its own) stopped."""
    for index, outcome in enumerate(board.outcomes):
        if outcome is None:
            halted = Halted(branches[index].run_id, stop.reason or INTERRUPT)
            running = index in board.running()
            board.ended(index, halted if running else _existing(branches[index]) or halted)


@contextmanager
def interrupts_deferred() -> Iterator[list[int]]:
    """While a stopped fan-out gathers what its branches reached, an interrupt (a second or
    third Ctrl-C) is noted, not raised: the fan-out is stopping already, and what it raises
    (`FanOutInterrupted`, with its branches) must not be lost to a bare `KeyboardInterrupt`.
    Yields the list the SIGINTs received are appended to. Only the main thread can do this."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_executor(
    branches: Sequence[Branch], executor: Executor, limit: int, stop: Stop, board: Board
) -> tuple[bool, bool]:
    """Submit the branches to `executor`, `limit` at a time; (interrupted, abandoned)."""
    queue = deque(range(len(branches)))
    running: dict[Future[Any], int] = {}
    interrupted = False

    def end(futures: set[Future[Any]]) -> None:
        for future in futures:
            index = running.pop(future)
            board.ended(index, outcome_of(branches[index].run_id, future))

    gave_up_at = math.inf  # when to stop waiting for branches an interrupt could not reach
    while running or (queue and not stop.is_set()):
        if time.monotonic() > gave_up_at:
            for index in running.values():
                board.ended(index, Halted(branches[index].run_id, INTERRUPT))
            return True, True
        try:
            while queue and len(running) < limit and not stop.is_set():
                index = queue[0]
                board.started(index)  # first: the branch may reach a step before submit returns
                running[_submit(executor, branches[index], stop)] = index
                queue.popleft()
            done, _ = wait(running, timeout=WAIT_S, return_when=FIRST_COMPLETED)
            end(done)
        except KeyboardInterrupt:
            if interrupted:  # a second interrupt: stop waiting for branches to stop
                for future, index in running.items():
                    future.cancel()
                    board.ended(index, Halted(branches[index].run_id, INTERRUPT))
                return True, True
            interrupted = True
            stop.set(INTERRUPT)
            if isinstance(executor, ThreadPoolExecutor | ProcessPoolExecutor):
                # their cancel() takes back only what has not started; Dask's would drop a
                # running branch's future and leave it running: the flag stops those
                end({future for future in running if future.cancel()})
            else:  # a worker elsewhere may never see the flag, or have died of the SIGINT
                gave_up_at = time.monotonic() + OTHER_EXECUTOR_WAIT_S
    return interrupted, False


def _submit(executor: Executor, branch: Branch, stop: Stop) -> Future[Any]:
    """`executor.submit(run_branch, ...)`; a process pool's new workers are born ignoring
    SIGINT (see the module's doc), as far as this thread can arrange it."""
    if not isinstance(executor, ProcessPoolExecutor) or (
        threading.current_thread() is not threading.main_thread()
    ):
        return executor.submit(run_branch, branch, stop)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return executor.submit(run_branch, branch, stop)
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_one_loop(
    branches: Sequence[Branch], limit: int, stop: Stop, board: Board
) -> tuple[bool, bool]:
    """All branches as tasks of one event loop, in a thread of its own: a notebook's thread
    already runs a loop, which cannot be blocked on, and anywhere an interrupt must reach this
    thread, not the loop (`asyncio.run` answers a second SIGINT by canceling every task, a
    step in flight included). The first interrupt stops the branches at their next step; a
    second stops waiting for them: the steps in flight finish on that thread, journaled, and
    their branches stop there (`IN_FLIGHT` keeps a re-call from running them meanwhile).
    (interrupted, abandoned)."""
    import asyncio

    async def run(index: int, slots: asyncio.Semaphore) -> None:
        async with slots:
            if stop.is_set():  # never start a branch once the fan-out stopped
                return
            board.started(index)
            board.ended(index, await run_branch_async(branches[index], stop))

    async def gather() -> None:
        slots = asyncio.Semaphore(limit)
        await asyncio.gather(*(run(index, slots) for index in range(len(branches))))

    pool = ThreadPoolExecutor(1, thread_name_prefix="kassette-fan-out")
    future = pool.submit(asyncio.run, gather())
    interrupted = False
    try:
        while True:
            try:
                future.result()
                return interrupted, False
            except KeyboardInterrupt:
                if interrupted:  # a second interrupt: the loop's branches stop on their own
                    _finish_before_exit(future)
                    return True, True
                interrupted = True
                stop.set(INTERRUPT)
    finally:
        pool.shutdown(wait=False)


def _finish_before_exit(future: Future[Any]) -> None:
    """If the interpreter exits (a script's second Ctrl-C), let the loop left running finish
    its steps in flight first. An async invocation journals through an executor of its own,
    and executors take no work once the interpreter's exit has begun, so this must run before
    `concurrent.futures` shuts them down: `threading`'s exit hooks run in reverse order of
    registration, before that module's own (registered when it was imported). Where the hook
    is missing, the steps in flight are not journaled and a re-call runs them again."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return
    with suppress(RuntimeError):  # the interpreter is exiting already
        register(lambda: wait([future]))


@dataclass(frozen=True)
class Resume:
    """A delivery to one suspended branch, as sent to an executor."""

    branch: Branch
    event: str
    value: Any


def resume_one(resume: Resume) -> Outcome:
    workflow, run_id = resume.branch.workflow, resume.branch.run_id
    try:
        if isinstance(workflow, AsyncWorkflow):
            import asyncio

            return asyncio.run(workflow.resume(run_id, resume.event, resume.value))
        return workflow.resume(run_id, resume.event, resume.value)
    except Exception as exc:
        return Raised(run_id, ErrorInfo(type(exc).__name__, str(exc)))


def resume_all(resumes: Sequence[Resume], executor: Executor | None) -> list[Outcome]:
    """Every delivery's outcome, in order, run concurrently."""
    if not resumes:
        return []
    if executor is None:
        with ThreadPoolExecutor(len(resumes), thread_name_prefix="kassette-branch") as pool:
            return list(pool.map(resume_one, resumes))
    futures = [executor.submit(resume_one, resume) for resume in resumes]
    return [outcome_of(r.branch.run_id, f) for r, f in zip(resumes, futures, strict=True)]
