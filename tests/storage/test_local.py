"""LocalStorage specifics: files and modes, torn tails, lockfiles, and `open_storage` URLs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kassette import LocalStorage, MemoryStorage, Storage, open_storage
from kassette._journal import Journal, encode
from kassette.core import open_run, read_journal
from kassette.errors import (
    ConflictError,
    InvalidArgumentError,
    RunLockedError,
    StorageError,
)

CHILD_HOLDS_LOCK = """
import sys
from kassette import LocalStorage, open_run
with open_run(LocalStorage(sys.argv[1]), "r1") as run:
    print("locked", run.session, flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "journals"


def lockfile(root: Path, run_id: str = "r1") -> Path:
    return root / f"{run_id}.lock"


def write_holder(root: Path, pid: object, host: str | None = None, session: int = 1) -> None:
    root.mkdir(parents=True, exist_ok=True)
    holder = {"pid": pid, "host": host or socket.gethostname(), "session": session}
    lockfile(root).write_text(json.dumps(holder))


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    return process.pid


# -- files ----------------------------------------------------------------------------------


def test_nothing_is_created_until_the_first_write(storage: LocalStorage, root: Path) -> None:
    assert storage.read("r1") is None
    assert list(storage.list_runs()) == []
    assert not root.exists()
    with open_run(storage, "r1", input={"x": 1}):
        pass
    assert root.is_dir()
    journal = root / "r1.jsonl"
    assert journal.is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert journal.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in root.iterdir()) == ["r1.jsonl"]  # no temp or lock files left
    assert repr(storage) == f"LocalStorage({str(root)!r})"


