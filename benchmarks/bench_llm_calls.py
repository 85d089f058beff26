"""Model calls read as data: `llm_calls` and the runs' totals over 10,000 runs, against parsing.

Two MemoryStorages of 10,000 runs (`--runs`):

  mixed    each a start, six model calls and a complete: OpenAI chat completions with their
           request (`call`), an Anthropic message and an Anthropic stream (with cached tokens),
           one of the six from a model genai-prices does not know
  agent    copies of a researcher's run: 14 chat completions journaled with their requests
           through the OpenAI integration, between 14 tool steps (benchmarks/_agent_journal.py)

Each is loaded once; then, interleaved and repeated on the same entries table:

  floor       `json.loads` of every model call's entry: what any reader of the calls pays
  llm_calls   the `Journals.llm_calls` table: text, prompt, tool calls, finish reason, request,
              cost (issue 29's target: <= 1.5x the floor)
  run_totals  what the runs frame pays for its token and cost columns: each run's own calls,
              tokens and cost (target <= 1.5x the floor)

Each ratio is given in CPU time (`time.process_time`: every thread's, so Arrow's parallel
parse counts in full, and a busy machine inflates it less) and in wall time (what a user
waits; the median of paired ratios). The price database is imported and each model looked up
before timing (once per process, as in a notebook's first load). Run from a checkout:
`python benchmarks/bench_llm_calls.py` (about two minutes) or `--quick` (1,000 runs). Exit
status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.compute as pc

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from kassette._model_streams import compacted
from kassette.explore._llm import llm_calls, run_totals

TARGET = 1.5
_ANSWER = "Surface the timeout, add a bounded retry with jitter, and log the request id. "


def chat(run: int, step: int, model: str) -> dict[str, Any]:
    request = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You fix flaky tests. Be brief."},
            {"role": "user", "content": f"Ticket {run}, attempt {step}: the retry wrapper"},
        ],
        "temperature": 0.7,
    }
    usage = {
        "prompt_tokens": 300 + step,
        "completion_tokens": 20 + run % 40,
        "total_tokens": 320 + step + run % 40,
        "prompt_tokens_details": {"cached_tokens": 128},
    }
    result = {
        "id": f"chatcmpl-{run}-{step}",
        "object": "chat.completion",
        "created": 1767225600,
        "model": model,
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _ANSWER * (1 + run % 3)},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }
    return {
        "result": result,
        "call": {"provider": "openai", "method": "chat.completions.create", "request": request},
    }


def message(run: int, stream: bool) -> dict[str, Any]:
    usage = {"input_tokens": 40, "output_tokens": 30 + run % 20, "cache_read_input_tokens": 900}
    done = {
        "id": f"msg_{run}",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-5-haiku-20241022",
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "content": [{"type": "text", "text": _ANSWER}],
        "usage": usage,
    }
    if not stream:
        return {"result": done}
    events = [
        {"type": "message_start", "message": {**done, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": word + " "},
            }
            for word in _ANSWER.split()
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return {"result": {"stream": compacted(events)}}  # as the integration journals a stream


def journal(run: int) -> bytes:
    calls = [
        chat(run, 0, "gpt-4o-mini"),
        chat(run, 1, "gpt-4o-mini"),
        message(run, False),
        chat(run, 3, "gpt-4.1"),
        message(run, True),
        chat(run, 5, "our-own-model"),
    ]
    lines: list[dict[str, Any]] = [{"type": "start", "metadata": {"ticket": run}}]
    lines += [
        {"type": "step", "stepId": f"call#{n}", "name": "call", **c, "durationMs": 812.5}
        for n, c in enumerate(calls)
    ]
    lines.append({"type": "complete", "result": {"resolved": True}})
    return b"".join(
        encode(
            {
                "type": line["type"],
                "session": 1,
                "offset": offset,
                "timestamp": format_timestamp(1_767_225_600 + run * 60 + offset),
                **{k: v for k, v in line.items() if k != "type"},
            }
        )
        for offset, line in enumerate(lines)
    )


def parse_each(values: list[str]) -> None:
    for value in values:  # each dropped: no list of them all for the collector to walk
        json.loads(value)


def measure(storage: MemoryStorage, repeats: int) -> dict[str, float]:
    """The ratios to the floor (CPU and wall, median of paired ratios) and best times."""
    journals = kx.load(storage)  # imports and warms the price database
    entries = journals.to_arrow("entries")
    run_ids = journals.run_ids
    steps = entries.filter(pc.equal(entries.column("type"), "step"))
    values = [v for v in steps.column("value").to_pylist() if '"result"' in v]
    llm_calls(entries)
    found: dict[str, list[tuple[float, float]]] = {"floor": [], "llm_calls": [], "run_totals": []}
    for _ in range(repeats):
        for name, work in (
            ("floor", lambda: parse_each(values)),
            ("llm_calls", lambda: llm_calls(entries)),
            ("run_totals", lambda: run_totals(entries, run_ids)),
        ):
            cpu, wall = time.process_time(), time.perf_counter()
            work()
            found[name].append((time.process_time() - cpu, time.perf_counter() - wall))
    figures = {"calls": float(llm_calls(entries).num_rows)}
    for name in ("llm_calls", "run_totals"):
        for at, clock in ((0, "cpu"), (1, "wall")):
            figures[f"{name}_{clock}"] = statistics.median(
                t[at] / f[at] for t, f in zip(found[name], found["floor"], strict=True)
            )
        figures[f"{name}_best"] = min(t[1] for t in found[name])
    figures["floor_best"] = min(t[1] for t in found["floor"])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 runs, 3 repeats")
    args = parser.parse_args()
    runs, repeats = (1000, 3) if args.quick else (args.runs, args.repeats)
    from _agent_journal import agent_journal

    mixed, agent = MemoryStorage(), MemoryStorage()
    run = agent_journal()
    for number in range(runs):
        mixed.append(f"run-{number:05d}", journal(number), token=None)
        agent.append(f"agent-{number:05d}", run, token=None)
    met = True
    for name, storage in (("mixed", mixed), ("agent", agent)):
        figures = measure(storage, repeats)
        print(
            f"{name:6} {runs} runs, {figures['calls']:.0f} model calls; floor (json.loads of "
            f"each call's entry) best {figures['floor_best']:.3f} s"
        )
        for what in ("llm_calls", "run_totals"):
            print(
                f"  {what:11} best {figures[what + '_best']:.3f} s   "
                f"{figures[what + '_cpu']:5.2f}x the floor in CPU time, "
                f"{figures[what + '_wall']:5.2f}x in wall time (target <= {TARGET}x)"
            )
            met = met and figures[what + "_cpu"] <= TARGET
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
