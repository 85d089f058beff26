"""Sessions begun from outside a run: opening one (the checks, the lock, the `start` entry)
and canceling a run.

Every invocation is a new session numbered one above every session in the journal. Opening
one decides whether it may continue the run (not ended; the same input, params and version),
takes the storage lock for its number and appends its `start` at the token it read (for a new
fork, after the source's prefix planned by `kassette._fork`); `kassette.core` wraps what it
opened in a `Run`. `cancel_run` is a session of one entry that takes no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from kassette._append import append, landed_token
from kassette._clock import Backoff, Clock, SystemClock
from kassette._codec import (
    CancelEntry,
    Entry,
    StartEntry,
    check_json,
    encode,
    format_timestamp,
    read_entry,
)
from kassette._fork import ForkPlan
from kassette._journal import Journal
from kassette._state import RunStatus
from kassette.errors import (
    ConflictError,
    InputMismatchError,
    InvalidArgumentError,
    RunNotFoundError,
    StorageError,
    VersionMismatchError,
)
from kassette.storage import ExclusiveAppend, Storage, open_storage, validate_run_id

__all__ = [
    "OpenedSession",
    "before_step_check",
    "cancel_run",
    "check_params",
    "checking_before_steps",
    "open_session",
]

_OPEN_ATTEMPTS = 20
_CANCEL_SECONDS = 10.0  # how long a cancel keeps trying while other writers get there first
_CANCEL_PAUSE, _CANCEL_MAX_PAUSE = 0.005, 0.1  # seconds, at most, between those tries


class OpenedSession(NamedTuple):
    """A session `open_session` opened: the run's journal with its `start` (and a new fork's
    entries) added, the storage token after them, the lock it holds (the caller releases it)
    and the run's input as its `start` journaled it."""

    journal: Journal
    token: str
    lock: Any
    metadata: Any


def open_session(
    storage: Storage,
    run_id: str,
    *,
    metadata: Any,
    params: dict[str, Any] | None,
    version: str | None,
    clock: Clock,
    fork: ForkPlan | None,
) -> OpenedSession:
    """Open the next session of `run_id`: check that it may continue the run (or create it,
    with `fork`'s prefix and edits), take the lock, append `start` at the token read.

    A compare-and-swap lost to another writer releases the lock and starts over, up to
    `_OPEN_ATTEMPTS` times (then `StorageError`). `params` come as `check_params` returns them.
    """
    validate_run_id(run_id)
    metadata = check_json(metadata, f"input of run {run_id}")
    for _ in range(_OPEN_ATTEMPTS):
        snapshot = storage.read(run_id)
        journal = Journal.parse(snapshot.data, run_id) if snapshot else Journal(run_id)
        if snapshot is not None:
            _check_existing(journal, metadata, params, version, fork)
            prefix: list[Entry] = []
        else:
            prefix = list(fork.prefix) if fork else []
            for entry in prefix:
                journal.add(entry)
        session = journal.max_session + 1
        lock = storage.lock(run_id, session)
        lock.__enter__()
        try:
            now = format_timestamp(clock.time())
            start: StartEntry = {
                "type": "start",
                "session": session,
                "offset": journal.next_offset,
                "timestamp": now,
                "metadata": _journaled_input(journal, metadata, fork),
            }
            if version is not None:
                start["version"] = version
            edits: list[Entry] = []
            if snapshot is None:
                recorded = params if params is not None or fork is None else fork.params
                if recorded is not None:
                    start["params"] = recorded
                if fork is not None:
                    start["source"] = fork.source
                    edits = [
                        {
                            "type": edit["type"],
                            "session": session,
                            "offset": start["offset"] + n,
                            "timestamp": now,
                            **{k: v for k, v in edit.items() if k != "type"},
                        }
                        for n, edit in enumerate(fork.edits, start=1)
                    ]
            try:
                at = snapshot.token if snapshot else None
                token = append(storage, run_id, [*prefix, start, *edits], at, clock)
            except ConflictError:
                lock.__exit__(None, None, None)
                continue
            journal.add(start)
            for edit in edits:
                journal.add(edit)
            return OpenedSession(journal, token, lock, start["metadata"])
        except BaseException:
            lock.__exit__(None, None, None)
            raise
    raise StorageError(
        f"run {run_id}: could not open a session, too many concurrent writers", run_id=run_id
    )


def check_params(params: Mapping[str, Any] | None, run_id: str) -> dict[str, Any] | None:
    """`params` as a run records them: a JSON object (a plain dict) or None."""
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise InvalidArgumentError(
            f"params of run {run_id} must be a JSON object (a dict), not {params!r}",
            run_id=run_id,
        )
    return check_json(dict(params), f"params of run {run_id}")  # type: ignore[no-any-return]


def _journaled_input(journal: Journal, metadata: Any, fork: ForkPlan | None) -> Any:
    if journal.first_start is not None:
        return journal.first_start.get("metadata")
    if fork is not None:
        return fork.metadata
    return metadata


def _check_existing(
    journal: Journal,
    metadata: Any,
    params: dict[str, Any] | None,
    version: str | None,
    fork: ForkPlan | None,
) -> None:
    """Whether this session may continue the existing run: a retry with what it recorded."""
    run_id = journal.run_id
    if fork is not None:
        fork.check_same(journal)
    journal.ensure_open()
    if version is not None and journal.version is not None and version != journal.version:
        raise VersionMismatchError(
            f"run {run_id} was started with version {journal.version!r}, this workflow is "
            f"{version!r}",
            run_id=run_id,
        )
    recorded = journal.first_start.get("metadata") if journal.first_start else None
    # a journal whose first start was torn off records no input to disagree with
    started = journal.first_start is not None
    if metadata is not None and started and metadata != recorded:
        raise InputMismatchError(f"run {run_id} was started with a different input", run_id=run_id)
    if params is not None and started and params != (journal.state.params or {}):
        raise InputMismatchError(
            f"run {run_id} was started with different params ({journal.state.params or {}}, "
            f"not {params})",
            run_id=run_id,
        )


def cancel_run(
    storage: Storage | str,
    run_id: str,
    reason: str | None = None,
    *,
    clock: Clock | None = None,
) -> RunStatus:
    """Append `cancel` in a new session, taking no lock: a live session is fenced at its next
    append (`RunCancelledError`).

    On a storage that appends exclusively (`ExclusiveAppend`: `LocalStorage`, `MemoryStorage`)
    the entry is planned on the journal as it is while every other writer is held off, so it
    lands however fast a live session appends. Elsewhere (`S3Storage`) it is a
    compare-and-swap on a fresh read, tried again after a short random pause whenever another
    writer appended in between, for up to `_CANCEL_SECONDS` on `clock`: then `StorageError`.
    """
    storage, clock = open_storage(storage), clock or SystemClock()
    validate_run_id(run_id)
    planned: list[tuple[Journal, CancelEntry]] = []

    def plan_on(journal: Journal) -> bytes:
        journal.ensure_open()
        entry: CancelEntry = {
            "type": "cancel",
            "session": journal.max_session + 1,
            "offset": journal.next_offset,
            "timestamp": format_timestamp(clock.time()),
            "reason": reason,
        }
        planned[:] = [(journal, entry)]
        return encode(entry)

    def plan(data: bytes | None) -> bytes:
        if data is None:
            raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
        return plan_on(Journal.parse(data, run_id))

    backoff = Backoff(
        clock, _CANCEL_PAUSE, most=_CANCEL_MAX_PAUSE, seconds=_CANCEL_SECONDS, jitter=True
    )
    attempts = 0
    parsed: tuple[Journal, bytes] | None = None  # the last read, to parse only what it lacks
    while True:
        attempts += 1
        planned.clear()
        try:
            if isinstance(storage, ExclusiveAppend):
                _append_exclusive(storage, run_id, plan, planned)
            else:
                snapshot = storage.read(run_id)
                if snapshot is None:
                    raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
                parsed = _caught_up(parsed, snapshot.data, run_id)
                data = plan_on(parsed[0])
                append(storage, run_id, [planned[0][1]], snapshot.token, clock, data=data)
        except ConflictError as exc:
            if not backoff.wait():  # pauses at random: out of step with a writer's rhythm
                raise StorageError(
                    f"run {run_id}: cancel did not land in {_CANCEL_SECONDS:g} s "
                    f"({attempts} attempts): another writer appended to the run before each "
                    "of them; try again",
                    run_id=run_id,
                ) from exc
            continue
        journal, entry = planned[0]
        journal.add(entry)
        return journal.status()


def _caught_up(
    parsed: tuple[Journal, bytes] | None, data: bytes, run_id: str
) -> tuple[Journal, bytes]:
    """`data` parsed, with its complete lines: when it extends the lines `parsed` holds (the
    journal only grew), only the new lines are read into that journal. A cancel retried
    against a busy writer re-reads a journal that grows by a few lines each time."""
    end = data.rfind(b"\n") + 1
    if parsed is None or not data.startswith(parsed[1]):
        return Journal.parse(data, run_id), data[:end]
    journal, seen = parsed
    for line in data[len(seen) : end].split(b"\n")[:-1]:
        journal.add(read_entry(line, run_id, journal.next_offset))
    return journal, data[:end]


def _append_exclusive(
    storage: ExclusiveAppend,
    run_id: str,
    plan: Callable[[bytes | None], bytes],
    planned: list[tuple[Journal, CancelEntry]],
) -> None:
    """`storage.append_exclusive`; a failure after which the entry is in the journal anyway
    (the write landed, its report failed) counts as written, as `append` does."""
    try:
        storage.append_exclusive(run_id, plan)
    except StorageError as failure:
        if isinstance(failure, ConflictError) or not planned:
            raise
        if landed_token(storage.read(run_id), run_id, [planned[0][1]]) is None:
            raise


# set by `checking_before_steps`: what runs opened in this thread or task call before a step
_BEFORE_STEP: ContextVar[Callable[[], None] | None] = ContextVar(
    "kassette_before_step", default=None
)


@contextmanager
def checking_before_steps(check: Callable[[], None]) -> Iterator[None]:
    """Runs opened inside this block (by this thread or task) call `check()` before each of
    their steps begins, in every thread and task of the invocation.

    `check` stops the invocation at that step boundary by raising a `BaseException` that is
    not an `Exception` (as `Suspended` is): the workflow engine re-raises it and journals
    nothing, so the run stays open (not failed, not canceled) and a later invocation replays
    it and continues. `kx.fan_out` stops its branches this way on Ctrl-C or at its budget.
    """
    reset = _BEFORE_STEP.set(check)
    try:
        yield
    finally:
        _BEFORE_STEP.reset(reset)


def before_step_check() -> Callable[[], None] | None:
    """The check `checking_before_steps` set for this thread or task, if any."""
    return _BEFORE_STEP.get()
