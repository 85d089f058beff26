"""Export: a storage's runs written out for analysis as Parquet, JSON lines or CSV.

`export(storage, out, format=...)` writes two tables into the directory `out`: the entries
and the runs (oldest first), with the columns of `Journals.entries` and `Journals.runs`.
Parquet gives two datasets (`out/entries/`, `out/runs/`); JSON lines and CSV give
`entries.jsonl`/`runs.jsonl` or `entries.csv`/`runs.csv`, timestamps as ISO 8601 text. In JSON
lines the JSON columns (an entry's `value`, a run's `params`, `input` and `result`) are
embedded as JSON; in CSV they are JSON text. Entries are read and
written a batch at a time, so a store larger than memory exports too, with a progress bar on
stderr when that is a terminal. A directory that holds anything is written into only with
`overwrite=True`, which replaces the format's own output and leaves other files alone.
`format="otlp"` writes the runs as OpenTelemetry traces instead: `traces.jsonl`, one OTLP/JSON
request per batch of runs (`kassette.explore._otlp`, docs/otel.md).

With `partition_by`, Parquet entries are a hive-partitioned dataset written in one
`pyarrow.dataset.write_dataset` pass. An entry column partitions as it is; `run_bucket`,
`run_date` and `status` are computed per run (`RUN_PARTITIONS`), so a reader can skip runs by
a few hundred directories rather than one per run: Parquet's cost per file (about a
millisecond to write its footer and schema, plus a directory) makes a partition per run
several times slower than one file when runs are many.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.dataset as pa_dataset
import pyarrow.parquet as pq

from kassette.errors import InvalidArgumentError, JournalCorruptionError
from kassette.explore._bar import Progress
from kassette.explore._decode import ENTRY_SCHEMA, RUN_SCHEMA, Batch, decode
from kassette.explore._read import existing_storage, oldest_first, read_batches, unique_run_ids
from kassette.storage import Storage

__all__ = ["FORMATS", "RUN_PARTITIONS", "ParquetSink", "export"]

Format = Literal["parquet", "jsonl", "csv", "otlp"]
FORMATS: tuple[Format, ...] = ("parquet", "jsonl", "csv", "otlp")

# Partition columns computed from each entry's run (added to the entries dataset): name -> type
RUN_PARTITIONS = {
    # the first byte of md5(run_id), 0-255: DuckDB ('0x' || left(md5(run_id), 2))::INTEGER,
    # Spark conv(substring(md5(run_id), 1, 2), 16, 10): 256 buckets of about equal size
    "run_bucket": pa.int32(),
    "run_date": pa.string(),  # the UTC day the run started, YYYY-MM-DD
    "status": pa.string(),  # the run's status when exported
}


class Sink(Protocol):
    """Where an export writes: batches of entries (with the runs they belong to), then
    `close` with the whole runs table."""

    def write(self, entries: pa.Table, runs: pa.Table) -> None: ...

    def close(self, runs: pa.Table) -> list[Path]: ...


class ParquetSink:
    """`directory/entries/` and `directory/runs/`, one Parquet file each, written in batches
    (or, with `partition_by`, the entries as a hive-partitioned dataset: `entries/run_id=ID/`)."""

    def __init__(self, directory: Path, *, partition_by: list[str] | None = None) -> None:
        self.directory = directory
        self.partition_by = check_partition_by(partition_by)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._files: list[Path] = []

    def write(self, entries: pa.Table, runs: pa.Table) -> None:
        if self.partition_by:
            self.write_all([(entries, runs)])
        else:
            self._writer("entries", ENTRY_SCHEMA).write_table(entries)

    def write_all(
        self,
        tables: Iterable[tuple[pa.Table, pa.Table]],
        *,
        written: Callable[[], None] | None = None,
    ) -> None:
        """Every table of entries (each with the runs it holds) in one `write_dataset` pass:
        a file per partition. `written` is called as each file is finished."""
        names = self.partition_by or []
        schema = partition_schema(names)
        target = self.directory / "entries"
        batches = (
            batch
            for entries, runs in tables
            for batch in _path_safe(with_run_partitions(entries, runs, names), names).to_batches()
        )
        pa_dataset.write_dataset(
            batches,
            target,
            schema=schema,
            format="parquet",
            partitioning=pa_dataset.partitioning(
                pa.schema([schema.field(name) for name in names]), flavor="hive"
            ),
            existing_data_behavior="overwrite_or_ignore",
            basename_template=f"part-{len(self._files)}-{{i}}.parquet",
            max_partitions=1 << 30,  # a partition per run: as many as there are runs
            # runs arrive one after another, so a closed file stays closed; fewer open files
            # hold less buffered data (a larger limit measured no faster at 10,000 runs)
            max_open_files=512,
            max_rows_per_group=1 << 20,
            file_visitor=lambda file: self._wrote(Path(file.path), written),
        )

    def _wrote(self, path: Path, written: Callable[[], None] | None) -> None:
        self._files.append(path)  # a file, as the summary lists them: not the dataset's folder
        if written is not None:
            written()

    def close(self, runs: pa.Table) -> list[Path]:
        if not self.partition_by and "entries" not in self._writers:
            self._writer("entries", ENTRY_SCHEMA)
        self._writer("runs", RUN_SCHEMA).write_table(runs)
        for writer in self._writers.values():
            writer.close()
        return sorted(set(self._files))

    def _writer(self, name: str, schema: pa.Schema) -> pq.ParquetWriter:
        writer = self._writers.get(name)
        if writer is None:
            path = self.directory / name / "part-0.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = self._writers[name] = pq.ParquetWriter(path, schema)
            self._files.append(path)
        return writer


def partition_schema(names: Iterable[str]) -> pa.Schema:
    """`ENTRY_SCHEMA` and, after it, the run partition columns among `names`."""
    derived = [pa.field(name, RUN_PARTITIONS[name]) for name in names if name in RUN_PARTITIONS]
    return pa.schema([*ENTRY_SCHEMA, *derived])


def with_run_partitions(entries: pa.Table, runs: pa.Table, names: Iterable[str]) -> pa.Table:
    """`entries` with the run partition columns among `names`, each computed once per run in
    `runs` (which holds every run of `entries`) and spread to that run's entries."""
    derived = [name for name in names if name in RUN_PARTITIONS]
    if not derived:
        return entries
    run_ids = runs.column("run_id").combine_chunks()
    row = pc.index_in(entries.column("run_id"), value_set=run_ids)
    for name in derived:
        if name == "run_bucket":
            per_run = pa.array(
                [
                    hashlib.md5(run_id.encode(), usedforsecurity=False).digest()[0]
                    for run_id in run_ids.to_pylist()
                ],
                pa.int32(),
            )
        elif name == "run_date":
            per_run = pc.strftime(runs.column("started_at"), format="%Y-%m-%d")
        else:
            per_run = runs.column(name)
        field = pa.field(name, RUN_PARTITIONS[name])
        entries = entries.append_column(field, pc.take(per_run, row))
    return entries


