"""The storage protocol and its capabilities, the run-id and object-name rules, and the URL
scheme registry (`kassette.storage` re-exports them)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kassette.errors import InvalidArgumentError

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
MAX_OBJECT_NAME = 1000  # characters; S3 keys hold 1024 bytes with the prefix


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is a safe file and object name, else raise before any I/O."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidArgumentError(
            f"invalid run id {run_id!r}: use 1-200 of A-Z a-z 0-9 . _ - , starting with a letter"
            " or digit"
        )
    return run_id


def is_run_id(name: str) -> bool:
    """Whether `name` is a valid run id: a backend lists only such names as runs, so a stray
    file or key (`retry-fix copy.jsonl`) is never a run, on any backend."""
    return _RUN_ID.fullmatch(name) is not None


def validate_object_name(name: object) -> str:
    """Return `name` if it is a relative `/`-separated object name that cannot escape or alias
    its run's place (no empty, `.` or `..` segments, no `\\` or control characters), else raise
    `InvalidArgumentError` before any I/O."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"invalid object name {name!r}: not a string")
    problem = None
    if not name or len(name) > MAX_OBJECT_NAME:
        problem = f"use 1-{MAX_OBJECT_NAME} characters"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        problem = "empty, '.' and '..' segments are not allowed"
    elif any(ord(char) < 0x20 or char in "\\\x7f" for char in name):
        problem = "control characters and '\\' are not allowed"
    if problem is not None:
        raise InvalidArgumentError(f"invalid object name {name!r}: {problem}")
    return name


@dataclass(frozen=True)
class Snapshot:
    """A journal's bytes as read, and the opaque token an append must present to follow it."""

    data: bytes
    token: str


@runtime_checkable
class Storage(Protocol):
    """What a journal backend must do. `kassette.testing.StorageConformance` checks it."""

    def read(self, run_id: str) -> Snapshot | None:
        """The run's journal, or None when the run does not exist."""
        ...

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        """Append whole lines atomically if the journal is still at `token`; return the new token.

        `token=None` creates the run and fails if it exists. A journal that moved on raises
        `ConflictError`; I/O failures raise `StorageError`. A torn final line left by a crash
        is not content: the append replaces it.
        """
        ...

    def list_runs(self) -> Iterator[str]:
        """Every run id, in a stable order."""
        ...

    def lock(self, run_id: str, session: int) -> AbstractContextManager[None]:
        """Hold the run for one session, or raise `RunLockedError` if a live process holds it.

        Backends without locks (object storage) return a no-op: session fencing alone keeps
        their journals consistent.
        """
        ...


@runtime_checkable
class ExclusiveAppend(Storage, Protocol):
    """A `Storage` that can append with every other writer of the run held off between its
    read of the journal and its write (`isinstance(storage, ExclusiveAppend)` tells)."""

    def append_exclusive(self, run_id: str, plan: Callable[[bytes | None], bytes]) -> str:
        """Append the lines `plan` returns for the journal's complete lines as they are now
        (None: the run does not exist; `plan` raises then), with no other append in between;
        return the new token. A torn final line is cut off first. `plan` runs while other
        writers wait: it must not touch the storage. An exception from `plan` is raised as it
        is, with nothing written."""
        ...


@runtime_checkable
class RunStamps(Storage, Protocol):
    """A `Storage` that tells which journals changed without reading them: a stamp per run
    (`isinstance(storage, RunStamps)` tells).

    A stamp is an opaque value, compared with `==` to a stamp the same storage gave for the
    same run: equal stamps mean the journal's complete lines have not changed in between. A
    different stamp does not promise different lines (a torn tail may move it). Stamps are not
    tokens: an append still needs `read`'s token.
    """

    def run_stamps(self, run_ids: Iterable[str] | None = None) -> dict[str, object]:
        """Every run (or each of `run_ids` that exists) with its stamp now, reading no journal."""
        ...


def read_stamps(storage: Storage, run_ids: Iterable[str] | None = None) -> dict[str, object]:
    """Each run's stamp (every run's, or those of `run_ids` that exist): the storage's own
    (`RunStamps`) where it has them, else the token of each journal read now (a token moves
    whenever the journal's complete lines do, so it serves as a stamp, at a read per run)."""
    if isinstance(storage, RunStamps):
        return storage.run_stamps(run_ids)
    stamps: dict[str, object] = {}
    for run_id in storage.list_runs() if run_ids is None else run_ids:
        snapshot = storage.read(run_id)
        if snapshot is not None:
            stamps[run_id] = snapshot.token
    return stamps


@runtime_checkable
class ObjectStorage(Storage, Protocol):
    """A `Storage` that also keeps objects beside each run's journal.

    Object names are checked with `validate_object_name` (and run ids with `validate_run_id`)
    before any I/O; failures raise `StorageError`. A write replaces the object atomically: a
    reader sees the old bytes or the new ones, never a mix.
    """

    def read_object(self, run_id: str, name: str) -> bytes | None:
        """The object `name` beside run `run_id`'s journal; None if there is none."""
        ...

    def write_object(self, run_id: str, name: str, data: bytes) -> None:
        """Store `data` as the object `name` beside run `run_id`'s journal, replacing any."""
        ...

    def object_url(self, run_id: str, name: str) -> str:
        """Where the object is (a path or URL), for people to read."""
        ...

    def delete_run(self, run_id: str) -> None:
        """Delete the run's journal and every object beside it; a missing run is no error."""
        ...


_Factory = Callable[[str], Storage]
_SCHEMES: dict[str, str] = {
    "file": "kassette.storage._local:_from_url",
    "memory": "kassette.storage._memory:_from_url",
    "s3": "kassette.storage._s3:_from_url",
}


def register_scheme(scheme: str, factory: str | _Factory) -> None:
    """Make `open_storage` accept `scheme:...` URLs.

    `factory` is a callable taking the URL, or a lazy "module:function" reference to one.
    """
    _REGISTERED[scheme] = factory


_REGISTERED: dict[str, str | _Factory] = dict(_SCHEMES)


def open_storage(url: str | Storage) -> Storage:
    """A backend for `file:PATH`, `memory:` or `s3://bucket[/prefix]` (or a registered scheme).

    A `Storage` is returned as it is, so APIs can take either.
    """
    if not isinstance(url, str):
        return url
    scheme = url.split(":", 1)[0] if ":" in url else ""
    factory = _REGISTERED.get(scheme)
    if factory is None:
        known = ", ".join(f"{name}:" for name in sorted(_REGISTERED))
        raise InvalidArgumentError(f"unknown storage URL {url!r}: expected one of {known}")
    if isinstance(factory, str):
        module_name, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
    return factory(url)
