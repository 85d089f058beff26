"""A progress bar on a terminal's stderr, for the long verbs over many runs (`export`,
`send_otlp`): one line redrawn in place at most ten times a second."""

from __future__ import annotations

import time
from typing import IO

__all__ = ["Progress"]


class Progress:
    """`export  [#########...........]  450/1000 runs` on stderr, redrawn in place (`label`
    names what is done: `export`, `send_otlp`); a partitioned export adds `, 120 files
    written` as its files are finished."""

    def __init__(
        self, total: int, stream: IO[str] | None, width: int = 30, *, label: str = "export"
    ) -> None:
        self.total, self.done, self.stream, self.width = total, 0, stream, width
        self.label = label
        self.files = 0
        self._drawn = 0.0

    def advance(self, runs: int) -> None:
        self.done += runs
        self._draw(force=self.done >= self.total)

    def wrote(self) -> None:
        """One more file finished (called from the writer's threads)."""
        self.files += 1
        self._draw(force=False)

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if self.stream is not None and (now - self._drawn > 0.1 or force):
            filled = self.width * self.done // max(self.total, 1)
            bar = "#" * filled + "." * (self.width - filled)
            files = f", {self.files} files written" if self.files else ""
            self.stream.write(f"\r{self.label}  [{bar}]  {self.done}/{self.total} runs{files}")
            self.stream.flush()
            self._drawn = now

    def close(self) -> None:
        if self.stream is not None and self._drawn:
            if self.files:
                self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
