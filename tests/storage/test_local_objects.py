"""LocalStorage's objects beside the journals (read_object, write_object, object_url,
delete_run), the same capability S3Storage has (tests/storage/test_s3_objects.py): layout under
`{path}/{runId}/`, coexistence with the journal, deletion scoped to one run, names refused
before any I/O, and a write that is atomic and durable (fsynced, then renamed, then the
directory fsynced), checked by SIGKILLing real writers.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kassette import InvalidArgumentError, LocalStorage, MemoryStorage, StorageError, kassette
from kassette._journal import encode
from kassette.storage import ObjectStorage, Storage, validate_object_name
from kassette.storage._local import replace_file
from kassette.storage._s3 import S3Storage

START = encode({"type": "start", "session": 1, "offset": 0})
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def pipeline(ctx: Any, input: Any) -> str:
    return str(ctx.step("only", lambda: "done"))


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_both_object_backends_implement_the_protocol_and_storage_keeps_four_methods() -> None:
    assert issubclass(LocalStorage, ObjectStorage) and issubclass(S3Storage, ObjectStorage)
    assert not isinstance(MemoryStorage(), ObjectStorage)
    assert isinstance(LocalStorage("x"), ObjectStorage) and isinstance(LocalStorage("x"), Storage)
    assert {name for name in vars(Storage) if not name.startswith("_")} == {
        "read",
        "append",
        "list_runs",
        "lock",
    }


def test_objects_round_trip_under_the_runs_directory(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "runs")
    assert storage.read_object("r1", "template-abc.json") is None
    storage.write_object("r1", "template-abc.json", b'{"v": 1}')
    storage.write_object("r1", "ctx/0123", b"\x00binary\xff")
    assert storage.read_object("r1", "template-abc.json") == b'{"v": 1}'
    assert storage.read_object("r1", "ctx/0123") == b"\x00binary\xff"
    assert storage.read_object("r2", "ctx/0123") is None
    storage.write_object("r1", "ctx/0123", b"replaced")
    assert storage.read_object("r1", "ctx/0123") == b"replaced"
    assert files(tmp_path / "runs") == ["r1/ctx/0123", "r1/template-abc.json"]  # no temporaries
    assert storage.object_url("r1", "ctx/0123") == str(tmp_path / "runs" / "r1" / "ctx" / "0123")
    assert list(storage.list_runs()) == []  # objects without a journal are no run


def test_objects_beside_a_journal_leave_the_run_alone(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    assert kassette(pipeline, storage=storage).start(run_id="r1").result == "done"
    before = storage.read("r1")
    storage.write_object("r1", "notes/one.md", b"one")
    assert storage.read("r1") == before
    assert list(storage.list_runs()) == ["r1"]
    token = storage.append("r2", START, token=None)
    storage.write_object("r2", "ctx/x", b"x")
    storage.append("r2", b'{"x": 1}\n', token=token)
    snapshot = storage.read("r2")
    assert snapshot is not None and snapshot.data == START + b'{"x": 1}\n'


def test_delete_run_removes_the_journal_and_everything_beside_it_and_nothing_else(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path)
    for run_id in ["r1", "r10"]:  # r10 shares r1's first characters, not its directory
        storage.append(run_id, START, token=None)
        storage.write_object(run_id, "template-x.json", b"t")
        storage.write_object(run_id, "ctx/deep/er", b"c")
    dead = {"pid": 999_999_999, "host": os.uname().nodename, "session": 1}
    (tmp_path / "r1.lock").write_text(json.dumps(dead))  # left by a killed holder
    storage.delete_run("r1")
    assert files(tmp_path) == ["r10.jsonl", "r10/ctx/deep/er", "r10/template-x.json"]
    assert storage.read("r1") is None and storage.read_object("r1", "ctx/deep/er") is None
    assert list(storage.list_runs()) == ["r10"]
    storage.delete_run("r1")  # idempotent
    storage.delete_run("never-was")
    LocalStorage(tmp_path / "missing").delete_run("r1")

    token = storage.append("r1", START, token=None)  # the name is free again
    storage.append("r1", b'{"again": 1}\n', token=token)
    snapshot = storage.read("r1")
    assert snapshot is not None and snapshot.data == START + b'{"again": 1}\n'


def test_delete_run_keeps_the_lock_of_a_live_session(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.append("r1", START, token=None)
    with storage.lock("r1", 2):
        storage.delete_run("r1")
        assert (tmp_path / "r1.lock").exists()
    assert files(tmp_path) == []


@pytest.mark.parametrize(
    "name",
    ["", "/absolute", "trailing/", "a//b", ".", "..", "../r2.jsonl", "ctx/../../escape",
     "a/./b", "back\\slash", "new\nline", "x" * 1100, 7],
)  # fmt: skip
def test_an_object_name_that_could_escape_is_refused_before_any_io(
    name: Any, tmp_path: Path
) -> None:
    storage = LocalStorage(tmp_path / "runs")
    for call in (
        lambda: storage.read_object("r1", name),
        lambda: storage.write_object("r1", name, b"x"),
        lambda: storage.object_url("r1", name),
    ):
        with pytest.raises(InvalidArgumentError, match="invalid object name"):
            call()
    with pytest.raises(InvalidArgumentError):
        validate_object_name(name)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("run_id", ["", "..", "a/b", "../r1", "-dash"])
def test_an_invalid_run_id_is_refused_before_any_io(run_id: str, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "runs")
    for call in (
        lambda: storage.read_object(run_id, "ctx/a"),
        lambda: storage.write_object(run_id, "ctx/a", b"x"),
        lambda: storage.object_url(run_id, "ctx/a"),
        lambda: storage.delete_run(run_id),
    ):
        with pytest.raises(InvalidArgumentError):
            call()
    assert not (tmp_path / "runs").exists()


def test_failures_are_storage_errors_naming_the_run(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    (tmp_path / "r1").write_text("a file where the run's directory should be")
    with pytest.raises(StorageError, match="cannot write") as caught:
        storage.write_object("r1", "ctx/a", b"x")
    assert caught.value.run_id == "r1"
    storage.write_object("r2", "ctx/a/b", b"x")
    with pytest.raises(StorageError, match="cannot read") as caught:
        storage.read_object("r2", "ctx/a")  # a directory, not an object
    assert caught.value.run_id == "r2"


def test_a_write_is_fsynced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(source: Any, target: Any) -> None:
        events.append(("replace", str(target)))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    LocalStorage(tmp_path).write_object("r1", "ctx/a", b"content")
    target = tmp_path / "r1" / "ctx" / "a"
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
    assert events[0][1].startswith(str(target.parent / ".a."))  # the temporary file
    assert events[1][1] == str(target)
    assert events[2][1] == str(target.parent)  # the rename itself made durable


def test_replace_file_sets_the_mode_and_leaves_no_temporary_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "config.toml"
    replace_file(target, b"secret = 1\n", mode=0o600)
    assert target.read_bytes() == b"secret = 1\n"
    assert target.stat().st_mode & 0o777 == 0o600
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "taken").mkdir()
    with pytest.raises(OSError):
        replace_file(tmp_path / "dir" / "taken", b"x")  # cannot rename over a directory
    assert sorted(os.listdir(tmp_path / "dir")) == ["taken"]


def test_replace_file_follows_a_symlink_and_never_renames_over_a_special_file(
    tmp_path: Path,
) -> None:
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    replace_file(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        replace_file(fifo, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["config.toml", "dotfiles", "fifo"]


WRITER = """
import sys
from kassette import LocalStorage
storage = LocalStorage(sys.argv[1])
print("ready", flush=True)
for number in range(1_000_000):
    storage.write_object("r1", "ctx/big", bytes([65 + number % 2]) * 300_000)
"""


def test_a_killed_writer_leaves_the_old_object_or_the_new_never_a_mix(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write_object("r1", "ctx/big", b"A" * 300_000)
    environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    kills = 0
    deadline = time.monotonic() + 60
    while kills < 15 and time.monotonic() < deadline:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)],
            stdout=subprocess.PIPE,
            env=environment,
        )
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
        time.sleep(0.01 * (kills % 5))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        kills += 1
        data = storage.read_object("r1", "ctx/big")
        assert data in (b"A" * 300_000, b"B" * 300_000)
    assert kills >= 10
