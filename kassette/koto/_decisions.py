"""Decisions: the choices an agent records inside a state, as an audit trail.

`koto decisions record NAME --with-data '{"choice", "rationale", "alternatives_considered"?}'`
journals `decision_recorded {state, decision}` without moving the machine; `koto decisions
list NAME` gives the decisions of the current epoch. Like evidence, a decision belongs to the
epoch it was recorded in: after a rewind out of the state (or any other arrival) the earlier
decisions stay in the journal but leave the list.
"""

from __future__ import annotations

from typing import Any

from kassette.koto import _evidence as evidence
from kassette.koto._session import append, load, open_session
from kassette.koto._store import Sessions

__all__ = ["listed", "record"]


def record(store: Sessions, name: str, data: str) -> dict[str, Any]:
    """Record a decision in the current state; `{state, decisions_recorded}` (this epoch's)."""
    payload = evidence.parse(data)
    evidence.refuse_reserved(payload)
    decision = evidence.decision(payload)
    load(store, name).refuse_if_ended()
    with open_session(store, name) as run:
        view = load(store, name, run.journal)
        view.refuse_if_ended()
        view.fold(append(run, "decision_recorded", state=view.current, decision=decision))
    return {"state": view.current, "decisions_recorded": len(view.decisions)}


def listed(store: Sessions, name: str) -> dict[str, Any]:
    """The current epoch's decisions: `{state, decisions: {count, items}}`. Writes nothing."""
    view = load(store, name)
    items = [{**entry["decision"], "timestamp": entry.get("timestamp")} for entry in view.decisions]
    return {"state": view.current, "decisions": {"count": len(items), "items": items}}
