"""RunTree's own script in Chromium, without JupyterLab: what it draws from a real tree's state.

`test_browser.py` runs the widgets inside JupyterLab; this module mounts tree.js and tree.css
in a bare page with a stand-in for the widget model that holds the state a real `kx.RunTree`
(in this process) would sync, so the drawing itself can be checked cheaply: cut labels and
their tooltips, the edited entry's mark, the details panel's scroll, where values wrap, and
the number palette. Screenshots go to the test's temporary directory (printed with -s).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from test_browser import BROWSER_ARGS, CHROMIUM, NO_CHROMIUM

from kassette import MemoryStorage, kassette
from kassette import explore as kx
from kassette.explore._widgets._colors import SCALE
from kassette.explore._widgets._rows import FOLDED, pretty_json

SYNCED = ("_forest", "legend", "selected", "details", "entries", "page", "pages", "message")
SYNCED_TOO = ("can_resume", "_forest_id", "_forest_runs", "follow")
MOUNT = """async ({esm, css, state, width}) => {
  const style = document.createElement("style");
  style.textContent = css;
  document.head.append(style);
  const url = URL.createObjectURL(new Blob([esm], {type: "text/javascript"}));
  const view = await import(url);
  const handlers = {};
  const fire = (name) => (handlers["change:" + name] || []).forEach((f) => f());
  const model = {
    state,
    get: (name) => model.state[name],
    set: (name, value) => {
      model.state[name] = value;
      window.sets.push([name, value]);
      fire(name);
    },
    save_changes: () => {},
    on: (event, f) => (handlers[event] ??= []).push(f),
    off: (event, f) => { handlers[event] = (handlers[event] || []).filter((g) => g !== f); },
    send: (content) => window.sent.push(content),
  };
  window.sets = [];
  window.sent = [];
  // a custom message from the kernel, its one buffer given as text
  window.message = (content, text) => (handlers["msg:custom"] || []).forEach((f) =>
    f(content, [new DataView(new TextEncoder().encode(text).buffer)]));
  // what the Python side syncs back, as the widget manager would: values, then change events
  window.push = (changes) => {
    Object.assign(model.state, changes);
    Object.keys(changes).forEach(fire);
  };
  const el = document.createElement("div");
  el.style.width = width + "px";
  document.body.style.margin = "8px";
  document.body.append(el);
  view.default.render({model, el});
  await new Promise((done) => requestAnimationFrame(done));
}"""
ANSWER = (
    "The retry wrapper swallows the timeout and returns an empty body, so the caller reads "
    "an empty list as no payments due. Surface the timeout as an error. Retry at most three "
    "times with jitter, and log the request id with each attempt so on-call can trace it."
)


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    if CHROMIUM is None:
        pytest.fail(NO_CHROMIUM)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


def state(tree: Any) -> dict[str, Any]:
    return {name: getattr(tree, name) for name in (*SYNCED, *SYNCED_TOO)}


def mount(page: Page, tree: Any, width: int = 1200) -> None:
    page.set_content("<!doctype html><html><body></body></html>")
    page.evaluate(MOUNT, {"esm": tree._esm, "css": tree._css, "state": state(tree), "width": width})


def select(page: Page, tree: Any, run_id: str) -> None:
    """Click a run's row, then sync the tree's answer back, as the kernel would."""
    page.locator(f'.kx-node[data-run-id="{run_id}"]').click()
    assert page.evaluate("window.sets.at(-1)") == ["selected", run_id]
    tree.select(run_id)
    page.evaluate("changes => window.push(changes)", state(tree))


def twenty_branches() -> tuple[Any, dict[str, float]]:
    """A source run and 20 forks at its "answer" step, each with long params and a
    multi-sentence answer, forks of forks to depth 2, one fork edited; and a score per fork."""
    storage = MemoryStorage()

    @kassette(storage=storage, version="triage-v1")
    def triage(ctx: Any, ticket: str) -> Any:
        temperature = ctx.params.get("temperature", 0.0)
        plan = ctx.step("plan", lambda: {"ticket": ticket, "steps": ["read", "reproduce", "fix"]})
        answer = ctx.step(
            "answer",
            lambda: {
                "model": "gpt-4o-mini",
                "content": f"{ANSWER} (temperature {temperature})",
                "usage": {"prompt_tokens": 912, "completion_tokens": 88},
            },
        )
        for check in range(14):  # a long run: its entries scroll
            ctx.step(f"check-{check}", lambda check=check: {"check": check, "ok": True})
        return {"plan": plan, "answer": answer}

    triage.start("INC-4821: nightly payments job returns an empty list", run_id="task")
    scores = {}
    for branch in range(20):
        params = {
            "temperature": round(0.05 * branch, 2),
            "system_prompt": "You are a careful on-call engineer. Cite the log line you rely on.",
        }
        source = "task" if branch < 10 else f"task-b{branch - 10:02d}"
        run_id = f"task-b{branch:02d}"
        triage.fork(source, step="answer", new_run_id=run_id, params=params)
        scores[run_id] = branch / 19
    triage.fork("task", step="answer", new_run_id="task-edited", result={"content": ANSWER})
    return kx.load(storage), scores


def test_cut_labels_end_in_an_ellipsis_and_show_whole_in_a_tooltip(
    page: Page, tmp_path: Path
) -> None:
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, selected="task-b15")
    mount(page, tree)
    row = page.locator('.kx-node[data-run-id="task-b15"]')  # depth 2: the most indented
    note = row.locator(".kx-note")
    cut = note.evaluate(
        "n => [n.scrollWidth > n.clientWidth, getComputedStyle(n).textOverflow,"
        " n.getBoundingClientRect().right <= n.closest('.kx-forest').getBoundingClientRect().right]"
    )
    assert cut == [True, "ellipsis", True]  # cut, with an ellipsis, inside the tree's box
    title = row.get_attribute("title") or ""
    assert tree.nodes["task-b15"].params in title and tree.nodes["task-b15"].label in title
    assert "completed" in title
    page.screenshot(path=tmp_path / "tree-20-branches-clipped.png")
    print(f"screenshots: {tmp_path}")


def test_the_edited_entry_is_marked_in_the_entries_table(page: Page) -> None:
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, selected="task")
    mount(page, tree)
    select(page, tree, "task-edited")
    marked = page.locator(".kx-entries tbody tr.kx-edited-row")
    assert marked.count() == 1
    edited = [entry for entry in tree.entries if entry["edited"]]
    assert len(edited) == 1
    assert marked.locator("td").first.inner_text() == str(edited[0]["offset"])
    assert "✎ edited" in marked.inner_text()
    assert "edited" in (marked.get_attribute("title") or "")
    shade = marked.locator("td").nth(2).evaluate("td => getComputedStyle(td).backgroundColor")
    plain = page.locator(".kx-entries tbody tr:not(.kx-edited-row) td").nth(2)
    assert shade != plain.evaluate("td => getComputedStyle(td).backgroundColor")


def test_the_details_panel_starts_at_its_top_for_another_run(page: Page) -> None:
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, selected="task-b03")
    mount(page, tree)
    details = page.locator(".kx-details")
    details.evaluate("d => { d.scrollTop = d.scrollHeight; }")
    assert details.evaluate("d => d.scrollTop") > 100  # the long run scrolled to its end
    page.locator(".kx-search").fill("b07")  # a search, then a click on what it found
    page.wait_for_function("document.querySelector('.kx-count').textContent.startsWith('1 of')")
    select(page, tree, "task-b07")
    assert page.locator(".kx-details p b").first.inner_text() == "task-b07"
    assert details.evaluate("d => d.scrollTop") == 0
    # with no model call open, the panel holds the title, facts and entries: no stray text
    # (an absent conversation once appended as the word "null")
    bare = "d => [...d.childNodes].filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.data)"
    assert details.evaluate(bare) == []
    details.evaluate("d => { d.scrollTop = 200; }")
    page.evaluate("changes => window.push(changes)", {"message": "resumed"})  # same run
    assert details.evaluate("d => d.scrollTop") == 200  # a redraw of the same run keeps it


# Where each value cell's lines start: for every line after the first, the text just before
# it (the last 12 characters of the line above).
LINE_BREAKS = """cells => cells.flatMap((cell) => {
  const chars = []; // [character, its top, or null when it has no box (a space at a line end)]
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.classList.contains("kx-more")) continue;
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const box = range.getBoundingClientRect();
      chars.push([node.data[i], box.width > 0 ? box.top : null]);
    }
  }
  const breaks = [];
  let top = null;
  for (let i = 0; i < chars.length; i++) {
    if (chars[i][1] === null) continue;
    if (top !== null && chars[i][1] > top + 2) {
      const before = chars.slice(Math.max(0, i - 12), i).map((c) => c[0]).join("");
      breaks.push(before + "|" + chars[i][0]);
    }
    top = chars[i][1];
  }
  return breaks;
})"""


def test_values_wrap_between_json_tokens(page: Page) -> None:
    """At a narrow width (the value column ~180 px) a line ends after `,` `:` `{` `[` or a
    space, never inside a key, a number or a word."""
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, selected="task-b04")
    mount(page, tree, width=1000)
    cells = page.locator(".kx-entries td.kx-value")
    width = cells.first.evaluate("td => td.clientWidth")
    assert width < 260, width
    breaks = cells.evaluate_all(LINE_BREAKS)
    assert len(breaks) > 10  # the values do wrap here
    bad = [line for line in breaks if line.split("|")[0][-1] not in ',:{[ "']
    assert not bad, bad
    values = [json.loads(entry["value"]) for entry in tree.entries if len(entry["value"]) < 120]
    assert values  # short values are whole JSON, drawn with their breaks


def test_a_long_value_unfolds_as_the_comparison_shows_values(page: Page) -> None:
    """A value longer than `FOLDED` is folded; a click shows the text Python's `pretty_json`
    made of it (the one pretty JSON, the comparison's too); a short value is sent whole."""
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, selected="task-b04")
    short = [entry for entry in tree.entries if len(entry["value"] or "") <= FOLDED]
    assert short and all(entry["full"] is None for entry in short)
    answer = next(entry for entry in tree.entries if entry["id"] == "answer")
    assert len(answer["value"]) > FOLDED
    assert answer["full"] == pretty_json(json.loads(answer["value"]))
    assert '\n  "result": {\n    "model": "gpt-4o-mini",\n    "content": ' in answer["full"]
    mount(page, tree)
    row = page.locator(".kx-entries tbody tr", has_text="answer")
    assert row.locator(".kx-full").count() == 0
    row.locator(".kx-long").click()
    assert row.locator(".kx-full").inner_text() == answer["full"]


