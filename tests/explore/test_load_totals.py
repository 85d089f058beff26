"""`kx.load` leaves the runs' model-call totals (`llm_calls`, tokens, `cost_usd`) to the first
reader of the runs table (issue 29): whoever reads them, after a refresh or a subset too,
gets the totals a full read gives."""

from __future__ import annotations

import pytest

from kassette import MemoryStorage
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from tests.explore.test_llm_calls import chat, journal, step

USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
COLUMNS = ["run_id", "llm_calls", "input_tokens", "output_tokens", "cost_usd"]


def store() -> MemoryStorage:
    storage = MemoryStorage()
    for run, calls in (("one", 1), ("two", 2)):
        steps = [step(f"c{n}", chat("x", "gpt-4o-mini", USAGE)) for n in range(calls)]
        storage.append(run, journal(steps), token=None)
    return storage


def totals(journals: kx.Journals) -> list[dict[str, object]]:
    return journals.to_arrow("runs").select(COLUMNS).sort_by("run_id").to_pylist()


def test_the_runs_table_has_the_totals_a_full_read_gives() -> None:
    journals = kx.load(store())
    rows = totals(journals)
    assert [(r["llm_calls"], r["input_tokens"], r["output_tokens"]) for r in rows] == [
        (1, 100, 10),
        (2, 200, 20),
    ]
    assert rows[1]["cost_usd"] == pytest.approx(2 * rows[0]["cost_usd"])
    assert journals.runs.set_index("run_id").loc["two", "llm_calls"] == 2


@pytest.mark.parametrize("read_first", [False, True])
def test_a_refresh_and_a_subset_keep_the_totals_right(read_first: bool) -> None:
    storage = store()
    journals = kx.load(storage)
    if read_first:
        totals(journals)
    snapshot = storage.read("one")
    assert snapshot is not None
    line = {"type": "step", "session": 1, "offset": 2, "timestamp": format_timestamp(1.8e9),
            **step("again", chat("y", "gpt-4o-mini", USAGE))}  # fmt: skip
    storage.append("one", encode(line), token=snapshot.token)
    refreshed = journals.refresh()
    assert [r["llm_calls"] for r in totals(refreshed)] == [2, 2]
    assert [r["input_tokens"] for r in totals(refreshed.subset(["one"]))] == [200]
    assert totals(refreshed) == totals(kx.load(storage))
