"""Journals as frames: every entry of every run as one table, and one row per run.

`load(storage)` reads the runs of a storage into a `Journals`: `.entries` (one row per entry:
its envelope, the columns worth filtering on, and its payload as JSON text in `value`) and
`.runs` (one row per run: status, version, fork source, counts, times, pending events,
error), as pandas frames or as Arrow tables with the fixed schemas `ENTRY_SCHEMA` and
`RUN_SCHEMA`, whose column types do not depend on what the journals hold.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kassette.errors import InvalidArgumentError
from kassette.explore._decode import ENTRY_SCHEMA, RUN_SCHEMA, Batch, decode, with_totals
from kassette.explore._export import ParquetSink, check_partition_by
from kassette.explore._llm import LLM_CALL_SCHEMA, llm_calls
from kassette.explore._read import (
    batches_to_load,
    existing_storage,
    oldest_first,
    unique_run_ids,
)
from kassette.explore._refresh import refreshed, stamps_before_reading
from kassette.explore._table import frame_html, frame_text
from kassette.storage import Storage

__all__ = ["ENTRY_SCHEMA", "LLM_CALL_SCHEMA", "RUN_SCHEMA", "Journals", "load"]

Table = Literal["entries", "runs", "llm_calls"]
# what `Journals.experiments` calls: set once, by kassette.explore._experiment_result, which
# builds on these frames (an experiment reads its branches through `load`), so this module
# cannot import it
EXPERIMENTS_READER: Callable[[Journals], dict[str, Any]] | None = None
_JSON_COLUMNS = ("params", "input", "result")  # JSON text: cut narrower than other columns


class Journals:
    """A snapshot of some runs of a storage, as an entries table and a runs table.

    Frames are built once, on first use, from the Arrow tables (sharing their memory where
    pandas can). `reload()` reads the same runs again; `refresh()` reads again only those
    whose journal changed (and new runs, when all runs were loaded).
    """

    def __init__(
        self,
        entries: pa.Table,
        runs: pa.Table,
        *,
        storage: Storage | None = None,
        run_ids: list[str] | None = None,
        stamps: dict[str, object] | None = None,
        totals: bool = True,
    ) -> None:
        self._tables: dict[str, pa.Table] = {"entries": entries, "runs": runs}
        # False: the runs' model-call totals are not read yet (`_decode.with_runs`)
        self._totals = totals
        self._frames: dict[str, pd.DataFrame] = {}
        self.storage = storage
        self._run_ids = run_ids  # the runs asked for; None: every run of the storage
        self._stamps = stamps or {}  # run id -> its storage stamp before it was read

    @property
    def entries(self) -> pd.DataFrame:
        """One row per entry: `run_id, offset, session, type, timestamp, step_id, name, kind,
        event, duration_ms, value` (the entry's fields other than the envelope, as JSON)."""
        return self._frame("entries")

    @property
    def runs(self) -> pd.DataFrame:
        """One row per run: `run_id, status, version, parent_run_id, fork_offset, sessions,
        steps, started_at, ended_at, duration_s, pending_events, error, params, input, result,
        llm_calls, input_tokens, output_tokens, cost_usd, imported_from, partial` (an imported
        run: where from, what its source lacked; its `error`/`result` as it ended there),
        in pandas' nullable dtypes (`string`, `Int64`,
        `Float64`, Arrow timestamps): every missing value is `pd.NA` and prints `<NA>`."""
        return self._frame("runs")

    @property
    def llm_calls(self) -> pd.DataFrame:
        """One row per journaled model call (a step whose result is a chat completion, a
        Responses API response, or a stream of either, as `kassette.integrations.openai`
        records them): `run_id, offset, step_id, model, input_tokens, output_tokens,
        total_tokens, duration_ms, copied` (a fork's copy of its source's call)."""
        return self._frame("llm_calls")

    @property
    def experiments(self) -> dict[str, Any]:
        """The experiments (`kx.experiment`) these runs hold, by name, reopened from the
        storage without running anything: name -> `kx.Experiment`."""
        if EXPERIMENTS_READER is None:  # pragma: no cover - kassette.explore registers it
            raise RuntimeError("import kassette.explore to read experiments")
        return EXPERIMENTS_READER(self)

    def sql(self, query: str) -> pd.DataFrame:
        """Run DuckDB SQL over the `runs`, `entries` and `llm_calls` tables (scanned in place,
        as Arrow) and return the result as a frame."""
        from kassette.explore._sql import sql

        return sql(self, query)

    @property
    def run_ids(self) -> list[str]:
        return self._tables["runs"].column("run_id").to_pylist()  # type: ignore[no-any-return]

    def to_arrow(self, table: Table = "entries") -> pa.Table:
        """The `entries` (default), `runs` or `llm_calls` table, with `ENTRY_SCHEMA`,
        `RUN_SCHEMA` or `LLM_CALL_SCHEMA`."""
        if table == "llm_calls" and table not in self._tables:
            self._tables[table] = llm_calls(self._tables["entries"])
        if table == "runs" and not self._totals:
            # what the runs' model calls spent is read from them when first asked for
            self._tables["runs"] = with_totals(self._tables["entries"], self._tables["runs"])
            self._totals = True
        if table not in self._tables:
            raise InvalidArgumentError(
                f"table must be 'entries', 'runs' or 'llm_calls', not {table!r}"
            )
        return self._tables[table]

    def to_parquet(
        self,
        directory: str | os.PathLike[str],
        *,
        partition_by_run: bool = False,
        partition_by: Iterable[str] | str | None = None,
    ) -> Path:
        """Write `directory/entries/` and `directory/runs/`, two Parquet datasets.

        Read them back with `pandas.read_parquet(directory / "entries")` or
        `pyarrow.dataset.dataset(...)`. With `partition_by` (entry columns, or `run_bucket`,
        `run_date`, `status` as `kx.export` takes them) the entries are a hive-partitioned
        dataset: the layout `kx.export(storage, out)` writes. `partition_by_run=True` is the
        deprecated spelling of `partition_by="run_id"`.
        """
        columns = partition_by
        if partition_by_run:
            warnings.warn(
                'to_parquet(partition_by_run=True) is deprecated: pass partition_by="run_id"',
                DeprecationWarning,
                stacklevel=2,
            )
            columns = ["run_id"] if partition_by is None else partition_by
        sink = ParquetSink(Path(directory), partition_by=check_partition_by(columns))
        sink.write(self._tables["entries"], self.to_arrow("runs"))
        sink.close(self.to_arrow("runs"))
        return Path(directory)

    def reload(self) -> Journals:
        """Deprecated: `refresh()` reads what changed (docs/reference.md, decision 13)."""
        warnings.warn(
            "Journals.reload() is deprecated; use Journals.refresh()",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.refresh()

    def refresh(self) -> Journals:
        """These journals with every run whose journal changed since it was read read again,
        new runs added (when all runs were loaded) and deleted ones dropped; `self` when
        nothing changed.

        Cheap when nothing changed: a storage that stamps its runs (`kassette.storage.
        RunStamps`: `LocalStorage` with one `stat` per run, `MemoryStorage`) is asked for the
        stamps and no journal is read; another storage's journals are read for their tokens.
        """
        if self.storage is None:
            raise InvalidArgumentError("these journals were not loaded from a storage")
        tables = self._tables
        found = refreshed(
            self.storage,
            self._run_ids,
            self._stamps,
            tables["entries"],
            tables["runs"],
            totals=self._totals,
        )
        if found is None:
            return self
        return Journals(
            found.entries,
            found.runs,
            storage=self.storage,
            run_ids=self._run_ids,
            stamps=found.stamps,
            totals=self._totals,
        )

    def __len__(self) -> int:
        return int(self._tables["runs"].num_rows)

    def __repr__(self) -> str:
        statuses = self._status_counts()
        summary = ", ".join(f"{count} {status}" for status, count in statuses)
        runs, entries = len(self), self._tables["entries"].num_rows
        return (
            f"<Journals: {runs} run{'s' if runs != 1 else ''}"
            f"{f' ({summary})' if summary else ''}, {entries} entries>"
        )

    def _repr_html_(self) -> str:
        """The runs table, one line per run: JSON and long text cut with an ellipsis (the
        whole value on hover), the first and last runs of a long table (pandas' display
        options), every missing value one mark; a wide table scrolls sideways."""
        return frame_html(self.runs, title=repr(self)[1:-1], json_columns=_JSON_COLUMNS)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """In IPython, as text: the summary line, then the runs table cut as in HTML."""
        printer.text(frame_text(self.runs, title=repr(self), json_columns=_JSON_COLUMNS))

    # -- for lineage, compare and the widgets ----------------------------------------------

    def _frame(self, table: Table) -> pd.DataFrame:
        frame = self._frames.get(table)
        if frame is None:
            mapper = _nullable if table != "entries" else None
            frame = self.to_arrow(table).to_pandas(types_mapper=mapper)
            self._frames[table] = frame
        return frame

    def entries_of(self, run_id: str) -> pd.DataFrame:
        """The entries of one run, in journal order, as a pandas frame."""
        entries = self._tables["entries"]
        rows = entries.filter(pc.equal(entries.column("run_id"), run_id))
        return rows.to_pandas()

    def subset(self, run_ids: Iterable[str]) -> Journals:
        """These journals narrowed to `run_ids` (runs not here are left out), with no new read."""
        run_ids = list(run_ids)
        wanted = pa.array(list(run_ids), pa.string())
        entries, runs = self._tables["entries"], self._tables["runs"]
        return Journals(
            entries.filter(pc.is_in(entries.column("run_id"), wanted)),
            runs.filter(pc.is_in(runs.column("run_id"), wanted)),
            storage=self.storage,
            run_ids=wanted.to_pylist(),
            stamps={run: self._stamps[run] for run in run_ids if run in self._stamps},
            totals=self._totals,
        )

    def _status_counts(self) -> Iterator[tuple[str, int]]:
        order = ("completed", "failed", "canceled", "suspended", "running")
        counts = pc.value_counts(self._tables["runs"].column("status")).to_pylist()
        found = {item["values"]: item["counts"] for item in counts}
        for status in (*order, *sorted(set(found) - set(order))):
            if status in found:
                yield status, found[status]


def _nullable(arrow_type: pa.DataType) -> pd.api.extensions.ExtensionDtype | None:
    """The pandas dtype whose missing value is `pd.NA`, for a column of the runs and llm_calls
    frames: a missing cell prints `<NA>` whatever the column's type (not NaN, None or NaT)."""
    if pa.types.is_timestamp(arrow_type):
        return pd.ArrowDtype(arrow_type)  # numpy's datetime64 has only NaT
    return _NULLABLE.get(arrow_type)


_NULLABLE: dict[pa.DataType, pd.api.extensions.ExtensionDtype] = {
    pa.int64(): pd.Int64Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
    pa.string(): pd.StringDtype(na_value=pd.NA),
    pa.large_string(): pd.StringDtype(na_value=pd.NA),
}


def load(
    storage_or_url: Storage | str | os.PathLike[str], run_ids: Iterable[str] | None = None
) -> Journals:
    """Read runs (all of them, or `run_ids` in that order) into a `Journals`.

    All runs are listed oldest first, as `kassette list` lists them: by `started_at`, then
    fork depth (a fork follows its source), then run id.

    Accepts a `Storage`, a storage URL (`file:PATH`, `memory:`, `s3://...`) or a plain path
    (`.kassette`, read as `file:.kassette`); a `file:` directory that does not exist raises
    `StorageNotFoundError`. Journals
    written by upstream TypeScript kassette load too. A run named in `run_ids` that does not
    exist raises `RunNotFoundError`; a corrupt journal raises `JournalCorruptionError`.
    """
    storage = existing_storage(storage_or_url)
    wanted = unique_run_ids(run_ids)
    stamped = stamps_before_reading(storage, wanted)
    stamps: dict[str, object] = {} if stamped is None else stamped
    decoded = []
    with closing(batches_to_load(storage, wanted)) as batches:  # no read left if a decode raises
        for batch in batches:
            if stamped is None:
                stamps.update(batch.versions)  # a token serves as a stamp
            decoded.append(decode(batch, totals=False))  # totals: when the runs are asked for
    if not decoded:
        decoded = [decode(Batch(), totals=False)]
    entries = pa.concat_tables([entries for entries, _ in decoded])
    runs = pa.concat_tables([runs for _, runs in decoded])
    if wanted is None:
        runs = oldest_first(runs)
    return Journals(entries, runs, storage=storage, run_ids=wanted, stamps=stamps, totals=False)