def test_journal_file_is_the_encoded_entries(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1", input={"ü": "✓"}) as run:
        run.record("a", lambda: [1, "two"])
    data = (root / "r1.jsonl").read_bytes()
    entries = Journal.parse(data, "r1").entries
    assert data == b"".join(encode(e) for e in entries)
    assert "✓".encode() in data
    snapshot = storage.read("r1")
    assert snapshot is not None and snapshot.data == data and snapshot.token == str(len(data))


@pytest.mark.parametrize(
    "size", [0, 1, 65_535, 65_536, 65_537, 196_607, 196_608, 196_609, 400_000, 1_000_000]
)
def test_read_returns_every_byte_of_a_journal_of_any_size(
    storage: LocalStorage, root: Path, size: int
) -> None:
    """Read in growing chunks: a journal of exactly one chunk, and of several, comes back whole
    (a torn tail included; the token stops before it)."""
    root.mkdir(parents=True, exist_ok=True)
    data = (b"x" * 99 + b"\n") * (size // 100) + b"y" * (size % 100)
    (root / "r1.jsonl").write_bytes(data)
    snapshot = storage.read("r1")
    assert snapshot is not None and snapshot.data == data
    assert snapshot.token == str(data.rfind(b"\n") + 1)


def test_list_runs_ignores_locks_and_temporary_files(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "b"), open_run(storage, "a"):
        (root / ".c.0123.tmp").write_bytes(b"")
        (root / "notes.txt").write_text("hi")
        assert list(storage.list_runs()) == ["a", "b"]


def test_a_torn_tail_is_cut_off_by_the_next_append(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1") as run:
        run.record("a", lambda: 1)
    path = root / "r1.jsonl"
    complete = path.read_bytes()
    torn = b'{"type":"step","session":1,"offset":2,"timestamp":"x","torn":"TORN'
    with open(path, "ab") as file:
        file.write(torn)
    snapshot = storage.read("r1")
    assert snapshot is not None and snapshot.token == str(len(complete))
    assert len(Journal.parse(snapshot.data, "r1").entries) == 2
    with open_run(storage, "r1") as run:
        run.record("a", lambda: pytest.fail("replayed"))
        run.record("b", lambda: 2)
    data = path.read_bytes()
    assert data.startswith(complete) and b"TORN" not in data
    assert data.count(b"\n") == 4 and data.endswith(b"\n")
    journal = read_journal(storage, "r1")
    assert [e["offset"] for e in journal.entries] == [0, 1, 2, 3]
    assert journal.steps["b"]["result"] == 2


def test_a_torn_tail_is_cut_off_by_a_direct_append(storage: LocalStorage, root: Path) -> None:
    line = encode({"type": "start", "session": 1, "offset": 0, "timestamp": "x"})
    token = storage.append("r1", line, token=None)
    with open(root / "r1.jsonl", "ab") as file:
        file.write(b'{"type":"st')
    second = encode({"type": "start", "session": 2, "offset": 1, "timestamp": "x"})
    assert storage.append("r1", second, token=token) == str(len(line) + len(second))
    assert (root / "r1.jsonl").read_bytes() == line + second


def test_complete_lines_past_the_token_conflict(storage: LocalStorage, root: Path) -> None:
    line = encode({"type": "start", "session": 1, "offset": 0, "timestamp": "x"})
    token = storage.append("r1", line, token=None)
    with open(root / "r1.jsonl", "ab") as file:
        file.write(b"{}\n{")
    with pytest.raises(ConflictError):
        storage.append("r1", line, token=token)
    with pytest.raises(ConflictError):
        storage.append("r1", line, token=str(len(line) + 100))
    assert (root / "r1.jsonl").read_bytes() == line + b"{}\n{"


def test_an_append_to_a_deleted_run_conflicts(storage: LocalStorage, root: Path) -> None:
    token = storage.append("r1", b"{}\n", token=None)
    (root / "r1.jsonl").unlink()
    with pytest.raises(ConflictError):
        storage.append("r1", b"{}\n", token=token)


def test_os_errors_become_storage_errors(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    storage = LocalStorage(not_a_directory)
    with pytest.raises(StorageError) as caught:
        storage.append("r1", b"{}\n", token=None)
    assert caught.value.run_id == "r1" and isinstance(caught.value.__cause__, OSError)
    with pytest.raises(StorageError):
        storage.read("r1")
    with pytest.raises(StorageError):
        list(storage.list_runs())
    with pytest.raises(StorageError):
        open_run(storage, "r1")
    directory = LocalStorage(tmp_path / "d")
    (tmp_path / "d" / "r1.jsonl").mkdir(parents=True)
    with pytest.raises(StorageError):
        directory.read("r1")


# -- lockfiles ------------------------------------------------------------------------------


def test_lockfile_holds_pid_host_and_session(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1"):
        pass
    with open_run(storage, "r1") as run:
        holder = json.loads(lockfile(root).read_text())
        started = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        assert holder == {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "session": 2,
            "started": started,
        }
        assert run.session == 2
    assert not lockfile(root).exists()


@pytest.mark.parametrize("host", [None, "another-host.example"], ids=["this host", "other host"])
def test_a_live_holder_locks_the_run(storage: LocalStorage, root: Path, host: str | None) -> None:
    with open_run(storage, "r1"):
        pass
    before = (root / "r1.jsonl").read_bytes()
    write_holder(root, os.getpid(), host, session=7)
    with pytest.raises(RunLockedError) as caught:
        open_run(storage, "r1")
    assert caught.value.run_id == "r1"
    assert str(os.getpid()) in str(caught.value) and "session 7" in str(caught.value)
    assert (root / "r1.jsonl").read_bytes() == before
    assert json.loads(lockfile(root).read_text())["session"] == 7  # the holder's lock stays


def test_a_lock_held_by_another_process(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1"):
        pass
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_HOLDS_LOCK, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == b"locked 2\n"
        with pytest.raises(RunLockedError, match=str(child.pid)):
            open_run(storage, "r1")
        child.stdin.write(b"\n")
        child.stdin.flush()
    finally:
        child.communicate(timeout=60)
    assert child.returncode == 0
    with open_run(storage, "r1") as run:
        assert run.session == 3


PARENT_FORKS_IN_A_STEP = """
import os, sys
from kassette import LocalStorage, open_run

def forks():
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the child unwinds through the step, the session and the lock
    os.waitpid(pid, 0)
    return pid

with open_run(LocalStorage(sys.argv[1]), "r1") as run:
    run.record("forks", forks)
    print("forked", flush=True)
    sys.stdin.readline()
    run.record("after", lambda: 2)
    run.complete("done")
"""


def test_a_forked_child_exiting_through_sys_exit_leaves_the_parents_lock(
    storage: LocalStorage, root: Path
) -> None:
    """A child `os.fork()`ed inside a step (multiprocessing's fork start method, a data
    loader) that exits with `sys.exit` unwinds through kassette: it must not remove the lock
    its live parent holds, so another process still gets `RunLockedError`."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_FORKS_IN_A_STEP, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None and parent.stdin is not None
        assert parent.stdout.readline() == b"forked\n"  # the child has exited
        assert json.loads(lockfile(root).read_text())["pid"] == parent.pid
        with pytest.raises(RunLockedError, match=str(parent.pid)):
            open_run(storage, "r1")
        parent.stdin.write(b"\n")
        parent.stdin.flush()
    finally:
        parent.communicate(timeout=60)
    assert parent.returncode == 0  # never fenced: its session stayed the run's only one
    entries = read_journal(storage, "r1").entries
    assert [entry["type"] for entry in entries] == ["start", "step", "step", "complete"]
    assert {entry["session"] for entry in entries} == {1}
    assert not lockfile(root).exists()  # the parent released it at the end


def test_a_lock_left_by_a_dead_pid_is_reclaimed(storage: LocalStorage, root: Path) -> None:
    with open_run(storage, "r1"):
        pass
    write_holder(root, dead_pid(), session=1)
    with open_run(storage, "r1") as run:
        assert run.session == 2
        assert json.loads(lockfile(root).read_text())["pid"] == os.getpid()
    assert not lockfile(root).exists()


def test_a_lock_left_by_an_unreaped_child_is_reclaimed(storage: LocalStorage, root: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 60
        stat = Path(f"/proc/{child.pid}/stat")
        while stat.read_text().rpartition(")")[2].split()[0] != "Z":  # exited, not yet reaped
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        write_holder(root, child.pid)
        with open_run(storage, "r1") as run:
            assert run.session == 1
    finally:
        child.wait(timeout=60)


@pytest.mark.parametrize(
    "content", [b"", b"{not json", b"[1, 2]", b'{"pid": "123"}', b'{"host": "x"}']
)
def test_an_unreadable_lock_is_stale(storage: LocalStorage, root: Path, content: bytes) -> None:
    root.mkdir(parents=True)
    lockfile(root).write_bytes(content)
    with open_run(storage, "r1") as run:
        assert run.session == 1
    assert not lockfile(root).exists()


def temporaries(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if name.endswith(".tmp"))


CHILD_LOCKS_WITH_NO_ROOM = """
import resource, signal, sys
from kassette import LocalStorage, StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))  # no byte may be written
try:
    with LocalStorage(sys.argv[1]).lock("r1", 1):
        print("locked")
except StorageError as exc:
    print("refused", exc)
"""


def test_a_lock_that_cannot_be_written_leaves_no_temporary_file(root: Path) -> None:
    """The disk refuses the holder's bytes (a real write failure: the process may write
    nothing); the temporary file it was to go in is removed with the failure, every time."""
    root.mkdir(parents=True)
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", CHILD_LOCKS_WITH_NO_ROOM, str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("refused cannot lock run r1"), done.stdout
    assert os.listdir(root) == []


def test_a_failed_write_of_the_lock_removes_its_temporary_file(
    storage: LocalStorage, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("kassette.storage._local.os.write", no_space)
    with pytest.raises(StorageError, match="No space left"), storage.lock("r1", 1):
        pass
    assert os.listdir(root) == []
    monkeypatch.undo()
    with storage.lock("r1", 1):
        assert os.listdir(root) == ["r1.lock"]


CHILD_KILLED_WHILE_LOCKING = """
import os, sys, time
from kassette import LocalStorage

def stuck(source, target):  # the temporary file is written: die before it is linked
    print("written", flush=True)
    time.sleep(600)

os.link = stuck
with LocalStorage(sys.argv[1]).lock("r1", 1):
    pass
"""


def test_temporary_files_of_killed_processes_are_swept_when_a_lock_is_next_taken(
    root: Path,
) -> None:
    root.mkdir(parents=True)
    killed = []
    for _ in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD_KILLED_WHILE_LOCKING, str(root)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline() == "written\n"
        child.kill()  # SIGKILL: no finally runs
        child.wait(timeout=60)
        child.stdout.close()
        killed.append(child.pid)
    # the second child's first lock swept the first one's file
    assert [name.split(".")[2] for name in temporaries(root)] == [str(killed[1])]
    old = root / ".r2.0123456789abcdef.lock.tmp"  # an older kassette's, no pid in its name
    old.write_bytes(b"")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    fresh = root / ".r3.fedcba9876543210.lock.tmp"  # maybe being written right now: kept
    fresh.write_bytes(b"")
    mine = root / f".r4.{os.getpid()}.00000000000000ff.lock.tmp"  # a live process's: kept
    mine.write_bytes(b"")
    with LocalStorage(root).lock("r1", 1):
        assert temporaries(root) == sorted([fresh.name, mine.name])


def test_close_leaves_a_lock_that_is_not_ours(storage: LocalStorage, root: Path) -> None:
    run = open_run(storage, "r1")
    write_holder(root, os.getpid(), "another-host.example", session=9)  # e.g. a reclaimer
    run.close()
    assert json.loads(lockfile(root).read_text())["session"] == 9


def test_locks_are_per_run(storage: LocalStorage) -> None:
    with open_run(storage, "r1"), open_run(storage, "r2"), storage.lock("r3", 1):
        pass
    with pytest.raises(InvalidArgumentError):
        storage.lock("../r1", 1).__enter__()


# -- open_storage ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("file:/x/journals", "/x/journals"),
        ("file:///x/journals", "/x/journals"),
        ("file:relative/dir", "relative/dir"),
        ("file://relative", "relative"),
        ("file:", ".kassette"),
    ],
)
def test_open_storage_file_urls(url: str, path: str) -> None:
    storage = open_storage(url)
    assert isinstance(storage, LocalStorage) and storage.path == Path(path)


def test_open_storage_memory_and_instances() -> None:
    first, second = open_storage("memory:"), open_storage("memory:")
    assert isinstance(first, MemoryStorage) and first is not second
    assert isinstance(first, Storage)
    local = LocalStorage("x")
    assert open_storage(local) is local


@pytest.mark.parametrize("url", ["ftp://host/x", "gs://bucket", "no-scheme", "", "/abs/path"])
def test_open_storage_unknown_scheme(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match="file:") as caught:
        open_storage(url)
    assert isinstance(caught.value, ValueError)


def test_open_storage_s3_works_or_names_the_extra() -> None:
    try:
        storage = open_storage("s3://my-bucket/some/prefix")
    except ImportError as exc:
        assert 'pip install "kassette[s3]"' in str(exc)
    else:
        assert isinstance(storage, Storage)


def test_open_storage_s3_without_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "kassette\[s3\]"'):
        open_storage("s3://my-bucket").read("r1")


def test_a_lock_whose_pid_was_reused_by_a_later_process_is_reclaimed(
    storage: LocalStorage, root: Path
) -> None:
    # this test process is alive, but it is not the holder that started at tick 1
    root.mkdir(parents=True, exist_ok=True)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "session": 1, "started": 1}
    lockfile(root).write_text(json.dumps(holder))
    with open_run(storage, "r1") as run:
        assert json.loads(lockfile(root).read_text())["started"] != 1
        assert run.session == 1


def test_a_live_holder_with_its_start_time_keeps_the_lock(storage: LocalStorage) -> None:
    with open_run(storage, "r1"), pytest.raises(RunLockedError):
        open_run(storage, "r1")


def test_a_temporary_name_is_written_and_read_by_one_rule(tmp_path: Path) -> None:
    """`kassette.storage._files` writes the temporary names (journal, lockfile, replaced journal,
    object) and parses the pid back from them, for the sweep of dead processes' files."""
    from kassette.storage._files import new_temporary, temporary_pid

    for stem, suffix in (("r1", ".tmp"), ("r1", ".lock.tmp"), ("notes.md", ".tmp")):
        path, fd = new_temporary(tmp_path, stem, suffix)
        os.close(fd)
        assert path.name.startswith(f".{stem}.") and temporary_pid(path.name) == os.getpid()
    assert temporary_pid(".r1.tmp") is None and temporary_pid("r1.jsonl") is None
