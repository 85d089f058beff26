"""Watching a running fan-out: how many branches run, succeeded, failed or wait for an event,
what their model calls have spent so far, and stopping the fan-out when that reaches its budget.

A `Watch` runs in a thread of its own while the fan-out runs. Every `WATCH_S` it reads the
lines each started branch's journal gained since its last look (through the storage's public
`read`), counts the tokens (and dollars, where prices are known) of the model calls journaled
after the fork point (the fan-out's own, not the copied prefix's), stops the fan-out once a
budget is reached, and redraws the progress display: an HTML line in a notebook (ipywidgets),
a one-line bar on a terminal's stderr, nothing with `progress=False` or when stderr is not a
terminal. Counting reads only journals, so it works the same on every executor and storage.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from kassette._codec import decode_line
from kassette._engine import RunResult
from kassette._llm_calls import read_llm_call
from kassette.errors import InvalidArgumentError
from kassette.explore._running import BUDGET, Board, Branch, Halted, Outcome, Stop
from kassette.storage import Storage

WATCH_S = 0.2  # how often the journals are read and the display redrawn
_BAR_WIDTH = 24
_BUDGET_KEYS = ("tokens", "usd")


@dataclass(frozen=True)
class Budget:
    """A fan-out's limit on its own model calls: `tokens` (input plus output) and/or `usd`
    (dollars, counted over the calls whose price is known). Given to `fan_out` as a dict:
    `budget={"tokens": 50_000}`, `{"usd": 2.0}`, or both (whichever is reached first)."""

    tokens: float = math.inf
    usd: float = math.inf

    @classmethod
    def of(cls, budget: Mapping[str, float] | None) -> Budget | None:
        if budget is None:
            return None
        if not isinstance(budget, Mapping) or not budget or set(budget) - set(_BUDGET_KEYS):
            raise InvalidArgumentError(
                f'budget must be a dict with "tokens" and/or "usd", not {budget!r}'
            )
        for key, value in budget.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidArgumentError(f"budget {key!r} must be a number > 0, not {value!r}")
        return cls(**{key: float(value) for key, value in budget.items()})

    def reached(self, spent: Spent) -> bool:
        return spent.tokens >= self.tokens or spent.usd >= self.usd


@dataclass
class Spent:
    """What model calls cost: calls, tokens (input plus output) and dollars (known prices)."""

    calls: int = 0
    tokens: int = 0
    usd: float = 0.0

    def add(self, other: Spent) -> None:
        self.calls += other.calls
        self.tokens += other.tokens
        self.usd += other.usd


def spent_by(entry: Mapping[str, Any]) -> Spent:
    """What one journal entry cost, if it is a model call."""
    call = read_llm_call(entry)
    if call is None:
        return Spent()
    from kassette.explore._cost import call_costs

    usage = call.usage
    total = usage.total_tokens
    if total is None:
        total = (usage.input_tokens or 0) + (usage.output_tokens or 0)
    [usd] = call_costs([(call.provider, call.model, usage)])
    return Spent(1, total, usd or 0.0)  # an unknown price counts for nothing


class _Ledger:
    """The spending of each branch, read incrementally from its journal (from any thread)."""

    def __init__(self, branches: Sequence[Branch]) -> None:
        self._branches = branches
        self._read_to = [0] * len(branches)  # bytes of each journal counted so far
        self._spent = [Spent() for _ in branches]
        self._lock = threading.Lock()

    def read(self, index: int) -> None:
        branch = self._branches[index]
        storage: Storage = branch.workflow.storage
        snapshot = storage.read(branch.run_id)
        if snapshot is None:
            return
        end = snapshot.data.rfind(b"\n") + 1  # complete lines only: the last may be torn
        with self._lock:
            new = snapshot.data[self._read_to[index] : end]
            self._read_to[index] = max(self._read_to[index], end)
            for spent in self._spent_in(branch, new):
                self._spent[index].add(spent)

    @staticmethod
    def _spent_in(branch: Branch, new: bytes) -> list[Spent]:
        found = []
        for line in new.splitlines():
            # only a model call spends, and one either says so (`call`) or reports `usage`:
            # other lines are not decoded (a call with neither would count for 0 tokens)
            if b'"step"' not in line or (b"usage" not in line and b'"call":' not in line):
                continue
            try:
                entry = decode_line(line)
            except ValueError:
                continue
            if entry.get("type") == "step" and entry.get("offset", -1) >= branch.offset:
                found.append(spent_by(entry))
        return found

    def total(self) -> Spent:
        total = Spent()
        with self._lock:
            for spent in self._spent:
                total.add(spent)
        return total


@dataclass(frozen=True)
class Progress:
    """One look at a running fan-out, as the display shows it."""

    total: int
    running: int
    succeeded: int
    failed: int
    suspended: int
    stopped: int
    spent: Spent
    stopping: str | None  # why the fan-out is stopping, if it is

    @classmethod
    def of(
        cls, total: int, running: int, outcomes: Sequence[Outcome], spent: Spent, stop: Stop
    ) -> Progress:
        status = [o.status if isinstance(o, RunResult) else "" for o in outcomes]
        halted = sum(isinstance(o, Halted) for o in outcomes)
        return cls(
            total=total,
            running=running,
            succeeded=status.count("success"),
            failed=len(outcomes) - halted - sum(s in ("success", "suspended") for s in status),
            suspended=status.count("suspended"),
            stopped=halted,
            spent=spent,
            stopping=stop.reason,
        )

    @property
    def done(self) -> int:
        """Branches whose invocation ended: a stopped one is not done (a re-call continues it)."""
        return self.succeeded + self.failed + self.suspended

    def text(self) -> str:
        parts = [f"{self.done}/{self.total} done", f"{self.running} running"]
        parts += [f"{self.succeeded} succeeded", f"{self.failed} failed"]
        parts.append(f"{self.suspended} suspended")
        if self.stopped:
            parts.append(f"{self.stopped} stopped")
        if self.spent.calls:
            parts.append(f"{self.spent.calls} model calls, {self.spent.tokens:,} tokens")
            if self.spent.usd:
                parts.append(f"${self.spent.usd:,.4f}")
        if self.stopping:
            parts.append(
                f"stopping ({self.stopping})" if self.running else f"stopped by {self.stopping}"
            )
        return " · ".join(parts)


class Display(Protocol):
    def show(self, progress: Progress) -> None: ...

    def close(self, progress: Progress) -> None: ...


class TerminalBar:
    """A one-line bar redrawn in place on a terminal's stderr."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def show(self, progress: Progress) -> None:
        filled = _BAR_WIDTH * progress.done // max(progress.total, 1)
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self._stream.write(f"\rfan-out [{bar}] {progress.text()}\x1b[K")
        self._stream.flush()

    def close(self, progress: Progress) -> None:
        self.show(progress)
        self._stream.write("\n")
        self._stream.flush()


