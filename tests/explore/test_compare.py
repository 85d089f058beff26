"""kx.compare: runs side by side by step id, with the first divergent step marked."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pandas as pd
import pytest
from conftest import Scenario
from ipywidgets.widgets.widget import _instances

from kassette import InvalidArgumentError, MemoryStorage, RunNotFoundError, kassette
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from kassette.core import fork_run
from kassette.testing import FakeClock


def test_a_fork_diverges_at_the_step_it_ran_again(scenario: Scenario) -> None:
    frame = kx.compare(kx.load(scenario.storage), ["single", "forked"])
    assert list(frame.columns) == ["single", "forked", "first_divergence"]
    assert list(frame.index) == ["plan", "implement"] and frame.index.name == "step_id"
    assert (
        frame.loc["plan", "single"] == frame.loc["plan", "forked"] == '{"goal":"parse","steps":2}'
    )
    assert frame.loc["implement", "single"] == '"code for parse by single"'
    assert frame.loc["implement", "forked"] == '"code for parse by forked"'
    assert frame["first_divergence"].tolist() == [False, True]
    assert frame.attrs["first_divergence"] == "implement"


def test_runs_that_agree_have_no_divergence(scenario: Scenario) -> None:
    frame = kx.compare(kx.load(scenario.storage), ["forked", "refork"])
    assert frame["first_divergence"].tolist() == [False, False]
    assert frame.attrs["first_divergence"] is None


def test_steps_only_some_runs_have(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    frame = kx.compare(journals, ["single", "parallel", "retried"])
    # by the offset each step first appears at in any of the runs
    assert list(frame.index) == [
        "plan",
        "gather",
        "implement",
        "call",
        "gather/left/fetch",
        "sleep",
        "gather/right/fetch",
    ]
    # plan differs (another goal), so it is the first divergence
    assert frame.attrs["first_divergence"] == "plan"
    assert frame["parallel"].isna().sum() == 2  # call, sleep
    assert frame.loc["gather", "parallel"] == '{"branches":["left","right"]}'
    assert frame.loc["gather/left/fetch", "parallel"] == '"L"'


def test_a_step_one_run_lacks_is_a_divergence(scenario: Scenario) -> None:
    fork_run(scenario.storage, "single", step="implement", new_run_id="cut")  # not continued
    frame = kx.compare(kx.load(scenario.storage), ["single", "cut"])
    assert frame["first_divergence"].tolist() == [False, True]
    assert frame["cut"].isna().tolist() == [False, True]


def test_arguments(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    with pytest.raises(RunNotFoundError):
        kx.compare(journals, ["single", "nope"])
    with pytest.raises(InvalidArgumentError):
        kx.compare(journals, [])
    assert list(kx.compare(journals, "single").columns) == ["single", "first_divergence"]


def test_values_python_gives_decoded_values(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage)
    frame = kx.compare(journals, ["single", "forked", "parallel"], values="python")
    assert frame.loc["plan", "single"] == {"goal": "parse", "steps": 2}
    assert frame.loc["implement", "forked"] == "code for parse by forked"
    assert frame.loc["plan", "parallel"] == {"goal": "fan out", "steps": 2}
    assert frame.attrs["first_divergence"] == "plan"
    missing = [step for step in frame.index if frame.loc[step, "single"] is pd.NA]
    assert missing and all(frame.loc[step, "parallel"] is not pd.NA for step in missing)
    with pytest.raises(InvalidArgumentError, match="values must be"):
        kx.compare(journals, ["single"], values="yaml")  # type: ignore[arg-type]


def many_branches(count: int) -> tuple[kx.Journals, list[str]]:
    """A run whose `write` step returns several lines, forked `count - 1` times."""
    storage, clock = MemoryStorage(), FakeClock()
    choice = {"n": 0}

    @kassette(storage=storage, clock=clock)
    def writer(ctx: Any, task: str) -> str:
        ctx.step("plan", lambda: {"task": task})
        text = ctx.step("write", lambda: f"line one\nvariant {choice['n']}\nline three")
        return ctx.step("check", lambda: len(text))  # type: ignore[no-any-return]

    writer.start("t", run_id="b00")
    for number in range(1, count):
        choice["n"] = number % 7
        writer.fork("b00", step="write", new_run_id=f"b{number:02d}")
    return kx.load(storage), [f"b{number:02d}" for number in range(count)]


def test_compare_view_aligns_50_branches_with_diffs_against_a_baseline() -> None:
    journals, runs = many_branches(50)
    before = set(_instances)
    view = kx.CompareView(journals, runs)
    assert len(set(_instances) - before) == 2  # one model (and its layout) for 50 branches
    assert view.runs == runs and view.steps == ["plan", "write", "check"]
    assert view.baseline == "b00" and view.first_divergence == "write"
    assert view.cells["b00"][1] == "line one\nvariant 0\nline three"  # real newlines
    assert view.cells["b00"][0] == '{\n  "task": "t"\n}'
    nested = kx.CompareView(journals, runs[:2])
    assert nested.cells["b00"][2] == "29"  # len(text): plain JSON
    assert view.diffs["b07"][1] == []  # 7 % 7 == 0: the baseline's text
    assert view.diffs["b01"][1] == [
        "@@ -1,3 +1,3 @@",
        " line one",
        "-variant 0",
        "+variant 1",
        " line three",
    ]
    assert len(view.groups) == 7  # branches whose every step is the same, baseline's first
    assert view.groups[0][:3] == ["b00", "b07", "b14"] and view.groups[1][0] == "b01"
    view.baseline = "b01"
    assert "b00" in view.diffs and "b01" not in view.diffs
    assert view.groups[0][:2] == ["b01", "b08"]
    assert view.diffs["b00"][1][2:4] == ["-variant 1", "+variant 0"]
    view.baseline = "nope"  # a stale choice from the browser
    assert view.baseline == "b01"
    assert repr(view) == ("CompareView: 50 runs x 3 steps, baseline b01, first divergence write")
    with pytest.raises(InvalidArgumentError, match="baseline"):
        kx.CompareView(journals, runs[:3], baseline="b09")
    with pytest.raises(RunNotFoundError):
        kx.CompareView(journals, ["b00", "typo"])


def test_nested_strings_keep_their_newlines() -> None:
    from kassette.explore._widgets._rows import pretty_json

    assert pretty_json({"reply": {"content": "a\nb", "n": [1, "x"]}}) == (
        '{\n  "reply": {\n    "content": """\n      a\n      b\n    """,\n'
        '    "n": [\n      1,\n      "x"\n    ]\n  }\n}'
    )


def test_compare_view_marks_a_step_only_some_branches_have(scenario: Scenario) -> None:
    view = kx.CompareView(kx.load(scenario.storage), ["single", "parallel"])
    missing = [i for i, text in enumerate(view.cells["single"]) if text is None]
    assert missing
    assert all(view.diffs["parallel"][i][0].startswith("@@") for i in missing)


def test_compare_view_update_compares_other_runs_in_the_same_model() -> None:
    journals, runs = many_branches(4)
    view = kx.CompareView(journals, runs[:2])
    view.mode = "diff"
    before = set(_instances)
    view.update(journals, runs, baseline="b02")
    assert set(_instances) == before  # the same model, redrawn
    assert view.runs == runs and view.baseline == "b02" and view.mode == "diff"
    assert sorted(view.diffs) == ["b00", "b01", "b03"]
    assert view.diffs["b03"][1][2:4] == ["-variant 2", "+variant 3"]
    with pytest.raises(InvalidArgumentError, match="baseline"):
        view.update(journals, runs[:2], baseline="b03")
    assert view.runs == runs and view.baseline == "b02"  # a refused update changes nothing
    view.update(journals, runs[3:])
    assert view.runs == ["b03"] and view.baseline == "b03" and view.diffs == {}


def test_equal_steps_fold_by_default_beyond_three_branches() -> None:
    journals, runs = many_branches(4)
    three = kx.CompareView(journals, runs[:3])
    assert three.hide_equal is False and three.transposed is False
    four = kx.CompareView(journals, runs)
    assert four.hide_equal is True
    # plan is alike in every branch; write differs; check is len(text), the same length
    assert four.alike == [True, False, True]
    four.update(journals, runs[:2])  # fewer branches: the default follows the count
    assert four.hide_equal is False
    chosen = kx.CompareView(journals, runs, hide_equal=False)
    chosen.update(journals, [*runs, *runs])
    assert chosen.hide_equal is False  # set by hand: kept
    chosen.hide_equal = True  # as the browser's checkbox does
    chosen.update(journals, runs[:2])
    assert chosen.hide_equal is True


def test_many_branches_are_transposed_and_grouping_counts_distinct_branches() -> None:
    journals, runs = many_branches(12)
    assert kx.CompareView(journals, runs[:10]).transposed is False
    view = kx.CompareView(journals, runs[:11])
    assert view.transposed is True
    assert len(view.groups) == 7  # 11 branches, 7 distinct drafts
    view.transposed = False  # the user's choice outlives an update to more branches
    view.update(journals, runs)
    assert view.transposed is False
    distinct = kx.CompareView(journals, runs[:7])
    assert distinct.groups == [[run] for run in runs[:7]]  # "all 7 distinct"
    assert kx.CompareView(journals, runs, transposed=False).transposed is False


# -- model calls: compared by their answers --------------------------------------------------

PROMPT = [{"role": "user", "content": "Summarise the incident for the status page."}]
FIRST = "The export failed because the credentials were rotated on Tuesday. It is fixed now."
MODEL_STEP = "chat.completions.create"


def completion(number: int, text: str, **message: Any) -> dict[str, Any]:
    """A chat completion with its own id, timestamps, fingerprint and usage."""
    return {
        "id": f"chatcmpl-{number:04d}",
        "object": "chat.completion",
        "created": 1767000000 + number,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": f"fp_{number:06x}",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if message else "stop",
                "message": {"role": "assistant", "content": text, **message},
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": number, "total_tokens": 20 + number},
    }


def model_runs(branches: dict[str, tuple[float, Any, str]]) -> kx.Journals:
    """A run per item, `run id: (temperature, model result, what publish returned)`, each
    planning, calling the model through the OpenAI integration's entry format, publishing."""
    storage = MemoryStorage()
    for number, (run_id, (temperature, result, published)) in enumerate(branches.items()):
        request = {"model": "gpt-4o-mini", "messages": PROMPT, "temperature": temperature}
        call = {"provider": "openai", "method": MODEL_STEP, "request": request}
        if result.get("type") == "message":
            call.update(provider="anthropic", method="messages.create")
        entries: list[dict[str, Any]] = [
            {"type": "start", "metadata": {"ticket": 7}},
            {"type": "step", "stepId": "plan", "name": "plan", "result": "answer the ticket"},
            {"type": "step", "stepId": MODEL_STEP, "name": MODEL_STEP, "result": result}
            | {"call": call, "durationMs": 700.0 + number},
            {"type": "step", "stepId": "publish", "name": "publish", "result": published},
            {"type": "complete", "result": None},
        ]
        data = b"".join(
            encode({**entry, "session": 1, "offset": offset, "timestamp": format_timestamp(1e9)})
            for offset, entry in enumerate(entries)
        )
        storage.append(run_id, data, token=None)
    return kx.load(storage)


