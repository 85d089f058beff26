"""The notebooks' widgets in a real browser: JupyterLab in Chromium, driven by Playwright.

nbval checks what the notebooks compute, but only a browser shows whether their widgets
render: without a working widget manager JupyterLab shows "Error displaying widget" or the
widget's plain-text repr instead. This module starts JupyterLab on 127.0.0.1 in a temporary
directory holding copies of notebooks/*.ipynb and one notebook of its own that forks into a
LocalStorage there, runs every notebook in Chromium, then clicks a RunTree node and the
ForkExplorer's Fork button. It also opens trusted copies of the notebooks as stored: their
widgets must show from the widget state notebooks/execute.py saved, without running.

Chromium is the system's (Debian: `apt-get install chromium`, which .ci/run does): Playwright
drives it by path, so no browser download is needed. Without one the module is skipped, except
under CI=true: there .ci/run installs Chromium, so a missing one fails these tests unless .ci/run
said it could not install it (it then sets KASSETTE_NO_CHROMIUM, as a registry outage should not
fail a run, while a lost install step should).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab_support import START_TIMEOUT, lab_environment, stop, wait_for_server
from playwright.sync_api import Locator, Page, expect, sync_playwright

from kassette import LocalStorage
from kassette.core import read_journal

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
FORK_NOTEBOOK = "fork-into-files.ipynb"
SAVED = [
    "01-explore-a-run.ipynb",
    "02-speculative-forks.ipynb",
    "05-views.ipynb",
    "06-model-calls.ipynb",
]  # with widget state
WIDGET = "application/vnd.jupyter.widget-view+json"
VEGA_LITE = "application/vnd.vegalite.v5+json"  # kx.timeline
CELL_TIMEOUT = 120_000  # ms: a whole notebook's cells
WAIT = 20_000  # ms: any one thing in the page
# A widget shown as text: its repr, the classic ipywidgets repr, or a view that never loaded.
PLAIN_WIDGET = re.compile(r"^(RunTree|ForkExplorer)[:(]|^(VBox|HBox|Button|HTML)\(|Loading widget")
BROWSER_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",  # 127.0.0.1 only
]


def find_chromium() -> str | None:
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next((path for path in map(shutil.which, names) if path), None)


CHROMIUM = find_chromium()
NO_CHROMIUM = "no Chromium on PATH (Debian: apt-get install chromium)"
CHROMIUM_REQUIRED = os.environ.get("CI") == "true" and not os.environ.get("KASSETTE_NO_CHROMIUM")
if CHROMIUM is None and not CHROMIUM_REQUIRED:
    pytest.skip(NO_CHROMIUM, allow_module_level=True)


@dataclass
class Lab:
    """A running JupyterLab, its directory, and a page showing it."""

    page: Page
    root: Path
    panels: dict[str, str] = field(default_factory=dict)  # notebook -> panel id, once open
    ran: set[str] = field(default_factory=set)

    def open(self, notebook: str) -> Locator:
        """Open `notebook` (once) as it is stored, and return its panel in the page."""
        if notebook not in self.panels:
            panel_id = self.page.evaluate(OPEN, notebook)
            self.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=WAIT * 3)
            self.panels[notebook] = panel_id
        self.page.evaluate("id => window.jupyterapp.shell.activateById(id)", self.panels[notebook])
        return self.page.locator(f"#{self.panels[notebook]}")

    def run(self, notebook: str) -> Locator:
        """Open `notebook` (once), run all its cells (once), and return its panel."""
        panel = self.open(notebook)
        if notebook not in self.ran:
            self.page.evaluate(RUN_ALL, self.panels[notebook])
            self.page.wait_for_function(CELLS_DONE, arg=self.panels[notebook], timeout=CELL_TIMEOUT)
            self.ran.add(notebook)
        return panel

    def cells(self, notebook: str) -> list[dict[str, Any]]:
        """The code cells of an open notebook, as nbformat JSON."""
        return self.page.evaluate(CELLS, self.panels[notebook])  # type: ignore[no-any-return]


# JavaScript run in the page on `window.jupyterapp` (--LabApp.expose_app_in_browser).
FIND_PANEL = "const panel = [...window.jupyterapp.shell.widgets('main')].find(w => w.id === id);"


def bounded(milliseconds: float, body: str) -> str:
    """An async function of `arg` running `body`, rejected if it takes longer than that.

    page.evaluate waits for a promise without a timeout of its own.
    """
    return f"""async arg => Promise.race([
  (async arg => {{ {body} }})(arg),
  new Promise((_, fail) => setTimeout(() => fail(new Error('timed out')), {milliseconds:.0f})),
])"""


OPEN = bounded(
    WAIT * 3,
    """const panel = await window.jupyterapp.commands.execute('docmanager:open', {path: arg});
  await panel.context.ready;
  await panel.sessionContext.ready;
  return panel.id;""",
)
RESTORED = bounded(START_TIMEOUT * 1000, "await window.jupyterapp.restored;")
KERNEL_IDLE = f"""id => {{
  {FIND_PANEL}
  const kernel = panel.sessionContext.session?.kernel;
  return kernel?.connectionStatus === 'connected' && kernel.status === 'idle';
}}"""
RUN_ALL = bounded(
    CELL_TIMEOUT,
    """window.jupyterapp.shell.activateById(arg);
  await window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs');
  await window.jupyterapp.commands.execute('notebook:run-all-cells');""",
)
RUN_CELL = bounded(
    CELL_TIMEOUT,
    """window.jupyterapp.shell.activateById(arg.id);
  const panel = [...window.jupyterapp.shell.widgets('main')].find(w => w.id === arg.id);
  panel.content.activeCellIndex = arg.index;
  await window.jupyterapp.commands.execute('notebook:run-cell');""",
)
CELLS = f"""id => {{
  {FIND_PANEL}
  const cells = panel.content.model.cells;
  return Array.from({{length: cells.length}}, (_, i) => cells.get(i).toJSON())
    .filter(cell => cell.cell_type === 'code');
}}"""
# Every code cell ran, or one failed (so the rest never will) and the kernel is idle again.
CELLS_DONE = f"""id => {{
  const cells = ({CELLS})(id);
  {FIND_PANEL}
  const idle = panel.sessionContext.session?.kernel?.status === 'idle';
  const failed = cells.some(cell => cell.outputs.some(o => o.output_type === 'error'));
  return idle && (failed || cells.every(cell => cell.execution_count !== null));
}}"""

# A RunTree's legend as {colour: status}, and its drawn nodes as [status, colour].
COLOURS = """tree => [
  Object.fromEntries([...tree.querySelectorAll('.kassette-legend span > span')]
    .map(swatch => [getComputedStyle(swatch).backgroundColor, swatch.parentElement.textContent])),
  [...tree.querySelectorAll('.kassette-forest .kassette-node')]
    .map(node => [  // a notebook's stored older script has no data-status: "run: status"
      node.dataset.status ?? node.title.split(': ').pop(),
      getComputedStyle(node.querySelector('.kx-pill')).backgroundColor,
    ]),
]"""


def write_notebook(path: Path, cells: list[str]) -> None:
    """Write `cells` as a Python 3 notebook of code cells at `path`."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(notebook, path)


