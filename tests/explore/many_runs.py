"""10,000 agent runs of 30 entries each (300,000 entries) written straight to journal files.

The researcher's agent of issue 31: plan, then draft (sometimes calling a search tool and
drafting again), then critique, over several rounds; every fourth run waits for a human's
review between two sessions. Runs start 2.5 s apart (about 7 hours in all); step times vary
from 50 ms to 6 s. Plain JSON lines, no kassette internals: the browser test copies this file
next to its notebook, and benchmarks/bench_timeline.py imports it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["ENTRIES_PER_RUN", "write_runs"]

ENTRIES_PER_RUN = 30
_ROUND = ["plan", "draft", "search", "draft", "critique"]
_BEGIN = 1.767e9  # 2025-12-29T09:20:00Z


def _stamp(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def _run_lines(run: int) -> list[dict[str, object]]:
    now = _BEGIN + run * 2.5
    waits = run % 4 == 0
    lines: list[dict[str, object]] = []

    def add(kind: str, session: int, seconds: float = 0.0, **fields: object) -> None:
        nonlocal now
        now += seconds
        entry = {"type": kind, "session": session, "offset": len(lines), "timestamp": _stamp(now)}
        lines.append({**entry, **fields})

    add("start", 1, metadata={"ticket": f"T-{run}"}, params={"temperature": run % 20 / 10})
    steps = ENTRIES_PER_RUN - (5 if waits else 2)  # start, complete (and suspend/start/resume)
    session, seen = 1, {}
    for number in range(steps):
        if waits and number == steps // 2:
            add("suspend", session, 0.01, eventId="review", event="review")
            session += 1
            add("start", session, 30 + run % 270, metadata={"ticket": f"T-{run}"})
            add("resume", session, 0.01, eventId="review", event="review", value=True)
        name = _ROUND[number % len(_ROUND)]
        seen[name] = seen.get(name, 0) + 1
        step_id = name if seen[name] == 1 else f"{name}#{seen[name]}"
        took = 0.05 + (run * 7 + number * 13) % 60 / 10  # 50 ms to 6 s
        add("step", session, took, stepId=step_id, name=name, result=f"{name} {number}",
            durationMs=round(took * 1000, 3))  # fmt: skip
    add("complete", session, 0.01, result={"answer": run})
    return lines


def write_runs(directory: Path | str, runs: int) -> None:
    """Write `runs` journals of `ENTRIES_PER_RUN` entries into `directory` (a LocalStorage)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    for run in range(runs):
        lines = _run_lines(run)
        assert len(lines) == ENTRIES_PER_RUN, len(lines)
        text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        (folder / f"run-{run:05d}.jsonl").write_text(text)
