"""CompareView in JupyterLab at 20 model-call branches: readable without scrolling in a cell.

Runs in the browser tests' JupyterLab (tests/explore/test_browser.py's `lab` fixture, in the
same Chromium). A temperature sweep of a drafting model call, as the OpenAI integration
journals it (request and chat completion), is shown in a CompareView of 21 branches (a row
each) and one of 10 (a column each, in a 1,280 px window); the screenshots go to the test's
temporary directory, whose path the test prints.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect
from test_browser import Lab, no_widget_errors, write_notebook
from test_browser import lab as lab  # the fixture: JupyterLab in Chromium, once per module

ANSWERS_NOTEBOOK = "answers.ipynb"
ANSWER_BRANCHES = 20


def answers_notebook(path: Path) -> None:
    """A notebook with a drafting model call fanned out 20 ways by temperature, as journals
    recorded by the OpenAI integration would hold it (request and chat completion, each with
    its own id, created and usage): multi-sentence answers, four branches repeating one text.
    It shows a CompareView of the run and its 20 branches, and one of the first 10 branches."""
    cells = [
        """\
import random

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp

SENTENCES = [
    "The outage began when the payment client's retry wrapper doubled its backoff on every "
    "timeout instead of resetting it after a success.",
    "Requests then queued behind a single connection for up to forty seconds.",
    "We rolled back the wrapper at 14:02 and the queue drained within three minutes.",
    "No charge was taken twice, because every retry carried the original idempotency key.",
    "Alerting fired late: the latency monitor averages over ten minutes and hid the spike.",
    "Next we cap the backoff at five seconds and alert on the 99th percentile instead.",
    "Customers saw a spinner rather than an error, which is why support heard of it first.",
]
storage = MemoryStorage()
PROMPT = [{"role": "system", "content": "You write incident summaries."},
          {"role": "user", "content": "Summarise incident INC-4821 for the status page."}]


def completion(number, text):
    return {"id": f"chatcmpl-{number:04d}{random.Random(number).getrandbits(40):x}",
            "object": "chat.completion", "created": 1767000000 + number,
            "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": f"fp_{number:06x}",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": 31, "completion_tokens": 60 + number,
                      "total_tokens": 91 + number}}


ANSWERS = {}


def answer(branch):
    # four sentences, a different choice for each branch but 3, 8, 13 and 18 (one text)
    if branch % 5 == 3 and 3 in ANSWERS:
        return ANSWERS[3]
    rng = random.Random(branch)
    text = " ".join(rng.sample(SENTENCES, 4))
    while text in ANSWERS.values():
        text = " ".join(rng.sample(SENTENCES, 4))
    ANSWERS[branch] = text
    return text


def journal(run_id, branch, temperature):
    call = {"provider": "openai", "method": "chat.completions.create",
            "request": {"model": "gpt-4o-mini", "messages": PROMPT, "temperature": temperature}}
    text = answer(branch)
    lines = [("start", {"metadata": {"incident": "INC-4821"}}),
             ("step", {"stepId": "plan", "name": "plan", "result": "summarise for customers"})]
    if branch >= 0:
        source = {"runId": "draft", "fromOffset": 2}
        lines.append(("start", {"source": source, "params": {"temperature": temperature}}))
    lines += [("step", {"stepId": "chat.completions.create", "name": "chat.completions.create",
                        "result": completion(branch + 1, text), "call": call,
                        "durationMs": 700.0 + branch}),
              ("step", {"stepId": "publish", "name": "publish", "result": "posted"}),
              ("complete", {"result": len(text)})]
    data = b"".join(
        encode({"type": kind, "session": 1 + (branch >= 0 and i >= 2), "offset": i,
                "timestamp": format_timestamp(1.767e9 + branch * 30 + i), **fields})
        for i, (kind, fields) in enumerate(lines)
    )
    storage.append(run_id, data, token=None)


journal("draft", -1, 0.2)
branches = [f"draft.t{branch:02d}" for branch in range(BRANCHES)]
for branch, run_id in enumerate(branches):
    journal(run_id, branch, round(0.3 + branch * 0.1, 1))
