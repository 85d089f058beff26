"""A model call's stream as the journal stores it: every event, compactly.

A streamed answer arrives as one event per token or word, each repeating the same envelope
(ids, model, indexes, types) around a few characters of text; a Responses stream also repeats
the whole text in its closing events. Journaled as sent, that is 16 to 50 times the text. The
journal keeps every event, in a form that is a few bytes per event plus the text:

    {"stream": {"events": [ITEM, ...], "strings": [TEXT, ...]}}

- An ITEM that is an object is one event as the API sent it.
- An ITEM that is an array, `[TEMPLATE, COUNT, PATHS, COLUMNS]`, is COUNT consecutive events
  that are TEMPLATE with, at each path of PATHS (a list of keys and indexes), the values of
  the column of COLUMNS at the same position: a list of one value per event, or an integer,
  the first of values that count up by one (`sequence_number`). TEMPLATE holds null there.
- `strings` holds each string of 40 characters or more that occurs more than once (the
  finished text a Responses stream repeats in four events); each occurrence is written
  `"\\u0000" + its index`. A string that itself starts with `"\\u0000"` gets one more in front.
- A string field `obfuscation` on an event is left out: random padding that hides the length
  of a delta, which the SDKs never read.

`expanded(result)` gives a stored stream's events back, from this form or the plain one
(`{"stream": [event, ...]}`, journals written before, and edits); `compacted(events)` writes
it. Standard library only: the core's reader of model calls (`kassette._llm_calls`) expands streams
too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["collapsed", "compacted", "expanded", "is_stored_stream"]

_SHARED = 40  # characters from which a repeated string is stored once
_MAX_VARYING = 4  # leaves that may differ between the events of one run
_MARK = "\x00"
Path = tuple[str | int, ...]


def is_stored_stream(result: Any) -> bool:
    """Whether a step's result is a recorded stream, in either form."""
    if not isinstance(result, dict) or len(result) != 1:
        return False
    stream = result.get("stream")
    return isinstance(stream, list) or (
        isinstance(stream, dict) and isinstance(stream.get("events"), list)
    )


def expanded(result: Any) -> Any:
    """`result` with a compact stream written out as `{"stream": [event, ...]}`; any other
    result (a plain stream included) as it is."""
    if not is_stored_stream(result) or isinstance(result["stream"], list):
        return result
    return {"stream": _events(result["stream"], joined=False)}


def collapsed(result: Any, *, nul_free: bool = False) -> Any:
    """`expanded(result)` for reading a model call's fields, not its events: a run of deltas
    that a reader of the call only concatenates (text deltas of one Anthropic content block
    or of a chat completion's choice, tool-call argument deltas of one tool call, a Responses
    stream's deltas) is one event whose delta is the run's joined. Every field
    `kassette._llm_calls` reads of it is the same as of `expanded(result)`, and a stream of
    a thousand deltas is read at the cost of a few events. `nul_free`: the caller knows no
    string of `result` holds a NUL (its JSON text has no `\\u0000`), so none is marked."""
    if not is_stored_stream(result) or isinstance(result["stream"], list):
        return result
    return {"stream": _events(result["stream"], joined=True, nul_free=nul_free)}


def _events(stored: dict[str, Any], *, joined: bool, nul_free: bool = False) -> list[Any]:
    strings = stored.get("strings")
    table = [s for s in strings if isinstance(s, str)] if isinstance(strings, list) else []
    # no string is marked when none holds a NUL: `repr` (a walk in C) writes one `\x00`
    marked = bool(table) or (not nul_free and "\\x00" in repr(stored["events"]))
    events: list[Any] = []
    for item in stored["events"]:
        if isinstance(item, list) and len(item) == 4:
            one = _joined_event(item, table, marked) if joined else None
            if one is not None:
                events.append(one)
            else:
                events += _run_events(item, table, marked)
        else:
            events.append(_unmarked(item, table) if marked else item)
    return events


