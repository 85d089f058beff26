"""kx.lineage: the fork forest as data, as a text tree and as HTML."""

from __future__ import annotations

import pytest
from conftest import Scenario

from kassette import MemoryStorage, RunNotFoundError
from kassette import explore as kx
from kassette._journal import encode
from kassette._lineage import build_forest
from kassette.explore import RunNode


def test_forest_structure(scenario: Scenario) -> None:
    forest = kx.lineage(kx.load(scenario.storage))
    # oldest first, not in run id order
    assert [root.run_id for root in forest.roots] == [
        "single",
        "failed",
        "suspended",
        "resumed",
        "canceled",
        "parallel",
        "retried",
    ]
    single = forest["single"]
    assert [child.run_id for child in single.children] == ["forked"]
    forked = single.children[0]
    assert (forked.parent_run_id, forked.fork_offset, forked.status) == ("single", 2, "completed")
    assert [child.run_id for child in forked.children] == ["refork"]
    assert forest.parent("refork") == forked and forest.parent("single") is None
    assert forest.root("refork").run_id == "single"
    assert forest.depth("refork") == 2 and forest.depth("single") == 0
    assert len(forest) == 9 and "refork" in forest and "nope" not in forest
    assert [node.run_id for node in forest] == [
        "single",
        "forked",
        "refork",
        "failed",
        "suspended",
        "resumed",
        "canceled",
        "parallel",
        "retried",
    ]
    with pytest.raises(RunNotFoundError):
        forest["nope"]


def test_text_tree(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage, run_ids=["single", "forked", "refork", "failed"])
    assert str(kx.lineage(journals)) == (
        "single (completed, 2 steps)\n"
        "└── forked (completed, from offset 2, 2 steps)\n"
        "    └── refork (completed, from offset 4, 2 steps)\n"
        "failed (failed, 2 steps)\n"
    )
    assert repr(kx.lineage(journals)) == str(kx.lineage(journals)).rstrip("\n")


def test_siblings_are_ordered_by_fork_offset_then_id(scenario: Scenario) -> None:
    scenario.workflow.fork("single", step="plan", new_run_id="b-plan")
    scenario.workflow.fork("single", step="plan", new_run_id="a-plan")
    journals = kx.load(scenario.storage, run_ids=["single", "forked", "b-plan", "a-plan"])
    assert str(kx.lineage(journals)) == (
        "single (completed, 2 steps)\n"
        "├── a-plan (completed, from offset 1, 2 steps)\n"
        "├── b-plan (completed, from offset 1, 2 steps)\n"
        "└── forked (completed, from offset 2, 2 steps)\n"
    )


def test_a_fork_whose_source_is_not_loaded_is_a_root(scenario: Scenario) -> None:
    journals = kx.load(scenario.storage, run_ids=["refork"])
    forest = kx.lineage(journals)
    (root,) = forest.roots
    assert root.parent_run_id == "forked" and forest.parent("refork") is None
    assert str(forest) == (
        "refork (completed, from offset 4, 2 steps; fork of forked, not loaded)\n"
    )


def test_a_cycle_of_sources_still_shows_every_run() -> None:
    """Only a hand-edited journal can make one; the tree must not loop or drop runs."""
    storage = MemoryStorage()
    for run_id, parent in (("a", "b"), ("b", "a")):
        start = {
            "type": "start",
            "session": 1,
            "offset": 0,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "source": {"runId": parent, "fromOffset": 0},
        }
        storage.append(run_id, encode(start), token=None)
    forest = kx.lineage(kx.load(storage))
    assert sorted(node.run_id for node in forest) == ["a", "b"]
    assert str(forest) == (
        "a (running, from offset 0, 0 steps; fork of b, a cycle of sources)\n"
        "└── b (running, from offset 0, 0 steps)\n"
    )


def test_html(scenario: Scenario) -> None:
    page = kx.lineage(kx.load(scenario.storage))._repr_html_()
    assert page.count("<li>") == 9
    assert "#c62828" in page and "#2e7d32" in page  # failed red, completed green
    assert "from offset 2" in page


def test_empty() -> None:
    forest = kx.lineage(kx.load(MemoryStorage()))
    assert forest.roots == () and str(forest) == "" and repr(forest) == "<empty lineage>"


def test_a_long_chain_of_forks_renders_as_html() -> None:
    chain = [RunNode("r0", "completed", None, None, 1)] + [
        RunNode(f"r{i}", "completed", f"r{i - 1}", i, 1) for i in range(1, 3000)
    ]
    page = kx.Lineage(build_forest(chain))._repr_html_()
    assert page.count("<li>") == page.count("</li>") == 3000
    assert page.count("<ul ") == page.count("</ul>") == 3000
