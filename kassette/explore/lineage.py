"""Lineage: the fork forest of a set of runs, as plain data that prints as a tree.

A fork's first session writes a `start` entry whose `source` names the run it was forked
from and the offset it was cut at; that link makes every run a node whose parent is its
source. Runs that are not forks (or whose source is not loaded) are roots. Siblings are
ordered by fork offset, then run id, like `kassette tree`.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass

from kassette.errors import RunNotFoundError
from kassette.explore.frames import Journals

__all__ = ["STATUS_COLORS", "Lineage", "RunNode", "lineage"]

STATUS_COLORS = {
    "completed": "#2e7d32",
    "failed": "#c62828",
    "canceled": "#757575",
    "suspended": "#ef6c00",
    "running": "#1565c0",
}


@dataclass(frozen=True)
class RunNode:
    """One run in the forest. `parent_run_id` and `fork_offset` are as the run records them,
    even when the parent is not loaded (then the node is a root)."""

    run_id: str
    status: str
    parent_run_id: str | None
    fork_offset: int | None
    steps: int
    children: tuple[RunNode, ...] = ()

    @property
    def label(self) -> str:
        """`run (status, from offset N, K steps)`: what the tree shows for this run."""
        parts = [self.status]
        if self.parent_run_id is not None:
            parts.append(f"from offset {self.fork_offset}")
        parts.append(f"{self.steps} step{'s' if self.steps != 1 else ''}")
        return f"{self.run_id} ({', '.join(parts)})"


class Lineage:
    """The fork forest of the runs in a `Journals`: `roots`, lookup by run id, a text tree."""

    def __init__(self, roots: tuple[RunNode, ...]) -> None:
        self.roots = roots
        self._nodes = {node.run_id: node for node in _walk(roots)}
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
        for root in self.roots:
            stack: list[tuple[RunNode, str, str]] = [(root, "", "")]
            while stack:
                node, lead, indent = stack.pop()
                yield lead, node
                last = len(node.children) - 1
                for index in reversed(range(len(node.children))):
                    if index == last:
                        stack.append((node.children[index], indent + "└── ", indent + "    "))
                    else:
                        stack.append((node.children[index], indent + "├── ", indent + "│   "))

    def __str__(self) -> str:
        return "".join(f"{lead}{self._label(node)}\n" for lead, node in self.lines())

    def __repr__(self) -> str:
        return str(self).rstrip("\n") or "<empty lineage>"

    def _repr_html_(self) -> str:
        return f"<div style='font-family:monospace'>{self._html_list(self.roots)}</div>"

    def _label(self, node: RunNode) -> str:
        if node.parent_run_id is not None and self.parent(node.run_id) is None:
            why = "a cycle of sources" if node.parent_run_id in self else "not loaded"
            return f"{node.label[:-1]}; fork of {node.parent_run_id}, {why})"
        return node.label

    def _html_list(self, nodes: tuple[RunNode, ...]) -> str:
        if not nodes:
            return ""
        items = "".join(
            f"<li>{_badge(node.status)} <b>{html.escape(node.run_id)}</b> "
            f"<span style='color:#666'>{html.escape(self._label(node)[len(node.run_id) :])}"
            f"</span>{self._html_list(node.children)}</li>"
            for node in nodes
        )
        return f"<ul style='list-style:none;padding-left:1.2em;margin:0'>{items}</ul>"


def _badge(status: str) -> str:
    color = STATUS_COLORS.get(status, "#444")
    return f"<span style='color:{color}' title='{html.escape(status)}'>&#9679;</span>"


def _walk(nodes: tuple[RunNode, ...]) -> Iterator[RunNode]:
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def lineage(journals: Journals) -> Lineage:
    """The fork forest of the runs in `journals`."""
    runs = journals.to_arrow("runs").to_pylist()
    known = {run["run_id"] for run in runs}
    children: dict[str, list[dict[str, object]]] = {}
    for run in runs:
        parent = run["parent_run_id"]
        if parent in known and parent != run["run_id"]:
            children.setdefault(parent, []).append(run)
    for siblings in children.values():
        siblings.sort(key=lambda run: (run["fork_offset"] or 0, run["run_id"]))
    roots = [run for run in runs if run["parent_run_id"] not in known]
    reached = _reached([str(run["run_id"]) for run in roots], children)
    for run in runs:  # runs in a cycle of sources (a hand-edited journal) start trees too
        if run["run_id"] not in reached:
            roots.append(run)
            reached |= _reached([str(run["run_id"])], children)
    built: set[str] = set()
    return Lineage(tuple(_build(run, children, built) for run in roots))


def _reached(roots: list[str], children: dict[str, list[dict[str, object]]]) -> set[str]:
    found: set[str] = set()
    pending = list(roots)
    while pending:
        run_id = pending.pop()
        if run_id not in found:
            found.add(run_id)
            pending.extend(str(child["run_id"]) for child in children.get(run_id, []))
    return found


def _build(
    run: dict[str, object], children: dict[str, list[dict[str, object]]], built: set[str]
) -> RunNode:
    """The node for `run` with its subtree, children first (no recursion: chains may be long)."""
    finished: dict[str, RunNode] = {}
    stack: list[tuple[dict[str, object], bool]] = [(run, False)]
    while stack:
        current, expanded = stack.pop()
        run_id = str(current["run_id"])
        below = [c for c in children.get(run_id, []) if str(c["run_id"]) not in built]
        if not expanded:
            built.add(run_id)
            stack.append((current, True))
            stack.extend((child, False) for child in reversed(below))
            continue
        finished[run_id] = RunNode(
            run_id=run_id,
            status=str(current["status"]),
            parent_run_id=current["parent_run_id"],  # type: ignore[arg-type]
            fork_offset=current["fork_offset"],  # type: ignore[arg-type]
            steps=int(current["steps"]),  # type: ignore[call-overload]
            children=tuple(
                finished[str(c["run_id"])]
                for c in children.get(run_id, [])
                if str(c["run_id"]) in finished
            ),
        )
    return finished[str(run["run_id"])]
