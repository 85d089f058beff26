"""Journal bytes to Arrow: one row per entry, and one row per run derived from those rows.

Every journal line has the same envelope (`type`, `session`, `offset`, `timestamp`) and then
the fields of its type. The envelope and the few fields worth a column (step or event id, name,
kind, event, duration) are parsed by Arrow's JSON reader in one multi-threaded pass over all
runs; the rest of each line is the entry's payload, kept as JSON text in `value` without being
parsed and re-serialised: for a line that starts with the envelope in its canonical form (as
kassette and upstream kassette write it), `value` is the line's own bytes after the envelope.

Anything that path cannot take (a line with another key order or spacing, a field of an
unexpected type, a timestamp Arrow does not read, a corrupt line) sends that run, alone, down a
plain Python path that reads any journal with the envelope, and raises `JournalCorruptionError`
where kassette's own reader would.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from kassette._codec import (
    MAX_LINE_DEPTH,
    REQUIRED_TEXT,
    TERMINAL_TYPES,
    json_text,
    parse_moment,
    read_entry,
    to_json,
    too_deep,
)
from kassette._state import RunState, reduce_entry
from kassette.explore._import_runs import imported_columns, source_ending
from kassette.explore._llm import run_totals
from kassette.explore._working import working_columns

__all__ = ["ENTRY_SCHEMA", "RUN_SCHEMA", "decode", "with_runs", "with_totals"]

_TIMESTAMP = pa.timestamp("ms", tz="UTC")

_READ_ENTRY_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("session", pa.int64(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("step_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("event", pa.string()),
        pa.field("duration_ms", pa.float64()),
        pa.field("edited", pa.bool_(), nullable=False),
        pa.field("value", pa.large_string(), nullable=False),
    ]
)
# `copied`: the entry is one a fork copied from its source (its offset is before the fork's)
ENTRY_SCHEMA = _READ_ENTRY_SCHEMA.append(pa.field("copied", pa.bool_(), nullable=False))

RUN_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("version", pa.string()),
        pa.field("parent_run_id", pa.string()),
        pa.field("fork_offset", pa.int64()),
        pa.field("sessions", pa.int64(), nullable=False),
        pa.field("steps", pa.int64(), nullable=False),
        pa.field("started_at", _TIMESTAMP),
        pa.field("ended_at", _TIMESTAMP),
        pa.field("duration_s", pa.float64()),
        pa.field("pending_events", pa.list_(pa.string()), nullable=False),
        pa.field("error", pa.string()),
        pa.field("params", pa.large_string()),
        pa.field("input", pa.large_string()),
        pa.field("result", pa.large_string()),
        # the run's own model calls and tokens: a fork's copied prefix is its source's
        pa.field("llm_calls", pa.int64(), nullable=False),
        pa.field("input_tokens", pa.int64()),  # null: a sum past 64 bits (hostile usage)
        pa.field("output_tokens", pa.int64()),
        pa.field("cost_usd", pa.float64()),  # null when one of the calls' cost is unknown
        # a run imported from a trace or an eval log: from where, and what its source lacked
        pa.field("imported_from", pa.string()),
        pa.field("partial", pa.string()),
        # the sum of the run's own sessions, and the gaps between them (_working.py)
        pa.field("working_s", pa.float64()),
        pa.field("waiting_s", pa.float64()),
    ]
)

ENVELOPE = ("type", "session", "offset", "timestamp")

# What Arrow's JSON reader extracts; every other field is skipped (and kept in `value`).
_READ_SCHEMA = pa.schema(
    [
        ("type", pa.string()),
        ("session", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp", pa.string()),
        ("stepId", pa.string()),
        ("eventId", pa.string()),
        ("name", pa.string()),
        ("kind", pa.string()),
        ("event", pa.string()),
        ("durationMs", pa.float64()),
        ("edited", pa.bool_()),
    ]
)
_PARSE_OPTIONS = pa_json.ParseOptions(
    explicit_schema=_READ_SCHEMA, unexpected_field_behavior="ignore"
)
_EVENT_TYPES = pa.array(["suspend", "resume"], pa.string())
_TERMINAL = pa.array(sorted(TERMINAL_TYPES), pa.string())
_EVENT_KINDS = frozenset({"suspend", "resume"})
_EMPTY = to_json({})  # the `params` of a run whose start records none
_NOTHING_YET = RunState()  # a run before its first entry (immutable: one for every run)
# what json.loads runs once past its checks, for a text known to hold one JSON value
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_SCAN_WINDOW = 1 << 22  # bytes searched for newlines at a time
_MAX_VIEW_BYTES = 1 << 31  # string views address their data with 32-bit offsets
_POWERS_OF_TEN = 10 ** np.arange(1, 19, dtype=np.int64)  # an int64 has up to 19 digits

_ESCAPED_SURROGATE = r"\\u[dD][89a-fA-F]"  # maybe a lone one: `decode_line` tells

IntArray = npt.NDArray[np.int64]


class Batch:
    """Complete journal lines of several runs, concatenated, and where each run's lines end."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        self._parts: list[bytes | bytearray] = []  # joined once, when `data` is first read
        self._sizes: list[int] = []
        self.size = 0  # len(data)
        self._ends: IntArray | None = None
        self._readable: bool | None = None
        self.versions: dict[str, str] = {}  # run id -> the storage token it was read at

    def add(self, run_id: str, journal: bytes, token: str | None = None) -> None:
        """Append a run's journal; a torn final line (no newline yet) is left out."""
        complete = journal[: journal.rfind(b"\n") + 1]  # the journal itself when it is complete
        if token is not None:
            self.versions[run_id] = token
        self.run_ids.append(run_id)
        self._sizes.append(len(complete))
        self._parts.append(complete)
        self.size += len(complete)
        self._ends = self._readable = None

    @property
    def data(self) -> bytearray:
        """Every run's complete lines, joined (in one copy: the floor's own join): the decoder
        may modify them, as it reads them once."""
        if len(self._parts) != 1 or not isinstance(self._parts[0], bytearray):
            self._parts = [bytearray().join(self._parts)]
        return self._parts[0]  # type: ignore[return-value]

    def line_ends(self) -> IntArray:
        """The position of every newline in `data`."""
        if self._ends is None:  # a window at a time: no mask as large as the data
            raw = np.frombuffer(self.data, dtype=np.uint8)
            windows = range(0, len(raw), _SCAN_WINDOW)
            found = [
                np.flatnonzero(raw[at : at + _SCAN_WINDOW] == ord("\n")) + at for at in windows
            ]
            self._ends = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        return self._ends

    def readable(self) -> bool:
        """Whether every line keeps the rules Arrow's reader does not check
        (`_strictly_readable`): told once, by a thread reading ahead (`_read.read_ahead`)
        or by the decoder."""
        if self._readable is None:
            self._readable = _strictly_readable(self.data, self.line_ends())
        return self._readable

    def counts(self, ends: IntArray) -> IntArray:
        """How many lines each run has, given `line_ends()`."""
        boundaries = np.cumsum(np.asarray(self._sizes, dtype=np.int64))
        below = np.searchsorted(ends, boundaries, side="left")
        return np.diff(below, prepend=0).astype(np.int64)

    def split(self) -> tuple[Batch, Batch]:
        """The first half of the runs and the second half."""
        half, cut = len(self.run_ids) // 2, sum(self._sizes[: len(self.run_ids) // 2])
        first, second = Batch(), Batch()
        for part, runs, sizes, data in (
            (first, self.run_ids[:half], self._sizes[:half], self.data[:cut]),
            (second, self.run_ids[half:], self._sizes[half:], self.data[cut:]),
        ):
            part.run_ids, part._sizes, part._parts, part.size = runs, sizes, [data], len(data)
            part.versions = {run: self.versions[run] for run in runs if run in self.versions}
        return first, second


