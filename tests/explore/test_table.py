"""`Journals` in a notebook cell: one line per run, long values cut, long tables cut."""

from __future__ import annotations

import html
import json
import re

import pandas as pd
import pytest
from IPython.lib.pretty import pretty

from kassette import MemoryStorage, kassette
from kassette import explore as kx

ANSWER = "The export stopped because the credentials were rotated on Tuesday.\nSorry! " * 4


def support_runs(count: int) -> kx.Journals:
    """`count` runs whose input and result are long JSON (with a newline in the text)."""
    storage = MemoryStorage()

    @kassette(storage=storage, version="support-v1")
    def support(ctx, ticket):
        reply = ctx.step("draft", lambda: ANSWER)
        return {"reply": reply, "ticket": ticket}

    for number in range(count):
        support.start({"number": number, "question": ANSWER}, run_id=f"ticket-{number:05d}")
    return kx.load(storage)


CELL = r"<td style='white-space:nowrap'(?: title='([^']*)')?>(.*?)</td>"


def rows(page: str) -> list[list[tuple[str | None, str]]]:
    """The body rows of the page's table, each cell as (its title or None, its text)."""
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [
        [
            (html.unescape(title) if title else None, html.unescape(text))
            for title, text in re.findall(CELL, row)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


def test_22_runs_are_22_lines_with_json_cut_and_whole_on_hover() -> None:
    journals = support_runs(22)
    page = journals._repr_html_()
    shown = rows(page)
    assert [row[0][1] for row in shown] == journals.run_ids  # every run, in order
    columns = list(journals.runs.columns)
    result = journals.runs.set_index("run_id").loc["ticket-00003", "result"]
    title, text = shown[3][columns.index("result")]
    assert title == result  # the whole JSON on hover
    assert json.loads(title)["reply"] == ANSWER
    assert text.endswith("\u2026") and len(text) <= 24 and result.startswith(text[:-1])
    assert "\n" not in text and "<br" not in page  # one line per run
    assert "style='white-space:nowrap'" in page
    for row in shown:
        for title, text in row:  # a short cell keeps its text and has no title
            assert title is None or len(text) < len(title)
            assert len(text) <= 32
    assert shown[0][0] == (None, "ticket-00000")
    assert "rows \u00d7" not in page  # nothing left out, so no count


def test_a_long_table_shows_its_first_and_last_runs_and_a_count() -> None:
    journals = support_runs(70)  # over pandas' display.max_rows (60)
    page = journals._repr_html_()
    shown = rows(page)
    fewest = pd.get_option("display.min_rows")
    assert len(shown) == fewest + 1  # the first and last 5, and a row of ellipses
    names = [row[0][1] for row in shown]
    assert names[: fewest // 2] == journals.run_ids[: fewest // 2]
    assert names[-(fewest // 2) :] == journals.run_ids[-(fewest // 2) :]
    assert set(text for _, text in shown[fewest // 2]) == {"\u22ee"}
    assert f"<p>70 rows \u00d7 {len(journals.runs.columns)} columns</p>" in page
    with pd.option_context("display.max_rows", 100):  # pandas' options decide, as for a frame
        assert len(rows(journals._repr_html_())) == 70


def test_the_text_repr_is_the_same_table_as_lines() -> None:
    journals = support_runs(70)
    text = pretty(journals)
    lines = text.splitlines()
    assert lines[0] == repr(journals)  # the summary line first, as repr gives it
    assert lines[1].split()[:3] == ["run_id", "status", "version"]
    fewest = pd.get_option("display.min_rows")
    assert len(lines) == 2 + fewest + 1 + 1  # title, header, rows and ellipses, the count
    assert lines[2].startswith("ticket-00000 ") and lines[-2].startswith("ticket-00069 ")
    assert lines[-1] == f"70 rows \u00d7 {len(journals.runs.columns)} columns"
    first = rows(journals._repr_html_())[0]
    assert lines[2].split() == " ".join(text for _, text in first).split()  # cut as in HTML
    assert "\u2026" in lines[2]
    assert ANSWER.splitlines()[1] not in text  # the whole value is not printed
    widths = {len(line) for line in lines[1:-1]}
    assert max(widths) - min(widths) <= 32  # aligned columns (the last one's width varies)


@pytest.mark.parametrize("count", [0, 1])
def test_an_empty_or_tiny_store(count: int) -> None:
    journals = support_runs(count)
    assert len(rows(journals._repr_html_())) == count
    assert pretty(journals).splitlines()[0] == repr(journals)
