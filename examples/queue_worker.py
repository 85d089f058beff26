"""Queue workers as kassette's dispatcher: SQS delivers run ids, journals live in S3, and queue
redelivery is the crash detector.

    python examples/queue_worker.py

Offline: moto's server on 127.0.0.1 plays SQS and S3 (see _local_aws.py). A message names a
run (`{"run_id", "input"}` to start or retry it, `{"run_id", "event", "value"}` to resume it).
A worker receives it, invokes the run through `dispatch` (examples/dispatcher.py; the table is
in docs/errors-and-dispatching.md, the wiring in docs/wiring-dispatcher.md) and acks it
(deletes it), redelivers it (makes it visible again after a second) or dead-letters it (moves
it to the dead-letter queue).

worker-1 is SIGKILLed in the middle of a run. It never deletes the message, so SQS delivers it
again when its visibility timeout (2 s) expires; worker-2 receives it, replays the journaled
steps from S3 and finishes. A resume that arrives before the run reached its suspend is
redelivered; a failed run is acked; a body that is not a message, and a resume for a run that
does not exist, are dead-lettered with a log line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from dispatcher import DEAD_LETTER, REDELIVER, dispatch

from kassette import kassette, open_storage
from kassette.core import run_status

BUCKET, PREFIX = "kassette-runs", "research"
VISIBILITY_TIMEOUT = 2  # seconds a received message stays hidden; the crash detector's delay
WORKER_SECONDS = 60  # a worker stops after this long, or as soon as the queue is empty


def make_workflow(storage, calls_log, crash_during=None):
    def tool(name, value):
        with open(calls_log, "a") as log:
            log.write(f"{name}\n")
        if name == crash_during:  # the machine dies in the middle of this step
            os.kill(os.getpid(), signal.SIGKILL)
        return value

    @kassette(storage=storage, version="research-v1")
    def research(ctx, request):
        if not request["topic"]:
            raise ValueError("nothing to research: the topic is empty")
        sources = ctx.step("search", lambda: tool("search", [f"{request['topic']} review"]))
        notes = ctx.step("read", lambda: tool("read", f"notes on {len(sources)} source(s)"))
        summary = ctx.step("summarize", lambda: tool("summarize", f"summary of {notes}"))
        approval = ctx.suspend("publish-approval", reason="an editor signs off")
        return ctx.step("publish", lambda: tool("publish", f"{summary}, edited by {approval}"))

    return research


def handle(sqs, queues, workflow, message, log):
    """Invoke the run a message names, then ack, redeliver or dead-letter the message."""
    queue, dead_letters = queues
    receipt = message["ReceiptHandle"]
    delivery = message["Attributes"]["ApproximateReceiveCount"]
    try:
        body = json.loads(message["Body"])
        if not isinstance(body, dict) or not isinstance(body.get("run_id"), str):
            raise ValueError('expected a JSON object with a string "run_id"')
    except ValueError as exc:
        label, decision = "(malformed)", DEAD_LETTER
        why = f"malformed message body {message['Body']!r}: {exc}"
    else:
        label = f"{body.get('event') or 'start'} {body['run_id']}"
        decision, why = dispatch(workflow, body)
    log(f"delivery {delivery}  {label:<25} -> {decision:<11} {why}")
    if decision == REDELIVER:  # visible again in a second; a max receive count would bound it
        sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=receipt, VisibilityTimeout=1)
        return
    if decision == DEAD_LETTER:
        reason = {"DataType": "String", "StringValue": f"{label}: {why}"}
        attributes = {"reason": reason}
        sqs.send_message(
            QueueUrl=dead_letters, MessageBody=message["Body"], MessageAttributes=attributes
        )
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=receipt)  # ack: never delivered again


def work(name, queues, workflow):
    """Receive messages one at a time until the queue is empty (or WORKER_SECONDS pass)."""
    import boto3

    sqs = boto3.client("sqs")

    def log(line):
        print(f"{name}  {line}", flush=True)

    deadline = time.monotonic() + WORKER_SECONDS
    while time.monotonic() < deadline:
        received = sqs.receive_message(
            QueueUrl=queues[0],
            MaxNumberOfMessages=1,
            WaitTimeSeconds=1,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        ).get("Messages", [])
        if received:
            handle(sqs, queues, workflow, received[0], log)
        elif queue_is_empty(sqs, queues[0]):
            return


def queue_is_empty(sqs, queue):
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    counts = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=names)["Attributes"]
    return all(counts[name] == "0" for name in names)


def run_worker(name, queues, calls_log, crash_during=None):
    """Start a worker process and wait for it to stop (or to be killed); return its exit code."""
    command = [sys.executable, __file__, "--worker", name, "--queues", *queues]
    command += ["--calls-log", str(calls_log)]
    if crash_during:
        command += ["--crash-during", crash_during]
    sys.stdout.flush()  # the worker writes to the same stdout
    return subprocess.run(command, timeout=WORKER_SECONDS + 60).returncode


def story(calls_log):
    import boto3

    sqs = boto3.client("sqs")
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    timeout = {"VisibilityTimeout": str(VISIBILITY_TIMEOUT)}
    queue = sqs.create_queue(QueueName="research-runs", Attributes=timeout)["QueueUrl"]
    dead_letters = sqs.create_queue(QueueName="research-runs-dead-letter")["QueueUrl"]
    queues = (queue, dead_letters)

    def send(body):
        sqs.send_message(QueueUrl=queue, MessageBody=body)

    send(json.dumps({"run_id": "report-1", "input": {"topic": "solid-state batteries"}}))
    code = run_worker("worker-1", queues, calls_log, crash_during="summarize")
    print(f"parent    worker-1 exited with {code}: SIGKILLed during summarize, nothing acked")

    send(json.dumps({"run_id": "report-1", "event": "publish-approval", "value": "ed"}))
    send(json.dumps({"run_id": "report-2", "input": {"topic": ""}}))
    send("{'run_id': 'report-3'")  # not JSON
    send(json.dumps({"run_id": "report-9", "event": "publish-approval", "value": "ed"}))
    code = run_worker("worker-2", queues, calls_log)
    print(f"parent    worker-2 exited with {code}: the queue is empty")

    storage = open_storage(f"s3://{BUCKET}/{PREFIX}")
    for run_id in ("report-1", "report-2"):
        status = run_status(storage, run_id)
        outcome = status.result if status.error is None else status.error.to_dict()
        print(f"parent    {run_id}: {status.status} {json.dumps(outcome)}")
    print(f"parent    report-9 was never created: {storage.read('report-9') is None}")
    parked = sqs.receive_message(
        QueueUrl=dead_letters, MaxNumberOfMessages=10, MessageAttributeNames=["reason"]
    ).get("Messages", [])
    print(f"parent    dead-letter queue: {len(parked)} message(s)")
    for message in sorted(parked, key=lambda m: m["MessageAttributes"]["reason"]["StringValue"]):
        print(f"          {message['MessageAttributes']['reason']['StringValue']}")
    calls = Counter(Path(calls_log).read_text().splitlines())
    print("parent    tool calls: " + ", ".join(f"{k} x{n}" for k, n in sorted(calls.items())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--queues", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--calls-log", help=argparse.SUPPRESS)
    parser.add_argument("--crash-during", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        storage = open_storage(f"s3://{BUCKET}/{PREFIX}")
        work(args.worker, args.queues, make_workflow(storage, args.calls_log, args.crash_during))
        return

    import _local_aws

    server = _local_aws.start()
    try:
        with tempfile.TemporaryDirectory(prefix="kassette-queue-") as directory:
            story(Path(directory) / "calls.log")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
