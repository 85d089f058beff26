"""The record/replay primitives: sessions, replay, events, timeouts, forks, cancels, fencing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kassette.core import (
    StepIds,
    cancel_run,
    fork_run,
    open_run,
    read_journal,
    run_status,
)
from kassette.errors import (
    EventNotPendingError,
    FencedError,
    InputMismatchError,
    InvalidArgumentError,
    JournalCorruptionError,
    NotSerializableError,
    ReplayMismatchError,
    RunCancelledError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    StorageError,
    Suspended,
    TerminalRunError,
    VersionMismatchError,
)
from kassette.storage import Snapshot, Storage
from kassette.storage._local import LocalStorage
from kassette.storage._memory import MemoryStorage
from kassette.testing import FakeClock


@pytest.fixture(params=["local", "memory"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "journals")
    return MemoryStorage()


def data_of(storage: Storage, run_id: str) -> bytes:
    snapshot = storage.read(run_id)
    assert snapshot is not None
    return snapshot.data


def types_of(storage: Storage, run_id: str) -> list[str]:
    return [e["type"] for e in read_journal(storage, run_id).entries]


def assert_dense(storage: Storage, run_id: str) -> None:
    entries = read_journal(storage, run_id).entries
    assert [e["offset"] for e in entries] == list(range(len(entries)))
    sessions = [e["session"] for e in entries]
    assert sessions == sorted(sessions)


def never_called() -> Any:
    raise AssertionError("a replayed step must not run")


# -- sessions and replay --------------------------------------------------------------------


def test_open_run_metadata_is_a_deprecated_spelling_of_input(storage: Storage) -> None:
    with pytest.warns(DeprecationWarning, match=r"open_run\(metadata=\.\.\.\) is deprecated"):
        run = open_run(storage, "old", metadata={"ticket": 7})
    with run:
        assert run.input == {"ticket": 7}
        with pytest.warns(DeprecationWarning, match=r"Run\.metadata is deprecated"):
            assert run.metadata == {"ticket": 7}
    assert read_journal(storage, "old").entries[0]["metadata"] == {"ticket": 7}


def test_open_run_creates_the_run_with_a_start_entry(storage: Storage) -> None:
    assert list(storage.list_runs()) == []
    with open_run(storage, "r1", input={"ticket": 7}, version="v1") as run:
        assert run.run_id == "r1" and run.session == 1 and run.input == {"ticket": 7}
        assert run.replaying is False
    (first,) = read_journal(storage, "r1").entries
    assert first["type"] == "start" and first["session"] == 1 and first["offset"] == 0
    assert first["metadata"] == {"ticket": 7} and first["version"] == "v1"
    assert "source" not in first
    with open_run(storage, "r1", input={"ticket": 7}, version="v1") as run:
        assert run.session == 2
    entries = read_journal(storage, "r1").entries
    assert [(e["type"], e["session"], e["offset"]) for e in entries] == [
        ("start", 1, 0),
        ("start", 2, 1),
    ]
    assert entries[1]["metadata"] == {"ticket": 7}  # every start repeats the run's input
    assert list(storage.list_runs()) == ["r1"]


def test_record_replays_without_calling_fn(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        assert run.record("fetch", lambda: {"rows": [1, 2]}) == {"rows": [1, 2]}
        as_replayed: Any = run.record("fetch", lambda: (3, 4))
        assert as_replayed == [3, 4]  # a tuple comes back as replay will see it
        assert run.record("other", lambda: "x") == "x"
    with open_run(storage, "r1") as run:
        assert run.replaying is True
        assert run.record("fetch", never_called) == {"rows": [1, 2]}
        assert run.replaying is True
        assert run.record("fetch", never_called) == [3, 4]
        assert run.replaying is True
        assert run.record("other", never_called) == "x"
        assert run.replaying is False
        assert run.record("fetch", lambda: "live") == "live"
    journal = read_journal(storage, "r1")
    assert list(journal.steps) == ["fetch", "fetch#2", "other", "fetch#3"]
    assert journal.steps["fetch#3"]["session"] == 2
    step = journal.steps["fetch"]
    assert step["name"] == "fetch" and isinstance(step["durationMs"], float)
    assert "kind" not in step and "attempts" not in step


def test_a_failing_fn_writes_nothing(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        before = data_of(storage, "r1")
        with pytest.raises(ZeroDivisionError):
            run.record("divide", lambda: 1 / 0)
        with pytest.raises(NotSerializableError, match="divide#2"):
            run.record("divide", lambda: {1, 2})
        assert data_of(storage, "r1") == before
        assert run.record("divide", lambda: 1) == 1  # the id counter moved on: divide#3
    assert list(read_journal(storage, "r1").steps) == ["divide#3"]


def test_replay_mismatch_names_the_step(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        run.begin_step("nap", kind="sleep").record({"wakeAt": "2026-01-01T00:00:00.000Z"})
        with pytest.raises(Suspended):
            run.wait_for_event("approval")
    with open_run(storage, "r1") as run:
        with pytest.raises(ReplayMismatchError) as caught:
            run.record("nap", never_called)
        assert caught.value.step_id == "nap" and caught.value.offset == 1
        assert caught.value.run_id == "r1"
        with pytest.raises(ReplayMismatchError) as caught:
            run.record("approval", never_called)  # the journal has a suspend there
        assert caught.value.step_id == "approval" and caught.value.offset == 2


def test_bad_names_and_ids_are_refused_before_io(storage: Storage, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        open_run(storage, "../escape")
    with pytest.raises(InvalidArgumentError):
        open_run(storage, "")
    assert list(storage.list_runs()) == []
    assert not (tmp_path / "journals").exists() and not (tmp_path / "escape.jsonl").exists()
    with open_run(storage, "r1") as run:
        before = data_of(storage, "r1")
        for bad in ["a#2", "a/b", ""]:
            with pytest.raises(InvalidArgumentError):
                run.record(bad, never_called)
            with pytest.raises(InvalidArgumentError):
                run.wait_for_event(bad)
        with pytest.raises(InvalidArgumentError):
            run.wait_for_event("e", timeout=-1)
        assert data_of(storage, "r1") == before


def test_unserialisable_input_is_refused_before_io(storage: Storage) -> None:
    with pytest.raises(NotSerializableError):
        open_run(storage, "r1", input={"when": object()})
    assert list(storage.list_runs()) == []


def test_step_ids_count_per_name_and_scope() -> None:
    ids = StepIds()
    assert [ids.next("a"), ids.next("b"), ids.next("a"), ids.next("a")] == ["a", "b", "a#2", "a#3"]
    branch = StepIds("gather/credit/")
    assert [branch.next("fetch"), branch.next("fetch")] == [
        "gather/credit/fetch",
        "gather/credit/fetch#2",
    ]
    with pytest.raises(InvalidArgumentError, match="event"):
        ids.next("x#1", "event")


# -- checks before anything is written ------------------------------------------------------


def test_metadata_mismatch_writes_nothing(storage: Storage, tmp_path: Path) -> None:
    with open_run(storage, "r1", input={"q": 1}):
        pass
    before = data_of(storage, "r1")
    with pytest.raises(InputMismatchError) as caught:
        open_run(storage, "r1", input={"q": 2})
    assert caught.value.run_id == "r1"
    assert data_of(storage, "r1") == before
    assert not (tmp_path / "journals" / "r1.lock").exists()
    # no input means "whatever the run was started with"
    with open_run(storage, "r1") as run:
        assert run.input == {"q": 1}
    with open_run(storage, "r1", input={"q": 1}) as run:
        assert run.session == 3


def test_version_mismatch_writes_nothing(storage: Storage) -> None:
    with open_run(storage, "r1", version="v1"):
        pass
    before = data_of(storage, "r1")
    with pytest.raises(VersionMismatchError) as caught:
        open_run(storage, "r1", version="v2")
    assert caught.value.run_id == "r1" and "v1" in str(caught.value)
    assert data_of(storage, "r1") == before
    with open_run(storage, "r1"):  # no version: no check
        pass
    with open_run(storage, "r1", version="v1") as run:
        assert run.session == 3


def test_a_version_can_be_set_by_a_later_session(storage: Storage) -> None:
    with open_run(storage, "r1"):
        pass
    with open_run(storage, "r1", version="v1"):
        pass
    with pytest.raises(VersionMismatchError):
        open_run(storage, "r1", version="v2")


@pytest.mark.parametrize(
    ("end", "error"),
    [
        (lambda run: run.complete({"ok": True}), TerminalRunError),
        (lambda run: run.fail(ValueError("bad")), TerminalRunError),
        (lambda run: run.cancel("stop"), RunCancelledError),
    ],
    ids=["complete", "fail", "cancel"],
)
def test_a_terminal_run_cannot_be_opened(
    storage: Storage, end: Any, error: type[TerminalRunError]
) -> None:
    with open_run(storage, "r1") as run:
        end(run)
    before = data_of(storage, "r1")
    with pytest.raises(error) as caught:
        open_run(storage, "r1")
    assert caught.value.run_id == "r1" and caught.value.offset == 1
    assert data_of(storage, "r1") == before
    if error is TerminalRunError:
        assert not isinstance(caught.value, RunCancelledError)


def test_nothing_is_appended_after_a_terminal_entry(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        assert run.complete((1, 2)) == [1, 2]
        before = data_of(storage, "r1")
        with pytest.raises(TerminalRunError):
            run.record("late", lambda: 1)
        with pytest.raises(TerminalRunError):
            run.cancel("late")
        assert data_of(storage, "r1") == before
    status = run_status(storage, "r1")
    assert status.status == "completed" and status.result == [1, 2]


def test_fail_journals_name_message_and_traceback(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        try:
            raise KeyError("missing")
        except KeyError as exc:
            run.fail(exc)
    error = read_journal(storage, "r1").entries[-1]["error"]
    assert error["name"] == "KeyError" and error["message"] == "'missing'"
    assert "Traceback" in error["traceback"] and "KeyError" in error["traceback"]
    assert run_status(storage, "r1").status == "failed"


def test_read_journal_of_a_missing_run(storage: Storage) -> None:
    with pytest.raises(RunNotFoundError) as caught:
        read_journal(storage, "ghost")
    assert isinstance(caught.value, LookupError) and caught.value.run_id == "ghost"
    with pytest.raises(RunNotFoundError):
        run_status(storage, "ghost")
    with pytest.raises(RunNotFoundError):
        cancel_run(storage, "ghost")
    with pytest.raises(RunNotFoundError):
        fork_run(storage, "ghost", offset=0)
    assert list(storage.list_runs()) == []


def test_a_held_run_is_locked_and_released_on_close(storage: Storage) -> None:
    run = open_run(storage, "r1")
    with pytest.raises(RunLockedError) as caught:
        open_run(storage, "r1")
    assert caught.value.run_id == "r1"
    run.close()
    run.close()  # idempotent
    with open_run(storage, "r1") as again:
        assert again.session == 2


# -- events ---------------------------------------------------------------------------------


def test_wait_for_event_suspends_and_replays_the_delivered_value(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        run.record("analyze", lambda: "plan")
        with pytest.raises(Suspended) as caught:
            try:
                run.wait_for_event("approval", reason="destructive")
            except Exception:  # user code cannot swallow it
                pytest.fail("Suspended was caught by `except Exception`")
        assert caught.value.events == ("approval",) and caught.value.run_id == "r1"
        assert isinstance(caught.value, BaseException)
        assert not isinstance(caught.value, Exception)
    suspend = read_journal(storage, "r1").entries[-1]
    assert suspend["type"] == "suspend" and suspend["eventId"] == "approval"
    assert suspend["event"] == "approval" and suspend["reason"] == "destructive"
    assert "timeoutAt" not in suspend
    assert run_status(storage, "r1").status == "suspended"
    assert run_status(storage, "r1").pending_events == ("approval",)

    with open_run(storage, "r1") as run:  # a retry without the event suspends again
        assert run.record("analyze", never_called) == "plan"
        with pytest.raises(Suspended):
            run.wait_for_event("approval")
    assert types_of(storage, "r1") == ["start", "step", "suspend", "start"]

    with open_run(storage, "r1") as run:
        assert run.deliver("approval", {"approved": True}) == "approval"
        assert run.record("analyze", never_called) == "plan"
        assert run.wait_for_event("approval") == {"approved": True}
        assert run.replaying is False
        run.complete("done")
    resume = read_journal(storage, "r1").entries[5]
    assert resume["type"] == "resume" and resume["value"] == {"approved": True}
    assert resume["eventId"] == "approval" and resume["event"] == "approval"
    assert run_status(storage, "r1").status == "completed"


def test_deliver_twice_keeps_the_first_value(storage: Storage) -> None:
    with open_run(storage, "r1") as run, pytest.raises(Suspended):
        run.wait_for_event("approval")
    with open_run(storage, "r1") as run:
        run.deliver("approval", "first")
        before = data_of(storage, "r1")
        assert run.deliver("approval", "second") == "approval"
        assert data_of(storage, "r1") == before
    with open_run(storage, "r1") as run:
        before = data_of(storage, "r1")
        run.deliver("approval", "third")
        assert data_of(storage, "r1") == before
        assert run.wait_for_event("approval") == "first"
    assert types_of(storage, "r1") == ["start", "suspend", "start", "resume", "start"]


def test_deliver_of_an_unknown_event(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        with pytest.raises(Suspended):
            run.wait_for_event("approval")
        before = data_of(storage, "r1")
        with pytest.raises(EventNotPendingError) as caught:
            run.deliver("payment", 1)
        assert caught.value.run_id == "r1" and "approval" in str(caught.value)
        with pytest.raises(NotSerializableError):
            run.deliver("approval", b"bytes")
        assert data_of(storage, "r1") == before


def test_deliver_by_name_to_a_prefixed_event(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        for branch in ("a", "b"):
            with pytest.raises(Suspended):
                run.wait_for_event("ok", event_id=f"gather/{branch}/ok")
        assert run.deliver("gather/b/ok", "B") == "gather/b/ok"
        assert run.deliver("ok", "A") == "gather/a/ok"  # the only pending one left
    with open_run(storage, "r1") as run:
        assert run.wait_for_event("ok", event_id="gather/a/ok") == "A"
        assert run.wait_for_event("ok", event_id="gather/b/ok") == "B"


def test_timeout_cancels_on_the_next_session(storage: Storage) -> None:
    clock = FakeClock()
    with open_run(storage, "r1", clock=clock) as run, pytest.raises(Suspended):
        run.wait_for_event("approval", timeout=10)
    suspend = read_journal(storage, "r1").entries[-1]
    assert suspend["timeoutAt"] == "2026-01-01T00:00:10.000Z"

    clock.advance(5)
    with open_run(storage, "r1", clock=clock) as run, pytest.raises(Suspended):
        run.wait_for_event("approval", timeout=10)  # not yet
    assert run_status(storage, "r1").status == "suspended"

    clock.advance(6)
    with open_run(storage, "r1", clock=clock) as run:
        with pytest.raises(RunCancelledError) as caught:
            run.wait_for_event("approval", timeout=10)
        assert caught.value.step_id == "approval" and caught.value.run_id == "r1"
    cancel = read_journal(storage, "r1").entries[-1]
    assert cancel["type"] == "cancel" and cancel["reason"] == "timeout"
    assert cancel["session"] == 3
    assert run_status(storage, "r1").status == "canceled"
    with pytest.raises(RunCancelledError):
        open_run(storage, "r1", clock=clock)


def test_a_delivery_after_the_timeout_is_dropped(storage: Storage) -> None:
    clock = FakeClock()
    with open_run(storage, "r1", clock=clock) as run, pytest.raises(Suspended):
        run.wait_for_event("approval", timeout=10)
    clock.advance(11)
    with open_run(storage, "r1", clock=clock) as run:
        assert run.deliver("approval", "late") == "approval"
        with pytest.raises(RunCancelledError):
            run.wait_for_event("approval", timeout=10)
    assert "resume" not in types_of(storage, "r1")


def test_a_delivery_in_time_survives_the_deadline(storage: Storage) -> None:
    clock = FakeClock()
    with open_run(storage, "r1", clock=clock) as run, pytest.raises(Suspended):
        run.wait_for_event("approval", timeout=10)
    with open_run(storage, "r1", clock=clock) as run:
        run.deliver("approval", "in time")
    clock.advance(3600)
    with open_run(storage, "r1", clock=clock) as run:
        assert run.wait_for_event("approval", timeout=10) == "in time"
    assert run_status(storage, "r1").status == "running"


# -- forks ----------------------------------------------------------------------------------


def _source_run(storage: Storage) -> None:
    """src: start(0) plan(1) build(2) complete(3)."""
    with open_run(storage, "src", input={"q": "why"}, version="v1") as run:
        run.record("plan", lambda: "p")
        run.record("build", lambda: "b")
        run.complete("done")


@pytest.mark.parametrize("point", [{"offset": 2}, {"step": "build"}], ids=["offset", "step"])
def test_fork_copies_the_prefix_and_continues_live(storage: Storage, point: Any) -> None:
    _source_run(storage)
    source_bytes = data_of(storage, "src")
    assert fork_run(storage, "src", new_run_id="dst", **point) == "dst"
    assert data_of(storage, "src") == source_bytes
    journal = read_journal(storage, "dst")
    source = read_journal(storage, "src")
    assert journal.entries[:2] == source.entries[:2]
    start = journal.entries[2]
    assert start["type"] == "start" and start["session"] == 2 and start["offset"] == 2
    assert start["source"] == {"runId": "src", "fromOffset": 2}
    assert start["metadata"] == {"q": "why"}
    status = run_status(storage, "dst")
    assert status.source == {"runId": "src", "fromOffset": 2} and status.status == "running"
    with open_run(storage, "dst", input={"q": "why"}) as run:
        assert run.record("plan", never_called) == "p"
        assert run.record("build", lambda: "rebuilt") == "rebuilt"
        run.complete("forked")
    assert run_status(storage, "dst").result == "forked"
    assert data_of(storage, "src") == source_bytes
    assert_dense(storage, "dst")


def test_fork_at_the_terminal_entry_and_past_it(storage: Storage) -> None:
    _source_run(storage)
    assert read_journal(storage, fork_run(storage, "src", offset=3)).terminal is None
    runs = list(storage.list_runs())
    for offset in (4, 5, 100):
        with pytest.raises(InvalidArgumentError) as caught:
            fork_run(storage, "src", offset=offset, new_run_id="late")
        assert isinstance(caught.value, ValueError) and caught.value.offset == offset
    assert list(storage.list_runs()) == runs


def test_fork_at_offset_zero_keeps_the_input(storage: Storage) -> None:
    _source_run(storage)
    new = fork_run(storage, "src", offset=0)
    assert len(new) == 32 and int(new, 16) >= 0  # a uuid4 hex id
    (start,) = read_journal(storage, new).entries
    assert start["session"] == 1 and start["metadata"] == {"q": "why"}
    assert start["source"] == {"runId": "src", "fromOffset": 0}


def test_fork_of_a_running_run_up_to_its_end(storage: Storage) -> None:
    with open_run(storage, "src") as run:
        run.record("a", lambda: 1)
    fork_run(storage, "src", offset=2, new_run_id="whole")
    assert read_journal(storage, "whole").next_offset == 3
    with pytest.raises(InvalidArgumentError):
        fork_run(storage, "src", offset=3, new_run_id="past")


@pytest.mark.parametrize(
    "arguments",
    [{}, {"offset": 1, "step": "plan"}, {"offset": -1}, {"offset": "1"}, {"step": "nope"}],
    ids=["neither", "both", "negative", "text", "unknown step"],
)
def test_fork_arguments_are_checked(storage: Storage, arguments: Any) -> None:
    _source_run(storage)
    with pytest.raises(InvalidArgumentError) as caught:
        fork_run(storage, "src", new_run_id="dst", **arguments)
    assert isinstance(caught.value, ValueError)
    assert list(storage.list_runs()) == ["src"]


def test_fork_into_an_existing_run_is_refused(storage: Storage) -> None:
    _source_run(storage)
    with open_run(storage, "other"):
        pass
    before = data_of(storage, "other")
    with pytest.raises(RunExistsError, match="exists and is not a fork"):
        fork_run(storage, "src", offset=1, new_run_id="other")
    assert data_of(storage, "other") == before
    with pytest.raises(InvalidArgumentError):
        fork_run(storage, "src", offset=1, new_run_id="bad/id")


def test_fork_of_a_fork_keeps_the_right_source(storage: Storage) -> None:
    _source_run(storage)
    fork_run(storage, "src", step="build", new_run_id="child")
    with open_run(storage, "child") as run:
        run.record("plan", never_called)
        run.record("build", lambda: "b2")
        run.record("ship", lambda: "s")
    # child: start(0) plan(1) copied, fork start(2), start(3) build(4) ship(5)
    fork_run(storage, "child", step="ship", new_run_id="grandchild")
    grandchild = read_journal(storage, "grandchild")
    assert grandchild.source == {"runId": "child", "fromOffset": 5}
    assert [e.get("source") for e in grandchild.entries if e["type"] == "start"] == [
        None,
        {"runId": "src", "fromOffset": 2},
        None,
        {"runId": "child", "fromOffset": 5},
    ]
    assert grandchild.steps["build"]["result"] == "b2"
    fork_run(storage, "child", offset=1, new_run_id="early")
    assert read_journal(storage, "early").source == {"runId": "child", "fromOffset": 1}
    assert read_journal(storage, "child").source == {"runId": "src", "fromOffset": 2}


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_run_appends_cancel_in_a_new_session(storage: Storage) -> None:
    with open_run(storage, "r1") as run, pytest.raises(Suspended):
        run.wait_for_event("approval")
    status = cancel_run(storage, "r1", "no longer needed")
    assert status.status == "canceled" and status.sessions == 2
    cancel = read_journal(storage, "r1").entries[-1]
    assert cancel["type"] == "cancel" and cancel["reason"] == "no longer needed"
    assert cancel["session"] == 2
    assert run_status(storage, "r1") == status
    before = data_of(storage, "r1")
    with pytest.raises(RunCancelledError):
        cancel_run(storage, "r1")
    assert data_of(storage, "r1") == before


@pytest.mark.parametrize("end", ["complete", "fail"])
def test_cancel_run_of_an_ended_run(storage: Storage, end: str) -> None:
    with open_run(storage, "r1") as run:
        run.complete(1) if end == "complete" else run.fail(RuntimeError("x"))
    before = data_of(storage, "r1")
    with pytest.raises(TerminalRunError) as caught:
        cancel_run(storage, "r1", "too late")
    assert not isinstance(caught.value, RunCancelledError)
    assert data_of(storage, "r1") == before


# -- fencing --------------------------------------------------------------------------------


def test_a_session_fenced_by_a_newer_session(storage: Storage) -> None:
    old = open_run(storage, "r1")
    old.record("a", lambda: 1)
    old.close()  # as a reclaimed lock would let a newer session in
    with open_run(storage, "r1") as new:
        new.record("a", never_called)
        new.record("b", lambda: 2)
    before = data_of(storage, "r1")
    with pytest.raises(FencedError) as caught:
        old.record("c", lambda: 3)
    assert caught.value.run_id == "r1" and caught.value.offset == 2  # the newer start
    with pytest.raises(FencedError):
        old.complete("stale")
    assert data_of(storage, "r1") == before
    assert_dense(storage, "r1")
    assert list(read_journal(storage, "r1").steps) == ["a", "b"]


def test_a_session_fenced_by_a_cancel(storage: Storage) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
        cancel_run(storage, "r1", "operator")  # takes no lock
        with pytest.raises(RunCancelledError) as caught:
            run.record("b", lambda: 2)
        assert caught.value.run_id == "r1"
        with pytest.raises(RunCancelledError):
            run.complete("x")
    assert types_of(storage, "r1") == ["start", "step", "cancel"]
    assert_dense(storage, "r1")


# -- ambiguous storage failures in core._commit ---------------------------------------------


class FlakyStorage:
    """Delegates to MemoryStorage; the next `failures` appends to an existing run raise
    StorageError, after committing (an ambiguous timeout) when `commit` is set."""

    def __init__(self, failures: int = 0, *, commit: bool = False, creates: bool = False) -> None:
        self.inner = MemoryStorage()
        self.failures = failures
        self.commit = commit
        self.creates = creates  # creating a run fails too
        self.appends = 0
        self.read_failures = 0  # the next reads after a failed append fail too
        self.failed_reads = 0

    def read(self, run_id: str) -> Snapshot | None:
        if self.read_failures > 0 and self.appends:
            self.read_failures -= 1
            self.failed_reads += 1
            raise StorageError("503 on the read-back", run_id=run_id)
        return self.inner.read(run_id)

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        if (token is not None or self.creates) and self.failures > 0:
            self.appends += 1
            self.failures -= 1
            if self.commit:
                self.inner.append(run_id, data, token=token)
            raise StorageError("timed out after sending", run_id=run_id)
        return self.inner.append(run_id, data, token=token)

    def list_runs(self) -> Iterator[str]:
        return self.inner.list_runs()

    def lock(self, run_id: str, session: int) -> contextlib.AbstractContextManager[None]:
        return self.inner.lock(run_id, session)


@pytest.fixture
def clock() -> FakeClock:
    """The clock the append protocol backs off on: its sleeps are recorded, not slept."""
    return FakeClock()


def test_an_append_that_landed_but_failed_is_not_duplicated(clock: FakeClock) -> None:
    storage = FlakyStorage()
    assert isinstance(storage, Storage)
    with open_run(storage, "r1", clock=clock) as run:
        storage.failures, storage.commit = 1, True
        assert run.record("a", lambda: {"v": 1}) == {"v": 1}
        # read back at once: a write that landed needs no backoff and no second attempt
        assert storage.appends == 1 and clock.slept == []
        assert run.record("b", lambda: 2) == 2  # the run continues at the right token
        storage.failures = 2
        run.complete("ok")
    journal = read_journal(storage, "r1")
    assert [e["type"] for e in journal.entries] == ["start", "step", "step", "complete"]
    assert list(journal.steps) == ["a", "b"]
    assert_dense(storage, "r1")


@pytest.mark.parametrize("read_failures", [1, 4, 5, 7])
def test_a_landed_append_whose_read_back_fails_is_recognised_once_a_read_answers(
    clock: FakeClock, read_failures: int
) -> None:
    """However many reads fail after the write landed, the writer never calls its own entry
    another writer's: it reads until it knows, and writes nothing twice."""
    storage = FlakyStorage()
    with open_run(storage, "r1", clock=clock) as run:
        storage.failures, storage.commit, storage.read_failures = 1, True, read_failures
        assert run.record("a", lambda: 1) == 1
        assert storage.failed_reads == read_failures and storage.appends == 1
        assert len(clock.slept) >= read_failures  # each failed read backed off
        assert run.record("b", lambda: 2) == 2
    assert types_of(storage, "r1") == ["start", "step", "step"]
    assert_dense(storage, "r1")