def test_the_same_answer_with_other_ids_is_one_group_and_diverges_later() -> None:
    journals = model_runs(
        {
            "a": (0.7, completion(1, FIRST), "posted"),
            "b": (0.7, completion(2, FIRST), "posted"),
            "c": (0.7, completion(3, FIRST), "held for review"),
        }
    )
    frame = kx.compare(journals, ["a", "b", "c"])
    assert frame.attrs["first_divergence"] == "publish"  # past the model call
    assert frame.loc[MODEL_STEP].tolist()[:3] == [FIRST, FIRST, FIRST]
    view = kx.CompareView(journals, ["a", "b", "c"])
    assert view.first_divergence == "publish"
    assert view.differs["b"] == [False, False, False]
    assert view.groups == [["a", "b"], ["c"]]  # ids, created, usage, durations: all ignored
    assert view.answers == [False, True, False]
    assert view.cells["a"][1] == FIRST
    assert kx.compare(journals, ["a", "b"]).attrs["first_divergence"] is None


def test_a_temperature_sweep_keeps_the_answer_text_and_its_change_in_attrs() -> None:
    hotter = "The export failed because a lifecycle rule moved the files. It is fixed now."
    journals = model_runs(
        {"cool": (0.7, completion(1, FIRST), "posted"), "hot": (1.3, completion(2, hotter), "x")}
    )
    frame = kx.compare(journals, ["cool", "hot"])
    assert frame.loc[MODEL_STEP, "cool"] == FIRST
    assert frame.loc[MODEL_STEP, "hot"] == hotter  # as the model gave it: no notes
    assert frame.attrs["request_changes"] == {
        "cool": {MODEL_STEP: []},
        "hot": {MODEL_STEP: ["temperature 0.7 → 1.3"]},
    }
    assert frame.attrs["first_divergence"] == MODEL_STEP
    view = kx.CompareView(journals, ["cool", "hot"])
    assert view.notes["hot"] == [[], ["temperature 0.7 → 1.3"], []]
    assert view.notes["cool"] == [[], [], []]  # the baseline
    view.baseline = "hot"
    assert view.notes["cool"][1] == ["temperature 1.3 → 0.7"]


