"""Gates: checks a state runs before it lets the workflow move on.

A `command` gate runs `sh -c COMMAND` in the session's execution anchor (the directory `koto
init` ran in), in a process group of its own, and passes when it exits 0; when its `timeout`
(seconds) passes, the whole group is killed. A command that could not finish says why in
`failure_kind` (`timed_out`, `spawn_failed`).
A `context-exists` gate passes when the session's context store has the key; `context-matches`
when that content matches a regular expression. Each reports a small fixed output
(`{exit_code, error}`, `{exists, error}`, `{matches, error}`) that `when` conditions can route
on as `gates.<name>.<field>`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

__all__ = ["REFERENCE", "GateResult", "evaluate", "substitute"]

Status = Literal["passed", "failed", "timed_out", "error"]
REFERENCE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")  # a `{{VARIABLE}}`


class GateResult:
    """What a gate reported (`output`, the fields `when` can test) and how it ended."""

    __slots__ = ("output", "status")

    def __init__(self, output: dict[str, Any], status: Status) -> None:
        self.output = output
        self.status = status

    def __repr__(self) -> str:
        return f"GateResult({self.output!r}, {self.status!r})"

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def substitute(text: str, values: Mapping[str, str], *, quote: bool = False) -> str:
    """`text` with each `{{NAME}}` replaced by its value (shell-quoted with `quote`).

    One pass: a value containing `{{...}}` is never expanded again. Unknown names stay.
    """

    def replace(match: re.Match[str]) -> str:
        value = values.get(match.group(1))
        if value is None:
            return match.group(0)
        if quote:
            import shlex

            return shlex.quote(value)
        return value

    return REFERENCE.sub(replace, text)


def evaluate(
    gate: dict[str, Any],
    *,
    values: Mapping[str, str],
    read_context: Callable[[str], bytes | None],
    cwd: str,
    environment: Mapping[str, str],
) -> GateResult:
    """Run one gate; `read_context(key)` gives a context key's content or None."""
    kind = gate["type"]
    if kind == "command":
        command = substitute(gate["command"], values, quote=True)
        return _run_command(command, gate["timeout"], cwd, environment)
    key = substitute(gate["key"], values)
    try:
        content = read_context(key)
    except Exception as exc:  # the store failed: the gate cannot pass, and says why
        field = "exists" if kind == "context-exists" else "matches"
        return GateResult({field: False, "error": str(exc)}, "error")
    if kind == "context-exists":
        return GateResult(
            {"exists": content is not None, "error": ""},
            "passed" if content is not None else "failed",
        )
    if content is None:
        return GateResult({"matches": False, "error": f"context key {key!r} not found"}, "failed")
    pattern = re.compile(substitute(gate["pattern"], values))
    matched = pattern.search(content.decode("utf-8", errors="replace")) is not None
    return GateResult({"matches": matched, "error": ""}, "passed" if matched else "failed")


def _run_command(
    command: str, timeout: int, cwd: str, environment: Mapping[str, str]
) -> GateResult:
    import signal
    import subprocess

    try:
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=dict(environment),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so a timeout kills all of it
        )
    except OSError as exc:
        output = {"exit_code": -1, "error": f"spawn_failed: {exc}", "failure_kind": "spawn_failed"}
        return GateResult(output, "error")
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid, signal.SIGKILL)
        process.wait()
        output = {"exit_code": -1, "error": "timed_out", "failure_kind": "timed_out"}
        return GateResult(output, "timed_out")
    except BaseException:  # interrupted: leave nothing running behind
        _kill_group(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return GateResult({"exit_code": code, "error": ""}, "passed" if code == 0 else "failed")


def _kill_group(pid: int, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal_number)
