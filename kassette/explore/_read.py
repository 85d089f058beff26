"""Reading a storage's journals for explore: in batches, and the runs oldest first.

A batch holds about `BATCH_BYTES` of journal bytes, so `load` and `export` decode a store
larger than memory a piece at a time (`export` never holds more than a batch).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from kassette.errors import RunNotFoundError
from kassette.explore._decode import Batch
from kassette.lineage import creation_order
from kassette.storage import Storage, open_storage
from kassette.storage.local import check_exists

__all__ = ["BATCH_BYTES", "existing_storage", "oldest_first", "read_batches", "unique_run_ids"]

BATCH_BYTES = 64 << 20  # journal bytes decoded at a time


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


def unique_run_ids(run_ids: Iterable[str] | None) -> list[str] | None:
    """`run_ids` without repeats (a single id may be given as a string), or None for all."""
    if run_ids is None:
        return None
    return list(dict.fromkeys([run_ids] if isinstance(run_ids, str) else run_ids))


def read_batches(
    storage: Storage,
    run_ids: list[str] | None,
    *,
    skipped: Callable[[str], None] | None = None,
    batch_bytes: int | None = None,
) -> Iterator[Batch]:
    """The journals of `run_ids` (None: every run) in batches of about `batch_bytes` bytes
    (default `BATCH_BYTES`).

    A named run that does not exist raises `RunNotFoundError`; a listed run that disappeared
    before it was read is passed to `skipped`.
    """
    batch = Batch()
    for run_id in run_ids if run_ids is not None else list(storage.list_runs()):
        snapshot = storage.read(run_id)
        if snapshot is None:
            if run_ids is not None:
                raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
            if skipped is not None:
                skipped(run_id)
            continue
        batch.add(run_id, snapshot.data, snapshot.token)
        if len(batch.data) >= (batch_bytes or BATCH_BYTES):
            yield batch
            batch = Batch()
    if batch.run_ids:
        yield batch
