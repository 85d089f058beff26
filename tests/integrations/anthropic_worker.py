"""A worker process for tests/integrations/test_anthropic.py: one invocation of a run whose
model calls go through `journaled(Anthropic(...), ctx)`, SIGKILLed at a chosen point.

Usage: `python anthropic_worker.py STORAGE_DIR RUN_ID BASE_URL KILL_AT`: the workflow makes
three calls (`messages.create`, `messages.create(stream=True)`, `messages.stream`). With
KILL_AT 1-3 the process kills itself with SIGKILL inside the journal append of that call: its
response has arrived, its step is not yet written. KILL_AT 0 runs to the end and prints the
outcome as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from anthropic import Anthropic
from killed_in_append import KilledInAppend

from kassette import Context, kassette
from kassette.integrations.anthropic import journaled

STEPS = ["messages.create", "messages.create#2", "messages.stream"]


def make(storage_dir: str, base_url: str, kill_at: int) -> Any:
    sdk = Anthropic(api_key="test-key", base_url=base_url, max_retries=0, timeout=30)

    marker = f'"stepId":"{STEPS[kill_at - 1]}"'.encode() if kill_at else None

    @kassette(storage=KilledInAppend(storage_dir, marker))
    def agent(ctx: Context, task: str) -> dict[str, Any]:
        client = journaled(sdk, ctx)
        user = [{"role": "user", "content": f"plan {task}"}]
        plan = client.messages.create(model="claude-fake", max_tokens=200, messages=user)
        events = client.messages.create(
            model="claude-fake", max_tokens=200, messages=user, system="draft", stream=True
        )
        draft = "".join(
            e.delta.text
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )
        with client.messages.stream(
            model="claude-fake", max_tokens=200, messages=user, system="review"
        ) as stream:
            review = "".join(stream.text_stream)
        return {"plan": plan.content[0].text, "draft": draft, "review": review}  # type: ignore[union-attr]

    return agent


if __name__ == "__main__":
    directory, run_id, url, kill = sys.argv[1:5]
    result = make(directory, url, int(kill)).start("the launch", run_id=run_id)
    print(json.dumps({"status": result.status, "result": result.result}))