def test_numbers_colour_in_distinct_bins_with_readable_labels(page: Page, tmp_path: Path) -> None:
    journals, scores = twenty_branches()
    tree = kx.RunTree(journals, color_by=scores, selected="task-b19")
    mount(page, tree)
    drawn = page.locator(".kx-node").evaluate_all(
        "rows => rows.map(row => { const pill = row.querySelector('.kx-pill');"
        " const style = getComputedStyle(pill); return [row.dataset.runId, style.backgroundColor,"
        " style.color]; })"
    )
    rgb = {f"rgb({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)})": c for c in SCALE}
    bins = {rgb[background] for run_id, background, _ in drawn if run_id.startswith("task-b")}
    assert bins == set(SCALE)  # 20 scores from 0 to 1 use every bin
    for run_id, background, ink in drawn:  # every label readable: WCAG AA's 4.5:1
        assert contrast(background, ink) >= 4.5, (run_id, background, ink)
    assert any(ink == "rgb(17, 17, 17)" for *_, ink in drawn)  # dark on the light bins
    page.screenshot(path=tmp_path / "tree-20-branches-by-score.png")
    print(f"screenshots: {tmp_path}")


def contrast(first: str, second: str) -> float:
    """WCAG's contrast ratio of two CSS `rgb(r, g, b)` colours."""

    def luminance(color: str) -> float:
        channels = [int(part) / 255 for part in color[4:-1].split(",")]
        r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05

    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return high / low