def decode(batch: Batch, *, totals: bool = True) -> tuple[pa.Table, pa.Table]:
    """The entries table and the runs table of every run in `batch`, in `batch`'s order
    (`totals`: see `with_runs`)."""
    counts = batch.counts(batch.line_ends())
    return with_runs(_entries(batch), batch.run_ids, counts, totals=totals)


def with_runs(
    read: pa.Table, run_ids: Sequence[str], counts: IntArray, *, totals: bool = True
) -> tuple[pa.Table, pa.Table]:
    """The entries as read (any `copied` column is recomputed) with `copied`, and the runs
    table, for runs `run_ids` holding `counts` entries each, in that order. Without `totals`,
    the model-call totals (`llm_calls`, the tokens: 0; `cost_usd`: null) are not read, for a
    reader of the entries that never shows them (the OTLP export), or until the runs table is
    first read (`kx.load`, then `with_totals`): reading every model call is most of a decode's
    time."""
    if "copied" in read.column_names:
        read = read.drop_columns(["copied"])
    columns, fork_offsets, imported = _runs(read, run_ids, counts)
    # an entry before its fork's offset was copied from the source run
    cut = np.repeat(np.where(fork_offsets < 0, -1, fork_offsets), counts)
    offsets = read.column("offset").to_numpy() if read.num_rows else np.empty(0, np.int64)
    entries = read.append_column(ENTRY_SCHEMA.field("copied"), pa.array(offsets < cut))
    if totals:
        calls, given, taken, cost = run_totals(entries, list(run_ids))
        columns += [pa.array(calls), pa.array(given, pa.int64()), pa.array(taken, pa.int64())]
        columns.append(pa.array(cost, from_pandas=True))
    else:
        zeros = pa.array(np.zeros(len(run_ids), dtype=np.int64))
        columns += [zeros, zeros, zeros, pa.nulls(len(run_ids), pa.float64())]
    columns += [pa.array(found, pa.string()) for found in imported]
    columns += working_columns(entries, counts, columns[RUN_SCHEMA.get_field_index("duration_s")])
    return entries, pa.Table.from_arrays(columns, schema=RUN_SCHEMA)