def fork_notebook(path: Path) -> None:
    """A notebook that records two runs into files beside it and shows a ForkExplorer.

    Its fake model drafts one of three parsers, picked by the run id, so branches differ."""
    cells = [
        """\
from kassette import LocalStorage, kassette
from kassette import explore as kx

storage = LocalStorage("journals")
DRAFTS = [
    "def parse(s):\\n    y, m, d = s.split('-')\\n    return int(y), int(m), int(d)",
    "import re\\n\\ndef parse(s):\\n    return tuple(map(int, re.findall(r'\\\\d+', s)))",
    "from datetime import date\\n\\ndef parse(s):\\n    d = date.fromisoformat(s)\\n"
    "    return d.year, d.month, d.day",
]


def draft(run_id):
    return DRAFTS[sum(map(ord, run_id)) % len(DRAFTS)]


def run_tests(code):
    namespace, passed = {}, {}
    exec(code, namespace)
    for text in ("2026-05-08", "2026-5-8"):
        try:
            passed[text] = namespace["parse"](text) == (2026, 5, 8)
        except ValueError:
            passed[text] = False
    return passed


@kassette(storage=storage, version="coder-v1")
def coder(ctx, task):
    plan = ctx.step("plan", lambda: f"plan for {task}")
    code = ctx.step("implement", lambda: draft(ctx.run_id))
    return ctx.step("test", lambda: run_tests(code))


coder.start("parse dates", run_id="main")
coder.fork("main", step="test", new_run_id="retest")""",
        'explorer = kx.ForkExplorer(coder, "main")\nexplorer',
    ]
    write_notebook(path, cells)


RESUME_NOTEBOOK = "resume-async.ipynb"


