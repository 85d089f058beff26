"""Model calls read column-wise: the common responses parsed once by Arrow, not per call.

`llm_calls` and `run_totals` read most calls of a store here: OpenAI chat completions and
Anthropic messages (not streamed), whose fields Arrow's JSON reader extracts into columns in
one multi-threaded pass over their entries' JSON text. Each column then holds what
`kassette._llm_calls` reads of that call, computed a column at a time. The reader is strict:
a field of another type than these responses have, a key given twice, anything it cannot take
sends the calls concerned to `kassette._llm_calls`' reader, one call at a time, which reads
any response as well as it can and says what it read leniently. So does a call whose reading
needs more than columns: its usage has a problem to note (a negative count, more cached than
input tokens), its token counts use the other vocabulary's keys, or it is an Anthropic message
with a tool call (its arguments are a JSON object, which Arrow does not give back as text).
tests/explore/test_llm_columns.py holds the two readers to the same rows.

A call's `request` is the one part read in Python (the prompt in it): decoded from where it
starts in the entry's text, whose bytes are its JSON text as recorded (`recorded_request`).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from kassette._codec import to_json
from kassette._llm_calls import finish_reason, prompt_of, tool_arguments
from kassette._model_usage import MAX_COUNT

__all__ = ["PART_ROWS", "REFUSED_PARSES", "Columns", "read_columns", "recorded_request"]

_INT = pa.int64()
_TEXT = pa.string()
_FUNCTION = pa.struct([("name", _TEXT), ("arguments", _TEXT)])
_MESSAGE = pa.struct(
    [
        ("content", _TEXT),
        ("tool_calls", pa.list_(pa.struct([("function", _FUNCTION)]))),
        ("function_call", _FUNCTION),
    ]
)
_USAGE = pa.struct(
    [
        ("prompt_tokens", _INT),
        ("completion_tokens", _INT),
        ("total_tokens", _INT),
        (
            "prompt_tokens_details",
            pa.struct([("cached_tokens", _INT), ("cache_write_tokens", _INT)]),
        ),
        ("completion_tokens_details", pa.struct([("reasoning_tokens", _INT)])),
        ("input_tokens", _INT),
        ("output_tokens", _INT),
        ("input_tokens_details", pa.struct([("cached_tokens", _INT)])),
        ("output_tokens_details", pa.struct([("reasoning_tokens", _INT)])),
        ("cache_read_input_tokens", _INT),
        ("cache_creation_input_tokens", _INT),
    ]
)
_SCHEMA = pa.schema(
    [
        ("kind", _TEXT),
        (
            "result",
            pa.struct(
                [
                    ("object", _TEXT),
                    ("type", _TEXT),
                    ("role", _TEXT),
                    ("model", _TEXT),
                    (
                        "choices",
                        pa.list_(pa.struct([("finish_reason", _TEXT), ("message", _MESSAGE)])),
                    ),
                    ("content", pa.list_(pa.struct([("type", _TEXT), ("text", _TEXT)]))),
                    ("stop_reason", _TEXT),
                    ("usage", _USAGE),
                ]
            ),
        ),
        (
            "call",
            pa.struct(
                [("provider", _TEXT), ("method", _TEXT), ("request", pa.struct([("model", _TEXT)]))]
            ),
        ),
    ]
)
_OPTIONS = pa_json.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="ignore")
# the calls worth handing to Arrow: a chat completion or an Anthropic message, not streamed
_LIKELY = r'"object":"chat\.completion"|"type":"message"'
# a stream (its message_start holds a message) as kassette writes a step: read one at a time
_STREAM = r'^\{"stepId":"[^"\\]*","name":"[^"\\]*","result":\{"stream":'
_CHAT, _MESSAGES = "chat.completions.create", "messages.create"
_TEXT_BLOCKS = pa.array(["text", "input_text", "output_text"])
PART_ROWS = 16_384  # calls read at a time
REFUSED_PARSES = 2  # how many parses of a part the parts Arrow refuses may cost
_SMALLEST_PART = 4  # calls below which a part Arrow refuses is read call by call
_LARGEST = 1 << 62  # a count past which sums may leave 64 bits: read call by call
_DECODER = json.JSONDecoder()
_CALL_OPENING = re.compile(r'\{"provider":"([^"\\]*)","method":"([^"\\]*)","request":')
_COLON = re.compile(r"\s*:")
_LARGE = pa.large_string()
_NOTHING, _NEWLINE = pa.scalar("", pa.large_string()), pa.scalar("\n", pa.large_string())


@dataclass
class Columns:
    """What `read_columns` read: `rows` (positions in the values given) and, for each, the
    `LLM_CALL_SCHEMA` columns from `provider` to `total_tokens`, `request`, and `counts`
    (a row per call of `kassette.explore._cost.Counts`) for its cost."""

    rows: npt.NDArray[np.int64]
    arrays: dict[str, pa.Array]
    counts: npt.NDArray[np.int64]
    priced: npt.NDArray[np.bool_]  # whether the call has both an input and an output count


def read_columns(values: pa.Array, *, texts: bool = True) -> Columns:
    """The calls among `values` (step payloads' JSON text, all model-call candidates) that
    this reader takes, read; without `texts`, only their provider, model and usage. Read
    `PART_ROWS` calls at a time: what is held in Python at once is bounded by a part."""
    likely = np.flatnonzero(
        pc.match_substring_regex(values, _LIKELY).to_numpy(zero_copy_only=False)
        & ~pc.match_substring_regex(values, _STREAM).to_numpy(zero_copy_only=False)
    )
    parts = [
        _read(values, likely[at : at + PART_ROWS], texts) for at in range(0, len(likely), PART_ROWS)
    ]
    if not parts:
        parts = [_read(values, likely, texts)]
    return Columns(
        np.concatenate([part.rows for part in parts]),
        {name: pa.concat_arrays([part.arrays[name] for part in parts]) for name in parts[0].arrays},
        np.concatenate([part.counts for part in parts]),
        np.concatenate([part.priced for part in parts]),
    )


def _read(values: pa.Array, likely: npt.NDArray[np.int64], texts: bool) -> Columns:
    """`read_columns` of the calls `values[likely]`."""
    lines, calls = (
        _without_calls(values, likely) if texts else (values.take(pa.array(likely)), None)
    )
    parts = [(np.empty(0, dtype=np.int64), _SCHEMA.empty_table()), *_parsed(lines)]
    at = np.concatenate([part[0] for part in parts])  # of `lines`
    rows = (likely if calls is None else calls.rows)[at]
    table = pa.concat_tables([part[1] for part in parts])
    field = _fields(table.column("result").combine_chunks())
    called = _fields(table.column("call").combine_chunks())
    if calls is not None:  # the calls decoded in Python; one Arrow saw is one not decoded
        unseen = pc.is_null(called["provider"]).to_numpy(zero_copy_only=False)
        called = calls.columns(at)
    else:
        called["model"] = _fields(called["request"])["model"]
    shape_provider = _shape_provider(field)
    recorded = pc.and_(pc.is_valid(called["provider"]), pc.is_valid(called["method"]))
    step = pc.fill_null(pc.equal(table.column("kind").combine_chunks(), "step"), True)
    # the call's own word names the provider; a result shaped like another's is read leniently
    takes = pc.and_(
        pc.and_(pc.is_valid(shape_provider), step),
        pc.or_(
            pc.invert(recorded), pc.fill_null(pc.equal(called["provider"], shape_provider), False)
        ),
    )
    is_chat = pc.fill_null(pc.equal(shape_provider, "openai"), False)
    counts, known, plain = _usage(_fields(field["usage"]), is_chat.to_numpy(zero_copy_only=False))
    keep = takes.to_numpy(zero_copy_only=False) & plain
    if calls is not None:
        keep &= unseen
    arrays: dict[str, pa.Array] = {
        "provider": pc.if_else(recorded, called["provider"], shape_provider),
        "method": pc.if_else(recorded, called["method"], pc.if_else(is_chat, _CHAT, _MESSAGES)),
        "model": pc.coalesce(field["model"], called["model"]),
        "input_tokens": _counted(counts[:, 0], known[:, 0]),
        "output_tokens": _counted(counts[:, 3], known[:, 3]),
        "total_tokens": _counted(counts[:, 5], known[:, 5]),
    }
    if texts:
        keep &= ~_anthropic_tool_use(field["content"], len(rows))
        chat = _first(field["choices"])
        message = _fields(_fields(chat)["message"])
        arrays["response_text"] = pc.fill_null(
            pc.if_else(is_chat, message["content"], _joined_text(field["content"], len(rows))), ""
        )
        reasons = pc.if_else(is_chat, _fields(chat)["finish_reason"], field["stop_reason"])
        arrays["finish_reason"] = _mapped(reasons)
        arrays["tool_calls"] = _chat_tool_calls(message, is_chat)
        arrays["request"], arrays["prompt"] = called["request_text"], called["prompt"]
    where = np.flatnonzero(keep)
    taken = pa.array(where)
    return Columns(
        rows[where],
        {name: array.take(taken) for name, array in arrays.items()},
        counts[where][:, [0, 1, 2, 3, 4]],
        (known[:, 0] & known[:, 3])[where],
    )


def _shape_provider(field: dict[str, pa.Array]) -> pa.Array:
    """The provider whose response each result is shaped as (`_shape`), null for neither: a
    chat completion or an Anthropic assistant message."""
    anthropic = pc.and_kleene(
        pc.and_kleene(pc.is_null(field["object"]), pc.equal(field["type"], "message")),
        pc.equal(field["role"], "assistant"),
    )
    return pc.if_else(
        pc.fill_null(pc.equal(field["object"], "chat.completion"), False),
        "openai",
        pc.if_else(pc.fill_null(anthropic, False), "anthropic", pa.scalar(None, _TEXT)),
    )


def _usage(
    usage: dict[str, pa.Array], is_chat: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Each call's counts (input, cache read, cache write, output, reasoning, total) and which
    it reports, as `kassette._model_usage` reads them, and whether that reading has nothing to
    note (else the call is the one-call reader's: a negative count, more cached than input
    tokens, and in a chat completion the Responses API's keys, which it reads instead)."""
    chat, anthropic = _chat_usage(usage), _anthropic_usage(usage)
    counts = np.where(is_chat[:, None], chat[0], anthropic[0])
    known = np.where(is_chat[:, None], chat[1], anthropic[1])
    plain = (counts >= 0).all(axis=1) & (counts < _LARGEST).all(axis=1)
    cached = counts[:, 1] + counts[:, 2]
    plain &= ~known[:, 0] | (cached <= counts[:, 0])
    plain &= ~(known[:, 3] & known[:, 4]) | (counts[:, 4] <= counts[:, 3])
    other = ("input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details")
    other_keys = functools.reduce(pc.or_, [pc.is_valid(usage[key]) for key in other])
    plain &= ~(is_chat & other_keys.to_numpy(zero_copy_only=False))
    return counts, known, plain


def _parsed(
    lines: pa.Array, rows: npt.NDArray[np.int64] | None = None, spare: list[int] | None = None
) -> list[tuple[npt.NDArray[np.int64], pa.Table]]:
    """`lines[rows]` (JSON texts; all of them by default) read by Arrow, in parts: a part Arrow
    refuses is halved until the rows it refuses are left to the reader of one call (they are
    in no part). `spare`: the bytes that parts refused may still cost (`REFUSED_PARSES` times
    the whole at first), so that many odd calls scattered over a store cost a few parses of it
    at most, then go to the reader of one call."""
    rows = np.arange(len(lines)) if rows is None else rows
    if not len(rows):
        return []
    joined = pc.binary_join_element_wise(lines.take(pa.array(rows)), _NOTHING, _NEWLINE)
    size = int(pc.sum(pc.binary_length(joined)).as_py())
    spare = [REFUSED_PARSES * size] if spare is None else spare
    longest = int(pc.max(pc.binary_length(joined)).as_py())
    options = pa_json.ReadOptions(block_size=max(1 << 20, 2 * longest))
    try:
        table = pa_json.read_json(
            pa.BufferReader(joined.buffers()[2].slice(0, size)),
            read_options=options,
            parse_options=_OPTIONS,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        spare[0] -= size
        if len(rows) <= _SMALLEST_PART or spare[0] < 0:
            return []
        half = len(rows) // 2
        return _parsed(lines, rows[:half], spare) + _parsed(lines, rows[half:], spare)
    return [(rows, table)] if table.num_rows == len(rows) else []


@dataclass
class _Calls:
    """The `call` of each of `rows` (of the values given to `_without_calls`), as Python
    decoded it: None for a step that records none, else its provider, method, request's
    model, prompt and JSON text (not the request: a store's requests, kept alive at once,
    would have the garbage collector walk them all again and again)."""

    rows: npt.NDArray[np.int64]
    found: list[tuple[str, str, str | None, str | None, str] | None]

    def columns(self, at: npt.NDArray[np.int64]) -> dict[str, pa.Array]:
        """Those of rows `at`, as the columns `read_columns` reads of a call."""
        found = [self.found[row] for row in at.tolist()]
        names = ("provider", "method", "model", "prompt", "request_text")
        types = (_TEXT, _TEXT, _TEXT, _LARGE, _LARGE)
        return {
            name: pa.array([call[index] if call else None for call in found], kind)
            for index, (name, kind) in enumerate(zip(names, types, strict=True))
        }


def _without_calls(values: pa.Array, rows: npt.NDArray[np.int64]) -> tuple[pa.Array, _Calls]:
    """`values[rows]` with each step's `call` decoded in Python (`recorded_request`) and cut
    out of its text, for Arrow to read the rest: the request (most of a call's text, as an
    agent's conversation grows) is parsed once, not by both. A row whose `call` cannot be read
    so is left out (to the reader of one call)."""
    kept: list[int] = []
    lines: list[str] = []
    found: list[tuple[str, str, str | None, str | None, str] | None] = []
    for row, text in zip(rows.tolist(), values.take(pa.array(rows)).to_pylist(), strict=True):
        keys = _call_keys(text)
        if not keys:
            kept.append(row)
            lines.append(text)
            found.append(None)
            continue
        call = _recorded(text, keys)
        if call is None:
            continue
        start, end = call[4], call[5]
        if text[start - 1] == ",":  # `,"call":{...}` out, or `"call":{...},` when first
            start -= 1
        elif text[end] == ",":
            end += 1
        kept.append(row)
        lines.append(text[:start] + text[end:])
        model = call[2].get("model")
        model = model if isinstance(model, str) else None
        found.append((call[0], call[1], model, prompt_of(call[2]), call[3]))
    return pa.array(lines, _LARGE), _Calls(np.array(kept, dtype=np.int64), found)


def _fields(struct: pa.Array) -> dict[str, pa.Array]:
    """A struct array's fields, null where the struct is null."""
    return {
        struct.type.field(index).name: pc.struct_field(struct, [index])
        for index in range(struct.type.num_fields)
    }


def _counts_of(*columns: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    values = np.stack(
        [pc.fill_null(column, 0).to_numpy(zero_copy_only=False) for column in columns], axis=1
    ).astype(np.int64)
    known = np.stack(
        [pc.is_valid(column).to_numpy(zero_copy_only=False) for column in columns], axis=1
    )
    return values, known


def _chat_usage(usage: dict[str, pa.Array]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """`openai_usage` of a chat completion's usage, column-wise: input, cache read, cache
    write, output, reasoning, total tokens (and which of them it reports)."""
    given = _fields(usage["prompt_tokens_details"])
    taken = _fields(usage["completion_tokens_details"])
    counts, known = _counts_of(
        usage["prompt_tokens"],
        given["cached_tokens"],
        given["cache_write_tokens"],
        usage["completion_tokens"],
        taken["reasoning_tokens"],
        usage["total_tokens"],
    )
    return _with_total(counts, known)


def _anthropic_usage(
    usage: dict[str, pa.Array],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """`anthropic_usage`, column-wise: its input tokens leave out the cached ones."""
    counts, known = _counts_of(
        usage["input_tokens"],
        usage["cache_read_input_tokens"],
        usage["cache_creation_input_tokens"],
        usage["output_tokens"],
        pa.nulls(len(usage["input_tokens"]), _INT),
        pa.nulls(len(usage["input_tokens"]), _INT),
    )
    counts[:, 0] += np.where(known[:, 0], counts[:, 1] + counts[:, 2], 0)
    return _with_total(counts, known)


def _with_total(
    counts: npt.NDArray[np.int64], known: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """A total not reported is the input and output tokens' sum, when both are."""
    both = known[:, 0] & known[:, 3] & ~known[:, 5]
    counts[both, 5] = counts[both, 0] + counts[both, 3]
    known[both, 5] = True
    return counts, known


def _counted(values: npt.NDArray[np.int64], known: npt.NDArray[np.bool_]) -> pa.Array:
    return pa.array(values, _INT, mask=~known)


def _first(lists: pa.Array) -> pa.Array:
    """Each list's first item (null for a null or empty list)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    starts = lists.offsets.to_numpy()[:-1]
    at = pa.array(starts, _INT, mask=lengths == 0)
    return lists.values.take(at)


def _joined_text(blocks: pa.Array, size: int) -> pa.Array:
    """Each message's text blocks' text, joined (`_blocks_text`)."""
    flat = _fields(blocks.values)
    parents = _parents(blocks)
    wanted = pc.and_(pc.is_in(flat["type"], _TEXT_BLOCKS), pc.is_valid(flat["text"]))
    chosen = np.flatnonzero(pc.fill_null(wanted, False).to_numpy(zero_copy_only=False))
    texts = flat["text"].take(pa.array(chosen, _INT))
    offsets = np.zeros(size + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(np.bincount(parents[chosen], minlength=size))
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), texts), "")
    return pc.fill_null(joined, "")


def _parents(lists: pa.Array) -> npt.NDArray[np.int64]:
    """The row each item of `lists.values` belongs to (-1: an item no row's list holds)."""
    offsets = lists.offsets.to_numpy()
    parents = np.full(len(lists.values), -1, dtype=np.int64)
    lengths = np.diff(offsets)
    inside = np.repeat(np.arange(len(lists), dtype=np.int64), lengths)
    parents[offsets[0] : offsets[0] + len(inside)] = inside
    return parents


def _anthropic_tool_use(blocks: pa.Array, size: int) -> npt.NDArray[np.bool_]:
    """Which messages have a block other than text: a tool call's input is an object."""
    flat = _fields(blocks.values)
    other = pc.fill_null(pc.invert(pc.is_in(flat["type"], _TEXT_BLOCKS)), True)
    parents = _parents(blocks)
    rows = parents[other.to_numpy(zero_copy_only=False) & (parents >= 0)]
    found = np.zeros(size, dtype=bool)
    found[rows] = True
    return found


def _mapped(reasons: pa.Array) -> pa.Array:
    """Each finish reason in `FINISH_REASONS`' words, a distinct one at a time."""
    encoded = pc.dictionary_encode(reasons)
    words = [finish_reason(word) for word in encoded.dictionary.to_pylist()]
    return pa.array(words, _TEXT).take(encoded.indices)


def _chat_tool_calls(message: dict[str, pa.Array], is_chat: pa.Array) -> pa.Array:
    """The `tool_calls` column: "[]", or a chat message's tool calls as JSON text."""
    tool_calls, legacy = message["tool_calls"], message["function_call"]
    has = pc.or_(
        pc.fill_null(pc.greater(pc.list_value_length(tool_calls), 0), False),
        pc.is_valid(legacy),
    )
    has = pc.and_(has, is_chat)
    texts: list[str] = ["[]"] * len(tool_calls)
    rows = np.flatnonzero(pc.fill_null(has, False).to_numpy(zero_copy_only=False))
    # the items' functions, flat, and where each row's are (a null item is no tool call)
    items = tool_calls.values
    functions = _fields(_fields(items)["function"])
    names = functions["name"].to_pylist()
    arguments = functions["arguments"].to_pylist()
    present = pc.is_valid(items).to_numpy(zero_copy_only=False)
    offsets = tool_calls.offsets.to_numpy()
    firsts, lasts = offsets[rows].tolist(), offsets[rows + 1].tolist()
    olds = legacy.take(pa.array(rows)).to_pylist()
    for row, first, last, old in zip(rows.tolist(), firsts, lasts, olds, strict=True):
        calls = [
            {"name": names[at], "arguments": tool_arguments(arguments[at])}
            for at in range(first, last)
            if present[at]
        ]
        if old is not None:
            calls.append({"name": old["name"], "arguments": tool_arguments(old["arguments"])})
        texts[row] = to_json(calls)
    return pa.array(texts, pa.large_string())


def _call_keys(text: str) -> list[int]:
    """Where a key `"call"` starts in a JSON text: a `"call"` followed by a colon (in a string,
    its quotes would be escaped, `\\"call\\"`)."""
    keys = []
    at = text.find('"call"')
    while at >= 0:
        if _COLON.match(text, at + 6):
            keys.append(at)
        at = text.find('"call"', at + 6)
    return keys


def recorded_request(text: str) -> tuple[str, str, dict[str, Any], str, int, int] | None:
    """A step's `call` read from its payload's JSON text, if it is written as kassette writes
    it: (provider, method, request, the request's JSON text as recorded, and where the `call`
    key starts and its value ends in `text`), else None.

    The `call` key must occur once, with `provider`, `method` and `request` in that order and
    nothing after them; the request is decoded from where it starts, and its text is what
    the decoder read."""
    return _recorded(text, _call_keys(text))


def _recorded(text: str, keys: list[int]) -> tuple[str, str, dict[str, Any], str, int, int] | None:
    """`recorded_request(text)`, given where its `call` keys are (`_call_keys`)."""
    if len(keys) != 1 or text[keys[0] + 6] != ":":
        return None
    at = keys[0]
    opening = _CALL_OPENING.match(text, at + 7)
    if opening is None:
        return None
    try:
        request, end = _DECODER.raw_decode(text, opening.end())
    except ValueError:
        return None
    if not isinstance(request, dict) or text[end : end + 1] != "}":
        return None
    return opening[1], opening[2], request, text[opening.end() : end], at, end + 1


assert MAX_COUNT > _LARGEST
