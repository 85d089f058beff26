"""A cancel lands against a writer that appends back to back (a runaway agent).

The writer records steps with no work between them: on `LocalStorage` (in another process,
appending lean) and on `S3Storage` (in another process, against the moto server) through
tests/procs/runaway_worker.py, on `MemoryStorage` in a thread. The cancel must return, the
journal must end canceled, the writer must raise `RunCancelledError` at its next step, and every
step it was told was recorded must be in the journal.

Then the pieces (`ExclusiveAppend` itself is in the conformance suite, `kassette.testing`): a
cancel that waits for a lean holder to let go of its lease, a cancel SIGKILLed while it holds
the journal, and on a compare-and-swap storage the retries and their bound in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kassette import Context, LocalStorage, RunCancelledError, kassette
from kassette._codec import encode
from kassette._journal import Journal
from kassette.core import cancel_run, open_run, read_journal
from kassette.errors import StorageError
from kassette.storage import ExclusiveAppend, Snapshot, Storage, open_storage
from kassette.storage import _local_append as local_append
from kassette.storage._memory import MemoryStorage
from kassette.testing import FakeClock

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "procs" / "runaway_worker.py"
TIMEOUT = 90.0
RUN_ID = "runaway"


def cancel_a_runaway_process(
    url: str, environment: dict[str, str], pause: float = 0.0
) -> tuple[dict[str, Any], Any]:
    """Start the runaway worker on `url` (its steps `pause` seconds apart), cancel its run once
    it has started; return its report and the status `cancel_run` returned."""
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), url, RUN_ID, str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **environment, "PYTHONPATH": str(REPO)},
    )
    try:
        assert worker.stdout is not None
        ready, _, _ = select.select([worker.stdout], [], [], TIMEOUT)
        assert ready, "the worker printed nothing in time"
        assert worker.stdout.readline().strip() == b"started", worker.communicate()[1]
        time.sleep(0.05)  # let it run flat out
        status = cancel_run(url, RUN_ID, reason="runaway")
        out, err = worker.communicate(timeout=TIMEOUT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1]), status


def check_canceled(journal: Journal, report: dict[str, Any], status: Any) -> None:
    assert status.status == "canceled" and status.sessions == 2
    assert report["outcome"] == "canceled", report["outcome"]
    assert journal.status().status == "canceled"
    last = journal.entries[-1]
    assert last["type"] == "cancel" and last["session"] == 2 and last["reason"] == "runaway"
    assert len(report["acked"]) > 1
    missing = set(report["acked"]) - set(journal.steps)
    assert not missing, f"{len(missing)} acknowledged steps are not in the journal"
    # nothing of the writer's session after the cancel: it stopped at its next step
    assert all(entry["session"] == 1 for entry in journal.entries[:-1])


def test_cancel_lands_against_a_process_appending_back_to_back_on_local_storage(
    root: Path,
) -> None:
    report, status = cancel_a_runaway_process(f"file:{root}", {})
    check_canceled(read_journal(f"file:{root}", RUN_ID), report, status)
    # no fence file, no lock and no temporary file is left behind
    assert sorted(path.name for path in root.iterdir()) == [f"{RUN_ID}.jsonl"]


def test_cancel_lands_against_a_process_appending_every_few_milliseconds_on_s3(
    s3_environment: dict[str, str], bucket: str
) -> None:
    """S3 has no lock to hold a writer off: a cancel is a compare-and-swap, and a writer that
    commits with no gap as long as a GET and a PUT can keep it out (documented, and bounded by
    `test_a_cancel_that_never_lands_gives_up_in_bounded_time`). Steps 5 ms apart, still far
    faster than any model call, leave it room."""
    url = f"s3://{bucket}/live"
    report, status = cancel_a_runaway_process(url, s3_environment, pause=0.005)
    check_canceled(read_journal(url, RUN_ID), report, status)


def test_cancel_lands_against_a_thread_appending_back_to_back_on_memory_storage() -> None:
    storage: Storage = MemoryStorage()
    acked: list[str] = []
    started = threading.Event()
    outcome: list[str] = []
    deadline = time.monotonic() + 30.0

    def runaway(ctx: Context, _: Any) -> str:
        for number in range(20_000):
            if time.monotonic() > deadline:
                break
            ctx.step(f"s{number}", lambda number=number: number)
            acked.append(f"s{number}")
            started.set()
        return "ran out"

    def write() -> None:
        try:
            outcome.append(kassette(runaway, storage=storage).start(None, run_id=RUN_ID).result)
        except RunCancelledError:
            outcome.append("canceled")
        finally:
            started.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert started.wait(TIMEOUT)
        time.sleep(0.05)
        status = cancel_run(storage, RUN_ID, reason="runaway")
    finally:
        writer.join(TIMEOUT)
    assert not writer.is_alive()
    journal = read_journal(open_storage(storage), RUN_ID)
    check_canceled(journal, {"outcome": outcome[0], "acked": acked}, status)


# -- ExclusiveAppend --------------------------------------------------------------------------


def test_a_cancel_waits_for_a_lean_holder_to_let_go_and_appends_in_place(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel moves the fence and waits for the holder's lease; the holder's next append
    lets go of it (and waits for the journal's flock): the cancel appends in place."""
    monkeypatch.setattr(local_append, "_LEASE_WAIT", 60.0)  # however loaded the machine
    outcome: dict[str, Any] = {}
    with open_run(LocalStorage(root), "r1") as run:
        run.record("a", lambda: 1)  # lean from here: the session holds the fence's lease
        journal, fence = root / "r1.jsonl", root / "r1.fence"
        inode, leased = journal.stat().st_ino, fence.read_bytes()

        def cancel() -> None:
            outcome["status"] = cancel_run(LocalStorage(root), "r1", "stop")

        canceller = threading.Thread(target=cancel)
        canceller.start()
        try:
            deadline = time.monotonic() + TIMEOUT
            while fence.read_bytes() == leased:  # moved: the cancel waits for the lease now
                assert time.monotonic() < deadline, "the cancel never moved the fence"
                time.sleep(0.001)
            with pytest.raises(RunCancelledError):
                run.record("b", lambda: 2)
        finally:
            canceller.join(TIMEOUT)
    assert outcome["status"].status == "canceled"
    assert journal.stat().st_ino == inode  # appended in place, not replaced
    entries = read_journal(LocalStorage(root), "r1").entries
    assert [(e["type"], e["session"]) for e in entries] == [
        ("start", 1),
        ("step", 1),
        ("cancel", 2),
    ]
    assert sorted(path.name for path in root.iterdir()) == ["r1.jsonl"]