def resume_notebook(path: Path) -> None:
    """A notebook with an async workflow's run waiting for approval, in a RunTree that can
    resume it (the form's message reaches the kernel on its running event loop)."""
    cells = [
        """\
from kassette import LocalStorage, kassette
from kassette import explore as kx

waiting = LocalStorage("waiting")


@kassette(storage=waiting, version="review-v1")
async def review(ctx, draft):
    checked = await ctx.step("check", lambda: f"checked {draft}")
    verdict = await ctx.suspend("approval", reason="a human reads the draft")
    return {"draft": checked, "approved": verdict["approved"]}


await review.start("the parser", run_id="draft-1")
tree = kx.RunTree(kx.load(waiting), workflow=review)
tree""",
    ]
    write_notebook(path, cells)


MANY_NOTEBOOK = "many-runs.ipynb"
MANY_RUNS = 10_000


def many_notebook(path: Path) -> None:
    """A notebook with a 20-branch fan-out made by forking (params on every fork, forks of forks
    at depth 2, multi-sentence reviews, one fork edited), and a 10,000-run forest written
    straight to journal files (500 tasks forked 19 times each), each shown in a RunTree."""
    cells = [
        """\
from kassette import LocalStorage, kassette
from kassette import explore as kx

few = LocalStorage("few")
REVIEW = (
    "The tokenizer now owns every regular expression, so the grammar reads tokens only. "
    "Two error messages lost their line numbers; restore them before merging. "
    "The fuzz test found no crash in 10,000 inputs."
)


@kassette(storage=few, version="coder-v1")
def coder(ctx, temperature):
    heat = ctx.params.get("temperature", temperature)
    plan = ctx.step("plan", lambda: "split the parser")
    code = ctx.step("implement", lambda: f"code at temperature {heat}\\n" * 12)
    review = ctx.step("review", lambda: {"verdict": REVIEW, "score": round(1 - heat / 2, 2)})
    return ctx.step("test", lambda: {"passed": int(heat * 10) % 4, "of": 4})


coder.start(0.0, run_id="task")
prompt = "You are a senior Python reviewer: prefer small diffs and name every risk you see."
for branch in range(19):
    source, step = ("task", "implement") if branch < 10 else (f"task-b{branch - 10:02d}", "review")
    params = {"temperature": round(0.05 * branch, 2), "system_prompt": prompt}
    coder.fork(source, step=step, new_run_id=f"task-b{branch:02d}", params=params)
coder.fork("task", step="review", new_run_id="task-b19", result={"verdict": "ship it", "score": 1})
small = kx.RunTree(kx.load(few), selected="task-b07")
small""",
        """\
import json
from pathlib import Path

from kassette._journal import encode, format_timestamp

many = Path("many")
many.mkdir()
text = "The nightly suite fails in the payment client's retry wrapper. " * 3
for run in range(RUNS):
    task, branch = divmod(run, 20)
    source = None if branch == 0 else f"t{task:04d}-{(branch - 1) // 3 * 3:02d}"
    lines = [{"type": "start", "metadata": {"task": task}}]
    for step in range(6):
        if source is not None and step == 2:
            lines.append({"type": "start", "source": {"runId": source, "fromOffset": 3}})
        lines.append({"type": "step", "stepId": f"chat#{step}", "name": "chat",
                      "result": text[: 60 + run % 90]})
    if run % 7:  # the others are still running
        lines.append({"type": "complete", "result": run})
    journal = b"".join(
        encode({"type": line["type"], "session": 1 + (i > 2 and source is not None),
                "offset": i, "timestamp": format_timestamp(1.767e9 + run * 30 + i),
                **{k: v for k, v in line.items() if k != "type"}})
        for i, line in enumerate(lines)
    )
    (many / f"t{task:04d}-{branch:02d}.jsonl").write_bytes(journal)
journals = kx.load(LocalStorage(many))
journals""".replace("RUNS", str(MANY_RUNS)),
        "tree = kx.RunTree(journals)\ntree",
    ]
    write_notebook(path, cells)


TIMELINE_NOTEBOOK = "timeline.ipynb"
TIMELINE_RUNS = 500
TIMELINE_PAGE = 40  # runs kx.timeline shows at once


