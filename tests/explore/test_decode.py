"""kassette.explore._decode's shortcuts, each against what it stands for: the runs table
against `reduce_run` over every entry kassette's reader returns (the runs fold reads fewer
entries: `_folded`, `_unchanging_start`), and the whole-batch checks of `_strictly_readable`
against the per-line regular expressions they replace."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._codec import MAX_LINE_DEPTH, to_json, too_deep
from kassette._journal import encode, format_timestamp
from kassette._state import reduce_run
from kassette.core import read_journal, run_status
from kassette.explore import _decode

START = 1_767_225_600.0
TEXT = st.text(st.characters(codec="utf-8"), max_size=6)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | TEXT,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
    max_leaves=4,
)
SOURCE = st.fixed_dictionaries(
    {"runId": st.sampled_from(["src", "other"]), "fromOffset": st.integers(0, 3)}
)
METADATA = JSON | st.just({"source": "a word"}) | st.just({"note": 'the "source" of it'})


def _start(version: str | None, source: Any, metadata: Any, params: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"type": "start", "metadata": metadata}
    if version is not None:
        fields["version"] = version
    if source is not None:
        fields["source"] = source
    if params is not None:
        fields["params"] = params
    return fields


ENTRY = st.one_of(
    st.builds(
        _start,
        st.sampled_from([None, "v1", "v2"]),
        st.none() | SOURCE | st.just("not an object"),
        METADATA,
        st.none() | st.dictionaries(st.sampled_from(["k", "n"]), JSON, max_size=2),
    ),
    st.builds(lambda e: {"type": "suspend", "eventId": e, "event": e}, st.sampled_from("ab")),
    st.builds(
        lambda e: {"type": "resume", "eventId": e, "event": e, "value": 1}, st.sampled_from("ab")
    ),
    st.builds(lambda e: {"type": "suspend", "name": e}, st.sampled_from("ab")),  # upstream's
    st.builds(  # a foreign writer's: a `stepId` too, which is not the event's id
        lambda kind, step, event: {"type": kind, "stepId": step, "eventId": event},
        st.sampled_from(["suspend", "resume"]),
        st.sampled_from("ab"),
        st.sampled_from("ab"),
    ),
    st.builds(lambda e: {"type": "resume", "name": e}, st.sampled_from("ab")),
    st.builds(lambda r: {"type": "complete", "result": r}, JSON),
    st.just({"type": "error", "error": {"name": "ValueError", "message": "no"}}),
    st.just({"type": "cancel"}),
    st.just({"type": "step", "stepId": "s", "name": "s", "result": 1}),
    st.just({"type": "note", "text": "a type kassette does not know"}),
)


def journal(fields: list[dict[str, Any]]) -> bytes:
    """A run's journal in kassette's own form (the envelope first): the fast path's."""
    return b"".join(
        encode({"type": entry["type"], "session": 1, "offset": offset,
                "timestamp": format_timestamp(START + offset)} | entry)
        for offset, entry in enumerate(fields)
    )  # fmt: skip


def expected_row(storage: MemoryStorage, run_id: str) -> dict[str, Any]:
    """The runs table's folded columns from every entry kassette's reader returns."""
    entries = read_journal(storage, run_id).entries
    state = reduce_run(entries)
    source = state.source or {}
    status = run_status(storage, run_id)
    assert (status.status, status.version) == (state.status, state.version)
    return {
        "status": state.status,
        "version": state.version,
        "parent_run_id": source.get("runId"),
        "fork_offset": source.get("fromOffset"),
        "pending_events": list(state.pending_events),
        "error": str(state.error) if state.error else None,
        "params": to_json(state.params or {}),
        "input": to_json(state.input) if state.created_offset is not None else None,
        "result": to_json(state.result) if state.status == "completed" else None,
        "started_at": entries[state.creation_offset]["timestamp"] if len(entries) else None,
        "ended_at": (
            entries[state.ended_offset]["timestamp"] if state.ended_offset is not None else None
        ),
    }


def loaded_rows(storage: MemoryStorage) -> dict[str, dict[str, Any]]:
    rows = kx.load(storage).to_arrow("runs").to_pylist()
    for row in rows:
        for key in ("started_at", "ended_at"):
            if row[key] is not None:
                row[key] = format_timestamp(row[key].timestamp())
    return {row["run_id"]: {key: row[key] for key in expected_row_keys} for row in rows}


expected_row_keys = (
    "status",
    "version",
    "parent_run_id",
    "fork_offset",
    "pending_events",
    "error",
    "params",
    "input",
    "result",
    "started_at",
    "ended_at",
)


