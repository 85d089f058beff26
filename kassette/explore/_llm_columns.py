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

__all__ = ["Columns", "read_columns", "recorded_request"]

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
_SMALLEST_PART = 4  # calls below which a part Arrow refuses is read call by call
_LARGEST = 1 << 62  # a count past which sums may leave 64 bits: read call by call
_DECODER = json.JSONDecoder()
_CALL_OPENING = re.compile(r'\{"provider":"([^"\\]*)","method":"([^"\\]*)","request":')
_SPACED_CALL = re.compile(r'"call"\s')
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
    this reader takes, read; without `texts`, only their provider, model and usage."""
    likely = np.flatnonzero(
        pc.match_substring_regex(values, _LIKELY).to_numpy(zero_copy_only=False)
        & ~pc.match_substring_regex(values, _STREAM).to_numpy(zero_copy_only=False)
    )
    parts = [(np.empty(0, dtype=np.int64), _SCHEMA.empty_table()), *_parsed(values, likely)]
    rows = np.concatenate([part[0] for part in parts])
    table = pa.concat_tables([part[1] for part in parts])
    result, call = table.column("result").combine_chunks(), table.column("call").combine_chunks()
    field = _fields(result)
    called = _fields(call)
    anthropic = pc.and_kleene(
        pc.and_kleene(pc.is_null(field["object"]), pc.equal(field["type"], "message")),
        pc.equal(field["role"], "assistant"),
    )
    shape_provider = pc.if_else(
        pc.fill_null(pc.equal(field["object"], "chat.completion"), False),
        "openai",
        pc.if_else(pc.fill_null(anthropic, False), "anthropic", pa.scalar(None, _TEXT)),
    )
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
    usage = _fields(field["usage"])
    chat_usage, anthropic_usage = _chat_usage(usage), _anthropic_usage(usage)
    pick = is_chat.to_numpy(zero_copy_only=False)
    counts = np.where(pick[:, None], chat_usage[0], anthropic_usage[0])
    known = np.where(pick[:, None], chat_usage[1], anthropic_usage[1])
    takes_np = takes.to_numpy(zero_copy_only=False)
    # a usage `kassette._model_usage` notes a problem of, or reads by other keys, is its to read
    plain = (counts >= 0).all(axis=1) & (counts < _LARGEST).all(axis=1)
    cached = counts[:, 1] + counts[:, 2]
    plain &= ~known[:, 0] | (cached <= counts[:, 0])
    plain &= ~(known[:, 3] & known[:, 4]) | (counts[:, 4] <= counts[:, 3])
    # in a chat completion, the Responses API's usage keys: `openai_usage` reads those instead
    other_keys = functools.reduce(
        pc.or_,
        [
            pc.is_valid(usage[key])
            for key in (
                "input_tokens",
                "output_tokens",
                "input_tokens_details",
                "output_tokens_details",
            )
        ],
    ).to_numpy(zero_copy_only=False)
    plain &= ~(pick & other_keys)
    keep = takes_np & plain
    arrays: dict[str, pa.Array] = {
        "provider": pc.if_else(recorded, called["provider"], shape_provider),
        "method": pc.if_else(recorded, called["method"], pc.if_else(is_chat, _CHAT, _MESSAGES)),
        "model": pc.coalesce(field["model"], _fields(called["request"])["model"]),
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
        requests = _requests(values, rows, pc.is_valid(called["request"]), called, keep)
        keep &= requests[2]
        arrays["request"], arrays["prompt"] = (
            pa.array(requests[0], pa.large_string()),
            pa.array(requests[1], pa.large_string()),
        )
    where = np.flatnonzero(keep)
    taken = pa.array(where)
    return Columns(
        rows[where],
        {name: array.take(taken) for name, array in arrays.items()},
        counts[where][:, [0, 1, 2, 3, 4]],
        (known[:, 0] & known[:, 3])[where],
    )


def _parsed(
    values: pa.Array, rows: npt.NDArray[np.int64]
) -> list[tuple[npt.NDArray[np.int64], pa.Table]]:
    """`values[rows]` read by Arrow, in parts: a part Arrow refuses is halved until the rows
    it refuses are left to the reader of one call (they are not in any part)."""
    if not len(rows):
        return []
    lines = pc.binary_join_element_wise(values.take(pa.array(rows)), _NOTHING, _NEWLINE)
    size = int(pc.sum(pc.binary_length(lines)).as_py())
    longest = int(pc.max(pc.binary_length(lines)).as_py())
    options = pa_json.ReadOptions(block_size=max(1 << 20, 2 * longest))
    try:
        table = pa_json.read_json(
            pa.BufferReader(lines.buffers()[2].slice(0, size)),
            read_options=options,
            parse_options=_OPTIONS,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if len(rows) <= _SMALLEST_PART:
            return []
        half = len(rows) // 2
        return _parsed(values, rows[:half]) + _parsed(values, rows[half:])
    return [(rows, table)] if table.num_rows == len(rows) else []


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


def _requests(
    values: pa.Array,
    rows: npt.NDArray[np.int64],
    recorded: pa.Array,
    called: dict[str, pa.Array],
    keep: npt.NDArray[np.bool_],
) -> tuple[list[str | None], list[str | None], npt.NDArray[np.bool_]]:
    """Each call's request as JSON text and its prompt, and whether they could be read here
    (`recorded_request`, agreeing with Arrow's reading of the call)."""
    size = len(rows)
    requests: list[str | None] = [None] * size
    prompts: list[str | None] = [None] * size
    read = np.ones(size, dtype=bool)
    wanted = np.flatnonzero(keep & pc.fill_null(recorded, False).to_numpy(zero_copy_only=False))
    texts = values.take(pa.array(rows[wanted])).to_pylist()
    taken = pa.array(wanted)
    arrow = zip(
        called["provider"].take(taken).to_pylist(),
        called["method"].take(taken).to_pylist(),
        _fields(called["request"])["model"].take(taken).to_pylist(),
        strict=True,
    )
    for row, text, (provider, method, model) in zip(wanted.tolist(), texts, arrow, strict=True):
        found = recorded_request(text)
        if found is None or found[:2] != (provider, method) or found[2].get("model") != model:
            read[row] = False
            continue
        requests[row], prompts[row] = found[3], prompt_of(found[2])
    return requests, prompts, read


def recorded_request(text: str) -> tuple[str, str, dict[str, Any], str] | None:
    """A step's `call` read from its payload's JSON text, if it is written as kassette writes
    it: (provider, method, request, the request's JSON text as recorded), else None.

    The `call` key must occur once (a `"call":` in a string would be `\\"call\\":`), with
    `provider`, `method` and `request` in that order and nothing after them; the request is
    decoded from where it starts, and its text is what the decoder read."""
    at = text.find('"call":')
    if at < 0 or text.find('"call":', at + 7) >= 0 or _SPACED_CALL.search(text):
        return None
    opening = _CALL_OPENING.match(text, at + 7)
    if opening is None:
        return None
    try:
        request, end = _DECODER.raw_decode(text, opening.end())
    except ValueError:
        return None
    if not isinstance(request, dict) or text[end : end + 1] != "}":
        return None
    return opening[1], opening[2], request, text[opening.end() : end]


assert MAX_COUNT > _LARGEST
