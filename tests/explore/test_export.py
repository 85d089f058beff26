"""Parquet round trips (Journals.to_parquet) and kx.export to Parquet, JSON lines and CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pa_dataset
import pyarrow.parquet as pq
import pytest
from conftest import RUNS, Scenario

from kassette import (
    InvalidArgumentError,
    JournalCorruptionError,
    LocalStorage,
    MemoryStorage,
    RunNotFoundError,
)
from kassette import explore as kx
from kassette._journal import encode, format_timestamp


def journal_bytes(rows: list[dict[str, Any]]) -> dict[str, bytes]:
    """Each run's journal rebuilt from entries rows (envelope + payload), as kassette encodes."""
    journals: dict[str, bytes] = {}
    for row in sorted(rows, key=lambda r: (r["run_id"], r["offset"])):
        envelope = {
            "type": row["type"],
            "session": row["session"],
            "offset": row["offset"],
            "timestamp": format_timestamp(row["timestamp"].timestamp()),
        }
        line = encode({**envelope, **json.loads(row["value"])})
        journals[row["run_id"]] = journals.get(row["run_id"], b"") + line
    return journals


def stored(scenario: Scenario) -> dict[str, bytes]:
    result = {}
    for run_id in scenario.storage.list_runs():
        snapshot = scenario.storage.read(run_id)
        assert snapshot is not None
        result[run_id] = snapshot.data
    return result


def test_parquet_round_trip_preserves_every_entry(scenario: Scenario, tmp_path: Path) -> None:
    journals = kx.load(scenario.storage)
    assert journals.to_parquet(tmp_path / "out") == tmp_path / "out"
    entries = pq.read_table(tmp_path / "out" / "entries")
    runs = pq.read_table(tmp_path / "out" / "runs")
    assert entries.schema == kx.ENTRY_SCHEMA and runs.schema == kx.RUN_SCHEMA
    assert entries.equals(journals.to_arrow("entries"))
    assert runs.equals(journals.to_arrow("runs"))
    assert journal_bytes(entries.to_pylist()) == stored(scenario)
    frame = pd.read_parquet(tmp_path / "out" / "entries")
    pd.testing.assert_frame_equal(frame, journals.entries)


def test_parquet_partitioned_by_run(scenario: Scenario, tmp_path: Path) -> None:
    journals = kx.load(scenario.storage)
    journals.to_parquet(tmp_path, partition_by="run_id")
    partitions = sorted(path.name for path in (tmp_path / "entries").iterdir())
    assert partitions == [f"run_id={run_id}" for run_id in sorted(RUNS)]
    dataset = pa_dataset.dataset(tmp_path / "entries", format="parquet", partitioning="hive")
    single = dataset.to_table(filter=pa_dataset.field("run_id") == "single")
    assert single.num_rows == journals.entries["run_id"].eq("single").sum()
    rows = dataset.to_table().to_pylist()
    for row in rows:
        row["run_id"] = str(row["run_id"])
    assert journal_bytes(rows) == stored(scenario)


def test_empty_store_gives_readable_empty_datasets(tmp_path: Path) -> None:
    kx.load(MemoryStorage()).to_parquet(tmp_path)
    assert pq.read_table(tmp_path / "entries").schema == kx.ENTRY_SCHEMA
    assert pq.read_table(tmp_path / "runs").num_rows == 0
    summary = kx.export(MemoryStorage(), tmp_path / "csv", format="csv")
    assert summary["runs"] == summary["entries"] == 0
    assert (tmp_path / "csv" / "entries.csv").read_text().startswith('"run_id","offset"')


