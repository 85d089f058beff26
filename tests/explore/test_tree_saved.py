"""RunTree's saved state stays small at 10,000 runs; its search's numbers; following the newest.

A notebook saves each widget's state and text form: the forest of 10,000 runs (over a megabyte
of JSON, half a megabyte of lineage text) goes to the browser over the comm instead, when the
browser asks for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from many_runs import write_runs
from test_frames import waited_journal

from kassette import LocalStorage, MemoryStorage, kassette
from kassette import explore as kx
from kassette.explore._widgets._tree_data import SAVED_FOREST, TEXT_RUNS

SAVED_LIMIT = 100_000  # bytes a view may leave in a notebook


def saved_size(widget: Any) -> int:
    """What a notebook keeps of a widget: its state (as the widget manager saves it) and its
    output's mimebundle (the view reference and the text form)."""
    state = widget.get_state()
    bundle = widget._repr_mimebundle_()
    return len(json.dumps(state, default=str)) + len(json.dumps(bundle))


def test_a_tree_of_10000_runs_saves_under_100_kb_and_sends_its_forest_on_request(
    tmp_path: Path,
) -> None:
    write_runs(tmp_path / "runs", 10_000)
    tree = kx.RunTree(kx.load(LocalStorage(tmp_path / "runs")))
    size = saved_size(tree)
    print(f"\n10,000-run RunTree: {size:,} bytes saved (forest sent: {len(tree._forest_text):,})")
    assert size < SAVED_LIMIT
    assert tree._forest == "" and tree._forest_runs == 10_000
    text = repr(tree)
    assert text.startswith("RunTree: 10000 runs, selected run-00000\n")
    assert len(text.splitlines()) == 1 + TEXT_RUNS + 1 and "more lines" in text
    sent: list[tuple[Any, Any]] = []
    tree.send = lambda content, buffers=None: sent.append((content, buffers))  # type: ignore[method-assign]
    tree._message(tree, {"kind": "forest", "id": tree._forest_id})
    ((content, buffers),) = sent
    assert content == {"kind": "forest", "id": tree._forest_id}
    forest = json.loads(buffers[0].decode())
    assert forest["id"] == tree.forest["id"] and len(forest["id"]) == 10_000
    assert len(forest["numbers"]["temperature"]) == 10_000


def test_a_small_tree_keeps_its_forest_in_the_saved_state() -> None:
    """A saved notebook shows a small tree without a kernel: its forest is in the state."""
    storage = MemoryStorage()
    storage.append("waited", waited_journal(), token=None)
    tree = kx.RunTree(kx.load(storage))
    assert 0 < len(tree._forest) <= SAVED_FOREST
    assert json.loads(tree._forest)["id"] == ["waited"]
    assert repr(tree) == "RunTree: 1 run, selected waited\nwaited (completed, 2 steps)"


def test_the_search_numbers_are_the_runs_numeric_columns_and_params() -> None:
    storage = MemoryStorage()
    storage.append("waited", waited_journal(), token=None)

    @kassette(storage=storage)
    def agent(ctx: Any, _: Any) -> Any:
        return ctx.step("draft", lambda: ctx.params.get("temperature"))

    agent.start(None, run_id="plain")
    agent.fork("plain", step="draft", new_run_id="hot", params={"temperature": 1.2, "model": "x"})
    tree = kx.RunTree(kx.load(storage))
    numbers = tree.forest["numbers"]
    at = {run_id: number for number, run_id in enumerate(tree.forest["id"])}
    assert numbers["temperature"][at["hot"]] == 1.2 and numbers["temperature"][at["plain"]] is None
    assert "model" not in numbers  # not a number
    assert numbers["working_s"][at["waited"]] == 4.5 and numbers["waiting_s"][at["waited"]] == 60
    assert numbers["steps"][at["waited"]] == 2 and numbers["cost_usd"][at["waited"]] == 0


def test_a_live_tree_follows_the_newest_run_until_a_run_is_picked() -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def agent(ctx: Any, _: Any) -> Any:
        return ctx.step("draft", lambda: 1)

    agent.start(None, run_id="first")
    agent.start(None, run_id="second")
    tree = kx.RunTree(kx.load(storage), selected="first", follow=True)
    assert tree.selected == "second"  # following: the newest, whatever was asked
    agent.fork("first", step="draft", new_run_id="first-fork")
    tree.refresh()
    assert tree.selected == "first-fork"  # a fork of an old run is the newest run
    tree.follow = False
    tree.select("first")
    agent.start(None, run_id="third")
    tree.refresh()
    assert tree.selected == "first" and "third" in tree.nodes
    tree.follow = True  # ticking the box jumps to the newest at once
    assert tree.selected == "third"
