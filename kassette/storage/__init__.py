"""Storage: where journals live, behind one small protocol.

A backend stores each run's journal as bytes and offers four operations: read the whole
journal with a version token, append bytes only if the journal is still at that token
(compare-and-swap), list run ids, and lock a run for one session. Everything else (framing,
offsets, session fencing, status) is policy in `kassette._journal` and `kassette.core`, so every
backend gets it for free. Backends are found by URL scheme and imported lazily.

Some backends can also append *exclusively* (`ExclusiveAppend`): hold every other writer of a
run off while the caller plans what to append from the journal as it is, so the append cannot
lose a race to a writer that appends back to back (how `cancel_run` stops a runaway session).
`LocalStorage` and `MemoryStorage` can; object stores cannot.

Some backends can also tell cheaply which journals changed (`RunStamps`): a stamp per run, read
without reading any journal, that changes whenever the journal does. A live view polls it;
`read_stamps` falls back to each journal's token on a backend without it.

Some backends also keep *objects* beside a run's journal (files an application stores with a
run: kassette.koto's templates and context content): `ObjectStorage` is that capability, four
more methods that `LocalStorage` and `S3Storage` implement; the `Storage` protocol itself keeps
its four.
"""

import typing

from kassette._public import publish as _publish
from kassette.storage._base import (
    ExclusiveAppend,
    ObjectStorage,
    RunStamps,
    Snapshot,
    Storage,
    is_run_id,
    open_storage,
    read_stamps,
    register_scheme,
    validate_object_name,
    validate_run_id,
)
from kassette.storage._local import LocalStorage, check_exists, replace_file
from kassette.storage._memory import MemoryStorage

if typing.TYPE_CHECKING:
    from kassette.storage._s3 import S3Storage

__all__ = [
    "ExclusiveAppend",
    "LocalStorage",
    "MemoryStorage",
    "ObjectStorage",
    "RunStamps",
    "S3Storage",
    "Snapshot",
    "Storage",
    "check_exists",
    "is_run_id",
    "open_storage",
    "read_stamps",
    "register_scheme",
    "replace_file",
    "validate_object_name",
    "validate_run_id",
]

_publish(globals(), "kassette.storage")


def __getattr__(name: str) -> typing.Any:
    """`S3Storage` imports boto3 (the `s3` extra), so it loads on first use."""
    if name == "S3Storage":
        from kassette.storage._s3 import S3Storage

        S3Storage.__module__ = __name__
        return S3Storage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
