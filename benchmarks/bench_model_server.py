"""The fake model server's answer time against the size of the prompt (issue 32 item 19).

`kassette.testing.fake_model_server()` reads a prompt's topics word by word; it once copied
the whole text before each word, so 1 MB took 7.6 s and 5-10 MB minutes. Here the same
request (one user message of distinct words, through the real OpenAI SDK) is timed at 0.5, 1,
2 and 4 MB, each the median of three. Linear scaling is a ratio of seconds per MB near 1
between the largest and the smallest prompt; the target is <= 2.

    python benchmarks/bench_model_server.py
"""

from __future__ import annotations

import statistics
import sys
import time

import openai

from kassette.testing import fake_model_server

SIZES_MB = (0.5, 1, 2, 4)


def prompt(megabytes: float) -> str:
    words, size, index = [], 0, 0
    while size < megabytes * 1_000_000:
        word = f"Topic{index} launches rockets."
        words.append(word)
        size += len(word) + 1
        index += 1
    return " ".join(words)


def main() -> int:
    per_mb = {}
    with (
        fake_model_server() as server,
        openai.OpenAI(
            api_key="k", base_url=server.openai_base_url, max_retries=0, timeout=600
        ) as sdk,
    ):
        for megabytes in SIZES_MB:
            text = prompt(megabytes)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                sdk.chat.completions.create(
                    model="gpt-fake", messages=[{"role": "user", "content": text}]
                )
                times.append(time.perf_counter() - start)
            per_mb[megabytes] = statistics.median(times) / megabytes
            seconds = statistics.median(times)
            print(f"{megabytes:>4} MB  {seconds:6.2f} s  {per_mb[megabytes]:.2f} s/MB")
    ratio = per_mb[SIZES_MB[-1]] / per_mb[SIZES_MB[0]]
    print(f"s/MB at {SIZES_MB[-1]} MB / s/MB at {SIZES_MB[0]} MB: {ratio:.2f} (target <= 2)")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