def timeline_notebook(path: Path) -> None:
    """A notebook with 500 runs whose steps take from 50 us to 1.5 s, with a wait for a
    review in each, charted by kx.timeline twice: as shown (canvas), and through the same
    renderer told to draw SVG (embed_options), whose marks a test can count and measure."""
    cells = [
        """\
from IPython.display import display

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp

storage = MemoryStorage()
for run in range(RUNS):
    lines, now = [], 1.767e9 + run % 50 * 2

    def add(kind, seconds=0.0, **fields):
        global now
        now += seconds
        lines.append({"type": kind, "session": 1, "offset": len(lines),
                      "timestamp": format_timestamp(now), **fields})

    add("start", metadata={"run": run})
    add("step", 0.5, stepId="plan", name="plan", result=1, durationMs=0.05)
    add("step", 1.5, stepId="draft", name="draft", result=2, durationMs=1500.0)
    add("suspend", 0.1, eventId="review", event="review")
    add("resume", 20.0, eventId="review", event="review", value=True)
    add("step", 0.5, stepId="ship", name="ship", result=3, durationMs=0.05)
    add("complete", 0.1, result=run)
    storage.append(f"run-{run:03d}", b"".join(encode(line) for line in lines), token=None)
chart = kx.timeline(kx.load(storage))
chart""".replace("RUNS", str(TIMELINE_RUNS)),
        """\
MIME = "application/vnd.vegalite.v5+json"
svg = {MIME: {"embed_options": {"renderer": "svg"}}}
display({MIME: chart.to_dict()}, raw=True, metadata=svg)""",
    ]
    write_notebook(path, cells)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if CHROMIUM is None:  # the tests fail, the rest of the suite still runs
        pytest.fail(f"{NO_CHROMIUM}: CI=true, and .ci/run did not report failing to install it")
    root = tmp_path_factory.mktemp("lab")
    work = root / "notebooks"
    work.mkdir()
    for notebook in NOTEBOOKS:
        shutil.copy(notebook, work / notebook.name)
    fork_notebook(work / FORK_NOTEBOOK)
    resume_notebook(work / RESUME_NOTEBOOK)
    many_notebook(work / MANY_NOTEBOOK)
    timeline_notebook(work / TIMELINE_NOTEBOOK)
    (work / "saved").mkdir()
    for name in SAVED:
        shutil.copy(work / name, work / "saved" / name)
    env = lab_environment(root)
    # JupyterLab shows stored widget state only in a notebook signed as trusted
    saved = [str(work / "saved" / name) for name in SAVED]
    trust = [sys.executable, "-m", "jupyter", "trust", *saved]
    subprocess.run(trust, env=env, check=True, capture_output=True, timeout=60)
    token, log = secrets.token_hex(16), root / "lab.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root"),
                *("--ip=127.0.0.1", "--port=0", f"--IdentityProvider.token={token}"),
                *(f"--ServerApp.root_dir={work}", "--ServerApp.terminals_enabled=False"),
                *("--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None"),
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",
            ],
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = wait_for_server(process, root / "runtime", log)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch_persistent_context(
                root / "chromium",  # a fresh profile
                executable_path=CHROMIUM,
                args=BROWSER_ARGS,
                env={**env, "HOME": str(root), "XDG_CONFIG_HOME": str(root / "config")},
                viewport={"width": 1400, "height": 1000},
            )
            try:
                page = browser.new_page()
                page.set_default_timeout(WAIT)
                expect.set_options(timeout=WAIT)
                page.goto(f"{url}lab?token={token}", timeout=START_TIMEOUT * 1000)
                page.wait_for_function("window.jupyterapp", timeout=START_TIMEOUT * 1000)
                page.evaluate(RESTORED)
                yield Lab(page, work)
            finally:
                browser.close()
    finally:
        stop(process)


@pytest.mark.parametrize(
    "notebook", [*[path.name for path in NOTEBOOKS], FORK_NOTEBOOK], ids=lambda name: name
)
def test_the_notebook_runs_and_its_widgets_render(lab: Lab, notebook: str, tmp_path: Path) -> None:
    panel = lab.run(notebook)
    cells = lab.cells(notebook)
    for cell in cells:
        for output in cell["outputs"]:
            assert output["output_type"] != "error", (cell["source"], output["traceback"])
            assert output.get("name") != "stderr", (cell["source"], output["text"])
        assert cell["execution_count"] is not None, cell["source"]
    shown = sum(WIDGET in output.get("data", {}) for cell in cells for output in cell["outputs"])
    assert shown or notebook.startswith("03"), "no widget to check"
    check_widgets(panel, shown)
    charts = sum(VEGA_LITE in output.get("data", {}) for c in cells for output in c["outputs"])
    drawn = panel.locator(".vega-embed canvas")  # drawn by JupyterLab's own Vega renderer
    expect(drawn, "a Vega-Lite chart that did not draw").to_have_count(charts)
    for number, element in enumerate(panel.locator(".kassette-compare, .vega-embed").all()):
        element.screenshot(path=tmp_path / f"{notebook}-{number}.png")


