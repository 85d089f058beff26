"""Live trees: re-read only the journals that changed, every interval, in a background thread.

A `Journals` remembers the storage token each run was read at. `refreshed` asks the storage
for each run's token now (for a `LocalStorage`, the file's size is enough: its token is the
journal's length, so no journal is read), reads and decodes only the runs whose token moved
and the runs that are new, and splices them into the tables it already has.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from kassette.explore._decode import decode
from kassette.explore._read import oldest_first, read_batches
from kassette.explore.frames import Journals
from kassette.storage import Storage
from kassette.storage.local import LocalStorage

__all__ = ["Watcher", "changed_runs", "refreshed"]


def changed_runs(journals: Journals) -> tuple[list[str], list[str]]:
    """The runs whose journal moved since `journals` read it (or that are new), and the runs
    that are gone."""
    storage = journals.storage
    assert storage is not None
    wanted = journals._run_ids
    listed = wanted if wanted is not None else list(storage.list_runs())
    known = journals._versions
    changed = [run_id for run_id in listed if _token(storage, run_id) != known.get(run_id)]
    gone = [run_id for run_id in known if run_id not in set(listed)]
    return changed, gone


def _token(storage: Storage, run_id: str) -> str | None:
    if isinstance(storage, LocalStorage):
        try:  # LocalStorage's token is the length of the journal's complete lines
            size = os.stat(storage.path / f"{run_id}.jsonl").st_size
        except OSError:
            return None
        if size == 0:
            return "0"
        with open(storage.path / f"{run_id}.jsonl", "rb") as file:
            file.seek(size - 1)
            if file.read(1) == b"\n":
                return str(size)
    snapshot = storage.read(run_id)
    return None if snapshot is None else snapshot.token


def refreshed(journals: Journals) -> Journals | None:
    """`journals` with the changed runs read again; None when nothing changed."""
    changed, gone = changed_runs(journals)
    if not changed and not gone:
        return None
    versions = {run: token for run, token in journals._versions.items() if run not in gone}
    decoded = []
    assert journals.storage is not None
    for batch in read_batches(journals.storage, changed, skipped=lambda _: None):
        versions.update(batch.versions)
        decoded.append(decode(batch))
    drop = pa.array([*changed, *gone], pa.string())
    tables = {}
    for index, name in enumerate(("entries", "runs")):
        old = journals.to_arrow(name)  # type: ignore[arg-type]
        kept = old.filter(pc.invert(pc.is_in(old.column("run_id"), drop)))
        tables[name] = pa.concat_tables([kept, *(parts[index] for parts in decoded)])
    runs = tables["runs"]
    if journals._run_ids is None:
        runs = oldest_first(runs)
    else:
        order = {run_id: i for i, run_id in enumerate(journals._run_ids)}
        ranks = [order.get(run_id, len(order)) for run_id in runs.column("run_id").to_pylist()]
        runs = runs.take(pa.array(sorted(range(len(ranks)), key=ranks.__getitem__), pa.int64()))
    entries = tables["entries"]
    return Journals(
        entries, runs, storage=journals.storage, run_ids=journals._run_ids, versions=versions
    )


class Watcher:
    """Calls `refresh()` every `interval` seconds until `stop()`; an exception stops it and
    goes to `failed` as text."""

    def __init__(
        self, refresh: Callable[[], None], failed: Callable[[str], None], interval: float
    ) -> None:
        self._refresh, self._failed, self._interval = refresh, failed, interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kassette-run-tree", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, 2 * self._interval))

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._refresh()
            except Exception as exc:  # shown in the widget: a thread has no caller
                self._failed(f"watching stopped: {type(exc).__name__}: {exc}")
                return