def test_two_answers_are_diffed_word_by_word_with_unchanged_runs_shortened() -> None:
    words = " ".join(["We rolled the wrapper back and the queue drained."] * 3)
    before, after = (
        f"The retry wrapper failed. {words} Sorry.",
        f"The wrapper failed. {words} Sorry!",
    )
    journals = model_runs(
        {"a": (0.7, completion(1, before), "ok"), "b": (0.9, completion(2, after), "ok")}
    )
    view = kx.CompareView(journals, ["a", "b"])
    diff = view.diffs["b"][1]
    assert ["-", "retry "] in diff and ["-", "Sorry."] in diff and ["+", "Sorry!"] in diff
    assert diff[3] == ["…", "21 words"]  # 2 + 27 unchanged words, 4 kept each side
    assert view.diffs["b"][0] == []  # plan: alike
    assert all(isinstance(line, str) for line in view.diffs["b"][2])  # not an answer: lines


def test_values_json_shows_the_raw_response() -> None:
    raw = completion(1, FIRST)
    journals = model_runs({"a": (0.7, raw, "ok"), "b": (0.7, completion(2, FIRST), "ok")})
    frame = kx.compare(journals, ["a", "b"], values="json")
    assert json.loads(frame.loc[MODEL_STEP, "a"]) == raw
    assert frame.loc["plan", "a"] == '"answer the ticket"'  # other steps: as in "text"
    assert frame.attrs["first_divergence"] is None  # the same answer, whatever is shown
    assert kx.compare(journals, ["a"], values="python").loc[MODEL_STEP, "a"] == raw
    view = kx.CompareView(journals, ["a", "b"], values="json")
    assert '"id": "chatcmpl-0001"' in view.cells["a"][1]
    assert view.differs["b"] == [False, False, False]
    view.values = "text"  # the toggle in the view
    assert view.cells["a"][1] == FIRST
    view.values = "yaml"  # a stale choice from the browser
    assert view.values == "text"
    with pytest.raises(InvalidArgumentError, match="values must be"):
        kx.CompareView(journals, ["a"], values="yaml")  # type: ignore[arg-type]


