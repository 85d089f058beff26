"""A Lambda-style handler that journals to S3: separate invocations continue the same run.

    python examples/serverless_handler.py

`handler(event, context)` is what a function platform calls. It keeps nothing between
invocations: the run lives in its journal on S3 (`KASSETTE_STORAGE=s3://bucket/prefix`), so
any invocation, on any machine, can continue it. Here two invocations run in two separate
processes, as two cold starts would: the first classifies an expense claim and suspends for a
manager's approval; the second delivers the approval, replays the first one's steps from S3
and files the claim. Step results carry the pid of the process that ran them.

Offline: moto's server on 127.0.0.1 plays S3 (see _local_aws.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kassette import kassette

STORAGE = "s3://kassette-functions/expenses"


def pid_and(value):
    return {"pid": os.getpid(), "value": value}


@kassette(storage=os.environ.get("KASSETTE_STORAGE", STORAGE), version="expenses-v1")
def expense_claim(ctx, claim):
    receipt = ctx.step("extract", lambda: pid_and({"total": claim["total"], "vendor": "Rail"}))
    category = ctx.step("classify", lambda: pid_and("travel"))
    approval = ctx.suspend("manager-approval", timeout=7 * 86400, reason="claims need a manager")
    filed = ctx.step("file", lambda: pid_and(f"filed by {approval['by']}"))
    return {
        "total": receipt["value"]["total"],
        "category": category["value"],
        "filed": filed["value"],
        "pids": {"extract": receipt["pid"], "classify": category["pid"], "file": filed["pid"]},
    }


def handler(event, context=None):
    """The function's entry point: start (or retry) a run, or deliver an event to it."""
    if "event" in event:
        result = expense_claim.resume(event["run_id"], event["event"], event.get("value"))
    else:
        result = expense_claim.start(event["claim"], run_id=event["run_id"])
    return {"status": result.status, "events": list(result.events), "result": result.result}


def invoke(event):
    """One invocation in a fresh process, as a function platform would make it."""
    done = subprocess.run(
        [sys.executable, __file__, "--invoke", json.dumps(event)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def main():
    import _local_aws
    import boto3

    server = _local_aws.start()
    try:
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="kassette-functions")
        first = invoke({"run_id": "claim-77", "claim": {"total": 182.4}})
        print(f"invocation 1, pid {first['pid']}: {first['status']}, waiting for {first['events']}")
        approval = {"run_id": "claim-77", "event": "manager-approval", "value": {"by": "noor"}}
        second = invoke(approval)
        print(f"invocation 2, pid {second['pid']}: {second['status']}")
        result = second["result"]
        print(f"  result: {result['total']} {result['category']}, {result['filed']}")
        ran = ", ".join(f"{step} in pid {pid}" for step, pid in result["pids"].items())
        print(f"  steps: {ran}")
        key = "expenses/claim-77/journal.jsonl"
        lines = s3.get_object(Bucket="kassette-functions", Key=key)["Body"].read().splitlines()
        sessions = sorted({json.loads(line)["session"] for line in lines})
        print(f"  journal: s3://kassette-functions/{key}: {len(lines)} entries")
        print(f"  sessions: {sessions} (one per invocation)")
    finally:
        server.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--invoke"]:  # a function invocation (the platform's side)
        print(json.dumps({"pid": os.getpid(), **handler(json.loads(sys.argv[2]))}))
    else:
        main()
