"""A session: a kassette run whose journal holds koto's entries, and what it says.

After kassette's `start` entries (one per command that writes; the first holds the template's
name, version and SHA-256, and the variables), the journal holds koto's own entry types:
`transitioned` / `directed_transition` / `rewound` (the state changes), `evidence_submitted`,
`gate_evaluated`, `instructions_delivered`, `decision_recorded`, `context_added` /
`context_removed`, `execution_anchor_adopted`; kassette's `cancel` ends it. The first `start`
entry also records the session's *execution anchor*: the directory `koto init` ran in, where
gates run. Nothing is ever rewritten: the current state, the evidence and decisions that
count and the context keys are derived by folding the entries in order (`SessionView`).

*Arrivals* form a stack: every transition pushes the state it arrives at and every rewind pops
one, so each rewind goes back one more arrival. The *epoch* is everything after the entry that
arrived at the current state: only evidence submitted in it counts, so evidence from before a
rewind stays in the journal but not in the decision (and so do recorded decisions).

Every command that writes opens a fenced kassette session (`open_run`: the storage lock, and
compare-and-swap appends), waiting a little for another writer, so two agents calling koto at
once cannot interleave their entries.
"""

from __future__ import annotations

import os
import re
from hashlib import sha256
from pathlib import Path
from typing import Any

from kassette._clock import Backoff, SystemClock
from kassette._journal import Journal
from kassette.core import Run, open_run, read_journal
from kassette.errors import KassetteError, RunLockedError, RunNotFoundError
from kassette.koto._errors import KotoError, from_kassette
from kassette.koto._gates import substitute
from kassette.koto._names import session_dir, validate_name
from kassette.koto._store import Sessions, session_name
from kassette.koto._template import Template

__all__ = [
    "SessionView",
    "append",
    "cancel",
    "expects",
    "init",
    "load",
    "open_session",
    "read",
    "rewind",
    "session_rows",
    "status",
]

LOCK_WAIT_SECONDS = 10.0  # KOTO_LOCK_TIMEOUT overrides
STATE_CHANGES = frozenset({"transitioned", "directed_transition", "rewound"})
_VARIABLE_VALUE = re.compile(r"[a-zA-Z0-9._/:@ \-]*")
_CANCEL_REASON = "cancelled by user"


# -- reading a session -------------------------------------------------------------------------


class SessionView:
    """What a session's journal says, folded in order.

    (A plain class, not a dataclass: `koto next` imports this on every call, and generating a
    dataclass costs more than everything this module does at import.)
    """

    def __init__(
        self, name: str, metadata: dict[str, Any], template: Template, initial: str
    ) -> None:
        self.name = name
        self.metadata = metadata
        self.template = template
        self.arrivals = [initial]
        self.evidence: dict[str, Any] = {}
        self.has_evidence = False
        self.decisions: list[dict[str, Any]] = []  # recorded in the current epoch
        self.delivered = False  # the current state's details went out since it was arrived at
        self.context: dict[str, dict[str, Any]] = {}
        self.cancelled = False
        anchor = metadata.get("execution_dir")
        # where gates run: recorded at init, or adopted by a later tick (None for a session
        # from before anchors that no tick has adopted yet)
        self.anchor: str | None = anchor if isinstance(anchor, str) else None

    @property
    def current(self) -> str:
        return self.arrivals[-1]

    @property
    def state(self) -> dict[str, Any]:
        return self.template.state(self.current)

    @property
    def is_terminal(self) -> bool:
        return bool(self.state.get("terminal"))

    def refuse_if_ended(self, *, at_terminal: bool = True) -> None:
        """`terminal_state` if the session was cancelled or (`at_terminal`) sits at a terminal
        state: the one check every verb that writes makes before and under the lock."""
        if self.cancelled:
            raise KotoError("terminal_state", f"session {self.name!r} was cancelled")
        if at_terminal and self.is_terminal:
            raise KotoError(
                "terminal_state", f"session {self.name!r} is at terminal state {self.current!r}"
            )

    def fold(self, entry: dict[str, Any]) -> None:
        kind = entry["type"]
        if kind in STATE_CHANGES:
            source, target = entry.get("from"), entry["to"]
            if kind == "rewound":
                if len(self.arrivals) > 1:
                    self.arrivals.pop()
                self.arrivals[-1] = target
            elif source is None:
                self.arrivals = [target]
            else:
                self.arrivals.append(target)
            self.evidence, self.has_evidence, self.decisions = {}, False, []  # a new epoch
            if kind == "rewound" or source != target:  # a self-loop repeats no details
                self.delivered = False
        elif kind == "evidence_submitted" and entry.get("state") == self.current:
            self.evidence.update(entry.get("fields") or {})
            self.has_evidence = True
        elif kind == "decision_recorded" and entry.get("state") == self.current:
            self.decisions.append(entry)
        elif kind == "instructions_delivered" and entry.get("state") == self.current:
            self.delivered = True
        elif kind == "context_added":
            self.context[entry["key"]] = {"hash": entry["hash"], "size": entry["size"]}
        elif kind == "context_removed":
            self.context.pop(entry["key"], None)
        elif kind == "cancel":
            self.cancelled = True
        elif kind == "execution_anchor_adopted" and isinstance(entry.get("anchor"), str):
            self.anchor = entry["anchor"]

    def values(self, home: Path) -> dict[str, str]:
        """What `{{NAME}}` stands for: the session's variables and the runtime names."""
        values = dict(self.metadata.get("variables") or {})
        values["SESSION_NAME"] = self.name
        values["SESSION_DIR"] = str(session_dir(home, self.name))
        return values