journals = kx.load(storage)
wide = kx.CompareView(journals, ["draft", *branches], compact=False)
wide""".replace("BRANCHES", str(ANSWER_BRANCHES)),
        "ten = kx.CompareView(journals, branches[:10])\nten",
    ]
    write_notebook(path, cells)


# The cells of a CompareView whose content does not fit: clipped, or scrolled inside the cell.
CLIPPED = """view => [...view.querySelectorAll('tbody td, tbody td > .kx-answer, .kx-name')]
  .filter(box => box.scrollHeight > box.clientHeight + 1 || box.scrollWidth > box.clientWidth + 1)
  .map(box => `${box.className}: ${box.textContent.slice(0, 40)}`)"""
SIDEWAYS = """view => {
  const box = view.querySelector('.kx-scroll');
  return [box.scrollWidth, box.clientWidth];
}"""


def test_compare_view_shows_20_model_call_answers_whole(lab: Lab, tmp_path: Path) -> None:
    """21 branches of a model call (a temperature sweep): a row per branch, each answer's
    text whole in its cell (nothing clipped, no scrolling inside a cell), the temperature
    change above it, the steps alike in every branch folded; four branches with the same
    text and other ids are one group. Ten branches as columns fit a 1,280 px window."""
    answers_notebook(lab.root / ANSWERS_NOTEBOOK)
    panel = lab.run(ANSWERS_NOTEBOOK)
    no_widget_errors(lab, ANSWERS_NOTEBOOK, panel)
    views = panel.locator(".kassette-compare")
    expect(views).to_have_count(2)
    wide, ten = views.nth(0), views.nth(1)
    wide.screenshot(path=tmp_path / "compare-21-answers-transposed.png")
    rows = wide.locator(".kx-by-rows tbody tr")
    expect(rows).to_have_count(1 + ANSWER_BRANCHES)
    answers = wide.locator(".kx-answer")
    expect(answers).to_have_count(1 + ANSWER_BRANCHES)
    assert wide.evaluate(CLIPPED) == []
    for text in answers.all_inner_texts():
        assert text.count(". ") >= 3, text  # four sentences, as written: no envelope
    row = wide.locator('tr[data-run="draft.t00"]')
    expect(row.locator(".kx-note")).to_have_text(["temperature 0.2 → 0.3"])
    expect(row.locator(".kx-params")).to_have_text("temperature=0.3")  # the branch's params
    expect(wide.locator(".kx-fold")).to_have_text(
        [re.compile("1 step alike in every branch: plan"), re.compile("1 step alike .*publish")]
    )
    expect(wide.locator(".kx-banner")).to_contain_text("first divergence: step chat.completions")
    wide.locator(".kx-fold").first.click()  # show the equal steps again
    expect(wide.locator("thead .kx-step-head")).to_have_count(3)
    expect(wide.locator("input.kx-hide-equal")).not_to_be_checked()
    wide.locator("input.kx-hide-equal").check()
    expect(wide.locator("thead .kx-step-head")).to_have_count(1)
    expect(wide.locator(".kx-group-label")).to_contain_text("18 distinct of 21")
    sideways, width = wide.evaluate(SIDEWAYS)
    assert sideways <= width, (sideways, width)  # no sideways scroll at 21 branches
    wide.locator("input.kx-group").check()
    expect(rows).to_have_count(18)
    expect(wide.locator('tr[data-run="draft.t03"] .kx-name')).to_have_text("draft.t03 +3")
    wide.locator("input.kx-group").uncheck()
    wide.locator(".kx-mode").select_option("diff")
    expect(wide.locator(".kx-words").first).to_be_visible()
    expect(wide.locator(".kx-words del").first).to_be_visible()
    assert wide.evaluate(CLIPPED) == []
    wide.screenshot(path=tmp_path / "compare-21-answers-word-diff.png")
    wide.locator(".kx-values").select_option("json")  # the raw response, one toggle away
    expect(wide.locator(".kx-answer")).to_have_count(0)
    expect(wide.locator(".kx-cell").first).to_contain_text('"object": "chat.completion"')
    wide.locator(".kx-values").select_option("text")
    wide.locator(".kx-mode").select_option("values")
    # a 1,280 px window, JupyterLab's file browser folded away
    lab.page.set_viewport_size({"width": 1280, "height": 1000})
    lab.page.evaluate("window.jupyterapp.shell.collapseLeft()")
    try:
        expect(ten.locator(".kx-by-columns thead .kx-name")).to_have_count(10)
        ten.scroll_into_view_if_needed()
        sideways, width = ten.evaluate(SIDEWAYS)
        assert sideways <= width, (sideways, width)  # 10 branches fit in 1,280 px
        assert ten.evaluate(CLIPPED) == []
        ten.screenshot(path=tmp_path / "compare-10-answers-columns.png")
    finally:
        lab.page.evaluate("window.jupyterapp.shell.expandLeft()")
        lab.page.set_viewport_size({"width": 1400, "height": 1000})
    print(f"screenshots: {tmp_path}")


AGENT_NOTEBOOK = "agent.ipynb"
AGENT_JOURNALS = "agent-journals"
KERNEL_PRINT = """async ([id, code]) => {
  const panel = [...window.jupyterapp.shell.widgets('main')].find(w => w.id === id);
  const future = panel.sessionContext.session.kernel.requestExecute({ code });
  let out = "";
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === "stream") out += msg.content.text;
    if (msg.header.msg_type === "error") out += `${msg.content.ename}: ${msg.content.evalue}`;
  };
  await future.done;
  return out;
}"""
BOTTOM_RIGHT = """view => {
  const rows = [...view.querySelectorAll('.kx-by-rows tbody tr')];
  const heads = [...view.querySelectorAll('.kx-by-rows thead th')];
  return [Math.max(...rows.map(r => r.getBoundingClientRect().bottom)),
          Math.max(...heads.map(t => t.getBoundingClientRect().right))];
}"""


def agent_notebook(lab: Lab) -> None:
    """The agent of agent_support.py run on disk (the real SDKs against the fake model
    server), and a notebook showing its 21 runs in a CompareView and the tree of them with a
    tool branch's answering call open as a conversation."""
    from agent_support import run_agent

    from kassette import LocalStorage
    from kassette.testing import fake_model_server

    with fake_model_server(seed=0) as server:
        branches = run_agent(LocalStorage(lab.root / AGENT_JOURNALS), server)
    assert branches.frame.status.eq("success").all(), branches.frame
    cells = [
        f"""\
from kassette import LocalStorage
from kassette import explore as kx

journals = kx.load(LocalStorage("{AGENT_JOURNALS}"))
runs = sorted(journals.run_ids, key=lambda r: (r != "ticket", len(r), r))
grid = kx.CompareView(journals, runs)
grid""",
        """\
tree = kx.RunTree(journals, selected="ticket.draft.3")
calls = journals.llm_calls
answering = calls[(calls.run_id == "ticket.draft.3") & (calls.step_id == "draft#2")]
tree.open_conversation(int(answering.offset.iloc[0]))
tree""",
    ]
    write_notebook(lab.root / AGENT_NOTEBOOK, cells)


