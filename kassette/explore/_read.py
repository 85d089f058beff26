"""Reading a storage's journals for explore: in batches, and the runs oldest first.

A batch holds about `BATCH_BYTES` of journal bytes (`LOAD_BATCH_BYTES` for `load`), so
`load` and `export` decode a store larger than memory a piece at a time (`export` never holds
more than a batch).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from kassette._lineage import creation_order
from kassette.errors import RunNotFoundError
from kassette.explore._decode import Batch
from kassette.storage import (
    LocalStorage,
    MemoryStorage,
    S3Storage,
    Storage,
    check_exists,
    open_storage,
)

__all__ = [
    "BATCH_BYTES",
    "LOAD_BATCH_BYTES",
    "batches_to_load",
    "existing_storage",
    "in_run_order",
    "oldest_first",
    "read_ahead",
    "read_batches",
    "unique_run_ids",
]

BATCH_BYTES = 64 << 20  # journal bytes decoded at a time
# what `load` decodes at a time: a batch's several passes over its bytes stay in the CPU's
# cache (a 10,000-run load takes a sixth less time than in batches of BATCH_BYTES)
LOAD_BATCH_BYTES = 16 << 20
_THREAD_SAFE = (LocalStorage, MemoryStorage, S3Storage)  # read ahead by `load`


def existing_storage(storage_or_url: Storage | str | os.PathLike[str]) -> Storage:
    """The storage a URL names; a plain path (`.kassette`) is a `file:` one. A `file:`
    directory that does not exist raises `StorageNotFoundError`, as the CLI does: reading it
    as an empty store would hide a wrong path."""
    if isinstance(storage_or_url, os.PathLike) or (
        isinstance(storage_or_url, str) and ":" not in storage_or_url
    ):
        storage_or_url = f"file:{os.fspath(storage_or_url)}"
    storage = open_storage(storage_or_url)
    check_exists(storage, str(storage_or_url))
    return storage


def oldest_first(runs: pa.Table) -> pa.Table:
    """The runs table in creation order: `started_at`, then fork depth, then run id."""
    run_ids = runs.column("run_id").to_pylist()
    started = pc.cast(runs.column("started_at"), pa.int64()).to_pylist()  # ms: no datetimes
    order = creation_order(
        dict(zip(run_ids, started, strict=True)),
        dict(zip(run_ids, runs.column("parent_run_id").to_pylist(), strict=True)),
    )
    row = {run_id: index for index, run_id in enumerate(run_ids)}
    return runs.take(pa.array([row[run_id] for run_id in order], pa.int64()))


def in_run_order(table: pa.Table, run_ids: list[str] | None) -> pa.Table:
    """`table`'s rows grouped by run, the runs in the order of `run_ids` (None: run id order,
    as a storage lists them), each run's rows in the order they were."""
    column = table.column("run_id")
    order = sorted(pc.unique(column).to_pylist()) if run_ids is None else run_ids
    ranks = pc.index_in(column, value_set=pa.array(order, pa.string()))
    if isinstance(ranks, pa.ChunkedArray):
        ranks = ranks.combine_chunks()
    if table.num_rows < 2 or pc.all(pc.greater_equal(ranks[1:], ranks[:-1])).as_py():
        return table  # already in order: what a load reads
    return table.take(pc.sort_indices(ranks))  # a stable sort: a run's rows keep their order


def unique_run_ids(run_ids: Iterable[str] | None) -> list[str] | None:
    """`run_ids` without repeats (a single id may be given as a string), or None for all."""
    if run_ids is None:
        return None
    return list(dict.fromkeys([run_ids] if isinstance(run_ids, str) else run_ids))


def batches_to_load(storage: Storage, run_ids: list[str] | None) -> Generator[Batch, None, None]:
    """What `load` decodes: `read_batches` of `LOAD_BATCH_BYTES`, read ahead from a storage of
    kassette's own, which may be read from another thread (another storage, say one on an
    SQLite connection, may not: it is read on the caller's thread)."""
    batches = read_batches(storage, run_ids, batch_bytes=LOAD_BATCH_BYTES)
    return read_ahead(batches) if isinstance(storage, _THREAD_SAFE) else batches


def read_ahead(batches: Iterator[Batch]) -> Generator[Batch, None, None]:
    """`batches`, the next one read, joined and its lines checked (`Batch.readable`) in a
    thread while the caller decodes this one: reading a file and numpy's and Arrow's kernels
    let go of the GIL. An error reading is raised where its batch would have been yielded."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_prepared, batches)
        while (batch := pending.result()) is not None:
            pending = pool.submit(_prepared, batches)
            yield batch


def _prepared(batches: Iterator[Batch]) -> Batch | None:
    batch = next(batches, None)
    if batch is not None:
        batch.readable()  # its journals joined and its lines checked, in the reading thread
    return batch


def read_batches(
    storage: Storage,
    run_ids: list[str] | None,
    *,
    skipped: Callable[[str], None] | None = None,
    batch_bytes: int | None = None,
    missing_ok: bool = False,
) -> Generator[Batch, None, None]:
    """The journals of `run_ids` (None: every run, in run id order) in batches of about
    `batch_bytes` bytes (default `BATCH_BYTES`).

    A named run that does not exist raises `RunNotFoundError` (with `missing_ok`, it is passed
    to `skipped`); a listed run that disappeared before it was read is passed to `skipped`.
    """
    batch = Batch()
    # sorted: the built-in backends list in run id order already, another backend need not
    for run_id in run_ids if run_ids is not None else sorted(storage.list_runs()):
        snapshot = storage.read(run_id)
        if snapshot is None:
            if run_ids is not None and not missing_ok:
                raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
            if skipped is not None:
                skipped(run_id)
            continue
        batch.add(run_id, snapshot.data, snapshot.token)
        if batch.size >= (batch_bytes or BATCH_BYTES):
            yield batch
            batch = Batch()
    if batch.run_ids:
        yield batch