def test_export_parquet_in_batches(
    local_scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = local_scenario.storage
    assert isinstance(storage, LocalStorage)
    monkeypatch.setattr("kassette.explore._read.BATCH_BYTES", 1500)  # several batches
    summary = kx.export(f"file:{storage.path}", tmp_path / "out", format="parquet")
    journals = kx.load(storage)
    assert summary == {
        "format": "parquet",
        "path": str(tmp_path / "out"),
        "runs": len(RUNS),
        "entries": journals.to_arrow().num_rows,
        "files": [
            str(tmp_path / "out" / "entries" / "part-0.parquet"),
            str(tmp_path / "out" / "runs" / "part-0.parquet"),
        ],
    }
    entries = pq.read_table(tmp_path / "out" / "entries")
    assert pq.ParquetFile(tmp_path / "out" / "entries" / "part-0.parquet").num_row_groups > 1
    assert entries.equals(journals.to_arrow("entries").combine_chunks()) or entries.to_pylist() == (
        journals.to_arrow("entries").to_pylist()
    )
    assert journal_bytes(entries.to_pylist()) == stored(local_scenario)
    # the same rows as load's runs table, whose order (oldest first) export does not promise
    assert sorted(
        pq.read_table(tmp_path / "out" / "runs").to_pylist(), key=lambda run: run["run_id"]
    ) == sorted(journals.to_arrow("runs").to_pylist(), key=lambda run: run["run_id"])


def test_export_jsonl(scenario: Scenario, tmp_path: Path) -> None:
    summary = kx.export(scenario.storage, tmp_path, format="jsonl", run_ids=["resumed", "failed"])
    assert summary["runs"] == 2
    entries = [json.loads(line) for line in (tmp_path / "entries.jsonl").read_text().splitlines()]
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [run["run_id"] for run in runs] == ["resumed", "failed"]
    assert runs[0]["pending_events"] == [] and runs[0]["started_at"] == "2026-01-01T00:00:10.500Z"
    assert runs[1]["error"] == "RuntimeError: 2 tests failed"
    frame = kx.load(scenario.storage, ["resumed", "failed"]).runs.set_index("run_id")
    for run in runs:  # JSON columns embedded as JSON, as an entry's value is
        for column in ("params", "input", "result"):
            text = frame.loc[run["run_id"], column]
            assert run[column] == (None if pd.isna(text) else json.loads(text))
    assert runs[0]["input"] is not None and not isinstance(runs[0]["input"], str)
    assert list(entries[0]) == kx.ENTRY_SCHEMA.names
    resume = next(e for e in entries if e["type"] == "resume")
    assert resume["value"] == {"eventId": "review", "event": "review", "value": {"approved": True}}
    for entry in entries:  # each rebuilds its journal line
        envelope = {k: entry[k] for k in ("type", "session", "offset", "timestamp")}
        line = encode({**envelope, **entry["value"]})
        snapshot = scenario.storage.read(entry["run_id"])
        assert snapshot is not None
        assert snapshot.data.splitlines(keepends=True)[entry["offset"]] == line


def test_export_csv(scenario: Scenario, tmp_path: Path) -> None:
    kx.export(scenario.storage, tmp_path, format="csv", run_ids=["suspended"])
    with (tmp_path / "entries.csv").open() as file:
        entries = list(csv.DictReader(file))
    with (tmp_path / "runs.csv").open() as file:
        runs = list(csv.DictReader(file))
    assert [e["type"] for e in entries] == ["start", "step", "step", "suspend"]
    assert entries[0]["timestamp"] == "2026-01-01T00:00:07.000Z"
    assert json.loads(entries[1]["value"])["result"] == {"goal": "parse", "steps": 2}
    assert runs[0]["status"] == "suspended" and json.loads(runs[0]["pending_events"]) == ["review"]
    frame = pd.read_csv(tmp_path / "entries.csv")
    assert len(frame) == 4


def test_progress_bar_on_stderr(scenario: Scenario, tmp_path: Path, capsys: Any) -> None:
    kx.export(scenario.storage, tmp_path, format="jsonl", progress=True)
    err = capsys.readouterr().err
    assert err.endswith(f"[{'#' * 30}]  9/9 runs\n")
    assert err.startswith("\rexport  [")
    kx.export(scenario.storage, tmp_path, format="jsonl", overwrite=True)  # not a terminal
    assert capsys.readouterr().err == ""


def test_a_non_empty_directory_needs_overwrite(scenario: Scenario, tmp_path: Path) -> None:
    kx.export(scenario.storage, tmp_path, format="jsonl")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "runs.jsonl").write_text("stale\n")
    with pytest.raises(InvalidArgumentError, match="not empty"):
        kx.export(scenario.storage, tmp_path, format="jsonl")
    assert (tmp_path / "runs.jsonl").read_text() == "stale\n"  # refused before writing

    summary = kx.export(scenario.storage, tmp_path, format="jsonl", overwrite=True)
    assert summary["runs"] == len(RUNS)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    runs = [json.loads(line)["run_id"] for line in lines]
    assert runs == kx.load(scenario.storage).run_ids  # oldest first, as Journals.runs


