"""The engine: advancing a session from what its journal says, one `koto next` at a time.

A tick opens a fenced session, submits the evidence (or takes a directed `--to` transition),
then loops: a terminal state stops; otherwise the state's gates run (each result journaled)
and its transitions are resolved: exactly one matching `when` wins (an AND of exact matches
against the epoch's evidence and `gates.<name>.<field>`), failing gates block, a state that
accepts evidence waits for it, and the transition without `when` is the fallback. States that
need nothing from the agent are passed through in the same call, up to a chain limit; a state
left twice without evidence in one call is a cycle. A state's `skip_if` is checked after its
gates: when every condition holds (on the epoch's evidence, `gates.<name>.<field>` and
`vars.<NAME>`), the state is skipped: its conditions count as evidence, the transition they
select (or the fallback) is taken and journaled with `condition_type: "skip_if"`. The answer
says what to do next: `evidence_required` (with `expects`), `gate_blocked` (with
`blocking_conditions`) or `done`.

Before anything is read, a tick refuses to run inside a gate command of another tick (the
gate runner sets `KOTO_TICK_SESSION`: `nested_invocation`); before anything runs or is
written, it refuses a directory outside the session's execution anchor
(`execution_anchor_mismatch`). Gates run at the anchor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kassette.core import Run
from kassette.koto import _evidence as submissions
from kassette.koto._errors import KotoError
from kassette.koto._gates import GateResult, evaluate, substitute
from kassette.koto._names import validate_name
from kassette.koto._session import (
    SessionView,
    append,
    expects,
    load,
    open_session,
)
from kassette.koto._store import Sessions

__all__ = [
    "RECOVERY_POINTER",
    "TICK_SESSION",
    "Ticker",
    "check_anchor",
    "next_step",
    "refuse_nested",
    "resolve",
]

MAX_CHAIN = 100
TICK_SESSION = "KOTO_TICK_SESSION"  # set for gate commands: the session whose tick runs them
RECOVERY_POINTER = (
    "[koto] Lost context? `koto status <name>` returns this phase's directive/details/expects.\n\n"
)


# -- next ------------------------------------------------------------------------------------------


def next_step(
    store: Sessions,
    name: str,
    *,
    data: str | None = None,
    to: str | None = None,
    full: bool = False,
    cleanup: bool = True,
    cwd: str | None = None,
) -> dict[str, Any]:
    """One tick: submit evidence (or take a directed transition), advance, answer what to do.

    `cwd` (default: the working directory) must be the session's execution anchor or beneath
    it; a session without one adopts `cwd`."""
    refuse_nested(name)
    validate_name(name)
    if data is not None and to is not None:
        raise KotoError("precondition_failed", "--with-data and --to cannot be used together")
    evidence = submissions.parse(data) if data is not None else None
    if evidence is not None:
        submissions.refuse_reserved(evidence)
    here = os.path.realpath(cwd or os.getcwd())
    view = load(store, name)
    anchor = view.anchor
    if anchor is not None:
        check_anchor(name, anchor, here)
    _check_request(view, evidence, to)
    ticker = Ticker(store, view, anchor=anchor or here, full=full)
    if anchor is not None and evidence is None and to is None and ticker.answers_without_writing():
        response = ticker.respond(advanced=False, blocking=[])
    else:
        with open_session(store, name) as run:
            view = load(store, name, run.journal)  # as it is now that we hold the session
            anchor = view.anchor
            if anchor is not None:
                check_anchor(name, anchor, here)
            _check_request(view, evidence, to)
            ticker = Ticker(store, view, anchor=anchor or here, full=full, run=run)
            if anchor is None:  # a session from before anchors: bind it here, and say so
                append(run, "execution_anchor_adopted", anchor=here)
                ticker.notice = (
                    f"[koto] Session '{name}' had no recorded directory; it is now bound to "
                    f"{here}. Later ticks must run there or below it.\n\n"
                )
            response = ticker.tick(evidence, to)
    if response["action"] == "done" and cleanup:
        store.remove(name)
    return response


def refuse_nested(name: str) -> None:
    """Refuse a tick started from inside a command another tick is running.

    That tick would append to a journal the outer tick is halfway through, and the outer one
    would then report a state the session has already left. A blank marker counts as unset.
    """
    enclosing = os.environ.get(TICK_SESSION, "").strip()
    if enclosing:
        raise KotoError(
            "nested_invocation",
            f"koto next cannot run inside a command koto is running: the tick on session "
            f"{enclosing!r} started this process and has not finished, and a nested tick "
            "would move the workflow while that tick reports the state it started from. "
            f"Remove the `koto next {name}` call from the template's command; the enclosing "
            "tick advances the session.",
        )


def check_anchor(name: str, anchor: str, here: str) -> None:
    """`here` (a resolved path) must be the anchor directory or beneath it."""
    if not os.path.isdir(anchor):
        raise KotoError(
            "execution_anchor_unresolvable",
            f"session {name!r} is bound to {anchor}, which no longer exists on this machine; "
            "restore the checkout there (or start a new session where it is now)",
            extra={"execution_dir": anchor},
        )
    if here != anchor and not here.startswith(anchor.rstrip(os.sep) + os.sep):
        raise KotoError(
            "execution_anchor_mismatch",
            f"session {name!r} is bound to {anchor}, and this tick ran from {here}, which is "
            f"neither that directory nor beneath it: cd {anchor} and run it again",
            extra={"execution_dir": anchor},
        )


def _check_request(view: SessionView, evidence: dict[str, Any] | None, to: str | None) -> None:
    view.refuse_if_ended(at_terminal=evidence is not None or to is not None)
    if to is not None:
        targets = [t["target"] for t in view.state.get("transitions", [])]
        if to not in targets:
            raise KotoError(
                "precondition_failed",
                f"--to {to!r}: state {view.current!r} has no transition to it (it may go to: "
                f"{', '.join(targets) or 'nowhere'})",
            )
    if evidence is not None:
        accepts = view.state.get("accepts")
        if not accepts:
            raise KotoError(
                "precondition_failed", f"state {view.current!r} does not accept evidence"
            )
        problems = submissions.validate(accepts, evidence)
        if problems:
            reasons = "; ".join(f"{p['field']}: {p['reason']}" for p in problems)
            raise KotoError(
                "invalid_submission",
                f"evidence for state {view.current!r} is invalid: {reasons}",
                details=problems,
            )


class Ticker:
    """One `next` call on a session: runs the loop and builds the answer."""

    def __init__(
        self,
        store: Sessions,
        view: SessionView,
        *,
        anchor: str,
        full: bool,
        run: Run | None = None,
    ) -> None:
        self.store = store
        self.view = view
        self.anchor = anchor
        self.full = full
        self.run = run
        self.values = view.values(store.home)
        self.notice = ""  # koto's own text to put before the directive, once

    def answers_without_writing(self) -> bool:
        """Whether this tick would append nothing: then it needs no session."""
        state = self.view.state
        if self.view.is_terminal:
            return True
        needs_details = "details" in state and (self.full or not self.view.delivered)
        return (
            bool(state.get("accepts"))
            and not state.get("gates")
            and not state.get("skip_if")
            and not (self.view.has_evidence or needs_details)
        )

    def tick(self, evidence: dict[str, Any] | None, to: str | None) -> dict[str, Any]:
        assert self.run is not None
        view = self.view
        if to is not None:
            view.fold(append(self.run, "directed_transition", **{"from": view.current, "to": to}))
            return self.respond(advanced=True, blocking=[])
        if evidence is not None:
            view.fold(append(self.run, "evidence_submitted", state=view.current, fields=evidence))
        fresh = evidence is not None
        advanced = False
        left_without_evidence: set[str] = set()
        for _ in range(MAX_CHAIN):
            state = view.state
            if state.get("terminal"):
                return self.respond(advanced=advanced, blocking=[])
            results = self.run_gates(state)
            facts = _facts(view.evidence, results, self.values)
            moved: dict[str, Any] = {"from": view.current}
            skip = state.get("skip_if")
            target: str | None
            if skip and _matches(skip, facts):
                target, when = skipped(state, skip, facts)
                moved.update(condition_type="skip_if", skip_if_matched=skip)
            else:
                target, when, blocked = resolve(state, facts, view.has_evidence, results)
                if target is None:
                    return self.respond(advanced=advanced, blocking=blocked, action=when)
            if not fresh:
                if view.current in left_without_evidence:
                    raise KotoError(
                        "template_error",
                        f"cycle: state {view.current!r} was passed through twice in one call "
                        "without evidence",
                    )
                left_without_evidence.add(view.current)
            moved.update(to=target, when=when)
            view.fold(append(self.run, "transitioned", **moved))
            advanced, fresh = True, False
        raise KotoError(
            "template_error", f"chain limit: more than {MAX_CHAIN} transitions in one call"
        )

    def run_gates(self, state: dict[str, Any]) -> dict[str, GateResult]:
        assert self.run is not None
        environment = dict(os.environ)
        environment["KOTO_SESSION_NAME"] = self.view.name
        environment["KOTO_SESSION_DIR"] = self.values["SESSION_DIR"]
        environment[TICK_SESSION] = self.view.name
        results = {}
        for name, gate in state.get("gates", {}).items():
            if gate["type"] == "command":
                Path(self.values["SESSION_DIR"]).mkdir(parents=True, exist_ok=True)
            result = evaluate(
                gate,
                values=self.values,
                read_context=self.read_context,
                cwd=self.anchor,
                environment=environment,
            )
            append(
                self.run,
                "gate_evaluated",
                state=self.view.current,
                gate=name,
                output=result.output,
                outcome=result.status,
            )
            results[name] = result
        return results

    def read_context(self, key: str) -> bytes | None:
        from kassette.koto._context import read_content

        return read_content(self.store, self.view, key)

    def respond(
        self, *, advanced: bool, blocking: list[dict[str, Any]], action: str | None = None
    ) -> dict[str, Any]:
        view, state = self.view, self.view.state
        if state.get("terminal"):
            done: dict[str, Any] = {
                "action": "done",
                "advanced": advanced,
                "error": None,
                "expects": None,
                "state": view.current,
                "unassigned_children": [],
            }
            if state.get("failure"):
                done["failure"] = True
            return done
        action = action or "evidence_required"
        directive = substitute(state["directive"], self.values)
        if "details" in state:  # a phase with details always says where to find them again
            directive = RECOVERY_POINTER + directive
        response: dict[str, Any] = {
            "action": action,
            "advanced": advanced,
            "blocking_conditions": blocking,
            "directive": self.notice + directive,
            "error": None,
            "expects": expects(state) if action == "evidence_required" else None,
            "state": view.current,
            "unassigned_children": [],
        }
        if "details" in state and (self.full or not view.delivered):
            response["details"] = substitute(state["details"], self.values)
            if self.run is not None:
                view.fold(append(self.run, "instructions_delivered", state=view.current))
        return response


def _facts(
    evidence: dict[str, Any], results: dict[str, GateResult], values: dict[str, str]
) -> dict[str, Any]:
    """What `when` and `skip_if` test: the evidence, `gates.<name>` and `vars.<NAME>`."""
    facts: dict[str, Any] = dict(evidence)
    facts["gates"] = {name: result.output for name, result in results.items()}
    facts["vars"] = values
    return facts


def _matching(state: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any] | None:
    """The one conditional transition whose `when` holds, or None; two is a template error."""
    transitions = state.get("transitions", [])
    matched = [t for t in transitions if "when" in t and _matches(t["when"], facts)]
    if len(matched) > 1:
        raise KotoError(
            "template_error",
            f"ambiguous: {len(matched)} transitions match ("
            + ", ".join(t["target"] for t in matched)
            + ")",
        )
    return matched[0] if matched else None


def skipped(state: dict[str, Any], skip: dict[str, Any], facts: dict[str, Any]) -> tuple[str, Any]:
    """(target, matched `when`) of a state skipped by its `skip_if`: the conditions count as
    evidence, and the transition they select, else the fallback, is taken."""
    facts = dict(facts)
    facts.update((key, value) for key, value in skip.items() if "." not in key)
    matched = _matching(state, facts)
    if matched is not None:
        return matched["target"], matched["when"]
    fallback = next((t for t in state.get("transitions", []) if "when" not in t), None)
    if fallback is None:
        raise KotoError(
            "template_error", "skip_if holds but selects no transition and there is no fallback"
        )
    return fallback["target"], None


def resolve(
    state: dict[str, Any],
    facts: dict[str, Any],
    has_evidence: bool,
    results: dict[str, GateResult],
) -> tuple[str | None, Any, list[dict[str, Any]]]:
    """(target, matched `when`, []) to move, or (None, action, blocking conditions) to stop."""
    transitions = state.get("transitions", [])
    matched = _matching(state, facts)
    if matched is not None:
        return matched["target"], matched["when"], []
    blocking = [
        {
            "agent_actionable": False,
            "category": "corrective",
            "name": name,
            "output": result.output,
            "status": result.status,
            "type": state["gates"][name]["type"],
        }
        for name, result in results.items()
        if not result.passed
    ]
    accepts = bool(state.get("accepts"))
    if blocking:
        return None, "evidence_required" if accepts else "gate_blocked", blocking
    if accepts and not has_evidence:
        return None, "evidence_required", []
    fallback = next((t for t in transitions if "when" not in t), None)
    if fallback is not None:
        return fallback["target"], None, []
    if accepts:
        return None, "evidence_required", []
    raise KotoError(
        "template_error", "no transition matches and the state has no fallback transition"
    )


def _matches(when: dict[str, Any], facts: dict[str, Any]) -> bool:
    """Every condition holds: the value at its dot path equals it exactly (1 and 1.0 are equal,
    true and 1 are not); `vars.<NAME>: {is_set: B}` holds when the variable's value is
    non-empty exactly when B is true."""
    missing = object()
    for path, expected in when.items():
        value: Any = facts
        for part in path.split("."):
            value = value.get(part, missing) if isinstance(value, dict) else missing
        if isinstance(expected, dict) and path.startswith("vars."):
            if (value is not missing and value != "") != expected.get("is_set"):
                return False
            continue
        same_type = type(value) is type(expected) or (_is_number(value) and _is_number(expected))
        if value is missing or not same_type or value != expected:
            return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
