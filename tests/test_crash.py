"""Crash safety with real processes: SIGKILL a worker anywhere, re-invoke, and check the run.

`tests/procs/crash_worker.py` drives a 20-step run (five steps, a parallel block of three
branches with two steps each, two steps, a suspend the worker resumes as a dispatcher would,
seven steps) on LocalStorage. Every step's fn appends its step id to a side-effect file and
fsyncs before returning, so the file shows exactly which step bodies ran.

After every worker exit the journal must parse with dense offsets and one `start` per session.
A step body may run again only if a kill left its side effect without its journal entry; the
books on that are kept exactly: a step's side-effect count is one plus the number of kills that
found it in that state, and a journaled step never runs again. Each crashed run is re-invoked
until it completes and must end with the uncrashed run's result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kassette._journal import Journal

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "procs" / "crash_worker.py"
RUN_ID = "crash-run"
PACE = 0.05  # seconds each live step body of a worker with a timed kill sleeps first
STEP_IDS = frozenset(
    [f"s{i}" for i in range(1, 15)] + [f"fan/{b}/{s}" for b in "abc" for s in ("fetch", "score")]
)
ENTRIES = 26  # offsets of an uncrashed run: 0 (start) .. 25 (complete)
MAX_INVOCATIONS = 8
PROCESS_TIMEOUT = 120
CONCURRENCY = 4


@dataclass
class Outcome:
    """What one scenario did: how many kills landed and how many invocations it took."""

    kills: int = 0
    invocations: int = 0
    reruns: int = 0
    result: Any = None
    notes: list[dict[str, Any]] = field(default_factory=list)


def invoke(workdir: Path, kill: str | float | None) -> tuple[int, int, Any]:
    """Run the worker once; a float `kill` is a delay after which the parent SIGKILLs it."""
    note = workdir / "note"
    note.unlink(missing_ok=True)
    config = {
        "dir": str(workdir / "journals"),
        "run_id": RUN_ID,
        "effects": str(workdir / "effects"),
        "note": str(note),
        "kill": kill if isinstance(kill, str) else None,
        "pace": PACE if isinstance(kill, float) else 0,
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-S", str(WORKER), json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        if isinstance(kill, float):
            try:
                process.wait(timeout=kill)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
        try:
            stdout, stderr = process.communicate(timeout=PROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise AssertionError(f"worker in {workdir} hung (kill {kill!r})") from None
    if process.returncode == 0:
        return 0, process.pid, json.loads(stdout.decode().strip().splitlines()[-1])
    if process.returncode != -signal.SIGKILL:
        raise AssertionError(
            f"worker in {workdir} exited {process.returncode} (kill {kill!r}): "
            f"{stderr.decode()[-2000:]}"
        )
    return process.returncode, process.pid, None


def read_journal(workdir: Path) -> tuple[bytes, Journal | None]:
    path = workdir / "journals" / f"{RUN_ID}.jsonl"
    if not path.exists():
        return b"", None
    data = path.read_bytes()
    journal = Journal.parse(data, RUN_ID)  # raises on a gap, a duplicate, a corrupt line
    return data, journal


def check_sessions(journal: Journal) -> None:
    """Every session opens with exactly one `start`; sessions never interleave."""
    starts = Counter(e["session"] for e in journal.entries if e["type"] == "start")
    previous = 0
    for entry in journal.entries:
        session = entry["session"]
        assert session >= previous, f"session {session} after {previous} at {entry['offset']}"
        if session != previous:
            assert entry["type"] == "start", f"session {session} opens with {entry['type']}"
        previous = session
    assert all(count == 1 for count in starts.values()), starts
    assert set(starts) == set(range(1, journal.max_session + 1)), starts
    step_ids = [e["stepId"] for e in journal.entries if e["type"] == "step"]
    assert len(step_ids) == len(set(step_ids)), f"a step journaled twice: {step_ids}"


def side_effects(workdir: Path) -> Counter[str]:
    path = workdir / "effects"
    data = path.read_bytes() if path.exists() else b""
    assert not data or data.endswith(b"\n"), "a torn side-effect line"
    lines = data.decode().splitlines()
    assert set(lines) <= STEP_IDS, set(lines) - STEP_IDS
    return Counter(lines)


def check_kill_point(
    note: dict[str, Any], data: bytes, journal: Journal | None, pending: set[str]
) -> None:
    """What a precise kill point implies about the journal and the pending side effects."""
    spec: str = note["spec"]
    kind, _, rest = spec.partition(":")
    phase = rest.rpartition(":")[2]
    if kind in "wa":
        assert journal is not None
        offset = note["offset"]
        step_id = note.get("stepId")
        lines = note["lines"]  # a group commit of parallel branches writes several entries
        if phase == "torn" and journal.next_offset > offset:  # its cut fell after a whole line
            assert journal.next_offset < offset + lines, (spec, journal.next_offset, lines)
        elif phase in ("before", "torn"):
            assert journal.next_offset == offset, (spec, journal.next_offset)
            assert data.endswith(b"\n") == (phase == "before"), (spec, data[-80:])
            if step_id in STEP_IDS:
                assert step_id in pending, (spec, pending)
        else:
            assert journal.next_offset == offset + lines, (spec, journal.next_offset, lines)
            landed = journal.entries[offset]
            assert landed["type"] == note["type"], (spec, landed)
            assert landed.get("stepId") == step_id, (spec, landed)
            assert step_id not in pending, (spec, pending)
            assert data.endswith(b"\n")
    elif kind == "c":
        if phase in ("tmpsync", "link"):
            assert journal is None, spec
        else:
            assert journal is not None and journal.next_offset == 1, spec
    elif kind == "s":
        step_id = rest.rpartition(":")[0]
        assert journal is None or step_id not in journal.steps, spec
        assert (step_id in pending) == (phase == "after"), (spec, pending)


def run_scenario(workdir: Path, kills: list[str | float]) -> Outcome:
    """Kill the worker as `kills` says, one per invocation, then re-invoke until it completes."""
    workdir.mkdir(parents=True)
    outcome = Outcome()
    extra: Counter[str] = Counter()  # side effects left un-journaled by a kill, per step
    lockfile = workdir / "journals" / f"{RUN_ID}.lock"
    killed: set[int] = set()
    for number in range(MAX_INVOCATIONS):
        kill = kills[number] if number < len(kills) else None
        code, pid, printed = invoke(workdir, kill)
        outcome.invocations += 1
        data, journal = read_journal(workdir)
        if journal is not None:
            check_sessions(journal)
        journaled = set(journal.steps) & STEP_IDS if journal else set()
        counts = side_effects(workdir)
        for step_id in journaled:
            assert counts[step_id] == 1 + extra[step_id], (step_id, counts, extra)
        pending = set()
        for step_id, count in counts.items():
            if step_id not in journaled:
                assert count - extra[step_id] in (0, 1), (step_id, counts, extra)
                if count - extra[step_id] == 1:
                    pending.add(step_id)
        if code == 0:
            assert isinstance(kill, float) or kill is None, f"kill {kill!r} never fired"
            assert not pending, f"a clean exit left side effects un-journaled: {pending}"
            assert printed["status"] in ("success", "completed"), printed
            assert journal is not None and journal.terminal is not None
            assert journal.terminal["type"] == "complete"
            if lockfile.exists():  # only a crashed worker's (when no session was needed)
                assert json.loads(lockfile.read_bytes())["pid"] in killed
            outcome.result = journal.terminal["result"]
            assert printed["result"] == outcome.result
            return outcome
        outcome.kills += 1
        killed.add(pid)
        # at most one step body runs at a time, except in the three parallel branches
        assert len(pending) <= 1 or all(p.startswith("fan/") for p in pending), pending
        assert len(pending) <= 3, pending
        if isinstance(kill, str):
            note = json.loads((workdir / "note").read_text())
            assert note["spec"] == kill, (note, kill)
            check_kill_point(note, data, journal, pending)
            if kill.startswith("l:"):  # a lock taken by a process that then died stays behind
                holder = json.loads(lockfile.read_bytes()) if lockfile.exists() else {}
                assert (holder.get("pid") == pid) == kill.endswith(":after"), (kill, holder)
            outcome.notes.append(note)
        for step_id in pending:
            extra[step_id] += 1
            outcome.reruns += 1
    raise AssertionError(f"{workdir}: not complete after {MAX_INVOCATIONS} invocations")


def run_all(base: Path, scenarios: dict[str, list[str | float]]) -> dict[str, Outcome]:
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        futures = {
            name: pool.submit(run_scenario, base / name.replace(":", "_"), kills)
            for name, kills in scenarios.items()
        }
        outcomes = {}
        for name, future in futures.items():
            try:
                outcomes[name] = future.result()
            except AssertionError as exc:
                raise AssertionError(f"scenario {name}: {exc}") from exc
    return outcomes


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The result of an uncrashed run; every step body ran exactly once."""
    workdir = tmp_path_factory.mktemp("reference") / "run"
    outcome = run_scenario(workdir, [])
    assert outcome.invocations == 1 and outcome.kills == 0
    assert side_effects(workdir) == Counter(dict.fromkeys(STEP_IDS, 1))
    _, journal = read_journal(workdir)
    assert journal is not None and journal.next_offset == ENTRIES
    assert journal.max_session == 2  # the start, then the resume
    return outcome.result


