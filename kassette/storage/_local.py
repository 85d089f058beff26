"""LocalStorage: journals as files on a local filesystem.

`{path}/{runId}.jsonl` holds the journal. A new journal is written to a temporary file, fsynced
and `link(2)`ed into place, so creation (even of many lines, as a fork does) is atomic and can
never overwrite a run. An append takes `flock` on the journal, checks that the file still ends
where the caller's token says (a torn tail left by a crash is cut off), then makes one `write()`
of the whole line and an `fsync`. Tokens are byte lengths of the journal's complete lines.
While this process holds a run's lock, its journal stays open between appends and each append
is one `write()` and one `fsync`: `kassette.storage._local_append` says how, and why a cancel or
a newer session from another process is still safe and still noticed.

A `LocalStorage` pickles as its path, so a process pool or a Dask worker on a shared
filesystem can write the same journals.

Objects beside a run (`ObjectStorage`) are files under `{path}/{runId}/`: each write goes to a
temporary file in the same directory, is fsynced and renamed over the object, then the
directory is fsynced (`replace_file`), so a reader or a crash sees the old bytes or the new.
`delete_run` removes the journal, the objects and a lock nobody holds.

A run's stamp (`RunStamps`) is its journal file's inode, size and modification time: one
`stat` per run, so a live view of 10,000 runs polls them without reading a journal.

`{path}/{runId}.lock` serialises sessions across processes. It is created atomically with
`link(2)` and holds the holder's pid, host and session; a lock whose pid is dead on this host
is reclaimed (under a directory `flock`, so two reclaimers cannot both win). Only the process
that took a lock releases it: a child forked while it is held leaves it to its parent. Journals and
lockfiles are written as hidden temporary files naming their process, linked into place; the
first lock a `LocalStorage` takes removes those of processes that died before removing them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from kassette.errors import ConflictError, RunLockedError, StorageError, StorageNotFoundError
from kassette.storage._base import Snapshot, is_run_id, validate_object_name, validate_run_id
from kassette.storage._files import (
    new_temporary,
    place,
    temporary_pid,
    write_fully,
)
from kassette.storage._local_append import (
    OpenJournal,
    append_careful,
    append_exclusive,
    delete_journal,
)

__all__ = ["LocalStorage", "check_exists", "replace_file"]

_SUFFIX = ".jsonl"


def check_exists(storage: object, url: str) -> None:
    """Raise `StorageNotFoundError` for a `LocalStorage` whose path is not a directory (none
    there, or a regular file): readers (the CLI, `kassette.explore`) refuse it rather than read
    a wrong path as an empty store. Other backends pass: `memory:` is empty by design and an
    S3 prefix exists once something is in it. An unreadable path passes too: reading it then
    raises the `StorageError` that says why."""
    if not isinstance(storage, LocalStorage):
        return
    try:
        if stat.S_ISDIR(storage.path.stat().st_mode):
            return
        problem = f"{storage.path} is a file, not a directory"
    except FileNotFoundError:
        problem = f"the directory {storage.path} does not exist"
    except OSError:
        return
    raise StorageNotFoundError(
        f"storage {url} not found: {problem} "
        "(kassette creates it when a workflow writes its first run)"
    )


class LocalStorage:
    """Journals in a directory; created on first write."""

    def __init__(self, path: str | os.PathLike[str] = ".kassette") -> None:
        self.path = Path(path)
        self._open: dict[str, OpenJournal] = {}  # runs this process holds the lock of
        self._swept = False  # temporary files of dead processes, on the first lock

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.path)!r})"

    def __reduce__(self) -> tuple[type[LocalStorage], tuple[Path]]:
        # only the path travels: another process (a ProcessPool or Dask worker) holds no
        # locks and no open journals of this one's
        return type(self), (self.path,)

    def _journal(self, run_id: str) -> str:
        # a str, not a Path: joining Paths costs more than the rest of an append's Python code
        return f"{os.fspath(self.path)}{os.sep}{validate_run_id(run_id)}{_SUFFIX}"

    def read(self, run_id: str) -> Snapshot | None:
        try:
            data = _read_file(self._journal(run_id))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read run {run_id}: {exc}", run_id=run_id) from exc
        return Snapshot(data, str(data.rfind(b"\n") + 1))

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        try:
            if token is None:
                return self._create(run_id, self._journal(run_id), data)
            return self._extend(run_id, data, int(token))
        except (ConflictError, StorageError):
            raise
        except OSError as exc:
            raise StorageError(f"cannot append to run {run_id}: {exc}", run_id=run_id) from exc

    def _create(self, run_id: str, path: str, data: bytes) -> str:
        self.path.mkdir(parents=True, exist_ok=True)
        temporary, fd = new_temporary(self.path, run_id)
        try:
            with open(fd, "wb") as file:  # closes `fd`
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            try:
                place(temporary, path, exclusive=True)
            except FileExistsError:
                raise ConflictError(f"run {run_id} already exists", run_id=run_id) from None
        finally:
            temporary.unlink(missing_ok=True)
        return str(len(data))

    def _extend(self, run_id: str, data: bytes, expected: int) -> str:
        journal = self._open.get(run_id)  # a run held open was checked when its lock was taken
        if journal is not None and not journal.forked:
            with journal.mutex:
                if self._open.get(run_id) is journal:  # the lock was not released meanwhile
                    token = journal.append(run_id, data, expected)  # lean: write and fsync
                    if token is not None:
                        return token
                    path = self._journal(run_id)
                    return append_careful(self.path, run_id, path, data, expected, journal)
        return append_careful(self.path, run_id, self._journal(run_id), data, expected, None)

    def append_exclusive(self, run_id: str, plan: Callable[[bytes | None], bytes]) -> str:
        """Append what `plan` makes of the journal as it is, every other writer held off
        (`kassette.storage.ExclusiveAppend`; how in `kassette.storage._local_append`)."""
        path = self._journal(run_id)
        try:
            return append_exclusive(self.path, run_id, path, plan)
        except (ConflictError, StorageError):
            raise
        except OSError as exc:
            raise StorageError(f"cannot append to run {run_id}: {exc}", run_id=run_id) from exc

    def run_stamps(self, run_ids: Iterable[str] | None = None) -> dict[str, object]:
        """Each run's journal file's (inode, size, modification time), from one `stat` per run
        (`kassette.storage.RunStamps`): every append changes the size, a journal made again
        the inode. The names are looked up in the open directory, not walked from the root."""
        wanted = None if run_ids is None else [validate_run_id(run_id) for run_id in run_ids]
        try:
            directory = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StorageError(f"cannot list {self.path}: {exc}") from exc
        stamps: dict[str, object] = {}
        try:
            names = _run_ids(os.listdir(directory)) if wanted is None else wanted
            for run_id in names:
                try:
                    found = os.stat(f"{run_id}{_SUFFIX}", dir_fd=directory)
                except FileNotFoundError:
                    continue
                stamps[run_id] = (found.st_ino, found.st_size, found.st_mtime_ns)
        except OSError as exc:
            raise StorageError(f"cannot stat the journals in {self.path}: {exc}") from exc
        finally:
            os.close(directory)
        return stamps

    def list_runs(self) -> Iterator[str]:
        try:
            names = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot list {self.path}: {exc}") from exc
        yield from _run_ids(names)

    def stray_files(self) -> list[str]:
        """The files named like journals (`*.jsonl`) whose names are not run ids
        (`retry-fix copy.jsonl`): not runs, so `list_runs` skips them; the CLI names them.
        Hidden files are kassette's own temporaries, not strays."""
        try:
            names = sorted(os.listdir(self.path))
        except OSError:
            return []
        return [
            name
            for name in names
            if name.endswith(_SUFFIX)
            and not name.startswith(".")
            and not is_run_id(name[: -len(_SUFFIX)])
        ]

    @contextlib.contextmanager
    def lock(self, run_id: str, session: int) -> Iterator[None]:
        path = self.path / f"{validate_run_id(run_id)}.lock"
        holder = {"pid": os.getpid(), "host": _host(), "session": session}
        started = _process_start(os.getpid())
        if started is not None:
            holder["started"] = started
        # the pure-Python encoder (not one-shot): works whatever json.encoder.c_make_encoder is
        content = "".join(json.JSONEncoder().iterencode(holder)).encode()
        try:
            self._acquire(run_id, path, content)
        except OSError as exc:
            raise StorageError(f"cannot lock run {run_id}: {exc}", run_id=run_id) from exc
        journal = self._open[run_id] = OpenJournal()
        try:
            yield
        finally:
            if self._open.get(run_id) is journal:
                del self._open[run_id]
            # A child forked while the lock is held (multiprocessing's fork start method, a
            # data loader) unwinds through here when it exits with `sys.exit`: the lock and
            # the open journal are its parent's, so only the process that took them lets go.
            if os.getpid() == holder["pid"] and not journal.forked:
                with journal.mutex:
                    journal.release(self.path, run_id)
                with contextlib.suppress(OSError):
                    if path.read_bytes() == content:
                        path.unlink()

    def _acquire(self, run_id: str, path: Path, content: bytes) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if not self._swept:
            self._swept = True
            _sweep_temporaries(self.path)
        temporary, fd = new_temporary(self.path, run_id, ".lock.tmp", mode=0o644)
        try:
            try:  # inside the outer try: a failed write leaves no file
                write_fully(fd, content)
            finally:
                os.close(fd)
            if _try_link(temporary, path):
                return
            directory = os.open(self.path, os.O_RDONLY)
            try:
                fcntl.flock(directory, fcntl.LOCK_EX)
                holder = _read_holder(path)
                if holder is not None and _is_alive(holder):
                    raise RunLockedError(
                        f"run {run_id} is locked by pid {holder.get('pid')} on "
                        f"{holder.get('host')} (session {holder.get('session')})",
                        run_id=run_id,
                    )
                path.unlink(missing_ok=True)
                if not _try_link(temporary, path):
                    raise RunLockedError(f"run {run_id} was locked concurrently", run_id=run_id)
            finally:
                os.close(directory)
        finally:
            temporary.unlink(missing_ok=True)

    # -- objects beside a run (ObjectStorage) ---------------------------------------------------

    def _object(self, run_id: str, name: str) -> Path:
        return self.path / validate_run_id(run_id) / validate_object_name(name)

    def read_object(self, run_id: str, name: str) -> bytes | None:
        """The object `name` beside run `run_id`'s journal; None if there is none."""
        path = self._object(run_id, name)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}", run_id=run_id) from exc

    def write_object(self, run_id: str, name: str, data: bytes) -> None:
        """Store `data` as the object `name` beside run `run_id`'s journal, atomically."""
        path = self._object(run_id, name)
        try:
            replace_file(path, data)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}", run_id=run_id) from exc

    def object_url(self, run_id: str, name: str) -> str:
        """The object's absolute path, for people to read."""
        return str(self._object(run_id, name).absolute())

    def delete_run(self, run_id: str) -> None:
        """Delete the run's journal, its objects and its lock if no live process holds it."""
        import shutil  # here: it imports compression modules that nothing else needs

        journal = self._journal(run_id)
        lock = self.path / f"{run_id}.lock"
        try:
            delete_journal(self.path, run_id, journal)  # a live session is fenced
            shutil.rmtree(self.path / run_id, ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete run {run_id}: {exc}", run_id=run_id) from exc
        holder = _read_holder(lock)
        if holder is not None and not _is_alive(holder):
            lock.unlink(missing_ok=True)


def _run_ids(names: Iterable[str]) -> list[str]:
    """The run ids a directory's file names hold: `RUN.jsonl` for a valid run id."""
    return [  # not a loop in Python: `kassette list` lists thousands
        name[: -len(_SUFFIX)]
        for name in names
        if name.endswith(_SUFFIX) and is_run_id(name[: -len(_SUFFIX)])
    ]


def replace_file(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write `data` to `path` atomically and durably: a temporary file beside it, fsynced,
    renamed over it, and the directory fsynced. A symlink is followed (the file it names is
    replaced); anything but a regular file there (a device, a directory) is refused, never
    renamed over. Creates missing parent directories; `mode` sets the file's permissions.
    Raises OSError, leaving no temporary file behind."""
    path = Path(os.path.realpath(path))
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary, fd = new_temporary(path.parent, path.name, mode=0o666 if mode is None else 0o600)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            write_fully(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        place(temporary, path, exclusive=False)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _sweep_temporaries(directory: Path) -> None:
    """Remove the temporary files (`.RUN.PID.HEX.tmp`, `.RUN.PID.HEX.lock.tmp`) of processes
    that died on this host before removing them. One without a pid (written by an older
    kassette) is removed once it is a minute old: its writer needed it for microseconds."""
    import time  # the first lock only

    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not name.startswith(".") or not name.endswith(".tmp"):
            continue
        pid = temporary_pid(name)
        try:
            if pid is not None:
                stale = not _pid_exists(pid)
            else:
                stale = time.time() - entry.stat(follow_symlinks=False).st_mtime > 60
            if stale:
                os.unlink(entry.path)
        except OSError:
            continue  # removed meanwhile, or not ours to remove


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _try_link(source: Path, target: Path) -> bool:
    try:
        os.link(source, target)
    except FileExistsError:
        return False
    return True


def _read_holder(path: Path) -> dict[str, object] | None:
    try:
        holder = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:
        return {}  # unreadable: its writer died mid-write, so it is stale
    return holder if isinstance(holder, dict) else {}


def _is_alive(holder: dict[str, object]) -> bool:
    """A holder on another host is assumed alive: only this host's pids can be checked."""
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return False
    if holder.get("host") != _host():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc to ask: trust the pid
    if stat[0] in ("Z", "X"):  # killed, but its parent has not reaped it yet
        return False
    started = holder.get("started")  # a reused pid belongs to a process started later
    return not isinstance(started, int) or int(stat[19]) == started


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields if len(fields) > 19 else None


def _process_start(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (with the pid, a unique name)."""
    stat = _proc_stat(pid)
    return int(stat[19]) if stat is not None else None


def _host() -> str:
    """This host's name, as `socket.gethostname()` gives it (without importing socket)."""
    return os.uname().nodename


def _read_file(path: str) -> bytes:
    """A file's bytes up to its end, read with `os.read` (a third of `open().read()`'s cost on
    a short journal, where `kassette list` reads thousands); each read asks for twice the last,
    and the end is where a read returns nothing."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 1 << 16)
        if data and (more := os.read(fd, 1 << 17)):  # most journals: one read, then the end
            chunks, size = [data, more], 1 << 18
            while chunk := os.read(fd, size):
                chunks.append(chunk)
                size = min(size * 2, 1 << 26)
            data = b"".join(chunks)
    finally:
        os.close(fd)
    return data


def _from_url(url: str) -> LocalStorage:
    path = url.partition(":")[2]
    if path.startswith("//"):
        path = path[2:]
    return LocalStorage(path or ".kassette")