@pytest.mark.parametrize("notebook", SAVED, ids=lambda name: name)
def test_a_saved_trusted_notebook_shows_its_stored_widgets(lab: Lab, notebook: str) -> None:
    """The widget state notebooks/execute.py stores is what a reader sees before running."""
    panel = lab.open(f"saved/{notebook}")
    cells = lab.cells(f"saved/{notebook}")
    shown = sum(WIDGET in output.get("data", {}) for cell in cells for output in cell["outputs"])
    assert shown, "no stored widget to check"
    check_widgets(panel, shown)


def check_widgets(panel: Locator, shown: int) -> None:
    """`shown` widget views render in `panel`, none as text or an error; legends match."""
    views = panel.locator(".jp-OutputArea-output > .jupyter-widgets")  # a widget's root view
    expect(views, "widget views (a widget shown as text or an error is none)").to_have_count(shown)
    plain = panel.locator('.jp-OutputArea-output[data-mime-type="text/plain"]').all_inner_texts()
    assert not [t for t in plain if PLAIN_WIDGET.search(t.strip())], "a widget shown as text"
    for number in range(shown):
        expect(views.nth(number)).to_be_visible()
    text = panel.locator(".jp-OutputArea-output").all_inner_texts()
    assert not [t for t in text if "Error displaying widget" in t or PLAIN_WIDGET.search(t)]
    for tree in panel.locator(".kassette-run-tree").all():
        legend, nodes = tree.evaluate(COLOURS)
        assert nodes, "a tree with no node drawn"
        if "completed" not in legend.values():  # coloured by a number: a scale
            assert all(colour in legend for _, colour in nodes), (nodes, legend)
            continue
        assert list(legend.values()) == ["completed", "failed", "canceled", "suspended", "running"]
        for status, colour in nodes:  # the node's status, and its colour as drawn
            assert legend[colour] == status, (status, colour, legend)


def node(panel: Locator, run_id: str) -> Locator:
    """The RunTree row of a run."""
    return panel.locator(f'.kassette-forest .kassette-node[data-run-id="{run_id}"]')


SELECTED = re.compile(r"\bkx-selected\b")


def test_clicking_a_run_tree_node_shows_its_entries(lab: Lab) -> None:
    panel = lab.run("01-explore-a-run.ipynb")
    details = panel.locator(".kassette-run-tree .kassette-details")
    expect(details.locator("p b").first).to_have_text("INC-4823")  # the notebook's choice
    expect(node(panel, "INC-4823")).to_have_class(SELECTED)
    node(panel, "INC-4821").click()
    expect(details.locator("p b").first).to_have_text("INC-4821")
    expect(details.locator("p")).to_contain_text("completed")
    expect(details.locator("tbody tr")).to_have_count(7)  # two sessions, resumed in between
    expect(details.locator("tbody")).to_contain_text("human-approval")
    expect(node(panel, "INC-4821")).to_have_class(SELECTED)
    expect(node(panel, "INC-4823")).not_to_have_class(SELECTED)


def journal_files(lab: Lab) -> set[str]:
    return {path.name for path in (lab.root / "journals").glob("*.jsonl")}


def test_pressing_fork_adds_a_branch_to_the_tree_and_a_journal_file(lab: Lab) -> None:
    """Every step waits for what the kernel sends back (a text, a count) before the next, with
    the page's timeout: no sleep, and no step that assumes the kernel has already answered."""
    panel = lab.run(FORK_NOTEBOOK)
    before = journal_files(lab)
    assert {"main.jsonl", "retest.jsonl"} <= before
    target = panel.locator(".kassette-fork-target")
    expect(target).to_have_text(
        "Fork will branch main at offset 1 into a new run (random id): "
        "it keeps entry 0 and runs again from entry 1 (step plan)."
    )
    details = panel.locator(".kassette-details")
    node(panel, "retest").click()
    expect(details.locator("p.kx-title")).to_contain_text(
        "retest completed, forked from main at offset 3"
    )
    expect(target).to_contain_text("Fork will branch retest at offset")
    node(panel, "main").click()
    expect(target).to_contain_text("Fork will branch main at offset 1")
    step = panel.locator(".kassette-fork-step select")
    expect(step.locator("option")).to_have_text(
        ["(by offset)", "plan (offset 1)", "implement (offset 2)", "test (offset 3)"]
    )  # main's steps (retest's test step is at offset 4)
    step.select_option(label="implement (offset 2)")
    expect(target).to_contain_text("Fork will branch main at offset 2 into a new run")
    panel.locator(".kassette-fork-explorer input[placeholder='(random id)']").fill("rewrite")
    expect(target).to_have_text(
        "Fork will branch main at offset 2 into rewrite: "
        "it keeps entries 0 to 1 and runs again from entry 2 (step implement)."
    )
    panel.locator(".kassette-fork-explorer button", has_text="Fork").click()
    status = panel.locator(".kassette-fork-status")
    expect(status).to_have_text("forked main at offset 2 into rewrite: success", timeout=WAIT * 3)
    expect(panel.locator(".kassette-forest .kassette-node")).to_have_count(len(before) + 1)
    expect(node(panel, "rewrite")).to_have_text("rewrite · @2 · 3 steps")
    # the source stays the run picked: the next press forks main again
    expect(details.locator("p b").first).to_have_text("main")
    expect(target).to_contain_text("Fork will branch main at offset 2")
    compared = panel.locator(".kassette-fork-explorer .kassette-compare")
    expect(compared.locator("thead .kx-name")).to_have_text(["main", "rewrite"])
    expect(compared.locator("thead .kx-how")).to_have_text(["baseline", "differs at 2 steps"])
    expect(compared.locator(".kx-banner")).to_contain_text("first divergence: step implement")
    assert journal_files(lab) == before | {"rewrite.jsonl"}
    journal = read_journal(LocalStorage(lab.root / "journals"), "rewrite")
    assert journal.entries[2]["source"] == {"runId": "main", "fromOffset": 2}
    assert journal.entries[-1]["type"] == "complete"


def test_the_resume_form_resumes_an_async_workflow_from_the_page(lab: Lab) -> None:
    """The form calls the AsyncWorkflow's resume on the kernel's running loop (a task): the
    panel says so, then how the run ended, and the run is complete in its journal."""
    panel = lab.run(RESUME_NOTEBOOK)
    no_widget_errors(lab, RESUME_NOTEBOOK, panel)
    details = panel.locator(".kassette-details")
    expect(details.locator("p.kx-title")).to_contain_text("draft-1 suspended")
    form = details.locator(".kx-resume-form")
    expect(form.locator(".kx-event option")).to_have_text(["approval"])
    form.locator("textarea").fill('{"approved": true}')
    form.locator("button", has_text="Resume").click()
    expect(details.locator(".kx-message")).to_have_text(
        "resumed approval: success", timeout=WAIT * 3
    )
    expect(details.locator("p.kx-title")).to_contain_text("draft-1 completed")
    expect(node(panel, "draft-1")).to_have_attribute("data-status", "completed")
    expect(form).to_have_count(0)  # nothing to resume any more
    journal = read_journal(LocalStorage(lab.root / "waiting"), "draft-1")
    assert journal.entries[-1]["type"] == "complete"
    assert journal.entries[-1]["result"] == {"draft": "checked the parser", "approved": True}


FAN_OUT = 20


def test_pressing_fan_out_adds_n_branches_to_the_tree_and_n_journal_files(
    lab: Lab, tmp_path: Path
) -> None:
    """Fan out 20 branches of main at its implement step from the page: the tree grows by 20,
    20 journal files appear, and the CompareView lines them up against main (screenshots)."""
    panel = lab.run(FORK_NOTEBOOK)
    before = journal_files(lab)
    runs = panel.locator(".kassette-fork-explorer .kx-count")
    expect(runs).to_have_text(f"{len(before)} runs")  # every run here is in main's family
    node(panel, "main").click()
    target = panel.locator(".kassette-fork-target")
    expect(target).to_contain_text("Fork will branch main at offset")
    panel.locator(".kassette-fork-step select").select_option(label="implement (offset 2)")
    expect(target).to_contain_text("Fork will branch main at offset 2")
    panel.locator(".kassette-fork-explorer input[placeholder='(random id)']").fill("wide")
    expect(target).to_contain_text("at offset 2 into wide:")  # the kernel has the prefix
    count = panel.locator(".kassette-fan-out-count input")
    count.fill(str(FAN_OUT))
    count.press("Enter")  # an integer field sends its value on Enter (or on leaving it)
    fan_out = panel.locator(".kassette-fork-explorer button", has_text="Fan out")
    fan_out.click()
    status = panel.locator(".kassette-fork-status")
    expect(status).to_contain_text(
        f"fanned out main at offset 2 into {FAN_OUT} branches (wide.0 …): {FAN_OUT} success",
        timeout=WAIT * 3,
    )
    expect(runs).to_have_text(f"{len(before) + FAN_OUT} runs")
    expect(node(panel, f"wide.{FAN_OUT - 1}")).to_have_count(1)
    branches = {f"wide.{number}.jsonl" for number in range(FAN_OUT)}
    assert journal_files(lab) == before | branches
    for number in (0, FAN_OUT - 1):
        journal = read_journal(LocalStorage(lab.root / "journals"), f"wide.{number}")
        assert journal.entries[2]["source"] == {"runId": "main", "fromOffset": 2}
    compared = panel.locator(".kassette-fork-explorer .kassette-compare")
    # 21 branches: a row each (transposed), the plan step alike in all of them folded away
    branches = compared.locator(".kx-by-rows tbody .kx-name")
    expect(branches).to_have_count(1 + FAN_OUT)
    expect(branches.first).to_have_text("main")
    # the answer grid (compact beyond 10 branches): the plan, alike everywhere, is unticked
    expect(compared.locator(".kx-columns input[data-step='plan']")).not_to_be_checked()
    expect(compared.locator(".kx-banner")).to_contain_text("first divergence: step implement")
    explorer = panel.locator(".kassette-fork-explorer")
    explorer.screenshot(path=tmp_path / "fork-explorer-20-branches.png")
    compared.locator(".kx-mode").select_option("diff")
    expect(compared.locator(".kx-diff").first).to_be_visible()
    compared.screenshot(path=tmp_path / "compare-20-branches-diff.png")
    # the fake model has three drafts: one row for each, headed by who wrote it
    compared.locator("input.kx-group").check()
    expect(branches).to_have_count(3)
    expect(branches.first).to_have_text(re.compile(r"^main \+\d+$"))
    expect(compared.locator(".kx-group-label")).to_contain_text("3 distinct of 21")
    compared.screenshot(path=tmp_path / "compare-20-branches-grouped.png")
    print(f"screenshots: {tmp_path}")


def no_widget_errors(lab: Lab, notebook: str, panel: Locator) -> None:
    """No cell output is an error, a widget error or an IOPub rate message."""
    for cell in lab.cells(notebook):
        for output in cell["outputs"]:
            assert output["output_type"] != "error", (cell["source"], output["traceback"])
            text = "".join(output.get("text", "")) + json.dumps(output.get("data", {}))
            assert "IOPub" not in text and "rate exceeded" not in text, text
    shown = panel.locator(".jp-OutputArea-output").all_inner_texts()
    assert not [t for t in shown if "Error displaying widget" in t or "IOPub" in t]


def test_a_run_tree_of_10000_runs_draws_in_one_model(lab: Lab, tmp_path: Path) -> None:
    """The tree at 20 branches and at 10,000 runs: drawn, searchable, clickable, virtualized.

    The draw time (run the cell to rows on screen) is printed, not asserted: the machine's
    load decides it. Screenshots of both trees go to the test's temporary directory.
    """
    panel = lab.open(MANY_NOTEBOOK)
    for index in (0, 1):
        lab.page.evaluate(RUN_CELL, {"id": lab.panels[MANY_NOTEBOOK], "index": index})
    trees = panel.locator(".kassette-run-tree")
    expect(trees).to_have_count(1, timeout=CELL_TIMEOUT)
    small = trees.first
    expect(small.locator(".kassette-node")).to_have_count(21)
    expect(node(small, "task-b07")).to_have_class(SELECTED)
    implement = small.locator(".kx-details tbody tr", has_text="implement")
    implement.locator(".kx-long").click()  # a long value unfolds, newlines kept
    expect(small.locator(".kx-full").first).to_contain_text("code at temperature")
    small.screenshot(path=tmp_path / "tree-20-branches.png")
    small.locator(".kx-details").evaluate("d => { d.scrollTop = d.scrollHeight; }")
    small.locator(".kx-search").fill("b19")
    node(small, "task-b19").click()  # the edited fork: its edited entry marked, panel at top
    expect(small.locator(".kx-details p b").first).to_have_text("task-b19")
    expect(small.locator(".kx-entries tr.kx-edited-row")).to_have_count(1)
    expect(small.locator(".kx-entries tr.kx-edited-row")).to_contain_text("review")
    assert small.locator(".kx-details").evaluate("d => d.scrollTop") == 0
    small.screenshot(path=tmp_path / "tree-20-branches-edited.png")
    small.locator(".kx-search").fill("")
    expect(panel.locator(".jp-OutputArea-output").nth(1)).to_contain_text(
        "Journals: 10000 runs", timeout=CELL_TIMEOUT
    )
    began = time.monotonic()
    lab.page.evaluate(RUN_CELL, {"id": lab.panels[MANY_NOTEBOOK], "index": 2})
    big = trees.nth(1)
    expect(big.locator(".kassette-node").first).to_be_visible(timeout=CELL_TIMEOUT)
    drawn = time.monotonic() - began
    render_ms = big.evaluate("el => el.closest('[data-draw-ms]')?.dataset.drawMs")
    print(f"\n10,000-run RunTree: drawn {drawn:.2f} s after the cell ran (render {render_ms} ms)")
    rows = big.locator(".kassette-node").count()
    assert 10 < rows < 80, rows  # only the rows in view (and a few beyond) are in the page
    expect(big.locator(".kx-count")).to_have_text("10,000 runs")
    big.screenshot(path=tmp_path / "tree-10000-runs.png")
    big.locator(".kx-forest").evaluate("forest => { forest.scrollTop = forest.scrollHeight; }")
    expect(node(big, "t0499-19")).to_be_visible()  # the last run, drawn on scrolling
    big.locator(".kx-search").fill("t0042- running")
    expect(big.locator(".kx-count")).to_have_text(re.compile(r"^\d of 10,000 runs$"))
    node(big, "t0042-14").click()
    expect(big.locator(".kx-details p b").first).to_have_text("t0042-14")
    expect(big.locator(".kx-details")).to_contain_text("forked from t0042-12 at offset 3")
    big.screenshot(path=tmp_path / "tree-10000-runs-filtered.png")
    print(f"screenshots: {tmp_path}")
    no_widget_errors(lab, MANY_NOTEBOOK, panel)