def check_outcomes(
    outcomes: dict[str, Outcome], scenarios: dict[str, list[str | float]], reference: Any
) -> int:
    for name, outcome in outcomes.items():
        assert outcome.result == reference, name
        # once the last kill is behind it, one invocation finishes the run
        assert outcome.invocations == outcome.kills + 1, (name, outcome)
        precise = [k for k in scenarios[name] if isinstance(k, str)]
        assert outcome.kills >= len(precise), (name, outcome)
    return sum(outcome.kills for outcome in outcomes.values())


def test_kills_inside_storage_io(tmp_path: Path, reference: Any) -> None:
    """Every journal append (before, torn, between write and fsync, after fsync), the journal's
    creation, the lock of the first and of the resuming session, and chains of kills that hit
    the recovering sessions too."""
    scenarios: dict[str, list[str | float]] = {}
    for offset in range(1, ENTRIES):
        for phase in ("before", "torn", "between", "after"):
            scenarios[f"w:{offset}:{phase}"] = [f"w:{offset}:{phase}"]
    for point in ("tmpsync", "link", "linked", "dirsync"):
        scenarios[f"c:{point}"] = [f"c:{point}"]
    for number in (1, 2):  # the first session's lock, and the resume's
        for when in ("before", "after"):
            scenarios[f"l:{number}:{when}"] = [f"l:{number}:{when}"]
    phases = ("before", "torn", "between", "after")
    for index, offset in enumerate(range(2, 24, 3)):
        first = f"w:{offset}:{phases[index % 4]}"
        scenarios[f"chain:{offset}"] = [first, "a:1:torn", "a:2:between", "l:1:after"]
    for index, offset in enumerate((1, 7, 9, 16, 17, 22)):
        first = f"w:{offset}:{phases[(index + 1) % 4]}"
        scenarios[f"chain2:{offset}"] = [first, "l:1:before", "a:1:after", "a:3:torn"]
    outcomes = run_all(tmp_path, scenarios)
    kills = check_outcomes(outcomes, scenarios, reference)
    assert kills == sum(len(kills) for kills in scenarios.values()) == 164
    # the suspend's resume was crashed at every one of its appends and its lock
    resumed = {n["offset"] for o in outcomes.values() for n in o.notes if n.get("session") == 2}
    assert {16, 17} <= resumed
    # torn and un-journaled step bodies were re-run, and only those
    assert sum(o.reruns for o in outcomes.values()) >= 2 * 20


