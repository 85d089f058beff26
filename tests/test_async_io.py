"""An `async def` workflow's storage I/O runs off its event loop (issue 15, item 4).

Every storage call of an `AsyncWorkflow` (opening the session, appends and read-backs, the
outcome, the lock, `status`, `cancel`) runs in a worker thread, so other tasks on the loop
keep running while a write is in flight, and the appends of concurrent branches share writes
(the group commit). Entries are still numbered on the loop, in the order its tasks record them.

The storages here wrap a real one (memory, local files, S3 on a moto server) and hold an
append at a `threading.Event` that only a task on the loop sets: were the append on the loop,
that task could not run until the bounded wait gave up, and the test fails. No timing asserts.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from workflow_support import Crash, entries

from kassette import LocalStorage, MemoryStorage, Storage, kassette
from kassette.storage import Snapshot
from kassette.testing import FakeClock

GATE_SECONDS = 10.0  # how long a held append waits for the loop before giving up
POLLS = 1000  # polls of 10 ms at most, for a task waiting on another thread
BRANCHES = 8
STEPS = 5
STORAGE_TESTS = Path(__file__).resolve().parent / "storage"


class Gated:
    """A storage that records the thread of every call and the entries of every append; once
    `armed`, an append waits at `gate` (at most GATE_SECONDS, then opens it for good)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.armed = False
        self.gate = threading.Event()
        self.entered = threading.Event()  # an armed append is waiting at the gate
        self.timed_out = False
        self.threads: list[tuple[str, int]] = []
        self.writes: list[int] = []  # entries per append, in order

    def read(self, run_id: str) -> Snapshot | None:
        self.threads.append(("read", threading.get_ident()))
        return self.inner.read(run_id)

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        self.threads.append(("append", threading.get_ident()))
        if self.armed:
            self.entered.set()
            if not self.gate.wait(GATE_SECONDS):
                self.timed_out = True
                self.gate.set()
        self.writes.append(data.count(b"\n"))
        return self.inner.append(run_id, data, token=token)

    def list_runs(self) -> Iterator[str]:
        return self.inner.list_runs()

    def lock(self, run_id: str, session: int) -> AbstractContextManager[None]:
        self.threads.append(("lock", threading.get_ident()))
        return self.inner.lock(run_id, session)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    pytest.importorskip("boto3")
    pytest.importorskip("moto")
    if str(STORAGE_TESTS) not in sys.path:
        sys.path.insert(0, str(STORAGE_TESTS))
    import s3_server

    server, url = s3_server.start_server()
    yield url
    server.stop()


