"""How far a `kx.fan_out` budget is overshot: model calls spent against the budget, in calls.

A fan-out of 24 branches, each making 4 model calls (a chat completion of 100 tokens, after a
simulated latency of 20-60 ms, seeded), runs at `max_workers=8` with `budget={"tokens": N *
100}` for N = 1, 3 and 10 calls, a few rounds each. kassette stops starting steps (and
branches) once its count of the fan-out's own calls reaches the budget; the calls in flight
then finish. So the calls spent may pass the budget by at most the calls in flight when it
was reached: `max_workers - 1` here. Prints, per budget, the calls spent in each round, the
largest overshoot, and that bound.

Run from a checkout: `python benchmarks/bench_fan_out_budget.py` (about half a minute).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kassette import MemoryStorage, kassette
from kassette import explore as kx

BRANCHES, CALLS, WORKERS, ROUNDS, TOKENS = 24, 4, 8, 3, 100


def completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": TOKENS - 10, "completion_tokens": 10, "total_tokens": TOKENS},
    }


def spent(budget_calls: int, seed: int) -> int:
    """The model calls a fan-out with a budget of `budget_calls` calls made."""
    storage, made, lock = MemoryStorage(), [0], threading.Lock()
    rng = random.Random(seed)
    delays = [rng.uniform(0.02, 0.06) for _ in range(BRANCHES * CALLS * 2)]

    @kassette(storage=storage)
    def agent(ctx: Any, task: Any) -> str:
        ctx.step("plan", lambda: "plan")

        def call() -> dict[str, Any]:
            with lock:
                made[0] += 1
                delay = delays[made[0] % len(delays)]
            time.sleep(delay)
            return completion()

        for _ in range(CALLS):
            ctx.step("chat", call)
        return "done"

    agent.start(None, run_id="root")
    made[0] = 0
    kx.fan_out(
        agent,
        "root",
        step="chat",
        n=BRANCHES,
        max_workers=WORKERS,
        budget={"tokens": budget_calls * TOKENS},
        progress=False,
    )
    return made[0]


def main() -> int:
    print(f"fan_out budget overshoot: {BRANCHES} branches x {CALLS} calls, max_workers={WORKERS}")
    worst_over = 0
    for budget in (1, 3, 10):
        made = [spent(budget, seed) for seed in range(ROUNDS)]
        over = max(made) - budget
        worst_over = max(worst_over, over)
        print(
            f"budget {budget:>2} calls: spent {made} calls; overshoot at most {over} "
            f"(bound: {WORKERS - 1}, the calls in flight)"
        )
    return 0 if worst_over <= WORKERS - 1 else 1


if __name__ == "__main__":
    sys.exit(main())
