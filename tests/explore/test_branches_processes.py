"""Fan-out across processes: a ProcessPoolExecutor, a real Dask cluster (onto local files and
onto a real S3-protocol server), and durability when the process running a fan-out is killed.

Concurrency is proven with a barrier on files that opens only when every branch has reached
it (a bound on the wait, no timing); durability by SIGKILL of a real process mid fan-out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import branch_support
import pytest
from branch_support import agent, calls

from kassette import LocalStorage, kassette
from kassette import explore as kx
from kassette.core import read_journal, run_status
from kassette.storage import Storage

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
STORAGE_TESTS = HERE.parent / "storage"
BRANCHES = 8
WAIT_LIMIT_S = 120


def _source(storage: Storage, root: Path, **task: Any) -> Any:
    workflow = kassette(agent, storage=storage)
    workflow.start({"root": str(root), "source": "root", **task}, run_id="root")
    return workflow


def _check_journals(storage: Storage, branches: kx.Branches, parties: int) -> None:
    for run_id in branches.run_ids:
        journal = read_journal(storage, run_id)
        assert journal.status().status == "completed", run_id
        assert journal.status().source == {"runId": "root", "fromOffset": 2}
        steps = [e["stepId"] for e in journal.entries if e["type"] == "step"]
        assert steps == ["plan", "draft", "meet", "score"]
        assert journal.steps["meet"]["result"] >= parties


def test_a_process_pool_runs_the_branches_at_once(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "journals")
    workflow = _source(storage, tmp_path, parties=4)
    with ProcessPoolExecutor(4) as pool:
        branches = kx.fan_out(workflow, "root", step="draft", n=4, executor=pool)
    frame = branches.frame
    assert frame["status"].tolist() == ["success"] * 4, frame["error"].tolist()
    assert len({result["pid"] for result in frame["result"]} - {os.getpid()}) >= 1
    _check_journals(storage, branches, 4)


def test_a_process_pool_refuses_a_workflow_it_cannot_pickle(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "journals")
    local = kassette(lambda ctx, task: ctx.step("draft", lambda: 1), storage=storage)
    local.start(None, run_id="root")
    with ProcessPoolExecutor(1) as pool, pytest.raises(ValueError, match="importable module"):
        kx.fan_out(local, "root", step="draft", n=2, executor=pool)
    assert list(storage.list_runs()) == ["root"]


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A real Dask cluster: a scheduler and two worker processes on 127.0.0.1."""
    distributed = pytest.importorskip("distributed")
    import logging

    logging.getLogger("distributed").setLevel(logging.ERROR)
    started = time.monotonic()
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=4,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # None still serves on 8787: two clusters clash
        silence_logs=logging.ERROR,
    )
    client = distributed.Client(cluster)
    client.started_in = time.monotonic() - started
    yield client
    client.close()
    cluster.close()


def test_dask_runs_branches_onto_local_files(tmp_path: Path, dask_client: Any) -> None:
    storage = LocalStorage(tmp_path / "journals")
    workflow = _source(storage, tmp_path, parties=BRANCHES)
    branches = kx.fan_out(
        workflow,
        "root",
        step="draft",
        n=BRANCHES,
        executor=dask_client.get_executor(),
        score=lambda r: r.result["score"],
    )
    frame = branches.frame
    assert frame["status"].tolist() == ["success"] * BRANCHES, frame["error"].tolist()
    assert {result["pid"] for result in frame["result"]}.isdisjoint({os.getpid()})
    assert len(branches.best(k=3)) == 3
    _check_journals(storage, branches, BRANCHES)


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """A moto S3 server on 127.0.0.1 and a fresh bucket; boto3's environment points at it."""
    pytest.importorskip("moto")
    if str(STORAGE_TESTS) not in sys.path:
        sys.path.insert(0, str(STORAGE_TESTS))
    import s3_server

    server, endpoint = s3_server.start_server()
    for name, value in {
        "AWS_ACCESS_KEY_ID": s3_server.ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": s3_server.SECRET_KEY,
        "AWS_DEFAULT_REGION": s3_server.REGION,
    }.items():
        monkeypatch.setenv(name, value)
    client = s3_server.make_client(endpoint)
    bucket = f"kassette-fan-out-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    yield client, bucket
    client.close()
    server.stop()


def test_dask_runs_branches_onto_s3(
    tmp_path: Path, dask_client: Any, s3_bucket: tuple[Any, str]
) -> None:
    from kassette.storage._s3 import S3Storage

    client, bucket = s3_bucket
    storage = S3Storage(bucket, "fan-out", client)
    workflow = _source(storage, tmp_path, parties=BRANCHES)
    # the workers get credentials from their environment, as on a real cluster
    credentials = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    dask_client.run(branch_support.set_environment, credentials)
    branches = kx.fan_out(
        workflow, "root", step="draft", n=BRANCHES, executor=dask_client.get_executor()
    )
    frame = branches.frame
    assert frame["status"].tolist() == ["success"] * BRANCHES, frame["error"].tolist()
    _check_journals(storage, branches, BRANCHES)
    assert sorted(storage.list_runs()) == ["root", *branches.run_ids]


def _wait_for(condition: Any, what: str) -> None:
    for _ in range(WAIT_LIMIT_S * 20):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def test_a_fan_out_killed_midway_finishes_on_rerun_and_runs_no_journaled_step_twice(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path / "journals")
    _source(storage, tmp_path, steps=3)
    (tmp_path / "block").touch()  # odd branches stop before their second work step
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    command = [sys.executable, str(HERE / "branch_support.py"), str(tmp_path)]
    child = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL)
    run_ids = [f"root.draft.{index}" for index in range(BRANCHES)]
    try:

        def midway() -> bool:
            blocked = all((tmp_path / f"blocked.{r}").exists() for r in run_ids[1::2])
            return blocked and all(
                storage.read(r) is not None and run_status(storage, r).status == "completed"
                for r in run_ids[0::2]
            )

        _wait_for(midway, "half the branches done and half blocked")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=WAIT_LIMIT_S)
    assert child.returncode == -signal.SIGKILL
    journaled = {
        run_id: [
            e["stepId"]
            for e in read_journal(storage, run_id).entries
            if e["type"] == "step" and e["session"] > 1  # the branch's own, not the copied plan
        ]
        for run_id in run_ids
    }
    finished = ["draft", "work", "work#2", "work#3", "score"]
    assert all(journaled[r] == finished for r in run_ids[0::2])
    assert all(journaled[r] == ["draft", "work"] for r in run_ids[1::2])
    sessions = {run_id: run_status(storage, run_id).sessions for run_id in run_ids}

    (tmp_path / "block").unlink()
    rerun = subprocess.run(command, env=environment, capture_output=True, timeout=WAIT_LIMIT_S)
    assert rerun.returncode == 0, rerun.stderr.decode()
    rows = json.loads(rerun.stdout)
    assert [row["status"] for row in rows] == ["success"] * BRANCHES
    names = {"draft": "draft", "work": "work0", "work#2": "work1", "work#3": "work2"}
    for run_id in run_ids:
        assert run_status(storage, run_id).status == "completed"
        for step_id in journaled[run_id]:  # journaled before the kill: never called again
            assert calls(tmp_path, run_id, names.get(step_id, step_id)) == 1, (run_id, step_id)
    for run_id in run_ids[0::2]:  # finished before the kill: the rerun only read its status
        assert run_status(storage, run_id).sessions == sessions[run_id]
    for run_id in run_ids[1::2]:  # continued in one new session from its first missing step
        assert run_status(storage, run_id).sessions == sessions[run_id] + 1
        assert calls(tmp_path, run_id, "work1") == 1
