"""A worker process for tests/storage/test_cancel_live.py: a runaway workflow that records
steps back to back, with no work between them, until it is canceled.

Usage: `python runaway_worker.py STORAGE_URL RUN_ID [PAUSE]` (boto3's environment pointing at
the test server for an `s3://` URL). It prints `started` once its first step is recorded, then
records steps `s1`, `s2`, ... as fast as it can (or each after PAUSE seconds of "work"), at
most `LIMIT` of them or for `SECONDS`. The last
line printed is `{"outcome": "canceled" | "ran out" | ERROR_NAME, "acked": [step ids]}`:
`acked` holds every step whose `ctx.step` returned, so the test can check none is missing.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from kassette import Context, RunCancelledError, kassette

LIMIT = 20_000
SECONDS = 30.0


def main(url: str, run_id: str, pause: float = 0.0) -> None:
    acked: list[str] = []
    deadline = time.monotonic() + SECONDS

    def runaway(ctx: Context, _: Any) -> str:
        ctx.step("s0", lambda: 0)
        acked.append("s0")
        print("started", flush=True)
        for number in range(1, LIMIT):
            if time.monotonic() > deadline:
                break
            if pause:
                time.sleep(pause)
            ctx.step(f"s{number}", lambda number=number: number)
            acked.append(f"s{number}")
        return "ran out"

    try:
        outcome = kassette(runaway, storage=url).start(None, run_id=run_id).result
    except RunCancelledError:
        outcome = "canceled"
    except Exception as exc:  # reported, for the test to show
        outcome = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"outcome": outcome, "acked": acked}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(float, sys.argv[3:4]))