_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_NAME_MAX = 255  # bytes in one path component, on the filesystems an export writes to


def _path_safe(entries: pa.Table, names: Iterable[str]) -> pa.Table:
    """`entries`, or `InvalidArgumentError` for a partition value that cannot be a hive
    directory: one whose `column=value` segment (values URI-encoded, as pyarrow writes them)
    is longer than a path component may be (a legal 300-character step name), or the literal
    `__HIVE_DEFAULT_PARTITION__`, which every hive reader reads back as null, merged with the
    entries that have none. Refused before that value is written; the export then removes
    what it wrote."""
    for name in names:
        column = entries.column(name)
        if not pa.types.is_string(column.type):
            continue
        for value in pc.unique(column).to_pylist():
            if value is None:
                continue
            segment = f"{name}={urllib.parse.quote(value, safe='')}"
            if value == _HIVE_NULL or len(segment.encode()) > _NAME_MAX:
                shown = value if len(value) <= 60 else f"{value[:57]}..."
                why = (
                    "hive readers read it as null"
                    if value == _HIVE_NULL
                    else f"its directory name would be longer than {_NAME_MAX} bytes"
                )
                raise InvalidArgumentError(
                    f"cannot partition by {name}: the value {shown!r} cannot be a hive "
                    f"partition ({why}); partition by another column, or export unpartitioned"
                )
    return entries


class _CsvSink:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._paths = {name: directory / f"{name}.csv" for name in ("entries", "runs")}
        self._writers = {
            name: pa_csv.CSVWriter(path, _as_text(schema.empty_table()).schema)
            for (name, path), schema in zip(
                self._paths.items(), (ENTRY_SCHEMA, RUN_SCHEMA), strict=True
            )
        }

    def write(self, entries: pa.Table, runs: pa.Table) -> None:
        self._writers["entries"].write_table(_as_text(entries))

    def close(self, runs: pa.Table) -> list[Path]:
        self._writers["runs"].write_table(_as_text(runs))
        for writer in self._writers.values():
            writer.close()
        return list(self._paths.values())