def with_totals(entries: pa.Table, runs: pa.Table) -> pa.Table:
    """`runs` read without `totals` (see `with_runs`) with its `TOTALS` read from the model
    calls of `entries`: what `kx.load` leaves to the first reader of the runs table."""
    calls, given, taken, cost = run_totals(entries, runs.column("run_id").to_pylist())
    found = {
        "llm_calls": pa.array(calls),
        "input_tokens": pa.array(given, pa.int64()),
        "output_tokens": pa.array(taken, pa.int64()),
        "cost_usd": pa.array(cost, from_pandas=True),
    }
    arrays = [found.get(name, runs.column(name)) for name in RUN_SCHEMA.names]
    return pa.Table.from_arrays(arrays, schema=RUN_SCHEMA)


def _entries(batch: Batch) -> pa.Table:
    table = _fast_entries(batch)
    if table is not None:
        return table
    if len(batch.run_ids) == 1:
        return _python_entries(batch.run_ids[0], bytes(batch.data))
    first, second = batch.split()  # isolate the runs the fast path cannot take
    return pa.concat_tables([_entries(first), _entries(second)])


# -- the fast path -----------------------------------------------------------------------------


def _fast_entries(batch: Batch) -> pa.Table | None:
    """Entries via Arrow's JSON reader, or None when a line is not in canonical form."""
    ends = batch.line_ends()
    total = len(ends)
    if total == 0:
        return _READ_ENTRY_SCHEMA.empty_table()
    if len(batch.data) >= _MAX_VIEW_BYTES:
        return None
    counts = batch.counts(ends)
    starts = np.empty(total, dtype=np.int64)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    longest = int((ends - starts).max()) + 1
    if not batch.readable():
        return None
    parsed = _parsed(batch.data, longest)
    if parsed is None:
        return None
    if parsed.num_rows != total or any(
        parsed.column(name).null_count for name in ("type", "session", "offset", "timestamp")
    ):
        return None
    kinds = parsed.column("type")
    for kind, required in REQUIRED_TEXT.items():
        rows = pc.equal(kinds, kind)
        for keys in required:
            missing = [pc.is_null(parsed.column(key)) for key in keys]
            if pc.any(pc.and_(rows, functools.reduce(pc.and_, missing))).as_py():
                return None  # the general path raises as `Journal.parse` does
    offsets = parsed.column("offset").to_numpy()
    first_row = np.repeat(np.cumsum(counts) - counts, counts)
    if (offsets != np.arange(total) - first_row).any():
        return None
    try:
        timestamps = parsed.column("timestamp").cast(_TIMESTAMP)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    payload_starts = _payload_starts(batch.data, starts, ends, parsed)
    if payload_starts is None:
        return None
    is_step = pc.equal(kinds, "step")
    # an upstream suspend or resume names its event only with `name`
    event_name = pc.if_else(
        pc.is_in(kinds, _EVENT_TYPES), parsed.column("name"), pa.scalar(None, pa.string())
    )
    run_ids = pa.array(batch.run_ids, pa.string()).take(
        np.repeat(np.arange(len(batch.run_ids)), counts)
    )
    columns = [
        run_ids,
        parsed.column("offset"),
        parsed.column("session"),
        kinds,
        timestamps,
        pc.coalesce(parsed.column("stepId"), parsed.column("eventId"), event_name),
        parsed.column("name"),
        pc.if_else(is_step, pc.coalesce(parsed.column("kind"), "step"), parsed.column("kind")),
        pc.coalesce(parsed.column("event"), event_name),
        parsed.column("durationMs"),
        pc.fill_null(parsed.column("edited"), False),
        _values(batch.data, payload_starts, ends),
    ]
    return pa.Table.from_arrays(columns, schema=_READ_ENTRY_SCHEMA)


