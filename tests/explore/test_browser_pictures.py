"""What the explorer looks like in JupyterLab: the pictures of the docs, and views measured.

Runs in the browser tests' JupyterLab (tests/explore/test_browser.py's `lab` fixture, in the
same Chromium). The pictures of the docs are of a real agent's runs (tests/explore/
agent_support.py: plan, draft with a tool loop in every third branch, critique, fanned out 20
ways through the real SDKs) in a 1,280 x 900 window: CompareView's answer grid of the 21 runs,
and a RunTree whose details show a tool branch's answering call as a conversation. With
KASSETTE_DOCS_IMAGES=1 they replace docs/images/*.png (kept small: PNGs at one device pixel per
CSS pixel, each under 400 KB), otherwise they go to the test's temporary directory:

    KASSETTE_DOCS_IMAGES=1 .venv/bin/python -m pytest tests/explore/test_browser_pictures.py

The demo store `make lab` writes (examples/demo_store.py) is opened in a RunTree and a
CompareView of its 20-branch fan-out. The `journals` table of 22 runs is measured on the page
(one line per run, the whole table on one screen), and so is a timeline of 500 runs (its height
bounded); their screenshots go to the test's temporary directory, to be looked at.
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Locator, expect
from test_browser import CELL_TIMEOUT, RUN_CELL, Lab, no_widget_errors, write_notebook
from test_browser import lab as lab  # the fixture: JupyterLab in Chromium, once per module
from test_browser_compare import AGENT_NOTEBOOK, agent_notebook

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
MAX_IMAGE_BYTES = 400_000  # the answer grid is 21 rows of text: 360 KB as PNG at 1 px per px
STORE_NOTEBOOK = "demo-store.ipynb"
FAN_OUT = 20
BRANCHES = [f"support-1.draft-reply.{number}" for number in range(FAN_OUT)]
TABLE_NOTEBOOK = "journals-table.ipynb"
TABLE_RUNS = 22
SCREEN = 1000  # px: the page's height (test_browser's viewport)


def store_notebook(path: Path) -> None:
    """The store `make lab` writes, in a RunTree and a CompareView of the fan-out."""
    examples = ROOT / "examples"
    cells = [
        f"""\
import sys
from pathlib import Path

sys.path.insert(0, {str(examples)!r})
from demo_store import write

from kassette import explore as kx

write(Path("demo-store"))
journals = kx.load("demo-store")""",
        'kx.RunTree(journals, selected="support-1.draft-reply.7")',
        f"kx.CompareView(journals, ['support-1', *{BRANCHES!r}])",
    ]
    write_notebook(path, cells)


def table_notebook(path: Path) -> None:
    """22 runs whose input and result are long JSON, shown as a cell's value."""
    cells = [
        f"""\
from kassette import MemoryStorage, kassette
from kassette import explore as kx

storage = MemoryStorage()
answer = "The export stopped because the credentials were rotated on Tuesday. " * 6


@kassette(storage=storage, version="support-v1")
def support(ctx, ticket):
    reply = ctx.step("draft", lambda: {{"text": answer, "ticket": ticket}})
    return {{"reply": reply["text"], "words": len(reply["text"].split())}}


for number in range({TABLE_RUNS}):
    support.start({{"question": f"ticket {{number}}: " + answer}}, run_id=f"ticket-{{number:02d}}")
journals = kx.load(storage)
journals""",
    ]
    write_notebook(path, cells)


def save(element: Locator, path: Path) -> Path:
    """A screenshot of `element` at `path`, one device pixel per CSS pixel."""
    element.screenshot(path=path, animations="disabled", scale="css")
    size = path.stat().st_size
    print(f"\n{path}: {size:,} bytes")
    assert size < MAX_IMAGE_BYTES, (path, size)
    return path


def run_cells(lab: Lab, notebook: str, count: int) -> Locator:
    panel = lab.open(notebook)
    for index in range(count):
        lab.page.evaluate(RUN_CELL, {"id": lab.panels[notebook], "index": index})
    return panel


