"""Runs and sessions: the record/replay primitives every kassette workflow is built from.

A *run* is one journal. Each invocation opens a *session*: it reads the journal, takes the
storage lock, and appends a `start` entry numbered one above every session already there.
Inside the session, `record` answers a step from the journal when it is there and runs it live
(appending its result) when it is not; `wait_for_event` does the same for suspends. Every
append is a compare-and-swap on the storage token: when the journal moved under us, a newer
session there means this one is fenced (`FencedError`, or `CancelledError` if the newer session
canceled the run); otherwise the append is retried, recognising an entry of ours that landed
although its write reported failure, so nothing is ever journaled twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeVar

from kassette.clock import Clock, SystemClock
from kassette.errors import (
    CancelledError,
    ConflictError,
    EventNotPendingError,
    FencedError,
    InvalidArgumentError,
    MetadataMismatchError,
    ReplayMismatchError,
    RunNotFoundError,
    StorageError,
    Suspended,
    TerminalRunError,
    VersionMismatchError,
)
from kassette.journal import (
    KNOWN_TYPES,
    CancelEntry,
    Entry,
    Journal,
    RunStatus,
    StartEntry,
    check_json,
    encode,
    event_name,
    format_timestamp,
    parse_timestamp,
    validate_name,
)
from kassette.journal import (
    new_run_id as fresh_run_id,
)
from kassette.storage import Storage, validate_run_id

__all__ = [
    "Run",
    "Step",
    "StepIds",
    "cancel_run",
    "fork_run",
    "open_run",
    "read_journal",
    "run_status",
]

T = TypeVar("T")
StepKind = Literal["step", "sleep", "parallel"]
_APPEND_ATTEMPTS = 5
_OPEN_ATTEMPTS = 20
_UNSET: Any = object()
_ENVELOPE = frozenset({"type", "session", "offset", "timestamp"})


class StepIds:
    """Step and event ids for one scope: `name`, `name#2`, ... each prefixed by the scope.

    The root scope has no prefix; a parallel branch's scope is `block/branch/`.
    """

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._counts: dict[str, int] = {}

    def next(self, name: str, what: str = "step") -> str:
        validate_name(name, what)
        count = self._counts.get(name, 0) + 1
        self._counts[name] = count
        return f"{self.prefix}{name}" if count == 1 else f"{self.prefix}{name}#{count}"


def read_journal(storage: Storage, run_id: str) -> Journal:
    """The run's parsed journal; `RunNotFoundError` when there is none."""
    return _read(storage, run_id)[0]


def _read(storage: Storage, run_id: str) -> tuple[Journal, str]:
    """The run's parsed journal and its token; `RunNotFoundError` when there is none."""
    snapshot = storage.read(validate_run_id(run_id))
    if snapshot is None:
        raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
    return Journal.parse(snapshot.data, run_id), snapshot.token


def run_status(storage: Storage, run_id: str) -> RunStatus:
    """The run's status, derived from its journal."""
    return read_journal(storage, run_id).status()


def _ensure_open(journal: Journal) -> None:
    terminal = journal.terminal
    if terminal is None:
        return
    error = CancelledError if terminal["type"] == "cancel" else TerminalRunError
    raise error(
        f"run {journal.run_id} already ended with {terminal['type']!r} at offset "
        f"{terminal['offset']}",
        run_id=journal.run_id,
        offset=terminal["offset"],
    )


@dataclass(frozen=True)
class _Fork:
    """What a fork copies: the source's entries before `offset`, and where they came from."""

    source_run_id: str
    offset: int
    prefix: list[Entry]
    metadata: Any


def _plan_fork(storage: Storage, run_id: str, offset: int | None, step: str | None) -> _Fork:
    if (offset is None) == (step is None):
        raise InvalidArgumentError("fork needs exactly one of offset or step", run_id=run_id)
    source = read_journal(storage, run_id)
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
    last = source.terminal["offset"] if source.terminal else source.next_offset
    if cut > last:
        raise InvalidArgumentError(
            f"fork offset {cut} is past the end of run {run_id} "
            f"({'terminal entry at' if source.terminal else 'next offset'} {last})",
            run_id=run_id,
            offset=cut,
        )
    metadata = source.first_start.get("metadata") if source.first_start else None
    return _Fork(run_id, cut, source.entries[:cut], metadata)