class _JsonLinesSink:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._paths = {name: directory / f"{name}.jsonl" for name in ("entries", "runs")}
        self._files: dict[str, IO[str]] = {
            name: path.open("w", encoding="utf-8")  # closed by close()
            for name, path in self._paths.items()
        }

    def write(self, entries: pa.Table, runs: pa.Table) -> None:
        self._files["entries"].writelines(_json_lines(entries))

    def close(self, runs: pa.Table) -> list[Path]:
        self._files["runs"].writelines(_json_lines(runs))
        for file in self._files.values():
            file.close()
        return list(self._paths.values())


def check_partition_by(partition_by: Iterable[str] | str | None) -> list[str] | None:
    """The columns to partition by (None: one file); a bad name raises before writing."""
    if partition_by is None:
        return None
    names = [partition_by] if isinstance(partition_by, str) else list(partition_by)
    allowed = [name for name in ENTRY_SCHEMA.names if name not in ("value", "timestamp")]
    for name in names:
        if name not in allowed and name not in RUN_PARTITIONS:
            raise InvalidArgumentError(
                f"partition_by takes entry columns ({', '.join(allowed)}) or columns of the"
                f" entry's run ({', '.join(RUN_PARTITIONS)}), not {name!r}"
            )
    if not names:
        raise InvalidArgumentError("partition_by needs at least one column")
    return list(dict.fromkeys(names))


def _as_text(table: pa.Table) -> pa.Table:
    """Timestamps as ISO 8601 text and lists as JSON text: what CSV and JSON lines hold."""
    columns = []
    for field in table.schema:
        column = table.column(field.name)
        if pa.types.is_timestamp(field.type):
            column = pc.strftime(column, format="%Y-%m-%dT%H:%M:%SZ")
        elif pa.types.is_list(field.type):
            column = pa.array(
                [json.dumps(item, ensure_ascii=False) for item in column.to_pylist()], pa.string()
            )
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


# columns that hold JSON text: JSON lines embed them as JSON values, not as quoted strings
JSON_COLUMNS = frozenset({"value", "params", "input", "result", "request", "tool_calls"})


def _json_lines(table: pa.Table) -> Iterator[str]:
    """One JSON object per row; the JSON text columns (`JSON_COLUMNS`) embedded, not quoted."""
    names = table.column_names
    text = _as_text(table)
    keys = [json.dumps(name) + ":" for name in names]
    columns = [
        table.column(name).to_pylist()
        if pa.types.is_list(table.schema.field(name).type)
        # lists stay lists in JSON; timestamps come from the ISO text
        else text.column(name).to_pylist()
        for name in names
    ]
    for row in zip(*columns, strict=True):
        parts = [
            key
            + (
                value
                if name in JSON_COLUMNS and value is not None
                else json.dumps(value, ensure_ascii=False)
            )
            for key, name, value in zip(keys, names, row, strict=True)
        ]
        yield "{" + ",".join(parts) + "}\n"