def test_tool_calls_show_after_the_text() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "search"}}
    call["function"]["arguments"] = '{"q": "export"}'  # type: ignore[index]
    used = completion(1, "Let me look.", tool_calls=[call])
    journals = model_runs({"a": (0.7, used, "ok")})
    assert kx.CompareView(journals, ["a"]).cells["a"][1] == (
        'Let me look.\ntool call: search({"q": "export"})'
    )


def test_an_anthropic_message_shows_its_text_blocks() -> None:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": FIRST}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 20, "output_tokens": 17},
    }
    other = {**message, "id": "msg_02", "usage": {"input_tokens": 20, "output_tokens": 18}}
    journals = model_runs({"a": (0.7, message, "ok"), "b": (0.7, other, "ok")})
    view = kx.CompareView(journals, ["a", "b"])
    assert view.cells["b"][1] == FIRST and view.first_divergence is None


def test_a_fan_out_of_a_model_call_compares_its_answers() -> None:
    """ForkExplorer's CompareView and Branches.compare() show a fan-out's answers, and group
    the branches that answered alike, whatever their response ids."""
    storage, numbers = MemoryStorage(), itertools.count(1)

    def draft(run_id: str) -> dict[str, Any]:
        text = "Another answer." if run_id.endswith(".1") else FIRST
        return completion(next(numbers), text)

    @kassette(storage=storage, clock=FakeClock())
    def agent(ctx: Any, ticket: int) -> str:
        ctx.step("plan", lambda: "answer the ticket")
        reply = ctx.step("draft", lambda: draft(ctx.run_id))
        return str(reply["choices"][0]["message"]["content"])

    agent.start(7, run_id="root")
    explorer = kx.ForkExplorer(agent, "root")
    explorer.step.value = "draft"
    explorer.fan_out_count.value = 3
    branches = explorer.fan_out()
    view, (zero, one, two) = explorer.comparison, branches.run_ids
    assert view.runs == ["root", zero, one, two]
    assert view.groups == [["root", zero, two], [one]]
    assert view.cells[one][1] == "Another answer."
    assert view.hide_equal is True and view.alike == [True, False]
    frame = branches.compare()
    assert frame.loc["draft"].tolist()[:4] == [FIRST, FIRST, "Another answer.", FIRST]
    assert frame.attrs["first_divergence"] == "draft"
    raw = branches.compare(values="json").loc["draft", "root"]
    assert json.loads(raw)["object"] == "chat.completion"


