"""The README quickstart: triage a ticket, suspend for a human, resume, apply the fix.

Run it with `python examples/quickstart.py`; it is offline (the "LLM" is a stand-in) and keeps
its journals in `.kassette/` so `python -m kassette list` can show them afterwards.
"""

import asyncio

from kassette import LocalStorage, Retry, kassette

storage = LocalStorage(".kassette")


def llm_chat(ticket):  # stands in for a model call
    return {"diagnosis": f"{ticket['title']}: disk full", "destructive": True}


def apply(analysis):  # stands in for a tool with real side effects
    return f"purged old logs ({analysis['diagnosis']})"


@kassette(storage=storage, version="triage-v1")
async def triage(ctx, ticket):
    analysis = await ctx.step("analyze", lambda: llm_chat(ticket))
    if analysis["destructive"]:
        approval = await ctx.suspend("human-approval", timeout=3600, reason="destructive fix")
        if not approval["approved"]:
            return {"outcome": "skipped"}
    result = await ctx.step("apply-fix", lambda: apply(analysis), retry=Retry(max_attempts=3))
    return {"outcome": "resolved", "result": result}


async def main():
    r = await triage.start({"title": "db-1 alerts"})
    print(r.run_id, r.status, r.event)  # ... suspended human-approval
    # The process may exit here. Later, any process with the journal resumes the run:
    r = await triage.resume(r.run_id, "human-approval", {"approved": True})
    print(r.run_id, r.status, r.result)  # ... success {'outcome': 'resolved', ...}


if __name__ == "__main__":
    asyncio.run(main())
