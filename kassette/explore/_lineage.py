"""Lineage: the fork forest of a set of runs, as plain data that prints as a tree.

A fork's first session writes a `start` entry whose `source` names the run it was forked
from and the offset it was cut at; that link makes every run a node whose parent is its
source. Runs that are not forks (or whose source is not loaded) are roots. Siblings are
ordered by fork offset, then run id, like `kassette tree`: both build and draw the forest
with `kassette._lineage`; this module adds lookups, the "not loaded" notes and HTML.
"""

from __future__ import annotations

import html
from collections.abc import Iterator

from kassette._lineage import RunNode, build_forest, draw_tree, tree_lines
from kassette.errors import RunNotFoundError
from kassette.explore._frames import Journals

__all__ = ["STATUS_COLORS", "Lineage", "RunNode", "lineage"]

STATUS_COLORS = {
    "completed": "#2e7d32",
    "failed": "#c62828",
    "canceled": "#757575",
    "suspended": "#ef6c00",
    "running": "#1565c0",
}


class Lineage:
    """The fork forest of the runs in a `Journals`: `roots`, lookup by run id, a text tree."""

    def __init__(self, roots: tuple[RunNode, ...]) -> None:
        self.roots = roots
        self._nodes = {node.run_id: node for _, node in tree_lines(roots)}
        self._parents = {
            child.run_id: node.run_id for node in self._nodes.values() for child in node.children
        }

    def __iter__(self) -> Iterator[RunNode]:
        """Every node, depth first, parents before children."""
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._nodes

    def __getitem__(self, run_id: str) -> RunNode:
        try:
            return self._nodes[run_id]
        except KeyError:
            raise RunNotFoundError(f"run {run_id} is not in this lineage", run_id=run_id) from None

    def parent(self, run_id: str) -> RunNode | None:
        """The loaded run that `run_id` was forked from, if any."""
        parent = self._parents.get(self[run_id].run_id)
        return None if parent is None else self._nodes[parent]

    def root(self, run_id: str) -> RunNode:
        """The root of the tree that holds `run_id`."""
        node = self[run_id]
        while (parent := self.parent(node.run_id)) is not None:
            node = parent
        return node

    def depth(self, run_id: str) -> int:
        """0 for a root, 1 for its forks, and so on."""
        depth, node = 0, self[run_id]
        while (parent := self.parent(node.run_id)) is not None:
            depth, node = depth + 1, parent
        return depth

    def lines(self) -> Iterator[tuple[str, RunNode]]:
        """(tree-drawing prefix, node) for every node, in display order."""
        return tree_lines(self.roots)

    def __str__(self) -> str:
        return draw_tree(self.roots, self._label)

    def __repr__(self) -> str:
        return str(self).rstrip("\n") or "<empty lineage>"

    def _repr_html_(self) -> str:
        # nested lists built with a stack, not recursion: chains of forks may be long
        parts = ["<div style='font-family:monospace'>"]
        pending: list[str | tuple[RunNode, ...]] = [self.roots]
        while pending:
            item = pending.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item:
                parts.append("<ul style='list-style:none;padding-left:1.2em;margin:0'>")
                pending.append("</ul>")
                for node in reversed(item):
                    pending += ["</li>", node.children, self._html_item(node)]
        parts.append("</div>")
        return "".join(parts)

    def _label(self, node: RunNode) -> str:
        if node.parent_run_id is not None and self.parent(node.run_id) is None:
            why = "a cycle of sources" if node.parent_run_id in self else "not loaded"
            return f"{node.label[:-1]}; fork of {node.parent_run_id}, {why})"
        return node.label

    def _html_item(self, node: RunNode) -> str:
        return (
            f"<li>{_badge(node.status)} <b>{html.escape(node.run_id)}</b> "
            f"<span style='color:#666'>{html.escape(self._label(node)[len(node.run_id) :])}"
            "</span>"
        )


def _badge(status: str) -> str:
    color = STATUS_COLORS.get(status, "#444")
    return f"<span style='color:{color}' title='{html.escape(status)}'>&#9679;</span>"


def lineage(journals: Journals) -> Lineage:
    """The fork forest of the runs in `journals`; a fork that edited its fork point (an
    `edited` entry after its fork offset) is marked so."""
    runs = journals.to_arrow("runs")
    columns = [
        runs.column(name).to_pylist()
        for name in ("run_id", "status", "parent_run_id", "fork_offset", "steps")
    ]  # only these columns: making datetimes of the others would cost more than the forest
    edited = _edited_forks(journals, dict(zip(columns[0], columns[3], strict=True)))
    return Lineage(
        build_forest(
            RunNode(run_id, status, parent, offset, steps, edited=run_id in edited)
            for run_id, status, parent, offset, steps in zip(*columns, strict=True)
        )
    )


def _edited_forks(journals: Journals, forked_at: dict[str, int | None]) -> set[str]:
    """Runs with an `edited` entry past their fork offset: forks that edited their fork point."""
    entries = journals.to_arrow("entries")
    edited = entries.filter(entries.column("edited")).select(["run_id", "offset"]).to_pylist()
    return {
        row["run_id"]
        for row in edited
        if (at := forked_at.get(row["run_id"])) is not None and row["offset"] > at
    }