def test_an_append_that_failed_cleanly_is_retried(clock: FakeClock) -> None:
    storage = FlakyStorage()
    with open_run(storage, "r1", clock=clock) as run:
        storage.failures = 3
        assert run.record("a", lambda: 1) == 1
        assert storage.appends == 3 and len(clock.slept) == 3
        assert clock.slept == sorted(clock.slept)  # backing off
    assert types_of(storage, "r1") == ["start", "step"]
    assert_dense(storage, "r1")


def test_an_append_that_always_fails_ends_in_storage_error(clock: FakeClock) -> None:
    storage = FlakyStorage()
    with open_run(storage, "r1", clock=clock) as run:
        before = data_of(storage, "r1")
        storage.failures = 1_000
        with pytest.raises(StorageError) as caught:
            run.record("a", lambda: 1)
        assert type(caught.value) is StorageError
        assert caught.value.run_id == "r1" and caught.value.offset == 1
        assert 1 < storage.appends < 20 and len(clock.slept) == storage.appends
        assert data_of(storage, "r1") == before
        assert run.journal.next_offset == 1
        storage.failures = 0  # the storage recovers: the same session carries on
        assert run.record("b", lambda: 2) == 2
    assert types_of(storage, "r1") == ["start", "step"]
    assert list(read_journal(storage, "r1").steps) == ["b"]
    assert_dense(storage, "r1")


