"""RunTree live: only changed journals are read again; suspended shows; resume from the tree."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kassette import (
    AsyncContext,
    InvalidArgumentError,
    LocalStorage,
    MemoryStorage,
    TerminalRunError,
    kassette,
)
from kassette import explore as kx
from kassette.core import read_journal
from kassette.storage import RunStamps
from kassette.testing import FakeClock


def gated_agent(storage: Any, gate: threading.Event) -> Any:
    @kassette(storage=storage, clock=FakeClock())
    def agent(ctx: Any, task: str) -> Any:
        ctx.step("plan", lambda: f"plan {task}")
        gate.wait(10)
        ctx.step("work", lambda: "done")
        return ctx.suspend("review", reason="check")

    return agent


class Unstamped:
    """A storage with only the `Storage` protocol's four operations (no `RunStamps`), listing
    its runs newest first: refresh falls back to tokens, and order is not the listing's."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner

    def read(self, run_id: str) -> Any:
        return self.inner.read(run_id)

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        return self.inner.append(run_id, data, token=token)

    def list_runs(self) -> Any:
        return iter(sorted(self.inner.list_runs(), reverse=True))

    def lock(self, run_id: str, session: int) -> Any:
        return self.inner.lock(run_id, session)


def counting_reads(storage: Any) -> list[str]:
    read: list[str] = []
    real = storage.read
    storage.read = lambda run_id: read.append(run_id) or real(run_id)
    return read


@pytest.mark.parametrize("kind", ["local", "memory", "unstamped"])
def test_refresh_reads_only_the_journals_that_changed(tmp_path: Path, kind: str) -> None:
    storage: Any = {
        "local": lambda: LocalStorage(tmp_path / "store"),
        "memory": MemoryStorage,
        "unstamped": lambda: Unstamped(MemoryStorage()),
    }[kind]()
    assert isinstance(storage, RunStamps) == (kind != "unstamped")
    gate = threading.Event()
    gate.set()
    agent = gated_agent(storage, gate)
    for name in ("c", "a", "b"):
        agent.start(name, run_id=name)
    journals = kx.load(storage)
    read = counting_reads(storage.inner if kind == "unstamped" else storage)
    assert journals.refresh() is journals
    # idle: a stamping storage reads no journal; another reads each for its token
    assert read == ([] if kind != "unstamped" else ["c", "b", "a"])
    agent.resume("a", "review", {"ok": True})
    agent.start("d", run_id="d")
    read.clear()
    fresh = journals.refresh()
    assert fresh is not journals
    if kind != "unstamped":
        assert sorted(read) == ["a", "d"]  # b and c were not read
    runs = fresh.runs.set_index("run_id")
    assert runs.loc["a", "status"] == "completed" and runs.loc["d", "status"] == "suspended"
    loaded = kx.load(storage)
    assert fresh.run_ids == loaded.run_ids  # oldest first, as a load lists them
    # entries and model calls list runs in run id order, after a refresh as after a load
    assert list(dict.fromkeys(fresh.entries["run_id"])) == ["a", "b", "c", "d"]
    assert fresh.entries[["run_id", "offset"]].equals(loaded.entries[["run_id", "offset"]])
    assert fresh.refresh() is fresh


