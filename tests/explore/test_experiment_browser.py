"""An experiment as a researcher sees it in JupyterLab (Chromium, Playwright; see test_browser.py).

A notebook runs an experiment of 5 variants on 200 recorded runs (1,000 branches) and shows it
in a cell: the summary table (a row per variant, the interval as [low, high]) and the forest
plot (JupyterLab's own Vega-Lite renderer, offline), then the RunTree of its journals. The
test checks what the page shows and saves screenshots to look at.
"""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect
from test_browser import (  # noqa: F401 - `lab` is the fixture this module uses
    CELL_TIMEOUT,
    WAIT,
    Lab,
    lab,
    write_notebook,
)

NOTEBOOK = "experiment-view.ipynb"
VARIANTS = ["shorter", "checklist", "warmer", "quote-first", "no-greeting"]


def experiment_notebook(path: Path) -> None:
    cells = [
        """\
import random
from kassette import LocalStorage, kassette
from kassette import explore as kx

storage = LocalStorage("experiment-store")


@kassette(storage=storage, version="support-v1")
def support(ctx, ticket):
    topic = ctx.step("read", lambda: ticket["topic"])
    lift = ctx.params.get("lift", 0.0)
    noise = random.Random(ctx.run_id).gauss(0, 0.15)
    quality = ctx.step("draft", lambda: round(0.5 + ticket["hard"] + lift + noise, 4))
    return {"quality": quality, "topic": topic}


for number in range(200):
    support.start({"topic": f"topic {number % 8}", "hard": (number % 10) / 40},
                  run_id=f"ticket-{number:03d}")
experiment = kx.experiment(
    support,
    kx.load(storage).runs,
    step="draft",
    variants={
        "shorter": {"lift": 0.04},
        "checklist": {"lift": 0.0},
        "warmer": {"lift": -0.03},
        "quote-first": {"lift": 0.12},
        "no-greeting": {"lift": 0.01},
    },
    score=lambda result: result.result["quality"],
    name="prompts",
    progress=False,
)""",
        "experiment",
        "kx.RunTree(kx.load(storage))",
    ]
    write_notebook(path, cells)


def test_an_experiment_shows_its_summary_and_forest_plot_at_5_variants_and_200_runs(
    lab: Lab,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    experiment_notebook(lab.root / NOTEBOOK)
    panel = lab.run(NOTEBOOK)
    cells = lab.cells(NOTEBOOK)
    assert all(o["output_type"] != "error" for cell in cells for o in cell["outputs"]), cells
    shown = panel.locator(".jp-CodeCell").nth(1)
    table = shown.locator("table.kassette-experiment-summary")
    expect(table).to_be_visible(timeout=WAIT)
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(5)
    for variant in VARIANTS:
        expect(table).to_contain_text(variant)
    expect(shown).to_contain_text("1000 of 1000 branches done")
    expect(table.locator("tbody tr").nth(3)).to_contain_text("200")  # quote-first: 200 pairs
    plot = shown.locator(".jp-RenderedVegaCommon5, .vega-embed").first
    expect(plot).to_be_visible(timeout=WAIT)
    expect(plot.locator("svg, canvas").first).to_be_visible(timeout=WAIT)
    shown.screenshot(path=tmp_path / "experiment-summary-and-forest.png")
    tree = panel.locator(".jp-CodeCell").nth(2).locator(".kassette-forest")
    expect(tree).to_be_visible(timeout=CELL_TIMEOUT)
    expect(tree).to_contain_text("ticket-000")
    panel.locator(".jp-CodeCell").nth(2).screenshot(path=tmp_path / "experiment-run-tree.png")
    print(f"\nscreenshots: {tmp_path}")
