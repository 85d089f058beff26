"""Runs from elsewhere: what an importer builds, how it is written, what it reports.

An importer (`_import_otlp`, `_import_inspect`) turns each unit of its source (a trace, an
Inspect sample's epoch) into an `ImportedRun`: an input, steps in order (model calls as
`journaled(client, ctx)` names them, tools named after the tool), what the source lacked, how
the run ended there. `write_run` journals it as one session: a `start` entry, then its steps,
and no terminal entry, so that `workflow.start(input, run_id=...)` replays it and continues
live after its last step. The `start` entry's `imported` field keeps what is no step: where it
came from (`from`, `key`), what is missing (`partial`), how it ended (`ended`), and the
source's own data (`data`: scores, ids). A step's `imported` field keeps the source's ids
(`traceId`, `spanId`, an event's id).

A run is written with one append that creates its journal, so it is there whole or not at
all; importing the same source again finds each run written by the same `key` and writes
nothing. Where the source lacks something a replay needs (a request's messages, an answer, a
tool's output), the run's steps stop before it: a replay is exact up to there and continues
live from there, and the run is *partial*, with the sentences saying what is missing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kassette._codec import encode, parse_json
from kassette.errors import ConflictError, InvalidArgumentError, StorageError
from kassette.storage import MemoryStorage, Storage, open_storage, validate_run_id

__all__ = [
    "IMPORTED",
    "ImportReport",
    "ImportedRun",
    "StepNames",
    "imported_columns",
    "run_id_of",
    "source_ending",
    "storage_of",
    "timestamp_of",
    "write_run",
]

IMPORTED = "imported"  # the start entry's (and a step's) field holding the import's data
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
StepNaming = Mapping[str, str] | Callable[[str], str | None] | None


@dataclass
class ImportedRun:
    """One run as an importer built it, before it is written."""

    run_id: str
    key: str  # what identifies the source unit: the same key is the same run
    source: str  # where it came from, as the runs frame's `imported_from` shows it
    started_at: str
    input: Any = None
    params: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    ended: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False  # a step was missing: no later step is journaled

    def add_step(self, step: dict[str, Any]) -> None:
        """Journal `step` (`stepId, name, result`, maybe `call`, `kind`, `durationMs`,
        `timestamp`, `imported`), unless the run stopped at a missing part."""
        if not self.stopped:
            self.steps.append(step)

    def lacks(self, what: str, *, stop: bool = True) -> None:
        """The source lacks `what`; with `stop`, no later step is journaled."""
        self.missing.append(what)
        self.stopped = self.stopped or stop

    def entries(self) -> list[dict[str, Any]]:
        imported: dict[str, Any] = {"from": self.source, "key": self.key}
        if self.missing:
            imported["partial"] = list(self.missing)
        if self.ended:
            imported["ended"] = self.ended
        if self.data:
            imported["data"] = self.data
        start: dict[str, Any] = {
            "type": "start",
            "session": 1,
            "offset": 0,
            "timestamp": self.started_at,
            "metadata": self.input,
        }
        if self.params is not None:
            start["params"] = self.params
        start[IMPORTED] = imported
        found = [start]
        for offset, step in enumerate(self.steps, start=1):
            at = step.pop("timestamp", None) or self.started_at
            found.append({"type": "step", "session": 1, "offset": offset, "timestamp": at, **step})
        return found


@dataclass(frozen=True)
class ImportReport:
    """What an import did. `run_ids`: every run the source gives, in order; `partial`: run id
    -> what the source lacked (those runs stop before it); `written`: the runs this call
    wrote (the others were there from an earlier import of the same source); `skipped`: run
    id -> why a run could not be written (a run of that id that holds something else)."""

    run_ids: tuple[str, ...] = ()
    partial: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    written: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [
            f"imported {len(self.run_ids)} runs ({len(self.written)} written, "
            f"{len(self.run_ids) - len(self.written) - len(self.skipped)} already there, "
            f"{len(self.partial)} partial)"
        ]
        for run_id, missing in self.partial.items():
            lines.append(f"partial {run_id}:")
            lines += [f"  - {what}" for what in missing]
        for run_id, why in self.skipped.items():
            lines.append(f"skipped {run_id}: {why}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON, as the CLI prints it."""
        return {
            "runIds": list(self.run_ids),
            "written": list(self.written),
            "partial": {run_id: list(missing) for run_id, missing in self.partial.items()},
            "skipped": dict(self.skipped),
        }