FORKS_AND_REPEATS = [  # the cases the shortcuts skip entries in, written out
    # repeated starts with versions: the first version stays, a later one sets none
    [_start("v1", None, {}, None), _start("v2", None, {"x": 1}, None), _start(None, None, 1, None)],
    # a start without a version, then one with: the later one sets it
    [_start(None, None, {}, None), _start("v2", None, {}, None), _start("v3", None, {}, None)],
    # a fork: its own start (with source) after a copied prefix sets source, version, input
    [
        _start("v1", None, {"task": 1}, {"k": 1}),
        {"type": "step", "stepId": "s", "name": "s", "result": 1},
        _start(None, {"runId": "src", "fromOffset": 2}, {"task": 2}, None),
        _start("v2", None, {}, None),
        {"type": "complete", "result": "done"},
    ],
    # a later start whose metadata holds the word "source" changes nothing
    [_start("v1", None, {}, None), _start(None, None, {"source": "web", "x": "source"}, None)],
    # the same event suspended and resumed twice, and one resumed before it is suspended
    [
        _start("v1", None, {}, None),
        {"type": "suspend", "eventId": "a", "event": "a"},
        {"type": "resume", "eventId": "a", "event": "a", "value": 1},
        {"type": "suspend", "eventId": "a", "event": "a"},
        {"type": "resume", "eventId": "a", "event": "a", "value": 2},
        {"type": "resume", "eventId": "b", "event": "b", "value": 3},
        {"type": "suspend", "eventId": "b", "event": "b"},
        {"type": "suspend", "eventId": "c", "event": "c"},
    ],
    # a suspend or resume with a `stepId` other than its event's id
    [
        _start("v1", None, {}, None),
        {"type": "suspend", "stepId": "other", "eventId": "a", "event": "a"},
        {"type": "suspend", "stepId": "b", "name": "c"},
        {"type": "resume", "stepId": "a", "eventId": "b", "event": "b", "value": 1},
    ],
    # entries after a terminal one count for nothing
    [
        _start("v1", None, {}, None),
        {"type": "error", "error": {"name": "E", "message": "m"}},
        {"type": "complete", "result": 1},
        _start("v9", {"runId": "src", "fromOffset": 0}, {}, None),
        {"type": "suspend", "eventId": "a", "event": "a"},
    ],
    # a journal whose first entry is no start
    [{"type": "suspend", "eventId": "a", "event": "a"}, _start("v1", None, {}, None)],
]


@pytest.mark.parametrize("fields", FORKS_AND_REPEATS)
def test_the_runs_fold_agrees_with_reduce_run_on_each_shortcut(
    fields: list[dict[str, Any]],
) -> None:
    storage = MemoryStorage()
    storage.append("r", journal(fields), token=None)
    storage.append("twin", journal(fields), token=None)  # two runs in one batch
    assert _decode._fast_entries(batch_of(journal(fields).split(b"\n")[:-1])) is not None
    loaded = loaded_rows(storage)
    assert loaded["r"] == loaded["twin"] == expected_row(storage, "r")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(st.lists(ENTRY, max_size=8), min_size=1, max_size=4))
@example(runs=FORKS_AND_REPEATS)
def test_the_runs_fold_agrees_with_reduce_run(runs: list[list[dict[str, Any]]]) -> None:
    """Whatever the starts, events and endings, in several runs of one batch, the runs table
    says what folding every entry of each run says."""
    storage = MemoryStorage()
    for number, fields in enumerate(runs):
        storage.append(f"run-{number}", journal(fields), token=None)
    batch = _decode.Batch()
    for number, fields in enumerate(runs):
        batch.add(f"run-{number}", journal(fields))
    assert _decode._fast_entries(batch) is not None  # kassette's own form: the fast path
    loaded = loaded_rows(storage)
    for number in range(len(runs)):
        assert loaded[f"run-{number}"] == expected_row(storage, f"run-{number}")


def test_a_later_start_whose_source_key_is_escaped_is_read() -> None:
    """`"\\u0073ource"` is `source` to a JSON reader: a start whose text has an escape is
    decoded, never judged by its text."""
    row = run_after_a_start(
        b'{"type":"start","session":1,"offset":1,"timestamp":"2026-01-01T00:00:01.000Z",'
        b'"\\u0073ource":{"runId":"src","fromOffset":0},"metadata":{}}\n'
    )
    assert row["parent_run_id"] == "src" and row["fork_offset"] == 0


def test_a_suspend_whose_step_id_key_is_escaped_is_read() -> None:
    """`"\\u0073tepId"` is `stepId`: the suspend's `step_id` is then not its event's id."""
    row = run_after_a_start(
        b'{"type":"suspend","session":1,"offset":1,"timestamp":"2026-01-01T00:00:01.000Z",'
        b'"\\u0073tepId":"other","eventId":"a","event":"a"}\n'
    )
    assert list(row["pending_events"]) == ["a"]


