"""Files put in place atomically: how `LocalStorage` writes a journal, a lockfile or an object
so that a reader, or a crash, sees the old file or the whole new one, never part of it.

A new file is written under a temporary name beside its final one, fsynced, then put in place
in one system call (`link(2)`, which fails if the name is taken, or `rename(2)`, which replaces
what is there) and the directory fsynced, so the name survives a power loss. The temporary
name is hidden and names its process (`.STEM.PID.HEX.SUFFIX`): one left by a process that was
killed before it could remove it is known as stale (`temporary_pid`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_directory", "new_temporary", "place", "temporary_pid", "write_fully"]


def new_temporary(
    directory: Path, stem: str, suffix: str = ".tmp", *, flags: int = os.O_WRONLY, mode: int = 0o666
) -> tuple[Path, int]:
    """Create a fresh hidden file in `directory` named for `stem` and this process, open with
    `flags` (plus `O_CREAT | O_EXCL`); return its path and descriptor."""
    path = directory / f".{stem}.{os.getpid()}.{os.urandom(8).hex()}{suffix}"
    return path, os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)


def temporary_pid(name: str) -> int | None:
    """The process a temporary file's name (`new_temporary`) names; None for another name
    (or one written by a kassette before names held a pid)."""
    if not name.startswith("."):
        return None
    parts = name.removesuffix(".tmp").removesuffix(".lock").rsplit(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def write_fully(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd`, however many `write(2)` calls it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def place(temporary: Path, path: str | Path, *, exclusive: bool) -> None:
    """Put the written and fsynced `temporary` at `path` in one step, then fsync the directory:
    with `link(2)` when `exclusive` (`FileExistsError` if `path` exists; `temporary` is left
    for the caller to remove), else with `rename(2)` (`os.replace`) over whatever is there."""
    if exclusive:
        os.link(temporary, path)
    else:
        os.replace(temporary, path)
    fsync_directory(Path(path).parent)


def fsync_directory(path: Path) -> None:
    """Make the directory's entries (a name just linked, renamed or removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