def test_the_pictures_of_the_docs_an_answer_grid_and_a_conversation(
    lab: Lab, tmp_path: Path
) -> None:
    """The pictures of README.md, docs/index.md and docs/explore.md, at 1,280 x 900: the 21
    runs' answers in one grid (draft and critique, whatever path each took), and the tree of
    them with a tool branch's answer open as a conversation in its details."""
    agent_notebook(lab)
    lab.page.set_viewport_size({"width": 1280, "height": 900})
    lab.page.evaluate("window.jupyterapp.shell.collapseLeft()")
    try:
        panel = lab.run(AGENT_NOTEBOOK)
        no_widget_errors(lab, AGENT_NOTEBOOK, panel)
        grid = panel.locator(".kassette-compare")
        expect(grid.locator(".kx-by-rows tbody tr")).to_have_count(1 + FAN_OUT)
        expect(grid.locator("thead .kx-step-head")).to_have_text(["draft", "critique"])
        expect(grid.locator(".kx-open", has_text="search_runbook")).to_have_count(7)
        tree = panel.locator(".kassette-run-tree")
        expect(tree.locator(".kassette-node")).to_have_count(1 + FAN_OUT)
        expect(tree.locator(".kx-details p b").first).to_have_text("ticket.draft.3")
        talk = tree.locator(".kx-conversation-panel")
        expect(talk.locator(".kx-msg-tool-call")).to_contain_text("search_runbook(")
        expect(talk.locator(".kx-msg-answer")).to_have_count(1)
        directory = IMAGES if os.environ.get("KASSETTE_DOCS_IMAGES") == "1" else tmp_path
        grid.evaluate("view => view.scrollIntoView({block: 'start'})")
        grid_box = grid.bounding_box()
        assert grid_box is not None and grid_box["height"] <= 900, grid_box  # one screen
        save(grid, directory / "compare-view.png")
        tree.evaluate("view => view.scrollIntoView({block: 'start'})")
        save(tree, directory / "run-tree.png")
    finally:
        lab.page.evaluate("window.jupyterapp.shell.expandLeft()")
        lab.page.set_viewport_size({"width": 1400, "height": SCREEN})


def test_the_demo_store_in_a_run_tree_and_a_compare_view(lab: Lab, tmp_path: Path) -> None:
    """The store `make lab` writes: the tree with the fan-out, and the branches' answers side
    by side (screenshots in the test's temporary directory)."""
    store_notebook(lab.root / STORE_NOTEBOOK)
    panel = run_cells(lab, STORE_NOTEBOOK, 3)
    tree = panel.locator(".kassette-run-tree")
    expect(tree.locator(".kassette-node"), "the store's 24 runs").to_have_count(
        4 + FAN_OUT, timeout=CELL_TIMEOUT
    )
    expect(tree.locator(".kx-details p b").first).to_have_text("support-1.draft-reply.7")
    compare = panel.locator(".kassette-compare")
    expect(compare).to_have_count(1, timeout=CELL_TIMEOUT)
    expect(compare).to_contain_text("support-1.draft-reply.19")
    expect(compare).to_contain_text("credentials")  # a model's answer, as text
    no_widget_errors(lab, STORE_NOTEBOOK, panel)
    save(tree, tmp_path / "demo-store-run-tree.png")
    save(compare, tmp_path / "demo-store-compare-view.png")


def test_the_journals_table_of_22_runs_fits_on_one_screen(lab: Lab, tmp_path: Path) -> None:
    table_notebook(lab.root / TABLE_NOTEBOOK)
    panel = run_cells(lab, TABLE_NOTEBOOK, 1)
    output = panel.locator(".jp-OutputArea-output").first
    expect(output).to_contain_text(f"Journals: {TABLE_RUNS} runs", timeout=CELL_TIMEOUT)
    rows = output.locator("tbody tr")
    expect(rows).to_have_count(TABLE_RUNS)
    save(output, tmp_path / "journals-table.png")
    heights = rows.evaluate_all("rows => rows.map(row => row.getBoundingClientRect().height)")
    assert max(heights) < 2 * min(heights) < 60, heights  # one line each, none wrapped
    box = output.bounding_box()
    assert box is not None
    assert box["height"] < SCREEN, box
    cut = output.locator("td[title]").first  # a JSON cell cut short, whole on hover
    title = cut.get_attribute("title")
    assert title is not None and title.startswith('{"question"'), title
    assert cut.inner_text().endswith("\u2026") and len(cut.inner_text()) < len(title)