def test_kills_inside_steps(tmp_path: Path, reference: Any) -> None:
    """Each of the 20 step bodies (six of them in parallel branches) kills its process just
    before and just after its side effect."""
    scenarios: dict[str, list[str | float]] = {
        f"s:{step_id}:{when}": [f"s:{step_id}:{when}"]
        for step_id in sorted(STEP_IDS)
        for when in ("before", "after")
    }
    outcomes = run_all(tmp_path, scenarios)
    kills = check_outcomes(outcomes, scenarios, reference)
    assert kills == 40
    for name, outcome in outcomes.items():
        # a body killed after its side effect runs exactly once more; before it, never twice
        if name.endswith(":after"):
            assert outcome.reruns >= 1, name


def test_kills_from_the_parent_at_varied_delays(tmp_path: Path, reference: Any) -> None:
    """The parent SIGKILLs workers after delays spread over the run. A worker given a timed
    kill paces its live steps (`PACE` each: at least 15 one after another), so it runs longer
    than any first delay and every scenario's first kill lands, wherever it falls; whether the
    second lands depends on how much the first left to do."""
    delays = [0.06 + 0.03 * index for index in range(16)]
    assert max(delays) < 15 * PACE
    scenarios: dict[str, list[str | float]] = {
        f"t:{index}": [delay, delay / 2] for index, delay in enumerate(delays)
    }
    outcomes = run_all(tmp_path, scenarios)
    kills = check_outcomes(outcomes, scenarios, reference)
    assert all(outcome.kills >= 1 for outcome in outcomes.values()), outcomes
    assert kills >= len(scenarios)
