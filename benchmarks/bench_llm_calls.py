"""Model calls read as data: `llm_calls` and the runs' totals over 10,000 runs, against parsing.

A MemoryStorage of 10,000 runs (`--runs`), each a start, six model calls and a complete: OpenAI
chat completions with their request (`call`), an Anthropic message and an Anthropic stream
(with cached tokens), one of the six from a model genai-prices does not know. Loaded once; then,
interleaved and repeated on the same entries table:

  floor       `json.loads` of every model call's entry: what any reader of the calls pays
  llm_calls   the `Journals.llm_calls` table: text, prompt, tool calls, finish reason, request,
              cost (target <= 5x the floor)
  run_totals  what loading pays for the runs frame: each run's own calls, tokens and cost
              (target <= 3.5x the floor)

Times are CPU time (`time.process_time`), which a busy machine inflates less than wall time
and a single-threaded reader spends all of. The price database is imported and each model
looked up before timing (once per process, as
in a notebook's first load). Run from a checkout: `python benchmarks/bench_llm_calls.py`
(about a minute) or `--quick` (1,000 runs). Exit status 0 when both targets are met.
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

LLM_TARGET, TOTALS_TARGET = 5.0, 3.5
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 runs, 3 repeats")
    args = parser.parse_args()
    runs, repeats = (1000, 3) if args.quick else (args.runs, args.repeats)
    storage = MemoryStorage()
    for run in range(runs):
        storage.append(f"run-{run:05d}", journal(run), token=None)
    journals = kx.load(storage)  # imports and warms the price database
    entries = journals.to_arrow("entries")
    run_ids = journals.run_ids
    steps = entries.filter(pc.equal(entries.column("type"), "step"))
    values = steps.column("value").to_pylist()
    floor, full, totals = [], [], []
    for _ in range(repeats):
        began = time.process_time()
        for value in values:
            json.loads(value)
        floor.append(time.process_time() - began)
        began = time.process_time()
        table = llm_calls(entries)
        full.append(time.process_time() - began)
        began = time.process_time()
        run_totals(entries, run_ids)
        totals.append(time.process_time() - began)
    assert table.num_rows == len(values) == 6 * runs
    full_ratio = statistics.median(f / b for f, b in zip(full, floor, strict=True))
    totals_ratio = statistics.median(t / b for t, b in zip(totals, floor, strict=True))
    load = os.getloadavg()[0]
    print(f"{runs} runs, {len(values)} model calls, load average {load:.1f}")
    print(f"floor       json.loads of every call: best {min(floor):.3f} s")
    print(
        f"llm_calls   best {min(full):.3f} s   {full_ratio:.2f}x the floor (target <= "
        f"{LLM_TARGET}x)"
    )
    print(
        f"run_totals  best {min(totals):.3f} s   {totals_ratio:.2f}x the floor (target <= "
        f"{TOTALS_TARGET}x)"
    )
    return 0 if full_ratio <= LLM_TARGET and totals_ratio <= TOTALS_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
