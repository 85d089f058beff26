"""Clocks: where kassette reads the time and waits, so tests can replace both; and `Backoff`,
the one way kassette waits between tries of something that may succeed later (an append, a
read back, a cancel, a lock held by another process)."""

from __future__ import annotations

import random
import time
from typing import Protocol

__all__ = ["Backoff", "Clock", "SystemClock"]


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


class Backoff:
    """Pauses between tries, on `clock`: `first` seconds, doubling up to `most`, each drawn
    at random below it when `jitter` (out of step with a rival's rhythm). `pause()` waits the
    next one. `wait()` does too, unless the budget is spent, `attempts` pauses taken or
    `seconds` passed since the backoff began, and says whether it waited: a loop tries, and
    on a failure that may pass, `if not backoff.wait(): give up`."""

    def __init__(
        self,
        clock: Clock,
        first: float,
        *,
        most: float = float("inf"),
        attempts: int | None = None,
        seconds: float | None = None,
        jitter: bool = False,
    ) -> None:
        self.clock, self.most, self.jitter = clock, most, jitter
        self.attempts, self.taken = attempts, 0
        self._next = first
        self._deadline = None if seconds is None else clock.time() + seconds

    def pause(self) -> None:
        """Wait the next pause, whatever the budget."""
        delay = random.uniform(0, self._next) if self.jitter else self._next
        self._next = min(self._next * 2, self.most)
        self.taken += 1
        self.clock.sleep(delay)

    def wait(self) -> bool:
        """`pause()` and True, or False (no wait) once the budget is spent."""
        if self.attempts is not None and self.taken >= self.attempts:
            return False
        if self._deadline is not None and self.clock.time() >= self._deadline:
            return False
        self.pause()
        return True