def test_a_corrupt_journal_cannot_be_opened(storage: Storage, tmp_path: Path) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
    good = data_of(storage, "r1")
    snapshot = storage.read("r1")
    assert snapshot is not None
    storage.append("r1", b"{garbage\n" + good.splitlines(keepends=True)[1], token=snapshot.token)
    before = data_of(storage, "r1")
    with pytest.raises(JournalCorruptionError) as caught:
        open_run(storage, "r1")
    assert caught.value.run_id == "r1" and caught.value.offset == 2
    assert data_of(storage, "r1") == before
    assert not (tmp_path / "journals" / "r1.lock").exists()
    with pytest.raises(JournalCorruptionError):
        cancel_run(storage, "r1")
    with pytest.raises(JournalCorruptionError):
        fork_run(storage, "r1", offset=1)
    assert data_of(storage, "r1") == before


def test_a_suspend_for_another_event_is_a_replay_mismatch(storage: Storage) -> None:
    with open_run(storage, "r1") as run, pytest.raises(Suspended):
        run.wait_for_event("payment", event_id="checkout/pay")
    with open_run(storage, "r1") as run:
        with pytest.raises(ReplayMismatchError) as caught:
            run.wait_for_event("approval", event_id="checkout/pay")
        assert caught.value.step_id == "checkout/pay" and caught.value.offset == 1


def test_a_create_that_landed_but_failed_opens_the_session() -> None:
    storage = FlakyStorage(1, commit=True, creates=True)
    with open_run(storage, "r1", input={"q": 1}) as run:
        assert run.record("a", lambda: 1) == 1
    journal = read_journal(storage, "r1")
    assert [(e["type"], e["session"]) for e in journal.entries] == [("start", 1), ("step", 1)]


def test_a_create_that_failed_without_landing_raises_and_writes_nothing() -> None:
    storage = FlakyStorage(1, commit=False, creates=True)
    with pytest.raises(StorageError):
        open_run(storage, "r1")
    assert storage.read("r1") is None
    with open_run(storage, "r1"):  # the lock was released: a redelivery succeeds
        pass


def test_a_cancel_that_landed_but_failed_reports_canceled() -> None:
    storage = FlakyStorage()
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
    storage.failures, storage.commit = 1, True
    assert cancel_run(storage, "r1", "stop").status == "canceled"
    assert [e["type"] for e in read_journal(storage, "r1").entries][-1] == "cancel"
    assert len(read_journal(storage, "r1").entries) == 3


def test_append_entry_journals_a_type_of_its_own_that_status_skips() -> None:
    storage = MemoryStorage()
    with open_run(storage, "r1") as run:
        entry = run.append_entry("transitioned", {"to": "review", "why": ("a", "b")})
        assert entry["why"] == ["a", "b"] and entry["offset"] == 1
        for bad_type, fields in [("step", {}), ("", {}), ("note", {"offset": 9})]:
            with pytest.raises(InvalidArgumentError):
                run.append_entry(bad_type, fields)
    journal = read_journal(storage, "r1")
    assert [e["type"] for e in journal.entries] == ["start", "transitioned"]
    assert journal.status().status == "running"