def run_after_a_start(later: bytes) -> Any:
    """The runs row of a run of a start and the line `later`, read by the fast path, and the
    row kassette's own reader gives it."""
    first = journal([_start("v1", None, {}, None)])
    storage = MemoryStorage()
    storage.append("r", first + later, token=None)
    assert _decode._fast_entries(batch_of((first + later).split(b"\n")[:-1])) is not None
    assert loaded_rows(storage)["r"] == expected_row(storage, "r")
    return kx.load(storage).runs.iloc[0]


# -- the whole-batch checks ---------------------------------------------------------------------

_MANY_BRACKETS = rf"^(?:[^\[{{]*[\[{{]){{{MAX_LINE_DEPTH + 1}}}"
_LINE = st.lists(
    st.sampled_from([b"[", b"{", b"]", b"}", b"a", b"\\ud800", b"\\uDC00", b"\\u0041", b"\\ue000",
                     b"\xc3\xa9", b"\xff", b"\xed\xa0\x80", b'"', b"\\\\"]),
    max_size=40,
).map(b"".join)  # fmt: skip


def readable_per_line(data: bytes) -> bool:
    """`_strictly_readable` as it was: a cast, and two regular expressions on every line."""
    lines = pa.array(data.split(b"\n")[:-1], pa.large_binary())
    try:
        lines.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    many = pc.match_substring_regex(lines, _MANY_BRACKETS).to_numpy(zero_copy_only=False)
    if any(too_deep(lines[int(row)].as_py()) for row in np.flatnonzero(many)):
        return False
    return not pc.any(pc.match_substring_regex(lines, _decode._ESCAPED_SURROGATE)).as_py()


def batch_of(lines: list[bytes]) -> _decode.Batch:
    batch = _decode.Batch()
    batch.add("r", b"".join(line + b"\n" for line in lines))
    return batch


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(_LINE | st.integers(0, 2 * MAX_LINE_DEPTH).map(lambda n: b"[" * n + b"]" * n),
                   min_size=1, max_size=6),
    window=st.sampled_from([1, 3, 16, 1 << 22]),
)  # fmt: skip
def test_the_whole_batch_checks_agree_with_the_per_line_ones(
    lines: list[bytes], window: int
) -> None:
    batch = batch_of(lines)
    ends = batch.line_ends()
    counts = [line.count(b"[") + line.count(b"{") for line in lines]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_decode, "_SCAN_WINDOW", window)  # lines across windows
        assert _decode._brackets_per_line(batch.data, ends).tolist() == counts
    assert _decode._strictly_readable(batch.data, ends) == readable_per_line(bytes(batch.data))


@pytest.mark.parametrize(
    ("line", "readable"),
    [
        (b"[" * MAX_LINE_DEPTH + b"]" * MAX_LINE_DEPTH, True),  # as deep as a line may be
        (b"[" * (MAX_LINE_DEPTH + 1) + b"]" * (MAX_LINE_DEPTH + 1), False),
        (b"[]" * (MAX_LINE_DEPTH + 1), True),  # many brackets, shallow
        (b'"\\ud83d\\ude00"', False),  # a pair, escaped: left to the general path, as before
        (b'"\\\\ud800"', False),  # an escaped backslash, then text: the same
        (b'"\xc3\xa9"', True),
        (b'"\xed\xa0\x80"', False),
    ],
)
def test_strictly_readable(line: bytes, readable: bool) -> None:
    batch = batch_of([b'{"a":1}', line, b'{"b":2}'])
    assert _decode._strictly_readable(batch.data, batch.line_ends()) is readable
    assert readable_per_line(bytes(batch.data)) is readable


def test_a_batch_joins_its_journals_once() -> None:
    batch = _decode.Batch()
    batch.add("a", b'{"x":1}\n{"y"')  # a torn tail is left out
    batch.add("b", b'{"z":2}\n')
    assert batch.size == len(batch.data) == 16
    assert batch.data is batch.data and bytes(batch.data) == b'{"x":1}\n{"z":2}\n'
    first, second = batch.split()
    assert (bytes(first.data), first.size, second.run_ids) == (b'{"x":1}\n', 8, ["b"])


def test_payloads_short_and_long_read_as_the_general_path_reads_them() -> None:
    """`_values` holds a payload of up to 12 bytes in its view and points to a longer one."""
    fields = [{"type": "note"}, *({"type": "note", "x": "a" * size} for size in range(12))]
    data = journal(fields)
    batch = _decode.Batch()
    batch.add("r", data)
    fast = _decode._fast_entries(batch)
    assert fast is not None
    assert fast.column("value").to_pylist() == [
        "{}",
        *(to_json({"x": "a" * size}) for size in range(12)),
    ]
    assert fast.equals(_decode._python_entries("r", data))


