"""What an agent submits with `--with-data`: parsed, bounded and checked before anything is written.

`parse` reads the payload (inline JSON or `@file`, at most 1 MiB) into a JSON object whose
numbers are all finite and whose nesting is at most `MAX_DEPTH` levels, so whatever is accepted
can also be journaled and replayed. `refuse_reserved` refuses the audit-event kinds upstream
koto reserves for its request store (`kind` at the top or under `fields`), on every template.
`validate` checks evidence against a state's `accepts`; `decision` checks a `koto decisions
record` payload. Every problem is an `invalid_submission` (exit 2) with `{field, reason}`
details, and nothing is journaled.
"""

from __future__ import annotations

from typing import Any

from kassette._codec import parse_json
from kassette.errors import InvalidArgumentError
from kassette.koto._errors import KotoError

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "RESERVED_KINDS",
    "decision",
    "parse",
    "refuse_reserved",
    "validate",
]

MAX_BYTES = 1 << 20
MAX_DEPTH = 32
RESERVED_KINDS = frozenset(
    {"ChildDispatched", "ChildRedelegated", "RequesterWoken", "RequesterRespawn"}
)
_RESERVED_PREFIX = "request_store."
_DECISION_FIELDS = {"choice", "rationale", "alternatives_considered"}


def _invalid(message: str, field: str = "") -> KotoError:
    return KotoError("invalid_submission", message, details=[{"field": field, "reason": message}])


def parse(data: str) -> dict[str, Any]:
    """The JSON object `data` holds (`@PATH` reads the file PATH)."""
    if data.startswith("@"):
        try:
            with open(data[1:], "rb") as file:
                raw = file.read(MAX_BYTES + 1)
        except OSError as exc:
            raise _invalid(f"cannot read {data[1:]}: {exc}") from exc
    else:
        raw = data.encode("utf-8", errors="surrogateescape")  # argv's bytes, as given
    if len(raw) > MAX_BYTES:
        raise _invalid(f"the data is larger than {MAX_BYTES} bytes (1 MiB)")
    try:
        value = parse_json(raw, "the data", max_depth=MAX_DEPTH)
    except InvalidArgumentError as exc:
        raise _invalid(str(exc)) from None
    problem = _problem(value)
    if problem is not None:
        raise _invalid(problem)
    if not isinstance(value, dict):
        raise _invalid("the data must be a JSON object of fields")
    return value


def _problem(value: Any) -> str | None:
    """Why `value` could not be journaled: nested more than MAX_DEPTH levels, or a string
    that is not Unicode text (a lone surrogate escape such as "\\ud800"). Walks without
    recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return "a string holds a lone surrogate, which is not Unicode text"
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return f"the data is nested more than {MAX_DEPTH} levels deep"
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
    return None


def refuse_reserved(payload: dict[str, Any]) -> None:
    """Refuse a payload whose `kind` (at the top or under `fields`) is a reserved event kind."""
    fields = payload.get("fields")
    for where, holder in (("kind", payload), ("fields.kind", fields)):
        kind = holder.get("kind") if isinstance(holder, dict) else None
        if isinstance(kind, str) and (kind in RESERVED_KINDS or kind.startswith(_RESERVED_PREFIX)):
            raise _invalid(
                f"reserved audit-event kind: {kind} ({where} names one of koto's own audit "
                "events, which cannot be submitted)",
                where,
            )


def validate(accepts: dict[str, Any], evidence: dict[str, Any]) -> list[dict[str, str]]:
    """Every problem with `evidence` against the state's `accepts`, as `{field, reason}`."""
    problems = []
    for key in sorted(evidence):
        if key == "gates":
            problems.append({"field": key, "reason": "'gates' is reserved for gate output"})
        elif key not in accepts:
            problems.append(
                {"field": key, "reason": f"unknown field (accepted: {', '.join(accepts)})"}
            )
    for key, declaration in accepts.items():
        if key not in evidence:
            if declaration.get("required"):
                problems.append({"field": key, "reason": "required field is missing"})
            continue
        value, field_type = evidence[key], declaration["field_type"]
        if field_type == "enum":
            if value not in declaration["values"] or not isinstance(value, str):
                problems.append(
                    {"field": key, "reason": f"must be one of: {', '.join(declaration['values'])}"}
                )
        elif field_type == "string" and not isinstance(value, str):
            problems.append({"field": key, "reason": "must be a string"})
        elif field_type == "number" and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            problems.append({"field": key, "reason": "must be a number"})
        elif field_type == "boolean" and not isinstance(value, bool):
            problems.append({"field": key, "reason": "must be true or false"})
    return sorted(problems, key=lambda p: p["field"])


def decision(payload: dict[str, Any]) -> dict[str, Any]:
    """The decision `koto decisions record` journals: `choice` and `rationale` (non-empty
    strings) and optionally `alternatives_considered` (a list of strings)."""
    problems = [
        {"field": key, "reason": f"unknown field (allowed: {', '.join(sorted(_DECISION_FIELDS))})"}
        for key in sorted(payload)
        if key not in _DECISION_FIELDS
    ]
    for key in ("choice", "rationale"):
        value = payload.get(key)
        if key not in payload:
            problems.append({"field": key, "reason": "missing required field"})  # upstream's
        elif not isinstance(value, str) or not value.strip():
            problems.append({"field": key, "reason": "must be a non-empty string"})
    alternatives = payload.get("alternatives_considered")
    if alternatives is not None and (
        not isinstance(alternatives, list) or not all(isinstance(a, str) for a in alternatives)
    ):
        problems.append({"field": "alternatives_considered", "reason": "must be a list of strings"})
    if problems:
        reasons = "; ".join(f"{p['field']}: {p['reason']}" for p in problems)
        raise KotoError("invalid_submission", f"invalid decision: {reasons}", details=problems)
    return {key: payload[key] for key in sorted(_DECISION_FIELDS) if key in payload}
