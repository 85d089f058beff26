"""`make lab`'s store writer (examples/demo_store.py) interrupted: it must leave no partial
store, and the next call must complete it (issue 32, item 18). The writer runs in a real
process that gets a real SIGINT, as Ctrl-C in a terminal sends it to the whole group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kassette import LocalStorage
from kassette.core import run_status

ROOT = Path(__file__).resolve().parent.parent
WRITER = ROOT / "examples" / "demo_store.py"
BRANCHES = [f"support-1.draft-reply.{number}" for number in range(20)]
WAIT_LIMIT_S = 300


def _writer(cwd: Path) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("KASSETTE_STORAGE", None)
    return subprocess.Popen(
        [sys.executable, str(WRITER), "demo-store"],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group gets the SIGINT, as a terminal's would
    )


def _written(cwd: Path) -> str:
    writer = _writer(cwd)
    out, err = writer.communicate(timeout=WAIT_LIMIT_S)
    assert writer.returncode == 0, f"{out}\n{err}"
    return out


def _assert_complete(store: Path) -> None:
    storage = LocalStorage(store)
    runs = set(storage.list_runs())
    assert {"INC-4821", "support-1", *BRANCHES} <= runs
    assert {run_status(storage, r).status for r in ["support-1", *BRANCHES]} == {"completed"}


def test_an_interrupted_writer_leaves_no_store_and_the_next_call_writes_it_whole(
    tmp_path: Path,
) -> None:
    writer = _writer(tmp_path)
    writing = tmp_path / ".demo-store.writing"
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not (writing / "INC-4821.jsonl").exists():  # the demo's story has begun
        assert writer.poll() is None, writer.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(writer.pid, signal.SIGINT)
    writer.communicate(timeout=WAIT_LIMIT_S)
    assert writer.returncode != 0
    assert not (tmp_path / "demo-store").exists()  # nothing partial where make lab looks

    out = _written(tmp_path)
    assert "written: demo-store/" in out
    _assert_complete(tmp_path / "demo-store")
    assert not writing.exists()


def test_a_partial_store_an_older_writer_left_is_written_again(tmp_path: Path) -> None:
    _written(tmp_path)
    store = tmp_path / "demo-store"
    for run_id in BRANCHES[4:]:  # as an interrupted older writer left it: 4 of 20 branches
        (store / f"{run_id}.jsonl").unlink()
    out = _written(tmp_path)
    assert "was left partial by an interrupted writer: written again" in out
    _assert_complete(store)
    again = _written(tmp_path)
    assert "already holds runs: kept as it is" in again


def test_a_folder_of_other_runs_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "demo-store"
    store.mkdir()
    (store / "mine.jsonl").write_text("")
    writer = _writer(tmp_path)
    _, err = writer.communicate(timeout=WAIT_LIMIT_S)
    assert writer.returncode == 1
    assert "holds runs this script did not write" in err
    assert [p.name for p in store.iterdir()] == ["mine.jsonl"]
