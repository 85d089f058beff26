"""The kassette demo: an incident-triage agent that is killed, retried, approved and forked.

    python examples/demo.py                   # journals in a temporary directory
    python examples/demo.py --dir .kassette   # keep them for `python -m kassette list`

The agent's "LLM" and tools are scripted and offline. Every call they make is appended to a
calls log next to the journals, so the story printed is measured, not asserted: a step that
kassette answers from the journal leaves no new line in that log. Each invocation runs in a
process of its own (`--worker`), the way a queue or job runner would invoke it.
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
from pathlib import Path

from kassette import LocalStorage, kassette
from kassette.core import read_journal

VERSION = "triage-v1"
TICKET = {"id": 4821, "title": "checkout returns 500 after the 02:00 deploy"}
APPROVAL = {"approved": True, "by": "sam"}
STRATEGIES = {"rollback": "roll back the 02:00 deploy", "feature-flag": "switch off the new cart"}
CALLS_LOG = ".demo-calls.log"


# -- the agent: a plain workflow whose model and tools are scripted ----------------------------


class World:
    """The agent's model and tools. A call is logged when it is made, like a paid request."""

    def __init__(self, calls_log: Path, run_id: str, crash_during: str | None) -> None:
        self.calls_log = calls_log
        self.run_id = run_id
        self.crash_during = crash_during

    def call(self, step, answer):
        with open(self.calls_log, "a") as log:
            log.write(f"{self.run_id} {step}\n")
        if step == self.crash_during:  # the machine dies while the model is still answering
            os.kill(os.getpid(), signal.SIGKILL)
        return answer


def make_workflow(storage, world, strategy=None):
    """The triage agent. `strategy` steers the planner: a fork uses it to try another idea."""

    def plan():
        if strategy is None:
            return {"strategy": "hotfix", "action": "patch the cart query", "risky": True}
        return {"strategy": strategy, "action": STRATEGIES[strategy], "risky": False}

    @kassette(storage=storage, version=VERSION)
    def triage(ctx, ticket):
        facts = ctx.step("read-ticket", lambda: world.call("read-ticket", {**ticket, "500s": 1312}))
        ctx.step("analyze", lambda: world.call("analyze", "cart id is null since the deploy"))
        chosen = ctx.step("plan", lambda: world.call("plan", plan()))
        patch = ctx.step("draft-patch", lambda: world.call("draft-patch", chosen["action"]))
        ctx.step("run-tests", lambda: world.call("run-tests", {"passed": 48, "failed": 0}))
        if chosen["risky"]:
            approval = ctx.suspend("human-approval", reason=f"{chosen['strategy']} touches prod")
            if not approval["approved"]:
                return {"outcome": "rejected"}
        ctx.step("apply-fix", lambda: world.call("apply-fix", "deployed"))
        return {"outcome": "resolved", "fix": patch, "500s before": facts["500s"]}

    return triage


def worker(args):
    """One invocation of a run, in a process of its own; prints its RunResult as JSON."""
    run_id = args.new_run_id or args.run_id
    world = World(Path(args.dir) / CALLS_LOG, run_id, args.crash_during)
    triage = make_workflow(LocalStorage(args.dir), world, args.strategy)
    if args.worker == "start":
        result = triage.start(TICKET, run_id=args.run_id)
    elif args.worker == "resume":
        result = triage.resume(args.run_id, "human-approval", APPROVAL)
    else:
        result = triage.fork(args.run_id, step="plan", new_run_id=args.new_run_id)
    print(json.dumps({"status": result.status, "result": result.result}))


# -- the story: invoke workers, then tell what the journals and the calls log show -------------


def say(label, *lines):
    for number, line in enumerate(lines):
        print(f"{label if number == 0 else '':<12}{line}")


