"""A deploy assistant driven by webhooks: runs wait for chat replies, an HTTP server resumes them.

    python examples/deploy_assistant.py                   # journals in a temporary directory
    python examples/deploy_assistant.py --dir .kassette   # keep them

Each deploy request is a run. When the request does not say which version, the assistant asks
in the chat and suspends until the reply; a production deploy then suspends again for an
approval. No process waits meanwhile: replies arrive as webhooks (`POST /webhook` with
`{"run_id", "event", "value"}`) on a small HTTP server on 127.0.0.1, which resumes the run the
webhook names. After the approval the assistant dispatches the deploy job and `ctx.sleep`s
while it takes effect, then verifies it. A webhook for a run that does not exist gets 404 and
writes nothing; one for a run that has ended gets 409. The model, the chat and the CI system
are scripted and offline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kassette import (
    EventNotPendingError,
    KassetteError,
    LocalStorage,
    RunNotFoundError,
    TerminalRunError,
    kassette,
)

ROLLOUT_SECONDS = 0.2  # how long the scripted deploy job takes to roll out


class World:
    """The assistant's model, chat and CI system; every call is recorded in `calls`."""

    def __init__(self):
        self.calls = []
        self.jobs = {}

    def understand(self, text):  # stands in for a model call that extracts the request
        self.calls.append(("model", text))
        words = text.split()
        version = next((w for w in words if w[0].isdigit()), None)
        return {"service": words[1], "version": version, "production": "production" in words}

    def post(self, run_id, message):
        self.calls.append(("chat", run_id, message))
        return len(self.calls)

    def dispatch(self, service, version):
        self.calls.append(("ci", service, version))
        job = f"job-{len(self.jobs) + 1}"
        self.jobs[job] = f"{service} {version} live"
        return job


def make_assistant(storage, world):
    @kassette(storage=storage, version="deploy-v1")
    def deploy(ctx, request):
        plan = ctx.step("understand", lambda: world.understand(request["text"]))
        version = plan["version"]
        if version is None:
            ctx.step("ask", lambda: world.post(ctx.run_id, f"Which version of {plan['service']}?"))
            version = ctx.suspend("clarify", timeout=86400, reason="version")["text"]
        if plan["production"]:
            ask = f"Deploy {plan['service']} {version} to production?"
            ctx.step("ask-approval", lambda: world.post(ctx.run_id, ask))
            approval = ctx.suspend("prod-approval", timeout=3600, reason=ask)
            if not approval["approved"]:
                return {"deployed": False, "rejected by": approval["by"]}
        job = ctx.step("dispatch", lambda: world.dispatch(plan["service"], version))
        ctx.sleep(ROLLOUT_SECONDS)  # durable: a crash here waits only for what is left
        state = ctx.step("verify", lambda: world.jobs[job])
        return {"deployed": True, "job": job, "state": state}

    return deploy


def webhook_server(deploy):
    """An HTTP server on a free loopback port that resumes the run each webhook names."""

    class Webhook(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass  # the story prints its own lines

        def do_POST(self):
            if self.path != "/webhook":
                return self.answer(404, {"error": f"no route {self.path}"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                run_id, event, value = body["run_id"], body["event"], body.get("value")
            except (ValueError, KeyError, TypeError) as exc:
                return self.answer(400, {"error": f"malformed webhook: {exc}"})
            try:
                result = deploy.resume(run_id, event, value)
            except RunNotFoundError as exc:  # raised before anything is written
                return self.answer(404, {"error": str(exc)})
            except (EventNotPendingError, TerminalRunError) as exc:
                return self.answer(409, {"error": str(exc)})
            except KassetteError as exc:  # a bad run id or event name, a replay problem
                return self.answer(400, {"error": str(exc)})
            return self.answer(200, {"status": result.status, "events": list(result.events)})

        def answer(self, status, payload):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def send(url, run_id, event, value):
    """POST a webhook as the chat system would; return the HTTP status and the JSON answer."""
    data = json.dumps({"run_id": run_id, "event": event, "value": value}).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def story(directory):
    world = World()
    deploy = make_assistant(LocalStorage(directory), world)
    server = webhook_server(deploy)
    url = f"http://127.0.0.1:{server.server_address[1]}/webhook"
    try:
        for run_id, text in [
            ("deploy-1", "ship checkout to production"),
            ("deploy-2", "ship search to production"),
        ]:
            r = deploy.start({"text": text}, run_id=run_id)
            print(f"start   {run_id} {text!r}: {r.status}, waiting for {r.event}")
        for run_id, event, value in [
            ("deploy-2", "clarify", {"text": "2.4.1"}),
            ("deploy-1", "clarify", {"text": "7.0.3"}),
            ("deploy-9", "clarify", {"text": "1.0.0"}),
            ("deploy-1", "prod-approval", {"approved": True, "by": "sam"}),
            ("deploy-2", "prod-approval", {"approved": False, "by": "kim"}),
            ("deploy-1", "prod-approval", {"approved": True, "by": "sam"}),  # a chat retry
        ]:
            status, answer = send(url, run_id, event, value)
            said = answer.get("error") or f"{answer['status']} {' '.join(answer['events'])}"
            print(f"webhook {run_id} {event} {json.dumps(value)} -> {status} {said.strip()}")
    finally:
        server.shutdown()
        server.server_close()
    for run_id in ("deploy-1", "deploy-2"):
        status = deploy.status(run_id)
        print(f"result  {run_id} {status.status}: {json.dumps(status.result)}")
    print(f"CI jobs dispatched: {[c[1:] for c in world.calls if c[0] == 'ci']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="keep the journals here (default: a temporary directory)")
    args = parser.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="kassette-deploy-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        story(directory)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
