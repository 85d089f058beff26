"""Refreshing journals: read again only the runs whose journal changed since they were read.

A `Journals` keeps each run's stamp from before it was read (`kassette.storage.read_stamps`: a
backend's own `RunStamps`, one `stat` per run on `LocalStorage`, else the journal's token).
`refreshed` asks for the stamps again; when they are the same (one dict comparison) nothing is
read. Otherwise it reads and decodes the runs whose stamp moved and the new ones, drops the
ones that are gone, and splices the rest into the tables it already has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from kassette.explore._decode import decode
from kassette.explore._read import in_run_order, oldest_first, read_batches
from kassette.storage import RunStamps, Storage, read_stamps

__all__ = ["Refreshed", "changed_runs", "refreshed", "stamps_before_reading"]


class Refreshed(NamedTuple):
    """The tables with the changed runs read again, and every run's stamp."""

    entries: pa.Table
    runs: pa.Table
    stamps: dict[str, object]


def stamps_before_reading(storage: Storage, run_ids: list[str] | None) -> dict[str, object] | None:
    """A `RunStamps` storage's stamps, taken before the journals are read (a journal that moves
    in between is read again by the next refresh); None for others, whose tokens, as read, are
    their stamps."""
    return storage.run_stamps(run_ids) if isinstance(storage, RunStamps) else None


def changed_runs(
    then: Mapping[str, object], now: Mapping[str, object]
) -> tuple[list[str], list[str]]:
    """The runs whose stamp moved or that are new, and the runs that are gone."""
    if now == then:
        return [], []
    changed = [run_id for run_id, stamp in now.items() if then.get(run_id, _NONE) != stamp]
    gone = [run_id for run_id in then if run_id not in now]
    return changed, gone


_NONE = object()  # no stamp: equal to none a storage gives


def refreshed(
    storage: Storage,
    run_ids: list[str] | None,
    stamps: Mapping[str, object],
    entries: pa.Table,
    runs: pa.Table,
    *,
    totals: bool = True,
) -> Refreshed | None:
    """The tables of `run_ids` (None: every run) with the runs that changed since `stamps`
    read again; None when nothing changed. `totals`: whether `runs` holds the model-call
    totals read (see `_decode.with_runs`), and so the runs read again."""
    now = read_stamps(storage, run_ids)
    changed, gone = changed_runs(stamps, now)
    if not changed and not gone:
        return None
    decoded = []
    for batch in read_batches(storage, changed, skipped=gone.append, missing_ok=True):
        decoded.append(decode(batch, totals=totals))
    fresh = {run_id: stamp for run_id, stamp in now.items() if run_id not in gone}
    drop = pa.array([*changed, *gone], pa.string())
    tables = []
    for index, old in enumerate((entries, runs)):
        kept = old.filter(pc.invert(pc.is_in(old.column("run_id"), drop)))
        tables.append(pa.concat_tables([kept, *(parts[index] for parts in decoded)]))
    new_entries, new_runs = tables
    if run_ids is None:
        return Refreshed(in_run_order(new_entries, None), oldest_first(new_runs), fresh)
    return Refreshed(in_run_order(new_entries, run_ids), in_run_order(new_runs, run_ids), fresh)
