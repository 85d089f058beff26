"""kx.load: the entries and runs frames, their fixed schemas, and what they say about runs."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from conftest import RUNS, Scenario, populate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kassette import (
    JournalCorruptionError,
    LocalStorage,
    MemoryStorage,
    RunNotFoundError,
    kassette,
)
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from kassette.core import fork_run, read_journal, run_status
from kassette.errors import StorageNotFoundError
from kassette.explore import _decode, _read
from kassette.testing import FakeClock

ENTRY_DTYPES = {
    "run_id": "str",
    "offset": "int64",
    "session": "int64",
    "type": "str",
    "timestamp": "datetime64[ms, UTC]",
    "step_id": "str",
    "name": "str",
    "kind": "str",
    "event": "str",
    "duration_ms": "float64",
    "edited": "bool",
    "value": "str",
    "copied": "bool",
}
RUN_DTYPES = {
    "run_id": "string",
    "status": "string",
    "version": "string",
    "parent_run_id": "string",
    "fork_offset": "Int64",
    "sessions": "Int64",
    "steps": "Int64",
    "started_at": "timestamp[ms, tz=UTC][pyarrow]",
    "ended_at": "timestamp[ms, tz=UTC][pyarrow]",
    "duration_s": "Float64",
    "pending_events": "object",
    "error": "string",
    "params": "string",
    "input": "string",
    "result": "string",
    "llm_calls": "Int64",
    "input_tokens": "Int64",
    "output_tokens": "Int64",
    "cost_usd": "Float64",
    "imported_from": "string",
    "partial": "string",
    "working_s": "Float64",
    "waiting_s": "Float64",
}


def dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in frame.dtypes.items()}


def rebuilt_line(row: dict[str, Any]) -> bytes:
    """The journal line an entries row came from: envelope + payload, as kassette encodes."""
    stamp = row["timestamp"].timestamp()
    envelope = {
        "type": row["type"],
        "session": row["session"],
        "offset": row["offset"],
        "timestamp": format_timestamp(stamp),
    }
    return encode({**envelope, **json.loads(row["value"])})


# -- schemas ------------------------------------------------------------------------------------


def test_schemas_are_the_same_for_empty_and_mixed_stores(scenario: Scenario) -> None:
    empty = kx.load(MemoryStorage())
    mixed = kx.load(scenario.storage)
    for journals in (empty, mixed):
        assert journals.to_arrow("entries").schema == kx.ENTRY_SCHEMA
        assert journals.to_arrow("runs").schema == kx.RUN_SCHEMA
        assert dtypes(journals.entries) == ENTRY_DTYPES
        assert dtypes(journals.runs) == RUN_DTYPES
    assert len(empty) == 0 and empty.entries.empty and empty.runs.empty


@pytest.mark.parametrize("run_id", RUNS)
def test_each_run_alone_has_the_fixed_schema(scenario: Scenario, run_id: str) -> None:
    journals = kx.load(scenario.storage, run_ids=[run_id])
    assert journals.to_arrow("entries").schema == kx.ENTRY_SCHEMA
    assert journals.to_arrow("runs").schema == kx.RUN_SCHEMA
    assert dtypes(journals.entries) == ENTRY_DTYPES
    assert dtypes(journals.runs) == RUN_DTYPES
    assert journals.run_ids == [run_id]


def test_timestamps_are_utc_and_tz_aware(scenario: Scenario) -> None:
    entries = kx.load(scenario.storage, run_ids=["single"]).entries
    assert str(entries["timestamp"].dt.tz) == "UTC"
    assert entries["timestamp"].iloc[0] == pd.Timestamp("2026-01-01T00:00:00Z")


# -- entries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", RUNS)
def test_every_entry_is_a_row_that_rebuilds_its_line(scenario: Scenario, run_id: str) -> None:
    stored = scenario.storage.read(run_id)
    assert stored is not None
    rows = kx.load(scenario.storage, run_ids=[run_id]).to_arrow().to_pylist()
    assert b"".join(rebuilt_line(row) for row in rows) == stored.data


def test_columns_hold_the_fields_worth_filtering_on(scenario: Scenario) -> None:
    entries = kx.load(scenario.storage).entries
    steps = entries[entries["type"] == "step"]
    assert set(steps["kind"]) == {"step", "sleep", "parallel"}
    assert steps["step_id"].notna().all() and steps["name"].notna().all()
    timed = steps[steps["kind"] == "step"]
    assert timed["duration_ms"].notna().all() and (timed["duration_ms"] >= 0).all()
    assert "gather/left/fetch" in set(steps["step_id"])
    waits = entries[entries["type"].isin(["suspend", "resume"])]
    assert set(waits["step_id"]) == {"review"} and set(waits["event"]) == {"review"}
    others = entries[~entries["type"].isin(["step", "suspend", "resume"])]
    assert others[["step_id", "name", "kind", "event", "duration_ms"]].isna().all().all()
    retried = steps[(steps["run_id"] == "retried") & (steps["step_id"] == "call")]
    assert json.loads(retried["value"].iloc[0])["attempts"] == 2


def test_entries_are_in_run_then_offset_order(scenario: Scenario) -> None:
    entries = kx.load(scenario.storage).entries
    assert list(dict.fromkeys(entries["run_id"])) == sorted(RUNS)
    for _, rows in entries.groupby("run_id"):
        assert list(rows["offset"]) == list(range(len(rows)))


# -- runs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", RUNS)
def test_runs_agree_with_run_status(scenario: Scenario, run_id: str) -> None:
    row = kx.load(scenario.storage).runs.set_index("run_id").loc[run_id]
    status = run_status(scenario.storage, run_id)
    assert row["status"] == status.status
    assert row["version"] == status.version == "agent-v1"
    assert row["sessions"] == status.sessions
    assert row["steps"] == status.steps
    assert row["started_at"] == pd.Timestamp(status.created_at)  # a fork's at its own start
    assert list(row["pending_events"]) == list(status.pending_events)
    if status.source is None:
        assert pd.isna(row["parent_run_id"]) and pd.isna(row["fork_offset"])
    else:
        assert row["parent_run_id"] == status.source["runId"]
        assert row["fork_offset"] == status.source["fromOffset"]
    if status.error is None:
        assert pd.isna(row["error"])
    else:
        assert row["error"] == f"{status.error.name}: {status.error.message}"


def test_run_times(scenario: Scenario) -> None:
    runs = kx.load(scenario.storage).runs.set_index("run_id")
    single = runs.loc["single"]
    assert single["started_at"] == pd.Timestamp("2026-01-01T00:00:00Z")
    assert single["duration_s"] == 3.5  # plan, 1.5 s, implement, 2 s, complete
    assert single["ended_at"] - single["started_at"] == pd.Timedelta(seconds=3.5)
    suspended = runs.loc["suspended"]
    assert pd.isna(suspended["ended_at"]) and pd.isna(suspended["duration_s"])
    # a fork starts when it was forked, not when its copied prefix was first written
    forked = runs.loc["forked"]
    fork_start = read_journal(scenario.storage, "forked").entries[forked["fork_offset"]]
    assert fork_start["type"] == "start"
    assert forked["started_at"] == pd.Timestamp(fork_start["timestamp"])
    assert forked["started_at"] > single["ended_at"]


def test_statuses_and_counts(scenario: Scenario) -> None:
    runs = kx.load(scenario.storage).runs.set_index("run_id")
    assert runs["status"].to_dict() == {
        "canceled": "canceled",
        "failed": "failed",
        "forked": "completed",
        "parallel": "completed",
        "refork": "completed",
        "resumed": "completed",
        "retried": "completed",
        "single": "completed",
        "suspended": "suspended",
    }
    assert runs.loc["resumed", "sessions"] == 2
    assert runs.loc["parallel", "steps"] == 5  # plan, the block, two branch steps, implement
    assert runs.loc["failed", "error"] == "RuntimeError: 2 tests failed"


def test_repr_and_html(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    entries = journals.to_arrow().num_rows
    assert repr(journals) == (
        f"<Journals: 9 runs (6 completed, 1 failed, 1 canceled, 1 suspended), {entries} entries>"
    )
    page = journals._repr_html_()
    assert "<table" in page and "single" in page and "suspended" in page
    assert "style='white-space:nowrap'" in page and "overflow-x:auto" in page  # wide
    cells = re.findall(r"<td style='white-space:nowrap'(?: title='[^']*')?>(.*?)</td>", page)
    assert "\u2013" in cells  # an en dash: the one missing-value mark, whatever the column's type
    assert not {"NaN", "None", "<NA>", "NaT", "&lt;NA&gt;", ""} & set(cells)
    assert repr(kx.load(MemoryStorage())) == "<Journals: 0 runs, 0 entries>"


def test_the_runs_frame_prints_every_missing_value_as_na(scenario: Scenario) -> None:
    """Strings, numbers and times alike: `<NA>`, never NaN, None or NaT."""
    runs = kx.load(scenario.storage).runs
    suspended = runs.set_index("run_id").loc["suspended"]
    for column in ("ended_at", "duration_s", "error", "parent_run_id", "fork_offset"):
        assert suspended[column] is pd.NA, column
    printed = runs.to_string()
    assert "<NA>" in printed
    assert not re.search(r"\b(NaN|None|NaT|nan)\b", printed)
    page = runs.to_html()  # what Jupyter shows for a frame
    assert "&lt;NA&gt;" in page and not re.search(r"\b(NaN|None|NaT|nan)\b", page)
    calls = kx.load(scenario.storage).llm_calls
    assert all(str(dtype) != "float64" for dtype in calls.dtypes)


# -- selecting and reading ------------------------------------------------------------------


def test_run_ids_select_in_the_order_given(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage, run_ids=["resumed", "single", "resumed"])
    assert journals.run_ids == ["resumed", "single"]
    assert list(dict.fromkeys(journals.entries["run_id"])) == ["resumed", "single"]
    assert kx.load(scenario.storage, run_ids="single").run_ids == ["single"]


def oldest_first_store() -> MemoryStorage:
    """Run ids in the reverse of their creation order, and a fork made in the same
    millisecond as its source: `z-root`, then its fork `y-fork`, then `m-root`, then
    `a-late-fork` of `y-fork` (whose copied entries are older than `m-root`)."""
    storage, clock = MemoryStorage(), FakeClock()

    @kassette(storage=storage, clock=clock)
    def work(ctx: Any, value: int) -> int:
        return ctx.step("double", lambda: value * 2)  # type: ignore[no-any-return]

    work.start(1, run_id="z-root")
    work.fork("z-root", offset=1, new_run_id="y-fork")  # the same millisecond
    clock.advance(1)
    work.start(2, run_id="m-root")
    clock.advance(1)
    work.fork("y-fork", offset=2, new_run_id="a-late-fork")
    return storage


def test_all_runs_are_listed_oldest_first_a_fork_after_its_source() -> None:
    journals = kx.load(oldest_first_store())
    oldest_first = ["z-root", "y-fork", "m-root", "a-late-fork"]
    assert journals.run_ids == oldest_first
    assert list(journals.runs["run_id"]) == oldest_first
    assert journals.runs["started_at"].is_monotonic_increasing
    assert list(journals.runs["parent_run_id"].fillna("")) == ["", "z-root", "", "y-fork"]


def test_a_missing_run_is_not_found(scenario: Scenario) -> None:
    with pytest.raises(RunNotFoundError) as raised:
        kx.load(scenario.storage, run_ids=["single", "nope"])
    assert raised.value.run_id == "nope"


def test_load_takes_a_url_and_reload_reads_again(local_scenario: Scenario) -> None:
    storage = local_scenario.storage
    assert isinstance(storage, LocalStorage)
    journals = kx.load(f"file:{storage.path}")
    assert len(journals) == len(RUNS)
    local_scenario.workflow.fork("single", step="plan", new_run_id="late")
    assert len(journals) == len(RUNS)
    assert "late" in journals.refresh().run_ids
    with pytest.warns(DeprecationWarning, match="refresh"):
        assert "late" in journals.reload().run_ids


def test_a_stray_file_is_not_a_run_for_load_and_export(
    local_scenario: Scenario, tmp_path: Path
) -> None:
    """`good (copy).jsonl` beside the journals is no run id, so it is no run: `kx.load` and
    `kx.export` read the store as if it were not there."""
    storage = local_scenario.storage
    assert isinstance(storage, LocalStorage)
    before = kx.load(storage)
    first = sorted(storage.path.glob("*.jsonl"))[0]
    (storage.path / "good (copy).jsonl").write_bytes(first.read_bytes())
    after = kx.load(storage)
    assert list(after.runs["run_id"]) == list(before.runs["run_id"]) and len(after) == len(RUNS)
    summary = kx.export(storage, tmp_path / "out", format="jsonl")
    assert summary["runs"] == len(RUNS)


def test_load_takes_a_plain_path_and_refuses_a_missing_directory(
    local_scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = local_scenario.storage
    assert isinstance(storage, LocalStorage)
    assert len(kx.load(str(storage.path))) == len(RUNS)  # a plain path is a file: URL
    assert len(kx.load(storage.path)) == len(RUNS)  # and so is a Path
    monkeypatch.chdir(storage.path.parent)
    assert len(kx.load(storage.path.name)) == len(RUNS)
    for missing in (f"file:{tmp_path / 'nope'}", str(tmp_path / "nope"), tmp_path / "nope"):
        with pytest.raises(StorageNotFoundError, match="does not exist"):
            kx.load(missing)
        with pytest.raises(StorageNotFoundError):
            kx.export(missing, tmp_path / "out")
    assert not (tmp_path / "nope").exists() and not (tmp_path / "out").exists()
    assert len(kx.load("memory:")) == 0  # memory: is empty by design, not missing


def test_torn_tail_is_ignored(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    populate(storage)
    path = tmp_path / "single.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"type":"step","session":1,"offs')
    assert kx.load(storage, run_ids=["single"]).to_arrow().num_rows == whole.count(b"\n")
    path.write_bytes(b'{"type":"sta')  # nothing complete yet
    runs = kx.load(storage, run_ids=["single"]).runs
    assert runs["status"].tolist() == ["running"] and runs["sessions"].tolist() == [0]
    assert pd.isna(runs["started_at"].iloc[0])


@pytest.mark.parametrize(
    ("damage", "offset"),
    [
        (lambda lines: [*lines[:2], b"not json", *lines[3:]], 2),
        (lambda lines: [lines[0], lines[2], *lines[3:]], 1),  # offset gap
        (lambda lines: [lines[0], lines[0], *lines[1:]], 1),  # duplicate offset
        (lambda lines: [*lines[:1], b"", *lines[1:]], 1),  # a blank line
        (lambda lines: [*lines[:1], b'{"type":"step","offset":1}', *lines[2:]], 1),  # no session
        *(
            (
                lambda lines, bad=bad: [
                    *lines[:2],
                    lines[2][:-1] + b',"x":' + bad + b"}",
                    *lines[3:],
                ],
                2,
            )
            for bad in (
                b"[" * 10_000 + b"]" * 10_000,  # deeper than the journal's limit
                b"[" * 101 + b"]" * 101,  # just deeper
                b'"\xff"',  # invalid UTF-8
                b'"\xed\xa0\x80"',  # a surrogate, as bytes
                b'"\\udc00"',  # a lone surrogate, escaped
            )
        ),
    ],
)
def test_corruption_is_reported_with_run_and_offset(
    scenario: Scenario, damage: Any, offset: int
) -> None:
    stored = scenario.storage.read("single")
    assert stored is not None
    lines = stored.data.split(b"\n")[:-1]
    broken = MemoryStorage()
    for run_id in ("failed", "single", "suspended"):
        data = scenario.storage.read(run_id)
        assert data is not None
        body = b"".join(line + b"\n" for line in damage(lines)) if run_id == "single" else data.data
        broken.append(run_id, body, token=None)
    with pytest.raises(JournalCorruptionError) as raised:
        kx.load(broken)
    assert raised.value.run_id == "single" and raised.value.offset == offset


# -- the fast path and the general path agree ---------------------------------------------------


def general_path(storage: MemoryStorage | Any, run_ids: list[str]) -> pa.Table:
    tables = []
    for run_id in run_ids:
        stored = storage.read(run_id)
        complete = stored.data[: stored.data.rfind(b"\n") + 1]
        tables.append(_decode._python_entries(run_id, complete))
    return pa.concat_tables(tables)


def test_fast_and_general_paths_give_the_same_table(scenario: Scenario) -> None:
    batch = _decode.Batch()
    for run_id in sorted(RUNS):
        stored = scenario.storage.read(run_id)
        assert stored is not None
        batch.add(run_id, stored.data)
    fast = _decode._fast_entries(batch)
    assert fast is not None, "kassette's own journals must take the fast path"
    assert fast.equals(general_path(scenario.storage, sorted(RUNS)))


def test_a_foreign_writers_nan_loads_on_either_path() -> None:
    """A NaN in a payload (kassette's reader reads it, as JSON readers do) loads whether the
    line is in canonical form or not: it raised ValueError on the general path."""
    canonical = b'{"type":"step","session":1,"offset":0,"timestamp":"2026-01-01T00:00:00Z",'
    line = b'"stepId":"s","name":"s","result":{"t":NaN}}\n'
    storage = MemoryStorage()
    storage.append("canonical", canonical + line, token=None)
    storage.append("other", canonical.replace(b"{", b"{ ", 1) + line, token=None)
    values = kx.load(storage).to_arrow().column("value").to_pylist()
    assert values == ['{"stepId":"s","name":"s","result":{"t":NaN}}'] * 2


def test_lines_in_another_form_take_the_general_path(scenario: Scenario) -> None:
    reordered = MemoryStorage()
    for run_id in ("single", "failed"):
        stored = scenario.storage.read(run_id)
        assert stored is not None
        lines = [json.loads(line) for line in stored.data.splitlines()]
        if run_id == "single":  # spaces after separators, and the envelope last
            text = "".join(
                json.dumps(
                    {**{k: v for k, v in e.items() if k not in _decode.ENVELOPE}, **e}
                    | {k: e[k] for k in _decode.ENVELOPE}
                )
                + "\n"
                for e in lines
            )
            body = text.encode()
        else:
            body = stored.data
        reordered.append(run_id, body, token=None)
    assert _decode._fast_entries(_batch(reordered, ["single"])) is None
    loaded = kx.load(reordered).to_arrow()
    expected = kx.load(scenario.storage, run_ids=["failed", "single"]).to_arrow()
    assert loaded.drop(["value"]).equals(expected.drop(["value"]))
    for got, want in zip(
        loaded.column("value").to_pylist(), expected.column("value").to_pylist(), strict=True
    ):
        assert json.loads(got) == json.loads(want)


def _batch(storage: MemoryStorage, run_ids: list[str]) -> _decode.Batch:
    batch = _decode.Batch()
    for run_id in run_ids:
        stored = storage.read(run_id)
        assert stored is not None
        batch.add(run_id, stored.data)
    return batch


TEXT = st.text(st.characters(codec="utf-8"))  # a lone surrogate cannot be journaled
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    results=st.lists(JSON, min_size=1, max_size=4),
    name=st.text(st.characters(codec="utf-8", exclude_characters="#/"), min_size=1, max_size=8),
    kind=st.sampled_from(["step", "step\u00e9", 'st"ep', "x"]),
)
def test_any_payload_round_trips(results: list[Any], name: str, kind: str) -> None:
    """Whatever the payloads and names, both paths agree and each row rebuilds its line."""
    lines = [{"type": "start", "session": 1, "offset": 0, "timestamp": "2026-01-01T00:00:00.000Z"}]
    for index, result in enumerate(results, start=1):
        lines.append(
            {
                "type": kind,
                "session": 1,
                "offset": index,
                "timestamp": format_timestamp(1_767_225_600 + index),
                "stepId": f"{name}#{index}",
                "name": name,
                "result": result,
            }
        )
    storage = MemoryStorage()
    storage.append("r", b"".join(encode(line) for line in lines), token=None)
    table = kx.load(storage).to_arrow()
    assert table.drop_columns(["copied"]).equals(general_path(storage, ["r"]))
    stored = storage.read("r")
    assert stored is not None
    assert b"".join(rebuilt_line(row) for row in table.to_pylist()) == stored.data


def test_batches_split_a_large_store(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = kx.load(scenario.storage).to_arrow()
    monkeypatch.setattr("kassette.explore._read.LOAD_BATCH_BYTES", 2000)

    batches = list(_read.read_batches(scenario.storage, None, batch_bytes=2000))
    assert len(batches) > 2
    loaded = kx.load(scenario.storage).to_arrow()
    assert loaded.equals(whole) and loaded.column("run_id").num_chunks > 2


class ThreadNoting:
    """A storage of one's own, over a MemoryStorage: which threads read it."""

    def __init__(self, storage: MemoryStorage) -> None:
        self.storage, self.threads = storage, set[int]()

    def read(self, run_id: str) -> Any:
        self.threads.add(threading.get_ident())
        return self.storage.read(run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)


def test_only_kassettes_own_storages_are_read_in_another_thread(scenario: Scenario) -> None:
    """A storage of one's own may not be readable from another thread (one on an SQLite
    connection): `load` reads it on the caller's thread, and kassette's own ahead."""
    own = ThreadNoting(scenario.storage)  # type: ignore[arg-type]
    expected = kx.load(scenario.storage).to_arrow()
    assert kx.load(own).to_arrow().equals(expected)  # type: ignore[arg-type]
    assert own.threads == {threading.get_ident()}
    read: set[int] = set()
    original = MemoryStorage.read

    def noted(storage: MemoryStorage, run_id: str) -> Any:
        read.add(threading.get_ident())
        return original(storage, run_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MemoryStorage, "read", noted)
        assert kx.load(scenario.storage).to_arrow().equals(expected)
    assert threading.get_ident() not in read


def test_read_ahead_yields_the_batches_and_raises_where_they_would() -> None:
    storage = MemoryStorage()
    for run in range(5):
        storage.append(f"r{run}", b'{"type":"start","session":1,"offset":0}\n' * 40, token=None)
    read = list(_read.read_ahead(_read.read_batches(storage, None, batch_bytes=2000)))
    assert [batch.run_ids for batch in read] == [
        batch.run_ids for batch in _read.read_batches(storage, None, batch_bytes=2000)
    ]
    assert len(read) > 2 and bytes(read[0].data).count(b"\n") == 80
    ahead = _read.read_ahead(_read.read_batches(storage, ["r0", "r1", "gone"], batch_bytes=1))
    assert next(ahead).run_ids == ["r0"] and next(ahead).run_ids == ["r1"]
    with pytest.raises(RunNotFoundError):
        next(ahead)


def test_timestamps_in_other_iso_forms(scenario: Scenario) -> None:
    storage = MemoryStorage()
    stamps = [
        "2026-01-01T00:00:01Z",
        "2026-01-01T02:00:02.5+02:00",
        "2026-01-01T00:00:03.123456Z",
        "2026-01-01T00:00:04",
    ]
    body = b"".join(
        encode({"type": "note", "session": 1, "offset": i, "timestamp": stamp})
        for i, stamp in enumerate(stamps)
    )
    storage.append("times", body, token=None)
    got = kx.load(storage).to_arrow().column("timestamp").to_pylist()
    assert got == [
        datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 2, 500000, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 3, 123000, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC),
    ]


