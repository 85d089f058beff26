"""How many bytes a journaled stream takes, against the text it carries (issue 30 section 4).

A 2,000-token answer is streamed by `kassette.testing.fake_model_server()` (a word per event,
as the server streams) through the real SDKs and journaled by `kassette.integrations`: OpenAI
chat completions (`stream=True`), the Responses API (`stream=True`), Anthropic messages
(`stream=True`). For each, the step's `result` as JSON is measured against the answer's text
(UTF-8) and against the same stream journaled event by event as sent (`{"stream": [...]}`).
The rule (docs/journal-format.md) is at most 3x the text plus a fixed envelope; the envelope
here is what the same stream of a one-word answer takes.

    python benchmarks/bench_stream_size.py
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anthropic
import openai

from kassette import MemoryStorage, kassette
from kassette.core import read_journal
from kassette.integrations.anthropic import journaled as journaled_anthropic
from kassette.integrations.openai import journaled as journaled_openai
from kassette.testing import _model_answers as answers
from kassette.testing import _model_server as server_module
from kassette.testing import fake_model_server

TOKENS = 2000


def long_text(tokens: int) -> str:
    sentences, seed = [], 0
    while answers.count_tokens(" ".join(sentences)) < tokens:
        prompt = answers.Prompt("m", turns=(("user", f"Explain tide number {seed} and moons"),))
        sentences.append(answers.answer(prompt).text.replace("\n\n", " "))
        seed += 1
    words = " ".join(sentences).split(" ")
    while answers.count_tokens(" ".join(words)) > tokens:
        words.pop()
    return " ".join(words)


def journaled_result(text: str, how: str) -> tuple[Any, str]:
    """The journaled `result` of one streamed call answering `text`, and the text streamed."""
    original = server_module.answer

    def answer(prompt: Any, *, seed: int = 0) -> Any:
        given = original(prompt, seed=seed)
        return answers.Answer(text, None, "stop", given.prompt_tokens, answers.count_tokens(text))

    server_module.answer = answer  # type: ignore[assignment]
    storage = MemoryStorage()
    streamed: list[str] = []
    try:
        with fake_model_server() as server:
            oai = openai.OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)
            claude = anthropic.Anthropic(api_key="k", base_url=server.anthropic_base_url)

            @kassette(storage=storage)
            def agent(ctx: Any, _: str) -> None:
                asked = [{"role": "user", "content": "Tell me about tides"}]
                if how == "openai chat":
                    stream = journaled_openai(oai, ctx).chat.completions.create(
                        model="gpt-4o-mini", messages=asked, stream=True
                    )
                    streamed.extend(c.choices[0].delta.content or "" for c in stream if c.choices)
                elif how == "openai responses":
                    events = journaled_openai(oai, ctx).responses.create(
                        model="gpt-4o-mini", input=asked, stream=True
                    )
                    streamed.extend(
                        e.delta for e in events if e.type == "response.output_text.delta"
                    )
                else:
                    events = journaled_anthropic(claude, ctx).messages.create(
                        model="claude-3-5-haiku-latest",
                        max_tokens=4096,
                        messages=asked,
                        stream=True,
                    )
                    streamed.extend(
                        e.delta.text
                        for e in events
                        if e.type == "content_block_delta" and e.delta.type == "text_delta"
                    )

            agent.start("", run_id="r")
            oai.close()
            claude.close()
    finally:
        server_module.answer = original  # type: ignore[assignment]
    [step] = [e for e in read_journal(storage, "r").entries if e["type"] == "step"]
    return step["result"], "".join(streamed)


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def main() -> int:
    try:
        from kassette._model_streams import expanded
    except ImportError:  # before compact streams: every result is the plain form

        def expanded(result: Any) -> Any:
            return result

    text = long_text(TOKENS)
    print(f"answer: {answers.count_tokens(text)} tokens, {len(text.encode())} bytes of text")
    header = ("journaled", "as sent", "envelope", "x text", "(as sent)")
    print(f"{'stream':<18}" + "".join(f"{name:>11}" for name in header))
    met = True
    for how in ("openai chat", "openai responses", "anthropic"):
        result, streamed = journaled_result(text, how)
        assert streamed == text, "the stream carried the answer"
        envelope = size(journaled_result("Tides.", how)[0])
        journaled, plain = size(result), size(expanded(result))
        ratio = (journaled - envelope) / len(text.encode())
        plain_ratio = (plain - envelope) / len(text.encode())
        met = met and ratio <= 3
        sizes = f"{journaled:>11,}{plain:>11,}{envelope:>11,}"
        print(f"{how:<18}{sizes}{ratio:>11.2f}{plain_ratio:>11.2f}")
    print("target: (journaled - envelope) <= 3x the text")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
