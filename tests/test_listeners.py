"""Listeners (`kassette.core.add_listener`): the public hook through which integrations see
what runs journal, instead of replacing a method of `Run`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kassette import MemoryStorage, kassette
from kassette.core import Listener, add_listener, read_journal, remove_listener


class Recorder(Listener):
    def __init__(self) -> None:
        self.appended_entries: list[tuple[str, dict[str, Any]]] = []
        self.closed_sessions: list[tuple[str, int]] = []

    def appended(self, run_id: str, entry: Mapping[str, Any]) -> None:
        self.appended_entries.append((run_id, dict(entry)))

    def closed(self, run_id: str, session: int) -> None:
        self.closed_sessions.append((run_id, session))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    listener = Recorder()
    add_listener(listener)
    add_listener(listener)  # once, however often it is added
    try:
        yield listener
    finally:
        remove_listener(listener)


def test_every_live_entry_is_reported_once_in_order_and_replays_are_not(
    recorder: Recorder,
) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def flow(ctx: Any, ticket: str) -> Any:
        plan = ctx.step("plan", lambda: f"plan for {ticket}")
        approval = ctx.suspend("approve")
        return ctx.step("act", lambda: f"{plan}, {approval}")

    first = flow.start("t-1", run_id="r1")
    assert first.status == "suspended"
    flow.resume("r1", "approve", "yes")
    journal = read_journal(storage, "r1")
    # sessions 1 and 2 were live, and the resume's session replayed `plan` without a new entry
    assert [entry for _, entry in recorder.appended_entries] == [dict(e) for e in journal.entries]
    assert {run_id for run_id, _ in recorder.appended_entries} == {"r1"}
    assert [entry["type"] for _, entry in recorder.appended_entries] == [
        "start", "step", "suspend", "start", "resume", "step", "complete",
    ]  # fmt: skip
    assert recorder.closed_sessions == [("r1", 1), ("r1", 2)]


def test_an_async_workflow_reports_its_entries_after_they_are_written(recorder: Recorder) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    async def flow(ctx: Any, n: int) -> Any:
        results = await ctx.parallel({f"b{i}": (lambda c, i=i: i * i) for i in range(n)})
        return sum(results.values())

    assert asyncio.run(flow.start(4, run_id="a1")).result == 14
    journal = read_journal(storage, "a1")
    assert sorted(e["offset"] for _, e in recorder.appended_entries) == [
        e["offset"] for e in journal.entries
    ]
    assert recorder.closed_sessions == [("a1", 1)]


def test_a_failing_listener_is_logged_and_never_fails_the_workflow(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Listener):
        def appended(self, run_id: str, entry: Mapping[str, Any]) -> None:
            raise RuntimeError("viewer down")

    broken = Broken()
    add_listener(broken)
    try:
        flow = kassette(lambda ctx, _: ctx.step("one", lambda: 1), storage=MemoryStorage())
        with caplog.at_level(logging.ERROR, logger="kassette"):
            assert flow.start(None, run_id="f1").result == 1
    finally:
        remove_listener(broken)
    assert "viewer down" in caplog.text and "f1" in caplog.text
    assert len(recorder.appended_entries) == 3  # the others still hear every entry


def test_a_removed_listener_hears_nothing_more(recorder: Recorder) -> None:
    flow = kassette(lambda ctx, _: ctx.step("one", lambda: 1), storage=MemoryStorage())
    remove_listener(recorder)
    flow.start(None, run_id="quiet")
    assert recorder.appended_entries == [] and recorder.closed_sessions == []