def test_a_fork_reports_the_version_of_the_code_that_continues_it() -> None:
    """A run started by v1 and forked by a v2 workflow is v2 to every reader."""
    storage, clock = MemoryStorage(), FakeClock()

    def body(ctx: Any, value: int) -> int:
        return ctx.step("double", lambda: value * 2)  # type: ignore[no-any-return]

    kassette(body, storage=storage, clock=clock, version="v1").start(1, run_id="root")
    v2 = kassette(body, storage=storage, clock=clock, version="v2")
    v2.fork("root", offset=1, new_run_id="fork")
    runs = kx.load(storage).runs.set_index("run_id")
    assert v2.status("fork").version == runs.loc["fork", "version"] == "v2"
    assert runs.loc["root", "version"] == "v1"


def test_a_fork_written_without_a_workflow_has_no_version_until_one_continues_it() -> None:
    """docs/explore.md's `version`: a `kassette fork` of a v1 run records no version of its
    own, so it has none (not v1's) until a workflow with a version continues it."""
    storage, clock = MemoryStorage(), FakeClock()

    def body(ctx: Any, value: int) -> int:
        return ctx.step("double", lambda: value * 2)  # type: ignore[no-any-return]

    kassette(body, storage=storage, clock=clock, version="v1").start(1, run_id="root")
    fork_run(storage, "root", offset=1, new_run_id="fork")
    runs = kx.load(storage).runs.set_index("run_id")
    assert run_status(storage, "fork").version is None and pd.isna(runs.loc["fork", "version"])
    kassette(body, storage=storage, clock=clock, version="v2").start(run_id="fork")
    runs = kx.load(storage).runs.set_index("run_id")
    assert run_status(storage, "fork").version == runs.loc["fork", "version"] == "v2"
    assert runs.loc["root", "version"] == "v1"


