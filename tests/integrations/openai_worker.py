"""A worker process for tests/integrations/test_openai.py: one invocation of a run whose model
calls go through `journaled(OpenAI(...), ctx)`, SIGKILLed at a chosen point.

Usage: `python openai_worker.py STORAGE_DIR RUN_ID BASE_URL KILL_AFTER [append]`: the
workflow makes four calls (chat, chat streamed, responses, responses streamed); after the call
numbered KILL_AFTER (1-4) has been journaled, the process kills itself with SIGKILL; with
`append`, it dies inside that call's journal append instead: the answer has arrived, its step
is not written. KILL_AFTER 0 runs to the end and prints the outcome as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from killed_in_append import KilledInAppend
from openai import OpenAI

from kassette import Context, kassette
from kassette.integrations.openai import journaled

STEPS = [
    "chat.completions.create", "chat.completions.create#2",
    "responses.create", "responses.create#2",
]  # fmt: skip


def make(storage_dir: str, base_url: str, kill_after: int, in_append: bool = False) -> Any:
    sdk = OpenAI(api_key="test-key", base_url=base_url, max_retries=0, timeout=30)
    marker = f'"stepId":"{STEPS[kill_after - 1]}"'.encode() if in_append and kill_after else None

    def killpoint(number: int) -> None:
        if number == kill_after and not in_append:
            os.kill(os.getpid(), signal.SIGKILL)

    @kassette(storage=KilledInAppend(storage_dir, marker))
    def agent(ctx: Context, task: str) -> dict[str, Any]:
        client = journaled(sdk, ctx)
        plan = client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": f"plan {task}"}]
        )
        killpoint(1)
        stream = client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "draft it"}], stream=True
        )
        draft = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        killpoint(2)
        review = client.responses.create(model="fake-1", input="review the draft")
        killpoint(3)
        events = client.responses.create(model="fake-1", input="summarise", stream=True)
        summary = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        killpoint(4)
        return {
            "plan": plan.choices[0].message.content,
            "draft": draft,
            "review": review.output_text,
            "summary": summary,
        }

    return agent


if __name__ == "__main__":
    directory, run_id, url, kill = sys.argv[1:5]
    in_append = sys.argv[5:] == ["append"]
    result = make(directory, url, int(kill), in_append).start("the launch", run_id=run_id)
    print(json.dumps({"status": result.status, "result": result.result}))