CANCELLER = textwrap.dedent(
    """
    import sys, time
    from kassette.core import cancel_run
    from kassette._journal import Journal

    def parse(cls, data, run_id):  # the cancel's plan: it holds the journal's flock here
        print("planning", flush=True)
        time.sleep(60)

    Journal.parse = classmethod(parse)
    cancel_run("file:" + sys.argv[1], sys.argv[2])
    """
)


def test_a_cancel_killed_while_it_holds_the_journal_leaves_the_session_writing(
    root: Path,
) -> None:
    """SIGKILL the cancel after it moved the fence, under the journal's flock: nothing of it
    is written, and the live session (one append waiting for the flock meanwhile) goes on."""
    outcome: dict[str, Any] = {}
    with open_run(LocalStorage(root), "r1") as run:
        run.record("a", lambda: 1)
        canceller = subprocess.Popen(
            [sys.executable, "-c", CANCELLER, str(root), "r1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        try:
            assert canceller.stdout is not None
            ready, _, _ = select.select([canceller.stdout], [], [], TIMEOUT)
            assert ready and canceller.stdout.readline().strip() == b"planning"
            writer = threading.Thread(target=lambda: outcome.update(b=run.record("b", lambda: 2)))
            writer.start()
            canceller.kill()
            canceller.communicate(timeout=TIMEOUT)
            writer.join(TIMEOUT)
        finally:
            if canceller.poll() is None:
                canceller.kill()
                canceller.communicate()
        assert outcome == {"b": 2}
        run.record("c", lambda: 3)
        run.complete("done")
    journal = read_journal(LocalStorage(root), "r1")
    assert list(journal.steps) == ["a", "b", "c"] and journal.status().status == "completed"
    assert sorted(path.name for path in root.iterdir()) == ["r1.jsonl"]


class Unsure(MemoryStorage):
    """An exclusive append whose report fails: after it wrote (`lands`), or before."""

    def __init__(self, lands: bool) -> None:
        super().__init__()
        self.lands = lands

    def append_exclusive(self, run_id: str, plan: Callable[[bytes | None], bytes]) -> str:
        if self.lands:
            super().append_exclusive(run_id, plan)
        else:
            snapshot = self.read(run_id)
            assert snapshot is not None
            plan(snapshot.data)
        raise StorageError("the write's report was lost", run_id=run_id)


@pytest.mark.parametrize("lands", [True, False])
def test_a_cancel_whose_exclusive_append_failed_is_settled_by_reading_back(lands: bool) -> None:
    storage = Unsure(lands)
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
    if lands:
        assert cancel_run(storage, "r1", "stop").status == "canceled"
    else:
        with pytest.raises(StorageError, match="report was lost"):
            cancel_run(storage, "r1", "stop")
    types = [e["type"] for e in read_journal(storage, "r1").entries]
    assert types == ["start", "step", "cancel"] if lands else ["start", "step"]


# -- compare-and-swap storage (S3's kind): retried, for a bounded time ------------------------


class Busy:
    """A compare-and-swap storage (no exclusive append) on which another writer of session 1
    appends a step just after each read, `races` times."""

    def __init__(self) -> None:
        self.inner = MemoryStorage()
        self.races = 0

    def read(self, run_id: str) -> Snapshot | None:
        snapshot = self.inner.read(run_id)
        if snapshot is not None and self.races > 0:
            self.races -= 1
            offset = snapshot.data.count(b"\n")  # a journal's next offset (not parsed: see below)
            entry = {
                "type": "step",
                "session": 1,
                "offset": offset,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "stepId": f"w{offset}",
                "name": f"w{offset}",
                "result": offset,
            }
            self.inner.append(run_id, encode(entry), token=snapshot.token)
        return snapshot

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        return self.inner.append(run_id, data, token=token)

    def list_runs(self) -> Iterator[str]:
        return self.inner.list_runs()

    def lock(self, run_id: str, session: int) -> contextlib.AbstractContextManager[None]:
        return self.inner.lock(run_id, session)


def test_a_cancel_keeps_trying_while_a_writer_gets_there_first() -> None:
    storage, clock = Busy(), FakeClock()
    assert not isinstance(storage, ExclusiveAppend)
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
    storage.races = 40  # more than the 20 tries a cancel made before
    assert cancel_run(storage, "r1", "stop", clock=clock).status == "canceled"
    journal = read_journal(storage, "r1")
    assert journal.entries[-1]["type"] == "cancel" and len(journal.steps) > 20
    assert 0 < sum(clock.slept) < 10  # short random pauses between the tries


def test_a_retried_cancel_reads_only_the_lines_the_journal_gained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Against a writer that keeps getting there first, each try reads the journal again: it
    parses the new lines only (a long journal parsed whole on every try takes longer than a
    busy writer takes to append, and the cancel would never land), and reading back a failed
    append reads only its last lines."""
    storage, clock = Busy(), FakeClock()
    with open_run(storage, "r1") as run:
        for number in range(200):
            run.record(f"s{number}", lambda number=number: {"n": number, "text": "x" * 100})
    parses: list[int] = []
    real = Journal.parse

    def counting(data: bytes, run_id: str) -> Journal:
        parses.append(data.count(b"\n"))
        return real(data, run_id)

    monkeypatch.setattr(Journal, "parse", staticmethod(counting))
    storage.races = 30
    assert cancel_run(storage, "r1", "stop", clock=clock).status == "canceled"
    monkeypatch.undo()
    assert parses == [201]  # the first read only (a start and 200 steps), none per retry
    journal = read_journal(storage, "r1")
    assert journal.entries[-1]["type"] == "cancel" and journal.next_offset == 201 + 30 + 1


def test_a_retried_cancel_parses_a_journal_that_was_replaced_from_the_start() -> None:
    """A journal that does not extend the one read before (deleted and created again) is
    parsed whole: the cancel lands on the run as it is now."""
    storage, clock = Busy(), FakeClock()
    with open_run(storage, "r1") as run:
        run.record("old", lambda: 1)
    replacement = MemoryStorage()
    with open_run(replacement, "r1") as run:
        run.record("new", lambda: 2)
        run.record("newer", lambda: 3)
    real_read = storage.read

    def read_then_replace(run_id: str) -> Snapshot | None:
        snapshot = real_read(run_id)
        storage.inner = replacement  # after the first read the run is another journal
        return snapshot

    storage.read = read_then_replace  # type: ignore[method-assign]
    storage.races = 1  # the first try conflicts
    assert cancel_run(storage, "r1", "stop", clock=clock).status == "canceled"
    assert [entry["type"] for entry in read_journal(replacement, "r1").entries] == [
        "start",
        "step",
        "step",
        "cancel",
    ]


def test_a_cancel_that_never_lands_gives_up_in_bounded_time() -> None:
    storage, clock = Busy(), FakeClock()
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
    storage.races = 10**9
    with pytest.raises(StorageError, match=r"cancel did not land in 10 s \(\d+ attempts\)") as e:
        cancel_run(storage, "r1", "stop", clock=clock)
    assert type(e.value) is StorageError and e.value.run_id == "r1"
    assert 10 <= sum(clock.slept) <= 10.2
    assert "cancel" not in [entry["type"] for entry in read_journal(storage, "r1").entries]
