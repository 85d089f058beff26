"""A fan-out watched and interrupted in JupyterLab (Chromium, Playwright; see test_browser.py,
whose JupyterLab this module starts a second one of).

A notebook fans out 8 branches of six model calls that each take a second, 4 at a time (so
an interrupt on a loaded host still finds them mid-way). The
progress line must show branches running and tokens spent while it runs (a screenshot is
taken then); JupyterLab's "interrupt the kernel" (a real SIGINT) must end the cell with
`FanOutInterrupted`, its branches stopped and open; running the cell again finishes all 8.
Then the same for an `async def` workflow, whose branches run on an event loop of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect
from test_browser import (  # noqa: F401 - `lab` is the fixture this module uses
    CELL_TIMEOUT,
    FIND_PANEL,
    KERNEL_IDLE,
    RUN_CELL,
    WAIT,
    Lab,
    lab,
    write_notebook,
)

from kassette import LocalStorage
from kassette.core import run_status

NOTEBOOK = "fan-out-progress.ipynb"
START_CELL = f"""({{id, index}}) => {{
  {FIND_PANEL}
  window.jupyterapp.shell.activateById(id);
  panel.content.activeCellIndex = index;
  window.jupyterapp.commands.execute('notebook:run-cell');  // not awaited: it runs on
}}"""


def progress_notebook(path: Path) -> None:
    cells = [
        """\
import time
from kassette import LocalStorage, kassette
from kassette import explore as kx


def completion(text):
    time.sleep(1.0)  # as long as a short model call
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 300, "total_tokens": 1200},
    }


@kassette(storage=LocalStorage("sweep"))
def agent(ctx, task):
    ctx.step("plan", lambda: "plan")
    answers = [ctx.step("chat", lambda n=n: completion(f"answer {n}")) for n in range(6)]
    return len(answers)


agent.start("task", run_id="root")""",
        """branches = kx.fan_out(agent, "root", step="chat", n=8, max_workers=4)""",
        """branches.frame[["run_id", "status"]]""",
        """\
import asyncio


async def answer(text):
    await asyncio.sleep(1.0)
    return text


@kassette(storage=LocalStorage("sweep-async"))
async def async_agent(ctx, task):
    await ctx.step("plan", lambda: "plan")
    for n in range(6):
        await ctx.step("chat", lambda n=n: answer(f"answer {n}"))
    return "done"


await async_agent.start("task", run_id="root")""",
        """async_branches = kx.fan_out(async_agent, "root", step="chat", n=8, max_workers=4)""",
        """import sys

partial = sys.last_value.branches  # the branches the interrupted fan-out reached
partial""",
        """@kassette(storage=LocalStorage("sweep"))
def changed(ctx, task):
    ctx.suspend("plan")  # where the journal has a step


changed.fork("root", step="chat", new_run_id="changed")""",
    ]
    write_notebook(path, cells)


def test_the_progress_line_counts_a_running_fan_out_and_an_interrupt_stops_it(
    lab: Lab,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    progress_notebook(lab.root / NOTEBOOK)
    panel = lab.open(NOTEBOOK)
    panel_id = lab.panels[NOTEBOOK]
    lab.page.evaluate(RUN_CELL, {"id": panel_id, "index": 0})
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    lab.page.evaluate(START_CELL, {"id": panel_id, "index": 1})
    line = panel.locator(".kassette-fan-out-progress")
    # mid-way: some calls journaled, branches still running (4 at a time, 6 s each)
    expect(line).to_contain_text(re.compile(r"\d+ running .* model calls, [\d,]+ tokens"))
    expect(line).to_contain_text("4 running")
    line.screenshot(path=tmp_path / "fan-out-progress-running.png")
    lab.page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
    cell = panel.locator(".jp-CodeCell").nth(1)
    expect(cell.locator(".jp-OutputArea")).to_contain_text("FanOutInterrupted", timeout=WAIT * 2)
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    expect(line).to_contain_text(re.compile(r" 0 running .* \d stopped .* stopped by interrupt$"))
    line.screenshot(path=tmp_path / "fan-out-progress-interrupted.png")
    # the exception in a few lines: the counts, how to continue, where the branches are
    error = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    expect(error).to_contain_text(re.compile(r"FanOutInterrupted: fan-out of root interrupted: "))
    expect(error).to_contain_text("Run the same kx.fan_out(...) call again to continue")
    expect(error).to_contain_text("branches = sys.last_value.branches")
    assert "Traceback" not in error.inner_text() and "_running.py" not in error.inner_text()
    cell.screenshot(path=tmp_path / "fan-out-interrupted-cell.png")
    lab.page.evaluate(RUN_CELL, {"id": panel_id, "index": 5})
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    partial = panel.locator(".jp-CodeCell").nth(5).locator(".jp-OutputArea")
    expect(partial).to_contain_text(re.compile(r"Branches of root: 8 \(\d+ done.*, \d+ stopped\)"))
    expect(partial).to_contain_text("stopped_by")
    storage = LocalStorage(lab.root / "sweep")
    forked = [run_id for run_id in storage.list_runs() if run_id.startswith("root.chat.")]
    statuses = {run_status(storage, run_id).status for run_id in forked}
    assert statuses <= {"running", "completed"} and "running" in statuses  # open, not failed

    lab.page.evaluate(RUN_CELL, {"id": panel_id, "index": 1})
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    line = panel.locator(".kassette-fan-out-progress").last
    expect(line).to_contain_text("8/8 done · 0 running · 8 succeeded · 0 failed")
    line.screenshot(path=tmp_path / "fan-out-progress-done.png")
    assert {run_status(storage, f"root.chat.{n}").status for n in range(8)} == {"completed"}

    # an async def workflow: its branches run on a loop in a thread of their own (the
    # kernel's loop is busy running this cell), and the interrupt reaches them there too
    lab.page.evaluate(RUN_CELL, {"id": panel_id, "index": 3})
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    lab.page.evaluate(START_CELL, {"id": panel_id, "index": 4})
    async_cell = panel.locator(".jp-CodeCell").nth(4)
    async_line = async_cell.locator(".kassette-fan-out-progress")
    expect(async_line).to_contain_text("4 running")
    lab.page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
    outputs = async_cell.locator(".jp-OutputArea")
    expect(outputs).to_contain_text("FanOutInterrupted", timeout=WAIT * 2)
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    expect(async_line).to_contain_text(re.compile(r" 0 running .* stopped by interrupt$"))
    async_line.screenshot(path=tmp_path / "fan-out-progress-async-interrupted.png")
    lab.page.evaluate(RUN_CELL, {"id": panel_id, "index": 4})
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    expect(async_cell.locator(".kassette-fan-out-progress").last).to_contain_text(
        "8/8 done · 0 running · 8 succeeded"
    )

    # a replay that fails: the error and what to do, in a few lines
    lab.page.evaluate(RUN_CELL, {"id": panel_id, "index": 6})
    lab.page.wait_for_function(KERNEL_IDLE, arg=panel_id, timeout=CELL_TIMEOUT)
    mismatch = panel.locator(".jp-CodeCell").nth(6)
    shown = mismatch.locator(".jp-OutputArea")
    expect(shown).to_contain_text("ReplayMismatchError: run changed: journal has a step at plan")
    expect(shown).to_contain_text("(the full traceback: %xmode Plain, then %tb)")
    assert "Traceback" not in shown.inner_text()
    mismatch.screenshot(path=tmp_path / "replay-mismatch-cell.png")
    print(f"screenshots: {tmp_path} ({WAIT} ms waits)")