def export(
    storage_or_url: Storage | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    format: Format = "parquet",
    run_ids: Iterable[str] | None = None,
    progress: bool | None = None,
    overwrite: bool = False,
    partition_by: Iterable[str] | str | None = None,
    skip_corrupt: bool = False,
    include_content: bool = False,
) -> dict[str, Any]:
    """Write the entries and runs of every run (or of `run_ids`) into the directory `out`.

    `format` is "parquet", "jsonl", "csv" or "otlp" (OpenTelemetry traces in `traces.jsonl`,
    one OTLP/JSON request per bounded batch of runs: docs/otel.md; `include_content` adds
    prompts, answers and results to its spans). `out` must be
    missing or empty unless `overwrite`, which first removes that format's own output there
    (other files stay).
    `progress` draws a progress bar on stderr; None (the default) draws it when stderr is a
    terminal. With `partition_by` (Parquet only: entry columns such as `["run_id"]`, or
    `run_bucket`, `run_date`, `status`: see `RUN_PARTITIONS`), the entries are a
    hive-partitioned dataset (`entries/run_id=ID/part-0-0.parquet`), written in one pass, that
    DuckDB (`read_parquet(..., hive_partitioning=true)`), Spark and pyarrow read as they are;
    `partition_by="run_bucket"` writes at most 256 partitions, about as fast as one file,
    where a partition per run costs a file per run. Returns a summary: the format, the
    directory, the numbers of runs and entries, and the files written.

    A corrupt journal raises `JournalCorruptionError` and nothing is left in `out` (the files
    this export began are removed), unless `skip_corrupt`: then the readable runs are
    exported and the summary's `corrupt` lists the others (`runId`, `offset`, `message`).
    A partition value that cannot be a hive directory (too long for a path component, or
    `__HIVE_DEFAULT_PARTITION__`) raises `InvalidArgumentError`; any failure leaves nothing.
    """
    if format not in FORMATS:
        raise InvalidArgumentError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    partitions = check_partition_by(partition_by)
    if partitions and format != "parquet":
        raise InvalidArgumentError("partition_by needs format='parquet'")
    if include_content and format != "otlp":
        raise InvalidArgumentError("include_content needs format='otlp'")
    directory = Path(out)
    existed = directory.exists()
    _clear(directory, format, overwrite)
    storage = existing_storage(storage_or_url)
    wanted = unique_run_ids(run_ids)
    total = len(wanted) if wanted is not None else sum(1 for _ in storage.list_runs())
    sink = _sink(directory, format, partitions, include_content)
    show = sys.stderr.isatty() if progress is None else progress
    bar = Progress(total, sys.stderr if show else None)
    runs: list[pa.Table] = []
    entries = 0
    corrupt: list[JournalCorruptionError] | None = [] if skip_corrupt else None
    refused = False

    def decoded() -> Iterator[tuple[pa.Table, pa.Table]]:
        nonlocal entries
        for batch in read_batches(storage, wanted, skipped=lambda _: bar.advance(1)):
            for entry_table, run_table in _readable(batch, corrupt, totals=format != "otlp"):
                runs.append(run_table)
                entries += entry_table.num_rows
                yield entry_table, run_table
            bar.advance(len(batch.run_ids))

    try:
        if isinstance(sink, ParquetSink) and sink.partition_by:
            sink.write_all(decoded(), written=bar.wrote)
        else:
            for entry_table, run_table in decoded():
                sink.write(entry_table, run_table)
    except BaseException:  # corruption, a refused partition value, a full disk, Ctrl-C
        refused = True
        raise
    finally:
        table = pa.concat_tables(runs) if runs else RUN_SCHEMA.empty_table()
        files = sink.close(oldest_first(table) if wanted is None else table)
        bar.close()
        if refused:  # nothing of this export stays behind
            _remove_own(directory, format)
            if not existed:
                with contextlib.suppress(OSError):
                    directory.rmdir()
    summary: dict[str, Any] = {
        "format": format,
        "path": str(directory),
        "runs": table.num_rows,
        "entries": entries,
        "files": [str(path) for path in files],
    }
    if corrupt is not None:
        summary["corrupt"] = [
            {"runId": error.run_id, "offset": error.offset, "message": str(error)}
            for error in corrupt
        ]
    return summary


def _sink(
    directory: Path, format: Format, partitions: list[str] | None, include_content: bool
) -> Sink:
    if format == "otlp":
        from kassette.explore._otlp import OtlpSink

        return OtlpSink(directory, include_content=include_content)
    if format == "parquet":
        return ParquetSink(directory, partition_by=partitions)
    return _CsvSink(directory) if format == "csv" else _JsonLinesSink(directory)


def _readable(
    batch: Batch, corrupt: list[JournalCorruptionError] | None, *, totals: bool = True
) -> list[tuple[pa.Table, pa.Table]]:
    """`decode(batch)`; when `corrupt` is a list, the tables of the readable runs only, the
    errors of the others appended to it (the batch is halved until each corrupt run is alone).
    """
    try:
        return [decode(batch, totals=totals)]
    except JournalCorruptionError as error:
        if corrupt is None:
            raise
        if len(batch.run_ids) == 1:
            corrupt.append(error)
            return []
        first, second = batch.split()
        return _readable(first, corrupt, totals=totals) + _readable(second, corrupt, totals=totals)


def _clear(directory: Path, format: Format, overwrite: bool) -> None:
    """Refuse to export into a file, or into a directory that holds anything unless
    `overwrite`; then remove what an earlier export of `format` left there."""
    if directory.exists() and not directory.is_dir():
        raise InvalidArgumentError(f"cannot export into {directory}: it is not a directory")
    if not directory.is_dir() or not any(directory.iterdir()):
        return
    if not overwrite:
        raise InvalidArgumentError(
            f"cannot export into {directory}: it is not empty; --overwrite (overwrite=True in"
            " kx.export) replaces an earlier export there"
        )
    _remove_own(directory, format)


def _remove_own(directory: Path, format: Format) -> None:
    """Remove what an export of `format` writes into `directory`, and nothing else."""
    names = ("traces",) if format == "otlp" else ("entries", "runs")
    for name in names:
        suffix = "jsonl" if format == "otlp" else format
        own = directory / (name if format == "parquet" else f"{name}.{suffix}")
        if own.is_dir() and not own.is_symlink():
            shutil.rmtree(own)
        elif own.exists() or own.is_symlink():
            own.unlink()
