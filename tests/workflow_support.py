"""Shared helpers for the workflow tests: one scenario, written as a `def` and an `async def`.

A `Driver` calls a `Workflow` or an `AsyncWorkflow` the same blocking way (an async method is
run with `asyncio.run`), so a test states its expectations once for both kinds of workflow.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kassette import AsyncWorkflow, LocalStorage, MemoryStorage, Storage, Workflow, kassette
from kassette.core import read_journal
from kassette.testing import FakeClock

KINDS = ["def", "async"]


class Crash(BaseException):
    """Stands in for the process dying mid-invocation: nothing catches or journals it."""


class Driver:
    """A workflow of either kind, called with blocking methods."""

    def __init__(self, workflow: Workflow[Any, Any] | AsyncWorkflow[Any, Any]) -> None:
        self.workflow = workflow

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.workflow, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            value = method(*args, **kwargs)
            return asyncio.run(value) if inspect.iscoroutine(value) else value

        return call


def make_workflow(
    kind: str,
    sync_body: Callable[..., Any],
    async_body: Callable[..., Any],
    *,
    storage: Storage,
    clock: FakeClock,
    version: str | None = None,
) -> Driver:
    """Decorate the body matching `kind` and check it became the right workflow class."""
    body = sync_body if kind == "def" else async_body
    workflow = kassette(body, storage=storage, version=version, clock=clock)
    assert isinstance(workflow, Workflow if kind == "def" else AsyncWorkflow)
    return Driver(workflow)


def raw(storage: Storage, run_id: str) -> bytes:
    """A run's journal bytes, to prove a refused call wrote nothing."""
    snapshot = storage.read(run_id)
    assert snapshot is not None
    return snapshot.data


def entries(storage: Storage, run_id: str) -> list[dict[str, Any]]:
    return read_journal(storage, run_id).entries


def types(storage: Storage, run_id: str) -> list[str]:
    return [e["type"] for e in entries(storage, run_id)]


def step_entries(storage: Storage, run_id: str) -> dict[str, dict[str, Any]]:
    return {e["stepId"]: e for e in entries(storage, run_id) if e["type"] == "step"}


# Test modules import these by their function names; tests ask for them as kind, storage, clock.
@pytest.fixture(params=KINDS, name="kind")
def kind_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["memory", "local"], name="storage")
def storage_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "memory":
        return MemoryStorage()
    return LocalStorage(tmp_path / "journals")


@pytest.fixture(name="clock")
def clock_fixture() -> FakeClock:
    return FakeClock()