def waited_journal(start: float = 1.767e9) -> bytes:
    """Two sessions with a minute's wait for a review between them: 2.5 s of work, the
    wait, 2 s of work (the second session's step took 1 s before it was journaled)."""
    lines = [
        (0.0, 1, {"type": "start", "metadata": {}}),
        (2.0, 1, {"type": "step", "stepId": "a", "name": "a", "result": 1, "durationMs": 1500}),
        (2.5, 1, {"type": "suspend", "eventId": "review", "event": "review"}),
        (62.5, 2, {"type": "start", "metadata": {}}),
        (62.6, 2, {"type": "resume", "eventId": "review", "event": "review", "value": True}),
        (64.0, 2, {"type": "step", "stepId": "b", "name": "b", "result": 2, "durationMs": 1000}),
        (64.5, 2, {"type": "complete", "result": 2}),
    ]
    return b"".join(
        encode({**fields, "session": session, "offset": offset,
                "timestamp": format_timestamp(start + at)})
        for offset, (at, session, fields) in enumerate(lines)
    )  # fmt: skip


def test_working_counts_the_sessions_and_waiting_the_gaps_between_them() -> None:
    """`duration_s` is wall time; `working_s` the sum of the run's sessions and `waiting_s`
    the rest, so a review that waited a minute does not read as a minute of work."""
    storage = MemoryStorage()
    storage.append("waited", waited_journal(), token=None)
    fork_run(storage, "waited", offset=3, new_run_id="forked")  # copies session 1
    runs = kx.load(storage).runs.set_index("run_id")
    waited = runs.loc["waited"]
    assert waited["duration_s"] == 64.5
    assert waited["working_s"] == pytest.approx(4.5)  # 0 -> 2.5 s, then 62.5 -> 64.5 s
    assert waited["waiting_s"] == pytest.approx(60.0)
    forked = runs.loc["forked"]  # its own session only: the copied 2.5 s were its source's
    assert forked["working_s"] == 0.0 and pd.isna(forked["waiting_s"])  # open: no end yet
    assert dtypes(runs.reset_index())["working_s"] == "Float64"
