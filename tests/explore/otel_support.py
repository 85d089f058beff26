"""A store for the OpenTelemetry tests: every shape issue 22 names, made by real workflows.

resumed     plan, a parallel block of two branches, a wait for "review" resumed a minute
            later in a second session, complete
failed      plan, then the workflow raises
source      plan, then two model calls (draft, review) through the real OpenAI SDK
            against the local model server, complete
edited      a fork of `source` at the draft, its answer edited with text
fan.0-4     a 5-branch fan-out of `source` at the draft, params temperature 0.0-0.8
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from openai import OpenAI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from kassette import Storage, kassette
from kassette import explore as kx
from kassette.integrations.openai import journaled
from kassette.testing import FakeClock, FakeModelServer

MODEL = "gpt-4o-mini"
DRAFT = "chat.completions.create"  # the draft's step id: the first model call
RUNS = ["resumed", "failed", "source", "edited", *[f"fan.{i}" for i in range(5)]]


def populate(storage: Storage, server: FakeModelServer, start: float | None = None) -> None:
    clock = FakeClock() if start is None else FakeClock(start)
    with OpenAI(api_key="unused", base_url=server.openai_base_url, max_retries=0) as client:

        @kassette(storage=storage, clock=clock, version="otel-v1")
        def agent(ctx: Any, task: dict[str, Any]) -> Any:
            ctx.step("plan", lambda: {"goal": task["goal"]})
            clock.advance(1)
            if task.get("fail"):
                raise RuntimeError("the plan cannot be done")
            if task.get("review"):
                ctx.parallel(
                    {
                        "left": lambda branch: branch.step("fetch", lambda: "L"),
                        "right": lambda branch: branch.step("fetch", lambda: "R"),
                    },
                    name="gather",
                )
                return ctx.suspend("review", reason="please check")
            model = journaled(client, ctx)
            temperature = ctx.params.get("temperature", 0.7)
            draft = model.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"Draft: {task['goal']}"}],
                temperature=temperature,
            )
            text = draft.choices[0].message.content or ""
            review = model.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Review: {text}"}]
            )
            return {"draft": text, "review": review.choices[0].message.content}

        agent.start({"goal": "parse", "review": True}, run_id="resumed")
        clock.advance(60)
        agent.resume("resumed", "review", {"approved": True})
        agent.start({"goal": "parse", "fail": True}, run_id="failed")
        agent.start({"goal": "write"}, run_id="source")
        agent.fork("source", step=DRAFT, new_run_id="edited", result="an edited draft")
        kx.fan_out(
            agent,
            "source",
            step=DRAFT,
            params=[{"temperature": i / 5} for i in range(5)],
            prefix="fan",
            progress=False,
            max_workers=1,
        )


def attrs(item: Any) -> dict[str, Any]:
    """An OTLP protobuf span's (or link's, or event's) attributes as a dict."""
    found: dict[str, Any] = {}
    for kv in item.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        if kind == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        found[kv.key] = value
    return found


def parse_line(text: str) -> ExportTraceServiceRequest:
    """`json_format.Parse` of an OTLP/JSON line (refusing unknown fields), its hex ids turned
    into protobuf JSON's base64 first."""
    found = json.loads(text)
    for resource in found["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope.get("spans", []):
                for item in (span, *span.get("links", [])):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            raw = bytes.fromhex(item[key])
                            assert len(raw) in (8, 16), item[key]
                            item[key] = base64.b64encode(raw).decode()
    return json_format.Parse(json.dumps(found), ExportTraceServiceRequest())
