"""LocalStorage keeps a run's journal open while this process holds the run's lock."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage
from kassette.core import cancel_run, open_run, read_journal
from kassette.errors import ConflictError, RunCancelledError


@pytest.fixture
def journal_opens(monkeypatch: pytest.MonkeyPatch, root: Path) -> Iterator[list[str]]:
    """The paths of every `os.open` of a journal file for writing, in order (`read` opens
    one to read it whole and closes it)."""
    opened: list[str] = []
    real_open: Callable[..., int] = os.open

    def counting_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".jsonl") and flags & (os.O_WRONLY | os.O_RDWR):
            opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    yield opened


def open_journal_fds(root: Path) -> list[str]:
    """The journal files this process has open (Linux: read from /proc/self/fd)."""
    targets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue
    return [t for t in targets if t.startswith(str(root)) and ".jsonl" in t]


def test_a_session_opens_its_journal_once(storage: LocalStorage, journal_opens: list[str]) -> None:
    with open_run(storage, "r1") as run:
        for i in range(5):
            run.record(f"s{i}", lambda i=i: i)
        run.complete("done")
    assert len(journal_opens) == 1  # the start entry created the file; the rest shared one fd
    assert read_journal(storage, "r1").status().steps == 5


def test_appends_outside_a_session_open_each_time(
    storage: LocalStorage, journal_opens: list[str]
) -> None:
    token = storage.append("r1", b"{}\n", token=None)
    for _ in range(3):
        token = storage.append("r1", b"{}\n", token=token)
    assert len(journal_opens) == 3


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_the_journal_is_closed_when_the_session_ends(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
        assert len(open_journal_fds(root)) == 1
    assert open_journal_fds(root) == []
    with open_run(storage, "r1") as run:  # the next session opens it again
        run.record("b", lambda: 2)
    assert open_journal_fds(root) == []
    assert list(read_journal(storage, "r1").steps) == ["a", "b"]


def test_a_failed_append_drops_the_open_journal(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
        with pytest.raises(ConflictError):
            storage.append("r1", b"{}\n", token="0")  # a stale token, through the open journal
        assert run.record("b", lambda: 2) == 2  # the next append opens the path again
    assert list(read_journal(storage, "r1").steps) == ["a", "b"]


def test_a_cancel_from_another_thread_shares_the_open_journal_safely(
    storage: LocalStorage,
) -> None:
    """flock does not exclude threads sharing one open file: the appends must still serialise."""
    started = threading.Event()
    canceller = threading.Thread(target=lambda: started.wait(30) and cancel_run(storage, "r1"))
    canceller.start()
    deadline = time.monotonic() + 60
    try:
        with open_run(storage, "r1") as run, pytest.raises(RunCancelledError):
            for i in range(100_000):  # appends race the cancel until it lands, then fail
                run.record(f"s{i}", lambda i=i: i)
                started.set()
                assert time.monotonic() < deadline, "the cancel never landed"
    finally:
        started.set()
        canceller.join(timeout=60)
    assert not canceller.is_alive()
    journal = read_journal(storage, "r1")  # parses: dense offsets, no duplicate
    assert journal.status().status == "canceled" and journal.terminal is not None
