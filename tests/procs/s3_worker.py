"""A worker process for tests/storage/test_s3.py: one invocation of a run on S3, then exit.

Usage: `python s3_worker.py STORAGE_URL RUN_ID VERB [ARGS...]`, with boto3's environment
(`AWS_ENDPOINT_URL`, credentials) pointing at the test server. Verbs:

- `start TOPIC`            start the review workflow (it suspends for "approve");
- `resume VALUE`           deliver VALUE for "approve" and continue;
- `fork STEP NEW_RUN_ID`   fork the run before step STEP into NEW_RUN_ID and continue it;
- `hold FIRST SECOND`      open a session, record step FIRST, print `{"ready": SESSION}`, wait
                           for a line on stdin, then try to record step SECOND.

Each prints one JSON line on stdout. Step results carry the pid that ran them, so a test can
tell which process wrote what.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from kassette import Context, FencedError, kassette, open_run, open_storage


def review(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.step("plan", lambda: {"text": f"plan for {input['topic']}", "pid": os.getpid()})
    approval = ctx.suspend("approve", reason="a human signs off the plan")
    draft = ctx.step(
        "draft", lambda: {"text": f"{plan['text']}, approved by {approval}", "pid": os.getpid()}
    )
    return {"draft": draft["text"], "plan_pid": plan["pid"], "draft_pid": draft["pid"]}


def main(url: str, run_id: str, verb: str, *args: str) -> dict[str, Any]:
    workflow = kassette(review, storage=url)
    if verb == "start":
        result = workflow.start({"topic": args[0]}, run_id=run_id)
    elif verb == "resume":
        result = workflow.resume(run_id, "approve", args[0])
    elif verb == "fork":
        result = workflow.fork(run_id, step=args[0], new_run_id=args[1])
    elif verb == "hold":
        return hold(url, run_id, *args)
    else:
        raise SystemExit(f"unknown verb {verb!r}")
    return {"runId": result.run_id, "status": result.status, "result": result.result}


def hold(url: str, run_id: str, first: str, second: str) -> dict[str, Any]:
    with open_run(open_storage(url), run_id) as run:
        run.record(first, os.getpid)
        print(json.dumps({"ready": run.session}), flush=True)
        sys.stdin.readline()
        try:
            run.record(second, os.getpid)
        except FencedError as exc:
            return {"session": run.session, "outcome": "fenced", "offset": exc.offset}
        return {"session": run.session, "outcome": "appended"}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])), flush=True)
