"""Recording never changes the request (issue 32 items 1-5), with the real SDKs against
kassette's fake model server: what reaches the model is what the user passed, the journal
holds what reached it, a file is recorded by its bytes, and two requests the provider reads
alike (a null field and an absent one; a set in any order) replay across SDK versions and
processes.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from model_fixtures import Crash, claude_fixture, gpt_fixture, server_fixture  # noqa: F401 - fixtures
from openai import OpenAI

from kassette import LocalStorage, MemoryStorage, ReplayMismatchError, kassette
from kassette.core import read_journal
from kassette.integrations.anthropic import journaled as journaled_anthropic
from kassette.integrations.openai import journaled as journaled_openai
from kassette.testing import FakeModelServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4 + b"\nsecond line\n"


def image(data: Any) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def the_call(storage: Any, run_id: str) -> dict[str, Any]:
    [step] = [e for e in read_journal(storage, run_id).entries if e["type"] == "step"]
    return dict(step["call"]["request"])


@pytest.mark.parametrize("kind", ["bytesio", "open file", "pipe"])
def test_an_anthropic_image_file_object_reaches_the_model_whole(
    server: FakeModelServer, claude: Anthropic, tmp_path: Path, kind: str
) -> None:
    storage = MemoryStorage()
    (tmp_path / "cat.png").write_bytes(PNG)
    files: list[Any] = []

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        if kind == "bytesio":
            file: Any = io.BytesIO(PNG)
        elif kind == "open file":
            file = open(tmp_path / "cat.png", "rb")  # noqa: SIM115 - read by the SDK
        else:  # a pipe cannot be rewound: read once, for the journal and the SDK
            read, write = os.pipe()
            os.write(write, PNG)
            os.close(write)
            file = open(read, "rb")  # noqa: SIM115
        files.append(file)
        content = [image(file), {"type": "text", "text": "What is in this picture?"}]
        reply = journaled_anthropic(claude, ctx).messages.create(
            model="claude-fake", max_tokens=100, messages=[{"role": "user", "content": content}]
        )
        return reply.content[0].text  # type: ignore[union-attr]

    agent.start("", run_id="img")
    for file in files:
        file.close()
    [(_, body)] = server.requests
    sent = body["messages"][0]["content"][0]["source"]["data"]
    assert base64.b64decode(sent) == PNG, "the model got the whole image"
    assert the_call(storage, "img") == body, "the journal holds what was sent"


def test_a_generator_in_a_request_reaches_the_model_and_the_journal(
    server: FakeModelServer, gpt: OpenAI, claude: Anthropic
) -> None:
    storage = MemoryStorage()

    def parts(*texts: str) -> Iterator[dict[str, Any]]:
        yield from ({"type": "text", "text": text} for text in texts)

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> None:
        journaled_openai(gpt, ctx).chat.completions.create(
            model="gpt-fake",
            messages=[{"role": "user", "content": parts("Compare", "tides and moons")}],
        )
        journaled_anthropic(claude, ctx).messages.create(
            model="claude-fake",
            max_tokens=100,
            messages=iter([{"role": "user", "content": parts("Explain", "the moon")}]),
        )

    agent.start("", run_id="gen")
    (_, chat), (_, messages) = server.requests
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "text", "text": "tides and moons"},
    ]
    assert messages["messages"][0]["content"] == [
        {"type": "text", "text": "Explain"},
        {"type": "text", "text": "the moon"},
    ]
    calls = [e["call"] for e in read_journal(storage, "gen").entries if e["type"] == "step"]
    assert [call["request"] for call in calls] == [chat, messages]


def test_an_image_path_is_journaled_by_its_bytes_so_a_changed_file_is_a_mismatch(
    server: FakeModelServer, claude: Anthropic, tmp_path: Path
) -> None:
    storage = MemoryStorage()
    picture = tmp_path / "cat.png"
    picture.write_bytes(PNG)
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        content = [image(picture), {"type": "text", "text": "Describe it"}]
        reply = journaled_anthropic(claude, ctx).messages.create(
            model="claude-fake", max_tokens=100, messages=[{"role": "user", "content": content}]
        )
        if crash[0]:
            raise Crash
        return reply.content[0].text  # type: ignore[union-attr]

    with pytest.raises(Crash):
        agent.start("", run_id="path")
    [(_, body)] = server.requests
    assert the_call(storage, "path") == body
    assert base64.b64decode(body["messages"][0]["content"][0]["source"]["data"]) == PNG

    picture.write_bytes(PNG.replace(b"second", b"changed"))
    crash[0] = False
    with pytest.raises(ReplayMismatchError, match=r"messages\[0\]\.content\[0\]\.source\.data"):
        agent.start("", run_id="path")
    assert server.request_count == 1

    picture.write_bytes(PNG)  # the same bytes again: the same request, replayed
    assert agent.start("", run_id="path").status == "success"
    assert server.request_count == 1


@pytest.mark.parametrize("recorded_null", [True, False], ids=["0.60-then-2.x", "2.x-then-0.60"])
def test_a_null_field_and_an_absent_one_replay_alike(
    server: FakeModelServer, claude: Anthropic, recorded_null: bool
) -> None:
    """anthropic 0.60's stream helper passes a text block back with `citations: null`, 2.x
    without it: the API reads both alike, so either resumes the other's run."""
    storage = MemoryStorage()
    crash = [True]

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        client = journaled_anthropic(claude, ctx)
        asked = [{"role": "user", "content": "Plan the launch"}]
        first = client.messages.create(model="claude-fake", max_tokens=100, messages=asked)
        block: dict[str, Any] = {"type": "text", "text": first.content[0].text}  # type: ignore[union-attr]
        if crash[0] == recorded_null:  # the first invocation is the one SDK, the resume the other
            block["citations"] = None
        again = [
            *asked,
            {"role": "assistant", "content": [block]},
            {"role": "user", "content": "Go on"},
        ]
        second = client.messages.create(model="claude-fake", max_tokens=100, messages=again)
        if crash[0]:
            raise Crash
        return second.content[0].text  # type: ignore[union-attr]

    with pytest.raises(Crash):
        agent.start("", run_id="v")
    crash[0] = False
    assert agent.start("", run_id="v").status == "success"
    assert server.request_count == 2, "both calls replayed"


def test_a_real_change_next_to_a_null_is_still_a_mismatch(
    server: FakeModelServer, claude: Anthropic
) -> None:
    storage = MemoryStorage()
    system = [None]

    @kassette(storage=storage)
    def agent(ctx: Any, _: str) -> str:
        extra = {} if system[0] is None else {"system": system[0]}
        reply = journaled_anthropic(claude, ctx).messages.create(
            model="claude-fake", max_tokens=100, messages=[{"role": "user", "content": "Hi"}],
            metadata={"user_id": None}, **extra,
        )  # fmt: skip
        if system[0] is None:
            raise Crash
        return reply.content[0].text  # type: ignore[union-attr]

    with pytest.raises(Crash):
        agent.start("", run_id="n")
    system[0] = "Be terse."
    with pytest.raises(ReplayMismatchError, match="system"):
        agent.start("", run_id="n")


SET_WORKER = """
import json, sys
from anthropic import Anthropic
from kassette import LocalStorage, kassette
from kassette.integrations.anthropic import journaled

directory, url, crash = sys.argv[1], sys.argv[2], sys.argv[3] == "crash"
stops = {"Observation:", "Final answer:", "END", "###", "Question:", "STOP", "</done>"}
sdk = Anthropic(api_key="k", base_url=url, max_retries=0)

@kassette(storage=LocalStorage(directory))
def agent(ctx, _):
    reply = journaled(sdk, ctx).messages.create(
        model="claude-fake", max_tokens=100, stop_sequences=stops,
        messages=[{"role": "user", "content": "Think step by step"}],
    )
    if crash:  # the process dies with the call journaled, the run open
        print(json.dumps(list(stops)), flush=True)
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    return reply.content[0].text

result = agent.start("", run_id="sets")
print(json.dumps([list(stops), result.status]))
"""


def test_a_set_in_a_request_replays_in_a_process_with_another_hash_order(
    server: FakeModelServer, tmp_path: Path
) -> None:
    worker = tmp_path / "set_worker.py"
    worker.write_text(SET_WORKER)

    def run(seed: str, crash: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        return subprocess.run(
            [sys.executable, str(worker), str(tmp_path / "store"), server.anthropic_base_url,
             crash],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    first = run("1", "crash")
    assert first.returncode == -9, first.stderr  # SIGKILLed
    second = run("2", "resume")
    assert second.returncode == 0, second.stderr
    order, status = json.loads(second.stdout)
    assert order != json.loads(first.stdout), "the two processes iterate the set differently"
    assert status == "success" and server.request_count == 1
    [(_, body)] = server.requests
    assert body["stop_sequences"] == sorted(body["stop_sequences"]), "canonical: sorted"
    assert the_call(LocalStorage(tmp_path / "store"), "sets") == body
