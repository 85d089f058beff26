"""Runs and sessions: the record/replay primitives every kassette workflow is built from.

A *run* is one journal. Each invocation opens a *session*: it reads the journal, takes the
storage lock, and appends a `start` entry numbered one above every session already there.
Inside the session, `record` answers a step from the journal when it is there and runs it live
(appending its result) when it is not; `wait_for_event` does the same for suspends. Every
append is a compare-and-swap on the storage token (`kassette._append`) that fences an old
session and never journals an entry twice. A fork (`fork_run`, `open_fork`) is a session of a
new run created with the source's prefix (`kassette._fork`); sessions open in
`kassette._sessions`.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType, TracebackType
from typing import Any, Literal, TypeVar, cast

from kassette._append import GroupCommit, Queued, read
from kassette._clock import Clock, SystemClock
from kassette._codec import (
    KNOWN_TYPES,
    CallRecord,
    Entry,
    check_call_record,
    check_json,
    check_json_encoded,
    event_name,
    format_timestamp,
)
from kassette._codec import new_run_id as fresh_run_id  # `new_run_id` names a fork's parameter
from kassette._fork import NO_RESULT, ForkPlan, plan_fork
from kassette._journal import Journal, StepIds
from kassette._listeners import listening, notify_appended, notify_closed, notify_opened
from kassette._sessions import (
    before_step_check,
    cancel_run,
    check_params,
    open_session,
)
from kassette._state import RunStatus
from kassette.errors import (
    InvalidArgumentError,
    ReplayMismatchError,
    RunCancelledError,
    RunNotFoundError,
    Suspended,
)
from kassette.storage import Storage, open_storage, validate_run_id

__all__ = [
    "Run",
    "Step",
    "cancel_run",
    "fork_run",
    "open_fork",
    "open_run",
    "read_journal",
    "run_status",
]

T = TypeVar("T")
StepKind = Literal["step", "sleep", "parallel"]
_ENVELOPE = frozenset({"type", "session", "offset", "timestamp"})


def read_journal(storage: Storage | str, run_id: str) -> Journal:
    """The run's parsed journal; `RunNotFoundError` when there is none."""
    return read(open_storage(storage), run_id)[0]


def run_status(storage: Storage | str, run_id: str) -> RunStatus:
    """The run's status, derived from its journal (step results are not decoded)."""
    snapshot = open_storage(storage).read(validate_run_id(run_id))
    if snapshot is None:
        raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
    return Journal.status_of(snapshot.data, run_id)


class Step:
    """A step as the code reaches it: its id, and its recorded entry when the journal has one.

    The seam for code that journals calls of its own (an SDK wrapper, say) the way `ctx.step`
    does: `Run.begin_step` (or `ctx.begin_step`) takes the next id and checks the journal;
    when `replayed`, use `result`; else make the call and `record` what it returned.
    """

    def __init__(
        self, run: Run, step_id: str, name: str, entry: Entry | None, kind: StepKind = "step"
    ) -> None:
        self.run = run
        self.step_id = step_id
        self.name = name
        self.entry = entry
        self.kind = kind
        self._started = time.perf_counter()

    @property
    def replayed(self) -> bool:
        """Whether the journal holds this step's result."""
        return self.entry is not None

    @property
    def result(self) -> Any:
        """The recorded result (for a step that is `replayed`)."""
        if self.entry is None:
            raise InvalidArgumentError(
                f"step {self.step_id!r} has no recorded result yet", run_id=self.run.run_id
            )
        return self.entry["result"]

    @property
    def call(self) -> CallRecord | None:
        """The recorded request of a model call (the entry's `call`), or None: a step that is
        not replayed, not a model call, or recorded without its request."""
        call = None if self.entry is None else self.entry.get("call")
        return cast(CallRecord, call) if isinstance(call, dict) else None

    def record(
        self, result: Any, *, attempts: int | None = None, call: CallRecord | None = None
    ) -> Any:
        """Journal the live call's `result`; return it as replay will see it. `call`: the step
        is a model call and this is its request, journaled after the result."""
        if self.entry is not None:
            raise InvalidArgumentError(
                f"step {self.step_id!r} is recorded already", run_id=self.run.run_id
            )
        self.entry = self.run._append_step(
            self.step_id,
            self.name,
            result,
            kind=self.kind,
            attempts=attempts,
            call=call,
            duration_ms=(time.perf_counter() - self._started) * 1000,
        )
        return self.entry["result"]


class Run:
    """One open session of a run: replay what the journal has, append what is new.

    Use it as a context manager (or call `close`) so the storage lock is released.
    Thread-safe: parallel branches may record concurrently.
    """

    def __init__(
        self,
        storage: Storage,
        journal: Journal,
        token: str,
        lock: Any,
        *,
        input: Any,
        version: str | None,
        clock: Clock,
    ) -> None:
        self.storage = storage
        self.journal = journal
        self.run_id = journal.run_id
        self.session = journal.max_session
        self.input = input
        self.version = version
        self.ids = StepIds()
        self._lock = lock
        self._clock = clock
        self._mutex = threading.RLock()
        self._unreplayed = len(journal.steps) + len(journal.suspends)
        self._commits = GroupCommit(storage, journal, self.session, token, clock)
        self._recorded = list(journal.steps)  # step ids, in the order they were journaled
        self._replayed: set[str] = set()
        self.before_step = before_step_check()  # see `checking_before_steps`
        if listening():  # the session's `start` (and a fork's edited entry), written already
            notify_opened(self.run_id, self.session, journal.entries)
            for entry in journal.entries:
                if entry["session"] == self.session:
                    notify_appended(self.run_id, entry)

    @property
    def metadata(self) -> Any:
        """Deprecated spelling of `input` (the journal's field keeps the name `metadata`)."""
        warnings.warn("Run.metadata is deprecated: use Run.input", DeprecationWarning, stacklevel=2)
        return self.input

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the run's lock (idempotent). Nothing is appended."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(None, None, None)
            if listening():
                notify_closed(self.run_id, self.session)

    @property
    def replaying(self) -> bool:
        """True while recorded steps or suspends remain to be answered from the journal."""
        return self._unreplayed > 0

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def params(self) -> Mapping[str, Any]:
        """The run's params (`start(..., params=...)`, or a fork's), read-only; `{}` if none."""
        return MappingProxyType(self.journal.state.params or {})

    @property
    def unreplayed(self) -> tuple[str, ...]:
        """Ids of steps journaled before this session that its code has not replayed (so far):
        after the code ended, steps it no longer has, say a renamed one in a fork's prefix."""
        with self._mutex:
            return tuple(s for s in self._recorded if s not in self._replayed)

    # -- the public primitives -------------------------------------------------------------

    def record(self, name: str, fn: Callable[[], T]) -> T:
        """Return `name`'s recorded result, or call `fn` and journal what it returns."""
        step = self.begin_step(name)
        return step.result if step.replayed else step.record(fn())  # type: ignore[no-any-return]

    def begin_step(self, name: str, *, ids: StepIds | None = None, kind: StepKind = "step") -> Step:
        """The next step named `name` (in the id scope `ids`, default the run's): see `Step`.

        The one way a step is recorded: `record`, and the workflow's `step`, `sleep` (kind
        "sleep") and `parallel` (kind "parallel") all begin here and end in `Step.record`.
        First it calls the run's `before_step` check, if any (`checking_before_steps`).
        """
        if self.before_step is not None:
            self.before_step()
        step_id = (ids or self.ids).next(name)
        return Step(self, step_id, name, self._replayed_step(step_id, name, kind), kind)

    def wait_for_event(
        self,
        event: str,
        *,
        timeout: float | None = None,
        reason: str | None = None,
        event_id: str | None = None,
    ) -> Any:
        """The payload delivered for `event`, or raise `Suspended` after journaling the wait.

        A wait whose `timeout` (seconds) passed without a delivery cancels the run with reason
        "timeout" and raises `RunCancelledError`.
        """
        if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
            raise InvalidArgumentError(
                f"timeout must be seconds >= 0, not {timeout!r}", run_id=self.run_id
            )
        event_id = event_id or self.ids.next(event, "event")
        with self._mutex:
            suspend = self.journal.suspends.get(event_id)
            if suspend is None:
                self._check_unused(event_id, "suspend")
                fields: dict[str, Any] = {"eventId": event_id, "event": event}
                if reason is not None:
                    fields["reason"] = str(reason)
                if timeout is not None:
                    fields["timeoutAt"] = format_timestamp(self._clock.time() + timeout)
                self._append("suspend", fields)
                raise Suspended((event_id,), run_id=self.run_id)
            self._unreplayed -= 1
            if event_name(suspend) != event:
                raise ReplayMismatchError(
                    f"run {self.run_id}: journal has a suspend for {event_name(suspend)!r} at "
                    f"{event_id}, the code waits for {event!r}",
                    run_id=self.run_id,
                    step_id=event_id,
                    offset=suspend["offset"],
                )
            delivered = self.journal.resumes.get(event_id)
            if delivered is not None:
                return delivered.get("value")
            timeout_at = self.journal.timed_out(event_id, self._clock.time())
            if timeout_at is not None:
                self.cancel("timeout")
                raise RunCancelledError(
                    f"run {self.run_id}: {event_id} timed out at {timeout_at}",
                    run_id=self.run_id,
                    step_id=event_id,
                )
            raise Suspended((event_id,), run_id=self.run_id)

    def deliver(self, event: str, value: Any) -> str:
        """Journal `value` for a pending event (by name or id) unless one was delivered already.

        The first delivered value is final, so delivering twice is not an error. Returns the
        event id. `EventNotPendingError` when the run never waited for `event`.
        """
        value = check_json(value, f"value for event {event!r}")
        with self._mutex:
            event_id, delivered = self.journal.require_event(event)
            if not delivered and self.journal.timed_out(event_id, self._clock.time()) is None:
                suspend = self.journal.suspends[event_id]
                self._append(
                    "resume", {"eventId": event_id, "event": event_name(suspend), "value": value}
                )
            return event_id

    def append_entry(self, entry_type: str, fields: dict[str, Any]) -> Entry:
        """Journal an entry of a type of your own (koto's transitions, say) in this session.

        Readers that do not know the type skip it, so the run's status is unaffected. The
        envelope keys and kassette's own entry types are refused. Returns the entry as written.
        """
        if not isinstance(entry_type, str) or not entry_type or entry_type in KNOWN_TYPES:
            raise InvalidArgumentError(
                f"entry type {entry_type!r} is empty or one of kassette's own", run_id=self.run_id
            )
        reserved = _ENVELOPE.intersection(fields)
        if reserved:
            raise InvalidArgumentError(
                f"fields {sorted(reserved)} are the envelope's, set by kassette", run_id=self.run_id
            )
        return self._append(entry_type, check_json(fields, f"{entry_type} entry"))

    def complete(self, result: Any) -> Any:
        """End the run successfully with `result` (returned as replay will see it)."""
        value, encoded = check_json_encoded(result, f"result of run {self.run_id}")
        self._append("complete", {"result": value}, ("result", encoded))
        return value

    def fail(self, exc: BaseException) -> None:
        """End the run as failed, journaling the error's type, message and traceback."""
        import traceback  # only failing runs need it

        error = {
            "name": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
        }
        self._append("error", {"error": error})

    def cancel(self, reason: str | None = None) -> None:
        """End the run as canceled."""
        self._append("cancel", {"reason": reason})

    # -- what `Step` is made of -------------------------------------------------------------

    def _replayed_step(self, step_id: str, name: str, kind: StepKind) -> Entry | None:
        """The recorded entry for `step_id`, checked against what the code asks for."""
        with self._mutex:
            entry = self.journal.steps.get(step_id)
            if entry is None:
                self._check_unused(step_id, kind)
                return None
            self._unreplayed -= 1
            self._replayed.add(step_id)
        recorded_kind = entry.get("kind", "step")
        if recorded_kind != kind or entry["name"] != name:
            raise ReplayMismatchError(
                f"run {self.run_id}: journal has {recorded_kind} {entry['name']!r} at "
                f"{step_id}, the code runs {kind} {name!r}",
                run_id=self.run_id,
                step_id=step_id,
                offset=entry["offset"],
            )
        return entry

    def _append_step(
        self,
        step_id: str,
        name: str,
        result: Any,
        *,
        kind: StepKind = "step",
        attempts: int | None = None,
        call: CallRecord | None = None,
        duration_ms: float | None = None,
    ) -> Entry:
        """Journal a live step's result; return its entry (the result as replay will see it)."""
        value, encoded = check_json_encoded(result, f"result of step {step_id!r}")
        fields: dict[str, Any] = {"stepId": step_id, "name": name, "result": value}
        if call is not None:
            fields["call"] = check_call_record(call, step_id, self.run_id)
        if kind != "step":
            fields["kind"] = kind
        if attempts is not None and attempts > 1:
            fields["attempts"] = attempts
        if duration_ms is not None and kind == "step":  # a sleep or a block calls nothing
            fields["durationMs"] = round(duration_ms, 3)
        return self._append("step", fields, ("result", encoded))

    def _check_unused(self, step_id: str, kind: str) -> None:
        other = (
            self.journal.suspends.get(step_id)
            if kind != "suspend"
            else self.journal.steps.get(step_id)
        )
        if other is not None:
            raise ReplayMismatchError(
                f"run {self.run_id}: journal has a {other['type']} at {step_id}, the code runs "
                f"a {kind}",
                run_id=self.run_id,
                step_id=step_id,
                offset=other["offset"],
            )

    def _append(
        self, kind: str, fields: dict[str, Any], raw: tuple[str, bytes] | None = None
    ) -> Entry:
        """Journal an entry; return once it is durable (its write returned), not before.

        Entries appended concurrently (parallel branches) are written together: see
        `kassette._append.GroupCommit`. `raw` is a field's value already encoded.
        """
        queued = self._commits.queue(kind, fields, raw)
        deferred = _DEFERRED.get()
        if deferred is not None and deferred[0] is self:
            deferred[1].append(queued)  # the caller writes it (`_write`) before reporting it
        else:
            self._commits.wait(queued)
            if listening():
                notify_appended(self.run_id, queued.entry)
        return queued.entry

    @contextmanager
    def deferring_writes(self) -> Iterator[list[Queued]]:
        """Appends made in this block (by this thread or task) are numbered and queued as usual
        but not written: the caller passes the list to `write_deferred`, in any thread, and reports
        nothing before it returns. How an async workflow numbers entries on its event loop, in
        the order the loop makes them, and writes them from a worker thread."""
        pending: list[Queued] = []
        reset = _DEFERRED.set((self, pending))
        try:
            yield pending
        finally:
            _DEFERRED.reset(reset)

    def write_deferred(self, pending: Sequence[Queued]) -> None:
        """Return once every entry in `pending` is written (a group commit, see `GroupCommit`)."""
        for queued in pending:
            self._commits.wait(queued)
        if listening():
            for queued in pending:
                notify_appended(self.run_id, queued.entry)


