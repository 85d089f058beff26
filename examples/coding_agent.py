"""A coding agent that branches speculatively with `fork()`: keep the recorded plan, try several
implementations, and backtrack to planning when none passes the tests.

    python examples/coding_agent.py

The first run plans (an expensive model call), implements the plan's first approach and runs
the tests. Each other approach is a fork at step `implement`: the plan is replayed from the
journal, not asked for again. When every approach fails, a fork at step `plan` asks the model
to plan again with what was learned, and that branch passes. The model and the test runner are
scripted and offline; every call is counted, and `kassette tree` draws the branches.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter

from kassette import LocalStorage, kassette

TASK = "parse durations like '1h30m' into seconds"
calls: Counter[str] = Counter()


def plan(task, lessons):
    calls["plan"] += 1
    if not lessons:
        return {"approaches": ["regex", "split-on-letters"]}
    return {"approaches": ["tokenizer"], "because": f"{len(lessons)} approaches failed"}


def implement(task, approach):
    calls["implement"] += 1
    return f"def parse_duration(text):  # {approach}\n    ..."


def run_tests(code):
    calls["run-tests"] += 1
    passed = "tokenizer" in code  # the scripted test suite: only the tokenizer handles '1h30m'
    return {"passed": passed, "failures": 0 if passed else 3}


def make_agent(storage, approach_index=0, lessons=()):
    """The agent; which approach it implements and what it learned are the caller's choice."""

    @kassette(storage=storage, version="coder-v1")
    def code(ctx, task):
        chosen = ctx.step("plan", lambda: plan(task, list(lessons)))
        approach = chosen["approaches"][approach_index]
        source = ctx.step("implement", lambda: implement(task, approach))
        tests = ctx.step("run-tests", lambda: run_tests(source))
        return {"approach": approach, "plan": chosen, **tests}

    return code


def main():
    with tempfile.TemporaryDirectory(prefix="kassette-coder-") as directory:
        storage = LocalStorage(directory)
        first = make_agent(storage).start(TASK, run_id="task-1")
        print(f"task-1            {first.result['approach']:<17} passed={first.result['passed']}")
        tried = [first.result]
        approaches = first.result["plan"]["approaches"]
        for index in range(1, len(approaches)):
            branch = make_agent(storage, approach_index=index)
            r = branch.fork("task-1", step="implement", new_run_id=f"task-1-alt-{index}")
            tried.append(r.result)
            print(f"{r.run_id:<17} {r.result['approach']:<17} passed={r.result['passed']}")
        if not any(result["passed"] for result in tried):
            lessons = [result["approach"] for result in tried]
            replanner = make_agent(storage, lessons=lessons)
            r = replanner.fork("task-1", step="plan", new_run_id="task-1-replan")
            print(f"{r.run_id:<17} {r.result['approach']:<17} passed={r.result['passed']}")
        print("calls             " + ", ".join(f"{k} x{n}" for k, n in sorted(calls.items())))
        tree = subprocess.run(
            [sys.executable, "-m", "kassette", "--storage", f"file:{directory}", "tree"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        print(tree.stdout, end="")


if __name__ == "__main__":
    main()
