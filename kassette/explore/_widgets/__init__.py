"""Widgets: the fork forest to click through, and forking from a notebook.

`RunTree` (tree.py, drawn by tree.js) is one anywidget model whatever the number of runs;
`ForkExplorer` (fork.py) puts a fork-point picker and a Fork button on top of one;
`CompareView` (compare.py, compare.js) lines up many branches step by step.
The JavaScript and CSS ship as package data beside these modules: there is no build step.
"""

from __future__ import annotations

from kassette._extras import requires

with requires("kassette.explore's widgets"):
    import anywidget  # noqa: F401
    import ipywidgets  # noqa: F401

from kassette.explore._widgets._compare import CompareView
from kassette.explore._widgets._fork import ForkExplorer
from kassette.explore._widgets._tree import RunTree, TreeNode

__all__ = ["CompareView", "ForkExplorer", "RunTree", "TreeNode"]
