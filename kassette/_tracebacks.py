"""How kassette's errors read in IPython and Jupyter: a few lines, not a page of internals.

IPython asks an exception for `_render_traceback_()` before it formats a traceback; kassette's
errors (`KassetteError` and `kx.FanOutInterrupted`) answer with what happened (the error's
name and message) and what to do, in a few lines. The full traceback stays one command away:
with IPython's exception mode set to `Plain`, `Verbose` or `Docs` (`%xmode Plain`), they
answer with IPython's own full traceback, so `%xmode Plain` then `%tb` shows the last one in
full. Outside IPython nothing changes: Python's own traceback is printed as always.
"""

from __future__ import annotations

import sys

__all__ = ["FULL_MODES", "advice_for", "short_traceback"]

FULL_MODES = ("Plain", "Verbose", "Docs")  # IPython's exception modes that show everything
_RED, _BOLD, _DIM, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[2m", "\x1b[0m"
_HOW_FULL = "(the full traceback: %xmode Plain, then %tb)"

# what to do, by error class name (a subclass without one of its own takes its parent's)
_ADVICE = {
    "ReplayMismatchError": (
        "The code no longer does what this run journaled at that step. To run the new code "
        "from there, fork the run at the step (workflow.fork(run_id, step=...)); to continue "
        "this run, restore the code it was recorded with."
    ),
    "VersionMismatchError": (
        "Continue the run with the workflow version it was started with, or fork it: a fork "
        "records the version of the workflow that forks it."
    ),
    "InputMismatchError": (
        "Pass the input this run was started with, or start a new run id for the new input."
    ),
    "JournalCorruptionError": (
        "The journal cannot be read past that line: `kassette inspect` shows it; a fork before "
        "the damage continues the run."
    ),
    "TerminalRunError": (
        "A finished run does not run again: read its result with workflow.status(run_id), or "
        "fork it at a step to run that step and what follows again."
    ),
    "RunLockedError": "Another live process holds the run: deliver this again later.",
    "FencedError": "A newer session of the run took over: this one must stop writing.",
    "RunNotFoundError": "No run has that id in this storage: check the id and the storage.",
    "RunExistsError": "Pass another new run id (or prefix) for this fork.",
    "StorageError": "The storage failed, which is usually transient: the same call may succeed.",
}


def advice_for(exc: BaseException) -> str | None:
    """What to do about `exc`, from its class or the nearest parent that has advice."""
    for kind in type(exc).__mro__:
        advice = _ADVICE.get(kind.__name__)
        if advice is not None:
            return advice
    return None


def _shell_mode() -> tuple[object | None, str | None]:
    """IPython's running shell and its exception mode (`%xmode`), if IPython runs one."""
    if "IPython" not in sys.modules:
        return None, None
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return None, None
    return shell, getattr(getattr(shell, "InteractiveTB", None), "mode", None)


def short_traceback(exc: BaseException, advice: list[str] | None = None) -> list[str]:
    """The lines IPython shows for `exc` (see the module's doc): its name and message, then
    `advice` (default: `advice_for(exc)`) and how to see the full traceback. Under a full
    exception mode, IPython's own full traceback."""
    shell, mode = _shell_mode()
    if shell is not None and mode in FULL_MODES:
        formatter = shell.InteractiveTB  # type: ignore[attr-defined]
        return list(formatter.structured_traceback(type(exc), exc, exc.__traceback__))
    if advice is None:
        found = advice_for(exc)
        advice = [found] if found is not None else []
    coloured = shell is not None and str(getattr(shell, "colors", "")).lower() != "nocolor"
    red, bold, dim, reset = (_RED, _BOLD, _DIM, _RESET) if coloured else ("", "", "", "")
    message = str(exc)
    lines = [f"{red}{bold}{type(exc).__name__}{reset}: {message}"]
    if "fork" not in message or len(advice) > 1:  # a message that says what to do is enough
        lines += [f"{bold}→{reset} {line}" for line in advice]
    lines.append(f"{dim}{_HOW_FULL}{reset}")
    return lines