def compacted(events: list[Any]) -> dict[str, Any]:
    """The compact form of a stream's events (see the module docstring)."""
    kept = [_without_padding(event) for event in events]
    items: list[Any] = []
    at = 0
    while at < len(kept):
        end, varying = _run(kept, at)
        if end - at >= 2:
            items.append(_run_item(kept[at:end], varying))
        else:
            items.append(kept[at])
        at = end
    # the values in the items: events, and runs' templates and columns (not their paths)
    values = [[item[0], item[3]] if isinstance(item, list) else item for item in items]
    repeated = Counter(
        text for text in _strings(values) if len(text) >= _SHARED and not text.startswith(_MARK)
    )
    table = [text for text, times in repeated.items() if times > 1]
    index = {text: number for number, text in enumerate(table)}
    stored: dict[str, Any] = {
        "events": [
            [_marked(item[0], index), item[1], item[2], _marked(item[3], index)]
            if isinstance(item, list)
            else _marked(item, index)
            for item in items
        ]
    }
    if table:
        stored["strings"] = table
    return stored


# -- runs of events alike but for a few leaves ------------------------------------------------


def _leaves(value: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """The leaves of a JSON value in document order: scalars and empty containers."""
    if isinstance(value, dict) and value:
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list) and value:
        return [leaf for at, item in enumerate(value) for leaf in _leaves(item, (*path, at))]
    return [(path, value)]


def _run(events: list[Any], start: int) -> tuple[int, list[int]]:
    """Where the run of events from `start` ends, and which leaves vary along it."""
    first = _leaves(events[start])
    shape = [path for path, _ in first]
    varying: list[int] | None = None
    end = start + 1
    while end < len(events):
        leaves = _leaves(events[end])
        if [path for path, _ in leaves] != shape:
            break
        differ = [
            number
            for number, ((_, value), (_, was)) in enumerate(zip(leaves, first, strict=True))
            if not _same(value, was)
        ]
        if varying is None:
            if len(differ) > _MAX_VARYING:
                break
            varying = differ
        elif not set(differ) <= set(varying):
            break
        end += 1
    return end, varying or []


def _same(value: Any, other: Any) -> bool:
    """Whether two leaves are written alike: 1, 1.0 and true differ, and so do 0.0 and -0.0."""
    if type(value) is not type(other):
        return False
    return repr(value) == repr(other) if type(value) is float else bool(value == other)


def _run_item(events: list[Any], varying: list[int]) -> list[Any]:
    template = _copy(events[0])
    paths: list[list[str | int]] = []
    columns: list[Any] = []
    all_leaves = [_leaves(event) for event in events]
    for number in varying:
        path = all_leaves[0][number][0]
        values = [leaves[number][1] for leaves in all_leaves]
        _set(template, path, None)
        paths.append(list(path))
        counting = all(type(v) is int for v in values) and values == list(
            range(values[0], values[0] + len(values))
        )
        columns.append(values[0] if counting else values)
    return [template, len(events), paths, columns]


def _run_events(item: list[Any], table: list[str], marked: bool) -> list[Any]:
    template, count, paths, columns = _unmarked_run(item, table, marked)
    build = _builder(template)
    at = [tuple(path) for path in paths]
    events = []
    for number in range(count if isinstance(count, int) else 0):
        event = build()
        for path, column in zip(at, columns, strict=False):
            value = column[number] if isinstance(column, list) else column + number
            _set(event, path, value)
        events.append(event)
    return events


def _unmarked_run(item: list[Any], table: list[str], marked: bool) -> list[Any]:
    """A run item `[template, count, paths, columns]` with its marked strings written out."""
    template, count, paths, columns = item
    if not marked:
        return item
    columns = [_unmarked(c, table) if isinstance(c, list) else c for c in columns]
    return [_unmarked(template, table), count, paths, columns]


def _builder(value: Any) -> Callable[[], Any]:
    """What makes copies of `value` (see `_copy`), fast: the copy's plan is made once for the
    events of a run, and each container is copied in C."""
    if isinstance(value, dict | list):
        inner = [
            (key, _builder(item))
            for key, item in (value.items() if isinstance(value, dict) else enumerate(value))
            if isinstance(item, dict | list)
        ]
        if not inner:
            return value.copy
        shallow = value.copy

        def build() -> Any:
            copied = shallow()
            for key, make in inner:
                copied[key] = make()
            return copied

        return build
    return lambda: value


