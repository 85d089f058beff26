"""Model calls through the OpenAI SDK, recorded and replayed: a crash costs no second request.

    python examples/openai_agent.py                        # a fake model on 127.0.0.1
    python examples/openai_agent.py --base-url URL --model NAME   # a real provider (OPENAI_API_KEY)

Needs the openai extra: pip install "kassette[openai]". The agent plans with one
`chat.completions.create` call and streams a draft with a second one; both go through
`journaled(client, ctx)`, so each is a step. The first worker process is SIGKILLed after the
draft; a second process re-invokes the run, which replays both calls from the journal (the
stream chunk by chunk) and makes no request. By default the model is
`kassette.testing.fake_model_server()`, a local server on 127.0.0.1 that speaks the OpenAI API
and counts the requests it gets.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

from openai import OpenAI

from kassette import LocalStorage, kassette
from kassette.core import read_journal
from kassette.integrations.openai import journaled
from kassette.testing import fake_model_server


def make_agent(storage, client, model, crash_after_draft=False):
    @kassette(storage=storage, version="writer-v1")
    def writer(ctx, topic):
        llm = journaled(client, ctx)
        plan = llm.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Plan a note on {topic}."}]
        )
        stream = llm.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Write it: {plan.choices[0].message.content}"}],
            stream=True,
        )
        draft = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        if crash_after_draft:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"plan": plan.choices[0].message.content, "draft": draft}

    return writer


def worker(args):
    client = OpenAI(base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "none"))
    writer = make_agent(LocalStorage(args.dir), client, args.model, args.crash_after_draft)
    result = writer.start("durable agents", run_id="note-1")
    print(json.dumps({"status": result.status, "result": result.result}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible API (default: a fake one)")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--crash-after-draft", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dir:
        return worker(args)
    server = None if args.base_url else fake_model_server()
    base_url = args.base_url or server.openai_base_url
    with tempfile.TemporaryDirectory(prefix="kassette-openai-") as directory:
        command = [sys.executable, __file__, "--dir", directory, "--base-url", base_url]
        command += ["--model", args.model]
        killed = subprocess.run([*command, "--crash-after-draft"], timeout=300)
        print(f"worker 1: SIGKILLed after the draft (exit {killed.returncode})")
        if server:
            print(f"          the model answered {server.request_count} requests")
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
        outcome = json.loads(done.stdout)
        journal = read_journal(LocalStorage(directory), "note-1")
        steps = [
            f"{e['stepId']} (session {e['session']})" for e in journal.entries if "stepId" in e
        ]
        print(f"worker 2: {outcome['status']}; journaled: {', '.join(steps)}")
        if server:
            print(f"          the model answered {server.request_count} requests in all")
        for name in ("plan", "draft"):  # the first paragraph of each
            print(f"{name + ':':6} {outcome['result'][name].strip().split(chr(10))[0]}")
    if server:
        server.close()


if __name__ == "__main__":
    main()
