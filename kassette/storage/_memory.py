"""MemoryStorage: journals in a dict, for tests and notebooks. Same guarantees, no durability."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import NoReturn

from kassette.errors import ConflictError, RunLockedError
from kassette.storage._base import Snapshot, validate_run_id

__all__ = ["MemoryStorage"]


class MemoryStorage:
    """Journals kept in this process's memory; thread-safe; tokens are byte lengths. Appends
    exclusively too (`kassette.storage.ExclusiveAppend`), and stamps a run with the number of
    writes it has had (`kassette.storage.RunStamps`)."""

    def __init__(self) -> None:
        self._journals: dict[str, bytes] = {}
        self._writes: dict[str, int] = {}  # run id -> writes so far: its stamp
        self._locked: set[str] = set()
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStorage({len(self._journals)} runs)"

    def __reduce__(self) -> NoReturn:
        # a copy in another process would take writes that never reach this one
        raise TypeError(
            "MemoryStorage lives in one process and cannot be pickled: use LocalStorage on a "
            "shared filesystem or S3Storage to run workflows in other processes"
        )

    def read(self, run_id: str) -> Snapshot | None:
        data = self._journals.get(validate_run_id(run_id))
        return None if data is None else Snapshot(data, str(data.rfind(b"\n") + 1))

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        validate_run_id(run_id)
        with self._mutex:
            current = self._journals.get(run_id)
            if token is None:
                if current is not None:
                    raise ConflictError(f"run {run_id} already exists", run_id=run_id)
                self._store(run_id, data)
                return str(len(data))
            if current is None or str(current.rfind(b"\n") + 1) != token:
                raise ConflictError(f"run {run_id} changed since it was read", run_id=run_id)
            updated = current[: int(token)] + data
            self._store(run_id, updated)
            return str(len(updated))

    def append_exclusive(self, run_id: str, plan: Callable[[bytes | None], bytes]) -> str:
        """Append what `plan` makes of the journal, under the lock every append takes."""
        validate_run_id(run_id)
        with self._mutex:
            current = self._journals.get(run_id)
            if current is None:
                plan(None)
                raise ConflictError(f"run {run_id} does not exist", run_id=run_id)
            kept = current[: current.rfind(b"\n") + 1]  # a torn final line is not content
            updated = kept + plan(kept)
            self._store(run_id, updated)
            return str(len(updated))

    def _store(self, run_id: str, data: bytes) -> None:
        self._journals[run_id] = data
        self._writes[run_id] = self._writes.get(run_id, 0) + 1

    def run_stamps(self, run_ids: Iterable[str] | None = None) -> dict[str, object]:
        """Each run's number of writes so far (`kassette.storage.RunStamps`)."""
        with self._mutex:
            wanted = sorted(self._writes) if run_ids is None else map(validate_run_id, run_ids)
            return {run_id: self._writes[run_id] for run_id in wanted if run_id in self._writes}

    def list_runs(self) -> Iterator[str]:
        yield from sorted(self._journals)

    @contextlib.contextmanager
    def lock(self, run_id: str, session: int) -> Iterator[None]:
        validate_run_id(run_id)
        with self._mutex:
            if run_id in self._locked:
                raise RunLockedError(f"run {run_id} is locked by another session", run_id=run_id)
            self._locked.add(run_id)
        try:
            yield
        finally:
            with self._mutex:
                self._locked.discard(run_id)


def _from_url(url: str) -> MemoryStorage:
    return MemoryStorage()
