"""What the explorer looks like in JupyterLab: the pictures of the docs, and views measured.

Runs in the browser tests' JupyterLab (tests/explore/test_browser.py's `lab` fixture, in the
same Chromium). The demo store `make lab` writes (examples/demo_store.py) is opened in a
RunTree and a CompareView of its 20-branch fan-out; with KASSETTE_DOCS_IMAGES=1 the screenshots
replace docs/images/*.png (kept small: PNGs at one device pixel per CSS pixel, each under
300 KB), otherwise they go to the test's temporary directory:

    KASSETTE_DOCS_IMAGES=1 .venv/bin/python -m pytest tests/explore/test_browser_pictures.py
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Locator, expect
from test_browser import CELL_TIMEOUT, RUN_CELL, Lab, no_widget_errors, write_notebook
from test_browser import lab as lab  # the fixture: JupyterLab in Chromium, once per module

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
MAX_IMAGE_BYTES = 300_000
STORE_NOTEBOOK = "demo-store.ipynb"
FAN_OUT = 20
BRANCHES = [f"support-1.draft-reply.{number}" for number in range(FAN_OUT)]


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


def test_the_demo_store_in_a_run_tree_and_a_compare_view(lab: Lab, tmp_path: Path) -> None:
    """The pictures of README.md and docs/explore.md: the tree with the fan-out, and the
    branches' answers side by side."""
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
    directory = IMAGES if os.environ.get("KASSETTE_DOCS_IMAGES") == "1" else tmp_path
    save(tree, directory / "run-tree.png")
    save(compare, directory / "compare-view.png")