def shown(page: Page) -> list[str]:
    """The runs the filter matched (not the ancestors kept as context)."""
    nodes = page.locator(".kx-node:not(.kx-context)")
    return [nodes.nth(i).get_attribute("data-run-id") or "" for i in range(nodes.count())]


def test_the_search_filters_on_numbers_and_names_an_unknown_one(page: Page, tmp_path: Path) -> None:
    """`temperature>0.7`, `temperature >= 0.5 b1`, `temperature<0.2 temperature!=0.1 steps=16`:
    the runs whose numbers pass, as the kernel's columns say; a name with no number says which
    names there are."""
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, selected="task")
    mount(page, tree)
    numbers, ids = tree.forest["numbers"], tree.forest["id"]
    search, count = page.locator(".kx-search"), page.locator(".kx-count")
    for query, test in [
        ("temperature>0.7", lambda i: (numbers["temperature"][i] or 0) > 0.7),
        ("temperature >= 0.5 b1", lambda i: (numbers["temperature"][i] or 0) >= 0.5),
        ("temperature<0.2 temperature!=0.1 steps=16", lambda i: numbers["steps"][i] == 16
         and numbers["temperature"][i] is not None and numbers["temperature"][i] not in (0.1,)
         and numbers["temperature"][i] < 0.2),
    ]:  # fmt: skip
        search.fill(query)
        wanted = [run_id for i, run_id in enumerate(ids) if test(i)]
        if " b1" in query:
            wanted = [run_id for run_id in wanted if "b1" in run_id]
        assert 0 < len(wanted) < len(ids), query
        expect(count).to_have_text(f"{len(wanted)} of {len(ids)} runs")
        assert shown(page) == wanted, query
    loose = (
        "() => [...document.querySelector('.kx-details').childNodes].filter(n => n.nodeType === 3)"
    )
    assert page.evaluate(f"{loose}.map(n => n.textContent)") == []  # no stray "null" text
    search.fill("temperature>0.7")
    expect(count).to_have_text("5 of 22 runs")  # 0.75, 0.8, 0.85, 0.9, 0.95
    page.screenshot(path=tmp_path / "tree-search-temperature.png")
    search.fill("temprature>1")
    expect(count).to_contain_text('0 of 22 runs (no number "temprature": cost_usd')
    expect(count).to_contain_text("temperature")
    print(f"screenshots: {tmp_path}")