# -- the canonical envelope ---------------------------------------------------------------------

_CANONICAL = (  # what `_payload_starts` tells without running it
    r'^\{"type":"[^"\\]*","session":[1-9][0-9]*,"offset":(?:0|[1-9][0-9]*),'
    r'"timestamp":"[^"\\]*"[,}]'
)
_PLAIN = {  # what kassette writes
    "type": [b"step", b"start", b"", "\u00e9".encode()],
    "number": [b"1", b"2", b"10", b"12"],
    "time": [b"2026-01-01T00:00:00.000Z", b"x"],
}
_NEAR = {  # JSON that means the same, or is not JSON, or is not an integer
    "type": [b"st\\u0065p", b'st\\"ep', b"st\\\\ep", b"s\\/", b'\\\\\\",', b'\\",'],
    "number": [b"0", b"-1", b"1.0", b"01", b"1e0"],
    "time": [b"2026-01-01T00:00:0\\u0030.000Z", b'\\\\\\",', b'\\",'],
}


@st.composite
def envelope_lines(draw: st.DrawFn) -> bytes:
    """A line with the envelope's four keys, in kassette's form or near it."""

    def value(kind: str) -> bytes:
        near = draw(st.integers(0, 5)) == 0
        return draw(st.sampled_from(_NEAR[kind] if near else _PLAIN[kind]))

    fields = [
        (b"type", b'"' + value("type") + b'"'),
        (b"session", value("number")),
        (b"offset", b"0" if draw(st.booleans()) else value("number")),
        (b"timestamp", b'"' + value("time") + b'"'),
    ]
    if draw(st.integers(0, 5)) == 0:
        fields = draw(st.permutations(fields))
    payload = draw(st.sampled_from([b"", b',"x":1', b',"x":{"a":"b","session":1}', b' ,"y":[]']))
    colon = b": " if draw(st.integers(0, 5)) == 0 else b":"
    pairs = (b'"' + key + b'"' + colon + text for key, text in fields)
    return b"{" + b",".join(pairs) + payload + b"}"


_T = b'"timestamp":"2026-01-01T00:00:00.000Z"'


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(envelope_lines(), min_size=1, max_size=3))
@example(lines=[b'{"type":"step","session":0,"offset":0,' + _T + b"}"])  # session 0
@example(
    lines=[
        b'{"type":"s","session":1,"offset":0,"timestAmp":"2026-01-01T00:00:00.000Z",' + _T + b"}"
    ]
)
@example(lines=[b'{"type":"s","session":1,"offset":0,"timestamp":"\\u0061aaaa,,bbb","x":1}'])
@example(lines=[b'{"type":"s","session":1,"offset":0,"timestamp":"\\\\\\",","x":1}'])
def test_payload_starts_are_found_where_the_envelope_is_canonical(lines: list[bytes]) -> None:
    batch = batch_of(lines)
    ends = batch.line_ends()
    parsed = _decode._parsed(batch.data, 1 << 20)
    if parsed is None or any(parsed.column(name).null_count for name in _decode.ENVELOPE):
        return  # Arrow's reader refuses it: the general path reads it
    starts = np.concatenate([[0], ends[:-1] + 1])
    found = _decode._payload_starts(batch.data, starts, ends, parsed)
    matches = [re.match(_CANONICAL.encode(), line) for line in lines]
    assert (found is not None) == all(matches)
    if found is not None:  # where it was before: `,rest}` read as `{rest}`, `"}` as `{}`
        closing = [start + match.end() - 1 for start, match in zip(starts, matches, strict=True)]
        before = [at if batch.data[at] == ord(",") else at - 1 for at in closing]
        assert found.tolist() == before


def test_a_foreign_writers_nan_in_params_input_and_result_loads() -> None:
    """The runs table writes a foreign writer's NaN back as JSON readers spell it, as the
    entries' `value` does, in params too."""
    lines = (
        b'{"type":"start","session":1,"offset":0,"timestamp":"2026-01-01T00:00:00Z",'
        b'"params":{"t":NaN},"metadata":[Infinity]}\n'
        b'{"type":"complete","session":1,"offset":1,"timestamp":"2026-01-01T00:00:01Z",'
        b'"result":NaN}\n'
    )
    storage = MemoryStorage()
    storage.append("r", lines, token=None)
    row = kx.load(storage).to_arrow("runs").to_pylist()[0]
    assert (row["params"], row["input"], row["result"]) == ('{"t":NaN}', "[Infinity]", "NaN")