def _joined_event(item: list[Any], table: list[str], marked: bool) -> dict[str, Any] | None:
    """A run's events as one, its texts joined (see `collapsed`), or None when the run is not
    one whose reading is a concatenation."""
    template, count, paths, columns = item
    if not (isinstance(template, dict) and type(count) is int and count >= 1):
        return None
    if not (isinstance(paths, list) and isinstance(columns, list) and len(paths) == len(columns)):
        return None
    template, count, paths, columns = _unmarked_run(item, table, marked)
    texts: list[str] | None = None
    where: list[Any] = []
    for path, column in zip(paths, columns, strict=True):
        if path == ["sequence_number"] and type(column) is int:
            continue  # a counter: no reader reads it
        if texts is not None or not isinstance(column, list) or len(column) != count:
            return None
        if not all(type(text) is str for text in column):
            return None
        texts, where = column, path
    if texts is None or not _concatenated(template, where):
        return None
    event: dict[str, Any] = _copy(template)
    _set(event, tuple(where), "".join(texts))
    return event


_CHAT_DELTA_KEYS = frozenset({"content", "role", "refusal"})


def _concatenated(template: dict[str, Any], path: list[Any]) -> bool:
    """Whether the readers of `kassette._llm_calls` only concatenate the values at `path`
    over events that are `template` elsewhere (so one event with them joined reads alike)."""
    kind = template.get("type")
    if kind == "content_block_delta":  # Anthropic: one block's text or tool input
        delta = template.get("delta")
        return (
            len(path) == 2
            and path[0] == "delta"
            and path[1] in ("text", "partial_json")
            and type(template.get("index", 0)) is int
            and set(template) <= {"type", "index", "delta"}
            and isinstance(delta, dict)
            and set(delta) <= {"type", path[1]}
        )
    if isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
        return path == ["delta"] and not {"response", "item", "model", "message"} & set(template)
    if template.get("object") != "chat.completion.chunk":
        return False
    choices = template.get("choices")
    if not (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)):
        return False
    delta = choices[0].get("delta")
    if not isinstance(delta, dict) or "function_call" in delta:
        return False
    if path == ["choices", 0, "delta", "content"]:
        return set(delta) <= _CHAT_DELTA_KEYS
    calls = delta.get("tool_calls")
    return (
        path == ["choices", 0, "delta", "tool_calls", 0, "function", "arguments"]
        and not isinstance(delta.get("content"), str)
        and isinstance(calls, list)
        and len(calls) == 1
        and isinstance(calls[0], dict)
        and type(calls[0].get("index", 0)) is int
        and isinstance(calls[0].get("function"), dict)
    )


def _set(value: Any, path: Path, leaf: Any) -> None:
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = leaf


def _copy(value: Any) -> Any:
    """A copy of a JSON value: its containers copied, at any depth (a C-level copy of each,
    then its containers replaced), its scalars shared."""
    if isinstance(value, dict):
        copied = value.copy()
        for key, item in value.items():
            if isinstance(item, dict | list):
                copied[key] = _copy(item)
        return copied
    if isinstance(value, list):
        return [_copy(item) if isinstance(item, dict | list) else item for item in value]
    return value


def _without_padding(event: Any) -> Any:
    if isinstance(event, dict) and isinstance(event.get("obfuscation"), str):
        return {key: item for key, item in event.items() if key != "obfuscation"}
    return event


# -- strings stored once ---------------------------------------------------------------------


def _strings(value: Any) -> list[str]:
    """Every string value (not key) in `value`."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _marked(value: Any, index: dict[str, int]) -> Any:
    if isinstance(value, str):
        if value.startswith(_MARK):
            return _MARK + value
        number = index.get(value)
        return value if number is None else f"{_MARK}{number}"
    if isinstance(value, dict):
        return {key: _marked(item, index) for key, item in value.items()}
    if isinstance(value, list):
        return [_marked(item, index) for item in value]
    return value


def _unmarked(value: Any, table: list[str]) -> Any:
    """`value` with its marked strings written out; `value` itself when it has none (most
    events): nothing is copied that does not change."""
    if isinstance(value, str):
        if not value.startswith(_MARK):
            return value
        rest = value[1:]
        if rest.startswith(_MARK) or not rest.isdigit() or int(rest) >= len(table):
            return rest  # an escaped string (or a mark with no string: kept as written)
        return table[int(rest)]
    if isinstance(value, dict):
        changed: dict[str, Any] | None = None
        for key, item in value.items():
            if isinstance(item, str) and not item.startswith(_MARK):
                continue
            found = _unmarked(item, table)
            if found is not item:
                changed = changed if changed is not None else dict(value)
                changed[key] = found
        return value if changed is None else changed
    if isinstance(value, list):
        items = [_unmarked(item, table) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