def test_overwrite_replaces_a_partitioned_parquet_export(
    scenario: Scenario, tmp_path: Path
) -> None:
    with pytest.warns(DeprecationWarning, match='pass partition_by="run_id"'):
        kx.load(scenario.storage).to_parquet(tmp_path, partition_by_run=True)  # old spelling
    assert any(path.name.startswith("run_id=") for path in (tmp_path / "entries").iterdir())
    kx.export(scenario.storage, tmp_path, overwrite=True)
    assert [path.name for path in (tmp_path / "entries").iterdir()] == ["part-0.parquet"]
    whole = kx.load(scenario.storage).to_arrow()
    assert pq.read_table(tmp_path / "entries").num_rows == whole.num_rows


def test_an_output_that_is_a_file_is_refused(scenario: Scenario, tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file")
    with pytest.raises(InvalidArgumentError, match="not a directory"):
        kx.export(scenario.storage, tmp_path / "out", overwrite=True)
    assert (tmp_path / "out").read_text() == "a file"


def test_export_arguments(scenario: Scenario, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        kx.export(scenario.storage, tmp_path, format="xlsx")  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())
    with pytest.raises(RunNotFoundError):
        kx.export(scenario.storage, tmp_path / "x", format="csv", run_ids=["nope"])


def test_arrow_tables_can_be_concatenated_across_loads(scenario: Scenario) -> None:
    first = kx.load(scenario.storage, run_ids=["single"]).to_arrow()
    empty = kx.load(MemoryStorage()).to_arrow()
    both = pa.concat_tables([first, empty])
    assert both.num_rows == first.num_rows


def test_a_partitioned_export_summary_lists_its_parquet_files(
    scenario: Scenario, tmp_path: Path
) -> None:
    summary = kx.export(scenario.storage, tmp_path / "out", partition_by="run_id")
    written = sorted(str(path) for path in (tmp_path / "out").rglob("*") if path.is_file())
    assert summary["files"] == written
    assert len(written) == len(RUNS) + 1  # a file per run's partition, and the runs table
    assert all(path.endswith(".parquet") for path in summary["files"])


def test_partitioned_export_reads_back_with_duckdb_and_pyarrow(
    scenario: Scenario, tmp_path: Path
) -> None:
    import duckdb

    summary = kx.export(scenario.storage, tmp_path / "out", partition_by=["run_id"])
    entries = tmp_path / "out" / "entries"
    assert sorted(path.name for path in entries.iterdir()) == [f"run_id={r}" for r in sorted(RUNS)]
    assert all(len(list(path.iterdir())) == 1 for path in entries.iterdir())  # a file per run
    assert summary["entries"] == kx.load(scenario.storage).to_arrow().num_rows
    pattern = str(entries / "**" / "*.parquet")
    counted = duckdb.sql(
        f"select run_id, count(*) as n from read_parquet('{pattern}', hive_partitioning=true) "
        "group by run_id order by run_id"
    ).fetchall()
    whole = kx.load(scenario.storage).entries
    assert counted == sorted(whole.groupby("run_id").size().items())
    dataset = pa_dataset.dataset(entries, format="parquet", partitioning="hive")
    assert dataset.to_table().num_rows == len(whole)
    by_type = kx.export(scenario.storage, tmp_path / "types", partition_by="type")
    assert {p.name for p in (tmp_path / "types" / "entries").iterdir()} >= {"type=step"}
    assert by_type["runs"] == len(RUNS)


def entry_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows of an entries table in ENTRY_SCHEMA's columns, by run and offset."""
    columns = table.select(kx.ENTRY_SCHEMA.names).to_pylist()
    rows = [tuple(row[name] for name in kx.ENTRY_SCHEMA.names) for row in columns]
    return sorted(rows, key=lambda row: (row[0], row[1]))


def md5_bucket(run_id: str) -> int:
    import hashlib

    return hashlib.md5(run_id.encode()).digest()[0]


@pytest.mark.parametrize("column", ["run_id", "run_bucket", "run_date", "status", "type"])
def test_every_partitioning_reads_back_the_single_files_rows(
    scenario: Scenario, tmp_path: Path, column: str
) -> None:
    import duckdb

    kx.export(scenario.storage, tmp_path / "one")
    single = entry_rows(pq.read_table(tmp_path / "one" / "entries"))
    summary = kx.export(scenario.storage, tmp_path / "hive", partition_by=column)
    entries = tmp_path / "hive" / "entries"
    assert summary["entries"] == len(single) and summary["runs"] == len(RUNS)
    # pyarrow.dataset (any hive reader) gives back the single file's rows, partition column
    # included; DuckDB too, with the partition column as a column it can filter on
    dataset = pa_dataset.dataset(entries, format="parquet", partitioning="hive")
    assert entry_rows(dataset.to_table()) == single
    pattern = str(entries / "**" / "*.parquet")
    names = ", ".join(f'"{name}"' for name in kx.ENTRY_SCHEMA.names)
    read = duckdb.sql(
        f"select {names} from read_parquet('{pattern}', hive_partitioning=true)"
    ).arrow()
    assert entry_rows(read.read_all().cast(kx.ENTRY_SCHEMA)) == single
    runs = kx.load(scenario.storage).runs
    values = {path.name.partition("=")[2] for path in entries.iterdir()}
    assert all(path.name.startswith(f"{column}=") for path in entries.iterdir())
    if column == "run_bucket":
        assert values == {str(md5_bucket(run_id)) for run_id in RUNS}
        # a reader without kassette finds a run's bucket with md5 alone
        found = duckdb.sql(
            f"select distinct run_id from read_parquet('{pattern}', hive_partitioning=true) "
            "where run_bucket = ('0x' || left(md5('suspended'), 2))::INTEGER"
        ).fetchall()
        assert ("suspended",) in found
    elif column == "run_date":
        assert values == set(runs["started_at"].dt.strftime("%Y-%m-%d"))
    elif column == "status":
        assert values == set(runs["status"])


def test_partitioned_export_of_a_store_larger_than_a_batch_writes_a_file_per_bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches stream into one write: a bucket that many batches feed is still one file."""
    import kassette.explore._read as read

    storage = LocalStorage(tmp_path / "store")
    scenario_storage = populate_runs(storage, 60)
    monkeypatch.setattr(read, "BATCH_BYTES", 2000)  # a few runs per batch
    summary = kx.export(scenario_storage, tmp_path / "hive", partition_by="run_bucket")
    buckets = list((tmp_path / "hive" / "entries").iterdir())
    assert len(buckets) == len({md5_bucket(f"r{n:03d}") for n in range(60)})
    assert all(len(list(bucket.iterdir())) == 1 for bucket in buckets)
    assert summary["runs"] == 60
    dataset = pa_dataset.dataset(tmp_path / "hive" / "entries", partitioning="hive")
    assert dataset.count_rows() == summary["entries"]


def populate_runs(storage: LocalStorage, runs: int) -> LocalStorage:
    """`runs` completed runs r000, r001, ... of a start, two steps and a complete each."""
    for number in range(runs):
        lines = [
            {"type": "start", "session": 1, "offset": 0, "metadata": {}},
            {"type": "step", "session": 1, "offset": 1, "stepId": "a", "name": "a", "result": 1},
            {"type": "step", "session": 1, "offset": 2, "stepId": "b", "name": "b", "result": 2},
            {"type": "complete", "session": 1, "offset": 3, "result": number},
        ]
        data = b"".join(
            encode({**line, "timestamp": format_timestamp(1_767_225_600.0 + number)})
            for line in lines
        )
        storage.append(f"r{number:03d}", data, token=None)
    return storage


def test_to_parquet_partitions_by_a_run_column_too(scenario: Scenario, tmp_path: Path) -> None:
    journals = kx.load(scenario.storage)
    journals.to_parquet(tmp_path, partition_by=["status", "run_bucket"])
    statuses = {path.name for path in (tmp_path / "entries").iterdir()}
    assert statuses == {f"status={status}" for status in journals.runs["status"]}
    dataset = pa_dataset.dataset(tmp_path / "entries", format="parquet", partitioning="hive")
    table = dataset.to_table()
    assert entry_rows(table) == entry_rows(journals.to_arrow())
    buckets = {row["run_id"]: row["run_bucket"] for row in table.to_pylist()}
    assert buckets == {run_id: md5_bucket(run_id) for run_id in RUNS}


def test_partitioned_export_shows_progress_with_files_written(
    scenario: Scenario, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kx.export(scenario.storage, tmp_path / "hive", partition_by="run_id", progress=True)
    drawn = capsys.readouterr().err
    assert f"{len(RUNS)}/{len(RUNS)} runs, {len(RUNS)} files written" in drawn
    assert drawn.endswith("\n")


def test_partition_by_is_checked_before_writing(scenario: Scenario, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="partition_by takes entry columns"):
        kx.export(scenario.storage, tmp_path / "a", partition_by=["value"])
    with pytest.raises(
        InvalidArgumentError, match=r"run_bucket, run_date, status\), not 'started'"
    ):
        kx.export(scenario.storage, tmp_path / "d", partition_by=["run_id", "started"])
    with pytest.raises(InvalidArgumentError, match="not 'bucket'"):
        kx.load(scenario.storage).to_parquet(tmp_path / "e", partition_by="bucket")
    with pytest.raises(InvalidArgumentError, match="format='parquet'"):
        kx.export(scenario.storage, tmp_path / "b", format="csv", partition_by="run_id")
    with pytest.raises(InvalidArgumentError, match="at least one"):
        kx.export(scenario.storage, tmp_path / "c", partition_by=[])
    assert not any(tmp_path.iterdir())


def corrupted(scenario: Scenario, *broken: str) -> MemoryStorage:
    """The scenario's runs, with line 2 (offset 1) of each run in `broken` made garbage."""
    storage = MemoryStorage()
    for run_id, data in stored(scenario).items():
        if run_id in broken:
            lines = data.splitlines(keepends=True)
            data = b"".join([lines[0], b"#garbage\n", *lines[2:]])
        storage.append(run_id, data, token=None)
    return storage


@pytest.mark.parametrize("format", ["parquet", "jsonl", "csv"])
def test_a_corrupt_run_stops_an_export_and_leaves_nothing(
    scenario: Scenario, tmp_path: Path, format: Any
) -> None:
    storage = corrupted(scenario, "failed")
    with pytest.raises(JournalCorruptionError) as raised:
        kx.export(storage, tmp_path / "out", format=format)
    assert (raised.value.run_id, raised.value.offset) == ("failed", 1)
    assert not (tmp_path / "out").exists()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine")
    with pytest.raises(JournalCorruptionError):
        kx.export(storage, tmp_path / "kept", format=format, overwrite=True)
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["notes.txt"]


def test_skip_corrupt_exports_the_readable_runs_and_names_the_others(
    scenario: Scenario, tmp_path: Path
) -> None:
    storage = corrupted(scenario, "failed", "single")
    summary = kx.export(storage, tmp_path, format="jsonl", skip_corrupt=True)
    assert sorted((c["runId"], c["offset"]) for c in summary["corrupt"]) == [
        ("failed", 1),
        ("single", 1),
    ]
    assert all("line 2" in c["message"] for c in summary["corrupt"])
    runs = [
        json.loads(line)["run_id"] for line in (tmp_path / "runs.jsonl").read_text().splitlines()
    ]
    assert sorted(runs) == sorted(set(RUNS) - {"failed", "single"})
    assert summary["runs"] == len(RUNS) - 2
    clean = kx.export(scenario.storage, tmp_path / "clean", skip_corrupt=True)
    assert clean["corrupt"] == [] and clean["runs"] == len(RUNS)


@pytest.mark.parametrize(
    "bad",
    ["s" * 300, "é" * 100, "__HIVE_DEFAULT_PARTITION__"],
    ids=["300 characters", "100 non-ASCII characters", "hive's null marker"],
)
@pytest.mark.parametrize("out_exists", [False, True])
def test_a_partition_value_that_cannot_be_a_directory_is_refused_and_nothing_is_left(
    tmp_path: Path, bad: str, out_exists: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Adversarial 4 and 5: a legal 300-character step name raised a raw `OSError` (name too
    long) and left a half-written dataset; a step named `__HIVE_DEFAULT_PARTITION__` read
    back as null, merged with the entries that have no name."""
    from kassette._cli import main
    from kassette.core import open_run

    storage = LocalStorage(tmp_path / "store")
    for run_id in ("a", "b", "c"):
        with open_run(storage, run_id) as run:
            run.record("fine", lambda: 1)
            if run_id == "c":
                run.record(bad, lambda: 2)
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    with pytest.raises(InvalidArgumentError, match="cannot be a hive partition"):
        kx.export(storage, out, partition_by="name")
    assert (sorted(out.iterdir()) == []) if out_exists else not out.exists()
    argv = ["--storage", f"file:{storage.path}", "export", str(out), "--partition-by", "name"]
    assert main(argv) == 2
    assert json.loads(capsys.readouterr().err)["error"]["type"] == "InvalidArgumentError"
    assert (sorted(out.iterdir()) == []) if out_exists else not out.exists()
    summary = kx.export(storage, out, partition_by="run_id", overwrite=True)  # others still do
    assert summary["entries"] == len(kx.load(storage).entries)
