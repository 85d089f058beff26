"""Clocks: where kassette reads the time and waits, so tests can replace both."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Wall-clock seconds since the epoch, and a way to wait (blocking or awaitable)."""

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    async def sleep_async(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        if seconds > 0:
            import asyncio  # imported when first needed: it costs ~50 ms at start-up

            await asyncio.sleep(seconds)