# -- the step seam -------------------------------------------------------------------------------


def test_begin_step_replays_or_records_once() -> None:
    storage, calls = MemoryStorage(), []
    for _ in range(2):
        with open_run(storage, "r1") as run:
            step = run.begin_step("call")
            assert step.step_id == "call" and step.name == "call"
            if not step.replayed:
                calls.append(1)
                assert step.record({"n": (1, 2)}) == {"n": [1, 2]}  # as replay will see it
            assert step.result == {"n": [1, 2]} and step.replayed
            with pytest.raises(InvalidArgumentError, match="recorded already"):
                step.record(3)
            assert run.begin_step("call").step_id == "call#2"
    assert calls == [1]
    steps = [e for e in read_journal(storage, "r1").entries if e["type"] == "step"]
    assert len(steps) == 1 and steps[0]["durationMs"] >= 0


def test_begin_step_checks_the_journal_and_its_result_needs_a_record() -> None:
    storage = MemoryStorage()
    with open_run(storage, "r1") as run:
        run.begin_step("call", kind="sleep").record({"wakeAt": "2026-01-01T00:00:00.000Z"})
    with open_run(storage, "r1") as run:
        with pytest.raises(ReplayMismatchError):
            run.begin_step("call")
        step = run.begin_step("fresh", ids=StepIds("block/branch/"))
        assert step.step_id == "block/branch/fresh" and not step.replayed
        with pytest.raises(InvalidArgumentError, match="no recorded result"):
            _ = step.result


