"""A workflow call from a widget, for `Workflow` and `AsyncWorkflow` alike.

A `Workflow` returns its result; an `AsyncWorkflow` returns a coroutine, which must be awaited
or nothing runs. In Jupyter a widget's callback runs on the kernel's event loop, which is
already running, so the coroutine becomes a task on that loop and the widget hears of the
outcome when the task ends; with no running loop (a script, a test) it runs to the end here.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["settle"]

T = TypeVar("T")
U = TypeVar("U")


def settle(
    outcome: T | Awaitable[T],
    then: Callable[[T], U],
    failed: Callable[[BaseException], Any],
) -> U | asyncio.Task[T]:
    """`then(result)` of a workflow call's `outcome`, awaited first if it is awaitable.

    On a running event loop the awaitable becomes a task, which is returned at once; when it
    ends, `then` gets its result, or `failed` the exception it (or `then`) raised. Otherwise
    the result, awaited with `asyncio.run` if need be, goes to `then` here, and an exception
    is raised to the caller.
    """
    if not inspect.isawaitable(outcome):
        return then(outcome)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return then(asyncio.run(_awaited(outcome)))
    task = loop.create_task(_awaited(outcome))
    task.add_done_callback(lambda done: _finished(done, then, failed))
    return task


def _finished(
    task: asyncio.Task[T], then: Callable[[T], Any], failed: Callable[[BaseException], Any]
) -> None:
    try:
        then(task.result())
    except (Exception, asyncio.CancelledError) as exc:  # no caller to raise to: shown instead
        failed(exc)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable
