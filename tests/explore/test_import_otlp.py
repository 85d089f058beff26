"""kx.import_otlp on traces no one here wrote: the official OpenInference instrumentations
driving the real SDKs, exported by the OpenTelemetry SDK; then the same agent code replays
each imported run with no request to the model server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from kassette import LocalStorage, kassette
from kassette import explore as kx
from kassette.errors import InputMismatchError, ReplayMismatchError
from kassette.integrations import anthropic as journaled_anthropic
from kassette.integrations import openai as journaled_openai
from kassette.testing import FakeModelServer, fake_model_server
from tests.explore.import_support import CHAT_MODEL, agent, sdk_clients

ROOT = Path(__file__).resolve().parents[2]
TASKS = [{"city": "Paris"}, {"city": "Lima"}, {"city": "Oslo", "fail": "Oslo"}]


def produce(server: FakeModelServer, out: Path, tasks: list[dict[str, Any]]) -> list[Any]:
    """Run the agent in production (a separate, instrumented process); its answers."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.explore.import_support",
            server.url,
            str(out),
            json.dumps(tasks),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def replayer(storage: LocalStorage, clients: tuple[OpenAI, Anthropic]) -> Any:
    """The same agent code as a kassette workflow: clients journaled, the tool a step."""

    @kassette(storage=storage)
    def weather(ctx: Any, task: dict[str, Any]) -> str:
        openai_client = journaled_openai.journaled(clients[0], ctx)
        anthropic_client = journaled_anthropic.journaled(clients[1], ctx)
        return agent(openai_client, anthropic_client, ctx.step, task)

    return weather


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    out = tmp_path_factory.mktemp("production") / "traces.jsonl"
    with fake_model_server() as server:
        answers = produce(server, out, TASKS)
    return out, answers


def test_openinference_traces_become_runs_with_journaled_step_names(
    production: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    traces, _answers = production
    lines = traces.read_text().splitlines()
    assert len(lines) > len(TASKS)  # the SDK's batches spread the traces over the lines
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_otlp(traces, storage)
    assert len(report.run_ids) == 3 and report.written == report.run_ids
    assert report.partial == {}
    journals = kx.load(storage)
    runs = journals.runs.set_index("run_id").loc[list(report.run_ids)]
    assert [json.loads(text) for text in runs["input"]] == TASKS
    assert list(runs["status"]) == ["running"] * 3  # open: a workflow replays them
    assert all(source.startswith("otlp:traces.jsonl#") for source in runs["imported_from"])
    entries = journals.entries
    ok_steps = entries[entries.run_id == report.run_ids[0]]["step_id"].dropna().tolist()
    assert ok_steps == [
        "chat.completions.create",
        "get_weather",
        "chat.completions.create#2",
        "messages.create",
    ]
    failed = runs.loc[report.run_ids[2]]
    assert failed["error"].startswith("RuntimeError: no weather station in Oslo")
    failed_steps = entries[entries.run_id == report.run_ids[2]]["step_id"].dropna().tolist()
    assert failed_steps == ["chat.completions.create"]  # the failed tool is where it stops
    calls = journals.llm_calls
    assert set(calls["model"]) == {CHAT_MODEL, "claude-sonnet-4-5"}
    assert (calls["input_tokens"] > 0).all() and (calls["output_tokens"] > 0).all()


def test_the_same_agent_code_replays_imported_runs_with_zero_requests(
    production: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    traces, answers = production
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_otlp(traces, storage)
    with fake_model_server() as server, sdk_clients(server) as clients:
        weather = replayer(storage, clients)
        for run_id, task, answer in zip(report.run_ids[:2], TASKS[:2], answers[:2], strict=True):
            result = weather.start(task, run_id=run_id)
            assert result.status == "success"
            assert result.result == answer["answer"]
        assert server.request_count == 0
        # the failed run replays its first model call, then runs the failing tool live again
        failed = weather.start(TASKS[2], run_id=report.run_ids[2])
        assert failed.status == "failed" and "Oslo" in failed.error.message
        assert server.request_count == 0


def test_a_changed_request_stops_the_replay_naming_the_step(
    production: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    traces, _answers = production
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_otlp(traces, storage)
    with fake_model_server() as server, sdk_clients(server) as clients:
        weather = replayer(storage, clients)
        changed = {"city": "Paris", "extra": 1}
        with pytest.raises(InputMismatchError):  # another input: the run was another task's
            weather.start(changed, run_id=report.run_ids[0])

        @kassette(storage=storage)
        def colder(ctx: Any, task: dict[str, Any]) -> Any:
            client = journaled_openai.journaled(clients[0], ctx)
            return client.chat.completions.create(
                model=CHAT_MODEL, messages=[{"role": "user", "content": "hi"}], temperature=0
            ).id

        with pytest.raises(ReplayMismatchError) as raised:
            colder.start(TASKS[1], run_id=report.run_ids[1])
        assert raised.value.step_id == "chat.completions.create"
        assert server.request_count == 0


def test_importing_again_writes_nothing(production: tuple[Path, list[Any]], tmp_path: Path) -> None:
    traces, _answers = production
    storage = LocalStorage(tmp_path / "store")
    first = kx.import_otlp(traces, storage)
    before = {path.name: path.read_bytes() for path in (tmp_path / "store").glob("*.jsonl")}
    again = kx.import_otlp(traces, storage)
    after = {path.name: path.read_bytes() for path in (tmp_path / "store").glob("*.jsonl")}
    assert again.run_ids == first.run_ids and again.written == ()
    assert after == before


def test_step_names_map_to_the_users_own_step_ids(
    production: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    traces, _answers = production
    storage = LocalStorage(tmp_path / "store")
    names = {"chat.completions.create": "draft", "get_weather": "weather"}
    report = kx.import_otlp(traces, storage, step_names=names)
    entries = kx.load(storage).entries
    steps = entries[entries.run_id == report.run_ids[0]]["step_id"].dropna().tolist()
    assert steps == ["draft", "weather", "draft#2", "messages.create"]