class NotebookLine:
    """A line of HTML in the notebook's output, updated in place (an ipywidgets `HTML`)."""

    def __init__(self) -> None:
        import ipywidgets as widgets
        from IPython.display import display

        self.widget = widgets.HTML()
        self.widget.add_class("kassette-fan-out-progress")
        display(self.widget)  # type: ignore[no-untyped-call]

    def show(self, progress: Progress) -> None:
        import html

        segments = "".join(
            f"<div title='{count} {label}' style='width:{100 * count / max(progress.total, 1)}%;"
            f"background:{colour}'></div>"
            for count, label, colour in (
                (progress.succeeded, "succeeded", "#16a34a"),
                (progress.failed, "failed", "#dc2626"),
                (progress.suspended, "suspended", "#d97706"),
                (progress.stopped, "stopped", "#6b7280"),
                (progress.running, "running", "#93c5fd"),
            )
            if count
        )
        self.widget.value = (
            "<div style='font-family:var(--jp-ui-font-family,sans-serif);font-size:12px'>"
            "<div style='display:flex;width:320px;height:8px;background:#e5e7eb;"
            f"border-radius:4px;overflow:hidden;margin:4px 0'>{segments}</div>"
            f"<span>{html.escape(progress.text())}</span></div>"
        )

    def close(self, progress: Progress) -> None:
        self.show(progress)


def _in_notebook() -> bool:
    """Whether this is a Jupyter kernel (IPython is imported only if it already is)."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def display_for(progress: bool) -> Display | None:
    """The display `fan_out(progress=...)` asks for, where this process shows one."""
    if not progress:
        return None
    if _in_notebook():
        return NotebookLine()
    if sys.stderr is not None and sys.stderr.isatty():
        return TerminalBar(sys.stderr)
    return None


class Watch:
    """Reads a running fan-out's journals in a thread of its own (see the module's doc)."""

    def __init__(
        self,
        branches: Sequence[Branch],
        board: Board,
        stop: Stop,
        *,
        budget: Budget | None,
        display: Display | None,
    ) -> None:
        self._branches = branches
        self._board = board
        self._stop = stop
        self._budget = budget
        self._display = display
        self._ledger = _Ledger(branches)
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if budget is not None:  # a re-call counts what earlier calls spent
            self._look(everyone=True)
            # Counted before every step of a branch in this process, and when any branch
            # ends (before the fan-out starts another): everything journaled so far by the
            # branches running. So no step, and no branch, starts once the budget is reached;
            # the calls already in flight then finish. Other processes' branches wait for the
            # next look (WATCH_S).
            index = {branch.run_id: number for number, branch in enumerate(branches)}
            stop.on_step = lambda run_id: self._count(index[run_id])
            board.on_end = self._count

    def start(self) -> None:
        if self._budget is not None or self._display is not None:
            self._thread = threading.Thread(
                target=self._watch, name="kassette-fan-out-watch", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._display is not None:
            self._display.close(self._look(everyone=True))

    def _watch(self) -> None:
        while not self._done.wait(WATCH_S):
            progress = self._look()
            if self._display is not None:
                self._display.show(progress)

    def _count(self, this: int) -> None:
        """Count what branch `this` and every other running branch journaled; stop the
        fan-out if that reaches the budget."""
        for index in {this, *self._board.unread()}:
            self._ledger.read(index)
        if self._budget is not None and self._budget.reached(self._ledger.total()):
            self._stop.set(BUDGET)

    def _look(self, *, everyone: bool = False) -> Progress:
        """Read what the running branches journaled since the last look; stop the fan-out at
        its budget; the progress as it is now."""
        running, outcomes = self._board.snapshot()
        for index in self._board.unread(everyone=everyone):
            self._ledger.read(index)
        spent = self._ledger.total()
        if self._budget is not None and self._budget.reached(spent):
            self._stop.set(BUDGET)
        return Progress.of(len(self._branches), running, outcomes, spent, self._stop)
