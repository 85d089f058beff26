"""Where two JSON values first differ: the one walk behind a replay's request mismatch
(`kassette.integrations`) and a compare view's "temperature 0.7 → 1.3" (`kassette.explore`).
Standard library only."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ABSENT", "first_difference"]


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()
"""The value on the side that lacks a key or a list item."""


def first_difference(
    before: Any, after: Any, path: str = "", *, whole_lists: bool = False
) -> tuple[str, Any, Any] | None:
    """The first path at which two JSON values differ (`messages[2].content`), with the value
    on each side (`ABSENT` for a key or item one side lacks), or None when they are equal.
    Keys are visited in `before`'s order, then `after`'s new keys; `1` and `1.0` are equal,
    `1` and `true` are not. With `whole_lists`, lists of different lengths differ as wholes
    rather than at their first extra item."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(k for k in after if k not in before)]:
            found = first_difference(
                before.get(key, ABSENT),
                after.get(key, ABSENT),
                _key_path(path, key),
                whole_lists=whole_lists,
            )
            if found is not None:
                return found
        return None
    if (
        isinstance(before, list)
        and isinstance(after, list)
        and not (whole_lists and len(before) != len(after))
    ):
        for index in range(max(len(before), len(after))):
            found = first_difference(
                before[index] if index < len(before) else ABSENT,
                after[index] if index < len(after) else ABSENT,
                f"{path}[{index}]",
                whole_lists=whole_lists,
            )
            if found is not None:
                return found
        return None
    if isinstance(before, dict | list) or isinstance(after, dict | list):
        same = before == after  # a container against a scalar, or lists of other lengths
    else:
        same = isinstance(before, bool) is isinstance(after, bool) and before == after
    return None if same else (path, before, after)


def _key_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"
