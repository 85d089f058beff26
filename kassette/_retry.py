"""Retry: how often a failing step is tried again in-process, and how long to wait between."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kassette.errors import InvalidArgumentError

__all__ = ["Retry"]


@dataclass(frozen=True)
class Retry:
    """Try a step up to `max_attempts` times, waiting `delay` seconds, then `delay *
    backoff_rate`, ... (capped at `max_delay`) between attempts."""

    max_attempts: int = 3
    delay: float = 1.0
    backoff_rate: float = 2.0
    max_delay: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidArgumentError(f"Retry.max_attempts must be >= 1, not {self.max_attempts}")
        if self.delay < 0 or self.backoff_rate < 1 or (self.max_delay or 0) < 0:
            raise InvalidArgumentError(
                "Retry needs delay >= 0, backoff_rate >= 1 and max_delay >= 0"
            )

    def delays(self) -> Iterator[float]:
        """The waits before attempts 2, 3, ..., max_attempts."""
        delay = self.delay
        for _ in range(self.max_attempts - 1):
            yield delay if self.max_delay is None else min(delay, self.max_delay)
            delay *= self.backoff_rate


NO_RETRY = Retry(max_attempts=1, delay=0)