_UNSET: Any = object()  # `open_run(metadata=)` not given

# set by `Run.deferring_writes`: the run whose appends in this thread or task are queued, not
# written
_DEFERRED: ContextVar[tuple[Run, list[Queued]] | None] = ContextVar(
    "kassette_deferred", default=None
)


def open_run(
    storage: Storage | str,
    run_id: str,
    *,
    input: Any = None,
    version: str | None = None,
    clock: Clock | None = None,
    params: Mapping[str, Any] | None = None,
    metadata: Any = _UNSET,
) -> Run:
    """Open a new fenced session of `run_id`, creating the run when it does not exist.

    `input` (journaled as the `start` entry's `metadata`) and `params` (a JSON object,
    `Run.params`) are recorded by the session that creates the run and checked against the
    journal for an existing run;
    leave them out (None) to continue a run with whatever it was started with. `version` is
    checked against the first `start` entry that has one. Raises `TerminalRunError` for an
    ended run, `RunLockedError` when another live process holds it. Every function here takes
    a `Storage` or a storage URL (`file:PATH`, `memory:`, `s3://...`). `metadata=` is the
    deprecated spelling of `input=`.
    """
    if metadata is not _UNSET:
        warnings.warn(
            "open_run(metadata=...) is deprecated: pass input=... (the journal keeps the "
            "field's name, metadata)",
            DeprecationWarning,
            stacklevel=2,
        )
        input = metadata
    return _open_session(
        open_storage(storage),
        run_id,
        input=input,
        params=check_params(params, run_id),
        version=version,
        clock=clock or SystemClock(),
        fork=None,
    )