def test_each_branch_is_headed_by_its_params() -> None:
    storage = MemoryStorage()

    @kassette(storage=storage, clock=FakeClock())
    def agent(ctx: Any, ticket: int) -> str:
        temperature = ctx.params.get("temperature", 0.0)
        return str(ctx.step("draft", lambda: f"draft at {temperature}"))

    agent.start(7, run_id="root")
    sweep = [{"temperature": 0.2}, {"temperature": 1.3, "top_p": 0.9}]
    branches = kx.fan_out(agent, "root", step="draft", params=sweep)
    view = kx.CompareView(kx.load(storage), ["root", *branches.run_ids])
    assert view.params == {
        branches.run_ids[0]: "temperature=0.2",
        branches.run_ids[1]: "temperature=1.3, top_p=0.9",
    }  # the root has none


def test_a_step_a_fork_recorded_with_a_given_result_is_marked_edited(scenario: Scenario) -> None:
    scenario.workflow.fork("single", step="implement", result="by hand", new_run_id="edited")
    view = kx.CompareView(kx.load(scenario.storage), ["single", "edited"])
    assert view.steps[:2] == ["plan", "implement"]
    assert view.edited["edited"][:2] == [False, True]
    assert view.edited["single"] == [False] * len(view.steps)
    assert view.cells["edited"][1] == "by hand"


def test_a_run_without_model_calls_has_no_cost_to_show(scenario: Scenario) -> None:
    """A $0.00000 under each branch of a workflow that calls no model would read as a price."""
    scenario.workflow.fork("single", step="implement", result="by hand", new_run_id="edited")
    view = kx.CompareView(kx.load(scenario.storage), ["single", "edited"])
    assert view.facts["single"]["cost_usd"] is None and view.facts["edited"]["cost_usd"] is None


def test_a_temperature_fan_out_through_the_openai_sdk_compares_by_answer() -> None:
    """End to end: the real OpenAI SDK, journaled, against the local model server; a branch
    that asked the same is the same answer under another id, one at 1.3 reads its change."""
    import openai

    from kassette.integrations.openai import journaled
    from kassette.testing import fake_model_server

    storage = MemoryStorage()
    with fake_model_server() as server:
        client = openai.OpenAI(api_key="unused", base_url=server.openai_base_url, max_retries=0)

        @kassette(storage=storage)
        def agent(ctx: Any, ticket: str) -> str:
            model = journaled(client, ctx)
            reply = model.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": f"Why did {ticket} stop?"}],
                temperature=ctx.params.get("temperature", 0.7),
            )
            return str(reply.choices[0].message.content)

        agent.start("the nightly export", run_id="root")
        sweep = [{"temperature": 0.7}, {"temperature": 1.3}]
        branches = kx.fan_out(agent, "root", step=MODEL_STEP, params=sweep)
    same, hotter = branches.run_ids
    raw = branches.compare(values="python")
    assert raw.loc[MODEL_STEP, "root"]["id"] != raw.loc[MODEL_STEP, same]["id"]
    frame = branches.compare()
    answer = frame.loc[MODEL_STEP, "root"]
    assert answer == frame.loc[MODEL_STEP, same] and answer.count(".") >= 2
    assert not frame.loc[MODEL_STEP, hotter].startswith("temperature")
    assert frame.attrs["request_changes"][hotter][MODEL_STEP] == ["temperature 0.7 → 1.3"]
    view = kx.CompareView(kx.load(storage), ["root", same, hotter])
    assert view.groups == [["root", same], [hotter]]
    assert view.notes[hotter][0] == ["temperature 0.7 → 1.3"]
