"""kassette._lineage: the fork forest built from each run's source, and its text tree."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from kassette._lineage import RunNode, build_forest, creation_order, draw_tree, tree_lines


def run(
    run_id: str, parent: str | None = None, offset: int | None = None, *, steps: int = 0
) -> RunNode:
    return RunNode(run_id, "completed", parent, offset, steps)


def text(roots: tuple[RunNode, ...]) -> str:
    return draw_tree(roots, lambda node: node.run_id)


def test_forks_hang_under_their_source() -> None:
    roots = build_forest(
        [run("root", steps=3), run("fork", "root", 2, steps=1), run("refork", "fork", 1)]
    )
    (root,) = roots
    (fork,) = root.children
    (refork,) = fork.children
    assert (root.parent_run_id, root.fork_offset, root.steps) == (None, None, 3)
    assert (fork.run_id, fork.parent_run_id, fork.fork_offset, fork.steps) == ("fork", "root", 2, 1)
    assert (refork.parent_run_id, refork.children) == ("fork", ())
    assert text(roots) == "root\n└── fork\n    └── refork\n"


def test_children_are_ordered_by_fork_offset_then_run_id() -> None:
    roots = build_forest(
        [
            run("late", "root", 3),
            run("b", "root", 1),
            run("root"),
            run("a", "root", 1),
            run("no-offset", "root"),  # only a hand-edited journal lacks one: it comes first
            run("under-b", "b", 0),
        ]
    )
    assert text(roots).splitlines() == [
        "root",
        "├── no-offset",
        "├── a",
        "├── b",
        "│   └── under-b",
        "└── late",
    ]


def test_roots_keep_the_listing_order() -> None:
    roots = build_forest([run("z"), run("m"), run("fork", "z", 1), run("a")])
    assert [root.run_id for root in roots] == ["z", "m", "a"]


def test_a_fork_whose_source_is_missing_is_a_root_that_keeps_its_link() -> None:
    roots = build_forest([run("orphan", "gone", 4), run("child", "orphan", 0)])
    (orphan,) = roots
    assert (orphan.parent_run_id, orphan.fork_offset) == ("gone", 4)
    assert [child.run_id for child in orphan.children] == ["child"]


def test_a_corrupt_run_has_no_source_and_its_forks_still_hang_under_it() -> None:
    corrupt = RunNode("bad", "corrupt", None, None, 0)
    roots = build_forest([run("ok"), corrupt, run("fork", "bad", 1)])
    assert text(roots) == "ok\nbad\n└── fork\n"
    assert roots[1].status == "corrupt"


def test_a_cycle_of_sources_is_cut_at_its_first_listed_run() -> None:
    roots = build_forest([run("plain"), run("a", "b", 5), run("b", "a", 0), run("c", "b", 1)])
    assert [root.run_id for root in roots] == ["plain", "a"]
    # b's source link back to a is not drawn, so c is b's last child
    assert text(roots) == "plain\na\n└── b\n    └── c\n"
    assert roots[1].parent_run_id == "b"


def test_a_run_that_names_itself_as_source_is_a_root() -> None:
    roots = build_forest([run("self", "self", 0), run("fork", "self", 1)])
    (root,) = roots
    assert root.parent_run_id == "self"
    assert [child.run_id for child in root.children] == ["fork"]


def test_tree_lines_give_the_prefix_of_every_node_in_display_order() -> None:
    roots = build_forest([run("r"), run("x", "r", 1), run("y", "r", 2), run("x1", "x", 0)])
    assert [(lead, node.run_id) for lead, node in tree_lines(roots)] == [
        ("", "r"),
        ("├── ", "x"),
        ("│   └── ", "x1"),
        ("└── ", "y"),
    ]


def test_an_empty_forest_draws_nothing() -> None:
    assert build_forest([]) == () and text(()) == ""


def test_a_long_chain_of_forks_needs_no_recursion() -> None:
    depth = 5000
    chain = [run("r0")] + [run(f"r{i}", f"r{i - 1}", i) for i in range(1, depth)]
    roots = build_forest(reversed(chain))
    drawn = text(roots).splitlines()
    assert len(drawn) == depth
    assert drawn[-1] == " " * 4 * (depth - 2) + f"└── r{depth - 1}"


def test_label_says_status_offset_and_steps() -> None:
    assert run("r", steps=1).label == "r (completed, 1 step)"
    assert run("f", "r", 2, steps=3).label == "f (completed, from offset 2, 3 steps)"


@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.one_of(st.none(), st.integers(0, 12)), st.integers(0, 3)),
        max_size=10,
        unique_by=lambda item: item[0],
    )
)
def test_every_run_is_drawn_once_under_its_source(links: list[tuple[int, int | None, int]]) -> None:
    """Any sources at all, missing ones (10-12) and cycles included."""
    runs = [
        run(f"r{number}", None if parent is None else f"r{parent}", offset)
        for number, parent, offset in links
    ]
    roots = build_forest(runs)
    nodes = [node for _, node in tree_lines(roots)]
    assert sorted(node.run_id for node in nodes) == sorted(node.run_id for node in runs)
    for node in nodes:
        assert all(child.parent_run_id == node.run_id for child in node.children)
        order = [(child.fork_offset, child.run_id) for child in node.children]
        assert order == sorted(order)


def test_runs_are_ordered_by_creation_time_not_by_id() -> None:
    created = {"a-fork": 3.0, "b-root": 2.0, "z-root": 1.0}
    parents = {"a-fork": "z-root"}
    assert creation_order(created, parents) == ["z-root", "b-root", "a-fork"]


def test_a_fork_created_in_the_same_millisecond_follows_its_source() -> None:
    """Ties are broken by fork depth, then run id, whatever the ids."""
    created = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    parents = {"a": "b", "b": "c", "d": "c"}  # c <- b <- a, c <- d
    assert creation_order(created, parents) == ["c", "b", "d", "a"]


def test_branches_created_together_are_ordered_by_their_numbers() -> None:
    """A fan-out's branches share their source's start time: `root.draft.2` comes before
    `root.draft.10`, as a researcher counts them, not as text sorts them."""
    branches = [f"root.draft.{index}" for index in range(12)]
    created = dict.fromkeys(["root", *reversed(branches), "root.draft.02", "x9", "x10y"], 1.0)
    parents = dict.fromkeys(branches, "root")
    assert creation_order(created, parents) == [
        "root",
        "root.draft.02",  # not a fork here: a root, so before the forks
        "x9",
        "x10y",
        *branches,
    ]
    (root,) = build_forest([run("root"), *(run(b, "root", 2) for b in reversed(branches))])
    assert [child.run_id for child in root.children] == branches  # siblings too


def _numbers_as_numbers(run_id: str) -> list[tuple[str, int]]:
    """The order `creation_order` promises, spelled out: (text, the number after it) pairs,
    the last text followed by -1, so a run id that starts another comes first."""
    parts = re.split(r"(\d+)", run_id)
    return list(zip(parts[0::2], [*map(int, parts[1::2]), -1], strict=True))


@given(st.lists(st.text(alphabet="ab.-0129", max_size=8), unique=True, max_size=30))
def test_runs_created_together_are_ordered_by_their_run_ids_numbers(run_ids: list[str]) -> None:
    created = dict.fromkeys(run_ids, 1.0)
    expected = sorted(run_ids, key=lambda run_id: (_numbers_as_numbers(run_id), run_id))
    assert creation_order(created, {}) == expected


def test_unknown_times_come_last() -> None:
    created = {"corrupt": None, "later": 2.0, "epoch": 0.0}
    assert creation_order(created, {}) == ["epoch", "later", "corrupt"]


def test_a_fork_of_a_missing_run_or_a_cycle_of_sources_still_orders() -> None:
    created = dict.fromkeys(["orphan", "root", "x", "y"], 1.0)
    parents = {"orphan": "gone", "x": "y", "y": "x"}
    # x is walked into first: it counts as a fork of a missing run, and y as its fork
    assert creation_order(created, parents) == ["root", "orphan", "x", "y"]
    parents = {"orphan": "gone", "x": "y", "y": "root", "root": "x"}  # root <- y <- x <- root
    assert creation_order(created, parents) == ["orphan", "root", "y", "x"]