@pytest.fixture(params=["memory", "local", "s3"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "memory":
        yield MemoryStorage()
    elif request.param == "local":
        yield LocalStorage(tmp_path / "journals")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")  # puts s3_server on the path
        import s3_server

        from kassette.storage._s3 import S3Storage

        client = s3_server.make_client(endpoint)
        bucket = f"kassette-aio-{uuid.uuid4().hex[:16]}"
        client.create_bucket(Bucket=bucket)
        yield S3Storage(bucket, "runs", client=client)
        client.close()


async def _until(condition: Any) -> None:
    """Wait on the loop (bounded) until `condition()` holds, set by another thread or task."""
    for _ in range(POLLS):
        if condition():
            return
        await asyncio.sleep(0.01)


def test_every_storage_call_runs_off_the_event_loop(inner: Storage) -> None:
    storage = Gated(inner)

    async def body(ctx: Any, _: Any) -> Any:
        await ctx.step("plan", lambda: "p")
        await ctx.sleep(0)
        await ctx.parallel({"a": lambda c: c.step("x", lambda: 1), "b": lambda c: 2})
        return await ctx.suspend("approve")

    wf = kassette(body, storage=storage, clock=FakeClock())

    async def main() -> int:
        assert (await wf.start(None, run_id="r")).status == "suspended"
        assert (await wf.resume("r", "approve", "yes")).result == "yes"
        assert (await wf.fork("r", step="plan", new_run_id="f")).status == "suspended"
        assert (await wf.status("r")).status == "completed"
        assert (await wf.cancel("f")).status == "canceled"
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert {call for call, _ in storage.threads} == {"read", "append", "lock"}
    on_loop = [call for call, thread in storage.threads if thread == loop_thread]
    assert on_loop == []


@pytest.mark.parametrize("recorder", ["step", "record_step"])
def test_the_loop_runs_other_tasks_while_an_append_is_in_flight(
    inner: Storage, recorder: str
) -> None:
    storage = Gated(inner)
    ticks: list[int] = []

    async def body(ctx: Any, _: Any) -> Any:
        storage.armed = True  # the step's append waits at the gate
        if recorder == "step":
            return await ctx.step("write", lambda: "done")
        step = ctx.begin_step("write")  # how an SDK wrapper journals its calls
        return await ctx.record_step(step, "done")

    async def ticker() -> None:
        await _until(storage.entered.is_set)
        for tick in range(3):  # the loop runs this task while the append waits
            ticks.append(tick)
            await asyncio.sleep(0)
        storage.gate.set()

    wf = kassette(body, storage=storage, clock=FakeClock())

    async def main() -> Any:
        return await asyncio.gather(wf.start(None, run_id="r"), ticker())

    result, _ = asyncio.run(main())
    assert not storage.timed_out, "the append held the event loop: only the timeout freed it"
    assert storage.entered.is_set() and ticks == [0, 1, 2]
    assert result.status == "success" and result.result == "done"


def test_async_branches_share_writes_and_replay_the_same(inner: Storage) -> None:
    storage = Gated(inner)
    calls: list[str] = []
    crash = True

    def work(branch: str, step: int) -> str:
        calls.append(f"{branch}.{step}")
        storage.armed = True  # from the first step on, an append waits at the gate
        return f"{branch}.{step}"

    async def body(ctx: Any, _: Any) -> Any:
        def branch(name: str) -> Any:
            async def run(c: Any) -> list[str]:
                return [
                    await c.step("work", functools.partial(work, name, n)) for n in range(STEPS)
                ]

            return run

        results = await ctx.parallel({f"b{i}": branch(f"b{i}") for i in range(BRANCHES)})
        if crash:
            raise Crash
        return results

    async def release_when_every_branch_queued() -> None:
        # a step's function and its entry's numbering run in one go on the loop: once every
        # branch called its first one, all eight entries are queued behind the held append
        await _until(lambda: len(calls) >= BRANCHES)
        storage.gate.set()

    wf = kassette(body, storage=storage, clock=FakeClock())

    async def first() -> None:
        await asyncio.gather(wf.start(None, run_id="r"), release_when_every_branch_queued())

    with pytest.raises(Crash):
        asyncio.run(first())
    assert not storage.timed_out, "the append held the event loop: only the timeout freed it"
    step_writes = storage.writes[2:]  # after the session's start and the block's entry
    assert sum(step_writes) == BRANCHES * STEPS
    assert max(step_writes) > 1, f"every append wrote one entry: {step_writes}"
    assert len(step_writes) < BRANCHES * STEPS

    recorded = entries(inner, "r")
    assert [e["offset"] for e in recorded] == list(range(len(recorded)))
    steps = {e["stepId"]: e["result"] for e in recorded if e["type"] == "step"}
    expected = {
        f"parallel/b{b}/work" + (f"#{i + 1}" if i else ""): f"b{b}.{i}"
        for b in range(BRANCHES)
        for i in range(STEPS)
    }
    assert steps == {"parallel": {"branches": [f"b{b}" for b in range(BRANCHES)]}, **expected}

    crash, called = False, len(calls)
    storage.armed = False
    result = asyncio.run(wf.start(None, run_id="r"))  # the retry replays every step
    assert len(calls) == called
    assert result.status == "success"
    assert result.result == {f"b{b}": [f"b{b}.{i}" for i in range(STEPS)] for b in range(BRANCHES)}


def test_a_cancelled_task_lets_its_write_finish_before_the_lock_is_released(
    inner: Storage,
) -> None:
    storage = Gated(inner)
    calls: list[str] = []

    async def body(ctx: Any, _: Any) -> Any:
        storage.armed = True
        return await ctx.step("write", lambda: calls.append("write") or "done")

    wf = kassette(body, storage=storage, clock=FakeClock())

    async def main() -> None:
        task = asyncio.create_task(wf.start(None, run_id="r"))
        await _until(storage.entered.is_set)
        task.cancel()
        await asyncio.sleep(0)  # the task unwinds while its append still waits at the gate
        storage.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert not storage.timed_out
    assert [e["stepId"] for e in entries(inner, "r") if e["type"] == "step"] == ["write"]
    storage.armed = False
    result = asyncio.run(wf.start(None, run_id="r"))  # not locked; the step replays
    assert result.result == "done" and calls == ["write"]
