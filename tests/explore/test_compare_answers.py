"""Comparing a real agent's branches by answer: plan (Anthropic) -> draft (OpenAI, a tool loop in
every third branch) -> critique, fanned out 20 ways through the real SDKs (agent_support.py).

Also: a model call read as a conversation, for each provider's API, streams included, and the
CompareView's answer grid data (steps, loops, order, marks, conversations) without a browser.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agent_support import RUNBOOK, SOURCE, TICKET, run_agent, temperatures

from kassette import MemoryStorage, kassette
from kassette import explore as kx
from kassette.explore._conversation import call_view
from kassette.testing import fake_model_server


class Agent:
    def __init__(self, journals: kx.Journals, branches: kx.Branches) -> None:
        self.journals, self.branches = journals, branches
        self.runs = [SOURCE, *branches.run_ids]
        params = temperatures()
        self.tooled = [
            r for r, p in zip(branches.run_ids, params, strict=True) if "tool_choice" in p
        ]
        self.direct = [r for r in branches.run_ids if r not in self.tooled]


@pytest.fixture(scope="module")
def agent() -> Iterator[Agent]:
    storage = MemoryStorage()
    with fake_model_server(seed=0) as server:
        branches = run_agent(storage, server)
    yield Agent(kx.load(storage), branches)


def test_the_agent_branches_take_different_paths(agent: Agent) -> None:
    by_id = kx.compare(agent.journals, agent.runs)
    assert set(by_id.index) == {"plan", "draft", "search_runbook", "draft#2", "critique"}
    assert len(agent.tooled) == 7 and len(agent.direct) == 13
    assert by_id.loc["draft#2", agent.tooled].notna().all()
    assert by_id.loc["draft#2", agent.direct].isna().all()  # their answer is in `draft`


def test_align_answer_lines_up_final_answers_of_branches_whose_paths_differ(agent: Agent) -> None:
    frame = kx.compare(agent.journals, agent.runs, align="answer")
    assert list(frame.index) == ["plan", "draft", "critique"]
    assert frame.loc[["draft", "critique"], agent.runs].notna().all().all()  # no empty half
    by_id = kx.compare(agent.journals, agent.runs)
    for run_id in agent.tooled:
        assert frame.loc["draft", run_id] == by_id.loc["draft#2", run_id]  # the answering call
        assert by_id.loc["draft", run_id].startswith("tool call: search_runbook(")
        assert frame.attrs["steps"][run_id]["draft"] == ["draft", "search_runbook", "draft#2"]
    for run_id in agent.direct:
        assert frame.loc["draft", run_id] == by_id.loc["draft", run_id]
        assert frame.attrs["steps"][run_id]["draft"] == ["draft"]
    first = kx.compare(agent.journals, agent.runs, align="first")
    assert all(first.loc["draft", r].startswith("tool call: search_runbook(") for r in agent.tooled)
    assert frame.attrs["first_divergence"] == "draft"


def test_branches_compare_aligns_by_answer_like_the_view(agent: Agent) -> None:
    """Branches.compare() lines up the answers as CompareView does; `align` and `values` pass
    through to kx.compare."""
    frame = agent.branches.compare()
    assert list(frame.index) == ["plan", "draft", "critique"]
    assert list(frame.columns[:-1]) == agent.runs
    expected = kx.compare(agent.journals, agent.runs, align="answer")
    assert frame.loc["draft", agent.tooled].tolist() == expected.loc["draft", agent.tooled].tolist()
    assert frame.attrs["request_changes"] == expected.attrs["request_changes"]
    by_id = agent.branches.compare(align="step")
    assert set(by_id.index) == {"plan", "draft", "search_runbook", "draft#2", "critique"}
    assert by_id.loc["draft#2", agent.direct].isna().all()
    first = agent.branches.compare(align="first", values="python")
    for run_id in agent.tooled:
        message = first.loc["draft", run_id]["choices"][0]["message"]
        assert message["tool_calls"][0]["function"]["name"] == "search_runbook"


def test_a_cell_is_the_answer_text_exactly_as_the_model_gave_it(agent: Agent) -> None:
    raw = kx.compare(agent.journals, agent.runs, align="answer", values="python")
    frame = kx.compare(agent.journals, agent.runs, align="answer")
    for run_id in agent.runs:
        completion = raw.loc["draft", run_id]
        assert frame.loc["draft", run_id] == completion["choices"][0]["message"]["content"]
        message = raw.loc["critique", run_id]
        assert frame.loc["critique", run_id] == message["content"][0]["text"]
        assert len(frame.loc["critique", run_id].split()) > 20  # sentences, not a label
    changes = frame.attrs["request_changes"]
    hot = agent.branches.run_ids[15]
    assert "temperature 0.7 → 1.5" in changes[hot]["draft"]
    assert changes[SOURCE]["draft"] == [] and "temperature" not in frame.loc["draft", hot]


def test_volatile_provider_ids_make_no_difference_nor_request_change(agent: Agent) -> None:
    """Every tool branch got its own tool-call id, handed back in its draft#2 request: the ids
    are no request change, and two tool calls alike but for their ids are the same answer."""
    by_id = kx.compare(agent.journals, agent.tooled, values="python")
    ids = {
        by_id.loc["draft", r]["choices"][0]["message"]["tool_calls"][0]["id"] for r in agent.tooled
    }
    assert len(ids) == len(agent.tooled)  # every branch got its own tool-call id
    frame = kx.compare(agent.journals, agent.tooled)
    for run_id in agent.tooled[1:]:
        for line in frame.attrs["request_changes"][run_id]["draft#2"]:
            assert "id" not in line.split(" ")[0], line  # no tool_call_id, no tool_calls[0].id
        assert all(
            line.startswith("temperature")
            for line in frame.attrs["request_changes"][run_id]["draft#2"]
        )
    # at 0.0 and 0.3 the model asks the same tool call, under other ids: the same answer
    cool, warm = agent.tooled[:2]
    pair = kx.compare(agent.journals, [cool, warm])
    assert pair.loc["draft", cool] == pair.loc["draft", warm]
    assert pair.attrs["first_divergence"] != "draft"
    assert pair.attrs["request_changes"][warm]["draft#2"] == ["temperature 0.0 → 0.3"]


def test_the_answer_grid_data_of_20_branches(agent: Agent) -> None:
    scores = {run_id: number / 10 for number, run_id in enumerate(agent.runs)}
    view = kx.CompareView(agent.journals, agent.runs, scores=scores)
    assert view.compact and view.transposed and view.hide_equal and view.align == "answer"
    assert view.steps == ["plan", "draft", "critique"]
    assert view.alike == [True, False, False]  # the shared prefix folds
    tooled = agent.tooled[0]
    assert view.loops[tooled] == [[], ["draft", "search_runbook", "draft#2"], []]
    assert (
        view.cells[tooled][1]
        == kx.compare(agent.journals, [tooled], align="answer").loc["draft", tooled]
    )
    assert view.notes[agent.branches.run_ids[15]][1][-1] == "temperature 0.7 → 1.5"
    facts = view.facts[agent.branches.run_ids[15]]
    assert facts["params"]["temperature"] == 1.5 and facts["cost_usd"] > 0 and facts["length"] > 40
    view.query = "temperature>1.4"
    assert view.order == agent.branches.run_ids[15:]
    view.query, view.sort_by, view.descending = "", "score", True
    assert view.order == list(reversed(agent.runs))
    view.sort_by = "length"
    lengths = [view.facts[r]["length"] for r in view.order]
    assert lengths == sorted(lengths, reverse=True)
    view.query = "temperature>"
    assert "cannot read" in view.query_error and len(view.order) == len(agent.runs)
    view.mark(agent.runs[3], keep=True, note="clear and short")
    view._marks = {
        **view._marks,
        agent.runs[5]: {"keep": False, "note": "wrong key id"},
    }  # as the browser sets it
    marks = view.marks
    assert list(marks.index) == [agent.runs[3], agent.runs[5]]
    assert marks.loc[agent.runs[3], "keep"] and marks.loc[agent.runs[5], "note"] == "wrong key id"
    assert marks.loc[agent.runs[3], "score"] == 0.3
    view.query = "kept"
    assert view.order == [agent.runs[3]]
    view.columns = ["critique"]
    assert view.columns == ["critique"]
    view.align = "step"
    assert "draft#2" in view.steps and view.loops[tooled] == [[]] * len(view.steps)
    assert view.marks.index.tolist() == [agent.runs[3], agent.runs[5]]  # marks survive


def test_a_tool_loop_opens_as_one_conversation_in_the_view(agent: Agent) -> None:
    view = kx.CompareView(agent.journals, agent.runs)
    tooled = agent.tooled[1]
    view.opened = [tooled, "draft"]
    parts = view.conversation["parts"]
    assert [part["step_id"] for part in parts] == ["draft", "search_runbook", "draft#2"]
    first, tool, answer = parts
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant"]
    assert first["messages"][-1]["tool_calls"][0]["name"] == "search_runbook"
    assert first["finish_reason"] == "tool_calls"
    assert tool["tool"].startswith(RUNBOOK)
    roles = [m["role"] for m in answer["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    handed_back = answer["messages"][3]
    assert handed_back["name"] == "search_runbook" and handed_back["text"].startswith(RUNBOOK)
    assert (
        answer["messages"][-1]["response"]
        and answer["messages"][-1]["text"] == view.cells[tooled][1]
    )
    assert answer["input_tokens"] > first["input_tokens"] > 0 and answer["cost_usd"] > 0
    assert json.loads(answer["raw"])["stepId"] == "draft#2"  # the raw entry, one click away
    view.opened = [tooled, "plan"]
    (plan,) = view.conversation["parts"]
    assert plan["provider"] == "anthropic" and plan["messages"][0]["role"] == "system"
    assert plan["messages"][1] == {"role": "user", "text": TICKET}
    view.opened = []
    assert view.conversation == {}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_conversations_of_every_provider_api(stream: bool) -> None:
    """OpenAI chat and Responses, Anthropic Messages with a tool result block: through the real
    SDKs, streamed or not, each reads as system, user, assistant, tool, answer."""
    import anthropic
    import openai

    from kassette.integrations.anthropic import journaled as journaled_anthropic
    from kassette.integrations.openai import journaled as journaled_openai

    storage = MemoryStorage()
    with fake_model_server(seed=1) as server:
        gpt = openai.OpenAI(api_key="x", base_url=server.openai_base_url, max_retries=0)
        claude = anthropic.Anthropic(api_key="x", base_url=server.anthropic_base_url, max_retries=0)

        @kassette(storage=storage)
        def calls(ctx: Any, question: str) -> None:
            responses = journaled_openai(gpt, ctx, name="responses").responses.create(
                model="gpt-4o-mini",
                instructions="Answer in one paragraph.",
                input=[
                    {"role": "user", "content": question},
                    {
                        "type": "function_call",
                        "call_id": "call_1",
                        "name": "lookup",
                        "arguments": '{"q": "key"}',
                    },
                    {"type": "function_call_output", "call_id": "call_1", "output": "key id k-2"},
                ],
                stream=stream,
            )
            if stream:
                for _ in responses:  # type: ignore[union-attr]
                    pass
            messages: list[Any] = [
                {"role": "user", "content": question},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "lookup",
                            "input": {"q": "key"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "key id k-2"}
                    ],
                },
            ]
            model = journaled_anthropic(claude, ctx, name="claude")
            if stream:
                with model.messages.stream(
                    model="claude-3-5-haiku-latest",
                    max_tokens=300,
                    system="Be brief.",
                    messages=messages,
                ) as events:
                    events.get_final_message()
            else:
                model.messages.create(
                    model="claude-3-5-haiku-latest",
                    max_tokens=300,
                    system="Be brief.",
                    messages=messages,
                )

        calls.start("Which key does the export sign with?", run_id="calls")
    journals = kx.load(storage)
    entries = journals.entries[journals.entries.type == "step"].set_index("step_id")
    for step in ("responses", "claude"):
        shown = call_view(json.loads(entries.loc[step, "value"]), step)
        assert shown is not None
        roles = [message["role"] for message in shown["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant"], (step, roles)
        system, user, asked, tool, answer = shown["messages"]
        assert system["text"] in ("Answer in one paragraph.", "Be brief.")
        assert user == {"role": "user", "text": "Which key does the export sign with?"}
        assert asked["tool_calls"][0]["name"] == "lookup" and asked["tool_calls"][0][
            "arguments"
        ] == {"q": "key"}
        assert tool == {"role": "tool", "text": "key id k-2", "id": tool["id"], "name": "lookup"}
        assert answer["response"] and len(answer["text"].split()) > 10
        assert (
            shown["output_tokens"] > 0 and shown["cost_usd"] is not None and shown["cost_usd"] > 0
        )