def test_refresh_keeps_a_selection_in_its_order_and_drops_a_deleted_run(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    gate = threading.Event()
    gate.set()
    agent = gated_agent(storage, gate)
    for name in ("a", "b", "c"):
        agent.start(name, run_id=name)
    journals = kx.load(storage, run_ids=["c", "a", "b"])
    agent.resume("a", "review", {"ok": True})
    agent.start("d", run_id="d")  # not selected: not added
    storage.delete_run("b")
    fresh = journals.refresh()
    assert fresh.run_ids == ["c", "a"]
    assert list(dict.fromkeys(fresh.entries["run_id"])) == ["c", "a"]
    assert fresh.runs.set_index("run_id").loc["a", "status"] == "completed"


def test_a_refreshed_llm_calls_table_lists_runs_in_run_id_order() -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def chat(ctx: Any, question: str) -> Any:
        return ctx.step("chat.completions.create", lambda: completion(question))

    for name in ("b", "c"):
        chat.start(name, run_id=name)
    journals = kx.load(storage)
    chat.start("a", run_id="a")
    assert list(journals.refresh().llm_calls["run_id"]) == ["a", "b", "c"]


def completion(text: str) -> dict[str, Any]:
    """A chat completion's JSON, as OpenAI's SDK returns it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"answer to {text}"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def test_load_lists_entries_in_run_id_order_whatever_the_storage_lists() -> None:
    storage = Unstamped(MemoryStorage())
    gate = threading.Event()
    gate.set()
    agent = gated_agent(storage, gate)
    for name in ("b", "a", "c"):
        agent.start(name, run_id=name)
    journals = kx.load(storage)
    assert list(dict.fromkeys(journals.entries["run_id"])) == ["a", "b", "c"]


def test_a_suspended_run_shows_within_one_interval(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    gate = threading.Event()
    agent = gated_agent(storage, gate)
    worker = threading.Thread(target=agent.start, args=("x",), kwargs={"run_id": "bg"})
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the plan step is written
            stored = storage.read("bg")
            if stored is not None and b'"stepId":"plan"' in stored.data:
                break
            time.sleep(0.01)
        tree = kx.RunTree(kx.load(storage), live=True, interval=0.05)
        assert tree.watching and tree.nodes["bg"].status == "running"
        assert tree.nodes["bg"].label == "bg · 1 step"
        gate.set()
        worker.join(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            tree.nodes["bg"].status == "suspended" and tree.details.get("pending_events")
        ):  # the tree, then the selected run's details, are redrawn by the watcher's thread
            time.sleep(0.02)
        assert tree.nodes["bg"].status == "suspended" and tree.nodes["bg"].label == "bg · 2 steps"
        assert tree.details["pending_events"] == ["review"]  # the selected run, redrawn
    finally:
        gate.set()
        worker.join(10)
        tree.unwatch()
    assert not tree.watching


def test_resume_from_the_tree_calls_the_workflow(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    gate = threading.Event()
    gate.set()
    agent = gated_agent(storage, gate)
    agent.start("t", run_id="waiting")
    tree = kx.RunTree(kx.load(storage), workflow=agent)
    assert tree.can_resume and tree.details["status"] == "suspended"
    tree._message(tree, {"kind": "resume", "event": "review", "value": '{"ok": true}'})
    assert tree.message == "resumed review: success"
    assert tree.nodes["waiting"].status == "completed"  # the tree read the journal again
    tree._message(tree, {"kind": "resume", "event": "review", "value": "{}"})
    assert tree.message.startswith("TerminalRunError")  # shown, not raised
    bare = kx.RunTree(kx.load(storage))
    assert not bare.can_resume
    with pytest.raises(InvalidArgumentError, match="no workflow"):
        bare.resume("review", {})


def async_reviewed(storage: Any) -> Any:
    @kassette(storage=storage, clock=FakeClock())
    async def agent(ctx: AsyncContext, task: str) -> Any:
        await ctx.step("plan", lambda: f"plan {task}")
        await asyncio.sleep(0)
        return await ctx.suspend("review", reason="check")

    return agent


def test_resume_from_the_tree_awaits_an_async_workflow_without_a_running_loop(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path / "store")
    agent = async_reviewed(storage)
    asyncio.run(agent.start("t", run_id="waiting"))
    tree = kx.RunTree(kx.load(storage), workflow=agent)
    assert tree.can_resume and tree.details["status"] == "suspended"
    tree._message(tree, {"kind": "resume", "event": "review", "value": '{"ok": true}'})
    assert tree.message == "resumed review: success"  # awaited to the end: asyncio.run
    assert tree.nodes["waiting"].status == "completed"
    tree._message(tree, {"kind": "resume", "event": "review", "value": "{}"})
    assert tree.message.startswith("TerminalRunError")  # shown, not raised
    tree._message(tree, {"kind": "resume", "event": "review", "value": "{oops"})
    assert tree.message.startswith("JSONDecodeError")


def test_resume_from_the_tree_runs_an_async_workflow_on_the_running_loop(tmp_path: Path) -> None:
    """As in Jupyter, where the form's message arrives on the kernel's running event loop."""
    storage = LocalStorage(tmp_path / "store")
    agent = async_reviewed(storage)

    async def notebook() -> None:
        for run_id in ("first", "second"):
            await agent.start("t", run_id=run_id)
        tree = kx.RunTree(kx.load(storage), workflow=agent, selected="first")
        tree._message(tree, {"kind": "resume", "event": "review", "value": '{"ok": true}'})
        assert tree.message == "resuming review…"  # a task on this loop: it has not run yet
        assert tree.nodes["first"].status == "suspended"
        await wait_for_message(tree, "resumed")
        assert tree.message == "resumed review: success"
        assert tree.nodes["first"].status == "completed"  # read again when the task ended
        assert tree.nodes["second"].status == "suspended"
        task = tree.resume("review", {})  # again: the error comes when the task ends
        assert isinstance(task, asyncio.Task)
        await wait_for_message(tree, "TerminalRunError")
        assert task.done() and isinstance(task.exception(), TerminalRunError)

    asyncio.run(notebook())
    assert read_journal(storage, "first").entries[-1]["type"] == "complete"
    assert read_journal(storage, "second").entries[-1]["type"] == "suspend"


async def wait_for_message(tree: Any, start: str) -> None:
    for _ in range(500):  # 5 s at most
        if tree.message.startswith(start):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the tree's message is still {tree.message!r}")


def test_watch_needs_a_storage_and_a_positive_interval() -> None:
    tree = kx.RunTree(kx.Journals(kx.ENTRY_SCHEMA.empty_table(), kx.RUN_SCHEMA.empty_table()))
    with pytest.raises(InvalidArgumentError, match="not loaded from a storage"):
        tree.watch()
    tree = kx.RunTree(kx.load(MemoryStorage()))
    with pytest.raises(InvalidArgumentError, match="positive"):
        tree.watch(0)
