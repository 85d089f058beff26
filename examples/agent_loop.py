"""A think-act-observe agent loop: every model call and every tool call is a step.

    python examples/agent_loop.py                   # journals in a temporary directory
    python examples/agent_loop.py --dir .kassette   # keep them for `python -m kassette dump`

The agent answers a question by asking its model what to do next, running the tool the model
picks and feeding back what it observed, until the model answers. The model and the tools are
scripted and offline; every call they make is logged next to the journals, like a paid request.
The first worker process is SIGKILLed while the model thinks for the third time; a second
process re-invokes the run and continues at that call. Nothing before it is called again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from functools import partial
from pathlib import Path

from kassette import LocalStorage, kassette
from kassette.core import read_journal

QUESTION = "How many people live in Lyon and Marseille together?"
POPULATION = {"Lyon": 522_250, "Marseille": 873_076}
CALLS_LOG = ".agent-calls.log"
MAX_TURNS = 8


class Model:
    """A scripted model: looks at what the agent observed so far and picks the next action."""

    def __init__(self, calls_log: Path, crash_in_turn: int | None) -> None:
        self.calls_log = calls_log
        self.crash_in_turn = crash_in_turn

    def log(self, line: str) -> None:
        with open(self.calls_log, "a") as log:
            log.write(line + "\n")

    def think(self, history: list[dict]) -> dict:
        turn = len(history) + 1
        self.log(f"model turn-{turn}")
        if turn == self.crash_in_turn:  # the machine dies while the model is answering
            os.kill(os.getpid(), signal.SIGKILL)
        found = [h["observation"] for h in history if h["action"]["tool"] == "search"]
        if len(found) < len(POPULATION):
            return {"tool": "search", "input": f"population of {list(POPULATION)[len(found)]}"}
        if history[-1]["action"]["tool"] == "search":
            return {"tool": "calculate", "input": [f["population"] for f in found]}
        return {"answer": f"About {history[-1]['observation']:,} people."}

    def search(self, query: str) -> dict:
        self.log("tool search")
        city = query.rsplit(" ", 1)[-1]
        return {"city": city, "population": POPULATION[city]}

    def calculate(self, numbers: list[int]) -> int:
        self.log("tool calculate")
        return sum(numbers)


def make_agent(storage: LocalStorage, model: Model):
    @kassette(storage=storage, version="agent-v1")
    def agent(ctx, question):
        history = []
        for turn in range(1, MAX_TURNS + 1):
            action = ctx.step("think", lambda: model.think(history))
            if "answer" in action:
                return {"answer": action["answer"], "turns": turn}
            act = partial(getattr(model, action["tool"]), action["input"])
            observation = ctx.step(action["tool"], act)
            history.append({"action": action, "observation": observation})
        raise RuntimeError(f"no answer after {MAX_TURNS} turns")

    return agent


def worker(directory: Path, run_id: str, crash_in_turn: int | None) -> None:
    """One invocation of the run, in a process of its own, as a job runner would make it."""
    model = Model(directory / CALLS_LOG, crash_in_turn)
    result = make_agent(LocalStorage(directory), model).start(QUESTION, run_id=run_id)
    print(json.dumps({"status": result.status, "result": result.result}))


def invoke(directory: Path, run_id: str, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, __file__, "--worker", "--dir", str(directory), "--run-id", run_id]
    return subprocess.run([*command, *options], capture_output=True, text=True, timeout=120)


def story(directory: Path) -> None:
    storage = LocalStorage(directory)
    run_id = "ask-1"
    print(f"Q: {QUESTION}\n")

    killed = invoke(directory, run_id, "--crash-in-turn", "3")
    journal = read_journal(storage, run_id)
    steps = [e["stepId"] for e in journal.entries if e["type"] == "step"]
    print(f"worker 1: SIGKILLed while the model thought about turn 3 (exit {killed.returncode})")
    print(f"          journaled: {', '.join(steps)}; status {journal.status().status}")

    done = invoke(directory, run_id)
    if done.returncode != 0:
        sys.exit(f"the second worker failed:\n{done.stderr}")
    outcome = json.loads(done.stdout)
    journal = read_journal(storage, run_id)
    replayed = [e["stepId"] for e in journal.entries if e["type"] == "step" and e["session"] == 1]
    live = [e["stepId"] for e in journal.entries if e["type"] == "step" and e["session"] == 2]
    print("worker 2: re-invoked the run, as a queue redelivery would")
    print(f"          replayed from the journal: {', '.join(replayed)}")
    print(f"          ran live: {', '.join(live)}")
    print(f"          {outcome['status']}: {outcome['result']['answer']}")

    calls = Counter((directory / CALLS_LOG).read_text().splitlines())
    print("\ncalls made: " + ", ".join(f"{call} x{n}" for call, n in sorted(calls.items())))
    print("(model turn-3 twice: the killed worker never got its answer, so none was journaled)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="keep the journals here (default: a temporary directory)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-id", help=argparse.SUPPRESS)
    parser.add_argument("--crash-in-turn", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.dir), args.run_id, args.crash_in_turn)
        return
    directory = Path(args.dir or tempfile.mkdtemp(prefix="kassette-agent-"))
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ask-1.jsonl").exists():
        sys.exit(f"{directory} already holds run ask-1: choose another --dir")
    try:
        story(directory)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