# Marks of a Vega SVG chart drawn at least a pixel wide, by fill colour.
INKED = """svg => {
    const fills = {};
    for (const path of svg.querySelectorAll('g.mark-rect path')) {
        const box = path.getBBox();
        if (box.width < 1 || box.height < 1) continue;
        const fill = path.getAttribute('fill') || '';
        fills[fill] = (fills[fill] || 0) + 1;
    }
    return fills;
}"""


def test_a_timeline_of_500_runs_draws_its_bars(lab: Lab, tmp_path: Path) -> None:
    """kx.timeline draws, with JupyterLab's own Vega-Lite renderer, a visible mark for every
    step (steps of 50 us included) and every wait of a page of runs (40 of 500: the chart's
    height is bounded), a tooltip naming the step, and a slider that shows the other pages."""
    panel = lab.run(TIMELINE_NOTEBOOK)
    no_widget_errors(lab, TIMELINE_NOTEBOOK, panel)
    expect(panel.locator(".vega-embed canvas")).to_have_count(1, timeout=WAIT)
    svg = panel.locator(".vega-embed svg.marks")
    expect(svg).to_have_count(1, timeout=WAIT)
    fills = svg.evaluate(INKED)
    waits = fills.pop("#999999", 0)  # where each wait began (its pale bar may be thinner)
    fills.pop("#bbbbbb", None)
    assert waits >= TIMELINE_PAGE, fills
    assert len(fills) == 3, fills  # one colour per step name: plan, draft, ship
    assert all(count >= TIMELINE_PAGE for count in fills.values()), fills
    drawn = svg.bounding_box()
    assert drawn is not None and drawn["height"] < 1000, drawn  # 40 rows, not 500
    path = svg.locator("g.mark-rect path").last
    path.scroll_into_view_if_needed()
    box = path.bounding_box()
    assert box is not None
    lab.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    tooltip = lab.page.locator("#vg-tooltip-element")
    expect(tooltip).to_contain_text("step id", timeout=WAIT)
    expect(tooltip).to_contain_text("seconds")
    lab.page.mouse.move(0, 0)
    labels = svg.locator("g.role-axis-label text")
    expect(labels.filter(has_text="run-000")).to_have_count(1)
    expect(labels.filter(has_text="run-499")).to_have_count(0)
    slider = panel.locator(".vega-bind input[type=range]").last  # the SVG chart's
    slider.evaluate("input => { input.value = input.max; input.dispatchEvent(new Event('input')) }")
    expect(labels.filter(has_text="run-499")).to_have_count(1)
    expect(labels.filter(has_text="run-000")).to_have_count(0)
    for number, chart in enumerate(panel.locator(".vega-embed").all()):
        chart.screenshot(path=tmp_path / f"timeline-{number}.png")
    print(f"screenshots: {tmp_path}")
