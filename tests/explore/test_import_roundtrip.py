"""kassette's own traces back in: a store, exported as OTLP, imported, is the same runs, and
the same code replays them with zero requests; without content, every run says what it lacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anthropic import Anthropic
from openai import OpenAI

from kassette import LocalStorage, Storage, kassette
from kassette import explore as kx
from kassette.integrations import anthropic as journaled_anthropic
from kassette.integrations import openai as journaled_openai
from kassette.testing import fake_model_server
from tests.explore.import_support import agent, sdk_clients

TASKS = {"plan-a": "a cheap trip to Lisbon", "plan-b": "moving a piano", "plan-c": "tax forms"}


def planner(storage: Storage, clients: tuple[OpenAI, Anthropic]) -> Any:
    @kassette(storage=storage, version="planner-v1")
    def plan(ctx: Any, task: str) -> dict[str, Any]:
        gpt = journaled_openai.journaled(clients[0], ctx)
        claude = journaled_anthropic.journaled(clients[1], ctx)
        outline = ctx.step("outline", lambda: {"task": task, "parts": 3})
        draft = gpt.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "You plan things."},
                {"role": "user", "content": f"Plan {outline['task']} in {outline['parts']} parts"},
            ],
            temperature=0.2,
            max_tokens=300,
        )
        text = draft.choices[0].message.content or ""
        review = claude.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=200,
            system="You review plans.",
            messages=[{"role": "user", "content": f"Review: {text}"}],
        )
        return {"plan": text, "review": review.content[0].text}

    return plan


def make_store(path: Path, clients: tuple[OpenAI, Anthropic]) -> LocalStorage:
    storage = LocalStorage(path)
    plan = planner(storage, clients)
    for run_id, task in TASKS.items():
        assert plan.start(task, run_id=run_id).status == "success"
    return storage


def write_traces(storage: Storage, out: Path, *, include_content: bool) -> Path:
    kx.export(storage, out, format="otlp", include_content=include_content)
    return out / "traces.jsonl"


def requests_of(journals: kx.Journals) -> dict[tuple[str, str], Any]:
    calls = journals.llm_calls
    keys = zip(calls["run_id"], calls["step_id"], strict=True)
    return {key: json.loads(text) for key, text in zip(keys, calls["request"], strict=True)}


def test_a_store_exported_as_otlp_and_imported_is_the_same_runs(tmp_path: Path) -> None:
    with fake_model_server() as server, sdk_clients(server) as clients:
        original = make_store(tmp_path / "original", clients)
        traces = write_traces(original, tmp_path / "out", include_content=True)
        imported = LocalStorage(tmp_path / "imported")
        report = kx.import_otlp(traces, imported)
        assert sorted(report.run_ids) == sorted(TASKS) and report.partial == {}
        before, after = kx.load(original), kx.load(imported)
        columns = ["run_id", "step_id", "model", "response_text", "input_tokens", "output_tokens"]
        old = before.llm_calls[columns].sort_values(["run_id", "step_id"], ignore_index=True)
        new = after.llm_calls[columns].sort_values(["run_id", "step_id"], ignore_index=True)
        assert old.equals(new)
        assert requests_of(before) == requests_of(after)
        old_runs = before.runs.sort_values("run_id", ignore_index=True)
        new_runs = after.runs.sort_values("run_id", ignore_index=True)
        assert list(old_runs["input"]) == list(new_runs["input"])
        assert list(new_runs["status"]) == ["running"] * 3
        assert list(new_runs["result"]) == list(old_runs["result"])  # as it ended there
        steps = after.entries.dropna(subset=["step_id"])
        assert set(steps["step_id"]) == {"outline", "chat.completions.create", "messages.create"}

        sent = server.request_count
        plan = planner(imported, clients)  # the same code, another version word: any replays
        for run_id, task in TASKS.items():
            result = plan.start(task, run_id=run_id)
            assert result.status == "success"
            assert result.result == json.loads(
                before.runs.set_index("run_id").loc[run_id, "result"]
            )
        assert server.request_count == sent


def test_traces_without_content_import_as_partial_runs_saying_what_is_missing(
    tmp_path: Path,
) -> None:
    with fake_model_server() as server, sdk_clients(server) as clients:
        original = make_store(tmp_path / "original", clients)
    out = tmp_path / "out"
    kx.export(original, out, format="otlp")  # content left out, as by default
    imported = LocalStorage(tmp_path / "imported")
    report = kx.import_otlp(out / "traces.jsonl", imported)
    assert sorted(report.partial) == sorted(TASKS)
    missing = report.partial["plan-a"]
    assert any("step outline: its result is not in the source" in line for line in missing)
    print(report)  # the report as a user reads it
    runs = kx.load(imported).runs.set_index("run_id")
    assert "its result is not in the source" in runs.loc["plan-a", "partial"]
    entries = kx.load(imported).entries
    assert entries[entries.run_id == "plan-a"]["type"].tolist() == ["start"]  # stops there


def test_a_tool_calling_agent_round_trips_and_replays_with_zero_requests(tmp_path: Path) -> None:
    """kassette's export writes an answer's tool calls without their ids (as the GenAI
    conventions' messages have them); the import takes them from the next request."""
    with fake_model_server() as server, sdk_clients(server) as clients:

        def weather(storage: Storage) -> Any:
            @kassette(storage=storage)
            def run(ctx: Any, task: dict[str, Any]) -> str:
                gpt = journaled_openai.journaled(clients[0], ctx)
                claude = journaled_anthropic.journaled(clients[1], ctx)
                return agent(gpt, claude, ctx.step, task)

            return run

        original = LocalStorage(tmp_path / "original")
        first = weather(original).start({"city": "Paris"}, run_id="paris")
        assert first.status == "success"
        steps = kx.load(original).entries.step_id.dropna().tolist()
        assert "get_weather" in steps and "chat.completions.create#2" in steps
        traces = write_traces(original, tmp_path / "out", include_content=True)
        imported = LocalStorage(tmp_path / "imported")
        report = kx.import_otlp(traces, imported)
        assert report.run_ids == ("paris",) and report.partial == {}
        sent = server.request_count
        again = weather(imported).start({"city": "Paris"}, run_id="paris")
        assert again.status == "success" and again.result == first.result
        assert server.request_count == sent