def test_the_answer_grid_shows_20_agent_branches_with_different_tool_paths_on_one_screen(
    lab: Lab, tmp_path: Path
) -> None:
    """21 runs of plan -> draft (a tool loop in every third branch) -> critique, in a 1,280 x
    900 window: one row per branch, draft and critique answers in one column each whatever
    the path (the shared plan hidden), every row and both columns on the screen; "more"
    opens an answer, the loop opens as a conversation, sorting and filtering reorder the
    branches, and a keep mark and a note land in `view.marks` in the kernel."""
    agent_notebook(lab)
    lab.page.set_viewport_size({"width": 1280, "height": 900})
    lab.page.evaluate("window.jupyterapp.shell.collapseLeft()")
    try:
        panel = lab.run(AGENT_NOTEBOOK)
        no_widget_errors(lab, AGENT_NOTEBOOK, panel)
        grid = panel.locator(".kassette-compare")
        rows = grid.locator(".kx-by-rows tbody tr")
        expect(rows).to_have_count(21)
        expect(grid.locator("thead .kx-step-head")).to_have_text(["draft", "critique"])
        plan = grid.locator(".kx-columns input[data-step='plan']")
        expect(plan).not_to_be_checked()  # the shared prefix: alike in every branch, hidden
        # every branch has its draft's answer in the draft column, a tool loop or not
        drafts = rows.locator("td:nth-child(2) .kx-answer")
        expect(drafts).to_have_count(21)
        assert all(len(text.split()) > 20 for text in drafts.all_text_contents())
        loops = grid.locator(".kx-open", has_text="search_runbook")
        expect(loops).to_have_count(7)
        grid.evaluate("view => view.scrollIntoView({block: 'start'})")
        lab.page.screenshot(path=tmp_path / "answer-grid-20-branches-1280x900.png")
        bottom, right = grid.evaluate(BOTTOM_RIGHT)
        assert bottom <= 900 and right <= 1280, (bottom, right)  # 20 branches, one screen
        lab.page.screenshot(path=tmp_path / "answer-grid-20-branches-1280x900.png")
        first = rows.first.locator(".kx-answer").first
        assert first.evaluate("box => box.scrollHeight > box.clientHeight")  # cut to two lines
        rows.first.locator(".kx-more").first.click()
        assert not first.evaluate("box => box.scrollHeight > box.clientHeight + 1")
        tooled = grid.locator('tr[data-run="ticket.draft.3"]')
        tooled.locator(".kx-open").first.click()
        talk = grid.locator(".kx-talk .kx-conversation")
        expect(talk.locator(".kx-call")).to_have_count(3)  # draft, search_runbook, draft#2
        expect(talk.locator(".kx-msg-tool").first).to_contain_text("Runbook 4.2")
        expect(talk.locator(".kx-msg-tool-call").first).to_contain_text("search_runbook(")
        expect(talk.locator(".kx-cost").first).to_contain_text("$")
        talk.locator(".kx-call").nth(2).scroll_into_view_if_needed()
        grid.locator(".kx-talk").screenshot(
            path=tmp_path / "answer-grid-tool-loop-conversation.png"
        )
        talk.locator(".kx-raw-toggle").first.click()
        expect(talk.locator(".kx-raw").first).to_contain_text('"stepId": "draft"')
        grid.locator(".kx-talk-close").click()
        expect(grid.locator(".kx-talk .kx-call")).to_have_count(0)
        # sort by temperature, highest first; keep only the hot ones
        grid.locator(".kx-sort").select_option("param:temperature")
        grid.locator("input.kx-descending").check()
        expect(rows.first).to_have_attribute("data-run", "ticket.draft.19")
        grid.locator(".kx-query").fill("temperature>1.4")
        grid.locator(".kx-query").press("Enter")
        expect(rows).to_have_count(5)
        expect(grid.locator(".kx-query-note")).to_have_text("5 of 21 branches")
        row = grid.locator('tr[data-run="ticket.draft.17"]')
        row.locator("input.kx-keep").check()
        row.locator("input.kx-note-input").fill("names the key id")
        row.locator("input.kx-note-input").press("Enter")
        expect(row.locator("th")).to_have_class(re.compile("kx-kept"))
        grid.locator(".kx-columns input[data-step='critique']").uncheck()
        expect(grid.locator("thead .kx-step-head")).to_have_text(["draft"])
        said = lab.page.evaluate(
            KERNEL_PRINT,
            [lab.panels[AGENT_NOTEBOOK], "print(grid.marks.to_dict('index'))"],
        )
        assert "'ticket.draft.17': {'keep': True, 'note': 'names the key id'" in said, said
        lab.page.screenshot(path=tmp_path / "answer-grid-sorted-filtered-marked.png")
        # the tree's details: the answering call of the tool loop as a conversation
        tree = panel.locator(".kassette-run-tree")
        shown = tree.locator(".kx-conversation-panel")
        expect(shown.locator(".kx-msg")).to_have_count(5)  # system, user, tool call, tool, answer
        expect(shown.locator(".kx-msg-answer")).to_have_count(1)
        expect(shown.locator(".kx-call-head")).to_contain_text("gpt-4o-mini")
        expect(shown.locator(".kx-call-head")).to_contain_text("in ·")
        expect(tree.locator(".kx-conversation-link")).to_have_count(4)  # plan, draft x2, critique
        shown.scroll_into_view_if_needed()
        tree.screenshot(path=tmp_path / "tree-details-conversation.png")
        tree.locator(".kx-conversation-link").first.click()  # another call: the plan
        expect(shown.locator(".kx-call-head")).to_contain_text("claude")
    finally:
        lab.page.evaluate("window.jupyterapp.shell.expandLeft()")
        lab.page.set_viewport_size({"width": 1400, "height": 1000})
    print(f"screenshots: {tmp_path}")