def _parsed(data: bytearray, longest: int) -> pa.Table | None:
    """The fields of `_READ_SCHEMA` of every line, or None if Arrow's reader refuses one."""
    options = pa_json.ReadOptions(block_size=max(1 << 20, 2 * longest))
    try:
        return pa_json.read_json(
            pa.BufferReader(pa.py_buffer(data)), read_options=options, parse_options=_PARSE_OPTIONS
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _strictly_readable(data: bytearray, ends: IntArray) -> bool:
    """Whether every line keeps the rules of `kassette._codec.decode_line` that Arrow's reader
    does not check (it skips the fields it ignores): strict UTF-8, arrays and objects nested at
    most `MAX_LINE_DEPTH` deep, no escaped lone surrogate. A line that may not is left to the
    general path, which decodes it with `decode_line` and raises where `Journal.parse` does.

    Each rule is checked over all of `data` at once: a newline is never inside a UTF-8
    sequence or an escape, so the data keeps them when every line does.
    """
    whole = pa.Array.from_buffers(
        pa.large_binary(),
        1,
        [None, pa.py_buffer(np.array([0, len(data)], np.int64)), pa.py_buffer(data)],
    )
    if not data.isascii():
        try:
            whole.cast(pa.large_string())  # validates UTF-8, surrogates and overlong forms
        except pa.ArrowInvalid:
            return False
    if pc.any(pc.match_substring_regex(whole, _ESCAPED_SURROGATE)).as_py():
        return False
    # a line with more than MAX_LINE_DEPTH brackets may be too deep: few, measured exactly
    many = np.flatnonzero(_brackets_per_line(data, ends) > MAX_LINE_DEPTH)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return not any(too_deep(bytes(data[starts[row] : ends[row]])) for row in many.tolist())


def _brackets_per_line(data: bytearray, ends: IntArray) -> IntArray:
    """How many `[` and `{` each line (ending at `ends`) holds, a window of `data` at a time."""
    raw = np.frombuffer(data, dtype=np.uint8)
    below = np.empty(len(ends), dtype=np.int64)  # brackets before each line's end
    seen = 0
    size = min(_SCAN_WINDOW, len(raw))
    folded, found = np.empty(size, dtype=np.uint8), np.empty(size, dtype=np.bool_)
    for at in range(0, len(raw), _SCAN_WINDOW):
        window = raw[at : at + _SCAN_WINDOW]
        width = len(window)
        # `[` (0x5b) and `{` (0x7b) differ in bit 0x20 alone: no other byte folds to 0x7b
        np.bitwise_or(window, 0x20, out=folded[:width])
        np.equal(folded[:width], 0x7B, out=found[:width])
        positions = np.flatnonzero(found[:width]) + at
        lines = slice(*np.searchsorted(ends, [at, at + width]).tolist())
        below[lines] = seen + np.searchsorted(positions, ends[lines])
        seen += len(positions)
    return np.diff(below, prepend=0)


def _payload_starts(
    data: bytearray, starts: IntArray, ends: IntArray, parsed: pa.Table
) -> IntArray | None:
    """Where each line's payload begins, if every line opens with the envelope in its
    canonical form, else None.

    A canonical line is `{"type":T,"session":S,"offset":O,"timestamp":TS` then `,` or `}`,
    with T and TS free of escapes and S and O plain integers (S from 1). It is told from the
    parsed values, whose lengths say where the envelope's fixed text must be. Arrow's reader
    has read every line as JSON (no key twice, integers in plain digits), so the fixed text is
    found there only if T and TS are written without escapes: an escape is longer than what it
    stands for, which would put the `"` that opens `","session":` inside T's string, where the
    unescaped `"` two bytes on would end it (and `session":` cannot follow a value), and the
    `"` after TS inside TS's string, escaped (so after a backslash). tests/explore/
    test_decode.py holds this to the regular expression that says it.
    """
    kinds, times = parsed.column("type"), parsed.column("timestamp")
    sessions = parsed.column("session").to_numpy()
    if (sessions < 1).any():
        return None
    digits = [  # offsets are 0, 1, ... (checked): neither is negative
        np.searchsorted(_POWERS_OF_TEN, numbers, side="right") + 1
        for numbers in (sessions, parsed.column("offset").to_numpy())
    ]
    type_ends = starts + 9 + pc.binary_length(kinds).to_numpy().astype(np.int64)
    session_ends = type_ends + 12 + digits[0]
    offset_ends = session_ends + 10 + digits[1]
    closing = offset_ends + 14 + pc.binary_length(times).to_numpy().astype(np.int64) + 1
    if (closing >= ends).any():  # `,` or `}` at `closing`, in the line (which ends in `}`)
        return None
    raw = np.frombuffer(data, dtype=np.uint8)
    words = np.ndarray((len(raw) - 7,), dtype=np.uint64, buffer=data, strides=(1,))
    for at, text in (
        (starts, b'{"type":"'),
        (type_ends, b'","session":'),
        (session_ends, b',"offset":'),
        (offset_ends, b',"timestamp":"'),
    ):
        for part, shift in ((text[:8], 0), (text[-8:], len(text) - 8)):
            if (words[at + shift] != np.frombuffer(part, dtype=np.uint64)[0]).any():
                return None
    after = raw[closing]  # and before it, TS's closing quote (not an escaped one)
    if (raw[closing - 1] != ord('"')).any() or (raw[closing - 2] == ord("\\")).any():
        return None
    if ((after != ord(",")) & (after != ord("}"))).any():
        return None
    # `,rest}` becomes `{rest}`; a bare `"}` (no payload) becomes `{}`.
    payload: IntArray = np.where(after == ord(","), closing, closing - 1)
    return payload


def _values(data: bytearray, starts: IntArray, ends: IntArray) -> pa.Array:
    """A string array of `data[starts[i]:ends[i]]`, each first byte overwritten with `{`.

    The slices become a string-view array over `data` (no copy), which one cast compacts
    into an ordinary string array. `data` is modified: it is only read once.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    raw[starts] = ord("{")
    lengths = ends - starts
    long = lengths > 12
    # A view is 16 bytes: the length, then either the bytes themselves (up to 12) or the
    # first 4 bytes, the buffer's index (0) and the offset into it.
    views = np.zeros((len(starts), 4), dtype=np.uint32)
    views[:, 0] = lengths
    rows = np.flatnonzero(long)
    if len(rows):  # the first 4 bytes read as one word at any byte (an unaligned view)
        words = np.ndarray((len(raw) - 3,), dtype=np.uint32, buffer=data, strides=(1,))
        views[rows, 1] = words[starts[rows]]
        views[rows, 3] = starts[rows]
    short = np.flatnonzero(~long)
    as_bytes = views.view(np.uint8)
    for index in range(12):  # a short payload (`{}`) is held in its view, zero-padded
        rows = short[index < lengths[short]]
        as_bytes[rows, 4 + index] = raw[starts[rows] + index]
    array = pa.Array.from_buffers(
        pa.string_view(), len(starts), [None, pa.py_buffer(views), pa.py_buffer(data)]
    )
    return array.cast(pa.large_string())


# -- the general path --------------------------------------------------------------------------


def _python_entries(run_id: str, data: bytes) -> pa.Table:
    """Entries of one run read line by line; corruption raises like `Journal.parse`."""
    columns: dict[str, list[Any]] = {name: [] for name in _READ_ENTRY_SCHEMA.names}
    lines = data.split(b"\n")[:-1]
    for number, line in enumerate(lines, start=1):
        entry = read_entry(line, run_id, number - 1, number)
        offset, session, kind = entry["offset"], entry["session"], entry["type"]
        step_id = next(
            (text for key in ("stepId", "eventId") if (text := _text(entry.get(key))) is not None),
            None,
        )
        name = _text(entry.get("name"))
        event_name = name if kind in ("suspend", "resume") else None
        columns["run_id"].append(run_id)
        columns["offset"].append(offset)
        columns["session"].append(session)
        columns["type"].append(kind)
        columns["timestamp"].append(_parse_time(entry.get("timestamp")))
        columns["step_id"].append(step_id if step_id is not None else event_name)
        columns["name"].append(name)
        columns["kind"].append(_text(entry.get("kind")) or ("step" if kind == "step" else None))
        event = _text(entry.get("event"))
        columns["event"].append(event if event is not None else event_name)
        columns["duration_ms"].append(_number(entry.get("durationMs")))
        columns["edited"].append(entry.get("edited") is True)
        payload = {key: value for key, value in entry.items() if key not in ENVELOPE}
        columns["value"].append(_json_text(payload))
    return pa.table(columns, schema=_READ_ENTRY_SCHEMA)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _parse_time(value: object) -> datetime | None:
    """A journal timestamp as `kassette._codec.parse_moment` reads it; None if it does not."""
    if not isinstance(value, str):
        return None
    try:
        return parse_moment(value)
    except ValueError:
        return None


# -- runs --------------------------------------------------------------------------------------


def _runs(entries: pa.Table, run_ids: Sequence[str], count: IntArray) -> pa.Table:
    """One row per run, its state folded from its entries by `kassette._state.reduce_entry`.

    Steps do not change a run's state, so only the other entries are decoded and folded.
    The counts are the ones `kassette._listing.folded_status` makes a `RunStatus` of (step
    entries, the highest session), counted here column-wise, and `started_at` is the time of
    `RunState.creation_offset`'s entry, as `created_at` is (tests/explore/test_frames.py's
    `test_runs_agree_with_run_status` holds the two to the same answers).
    """
    first = np.cumsum(count) - count
    present = count > 0
    sessions = np.zeros(len(count), dtype=np.int64)
    steps = np.zeros(len(count), dtype=np.int64)
    is_step = pc.equal(entries.column("type"), "step").to_numpy(zero_copy_only=False)
    if entries.num_rows:
        session_column = entries.column("session").to_numpy()
        sessions[present] = np.maximum.reduceat(session_column, first[present])
        steps[present] = np.add.reduceat(is_step.astype(np.int64), first[present])
    states = [_NOTHING_YET] * len(run_ids)
    first_starts: list[Any] = [None] * len(run_ids)
    folded = _folded(entries, first, is_step)
    for run, kind, offset, value, step_id in zip(*folded, strict=True):
        state = states[run]
        if kind == "start" and _unchanging_start(state, value):
            continue
        if kind in _EVENT_KINDS and offset and '"stepId"' not in value and "\\u" not in value:
            # all `reduce_entry` reads of it: its event id, which is its `step_id` when it
            # has no `stepId` (no text `"stepId"`, and no escape that could spell it)
            entry = {"type": kind, "offset": offset, "eventId": step_id}
        else:
            entry = _SCAN(value, 0)[0]  # json.loads(value): the text is one JSON object
            entry["type"], entry["offset"] = kind, offset
        if offset == 0:
            first_starts[run] = entry
        states[run] = reduce_entry(state, entry)
    starts, has_rows = first.tolist(), present.tolist()
    started_rows = [
        start + state.creation_offset if has else None
        for state, start, has in zip(states, starts, has_rows, strict=True)
    ]
    ended_rows = [
        start + state.ended_offset if state.ended_offset is not None else None
        for state, start in zip(states, starts, strict=True)
    ]
    timestamps = entries.column("timestamp")
    started = _take_times(timestamps, started_rows)
    ended = _take_times(timestamps, ended_rows)
    duration = pc.divide(
        pc.cast(pc.subtract(ended, started), pa.int64()), pa.scalar(1000.0, pa.float64())
    )
    fork_offsets = [_source_field(state, "fromOffset", int) for state in states]
    columns = [
        pa.array(run_ids, pa.string()),
        pa.array([state.status for state in states], pa.string()),
        pa.array([state.version for state in states], pa.string()),
        pa.array([_source_field(state, "runId", str) for state in states], pa.string()),
        pa.array(fork_offsets, pa.int64()),
        pa.array(sessions, pa.int64()),
        pa.array(steps, pa.int64()),
        started,
        ended,
        duration,
        pa.array([list(state.pending_events) for state in states], pa.list_(pa.string())),
        pa.array(
            [
                str(s.error) if s.error else source_ending(start, "error")
                for s, start in zip(states, first_starts, strict=True)
            ],
            pa.string(),
        ),
        pa.array(
            [_json_text(s.params) if s.params else _EMPTY for s in states],
            pa.large_string(),
        ),
        pa.array([_json_of(s.input, s.created_offset) for s in states], pa.large_string()),
        pa.array(
            [
                _json_of(s.result, s.ended_offset if s.status == "completed" else None)
                or source_ending(start, "output")
                for s, start in zip(states, first_starts, strict=True)
            ],
            pa.large_string(),
        ),
    ]
    forks = np.array([-1 if o is None else o for o in fork_offsets], dtype=np.int64)
    return columns, forks, imported_columns(first_starts)


def _folded(
    entries: pa.Table, first: IntArray, is_step: npt.NDArray[np.bool_]
) -> tuple[list[int], list[str], list[int], list[str], list[str | None]]:
    """The entries `reduce_entry` may fold into their run's state (the runs' first rows at
    `first`): each one's run (its row in the runs table), type, offset, `value` and
    `step_id`.

    Steps leave the state as it is, and so does every entry after a run's first terminal
    entry: neither is read.
    """
    control = np.flatnonzero(~is_step)
    owner = np.searchsorted(first, control, side="right") - 1
    kinds = entries.column("type").take(control)
    terminal = pc.is_in(kinds, _TERMINAL).to_numpy(zero_copy_only=False).astype(np.int64)
    ended_before = np.cumsum(terminal) - terminal  # terminal entries before each, in any run
    # a run's own: the count before it, less the count before its run's first such entry
    before_run = ended_before[np.searchsorted(owner, owner, side="left")]
    read = np.flatnonzero(ended_before == before_run)
    rows = control[read]
    return (
        owner[read].tolist(),
        kinds.take(read).to_pylist(),
        entries.column("offset").take(rows).to_pylist(),
        entries.column("value").take(rows).to_pylist(),
        entries.column("step_id").take(rows).to_pylist(),
    )


def _unchanging_start(state: RunState, value: str) -> bool:
    """Whether `reduce_entry` leaves `state` as it is for a `start` whose payload is `value`,
    told without decoding it: a start after the one that created the run changes only a
    version not known yet, or (with a `source` object) the fork source. `value` has no key
    `source` when its text has no `"source"` and no `\\u` escape (one could spell it)."""
    return (
        state.created_offset is not None
        and state.version is not None
        and '"source"' not in value
        and "\\u" not in value
    )


def _json_of(value: Any, recorded_at: int | None) -> str | None:
    """`value` as JSON text, if the entry that records it exists (a foreign writer's NaN too)."""
    return None if recorded_at is None else _json_text(value)


def _json_text(value: Any) -> str:
    """`value` as JSON text, `to_json`'s (`json_text`: a value decoded from JSON holds no
    cycle and is not too deep); a foreign writer's NaN or infinity as JSON readers spell it."""
    try:
        return json_text(value)
    except ValueError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _source_field(state: RunState, key: str, kind: type) -> Any:
    value = state.source.get(key) if state.source else None
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _take_times(timestamps: pa.ChunkedArray, rows: list[int | None]) -> pa.Array:
    if not rows:
        return pa.array([], _TIMESTAMP)
    return timestamps.take(pa.array(rows, pa.int64())).combine_chunks()
