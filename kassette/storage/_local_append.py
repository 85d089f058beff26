"""How `LocalStorage` appends to a journal: in place under `flock`, lean by the lock's holder,
or by replacing the file when a lean holder is in the way.

A *careful* append (every append by a process that does not hold the run's lock, and a
holder's first) opens the journal, takes `flock`, checks with `fstat` that the file still ends
at the caller's token (cutting off a torn tail), writes the lines with one `write()` and
fsyncs. A process that holds the run's lock then keeps the journal open and appends *lean*:
one `write()` and one `fsync`, no `flock`, no `fstat`, no `getpid`.

Lean appends are safe because of a *fence* file, `{runId}.fence`: the lean holder holds a
shared `flock` on it for as long as it appends lean, and maps its first 8 bytes into memory.
A careful writer, under the journal's `flock`, tries an exclusive `flock` on the fence file:

- it gets it: nobody appends lean (a holder takes the fence under the journal's `flock` too),
  so it appends in place, and removes the free fence file;
- it does not (a lean holder is alive, if perhaps paused): it writes new random bytes into the
  fence, then *replaces* the journal: the lines up to its token and its own, in a temporary
  file, fsynced, `rename(2)`d over the journal, the directory fsynced. The holder's descriptor
  now names a file nobody reads: whatever it writes there can corrupt nothing.

The holder compares the mapped fence with the bytes it saw when it took the lease before each
lean write (a memory read, no system call) and again after the fsync. Changed before: it drops
the lease and appends carefully, which finds the journal moved (`ConflictError`), so the core
re-reads it and raises `FencedError` or `RunCancelledError`. Changed after: the write may have
gone to the replaced file, so it is not acknowledged (`ConflictError`, the same re-read). The
writer changes the fence *before* it reads the journal's size (which bounds what it copies),
and the holder reads the fence after its `write()` returned: either the writer's size
includes the holder's line (its append conflicts, nothing is replaced) or the holder sees the
fence move (both sides make locked instructions between their store and their load, inside
the system calls, which is what rules out both missing the other's store).

An *exclusive* append (`append_exclusive`, how `cancel_run` lands against a session that
appends back to back) plans its lines on the journal as it is under the `flock`, instead of
on a token read before: a careful writer's token goes stale whenever the holder appends
between the read and the `flock`, which a holder appending flat out always does. Under the
journal's `flock` it changes a held fence, then waits (up to `_LEASE_WAIT`) for an exclusive
`flock` on the fence file. The holder lets go of its lease at its next append, before writing
(the fence moved), or just after a write in flight (it finds the fence moved after its fsync),
and its careful append then waits for the journal's `flock`: once the fence is ours, no write
of any other writer is in flight or can start, so the journal read now is the journal, and the
lines planned on it are appended in place. A holder that does not append within the wait
(it is busy in a step) keeps its lease: the journal read after the fence moved is replaced,
as by any careful writer, and the holder is fenced at its next append.

`fork()` is handled with `os.register_at_fork`: a child forgets its parent's open journals (it
closes its copies of their descriptors, which leaves the parent's locks alone), so it never
appends lean to a run whose lock it does not hold.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from kassette._clock import Backoff, SystemClock
from kassette.errors import ConflictError, StorageError
from kassette.storage._files import new_temporary, place, write_fully

__all__ = ["OpenJournal", "append_careful", "append_exclusive", "delete_journal", "fence_path"]

_FENCE_SUFFIX = ".fence"
_FENCE_SIZE = 8
_REOPENS = 5  # a journal replaced between its open and its flock is opened again, this often
_COPY_CHUNK = 1 << 20
_LEASE_WAIT = 0.25  # seconds an exclusive append waits for a lean holder to let go of its lease


def fence_path(directory: Path, run_id: str) -> str:
    return f"{os.fspath(directory)}{os.sep}{run_id}{_FENCE_SUFFIX}"


class OpenJournal:
    """A run's journal while this process holds the run's lock.

    `mutex` serialises this process's appends to the run (flock cannot tell threads sharing
    one open file apart). After a careful append it holds the lease: `fd` (the journal, open
    for appending), `end` (where the last append ended), and the fence, shared and mapped.
    """

    __slots__ = ("__weakref__", "end", "fd", "fence", "fence_fd", "fence_map", "forked", "mutex")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.fd: int | None = None
        self.end = -1
        self.fence_fd: int | None = None
        self.fence_map: mmap.mmap | None = None
        self.fence = b""
        self.forked = False  # this is a forked child's copy: never append through it
        _OPEN.add(self)

    def append(self, run_id: str, data: bytes, expected: int) -> str | None:
        """A lean append (one write, one fsync); None when the lease does not allow it (the
        token is not where the last append ended, or the fence moved): append carefully."""
        fence, fd = self.fence_map, self.fd
        if fence is None or fd is None or expected != self.end or fence[:8] != self.fence:
            self.close()
            return None
        try:
            written = os.write(fd, data)
            if written != len(data):
                os.ftruncate(fd, expected)
                raise StorageError(f"short write to run {run_id}", run_id=run_id)
            os.fsync(fd)
        except BaseException:
            self.close()
            raise
        if fence[:8] != self.fence:  # replaced meanwhile: the write may be in the old file
            self.close()
            raise ConflictError(f"run {run_id} was written by another process", run_id=run_id)
        self.end = expected + len(data)
        return str(self.end)

    def take(self, directory: Path, run_id: str, fd: int, end: int) -> bool:
        """Hold the lease on the journal open as `fd` (flocked by the caller) that ends at
        `end`. False (and nothing held) when the fence cannot be shared."""
        path = fence_path(directory, run_id)
        try:
            lease = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False  # appends stay careful
        try:
            # shared, and still the file at `path`: whoever removes one holds it exclusively
            if not _try_flock(lease, fcntl.LOCK_SH | fcntl.LOCK_NB) or not _is_at(lease, path):
                os.close(lease)
                return False
            if os.fstat(lease).st_size < _FENCE_SIZE:
                os.pwrite(lease, os.urandom(_FENCE_SIZE), 0)
            fence = mmap.mmap(lease, _FENCE_SIZE, access=mmap.ACCESS_READ)
        except OSError:  # a filesystem without flock or mmap: appends stay careful
            os.close(lease)
            return False
        except BaseException:
            os.close(lease)
            raise
        self.fd, self.end, self.fence_fd, self.fence_map = fd, end, lease, fence
        self.fence = fence[:8]
        return True

    def release(self, directory: Path, run_id: str) -> None:
        """Give up the lease (the session ends); remove the fence file if nobody holds it."""
        lease, self.fence_fd = self.fence_fd, None
        self.close()
        if lease is None:
            lease = _open_fence(directory, run_id)
        if lease is not None:
            with contextlib.suppress(OSError):
                if _try_flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB):
                    _unlink_if_at(lease, fence_path(directory, run_id))
            os.close(lease)

    def close(self) -> None:
        """Drop the lease: close the journal and the fence (which releases their locks)."""
        fd, fence_fd, fence = self.fd, self.fence_fd, self.fence_map
        self.fd = self.fence_fd = self.fence_map = None
        if fence is not None:
            fence.close()
        for descriptor in (fd, fence_fd):
            if descriptor is not None:
                os.close(descriptor)

    def _forget(self) -> None:
        """In a forked child: close the child's copies, which leaves the parent's locks."""
        self.forked = True
        self.close()


_OPEN: weakref.WeakSet[OpenJournal] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for journal in list(_OPEN):
        journal._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def append_careful(
    directory: Path,
    run_id: str,
    path: str,
    data: bytes,
    expected: int,
    holder: OpenJournal | None,
) -> str:
    """Append `data` under flock if the journal is `expected` bytes long (a torn tail aside):
    in place, or by replacing the file when a lean holder holds the fence. With `holder`
    (this process holds the run's lock), the holder takes the lease on the journal after."""
    for _ in range(_REOPENS):
        fd = _open_journal(run_id, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink == 0:  # replaced or removed since it was opened
                continue
            fence = _open_fence(directory, run_id)
            try:
                leased = fence is not None and not _try_flock(fence, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if fence is not None and leased:  # first: a lean write the size misses sees it
                    os.pwrite(fence, os.urandom(_FENCE_SIZE), 0)
                size = os.fstat(fd).st_size
                if size != expected:
                    tail = os.pread(fd, size - expected, expected) if size > expected else b"\n"
                    if b"\n" in tail:
                        raise ConflictError(
                            f"run {run_id} changed since it was read", run_id=run_id
                        )
                if leased:
                    written = _replace(directory, run_id, path, fd, expected, data)
                else:
                    if size != expected:
                        os.ftruncate(fd, expected)  # a torn line from a crashed writer
                    _write(run_id, fd, data, expected)
                    if fence is not None:  # a lease nobody holds (its holder ended or died)
                        _unlink_if_at(fence, fence_path(directory, run_id))
                    written = fd
            finally:
                if fence is not None:
                    os.close(fence)
            end = expected + len(data)
            try:
                kept = holder is not None and holder.take(directory, run_id, written, end)
            except BaseException:
                if written != fd:
                    os.close(written)
                raise
            if kept:
                fcntl.flock(written, fcntl.LOCK_UN)
                if written == fd:
                    fd = -1  # the holder's now
            elif written != fd:
                os.close(written)
            return str(end)
        finally:
            if fd >= 0:
                os.close(fd)
    raise ConflictError(f"run {run_id} kept being replaced", run_id=run_id)


def append_exclusive(
    directory: Path, run_id: str, path: str, plan: Callable[[bytes | None], bytes]
) -> str:
    """Append the lines `plan` makes of the journal's complete lines, read under the journal's
    `flock` with every other writer held off (see the module's docstring); return the token."""
    for _ in range(_REOPENS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            plan(None)  # no run: the plan raises
            raise ConflictError(f"run {run_id} does not exist", run_id=run_id) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink == 0:  # replaced or removed since it was opened
                continue
            fence = _open_fence(directory, run_id)
            leased = fence is not None
            try:
                if fence is not None and not _try_flock(fence, fcntl.LOCK_EX | fcntl.LOCK_NB):
                    os.pwrite(fence, os.urandom(_FENCE_SIZE), 0)  # the holder starts no write
                    leased = not _wait_for_lease(fence)
                else:
                    leased = False
                data = _read_all(fd)
                end = data.rfind(b"\n") + 1  # a torn tail, from a crash, is not content
                lines = plan(data[:end])
                if leased:  # the holder is between appends: it may write at any moment
                    os.close(_replace(directory, run_id, path, fd, end, lines))
                else:  # nobody else can write: in place
                    if len(data) != end:
                        os.ftruncate(fd, end)
                    _write(run_id, fd, lines, end)
            finally:
                if fence is not None:
                    if not leased:  # ours: a lease nobody holds any more
                        _unlink_if_at(fence, fence_path(directory, run_id))
                    os.close(fence)
            return str(end + len(lines))
        finally:
            os.close(fd)
    raise ConflictError(f"run {run_id} kept being replaced", run_id=run_id)


def _wait_for_lease(fence: int) -> bool:
    """Take the fence exclusively within `_LEASE_WAIT` seconds: whether that worked."""
    backoff = Backoff(SystemClock(), 0.0005, most=0.01, seconds=_LEASE_WAIT)
    while not _try_flock(fence, fcntl.LOCK_EX | fcntl.LOCK_NB):
        if not backoff.wait():
            return False
    return True


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, _COPY_CHUNK, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def delete_journal(directory: Path, run_id: str, path: str) -> None:
    """Remove the journal; a lean holder is fenced (it appends no further)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        fence = _open_fence(directory, run_id)
        if fence is not None:
            try:
                if _try_flock(fence, fcntl.LOCK_EX | fcntl.LOCK_NB):
                    _unlink_if_at(fence, fence_path(directory, run_id))
                else:
                    os.pwrite(fence, os.urandom(_FENCE_SIZE), 0)
            finally:
                os.close(fence)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        os.close(fd)


def _open_journal(run_id: str, path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        raise ConflictError(f"run {run_id} no longer exists", run_id=run_id) from None


def _open_fence(directory: Path, run_id: str) -> int | None:
    try:
        return os.open(fence_path(directory, run_id), os.O_RDWR)
    except FileNotFoundError:
        return None


def _is_at(fd: int, path: str) -> bool:
    """Whether `path` names the file open as `fd`."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _unlink_if_at(fd: int, path: str) -> None:
    """Remove the fence file open as `fd` (and flocked exclusively), if `path` still names it."""
    if _is_at(fd, path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _try_flock(fd: int, operation: int) -> bool:
    try:
        fcntl.flock(fd, operation)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _write(run_id: str, fd: int, data: bytes, expected: int) -> None:
    """One `write()` of `data` at the end of the journal, then fsync."""
    written = os.write(fd, data)
    if written != len(data):
        os.ftruncate(fd, expected)
        raise StorageError(f"short write to run {run_id}", run_id=run_id)
    os.fsync(fd)


def _replace(directory: Path, run_id: str, path: str, old: int, expected: int, data: bytes) -> int:
    """Write the journal's first `expected` bytes and `data` to a new file and rename it over
    the journal; returns the new file, open for appending and flocked (taken before the rename,
    so a writer that opens the new journal waits for this one to finish)."""
    temporary, fd = new_temporary(directory, run_id, flags=os.O_RDWR | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        offset = 0
        while offset < expected:
            chunk = os.pread(old, min(_COPY_CHUNK, expected - offset), offset)
            if not chunk:
                raise ConflictError(f"run {run_id} shrank while it was copied", run_id=run_id)
            write_fully(fd, chunk)
            offset += len(chunk)
        _write(run_id, fd, data, expected)
        place(temporary, path, exclusive=False)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    return fd