def read(store: Sessions, name: str) -> Journal:
    """The session's journal; `workflow_not_initialized` when there is none."""
    storage, run_id = store.journal(name)
    try:
        return read_journal(storage, run_id)
    except RunNotFoundError:
        raise KotoError(
            "workflow_not_initialized",
            f"no session named {name!r}: start one with `koto init {name} --template T.md`",
        ) from None
    except KassetteError as exc:
        raise from_kassette(exc, name) from exc


def load(store: Sessions, name: str, journal: Journal | None = None) -> SessionView:
    """The session's state, with its stored template checked against the recorded SHA-256."""
    journal = journal or read(store, name)
    start = journal.first_start or {}
    metadata = start.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("template"), dict):
        raise KotoError(
            "persistence_error", f"the journal of {name!r} is not a koto session (no template)"
        )
    template = load_template(store, name, metadata["template"])
    view = SessionView(name, metadata, template, template.initial_state)
    for entry in journal.entries:
        view.fold(entry)
    if view.current not in template.states:
        raise KotoError(
            "template_error",
            f"session {name!r} is in state {view.current!r}, unknown to its template",
        )
    return view


def load_template(store: Sessions, name: str, recorded: dict[str, Any]) -> Template:
    """The compiled template stored with the session, if it still hashes as at init."""
    expected, path = recorded.get("sha256"), recorded.get("file")
    if not isinstance(expected, str) or not isinstance(path, str):
        raise KotoError("persistence_error", f"session {name!r} records no template hash")
    data = store.read_file(name, path)
    where = store.locate(name, path)
    if data is None:
        raise KotoError("template_error", f"the stored template of {name!r} is missing: {where}")
    actual = sha256(data).hexdigest()
    if actual != expected:
        raise KotoError(
            "template_error",
            f"template hash mismatch: session {name!r} was started with {expected}, but the "
            f"stored copy {where} hashes to {actual}; it was changed after init",
            extra={"recorded": expected, "actual": actual},
        )
    try:
        return Template.from_json(data)
    except ValueError as exc:
        raise KotoError(
            "template_error", f"the stored template {where} is unreadable: {exc}"
        ) from exc


# -- writing a session -------------------------------------------------------------------------


