"""The template compiler's checks of single fields: variables, evidence, gates, transitions.

`Checks` is the half of the compiler that validates what one front-matter field declares and
builds its compiled form, plus the whole-template checks run on the compiled states
(reachability, `{{VARIABLE}}` references). Every problem is recorded with its line through
`problem`; the compiler in `kassette.koto._compiler` reports them all at once.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Collection
from typing import Any

from kassette.koto._errors import KotoError
from kassette.koto._frontmatter import Mapping, Sequence
from kassette.koto._gates import REFERENCE
from kassette.koto._names import validate_key

__all__ = ["DEFAULT_GATE_TIMEOUT", "FIELD_TYPES", "GATE_OUTPUTS", "RUNTIME_VARIABLES", "Checks"]

FIELD_TYPES = ("enum", "string", "number", "boolean")
DEFAULT_GATE_TIMEOUT = 30
# what each gate type reports, and so what `when: {gates.<name>.<field>: ...}` may test
GATE_OUTPUTS: dict[str, dict[str, type]] = {
    "command": {"exit_code": int, "error": str},
    "context-exists": {"exists": bool, "error": str},
    "context-matches": {"matches": bool, "error": str},
}
_GATE_FIELDS = {
    "command": {"type", "command", "timeout"},
    "context-exists": {"type", "key"},
    "context-matches": {"type", "key", "pattern"},
}
RUNTIME_VARIABLES = ("SESSION_DIR", "SESSION_NAME")
_TRANSITION_FIELDS = {"target", "when"}
_ACCEPT_FIELDS = {"type", "required", "values", "description"}
_VARIABLE_FIELDS = {"description", "required", "default"}
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_VARIABLE_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


class Checks:
    """Field checks for the compiler; subclasses provide `problem`, `warn` and the state."""

    state_lines: dict[str, int]
    references: list[tuple[int, str]]  # (line, variable) of every {{VARIABLE}} met
    variable_names: set[str]  # the declared variables, which `vars.<NAME>` may test

    def problem(self, line: int, message: str) -> None:
        raise NotImplementedError

    def warn(self, line: int, message: str) -> None:
        raise NotImplementedError

    def unknown_fields(self, mapping: Mapping, known: Collection[str], where: str = "") -> None:
        """Report every key of `mapping` that is not in `known`, at its own line."""
        for key in mapping:
            if key not in known:
                self.problem(
                    mapping.lines[key],
                    f"unknown field {key!r}{where} (known: {', '.join(sorted(known))})",
                )

    def text_field(self, mapping: Mapping, key: str, *, required: bool) -> str:
        value = mapping.get(key)
        if value is None:
            if required:
                self.problem(mapping.line, f"missing required field {key!r}")
            return ""
        if not isinstance(value, str) or not value.strip():
            hint = ' (quote it: "1.0")' if isinstance(value, int | float) else ""
            self.problem(mapping.lines[key], f"{key!r} must be a non-empty string{hint}")
            return ""
        return value

    def variables(self, front: Mapping) -> dict[str, Any]:
        spec = front.get("variables")
        if spec is None:
            return {}
        if not isinstance(spec, Mapping):
            self.problem(front.lines["variables"], "'variables' must be a mapping")
            return {}
        variables: dict[str, Any] = {}
        for name, declaration in spec.items():
            line = spec.lines[name]
            if not _VARIABLE_NAME.fullmatch(name):
                self.problem(
                    line,
                    f"invalid variable name {name!r}: use A-Z, 0-9 and '_', starting with a letter",
                )
            if name in RUNTIME_VARIABLES:
                self.problem(line, f"{name} is set by koto and cannot be declared")
            variable: dict[str, Any] = {"required": False}
            if isinstance(declaration, Mapping):
                self.unknown_fields(declaration, _VARIABLE_FIELDS, f" in variable {name!r}")
                required = declaration.get("required", False)
                if not isinstance(required, bool):
                    self.problem(declaration.lines["required"], "'required' must be true or false")
                variable["required"] = required is True
                if isinstance(declaration.get("description"), str):
                    variable["description"] = declaration["description"]
                default = declaration.get("default")
            else:
                default = declaration  # the simple form: `NAME: default`
            if default is not None:
                if isinstance(default, dict | list):
                    self.problem(line, f"the default of {name!r} must be a string")
                else:
                    variable["default"] = _scalar_text(default)
            variables[name] = variable
        return variables

    def accepts(self, state: str, spec: Mapping) -> dict[str, Any]:
        accepts_spec = spec.get("accepts")
        if accepts_spec is None:
            return {}
        if not isinstance(accepts_spec, Mapping) or not accepts_spec:
            self.problem(spec.lines["accepts"], "'accepts' must be a non-empty mapping of fields")
            return {}
        accepts: dict[str, Any] = {}
        for field, declaration in accepts_spec.items():
            line = accepts_spec.lines[field]
            if not _FIELD_NAME.fullmatch(field) or field in ("gates", "vars"):
                self.problem(line, f"invalid evidence field name {field!r}")
            if not isinstance(declaration, Mapping):
                self.problem(line, f"field {field!r} must be a mapping with at least 'type'")
                continue
            self.unknown_fields(declaration, _ACCEPT_FIELDS, f" in accepted field {field!r}")
            field_type = declaration.get("type")
            if field_type not in FIELD_TYPES:
                self.problem(
                    declaration.lines.get("type", line),
                    f"field {field!r} has type {field_type!r}; use one of {', '.join(FIELD_TYPES)}",
                )
            compiled: dict[str, Any] = {"field_type": field_type}
            required = declaration.get("required", False)
            if not isinstance(required, bool):
                self.problem(declaration.lines["required"], "'required' must be true or false")
            compiled["required"] = required is True
            values = declaration.get("values")
            if field_type == "enum":
                if (
                    not isinstance(values, list)
                    or not values
                    or not all(isinstance(v, str) for v in values)
                ):
                    self.problem(
                        declaration.lines.get("values", line),
                        f"enum field {field!r} needs a non-empty list of string 'values'",
                    )
                else:
                    compiled["values"] = list(values)
            elif values is not None:
                self.problem(
                    declaration.lines["values"],
                    f"'values' applies to enum fields only, and {field!r} is a {field_type}",
                )
            if isinstance(declaration.get("description"), str):
                compiled["description"] = declaration["description"]
            accepts[field] = compiled
        return accepts

    def gates(self, state: str, spec: Mapping) -> dict[str, Any]:
        gates_spec = spec.get("gates")
        if gates_spec is None:
            return {}
        if not isinstance(gates_spec, Mapping) or not gates_spec:
            self.problem(spec.lines["gates"], "'gates' must be a non-empty mapping of gates")
            return {}
        gates: dict[str, Any] = {}
        for name, declaration in gates_spec.items():
            line = gates_spec.lines[name]
            if not _FIELD_NAME.fullmatch(name):
                self.problem(line, f"invalid gate name {name!r}: use letters, digits, '_', '-'")
            if not isinstance(declaration, Mapping):
                self.problem(line, f"gate {name!r} must be a mapping with 'type'")
                continue
            gate_type = declaration.get("type")
            if gate_type not in _GATE_FIELDS:
                self.problem(
                    declaration.lines.get("type", line),
                    f"gate {name!r} has type {gate_type!r}; use one of {', '.join(_GATE_FIELDS)}",
                )
                continue
            self.unknown_fields(
                declaration, _GATE_FIELDS[gate_type], f" in {gate_type} gate {name!r}"
            )
            gate: dict[str, Any] = {"type": gate_type}
            required = ["command"] if gate_type == "command" else ["key"]
            required += ["pattern"] if gate_type == "context-matches" else []
            for key in required:
                value = declaration.get(key)
                if not isinstance(value, str) or not value.strip():
                    self.problem(
                        declaration.lines.get(key, line), f"gate {name!r} needs a string {key!r}"
                    )
                    continue
                gate[key] = value
                for variable in REFERENCE.findall(value):
                    self.references.append((declaration.lines[key], variable))
            if gate_type == "command":
                timeout = declaration.get("timeout", DEFAULT_GATE_TIMEOUT)
                if type(timeout) is not int or timeout < 0:
                    self.problem(declaration.lines["timeout"], "'timeout' is whole seconds >= 0")
                    timeout = DEFAULT_GATE_TIMEOUT
                gate["timeout"] = timeout or DEFAULT_GATE_TIMEOUT
            if "pattern" in gate:
                try:
                    re.compile(gate["pattern"])
                except re.error as exc:
                    self.problem(
                        declaration.lines["pattern"],
                        f"gate {name!r} has an invalid regular expression: {exc}",
                    )
            if "key" in gate and not REFERENCE.search(gate["key"]):
                try:
                    validate_key(gate["key"])
                except KotoError as exc:
                    self.problem(declaration.lines["key"], exc.message)
            gates[name] = gate
        return gates

    def transitions(
        self,
        state: str,
        spec: Mapping,
        declared: set[str],
        accepts: dict[str, Any],
        gates: dict[str, Any],
    ) -> list[dict[str, Any]]:
        transitions_spec = spec.get("transitions")
        if transitions_spec is None:
            return []
        if not isinstance(transitions_spec, Sequence):
            self.problem(
                spec.lines["transitions"], "'transitions' must be a list of {target, when} items"
            )
            return []
        transitions: list[dict[str, Any]] = []
        conditional: list[tuple[int, dict[str, Any]]] = []
        unconditional_line = 0
        for index, item in enumerate(transitions_spec):
            line = transitions_spec.lines[index]
            if not isinstance(item, Mapping):
                self.problem(line, "a transition is a mapping: {target: STATE, when: {...}}")
                continue
            self.unknown_fields(item, _TRANSITION_FIELDS, f" in a transition of {state!r}")
            target = item.get("target")
            if not isinstance(target, str) or target not in declared:
                self.problem(
                    item.lines.get("target", line),
                    f"unknown target {target!r} in the transitions of {state!r}",
                )
                continue
            transition: dict[str, Any] = {"target": target}
            if "when" in item:
                when = item["when"]
                where = item.lines["when"]
                if not isinstance(when, Mapping) or not when:
                    self.problem(where, "'when' must be a non-empty mapping of conditions")
                    continue
                for key, value in when.items():
                    self.check_condition(state, key, value, when.lines[key], accepts, gates)
                transition["when"] = dict(when)
                for earlier_line, earlier in conditional:
                    if not _exclusive(earlier, transition["when"]):
                        self.problem(
                            where,
                            f"this transition to {target!r} and the one on line "
                            f"{earlier_line} can both match: make their 'when' "
                            "differ in a field they share",
                        )
                conditional.append((where, transition["when"]))
            elif unconditional_line:
                self.problem(
                    line,
                    f"state {state!r} has a second transition without 'when' "
                    f"(the first is on line {unconditional_line})",
                )
            else:
                unconditional_line = line
            transitions.append(transition)
        return transitions

    def check_condition(
        self,
        state: str,
        key: str,
        value: Any,
        line: int,
        accepts: dict[str, Any],
        gates: dict[str, Any],
        where: str = "when",
    ) -> None:
        if key.startswith("vars."):
            name = key[len("vars.") :]
            is_set = (
                isinstance(value, Mapping)
                and list(value) == ["is_set"]
                and isinstance(value["is_set"], bool)
            )
            # `{is_set: B}` may test a variable the template does not declare, as upstream's
            # templates do (an undeclared variable is never set); a value it must equal may not
            if name not in self.variable_names and name not in RUNTIME_VARIABLES and not is_set:
                self.problem(line, f"bad {where}: {key!r} names no declared variable")
            elif not isinstance(value, str) and not is_set:
                self.problem(
                    line, f"bad {where}: {key} is a string or {{is_set: true|false}}, not {value!r}"
                )
            return
        if key.startswith("gates."):
            parts = key.split(".")
            if len(parts) != 3:
                self.problem(line, f"bad {where}: {key!r} must be gates.<gate>.<field>")
                return
            gate = gates.get(parts[1])
            if gate is None:
                if where == "skip_if":
                    self.warn(
                        line,
                        f"W-SKIP-GATE-ABSENT: skip_if tests {key}, but state {state!r} has no "
                        f"gate {parts[1]!r}, so this condition never holds",
                    )
                else:
                    self.problem(line, f"bad when: state {state!r} has no gate {parts[1]!r}")
                return
            outputs = GATE_OUTPUTS[gate["type"]]
            if parts[2] not in outputs:
                self.problem(
                    line,
                    f"bad {where}: a {gate['type']} gate reports "
                    f"{', '.join(outputs)}, not {parts[2]!r}",
                )
            elif type(value) is not outputs[parts[2]]:
                self.problem(
                    line, f"bad {where}: {key} is a {outputs[parts[2]].__name__}, not {value!r}"
                )
            return
        field, _, rest = key.partition(".")
        declaration = accepts.get(field)
        if declaration is None:
            self.problem(
                line,
                f"bad {where}: {key!r} is neither gates.<gate>.<field>, vars.<NAME> nor a field "
                f"that state {state!r} accepts",
            )
            return
        field_type = declaration["field_type"]
        if rest:
            self.problem(line, f"bad {where}: {field!r} is a {field_type} and has no sub-fields")
        elif field_type == "enum" and value not in declaration.get("values", []):
            self.problem(line, f"bad {where}: {value!r} is not one of the values of {field!r}")
        elif not _matches_type(field_type, value):
            self.problem(line, f"bad {where}: {field!r} is a {field_type}, not {value!r}")

    def skip_if(
        self,
        state: str,
        spec: Mapping,
        accepts: dict[str, Any],
        gates: dict[str, Any],
        transitions: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The state's `skip_if`: conditions that, when they all hold, skip the state."""
        skip = spec.get("skip_if")
        if skip is None:
            return {}
        line = spec.lines["skip_if"]
        if not isinstance(skip, Mapping) or not skip:
            self.problem(line, "'skip_if' must be a non-empty mapping of conditions")
            return {}
        if spec.get("terminal") is True:
            self.problem(line, f"E-SKIP-TERMINAL: terminal state {state!r} cannot have skip_if")
            return {}
        if not transitions:
            self.problem(line, f"E-SKIP-NO-TRANSITIONS: state {state!r} has nowhere to skip to")
            return {}
        for key, value in skip.items():
            self.check_condition(state, key, value, skip.lines[key], accepts, gates, "skip_if")
        decided = [t for t in transitions if "when" in t and _decided_by(t["when"], skip)]
        selected = [t["target"] for t in decided if _selected_by(t["when"], skip)]
        if len(selected) > 1:
            self.problem(
                line,
                f"E-SKIP-AMBIGUOUS: skip_if of {state!r} selects {len(selected)} transitions "
                f"({', '.join(selected)}): make it select one",
            )
        undecided = [t for t in transitions if "when" not in t or t not in decided]
        if not selected and not undecided:
            self.problem(
                line,
                f"skip_if of {state!r} selects no transition and the state has no fallback "
                "(a transition without 'when')",
            )
        return dict(skip)

    # -- whole-template checks -------------------------------------------------------------

    def check_graph(self, data: dict[str, Any]) -> None:
        states: dict[str, dict[str, Any]] = data["states"]
        initial = data["initial_state"]
        edges = {
            name: [t["target"] for t in s.get("transitions", [])] for name, s in states.items()
        }
        reachable = _reach(initial, edges)
        for name in states:
            if name not in reachable:
                self.problem(
                    self.state_lines.get(name, 0),
                    f"state {name!r} is unreachable from the initial state {initial!r}",
                )
        terminals = [name for name, s in states.items() if s.get("terminal")]
        if not terminals:
            self.problem(0, "the template has no terminal state")
            return
        backwards: dict[str, list[str]] = {name: [] for name in states}
        for source, targets in edges.items():
            for target in targets:
                backwards[target].append(source)
        finishing: set[str] = set()
        for terminal in terminals:
            finishing |= _reach(terminal, backwards)
        for name in states:
            if name in reachable and name not in finishing:
                self.problem(
                    self.state_lines.get(name, 0),
                    f"no terminal state is reachable from state {name!r}",
                )

    def check_references(self, data: dict[str, Any]) -> None:
        known = set(data["variables"]) | set(RUNTIME_VARIABLES)
        for line, variable in self.references:
            if variable not in known:
                self.problem(
                    line, f"undeclared variable {{{{{variable}}}}}: declare it under 'variables'"
                )


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _matches_type(field_type: str, value: Any) -> bool:
    if field_type in ("enum", "string"):
        return isinstance(value, str)
    if field_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, bool)


def _decided_by(when: dict[str, Any], skip: dict[str, Any]) -> bool:
    """Whether a skip's conditions alone decide if `when` matches: every key `when` tests is
    one of theirs, or an evidence field (a state skipped on arrival has no evidence)."""
    return all(key in skip or "." not in key for key in when)


def _selected_by(when: dict[str, Any], skip: dict[str, Any]) -> bool:
    return all(key in skip and skip[key] == value for key, value in when.items())


def _exclusive(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Two `when`s can never both match when they want different values for a shared key."""
    return any(key in second and second[key] != value for key, value in first.items())


def _reach(start: str, edges: dict[str, list[str]]) -> set[str]:
    seen = {start}
    queue = deque([start])
    while queue:
        for target in edges.get(queue.popleft(), []):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen
