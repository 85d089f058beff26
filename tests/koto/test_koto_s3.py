"""Sessions in S3: a session started in one home continues in another sharing the bucket.

Two koto homes (two "machines") point at one bucket on a local moto server (the S3 backend's
test server, tests/storage/s3_server.py). Appends are compare-and-swap, so two machines
calling `next` at once are fenced instead of overwriting each other.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Koto

from kassette._journal import Journal

pytest.importorskip("boto3")
pytest.importorskip("moto")

STORAGE_TESTS = Path(__file__).resolve().parents[1] / "storage"
PREFIX = "team/koto"
WAIT = 60


def _server_module() -> Any:
    if str(STORAGE_TESTS) not in sys.path:
        sys.path.insert(0, str(STORAGE_TESTS))
    import s3_server

    return s3_server


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server, url = _server_module().start_server()
    yield url
    server.stop()


@pytest.fixture
def client(endpoint: str) -> Iterator[Any]:
    client = _server_module().make_client(endpoint)
    yield client
    client.close()


@pytest.fixture
def bucket(client: Any) -> str:
    name = f"koto-test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=name)
    return name


def machine(root: Path, endpoint: str, bucket: str, *, credentials_in_config: bool) -> Koto:
    """A koto home whose user config puts sessions in the shared bucket."""
    server = _server_module()
    koto = Koto(root)
    koto.home.mkdir(parents=True)
    lines = [
        "[session]",
        'backend = "s3"',
        "[session.s3]",
        f'bucket = "{bucket}"',
        f'prefix = "{PREFIX}"',
        f'endpoint = "{endpoint}"',
        f'region = "{server.REGION}"',
    ]
    koto.environment.update(
        AWS_CONFIG_FILE="/nonexistent/koto-test-aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/koto-test-aws-credentials",
    )
    if credentials_in_config:
        lines += [f'access_key = "{server.ACCESS_KEY}"', f'secret_key = "{server.SECRET_KEY}"']
    else:
        koto.environment.update(
            AWS_ACCESS_KEY_ID=server.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=server.SECRET_KEY
        )
    (koto.home / "config.toml").write_text("\n".join(lines) + "\n")
    return koto


def keys(client: Any, bucket: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/")
    return sorted(item["Key"] for item in listed.get("Contents", []))


def test_a_session_continues_on_another_machine(
    tmp_path: Path, endpoint: str, bucket: str, client: Any
) -> None:
    laptop = machine(tmp_path / "laptop", endpoint, bucket, credentials_in_config=False)
    desktop = machine(tmp_path / "desktop", endpoint, bucket, credentials_in_config=True)
    desktop.cwd = laptop.cwd  # the same checkout path on both: gates run where init ran
    laptop.ok("init", "job", "--template", laptop.template("lifecycle"), "--var", "TASK=sync")
    laptop.ok("next", "job", "--with-data", '{"approach": "started on the laptop"}')
    assert laptop("context", "add", "job", "notes.md", input=b"laptop notes").code == 0
    assert not (laptop.home / "sessions" / "job" / "job.jsonl").exists()  # nothing local

    status = desktop.ok("status", "job")
    assert status["current_state"] == "build"
    assert status["template_path"].startswith(f"s3://{bucket}/{PREFIX}/job/template-")
    assert desktop("context", "get", "job", "notes.md").stdout == b"laptop notes"
    assert desktop.ok("next", "job", "--with-data", '{"outcome": "ok"}')["state"] == "review"
    assert [row["id"] for row in desktop.ok("session", "list")] == ["job"]

    done = laptop.ok("next", "job", "--with-data", '{"verdict": "approve"}', "--no-cleanup")
    assert done["state"] == "done"
    assert desktop.ok("status", "job")["is_terminal"] is True

    body = client.get_object(Bucket=bucket, Key=f"{PREFIX}/job/journal.jsonl")["Body"].read()
    journal = Journal.parse(body, "job")
    moves = [(e["from"], e["to"]) for e in journal.entries if e["type"] == "transitioned"]
    assert moves == [(None, "plan"), ("plan", "build"), ("build", "review"), ("review", "done")]
    assert f"{PREFIX}/job/journal.jsonl" in keys(client, bucket)

    assert desktop.ok("session", "cleanup", "job")["cleaned_up"] is True
    assert keys(client, bucket) == []
    assert laptop("status", "job").code == 2


def test_two_machines_at_once_are_fenced(
    tmp_path: Path, endpoint: str, bucket: str, client: Any
) -> None:
    first = machine(tmp_path / "first", endpoint, bucket, credentials_in_config=False)
    second = machine(tmp_path / "second", endpoint, bucket, credentials_in_config=False)
    second.cwd = first.cwd  # the same checkout path on both: gates run where init ran
    first.ok("init", "c", "--template", first.template("concurrent"))
    processes = [first.start("next", "c"), second.start("next", "c")]
    codes, answers = [], []
    for process in processes:
        stdout, stderr = process.communicate(timeout=WAIT)
        codes.append(process.returncode)
        answers.append(json.loads(stdout))
        if process.returncode:
            assert answers[-1]["error"]["code"] == "concurrent_access", (stdout, stderr)
    assert 0 in codes and set(codes) <= {0, 1}
    body = client.get_object(Bucket=bucket, Key=f"{PREFIX}/c/journal.jsonl")["Body"].read()
    journal = Journal.parse(body, "c")
    sessions = [entry["session"] for entry in journal.entries]
    assert sessions == sorted(sessions)  # a fenced session never wrote after a newer one
    moves = [(e["from"], e["to"]) for e in journal.entries if e["type"] == "transitioned"]
    assert moves == [(None, "wait"), ("wait", "ready")]
    assert first.ok("status", "c")["current_state"] == "ready"