class Reporter:
    """Collects an import's report while its runs are written, a few at a time (a run's
    write waits on its fsync: several overlap), each whole; a context manager that waits for
    every write it started."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.run_ids: list[str] = []
        self.partial: dict[str, tuple[str, ...]] = {}
        self.outcomes: dict[str, str] = {}
        # a store in memory waits on nothing: its writes are this thread's own work
        threads = not isinstance(storage, MemoryStorage)
        self._pool = ThreadPoolExecutor(_WRITERS, "kassette-import") if threads else None
        self._batch: list[ImportedRun] = []
        self._pending: deque[Future[dict[str, str]]] = deque()
        self._limit = _WRITERS * 2  # batches built but not yet written: memory stays bounded

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._batch:  # the runs built before an error are written too
                self._submit()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def write(self, run: ImportedRun) -> None:
        self.run_ids.append(run.run_id)
        if run.missing:
            self.partial[run.run_id] = tuple(run.missing)
        self._batch.append(run)
        if len(self._batch) >= _BATCH:
            self._submit()

    def _submit(self) -> None:
        batch, self._batch = self._batch, []
        if self._pool is None:
            self.outcomes.update(_write_runs(self.storage, batch))
            return
        self._pending.append(self._pool.submit(_write_runs, self.storage, batch))
        while len(self._pending) > self._limit:
            self.outcomes.update(self._pending.popleft().result())

    def report(self) -> ImportReport:
        if self._batch:
            self._submit()
        while self._pending:
            self.outcomes.update(self._pending.popleft().result())
        written = tuple(r for r in self.run_ids if self.outcomes.get(r) == "written")
        skipped = {
            run_id: outcome
            for run_id, outcome in self.outcomes.items()
            if outcome not in ("written", "existing")
        }
        return ImportReport(tuple(self.run_ids), dict(self.partial), written, skipped)


_BATCH = 16  # runs a writer thread takes at a time
_WRITERS = 8  # threads writing runs: their fsyncs overlap


def _write_runs(storage: Storage, runs: list[ImportedRun]) -> dict[str, str]:
    return {run.run_id: write_run(storage, run) for run in runs}


def write_run(storage: Storage, run: ImportedRun) -> str:
    """Journal `run` whole, with one append that creates it: "written"; "existing" when an
    earlier import of the same source wrote it; else why it cannot be written."""
    if storage.read(run.run_id) is None:
        data = b"".join(encode(entry) for entry in run.entries())
        try:
            storage.append(run.run_id, data, token=None)
            return "written"
        except ConflictError:
            pass  # written meanwhile: by whom is read below
        except StorageError:
            if _recorded_key(storage, run.run_id) != run.key:
                raise
            return "written"  # an ambiguous failure: the write had landed
    if _recorded_key(storage, run.run_id) == run.key:
        return "existing"
    return f"run {run.run_id} exists and holds another run (not one imported from {run.key})"


def _recorded_key(storage: Storage, run_id: str) -> Any:
    """The import key in a run's first entry (None: no run, or not an imported one)."""
    snapshot = storage.read(run_id)
    first = snapshot.data.split(b"\n", 1)[0] if snapshot is not None else b""
    try:
        return parse_json(first).get(IMPORTED, {}).get("key")
    except (ValueError, AttributeError):
        return None


