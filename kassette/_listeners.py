"""Listeners: the public way to observe what the runs of this process journal.

In the spirit of `logging.Handler` and `sys.addaudithook`: an integration that must see what
the core does (live tracing, a progress display, a metrics exporter) subclasses `Listener`,
overrides what it needs, and registers it with `add_listener`; it never replaces a method of
`Run`. `appended` is called once per entry after the entry is durable (its write returned), in
the thread that appended it, in offset order within a session; replayed entries are not
appended, so they are not reported again. `opened` is called when a session opens, with the
journal as it was read (what a listener needs of the run's past: its creation, say). `closed`
is called when a session ends (`Run.close`, after a terminal entry, a suspend, a crash of the
workflow or a fence), so a listener can drop what it kept for that session. A listener that
raises is logged and skipped: observing never fails a workflow. With no listener registered the
cost is one empty-tuple check per append.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Listener", "add_listener", "remove_listener"]

_log = logging.getLogger("kassette")
_lock = threading.Lock()
# replaced, never mutated, so `notify_*` read it without the lock
_listeners: tuple[Listener, ...] = ()


class Listener:
    """Observes the runs of this process; the default methods do nothing."""

    def opened(self, run_id: str, session: int, entries: Sequence[Mapping[str, Any]]) -> None:
        """Session `session` of `run_id` opened; `entries` is the journal as it read (this
        session's `start` last, or, in a fork, before the entry edited at the fork point).
        The session's own entries among them are reported by `appended` next."""

    def appended(self, run_id: str, entry: Mapping[str, Any]) -> None:
        """`entry` (the journal line as a dict, with `type`, `session`, `offset` and
        `timestamp`) of `run_id` is durable."""

    def closed(self, run_id: str, session: int) -> None:
        """Session `session` of `run_id` ended; nothing more is appended by it."""


def add_listener(listener: Listener) -> None:
    """Report every run's appends and closed sessions to `listener` (once, however often it
    is added)."""
    global _listeners
    with _lock:
        if listener not in _listeners:
            _listeners = (*_listeners, listener)


def remove_listener(listener: Listener) -> None:
    """Stop reporting to `listener` (nothing happens if it is not registered)."""
    global _listeners
    with _lock:
        _listeners = tuple(kept for kept in _listeners if kept is not listener)


def notify_appended(run_id: str, entry: Mapping[str, Any]) -> None:
    for listener in _listeners:
        try:
            listener.appended(run_id, entry)
        except Exception:
            _log.exception("kassette: listener %r failed on an entry of %s", listener, run_id)


def notify_opened(run_id: str, session: int, entries: Sequence[Mapping[str, Any]]) -> None:
    for listener in _listeners:
        try:
            listener.opened(run_id, session, entries)
        except Exception:
            _log.exception("kassette: listener %r failed opening %s", listener, run_id)


def notify_closed(run_id: str, session: int) -> None:
    for listener in _listeners:
        try:
            listener.closed(run_id, session)
        except Exception:
            _log.exception("kassette: listener %r failed closing %s", listener, run_id)


def listening() -> bool:
    """Whether any listener is registered (the append path's one check)."""
    return bool(_listeners)