def open_session(store: Sessions, name: str) -> Run:
    """A new fenced session of the run; waits up to LOCK_WAIT_SECONDS for another writer."""
    storage, run_id = store.journal(name)
    backoff = Backoff(SystemClock(), 0.02, most=0.2, seconds=_lock_wait())
    while True:
        try:
            run = open_run(storage, run_id)
        except RunLockedError as exc:
            if not backoff.wait():
                raise KotoError(
                    "concurrent_access",
                    f"session {name!r} is busy: another koto command holds it ({exc}); retry",
                ) from exc
            continue
        except KassetteError as exc:
            raise from_kassette(exc, name) from exc
        if run.session == 1:  # the session was removed since we read it: we just created it
            run.close()
            store.remove(name)
            raise KotoError("workflow_not_initialized", f"session {name!r} was removed")
        return run


def _lock_wait() -> float:
    try:
        return max(0.0, float(os.environ.get("KOTO_LOCK_TIMEOUT", LOCK_WAIT_SECONDS)))
    except ValueError:
        return LOCK_WAIT_SECONDS


def append(run: Run, kind: str, **fields: Any) -> dict[str, Any]:
    """Journal one koto entry in the run's session; returns the entry as journaled.

    Goes through the same fenced compare-and-swap append as every kassette entry.
    """
    try:
        return run.append_entry(kind, fields)
    except KassetteError as exc:
        raise from_kassette(exc, session_name(run.run_id)) from exc


# -- init ----------------------------------------------------------------------------------------


def init(
    store: Sessions,
    name: str,
    template: Template,
    source: str,
    assignments: list[str],
    *,
    execution_dir: str | None = None,
) -> dict[str, Any]:
    """Start session `name` from the compiled `template` (read from the file `source`);
    returns `{name, state}`. `execution_dir` (default: the working directory) becomes the
    session's execution anchor."""
    validate_name(name)
    anchor = os.path.realpath(execution_dir or os.getcwd())
    if not os.path.isdir(anchor):
        raise KotoError("usage", f"--execution-dir {execution_dir!r} is not a directory")
    variables = resolve_variables(template, assignments)
    storage, run_id = store.journal(name)
    try:
        exists = storage.read(run_id) is not None
    except KassetteError as exc:
        raise from_kassette(exc, name) from exc
    if exists:
        raise _collision(name)
    file = f"template-{template.sha256}.json"
    store.write_file(name, file, template.text)
    metadata = {
        "koto": 1,
        "workflow": name,
        "template": {
            "name": template.name,
            "version": template.data["version"],
            "sha256": template.sha256,
            "file": file,
            "source": str(Path(source).absolute()),
        },
        "variables": variables,
        "execution_dir": anchor,
    }
    try:
        run = open_run(storage, run_id, input=metadata, version=template.data["version"])
    except KassetteError as exc:  # another init of the same name won the race
        raise _collision(name) from exc
    with run:
        if run.session != 1:
            raise _collision(name)
        append(run, "transitioned", **{"from": None, "to": template.initial_state})
    return {"name": name, "state": template.initial_state}


def _collision(name: str) -> KotoError:
    return KotoError(
        "already_exists",
        f"session {name!r} already exists; run `koto session cleanup {name}` or "
        f"`koto cancel {name} --cleanup` first",
    )


def resolve_variables(template: Template, assignments: list[str]) -> dict[str, str]:
    """Every declared variable's value: given with `--var K=V`, else its default, else ""."""
    declared = template.variables
    given: dict[str, str] = {}
    problems = []
    for assignment in assignments:
        key, equals, value = assignment.partition("=")
        if not equals:
            problems.append(f"--var {assignment!r} is not KEY=VALUE")
        elif key not in declared:
            known = ", ".join(declared) or "none"
            problems.append(f"unknown variable {key!r} (declared: {known})")
        elif key in given:
            problems.append(f"variable {key!r} is given twice")
        elif not _VARIABLE_VALUE.fullmatch(value):
            problems.append(
                f"the value of {key} has characters outside a-z A-Z 0-9 . _ / : @ - and space "
                "(shell metacharacters, quotes and newlines are refused)"
            )
        else:
            given[key] = value
    missing = [
        k
        for k, v in declared.items()
        if v.get("required") and "default" not in v and k not in given
    ]
    if missing:
        problems.append(f"missing required variable(s): {', '.join(missing)}")
    if problems:
        raise KotoError("invalid_variable", "; ".join(problems))
    return {k: given.get(k, str(v.get("default", ""))) for k, v in declared.items()}


