"""A real agent's journals: plan (Anthropic) -> draft (OpenAI, sometimes a tool loop) -> critique.

The agent runs through the real `anthropic` and `openai` SDKs, journaled by kassette's
integrations, against the local fake model server (`kassette.testing.fake_model_server`), so
its answers are paragraphs built from the prompt and vary with the temperature. It is fanned
out 20 ways at `draft` over temperature; every third branch is told to use the runbook tool
(`tool_choice`), so its draft is `draft` (a tool call), `search_runbook` (the tool's result),
`draft#2` (the answer), while the others answer in `draft`: branches whose paths differ.
Shared by the compare tests and the browser tests (which load the journals from disk).
"""

from __future__ import annotations

import json
from typing import Any

from kassette import Storage, kassette
from kassette import explore as kx

BRANCHES = 20
SOURCE = "ticket"
TICKET = (
    "Our nightly export to S3 stopped on Tuesday, the day our credentials were rotated. Nothing "
    "else changed. The job logs show AccessDenied on PutObject. What should we check first?"
)
TOOL = {
    "type": "function",
    "function": {
        "name": "search_runbook",
        "description": "Search the operations runbook for a section about a topic.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look up"}},
            "required": ["query"],
        },
    },
}
RUNBOOK = (
    "Runbook 4.2, rotated credentials: the export job reads its key from the scheduler's "
    "secret store at start-up, so a rotation needs a restart of the scheduler. Check the key id "
    "in the job's log line 'signing with' against the new key id."
)


def temperatures() -> list[dict[str, Any]]:
    """The fan-out's params: a temperature each, every third branch told to use the tool."""
    return [
        {"temperature": round(0.1 * number, 1), "tool_choice": "required"}
        if number % 3 == 0
        else {"temperature": round(0.1 * number, 1)}
        for number in range(BRANCHES)
    ]


def run_agent(storage: Storage, server: Any) -> kx.Branches:
    """Run the agent once (`SOURCE`) on `storage` and fan it out `BRANCHES` ways at `draft`."""
    import anthropic
    import openai

    from kassette.integrations.anthropic import journaled as journaled_anthropic
    from kassette.integrations.openai import journaled as journaled_openai

    gpt = openai.OpenAI(api_key="unused", base_url=server.openai_base_url, max_retries=2)
    claude = anthropic.Anthropic(
        api_key="unused", base_url=server.anthropic_base_url, max_retries=2
    )

    @kassette(storage=storage, version="support-v1")
    def support(ctx: Any, ticket: str) -> dict[str, str]:
        plan = journaled_anthropic(claude, ctx, name="plan").messages.create(
            model="claude-3-5-haiku-latest",
            max_tokens=600,
            system="You are a support lead. Plan the reply in a few sentences.",
            messages=[{"role": "user", "content": ticket}],
        )
        drafter = journaled_openai(gpt, ctx, name="draft")
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Draft a reply. The plan: " + plan.content[0].text},
            {"role": "user", "content": ticket},
        ]
        temperature = ctx.params.get("temperature", 0.7)
        reply = drafter.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,
            tools=[TOOL],
            tool_choice=ctx.params.get("tool_choice", "auto"),
            temperature=temperature,
        )
        message = reply.choices[0].message
        if message.tool_calls:  # the tool loop: run the tool, hand its result back
            call = message.tool_calls[0]
            query = json.loads(call.function.arguments).get("query", "")
            found = ctx.step("search_runbook", lambda: f"{RUNBOOK} (searched: {query})")
            messages += [
                message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": found},
            ]
            reply = drafter.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=[TOOL], temperature=temperature
            )
        draft = str(reply.choices[0].message.content)
        critique = journaled_anthropic(claude, ctx, name="critique").messages.create(
            model="claude-3-5-haiku-latest",
            max_tokens=600,
            system="You review support replies. Say what is missing, briefly.",
            messages=[{"role": "user", "content": "Critique this reply:\n\n" + draft}],
        )
        return {"reply": draft, "critique": critique.content[0].text}

    try:
        support.start(TICKET, run_id=SOURCE)
        return kx.fan_out(support, SOURCE, step="draft", params=temperatures(), progress=False)
    finally:  # an unclosed client's sockets warn later, in whichever test the GC runs in
        gpt.close()
        claude.close()