def fork_run(
    storage: Storage | str,
    source_run_id: str,
    *,
    offset: int | None = None,
    step: str | None = None,
    new_run_id: str | None = None,
    clock: Clock | None = None,
    params: Mapping[str, Any] | None = None,
    result: Any = NO_RESULT,
) -> str:
    """Write a new run holding `source_run_id`'s entries before the fork point and a `start`
    entry with `source`; return its id. The next `start(run_id=...)` continues it live.

    `params` are the fork's own (default: its source's). With `result`, the entry at the fork
    point is recorded with that result instead of being run (see `kassette._fork`). Forking
    into an existing run id is a retry when that run is the same fork (same source and
    offset), else `RunExistsError`."""
    with open_fork(
        storage,
        source_run_id,
        offset=offset,
        step=step,
        new_run_id=new_run_id,
        clock=clock,
        params=params,
        result=result,
    ) as run:
        return run.run_id


def open_fork(
    storage: Storage | str,
    source_run_id: str,
    *,
    offset: int | None = None,
    step: str | None = None,
    new_run_id: str | None = None,
    version: str | None = None,
    clock: Clock | None = None,
    params: Mapping[str, Any] | None = None,
    result: Any = NO_RESULT,
) -> Run:
    """`fork_run`, keeping the new run's first session open (for code to continue it live)."""
    validate_run_id(source_run_id)
    storage = open_storage(storage)
    new_id = validate_run_id(new_run_id) if new_run_id is not None else fresh_run_id()
    checked = check_params(params, new_id)
    fork = plan_fork(storage, source_run_id, offset, step, result=result)
    return _open_session(
        storage,
        new_id,
        input=None,
        params=checked,
        version=version,
        clock=clock or SystemClock(),
        fork=fork,
    )


def _open_session(
    storage: Storage,
    run_id: str,
    *,
    input: Any,
    params: dict[str, Any] | None,
    version: str | None,
    clock: Clock,
    fork: ForkPlan | None,
) -> Run:
    opened = open_session(
        storage,
        run_id,
        metadata=input,
        params=params,
        version=version,
        clock=clock,
        fork=fork,
    )
    try:
        return Run(
            storage,
            opened.journal,
            opened.token,
            opened.lock,
            input=opened.metadata,
            version=version,
            clock=clock,
        )
    except BaseException:
        opened.lock.__exit__(None, None, None)
        raise
