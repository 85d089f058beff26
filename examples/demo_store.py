"""The store `make lab` opens: the demo's journals, kept, and a 20-branch fan-out of a model call.

    python examples/demo_store.py notebooks/demo-store

First the story of `make demo` (examples/demo.py) runs into the store and its journals stay
there: a triage run killed, retried, approved and forked twice. Then a support agent drafts a
reply with a model, and `kx.fan_out` forks that draft 20 ways, one temperature each. The model
is scripted and offline: it answers in the OpenAI chat completion format (text, token counts),
so the explorer shows the branches' answers, tokens and where they diverge, as it would for a
real model. Needs the `explore` extra.

The store is written whole or not at all: into a hidden directory beside it, renamed into place
once every run has ended, so an interrupted writer (Ctrl-C, a killed `make lab`) leaves no
partial store, and the next call starts again. A complete store is kept as it is; a partial one
an older writer left (only this writer's runs, some not ended) is written again.
"""

from __future__ import annotations

import argparse
import random
import shutil
import zlib
from pathlib import Path

from demo import Demo

from kassette import LocalStorage, kassette
from kassette import explore as kx
from kassette.core import run_status

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
    A complete store is kept as it is (None); see the module's doc for a partial one."""
    storage = LocalStorage(store)
    held = set(storage.list_runs()) if store.exists() else set()
    if held and complete(storage, held):
        print(f"{store}/ already holds runs: kept as it is (delete it to write it again)")
        return None
    if held and not all(_ours(run_id) for run_id in held):
        raise SystemExit(f"{store}/ holds runs this script did not write: choose another folder")
    writing = store.parent / f".{store.name}.writing"
    shutil.rmtree(writing, ignore_errors=True)  # what an interrupted writer left
    writing.mkdir(parents=True)
    branches = _write(writing)
    if held:
        print(f"{store}/ was left partial by an interrupted writer: written again")
    shutil.rmtree(store, ignore_errors=True)
    writing.rename(store)  # whole, at once: a store is never seen half written
    print(f"written: {store}/")
    return branches


def complete(storage: LocalStorage, held: set[str]) -> bool:
    """Whether `held` (the store's runs) is the whole store: the demo's runs, and the
    support run and its 20 branches, every one of them completed."""
    support = {RUN_ID, *(f"{RUN_ID}.draft-reply.{n}" for n in range(len(TEMPERATURES)))}
    if not support <= held or not any(run_id.startswith("INC-") for run_id in held):
        return False
    return all(run_status(storage, run_id).status == "completed" for run_id in support)


def _ours(run_id: str) -> bool:
    return run_id.startswith(("INC-", RUN_ID))


def _write(store: Path) -> kx.Branches:
    storage = LocalStorage(store)
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