def test_a_forest_too_large_to_save_is_asked_of_the_kernel(page: Page, tmp_path: Path) -> None:
    storage = MemoryStorage()
    for number in range(2_000):
        line = b'{"type":"start","session":1,"offset":0,"params":{"temperature":%d}}\n' % (
            number % 3
        )
        storage.append(f"run-{number:04d}", line, token=None)
    tree = kx.RunTree(kx.load(storage))
    assert tree._forest == "" and tree._forest_runs == 2_000  # not in the saved state
    mount(page, tree)
    expect(page.locator(".kx-count")).to_contain_text("2,000 runs: loading from the kernel")
    assert page.evaluate("window.sent") == [{"kind": "forest", "id": tree._forest_id}]
    replies: list[tuple[Any, Any]] = []
    tree.send = lambda content, buffers=None: replies.append((content, buffers))  # type: ignore[method-assign]
    tree._message(tree, page.evaluate("window.sent[0]"))
    ((content, buffers),) = replies
    page.evaluate("([c, text]) => window.message(c, text)", [content, buffers[0].decode()])
    expect(page.locator(".kx-count")).to_have_text("2,000 runs")
    expect(page.locator('.kx-node[data-run-id="run-0000"]')).to_have_class(
        re.compile("kx-selected")
    )
    page.locator(".kx-search").fill("temperature=2")
    expect(page.locator(".kx-count")).to_have_text("666 of 2,000 runs")
    page.screenshot(path=tmp_path / "tree-2000-from-the-kernel.png")


def test_follow_newest_is_a_box_and_a_click_on_a_run_unticks_it(page: Page) -> None:
    journals, _ = twenty_branches()
    tree = kx.RunTree(journals, follow=True)
    assert tree.selected == "task-edited"  # the run that started last
    mount(page, tree)
    box = page.locator(".kx-follow input")
    expect(box).to_be_checked()
    page.locator('.kx-node[data-run-id="task-b03"]').click()
    assert page.evaluate("window.sets.slice(-2)") == [["follow", False], ["selected", "task-b03"]]
    expect(box).not_to_be_checked()
    box.check()
    assert page.evaluate("window.sets.at(-1)") == ["follow", True]
