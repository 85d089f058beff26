"""`koto next` benchmark: the wall time of a whole `koto` process, against a bare interpreter.

An agent calls `koto next` once per step, so what it pays is the command's whole run: the
interpreter starting, the imports, reading the session and answering. On a 20-state template
(a loop of states that each accept one boolean, then a terminal state) this measures, as
medians over N calls interleaved round-robin so a noisy machine moves every figure alike:

  python -c pass         the bare interpreter, the baseline
  python -c "import kassette"
  kassette status RUN    the kassette command reading one journal
  koto next (read)       `koto next NAME` on a state waiting for evidence: reads, writes nothing
  koto next (advance)    `koto next NAME --with-data '{"go": true}'`: opens a fenced session,
                         journals the evidence and the transition, answers for the next state

and prints each as milliseconds and as a ratio to the bare interpreter. The target (issue 5)
is `koto next` <= 3x `python -c pass`. The children keep bytecode caches (in a temporary
PYTHONPYCACHEPREFIX, even when the caller sets PYTHONDONTWRITEBYTECODE), as an installed
`koto` has: compiling every module from source on every call would be measured otherwise.
Run from a checkout: `python benchmarks/bench_koto.py` (50 calls each, about a minute) or
`--calls N`. Exit status 0 when the target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATES = 20
TARGET = 3.0


def template() -> str:
    """A loop of STATES states, each accepting `go`; the last one loops back or finishes."""
    lines = ["---", "name: bench", 'version: "1"', "initial_state: s00", "states:"]
    for index in range(STATES):
        name, after = f"s{index:02d}", f"s{(index + 1) % STATES:02d}"
        lines += [f"  {name}:", "    accepts:", "      go: {type: boolean, required: true}"]
        if index < STATES - 1:
            lines += ["    transitions:", f"      - target: {after}"]
        else:
            lines += [
                "    transitions:",
                f"      - {{target: {after}, when: {{go: true}}}}",
                "      - {target: done, when: {go: false}}",
            ]
    lines += ["  done: {terminal: true}", "---"]
    for index in range(STATES):
        lines += [f"## s{index:02d}", f"Do step {index} of the loop, then submit go."]
    lines += ["## done", "Finished."]
    return "\n".join(lines) + "\n"


def command(script: str, module: str) -> list[str]:
    """The installed console script when there is one (what an agent runs), else `-m`."""
    installed = Path(sys.executable).parent / script
    return [str(installed)] if installed.exists() else [sys.executable, "-m", module]


def timed(argv: list[str], environment: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, env=environment, cwd=cwd, capture_output=True, timeout=120)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stdout!r} {result.stderr!r}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="calls of each command (50)")
    calls = parser.parse_args().calls
    work = Path(tempfile.mkdtemp(prefix="bench-koto-"))
    try:
        home = work / "home"
        environment = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("KOTO_") and key != "PYTHONDONTWRITEBYTECODE"
        }
        environment.update(
            KOTO_HOME=str(home), PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(work / "pycache")
        )
        (work / "bench.md").write_text(template())
        koto = command("koto", "kassette.koto._cli")
        for name in ("reader", "mover"):
            subprocess.run(
                [*koto, "init", name, "--template", "bench.md"],
                env=environment,
                cwd=work,
                check=True,
                capture_output=True,
            )
        subprocess.run(
            [*koto, "next", "reader"], env=environment, cwd=work, check=True, capture_output=True
        )
        status = [
            *command("kassette", "kassette"),
            "--storage",
            f"file:{home / 'sessions' / 'reader'}",
            "status",
            "koto-reader.state",  # the session's run id: upstream's koto-NAME.state.jsonl
        ]
        measures = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import kassette'": [sys.executable, "-c", "import kassette"],
            "kassette status": status,
            "koto next (read)": [*koto, "next", "reader"],
            "koto next (advance)": [*koto, "next", "mover", "--with-data", '{"go": true}'],
        }
        times: dict[str, list[float]] = {label: [] for label in measures}
        for argv in measures.values():  # warm the file cache once
            timed(argv, environment, work)
        for _ in range(calls):
            for label, argv in measures.items():
                times[label].append(timed(argv, environment, work))
        entries = len(
            (home / "sessions" / "mover" / "koto-mover.state.jsonl").read_text().splitlines()
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    baseline = statistics.median(times["python -c pass"])
    print(
        f"{calls} calls each, {STATES}-state template, medians (the mover's journal ended "
        f"with {entries} entries); {' '.join(koto)}"
    )
    results = {}
    for label, values in times.items():
        median = statistics.median(values)
        results[label] = {
            "median_ms": round(median * 1000, 1),
            "ratio": round(median / baseline, 2),
        }
        print(f"  {label:<30} {median * 1000:7.1f} ms  {median / baseline:5.2f}x")
    worst = max(results["koto next (read)"]["ratio"], results["koto next (advance)"]["ratio"])
    met = worst <= TARGET
    print(f"target koto next <= {TARGET}x python -c pass: {'met' if met else 'NOT met'}")
    print(json.dumps(results))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
