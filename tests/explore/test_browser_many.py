"""10,000 runs (300,000 entries) in JupyterLab: the timeline draws, and views stay small.

Runs in the browser tests' JupyterLab (tests/explore/test_browser.py's `lab` fixture, in the
same Chromium, which saves widget state with the notebook as a user's "save widget state"
setting does). A notebook writes 10,000 agent runs (tests/explore/many_runs.py, copied beside
it), charts them with `kx.timeline` and shows them in a `kx.RunTree`, then is saved: what each
output leaves in the .ipynb is read from the file. The times are printed, not asserted (the
machine's load decides them); the screenshots go to the test's temporary directory.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from playwright.sync_api import expect
from test_browser import (
    CELL_TIMEOUT,
    RUN_CELL,
    VEGA_LITE,
    WIDGET,
    Lab,
    no_widget_errors,
    write_notebook,
)
from test_browser import lab as lab  # the fixture: JupyterLab in Chromium, once per module

NOTEBOOK = "many-10000.ipynb"
RUNS = 10_000
TIMELINE_LIMIT = 1_000_000  # bytes a timeline may leave in the notebook
VIEW_LIMIT = 100_000  # bytes any widget's view may
SAVE = "async () => { await window.jupyterapp.commands.execute('docmanager:save'); }"


def many_notebook(path: Path) -> None:
    shutil.copy(Path(__file__).with_name("many_runs.py"), path.parent / "many_runs.py")
    cells = [
        f"""\
import time

from many_runs import write_runs

from kassette import LocalStorage
from kassette import explore as kx

write_runs("runs-{RUNS}", {RUNS})
journals = kx.load(LocalStorage("runs-{RUNS}"))
print(f"{{len(journals.runs)}} runs, {{len(journals.entries)}} entries")""",
        """\
began = time.perf_counter()
chart = kx.timeline(journals)  # the first call imports Altair too
display(chart)
print(f"kx.timeline: {time.perf_counter() - began:.2f} s, shown")""",
        """\
began = time.perf_counter()
kx.timeline(journals)._repr_mimebundle_()
print(f"kx.timeline again: {time.perf_counter() - began:.2f} s, chart and spec")""",
        "tree = kx.RunTree(journals)\ntree",
    ]
    write_notebook(path, cells)


def output_text(cell: dict[str, Any]) -> str:
    return "".join("".join(out.get("text", "")) for out in cell["outputs"])


def test_10000_runs_chart_and_tree_draw_and_save_small(lab: Lab, tmp_path: Path) -> None:
    many_notebook(lab.root / NOTEBOOK)
    panel = lab.open(NOTEBOOK)
    outputs = panel.locator(".jp-OutputArea-output")
    for index in range(4):
        lab.page.evaluate(RUN_CELL, {"id": lab.panels[NOTEBOOK], "index": index})
    expect(panel.locator(".vega-embed canvas")).to_have_count(1, timeout=CELL_TIMEOUT)
    tree = panel.locator(".kassette-run-tree")
    expect(tree.locator(".kx-count")).to_have_text("10,000 runs", timeout=CELL_TIMEOUT)
    expect(tree.locator('.kassette-node[data-run-id="run-00000"]')).to_be_visible()
    texts = " ".join(outputs.all_inner_texts())
    assert "Javascript Error" not in texts and "call stack" not in texts, texts[:2000]
    no_widget_errors(lab, NOTEBOOK, panel)
    cells = lab.cells(NOTEBOOK)
    assert f"{RUNS} runs, {RUNS * 30} entries" in output_text(cells[0])
    for cell in cells[1:3]:
        print(f"\n{output_text(cell).strip()}")
    lab.page.set_viewport_size({"width": 1400, "height": 1600})  # the whole chart at once
    chart = panel.locator(".vega-embed").first
    chart.scroll_into_view_if_needed()
    chart.screenshot(path=tmp_path / "timeline-10000-runs.png")
    lab.page.set_viewport_size({"width": 1400, "height": 1000})
    tree.locator(".kx-search").fill("temperature>1.5 waiting_s>0")
    expect(tree.locator(".kx-count")).to_have_text(re.compile(r"^[\d,]+ of 10,000 runs$"))
    tree.screenshot(path=tmp_path / "tree-10000-runs-temperature.png")

    lab.page.evaluate(SAVE)
    saved = json.loads((lab.root / NOTEBOOK).read_text())
    code = [cell for cell in saved["cells"] if cell["cell_type"] == "code"]
    timeline = len(json.dumps(code[1]["outputs"]))
    assert VEGA_LITE in code[1]["outputs"][0]["data"]
    (view,) = [out for out in code[3]["outputs"] if WIDGET in out.get("data", {})]
    model = view["data"][WIDGET]["model_id"]
    states = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    tree_saved = len(json.dumps(view)) + len(json.dumps(states[model]))
    print(f"saved: timeline {timeline:,} bytes, RunTree {tree_saved:,} bytes (output and state)")
    print(f"screenshots: {tmp_path}")
    assert timeline < TIMELINE_LIMIT
    assert tree_saved < VIEW_LIMIT
    for model_id, state in states.items():  # every widget the notebook saved
        assert len(json.dumps(state)) < VIEW_LIMIT, model_id
