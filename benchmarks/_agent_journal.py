"""A researcher's journal for the load benchmarks: one run of an agent whose 14 chat
completions go through the OpenAI integration (`journaled(client, ctx)`, so each records its
request), with a tool step after each, against `kassette.testing.fake_model_server()` on
127.0.0.1. The conversation grows with each turn, as an agent's does, so the later calls
journal longer requests. Needs the openai extra."""

from __future__ import annotations

import json
from typing import Any

TURNS = 14
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def agent_journal() -> bytes:
    """The journal of one run: a start, 14 model calls and 14 tool steps, a complete."""
    from openai import OpenAI

    from kassette import MemoryStorage, kassette
    from kassette.integrations.openai import journaled
    from kassette.testing import fake_model_server

    storage = MemoryStorage()
    with fake_model_server() as server:
        client = OpenAI(base_url=server.openai_base_url, api_key="unused", max_retries=0)

        @kassette(storage=storage, version="agent-v1")
        def agent(ctx: Any, task: str) -> dict[str, Any]:
            llm = journaled(client, ctx)
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "You fix flaky tests. Use the tools you have."},
                {"role": "user", "content": task},
            ]
            for turn in range(TURNS):
                answer = llm.chat.completions.create(
                    model="gpt-4o-mini", messages=messages, tools=TOOLS, temperature=0.3
                )
                messages.append(
                    {"role": "assistant", "content": answer.choices[0].message.content or ""}
                )
                path = f"src/payments/retry_{turn}.py"
                read = ctx.step("read_file", lambda path=path: {"path": path, "text": _SOURCE})
                messages.append(
                    {"role": "user", "content": f"read_file gave {json.dumps(read)}. Go on."}
                )
            return {"fixed": True, "turns": TURNS}

        agent.start("The nightly suite fails in the retry wrapper: fix it.", run_id="agent")
    snapshot = storage.read("agent")
    assert snapshot is not None
    return snapshot.data


_SOURCE = "def retry(call, attempts=3):\n    for _ in range(attempts):\n        return call()\n"