def test_a_step_records_its_model_call_after_its_result_and_forks_copy_it() -> None:
    storage = MemoryStorage()
    call = {"provider": "openai", "method": "chat.completions.create", "request": {"n": (1,)}}
    with open_run(storage, "r1") as run:
        step = run.begin_step("chat")
        assert step.call is None
        step.record({"id": "c-1"}, call=call)  # type: ignore[arg-type]
        assert step.call == {**call, "request": {"n": [1]}}  # as replay will see it
        run.record("plain", lambda: 1)
        with pytest.raises(Suspended):
            run.wait_for_event("go")
    line = data_of(storage, "r1").splitlines()[1]
    assert b'"result":{"id":"c-1"},"call":{"provider":"openai",' in line
    fork_run(storage, "r1", offset=3, new_run_id="f1")
    with open_run(storage, "f1") as run:
        chat, plain = run.begin_step("chat"), run.begin_step("plain")
        assert chat.result == {"id": "c-1"} and chat.call == step.call
        assert plain.replayed and plain.call is None
    copied = read_journal(storage, "f1").steps["chat"]
    assert copied["call"] == step.call and list(copied)[-3:] == ["result", "call", "durationMs"]


@pytest.mark.parametrize(
    "call",
    [
        {"provider": "openai", "method": "chat.completions.create"},
        {"provider": 1, "method": "m", "request": {}},
        {"provider": "p", "method": "m", "request": []},
        {"provider": "p", "method": "m", "request": {"t": float("nan")}},
        "openai",
    ],
)
def test_a_malformed_call_is_refused_with_nothing_written(call: Any) -> None:
    storage = MemoryStorage()
    with open_run(storage, "r1") as run:
        before = data_of(storage, "r1")
        with pytest.raises((InvalidArgumentError, NotSerializableError)):  # NaN: not JSON
            run.begin_step("chat").record({"id": "c-1"}, call=call)
        assert data_of(storage, "r1") == before