class StepNames:
    """Step ids as a workflow makes them: a counter per name (`draft`, `draft#2`), after the
    user's `step_names` (a mapping or a function from the name the import would give, a
    tool's name or a model call's method, to the step name their own code uses)."""

    def __init__(self, naming: StepNaming) -> None:
        if naming is not None and not (isinstance(naming, Mapping) or callable(naming)):
            raise InvalidArgumentError(
                f"step_names must be a mapping or a function of a name, not {naming!r}"
            )
        self._naming = naming
        self._counts: dict[str, int] = {}

    def name(self, default: str) -> str:
        """The step name `default` maps to: `#` and `/` (reserved in step names) become `_`."""
        named: str | None = default
        if isinstance(self._naming, Mapping):
            named = self._naming.get(default, default)
        elif self._naming is not None:
            named = self._naming(default) or default
        return re.sub(r"[#/]", "_", str(named)) or "step"

    def next_id(self, name: str) -> str:
        count = self._counts[name] = self._counts.get(name, 0) + 1
        return name if count == 1 else f"{name}#{count}"

    def given(self, step_id: str) -> None:
        """A step whose id the source gives (kassette's own traces): counted like the rest."""
        name = step_id.split("#")[0]
        self._counts[name] = max(self._counts.get(name, 0), _number(step_id))


def _number(step_id: str) -> int:
    head, _, tail = step_id.rpartition("#")
    return int(tail) if head and tail.isdigit() else 1


def run_id_of(prefix: str, *parts: object) -> str:
    """A valid run id from a source's ids: `prefix-part-part`, unsafe characters as `_`, and
    a hash of the original parts when that changed them or made them too long."""
    raw = "-".join(str(part) for part in parts)
    safe = _UNSAFE.sub("_", raw)
    candidate = f"{prefix}-{safe}"
    if safe != raw or len(candidate) > 200:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
        candidate = f"{prefix}-{safe[:150]}-{digest}"
    return validate_run_id(candidate)


def timestamp_of(nanos: int) -> str:
    """A journal timestamp (ISO 8601 UTC, milliseconds, `Z`) of nanoseconds since the epoch."""
    seconds, rest = divmod(nanos, 1_000_000_000)
    return f"{_second(seconds)}.{rest // 1_000_000:03d}Z"


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def storage_of(storage: Storage | str | os.PathLike[str]) -> Storage:
    """The storage to import into: a `Storage`, a URL, or a plain path (a `file:` store,
    created if missing, as an import creates runs)."""
    if isinstance(storage, os.PathLike) or (isinstance(storage, str) and ":" not in storage):
        storage = f"file:{os.fspath(storage)}"
    return open_storage(storage)


def imported_columns(starts: list[Any]) -> tuple[list[str | None], list[str | None]]:
    """The runs frame's `imported_from` and `partial` for each run's first start entry (a
    decoded entry, or None): where it was imported from, and what its source lacked (one
    line each)."""
    sources: list[str | None] = []
    partial: list[str | None] = []
    for start in starts:
        imported = start.get(IMPORTED) if isinstance(start, dict) else None
        if not isinstance(imported, dict):
            sources.append(None)
            partial.append(None)
            continue
        source = imported.get("from")
        sources.append(source if isinstance(source, str) else json.dumps(source))
        missing = imported.get("partial")
        partial.append("\n".join(map(str, missing)) if isinstance(missing, list) else None)
    return sources, partial


def source_ending(start: Any, part: str) -> str | None:
    """How an imported run ended in its source, for the runs frame of a run that has not
    ended here: its `error` (as `Name: message`) or its `output` (as JSON text)."""
    imported = start.get(IMPORTED) if isinstance(start, dict) else None
    ended = imported.get("ended") if isinstance(imported, dict) else None
    if not isinstance(ended, dict) or part not in ended:
        return None
    if part == "output":
        return json.dumps(ended["output"], ensure_ascii=False, separators=(",", ":"))
    error = ended["error"] if isinstance(ended["error"], dict) else {}
    return f"{error.get('name') or 'Error'}: {error.get('message') or ''} (in the source)"
