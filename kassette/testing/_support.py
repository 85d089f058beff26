"""The test helpers' code: `FakeClock`, `StorageConformance` and `fake_model_server`
(`kassette.testing` re-exports them)."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import TYPE_CHECKING

from kassette._journal import Journal, encode
from kassette._sessions import cancel_run
from kassette.core import fork_run, open_run, read_journal
from kassette.errors import (
    ConflictError,
    FencedError,
    InvalidArgumentError,
    RunLockedError,
    RunNotFoundError,
    TerminalRunError,
)
from kassette.storage import ExclusiveAppend, Storage, read_stamps

if TYPE_CHECKING:
    from kassette.testing._model_server import FakeModelServer

__all__ = ["FakeClock", "StorageConformance", "fake_model_server"]


class FakeClock:
    """A clock that only moves when told to, or when something sleeps on it."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.now = start
        self.slept: list[float] = []
        self._mutex = threading.Lock()

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._mutex:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.slept.append(seconds)
            self.advance(seconds)

    async def sleep_async(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


def _line(offset: int, session: int = 1, kind: str = "step") -> bytes:
    fields = (
        {"stepId": f"s{offset}", "name": f"s{offset}", "result": offset}
        if kind == "step"
        else {"metadata": None}
    )
    return encode(
        {
            "type": kind,
            "session": session,
            "offset": offset,
            "timestamp": "2026-01-01T00:00:00.000Z",
            **fields,
        }
    )


class StorageConformance:
    """The guarantees every `Storage` backend keeps. Subclass it and provide `storage`.

    Set `exclusive_locks = False` for a backend whose `lock` is a no-op (object storage),
    which relies on session fencing alone.
    """

    exclusive_locks = True

    def test_is_a_storage(self, storage: Storage) -> None:
        assert isinstance(storage, Storage)

    def test_missing_run_reads_none(self, storage: Storage) -> None:
        assert storage.read("nothing-here") is None
        assert list(storage.list_runs()) == []

    def test_create_then_read_back_bytes(self, storage: Storage) -> None:
        data = _line(0, kind="start") + _line(1)
        token = storage.append("r1", data, token=None)
        snapshot = storage.read("r1")
        assert snapshot is not None
        assert snapshot.data == data
        assert snapshot.token == token

    def test_create_twice_conflicts(self, storage: Storage) -> None:
        storage.append("r1", _line(0, kind="start"), token=None)
        try:
            storage.append("r1", _line(0, kind="start"), token=None)
        except ConflictError:
            pass
        else:
            raise AssertionError("a second create must raise ConflictError")
        snapshot = storage.read("r1")
        assert snapshot is not None and snapshot.data == _line(0, kind="start")

    def test_append_with_current_token(self, storage: Storage) -> None:
        token = storage.append("r1", _line(0, kind="start"), token=None)
        token = storage.append("r1", _line(1), token=token)
        storage.append("r1", _line(2), token=token)
        snapshot = storage.read("r1")
        assert snapshot is not None
        assert [e["offset"] for e in Journal.parse(snapshot.data, "r1").entries] == [0, 1, 2]

    def test_append_with_stale_token_conflicts_and_writes_nothing(self, storage: Storage) -> None:
        first = storage.append("r1", _line(0, kind="start"), token=None)
        storage.append("r1", _line(1), token=first)
        try:
            storage.append("r1", _line(1), token=first)
        except ConflictError:
            pass
        else:
            raise AssertionError("a stale token must raise ConflictError")
        snapshot = storage.read("r1")
        assert snapshot is not None
        assert snapshot.data == _line(0, kind="start") + _line(1)

    def test_list_runs_is_sorted_and_complete(self, storage: Storage) -> None:
        for run_id in ["b", "a", "c-1", "c.2"]:
            storage.append(run_id, _line(0, kind="start"), token=None)
        assert list(storage.list_runs()) == ["a", "b", "c-1", "c.2"]

    def test_lock_excludes_a_second_session(self, storage: Storage) -> None:
        with storage.lock("r1", 1):
            try:
                with storage.lock("r1", 2):
                    locked_twice = True
            except RunLockedError:
                locked_twice = False
        with storage.lock("r1", 3):
            pass  # released locks can be taken again
        assert locked_twice is not self.exclusive_locks

    def test_bad_run_ids_are_refused_before_io(self, storage: Storage) -> None:
        for bad in ["", "../x", "a/b", "a b", ".hidden", "x" * 201]:
            for call in (
                lambda bad=bad: storage.read(bad),
                lambda bad=bad: storage.append(bad, _line(0, kind="start"), token=None),
            ):
                try:
                    call()
                except InvalidArgumentError:
                    continue
                raise AssertionError(f"run id {bad!r} was accepted")
        assert list(storage.list_runs()) == []

    def test_offsets_stay_dense_under_concurrent_sessions(self, storage: Storage) -> None:
        with open_run(storage, "r1", input={"n": 1}) as run:
            run.record("a", lambda: 1)
        outcomes: dict[int, BaseException | None] = {}
        start = threading.Barrier(4)

        def writer(number: int) -> None:
            try:
                start.wait(timeout=30)
                with open_run(storage, "r1") as run:
                    for step in range(3):
                        run.record(f"w{number}-{step}", functools.partial(int, step))
                outcomes[number] = None
            except BaseException as exc:  # every outcome is checked below
                outcomes[number] = exc

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads), "a writer never finished"
        assert sorted(outcomes) == [0, 1, 2, 3]
        errors = [exc for exc in outcomes.values() if exc is not None]
        # a writer may only lose: to the lock, or to a newer session's fence
        assert all(isinstance(exc, RunLockedError | FencedError) for exc in errors), errors
        journal = read_journal(storage, "r1")
        assert [e["offset"] for e in journal.entries] == list(range(len(journal.entries)))
        sessions = [e["session"] for e in journal.entries]
        assert sessions == sorted(sessions)
        for number, outcome in outcomes.items():  # a writer that finished journaled all it did
            if outcome is None:
                assert {f"w{number}-{step}" for step in range(3)} <= set(journal.steps)
        assert any(outcome is None for outcome in outcomes.values()), "no writer got through"

    def test_racing_creates_of_one_run_leave_exactly_one(self, storage: Storage) -> None:
        racers = 8
        start = threading.Barrier(racers)
        outcomes: dict[int, BaseException | str] = {}

        def create(number: int) -> None:
            try:
                start.wait(timeout=30)
                data = _line(0, kind="start", session=number + 1)
                outcomes[number] = storage.append("r1", data, token=None)
            except BaseException as exc:  # every outcome is checked below
                outcomes[number] = exc

        threads = [threading.Thread(target=create, args=(n,)) for n in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads), "a create never finished"
        winners = [n for n, outcome in outcomes.items() if isinstance(outcome, str)]
        losers = [outcome for outcome in outcomes.values() if not isinstance(outcome, str)]
        assert len(winners) == 1 and len(losers) == racers - 1, outcomes
        assert all(isinstance(exc, ConflictError) for exc in losers), losers
        snapshot = storage.read("r1")
        assert snapshot is not None
        assert snapshot.data == _line(0, kind="start", session=winners[0] + 1)

    def test_a_torn_tail_is_not_read_and_the_next_append_replaces_it(
        self, storage: Storage
    ) -> None:
        """A crash in the middle of a write can leave the journal ending in part of a line:
        readers ignore it, and the session that continues the run writes past it."""
        whole = _line(0, kind="start") + _line(1)
        for cut in (1, len(_line(2)) // 2, len(_line(2)) - 1):
            storage.append(f"t{cut}", whole + _line(2)[:cut], token=None)
            assert read_journal(storage, f"t{cut}").next_offset == 2
            with open_run(storage, f"t{cut}") as run:
                run.record("after", lambda: "written")
            journal = read_journal(storage, f"t{cut}")
            assert [e["type"] for e in journal.entries] == ["start", "step", "start", "step"]
            assert journal.steps["after"]["result"] == "written"
            snapshot = storage.read(f"t{cut}")
            assert snapshot is not None and snapshot.data.startswith(whole)
            assert snapshot.data.endswith(b"\n")

    def test_an_exclusive_append_plans_on_the_journal_as_it_is(self, storage: Storage) -> None:
        """For a backend that is an `ExclusiveAppend` (others pass this): `plan` is given the
        journal's complete lines (None when the run does not exist), a torn tail is cut off,
        and a plan that raises writes nothing."""
        if not isinstance(storage, ExclusiveAppend):
            return
        seen: list[bytes | None] = []

        def plan(data: bytes | None) -> bytes:
            seen.append(data)
            if data is None:
                raise RunNotFoundError("run r1 not found", run_id="r1")
            return _line(2)

        try:
            storage.append_exclusive("r1", plan)
        except RunNotFoundError:
            pass
        else:
            raise AssertionError("a plan that raises must be raised")
        assert seen == [None] and storage.read("r1") is None
        whole = _line(0, kind="start") + _line(1)
        storage.append("r1", whole + _line(2)[:5], token=None)  # a torn tail, as a crash leaves
        token = storage.append_exclusive("r1", plan)
        assert seen[-1] == whole
        snapshot = storage.read("r1")
        assert snapshot is not None and snapshot.data == whole + _line(2)
        assert snapshot.token == token

        def refuse(data: bytes | None) -> bytes:
            raise TerminalRunError("run r1 ended", run_id="r1")

        try:
            storage.append_exclusive("r1", refuse)
        except TerminalRunError:
            pass
        else:
            raise AssertionError("a plan that raises must be raised")
        assert storage.read("r1") == snapshot

    def test_stamps_move_with_the_journal_and_only_with_it(self, storage: Storage) -> None:
        """`read_stamps` (a `RunStamps` backend's own stamps, else tokens): a stamp per existing
        run, the same until that run's journal gains lines, and only that run's moves."""
        assert read_stamps(storage) == {}
        storage.append("r1", _line(0, kind="start"), token=None)
        token = storage.append("r2", _line(0, kind="start"), token=None)
        before = read_stamps(storage)
        assert sorted(before) == ["r1", "r2"]
        assert read_stamps(storage) == before
        assert read_stamps(storage, ["r2", "missing"]) == {"r2": before["r2"]}
        storage.append("r2", _line(1), token=token)
        after = read_stamps(storage)
        assert after["r1"] == before["r1"] and after["r2"] != before["r2"]
        storage.append("r3", _line(0, kind="start") + _line(1)[:4], token=None)  # torn tail
        torn = read_stamps(storage, ["r3"])["r3"]
        with open_run(storage, "r3") as run:  # cuts the torn tail and appends
            run.record("a", lambda: 1)
        assert read_stamps(storage)["r3"] != torn

    def test_older_session_is_fenced(self, storage: Storage) -> None:
        old = open_run(storage, "r1", input=None)
        old.record("a", lambda: 1)
        old.close()  # let a newer session in, as a reclaimed lock would
        with open_run(storage, "r1") as new:
            new.record("b", lambda: 2)
        try:
            old.record("c", lambda: 3)
        except FencedError as exc:
            assert exc.run_id == "r1"
        else:
            raise AssertionError("an older session must be fenced")
        journal = read_journal(storage, "r1")
        assert [e.get("stepId") for e in journal.entries if e["type"] == "step"] == ["a", "b"]

    def test_fork_and_cancel_round_trip(self, storage: Storage) -> None:
        with open_run(storage, "src", input={"q": 1}) as run:
            run.record("plan", lambda: "p")
            run.record("build", lambda: "b")
        new = fork_run(storage, "src", step="build", new_run_id="dst")
        journal = read_journal(storage, new)
        assert journal.source == {"runId": "src", "fromOffset": 2}
        assert "build" not in journal.steps and journal.steps["plan"]["result"] == "p"
        assert cancel_run(storage, "dst", "done trying").status == "canceled"
        assert read_journal(storage, "src").next_offset == 3


def fake_model_server(*, port: int = 0, seed: int = 0, latency: float = 0.0) -> FakeModelServer:
    """A local model to prototype and test against: no key, no network, seeded answers.

    A real HTTP server on 127.0.0.1 (a free port by default) that speaks OpenAI's chat
    completions and Responses API and Anthropic's Messages API, JSON and streamed, well enough
    for the real `openai` and `anthropic` SDKs. Its answers are a few sentences built from the
    prompt's words (or a tool call, when the last user message names one of the request's
    tools), the same for the same request, varying more as the temperature grows; it reports
    usage in each provider's format. `latency` is the seconds before each response (a stream's
    events follow at a twentieth of it); `fail_next(n, status=529)` makes the next n requests
    fail as the provider would. Use it as a context manager, or call `close()`:

        with fake_model_server() as server:
            client = openai.OpenAI(api_key="unused", base_url=server.openai_base_url)
    """
    from kassette.testing._model_server import (
        FakeModelServer,  # the server stays out of `import kassette`
    )

    return FakeModelServer(port=port, seed=seed, latency=latency)
