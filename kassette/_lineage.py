"""Lineage: the fork forest of a set of runs, and the text tree that draws it.

A fork's first session writes a `start` entry whose `source` names the run it was forked
from and the offset it was cut at; that link makes every run a node whose parent is its
source. A run that is not a fork, or whose source is not among the runs, is a root. Children
are ordered by fork offset (a fork that names none comes first), then run id. Only a
hand-edited journal can make a cycle of sources; its first run in listing order then starts a
tree of its own, so every run is shown once. `kassette tree` and `kassette.explore._lineage`
both build and draw their trees here, each with its own label.

Runs are listed oldest first (`creation_order`): by the time each was created (a root's first
entry, a fork's own `start` entry), then by fork depth, so that a fork made in the same
millisecond as its source still follows it, then by run id.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["RunNode", "build_forest", "creation_order", "draw_tree", "source_run", "tree_lines"]

_DIGITS = re.compile(r"(\d+)")


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
    edited: bool = False  # a fork that recorded its fork point with a given result

    @classmethod
    def of(
        cls,
        run_id: str,
        status: str,
        source: Mapping[str, object] | None,
        steps: int,
        *,
        edited: bool = False,
    ) -> RunNode:
        """The node of a run whose state records `source` (a fork's `{runId, fromOffset}`, as a
        journal may hold it: a field of another type counts as absent)."""
        offset = (source or {}).get("fromOffset")
        return cls(
            run_id=run_id,
            status=status,
            parent_run_id=source_run(source),
            fork_offset=offset
            if isinstance(offset, int) and not isinstance(offset, bool)
            else None,
            steps=steps,
            edited=edited,
        )

    @property
    def label(self) -> str:
        """`run (status, from offset N, K steps)`: what the tree shows for this run."""
        parts = [self.status]
        if self.parent_run_id is not None:
            parts.append(f"from offset {self.fork_offset}" + (", edited" if self.edited else ""))
        parts.append(f"{self.steps} step{'s' if self.steps != 1 else ''}")
        return f"{self.run_id} ({', '.join(parts)})"


def source_run(source: Mapping[str, object] | None) -> str | None:
    """The run a fork's recorded `source` names (None for a run that is not a fork, or a
    `runId` that is not a string)."""
    parent = source.get("runId") if source is not None else None
    return parent if isinstance(parent, str) else None


def build_forest(runs: Iterable[RunNode]) -> tuple[RunNode, ...]:
    """The roots of the fork forest of `runs` (in listing order; their `children` are ignored).

    Roots come in listing order: first every run whose source is absent or not among `runs`,
    then the first run of each cycle of sources.
    """
    listed = {run.run_id: run for run in runs}
    children: dict[str, list[str]] = {}
    for run in listed.values():
        parent = run.parent_run_id
        if parent is not None and parent in listed and parent != run.run_id:
            children.setdefault(parent, []).append(run.run_id)
    for siblings in children.values():
        siblings.sort(key=lambda run_id: (_offset_order(listed[run_id]), _natural(run_id), run_id))
    parentless = [run_id for run_id, run in listed.items() if run.parent_run_id not in listed]
    placed: set[str] = set()
    roots: list[RunNode] = []
    for run_id in (*parentless, *listed):  # what is still unplaced after the roots is a cycle
        if run_id not in placed:
            roots.append(_grow(run_id, listed, children, placed))
    return tuple(roots)


def creation_order(
    created: Mapping[str, float | None], parents: Mapping[str, str | None]
) -> list[str]:
    """The run ids of `created` oldest first: by creation time, then fork depth, then run id
    with its numbers read as numbers (a fan-out's `root.draft.2` before `root.draft.10`).

    `created` maps each run to when it was created, as a number that grows with time (POSIX
    seconds, milliseconds, ...; None: unknown, such as a journal that cannot be read, listed
    last); `parents` maps a fork to its source run.
    """
    depths = _fork_depths({run_id: parents.get(run_id) for run_id in created})

    def key(run_id: str) -> tuple[bool, float, int, list[str | int], str]:
        moment = created[run_id]
        when = 0.0 if moment is None else moment
        return (moment is None, when, depths[run_id], _natural(run_id), run_id)

    return sorted(created, key=key)


def _natural(run_id: str) -> list[str | int]:
    """`run_id` as its text and its numbers in turn (`"a.10"`: `["a.", 10, ""]`), so run ids
    compare numbers as numbers: texts meet texts and numbers numbers, and a run id that is
    the start of another comes first."""
    parts: list[str | int] = _DIGITS.split(run_id)
    parts[1::2] = map(int, parts[1::2])
    return parts


def tree_lines(roots: Iterable[RunNode]) -> Iterator[tuple[str, RunNode]]:
    """(tree-drawing prefix, node) for every node, depth first, parents before children."""
    for root in roots:
        # (node, what precedes its label, what precedes its children's lines)
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


def draw_tree(roots: Iterable[RunNode], label: Callable[[RunNode], str]) -> str:
    """The forest as text: one line per run, `label(node)` indented under its source."""
    return "".join(f"{lead}{label(node)}\n" for lead, node in tree_lines(roots))


def _fork_depths(parents: Mapping[str, str | None]) -> dict[str, int]:
    """How many forks away from a root each run is: 0 for a run that is not a fork, 1 for a
    fork of a root or of a run not among `parents`. In a cycle of sources (a hand-edited
    journal) the first run walked into counts as the fork of a missing run, as in
    `build_forest`, where the first listed run of a cycle is a root."""
    depths: dict[str, int] = {}
    for run_id, parent in parents.items():
        if parent is None:  # most runs: no walk needed
            depths[run_id] = 0
            continue
        chain: list[str] = []  # the runs walked from run_id up to a known depth
        walked: set[str] = set()
        above: str | None = run_id
        while above is not None and above in parents and above not in depths:
            if above in walked:  # a cycle: cut it above `above`, whose children follow it
                cut = chain.index(above)
                depths[above] = 1
                for depth, member in enumerate(reversed(chain[cut + 1 :]), start=2):
                    depths[member] = depth
                chain = chain[:cut]
                break
            chain.append(above)
            walked.add(above)
            above = parents[above]
        # -1: the chain's last run is a root; 0: its source is missing
        depth = -1 if above is None else depths.get(above, 0)
        for member in reversed(chain):
            depth += 1
            depths[member] = depth
    return depths


def _offset_order(run: RunNode) -> int:
    return -1 if run.fork_offset is None else run.fork_offset


def _grow(
    root: str, listed: dict[str, RunNode], children: dict[str, list[str]], placed: set[str]
) -> RunNode:
    """The node for `root` with its subtree, children first (no recursion: chains may be long).

    A child already placed is the start of the cycle being walked, and is left out.
    """
    finished: dict[str, RunNode] = {}
    placed.add(root)
    # (run, its children to attach, or None until they have been pushed)
    stack: list[tuple[str, list[str] | None]] = [(root, None)]
    while stack:
        run_id, below = stack.pop()
        if below is None:
            below = [child for child in children.get(run_id, []) if child not in placed]
            placed.update(below)
            stack.append((run_id, below))
            stack.extend((child, None) for child in reversed(below))
            continue
        run = listed[run_id]  # the constructor, not dataclasses.replace: a third of the cost
        finished[run_id] = RunNode(
            run.run_id,
            run.status,
            run.parent_run_id,
            run.fork_offset,
            run.steps,
            tuple(finished[child] for child in below),
            run.edited,
        )
    return finished[root]