def test_cancel_and_fork_take_the_clock() -> None:
    storage, clock = MemoryStorage(), FakeClock(start=1_767_225_600)
    with open_run(storage, "r1", clock=clock) as run:
        run.record("a", lambda: 1)
    clock.advance(60)
    fork_run(storage, "r1", offset=2, new_run_id="f1", clock=clock)
    clock.advance(60)
    canceled = cancel_run(storage, "f1", clock=clock)
    assert canceled.created_at == "2026-01-01T00:01:00.000Z"
    assert canceled.updated_at == "2026-01-01T00:02:00.000Z"


def test_every_core_function_takes_a_storage_url(tmp_path: Path) -> None:
    """docs/storage-backends.md: every API that takes a storage accepts its URL too."""
    url = f"file:{tmp_path / 'runs'}"
    with open_run(url, "r1", input={"q": 1}) as run:
        run.record("a", lambda: 1)
    assert read_journal(url, "r1").steps["a"]["result"] == 1
    assert run_status(url, "r1").steps == 1
    forked = fork_run(url, "r1", offset=2, new_run_id="r2")
    assert cancel_run(url, forked).status == "canceled"
    assert sorted(LocalStorage(tmp_path / "runs").list_runs()) == ["r1", "r2"]
    with open_run("memory:", "r1") as run:  # a store of its own, gone with the process
        assert run.record("a", lambda: 2) == 2