# -- rewind, cancel, status ----------------------------------------------------------------------


def rewind(store: Sessions, name: str) -> dict[str, Any]:
    """Go back one arrival: append `rewound`; earlier evidence stays in the journal."""

    def check(view: SessionView) -> None:
        view.refuse_if_ended(at_terminal=False)
        if len(view.arrivals) < 2:
            raise KotoError(
                "at_initial_state",
                f"session {name!r} is already at its initial state {view.current!r}; cannot rewind",
            )

    check(load(store, validate_name(name)))
    with open_session(store, name) as run:
        view = load(store, name, run.journal)
        check(view)
        target = view.arrivals[-2]
        append(run, "rewound", **{"from": view.current, "to": target})
    return {"name": name, "state": target}


def cancel(store: Sessions, name: str, *, cleanup: bool = False) -> dict[str, Any]:
    """End the session (kassette's `cancel` entry); `cleanup` also deletes it."""
    load(store, validate_name(name)).refuse_if_ended()
    with open_session(store, name) as run:
        view = load(store, name, run.journal)
        view.refuse_if_ended()
        try:
            run.cancel(_CANCEL_REASON)
        except KassetteError as exc:
            raise from_kassette(exc, name) from exc
    if cleanup:
        store.remove(name)
    return {"name": name, "state": view.current, "cancelled": True, "cleaned_up": cleanup}


def status(store: Sessions, name: str) -> dict[str, Any]:
    """The session's state and, unless it ended, what `next` would ask for. Writes nothing."""
    journal = read(store, validate_name(name))
    metadata = (journal.first_start or {}).get("metadata") or {}
    recorded = metadata.get("template") or {}
    result: dict[str, Any] = {
        "name": name,
        "template_hash": recorded.get("sha256"),
        "template_path": store.locate(name, str(recorded.get("file"))),
        "template_source": recorded.get("source"),
    }
    try:
        view = load(store, name, journal)
    except KotoError as exc:
        if "recorded" not in exc.extra:
            raise
        result["template_hash_mismatch"] = exc.extra
        return result
    result.update(
        current_state=view.current,
        is_terminal=view.is_terminal,
        cancelled=view.cancelled,
        execution_dir=view.anchor,
    )
    if view.is_terminal and view.state.get("failure"):
        result["failure"] = True
    if not view.is_terminal and not view.cancelled:
        state = view.state
        values = view.values(store.home)
        result["directive"] = substitute(state["directive"], values)
        if "details" in state:
            result["details"] = substitute(state["details"], values)
        result["expects"] = expects(state) if state.get("accepts") else None
    return result


def session_rows(store: Sessions) -> list[dict[str, Any]]:
    """One row per session for `koto session list`."""
    rows = []
    for name in store.names():
        row: dict[str, Any] = {"id": name}
        try:
            journal = read(store, name)
            metadata = (journal.first_start or {}).get("metadata") or {}
            first = journal.entries[0] if journal.entries else {}
            row.update(
                created_at=first.get("timestamp"),
                template_hash=(metadata.get("template") or {}).get("sha256"),
                template_name=(metadata.get("template") or {}).get("name"),
            )
            view = load(store, name, journal)
            row.update(state=view.current, is_terminal=view.is_terminal, cancelled=view.cancelled)
        except KotoError as exc:
            if exc.code == "workflow_not_initialized":
                continue  # removed while we listed
            row["error"] = exc.message
        rows.append(row)
    return rows


def expects(state: dict[str, Any]) -> dict[str, Any]:
    fields = {}
    for name, declaration in state.get("accepts", {}).items():
        item: dict[str, Any] = {
            "type": declaration["field_type"],
            "required": declaration["required"],
        }
        for key in ("values", "description"):
            if key in declaration:
                item[key] = declaration[key]
        fields[name] = item
    result: dict[str, Any] = {"event_type": "evidence_submitted", "fields": fields}
    options = [
        {"target": t["target"], "when": t["when"]}
        for t in state.get("transitions", [])
        if "when" in t
    ]
    if options:
        result["options"] = options
    return result
