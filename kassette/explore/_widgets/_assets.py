"""The widgets' JavaScript and CSS, read from the files beside this module (package data).

anywidget loads a widget's `_esm` as one ES module, with no way to import a sibling file, so
the helpers every view uses (dom.js) are prepended to each widget's own script here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SHARED", "css", "esm"]

_HERE = Path(__file__).parent
SHARED = ("dom.js",)  # prepended to every widget's script, in this order


def esm(name: str, *parts: str) -> str:
    """The ES module of the widget whose script is `name`: the shared helpers, the helper
    scripts `parts` it uses too (conversation.js, say), then it."""
    return "\n".join(_read(part) for part in (*SHARED, *parts, name))


def css(name: str, *parts: str) -> str:
    """The style sheet `name`, after those of the helper scripts `parts` it uses too."""
    return "\n".join(_read(part) for part in (*parts, name))


def _read(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")
