"""Live trees: refresh the journals every interval, in a background thread.

What changed is the journals' business (`Journals.refresh`: one stamp listing, and a read of
only the journals that moved); the watcher only calls it on a timer and stops on an error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Watcher"]


class Watcher:
    """Calls `refresh()` every `interval` seconds until `stop()`; an exception stops it and
    goes to `failed` as text."""

    def __init__(
        self, refresh: Callable[[], None], failed: Callable[[str], None], interval: float
    ) -> None:
        self._refresh, self._failed, self._interval = refresh, failed, interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kassette-run-tree", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, 2 * self._interval))

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._refresh()
            except Exception as exc:  # shown in the widget: a thread has no caller
                self._failed(f"watching stopped: {type(exc).__name__}: {exc}")
                return
