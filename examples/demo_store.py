"""The store `make lab` opens: the demo's journals, kept, and a 20-branch fan-out of a model call.

    python examples/demo_store.py notebooks/demo-store

First the story of `make demo` (examples/demo.py) runs into the store and its journals stay
there: a triage run killed, retried, approved and forked twice. Then a support agent drafts a
reply with a model, and `kx.fan_out` forks that draft 20 ways, one temperature each. The model
is scripted and offline: it answers in the OpenAI chat completion format (text, token counts),
so the explorer shows the branches' answers, tokens and where they diverge, as it would for a
real model. A store that already holds runs is left as it is. Needs the `explore` extra.
"""

from __future__ import annotations

import argparse
import random
import zlib
from pathlib import Path

from demo import Demo

from kassette import LocalStorage, kassette
from kassette import explore as kx

QUESTION = "My nightly export to S3 stopped on Tuesday. Nothing changed on our side. Why?"
TEMPERATURES = [round(0.05 * number, 2) for number in range(20)]
RUN_ID = "support-1"
SENTENCES = [
    "The export job started failing after the bucket's lifecycle rule moved objects to Glacier.",
    "Your credentials were rotated on Tuesday, and the job still signs with the old key.",
    "The most likely cause is the new bucket policy that denies writes without encryption.",
    "I checked the job's history: every run since Tuesday ended with an AccessDenied error.",
    "Re-running the export by hand with the current key should confirm this in a minute.",
    "If it succeeds, update the key in the scheduler's secret and the nightly runs resume.",
    "Nothing on your side needs to change beyond that; the data itself is intact.",
    "Exports that were missed can be replayed from the job's history, one date at a time.",
    "I would also add an alert on the job's failures, so the next one shows the same day.",
    "Sorry for the trouble, and thanks for the detailed report: it made this quick to find.",
]


def model(prompt: str, temperature: float) -> dict:
    """A chat completion as the OpenAI API returns it, seeded by its arguments: at temperature
    0 the same answer every time, above it answers that differ more as the temperature grows."""
    rng = random.Random(zlib.crc32(f"{prompt}|{temperature}".encode()))
    spread = int(temperature * 10)
    first = rng.randrange(3) if spread else 0
    middle = rng.sample(SENTENCES[3:8], k=2 + min(spread, 3))
    closing = SENTENCES[8 + (rng.random() < temperature)]
    text = " ".join([SENTENCES[first], *middle, closing])
    return {
        "id": f"chatcmpl-{zlib.crc32(text.encode()):08x}",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 24 + len(prompt.split()),
            "completion_tokens": len(text.split()) * 4 // 3,
            "total_tokens": 24 + len(prompt.split()) + len(text.split()) * 4 // 3,
        },
    }


def support_agent(storage: LocalStorage):
    """Reads a ticket, drafts a reply with the model at the run's temperature, sends it."""

    @kassette(storage=storage, version="support-v1")
    def support(ctx, ticket):
        temperature = ctx.params.get("temperature", 0.0)
        facts = ctx.step("read-ticket", lambda: {"customer": ticket["customer"], "plan": "pro"})
        reply = ctx.step("draft-reply", lambda: model(ticket["question"], temperature))
        text = reply["choices"][0]["message"]["content"]
        ctx.step("send", lambda: {"to": facts["customer"], "words": len(text.split())})
        return {"reply": text}

    return support


def write(store: Path) -> kx.Branches | None:
    """Write the demo's runs and the fan-out into `store`; return the fan-out's branches.
    A store that already holds runs is kept as it is (None)."""
    store.mkdir(parents=True, exist_ok=True)
    storage = LocalStorage(store)
    if next(iter(storage.list_runs()), None) is not None:
        print(f"{store}/ already holds runs: kept as it is (delete it to write it again)")
        return None
    Demo(store).run()
    support = support_agent(storage)
    support.start({"customer": "ada@example.com", "question": QUESTION}, run_id=RUN_ID)
    params = [{"temperature": temperature} for temperature in TEMPERATURES]
    branches = kx.fan_out(support, RUN_ID, step="draft-reply", params=params)
    print(f"\nfan-out: {RUN_ID} forked at draft-reply into {len(params)} branches, one per")
    print(f"temperature {TEMPERATURES[0]} to {TEMPERATURES[-1]}: {branches.run_ids[0]} ...")
    return branches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="the store's directory")
    write(parser.parse_args().store)


if __name__ == "__main__":
    main()
