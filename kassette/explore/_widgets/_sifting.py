"""Sorting and filtering a comparison's branches: by score, cost, answer length or params.

Each branch has *facts*: `score` (given by the caller, e.g. a fan-out's scores), `cost_usd`
(from the runs table), `length` (the words of its last answer) and `params` (a fan-out's
variant, decoded), and its mark (`keep`, `note`). A filter is words separated by spaces: a
comparison `name>1.2` (`>`, `>=`, `<`, `<=`, `=`, `!=`; `name` a fact, `cost` for `cost_usd`,
or a param such as `temperature`), `kept` (marked keep), or any other word, which the run id,
params, note or an answer must contain (case aside). A branch passes when every word holds.
Plain data, no widget: CompareView and its tests share it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["SORTS", "filter_error", "sifted"]

SORTS = ("", "score", "cost_usd", "length")  # "" is the branches' own order; also "param:NAME"
_CLAUSE = re.compile(r"^([A-Za-z_][\w.]*)\s*(>=|<=|!=|=|>|<)\s*(.+)$")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    "!=": operator.ne,
}
_ALIASES = {"cost": "cost_usd", "words": "length"}


def sifted(
    runs: Sequence[str],
    facts: Mapping[str, Mapping[str, Any]],
    marks: Mapping[str, Mapping[str, Any]],
    texts: Mapping[str, str],
    *,
    sort_by: str = "",
    descending: bool = False,
    query: str = "",
) -> list[str]:
    """The runs that pass `query`, in `sort_by` order (runs without the value last, ties in
    the given order). `texts` is each run's searchable text (its answers)."""
    clauses = _clauses(query)
    kept = [
        run_id
        for run_id in runs
        if all(clause(run_id, facts.get(run_id, {}), marks, texts) for clause in clauses)
    ]
    if not sort_by:
        return list(reversed(kept)) if descending else kept
    valued = [(run_id, _value(facts.get(run_id, {}), sort_by)) for run_id in kept]
    present = [(run_id, value) for run_id, value in valued if value is not None]
    present.sort(key=lambda item: _sortable(item[1]), reverse=descending)
    return [run_id for run_id, _ in present] + [r for r, value in valued if value is None]


def filter_error(query: str) -> str | None:
    """Why `query` cannot be read (a comparison with no number or word after it), or None."""
    for word in query.split():
        match = _CLAUSE.match(word)
        if word[0] in "<>=!" or (match is None and re.search(r"[<>]", word)):
            return f"cannot read {word!r}: write name>number, e.g. temperature>1"
    return None


Clause = Callable[
    [str, Mapping[str, Any], Mapping[str, Mapping[str, Any]], Mapping[str, str]], bool
]


def _clauses(query: str) -> list[Clause]:
    clauses: list[Clause] = []
    for word in query.split():
        match = _CLAUSE.match(word)
        if match is not None:
            name, op, wanted = match.groups()
            clauses.append(_compare(_ALIASES.get(name, name), _OPS[op], _literal(wanted)))
        elif word.lower() == "kept":
            clauses.append(lambda run_id, _f, marks, _t: bool(marks.get(run_id, {}).get("keep")))
        else:
            clauses.append(_contains(word.lower()))
    return clauses


def _compare(name: str, op: Callable[[Any, Any], bool], wanted: Any) -> Clause:
    def holds(_run: str, facts: Mapping[str, Any], _m: Any, _t: Any) -> bool:
        value = _value(facts, name)
        if value is None:
            return False
        try:
            return op(value, wanted)
        except TypeError:  # a number against a word: compare as text
            return op(str(value), str(wanted))

    return holds


def _contains(word: str) -> Clause:
    def holds(run_id: str, facts: Mapping[str, Any], marks: Any, texts: Mapping[str, str]) -> bool:
        note = str(marks.get(run_id, {}).get("note") or "")
        params = " ".join(f"{k}={v}" for k, v in (facts.get("params") or {}).items())
        return any(word in part.lower() for part in (run_id, params, note, texts.get(run_id, "")))

    return holds


def _value(facts: Mapping[str, Any], name: str) -> Any:
    """A fact by name, else a param (`param:NAME` or a bare param name)."""
    name = _ALIASES.get(name, name)
    if name in facts and name != "params":
        value = facts[name]
    else:
        value = (facts.get("params") or {}).get(name.removeprefix("param:"))
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _sortable(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool | int | float):
        return (0, float(value))
    return (1, str(value))


def _literal(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return {"true": True, "false": False}.get(text.lower(), text)