class Demo:
    def __init__(self, directory):
        self.dir = directory
        self.storage = LocalStorage(directory)
        free = (f"INC-{n}" for n in range(TICKET["id"], TICKET["id"] + 1000))
        self.run_id = next(r for r in free if self.storage.read(r) is None)

    def calls(self):
        log = self.dir / CALLS_LOG
        lines = log.read_text().splitlines() if log.exists() else []
        runs = (line.split() for line in lines)  # count this run and its forks, INC-n-*
        return Counter(step for run, step in runs if run.split("-")[:2] == self.run_id.split("-"))

    def steps(self, run_id):
        journal = read_journal(self.storage, run_id)
        return [entry["stepId"] for entry in journal.entries if entry["type"] == "step"]

    def invoke(self, action, *options, run_id=None):
        """Run one worker; return its exit code, its outcome, the steps replayed and run live.

        A step ran live when its call count went up; a journaled step whose count did not move
        was answered from the journal.
        """
        before = self.calls()
        command = [sys.executable, __file__, "--worker", action, "--dir", str(self.dir)]
        command += ["--run-id", self.run_id, *options]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode not in (0, -signal.SIGKILL):
            sys.exit(f"the {action} worker failed:\n{done.stderr}")
        after = self.calls()
        live = [step for step in after if after[step] > before[step]]
        replayed = [step for step in self.steps(run_id or self.run_id) if step not in live]
        outcome = json.loads(done.stdout) if done.returncode == 0 else None
        return done.returncode, outcome, replayed, live

    def run(self):
        run = self.run_id
        print(f"kassette demo: a triage agent works on {run}; journals in {self.dir}/\n")

        code, _, _, live = self.invoke("start", "--crash-during", "draft-patch")
        say(
            "1. crash",
            f"a worker process starts {run} and calls {', '.join(live)};",
            f"it is SIGKILLed while the model is still answering draft-patch (exit {code}).",
            f"journal: steps {', '.join(self.steps(run))}; status "
            f"{read_journal(self.storage, run).status().status}",
        )

        _, outcome, replayed, live = self.invoke("start")
        say(
            "2. retry",
            f"a new process re-invokes {run}, as a queue redelivery would.",
            f"replayed from the journal, not called again: {', '.join(replayed)}",
            f"ran live: {', '.join(live)}; the fix is risky, so the run is now",
            f"{outcome['status']}, waiting for human-approval, and no process is running",
        )

        _, outcome, replayed, live = self.invoke("resume")
        counts = self.calls()
        say(
            "3. resume",
            f"another process delivers {json.dumps(APPROVAL)}: {len(replayed)} steps replayed,",
            f"ran live: {', '.join(live)}; {outcome['status']}, fix: {outcome['result']['fix']}",
            "calls made: " + ", ".join(f"{step} {n}" for step, n in counts.items()),
            "(draft-patch twice: the killed process never got its answer, so none was journaled)",
        )

        forks = []
        for strategy in STRATEGIES:
            child = f"{run}-{strategy}"
            options = ("--strategy", strategy, "--new-run-id", child)
            _, outcome, replayed, live = self.invoke("fork", *options, run_id=child)
            forks.append(f"{child:<22} {outcome['status']}: {outcome['result']['fix']}")
        total = self.calls()
        kept = [step for step in replayed if total[step] == counts[step]]
        say(
            "4. fork",
            f"{run} is forked at step plan to try two other strategies; each fork",
            f"replays {', '.join(kept)} and runs {', '.join(live)} live:",
            *forks,
            f"{' and '.join(kept)} were called once in all, for the three runs",
        )

        command = ["python", "-m", "kassette", "--storage", f"file:{self.dir}", "tree", run]
        tree = subprocess.run(
            [sys.executable, *command[1:]], capture_output=True, text=True, timeout=120, check=True
        )
        say("5. lineage", f"$ {' '.join(command)}", *tree.stdout.rstrip().splitlines())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="keep the journals here (default: a temporary directory)")
    parser.add_argument("--worker", choices=["start", "resume", "fork"], help=argparse.SUPPRESS)
    parser.add_argument("--run-id", help=argparse.SUPPRESS)
    parser.add_argument("--new-run-id", help=argparse.SUPPRESS)
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), help=argparse.SUPPRESS)
    parser.add_argument("--crash-during", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    elif args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
        Demo(Path(args.dir)).run()
        print(f"\nLook around: python -m kassette --storage file:{args.dir} list")
    else:
        directory = Path(tempfile.mkdtemp(prefix="kassette-demo-"))
        try:
            Demo(directory).run()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print(
            "\nThose journals were temporary: `python examples/demo.py --dir .kassette` keeps them."
        )


if __name__ == "__main__":
    main()
