"""kx.import_inspect on a real Inspect AI eval log, written offline by Inspect itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.log import read_eval_log, write_eval_log
from openai import OpenAI

from kassette import LocalStorage, kassette
from kassette import explore as kx
from kassette.integrations.openai import journaled
from kassette.testing import fake_model_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("logs")
    done = subprocess.run(
        [sys.executable, "-m", "tests.explore.inspect_support", str(log_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return Path(done.stdout.strip().splitlines()[-1])


def test_each_sample_and_epoch_is_a_run_with_its_model_calls_tools_and_scores(
    eval_log: Path, tmp_path: Path
) -> None:
    assert eval_log.suffix == ".eval"
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_inspect(eval_log, storage)
    log = read_eval_log(str(eval_log))
    samples = log.samples or []
    assert len(samples) == 4 and len(report.run_ids) == 4 and report.partial == {}
    journals = kx.load(storage)
    runs = journals.runs.set_index("run_id")
    entries = journals.entries
    for sample in samples:
        run_id = f"inspect-{log.eval.eval_id}-{sample.id}-{sample.epoch}"
        assert run_id in report.run_ids
        assert json.loads(runs.loc[run_id, "input"]) == sample.input
        assert json.loads(runs.loc[run_id, "result"]) == sample.output.completion
        own = entries[entries.run_id == run_id]
        start = json.loads(own.iloc[0]["value"])["imported"]
        assert start["data"]["scores"]["includes"]["value"] == sample.scores["includes"].value
        assert start["data"]["target"] == sample.target
        model_events = [e for e in sample.events if e.event == "model"]
        tool_events = [e for e in sample.events if e.event == "tool"]
        steps = own["step_id"].dropna().tolist()
        assert [s for s in steps if s.startswith("chat.completions.create")] == [
            "chat.completions.create",
            *[f"chat.completions.create#{n}" for n in range(2, len(model_events) + 1)],
        ]
        tool_steps = own[own["name"] == "add"]
        assert len(tool_steps) == len(tool_events)
        results = [json.loads(value)["result"] for value in tool_steps["value"]]
        assert results == [event.result for event in tool_events]
    calls = journals.llm_calls
    assert len(calls) == sum(
        1 for sample in samples for event in sample.events if event.event == "model"
    )
    assert set(calls["input_tokens"]) == {12} and set(calls["output_tokens"]) == {6}


def test_an_imported_sample_replays_in_an_openai_agent_with_zero_requests(
    eval_log: Path, tmp_path: Path
) -> None:
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_inspect(eval_log, storage)
    log = read_eval_log(str(eval_log))
    sample = (log.samples or [])[0]
    first_call = next(event for event in sample.events if event.event == "model")
    (add,) = first_call.tools  # the tool as Inspect gave it to the model
    schema = add.parameters.model_dump(mode="json", exclude_none=True)
    function = {"name": add.name, "description": add.description, "parameters": schema}
    tools = [{"type": "function", "function": function}]
    with (
        fake_model_server() as server,
        OpenAI(base_url=server.openai_base_url, api_key="unused") as sdk,
    ):

        @kassette(storage=storage)
        def solver(ctx: Any, question: str) -> str:
            client = journaled(sdk, ctx)
            messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
            while True:
                reply = client.chat.completions.create(
                    model="model", messages=messages, tools=tools
                )
                message = reply.choices[0].message
                if not message.tool_calls:
                    return str(message.content)
                call = message.tool_calls[0]
                arguments = json.loads(call.function.arguments)
                total = ctx.step("add", lambda a=arguments: str(a["x"] + a["y"]))
                messages += [
                    {
                        "role": "assistant",
                        "content": message.content,
                        "tool_calls": [
                            {
                                "id": call.id,
                                "type": "function",
                                "function": {"name": "add", "arguments": call.function.arguments},
                            }
                        ],
                    },
                    {"role": "tool", "content": total, "tool_call_id": call.id},
                ]

        run_id = f"inspect-{log.eval.eval_id}-{sample.id}-{sample.epoch}"
        assert run_id in report.run_ids
        result = solver.start(sample.input, run_id=run_id)
        assert result.status == "success" and result.result == sample.output.completion
        assert server.request_count == 0


def test_importing_a_log_again_writes_nothing_and_a_bad_log_is_a_clear_error(
    eval_log: Path, tmp_path: Path
) -> None:
    storage = LocalStorage(tmp_path / "store")
    first = kx.import_inspect(eval_log, storage)
    again = kx.import_inspect(eval_log, storage)
    assert again.run_ids == first.run_ids and again.written == ()
    bad = tmp_path / "broken.eval"
    bad.write_bytes(eval_log.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"broken\.eval"):
        kx.import_inspect(bad, storage)


def test_a_json_log_imports_as_the_same_runs(eval_log: Path, tmp_path: Path) -> None:
    as_json = tmp_path / "log.json"
    write_eval_log(read_eval_log(str(eval_log)), str(as_json), format="json")
    from_eval = kx.import_inspect(eval_log, tmp_path / "a")
    from_json = kx.import_inspect(as_json, tmp_path / "b")
    assert from_json.run_ids == from_eval.run_ids
    for run_id in from_eval.run_ids:
        a = (tmp_path / "a" / f"{run_id}.jsonl").read_text().splitlines()[1:]
        b = (tmp_path / "b" / f"{run_id}.jsonl").read_text().splitlines()[1:]
        assert a == b
