"""Answers: how a comparison shows a model call, as the text a person reads.

A model-call step (read by `kassette._llm_calls`) is shown as its response text exactly as
the model gave it, then a line per tool call; the request parameters that differ from the
baseline's (`temperature 0.7 → 1.3`) are told apart, never written into the text. Two answers
are the same when their responses are, but for the fields that differ between two calls that
gave the same answer (`VOLATILE_FIELDS`: response and tool-call ids, `created`,
`system_fingerprint`, usage, timings); two requests, but for the ids of earlier tool calls
they hand back (`comparable_request`). Two texts are diffed word by word, with long unchanged
runs shortened to a few words each side.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from kassette._json_diff import ABSENT, first_difference
from kassette._llm_calls import LLMCall, read_llm_result
from kassette._llm_requests import comparable_request

__all__ = ["ELIDED", "Answer", "answer_of", "request_changes", "word_diff"]

ELIDED = "…"  # a word diff's op for an unchanged run it shortened; its text says how much
CONTEXT = 4  # unchanged words kept each side of a change
_WORD = re.compile(r"\S+\s*|\s+")
_SHORT = 40  # characters of a value quoted in a request change


class Answer(NamedTuple):
    """A model call as a comparison shows it: `text` (the response text, then a line per
    tool call), `key` (its comparable form) and `request` (the request as sent, or None)."""

    text: str
    key: str
    request: dict[str, Any] | None


def answer_of(entry: Mapping[str, Any]) -> Answer | None:
    """The answer of a step entry's fields (`result`, `call`, `kind`, ...), None if it is
    not a model call."""
    if entry.get("kind", "step") != "step":
        return None  # a sleep's or a parallel block's record
    call = read_llm_result(entry.get("result"), entry.get("call"))
    if call is None:
        return None
    key = json.dumps(call.comparable(), sort_keys=True, ensure_ascii=False)
    return Answer(_text(call), key, call.request)


def _text(call: LLMCall) -> str:
    """The response text, then `tool call: name({...})` per tool call."""
    lines = [call.text] if call.text else []
    for tool in call.tool_calls:
        arguments = tool.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        lines.append(f"tool call: {tool.get('name')}({arguments})")
    return "\n".join(lines)


def request_changes(baseline: dict[str, Any] | None, request: dict[str, Any] | None) -> list[str]:
    """One line per top-level request parameter that differs from the baseline's:
    `temperature 0.7 → 1.3`; inside a list or object, the first differing path
    (`messages[1].content "Write a haiku" → "Write a limerick"`). Ids the provider assigned
    (a tool call's, handed back in the conversation) are no change."""
    if baseline is None or request is None or baseline == request:
        return []
    baseline, request = comparable_request(baseline), comparable_request(request)
    lines = []
    for name in [*baseline, *(key for key in request if key not in baseline)]:
        found = first_difference(
            baseline.get(name, ABSENT), request.get(name, ABSENT), name, whole_lists=True
        )
        if found is not None:
            path, before, after = found
            lines.append(f"{path} {_short(before)} → {_short(after)}")
    return lines


def _short(value: Any) -> str:
    if value is ABSENT:
        return "unset"
    if isinstance(value, list | dict):
        kind = "list" if isinstance(value, list) else "object"
        return f"({kind} of {len(value)})"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHORT else text[: _SHORT - 2] + "…" + text[-1]


def word_diff(old: str, new: str, *, context: int = CONTEXT) -> list[tuple[str, str]]:
    """`new` against `old` word by word: `("=", text)` unchanged, `("-", text)` only in old,
    `("+", text)` only in new, and `(ELIDED, "N words")` for an unchanged run shortened to
    `context` words each side of a change. Whitespace stays with the word before it."""
    if old == new:
        return []
    before, after = _WORD.findall(old), _WORD.findall(new)
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    opcodes = matcher.get_opcodes()
    diff: list[tuple[str, str]] = []
    for number, (op, i1, i2, j1, j2) in enumerate(opcodes):
        if op != "equal":
            if i2 > i1:
                diff.append(("-", "".join(before[i1:i2])))
            if j2 > j1:
                diff.append(("+", "".join(after[j1:j2])))
            continue
        words = before[i1:i2]
        head = context if number > 0 else 0  # words kept after the change before this run
        tail = context if number < len(opcodes) - 1 else 0  # ... and before the next one
        if len(words) <= head + tail + 1:
            diff.append(("=", "".join(words)))
            continue
        if head:
            diff.append(("=", "".join(words[:head])))
        hidden = len(words) - head - tail
        diff.append((ELIDED, f"{hidden} word{'s' if hidden != 1 else ''}"))
        if tail:
            diff.append(("=", "".join(words[-tail:])))
    return diff