class Step:
    """A step as the code reaches it: its id, and its recorded entry when the journal has one.

    The seam for code that journals calls of its own (an SDK wrapper, say) the way `ctx.step`
    does: `Run.begin_step` (or `ctx.begin_step`) takes the next id and checks the journal;
    when `replayed`, use `result`; else make the call and `record` what it returned.
    """

    def __init__(self, run: Run, step_id: str, name: str, entry: Entry | None) -> None:
        self.run = run
        self.step_id = step_id
        self.name = name
        self.entry = entry
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

    def record(self, result: Any, *, attempts: int | None = None) -> Any:
        """Journal the live call's `result`; return it as replay will see it."""
        if self.entry is not None:
            raise InvalidArgumentError(
                f"step {self.step_id!r} is recorded already", run_id=self.run.run_id
            )
        value = self.run.append_step(
            self.step_id,
            self.name,
            result,
            attempts=attempts,
            duration_ms=(time.perf_counter() - self._started) * 1000,
        )
        self.entry = self.run.journal.steps[self.step_id]
        return value


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
        metadata: Any,
        version: str | None,
        clock: Clock,
    ) -> None:
        self.storage = storage
        self.journal = journal
        self.run_id = journal.run_id
        self.session = journal.max_session
        self.metadata = metadata
        self.version = version
        self.ids = StepIds()
        self._token = token
        self._lock = lock
        self._clock = clock
        self._mutex = threading.RLock()
        self._unreplayed = len(journal.steps) + len(journal.suspends)

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

    @property
    def replaying(self) -> bool:
        """True while recorded steps or suspends remain to be answered from the journal."""
        return self._unreplayed > 0

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- the public primitives -------------------------------------------------------------

    def record(self, name: str, fn: Callable[[], T]) -> T:
        """Return `name`'s recorded result, or call `fn` and journal what it returns."""
        step = self.begin_step(name)
        return step.result if step.replayed else step.record(fn())  # type: ignore[no-any-return]

    def begin_step(self, name: str, *, ids: StepIds | None = None) -> Step:
        """The next step named `name` (in the id scope `ids`, default the run's): see `Step`."""
        step_id = (ids or self.ids).next(name)
        return Step(self, step_id, name, self.replayed_step(step_id, name, "step"))

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
        "timeout" and raises `CancelledError`.
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
            timeout_at = suspend.get("timeoutAt")
            if timeout_at is not None and parse_timestamp(timeout_at) <= self._clock.time():
                self.cancel("timeout")
                raise CancelledError(
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
            match = self.journal.resolve_event(event)
            if match is None:
                raise EventNotPendingError(
                    f"run {self.run_id} is not waiting for {event!r} (pending: "
                    f"{', '.join(self.journal.pending_events) or 'none'})",
                    run_id=self.run_id,
                )
            event_id, delivered = match
            if not delivered and not self._timed_out(event_id):
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
        value = check_json(result, f"result of run {self.run_id}")
        self._append("complete", {"result": value})
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

    # -- building blocks for the workflow layer --------------------------------------------

    def replayed_step(self, step_id: str, name: str, kind: StepKind) -> Entry | None:
        """The recorded entry for `step_id`, checked against what the code asks for."""
        with self._mutex:
            entry = self.journal.steps.get(step_id)
            if entry is None:
                self._check_unused(step_id, kind)
                return None
            self._unreplayed -= 1
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

    def append_step(
        self,
        step_id: str,
        name: str,
        result: Any,
        *,
        kind: StepKind = "step",
        attempts: int | None = None,
        duration_ms: float | None = None,
    ) -> Any:
        """Journal a live step's result; return it as replay will see it."""
        value = check_json(result, f"result of step {step_id!r}")
        fields: dict[str, Any] = {"stepId": step_id, "name": name, "result": value}
        if kind != "step":
            fields["kind"] = kind
        if attempts is not None and attempts > 1:
            fields["attempts"] = attempts
        if duration_ms is not None:
            fields["durationMs"] = round(duration_ms, 3)
        self._append("step", fields)
        return value

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

    def _timed_out(self, event_id: str) -> bool:
        timeout_at = self.journal.suspends[event_id].get("timeoutAt")
        return timeout_at is not None and parse_timestamp(timeout_at) <= self._clock.time()

    def _append(self, kind: str, fields: dict[str, Any]) -> Entry:
        with self._mutex:
            _ensure_open(self.journal)
            entry: Entry = {
                "type": kind,
                "session": self.session,
                "offset": self.journal.next_offset,
                "timestamp": format_timestamp(self._clock.time()),
                **fields,
            }
            self._token = _commit(self.storage, self.journal, entry, self._token)
            self.journal.add(entry)
            return entry


def _append(
    storage: Storage, run_id: str, entries: Sequence[Mapping[str, Any]], token: str | None
) -> str:
    """Append `entries` at `token`: the one way kassette writes a journal. Returns the new token.

    A failed write is resolved by reading the journal back: entries that are there count as
    written (an ambiguous failure, such as a timeout after the write committed, or a retried
    request conflicting with its own first attempt), so nothing is journaled twice. Otherwise
    the error is raised: `ConflictError` when the journal moved, for the caller to re-plan.
    """
    try:
        return storage.append(run_id, b"".join(encode(entry) for entry in entries), token=token)
    except StorageError:
        landed = _landed(storage, run_id, entries)
        if landed is None:
            raise
        return landed


def _commit(storage: Storage, journal: Journal, entry: Entry, token: str) -> str:
    """Append `entry` of an open session at `token`, retrying while the session is not fenced.

    Returns the new token. The journal is not modified here.
    """
    run_id, offset, session = journal.run_id, entry["offset"], entry["session"]
    delay = 0.05
    for _ in range(_APPEND_ATTEMPTS):
        try:
            return _append(storage, run_id, [entry], token)
        except StorageError as exc:
            failure = exc
        if not isinstance(failure, ConflictError):
            time.sleep(delay)
            delay *= 2
        snapshot = storage.read(run_id)
        if snapshot is None:
            raise FencedError(
                f"run {run_id} disappeared while session {session} wrote",
                run_id=run_id,
                offset=offset,
            ) from failure
        current = Journal.parse(snapshot.data, run_id)
        if current.max_session > session:
            newer = next(e for e in current.entries if e["session"] > session)
            canceled = current.state.status == "canceled"
            raise (CancelledError if canceled else FencedError)(
                f"run {run_id}: session {newer['session']} (offset {newer['offset']}) "
                f"superseded session {session}",
                run_id=run_id,
                offset=newer["offset"],
            ) from failure
        if current.next_offset != offset:
            raise FencedError(
                f"run {run_id}: another writer of session {session} appended at offset {offset}",
                run_id=run_id,
                offset=offset,
            ) from failure
        token = snapshot.token
    raise StorageError(
        f"run {run_id}: append at offset {offset} failed {_APPEND_ATTEMPTS} times: {failure}",
        run_id=run_id,
        offset=offset,
    ) from failure


def open_run(
    storage: Storage,
    run_id: str,
    *,
    metadata: Any = _UNSET,
    version: str | None = None,
    clock: Clock | None = None,
) -> Run:
    """Open a new fenced session of `run_id`, creating the run when it does not exist.

    `metadata` (the run's input) is checked against the journal for an existing run; leave it
    out to continue a run with whatever input it was started with. `version` is checked
    against the first `start` entry that has one. Raises `TerminalRunError` for an ended run,
    `RunLockedError` when another live process holds it.
    """
    return _open_session(
        storage, run_id, metadata=metadata, version=version, clock=clock or SystemClock(), fork=None
    )


def fork_run(
    storage: Storage,
    source_run_id: str,
    *,
    offset: int | None = None,
    step: str | None = None,
    new_run_id: str | None = None,
    clock: Clock | None = None,
) -> str:
    """Write a new run holding `source_run_id`'s entries before the fork point and a `start`
    entry with `source`; return its id. The next `start(run_id=...)` continues it live."""
    with _open_fork(
        storage,
        source_run_id,
        offset=offset,
        step=step,
        new_run_id=new_run_id,
        version=None,
        clock=clock or SystemClock(),
    ) as run:
        return run.run_id


def _open_fork(
    storage: Storage,
    source_run_id: str,
    *,
    offset: int | None,
    step: str | None,
    new_run_id: str | None,
    version: str | None,
    clock: Clock,
) -> Run:
    validate_run_id(source_run_id)
    new_run_id = validate_run_id(new_run_id) if new_run_id is not None else fresh_run_id()
    fork = _plan_fork(storage, source_run_id, offset, step)
    return _open_session(
        storage, new_run_id, metadata=_UNSET, version=version, clock=clock, fork=fork
    )


def _landed(storage: Storage, run_id: str, entries: Sequence[Mapping[str, Any]]) -> str | None:
    """After an append reported failure: the new token if `entries` did land, else None.

    An ambiguous failure (the write committed, its response was lost) must not make the caller
    write the same entries again, nor give up on entries that are in the journal.
    """
    snapshot = storage.read(run_id)
    if snapshot is None:
        return None
    return snapshot.token if _ends_with(Journal.parse(snapshot.data, run_id), entries) else None


def _ends_with(journal: Journal, entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `entries` are exactly the journal's last entries, at their own offsets."""
    first = entries[0]["offset"]
    return journal.next_offset == first + len(entries) and journal.entries[first:] == entries


def cancel_run(
    storage: Storage, run_id: str, reason: str | None = None, *, clock: Clock | None = None
) -> RunStatus:
    """Append `cancel` in a new session (no lock: a live writer is fenced on its next append)."""
    clock = clock or SystemClock()
    for _ in range(_OPEN_ATTEMPTS):
        journal, token = _read(storage, run_id)
        _ensure_open(journal)
        entry: CancelEntry = {
            "type": "cancel",
            "session": journal.max_session + 1,
            "offset": journal.next_offset,
            "timestamp": format_timestamp(clock.time()),
            "reason": reason,
        }
        try:
            _append(storage, run_id, [entry], token)
        except ConflictError:
            continue
        journal.add(entry)
        return journal.status()
    raise StorageError(f"run {run_id}: cancel kept conflicting with other writers", run_id=run_id)


def _open_session(
    storage: Storage,
    run_id: str,
    *,
    metadata: Any,
    version: str | None,
    clock: Clock,
    fork: _Fork | None,
) -> Run:
    validate_run_id(run_id)
    if metadata is not _UNSET:
        metadata = check_json(metadata, f"input of run {run_id}")
    for _ in range(_OPEN_ATTEMPTS):
        snapshot = storage.read(run_id)
        journal = Journal.parse(snapshot.data, run_id) if snapshot else Journal(run_id)
        if snapshot is not None:
            _check_existing(journal, metadata, version, fork)
            prefix: list[Entry] = []
        else:
            prefix = list(fork.prefix) if fork else []
            for entry in prefix:
                journal.add(entry)
        session = journal.max_session + 1
        lock = storage.lock(run_id, session)
        lock.__enter__()
        try:
            start: StartEntry = {
                "type": "start",
                "session": session,
                "offset": journal.next_offset,
                "timestamp": format_timestamp(clock.time()),
                "metadata": _journaled_input(journal, metadata, fork),
            }
            if version is not None:
                start["version"] = version
            if fork is not None and snapshot is None:
                start["source"] = {"runId": fork.source_run_id, "fromOffset": fork.offset}
            try:
                at = snapshot.token if snapshot else None
                token = _append(storage, run_id, [*prefix, start], at)
            except ConflictError:
                lock.__exit__(None, None, None)
                continue
            journal.add(start)
            return Run(
                storage,
                journal,
                token,
                lock,
                metadata=start["metadata"],
                version=version,
                clock=clock,
            )
        except BaseException:
            lock.__exit__(None, None, None)
            raise
    raise StorageError(
        f"run {run_id}: could not open a session, too many concurrent writers", run_id=run_id
    )


def _journaled_input(journal: Journal, metadata: Any, fork: _Fork | None) -> Any:
    if journal.first_start is not None:
        return journal.first_start.get("metadata")
    if fork is not None:
        return fork.metadata
    return None if metadata is _UNSET else metadata


def _check_existing(
    journal: Journal, metadata: Any, version: str | None, fork: _Fork | None
) -> None:
    run_id = journal.run_id
    _ensure_open(journal)
    if fork is not None:
        source = journal.status().source
        if source != {"runId": fork.source_run_id, "fromOffset": fork.offset}:
            raise InvalidArgumentError(
                f"cannot fork into {run_id}: a run with that id already exists", run_id=run_id
            )
    if version is not None and journal.version is not None and version != journal.version:
        raise VersionMismatchError(
            f"run {run_id} was started with version {journal.version!r}, this workflow is "
            f"{version!r}",
            run_id=run_id,
        )
    recorded = journal.first_start.get("metadata") if journal.first_start else None
    # a journal whose first start was torn off records no input to disagree with
    started = journal.first_start is not None
    if metadata is not _UNSET and metadata is not None and started and metadata != recorded:
        raise MetadataMismatchError(
            f"run {run_id} was started with a different input", run_id=run_id
        )
