"""The template compiler: a template's source, both forms, to its compiled JSON.

`Compiler.compile` splits the front-matter from the Markdown body, reads the front-matter
(`kassette.koto._frontmatter`), finds each state's `## name` section (headings inside code
fences do not count; in the full form only headings naming a declared state start a section)
and builds the compiled states of the full form or of the simple form. Field checks come from
`kassette.koto._checks`. Every problem is collected with its line, and reported together.

Some things are warnings, printed by the `koto` command on stderr, not errors: W3, a terminal
state named like a failure (`block`, `fail`, `error`) without `failure: true`;
W-SKIP-GATE-ABSENT, a `skip_if` condition on a gate the state does not declare; and, for
`koto init` or `--allow-legacy-gates`, a *legacy-gate* state: one with gates that no `when` or
`skip_if` condition routes on (`gates.<gate>.<field>`), which just blocks until its gates pass
(the warning says `legacy behavior`). `koto template compile` refuses such a state unless given
`--allow-legacy-gates`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kassette.koto._checks import GATE_OUTPUTS, Checks
from kassette.koto._frontmatter import Mapping, YamlError, parse
from kassette.koto._gates import REFERENCE
from kassette.koto._template import (
    FORMAT_VERSION,
    SIMPLE_FORM_FIELD,
    Template,
    TemplateError,
    read_source,
)

__all__ = ["Compiler", "LegacyGates", "compile_template", "compile_text"]

LegacyGates = Literal["refuse", "warn", "allow"]

_TOP_FIELDS = {"name", "version", "description", "initial_state", "variables", "states"}
_STATE_FIELDS = {"transitions", "terminal", "failure", "accepts", "gates", "skip_if"}
_FAILURE_WORDS = ("block", "fail", "error")
_STATE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_HEADING = re.compile(r"##[ \t]+(.+?)[ \t]*#*[ \t]*")
_FENCE = re.compile(r"[ ]{0,3}(```|~~~)")
_DETAILS = "<!-- details -->"
_TRANSITIONS_LINE = re.compile(r"\s*\*\*Transitions\*\*\s*:\s*(.*?)\s*")


@dataclass
class _Section:
    name: str
    line: int
    body: list[tuple[int, str]]  # (line number, text)


def compile_template(path: str | Path, *, legacy_gates: LegacyGates = "refuse") -> Template:
    """Compile the template file at `path`; `TemplateError` lists every problem found.

    `legacy_gates` says what a state whose gates no `when` routes on is: an error ("refuse"),
    a warning ("warn"), or fine ("allow")."""
    try:
        text = read_source(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateError(str(path), [(0, f"cannot read template: {exc}")]) from exc
    return compile_text(text, str(path), legacy_gates=legacy_gates)


def compile_text(
    text: str, path: str = "<template>", *, legacy_gates: LegacyGates = "refuse"
) -> Template:
    """Compile a template's source text; `path` names it in errors and warnings."""
    compiler = Compiler(path, legacy_gates=legacy_gates)
    return compiler.compile(text.lstrip("\ufeff").replace("\r\n", "\n"))


class Compiler(Checks):
    def __init__(self, path: str, *, legacy_gates: LegacyGates = "refuse") -> None:
        self.path = path
        self.legacy_gates = legacy_gates
        self.problems: list[tuple[int, str]] = []
        self.warnings: list[tuple[int, str]] = []
        self.state_lines: dict[str, int] = {}
        self.references: list[tuple[int, str]] = []  # (line, variable) of every {{VARIABLE}}
        self.variable_names: set[str] = set()

    def problem(self, line: int, message: str) -> None:
        self.problems.append((line, message))

    def warn(self, line: int, message: str) -> None:
        self.warnings.append((line, message))

    def fail(self) -> TemplateError:
        return TemplateError(self.path, self.problems)

    # -- the two source forms ----------------------------------------------------------------

    def compile(self, text: str) -> Template:
        lines = text.split("\n")
        if lines[0].rstrip() != "---":
            self.problem(1, "a template starts with YAML front-matter between '---' lines")
            raise self.fail()
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), 0)
        if not end:
            self.problem(1, "the front-matter opened on line 1 is never closed with '---'")
            raise self.fail()
        try:
            front = parse("\n".join(lines[1:end]), first_line=2)
        except YamlError as exc:
            self.problem(exc.line, exc.message)
            raise self.fail() from None
        if not isinstance(front, Mapping):
            self.problem(2, "the front-matter must be a mapping of 'key: value' lines")
            raise self.fail()
        body = [(end + 2 + i, line) for i, line in enumerate(lines[end + 1 :])]
        self.unknown_fields(front, _TOP_FIELDS)
        data: dict[str, Any] = {"format_version": FORMAT_VERSION}
        data["name"] = self.text_field(front, "name", required=True)
        data["version"] = self.text_field(front, "version", required=True)
        description = self.text_field(front, "description", required=False)
        if description:
            data["description"] = description.strip()
        data["variables"] = self.variables(front)
        self.variable_names = set(data["variables"])
        if "states" in front:
            data["states"], data["initial_state"] = self.full_form(front, body)
        else:
            data["states"], data["initial_state"] = self.simple_form(front, body)
        self.check_references(data)
        if self.problems:
            raise self.fail()
        self.check_graph(data)  # needs every target to be a state
        if self.problems:
            raise self.fail()
        compiled = Template.from_data(data)
        compiled.warnings = tuple(
            f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}"
            for line, message in sorted(self.warnings)
        )
        return compiled

    def full_form(self, front: Mapping, body: list[tuple[int, str]]) -> tuple[dict[str, Any], str]:
        states_spec = front["states"]
        if not isinstance(states_spec, Mapping) or not states_spec:
            self.problem(front.lines["states"], "'states' must be a non-empty mapping")
            raise self.fail()
        initial = self.text_field(front, "initial_state", required=True)
        for name in states_spec:
            self.state_lines[name] = states_spec.lines[name]
            if not _STATE_NAME.fullmatch(name):
                self.problem(
                    states_spec.lines[name],
                    f"invalid state name {name!r}: use letters, digits, '_' and '-'",
                )
        if initial and initial not in states_spec:
            self.problem(
                front.lines["initial_state"], f"initial_state {initial!r} is not a declared state"
            )
        sections = self.sections(body, set(states_spec))
        states: dict[str, Any] = {}
        for name, spec in states_spec.items():
            line = states_spec.lines[name]
            if spec is None:
                spec = Mapping(line)
            if not isinstance(spec, Mapping):
                self.problem(line, f"state {name!r} must be a mapping")
                continue
            self.unknown_fields(spec, _STATE_FIELDS, f" in state {name!r}")
            state = self.section_text(name, line, sections.get(name))
            accepts = self.accepts(name, spec)
            gates = self.gates(name, spec)
            transitions = self.transitions(name, spec, set(states_spec), accepts, gates)
            skip = self.skip_if(name, spec, accepts, gates, transitions)
            terminal = spec.get("terminal", False)
            if not isinstance(terminal, bool):
                self.problem(spec.lines["terminal"], "'terminal' must be true or false")
            if terminal and transitions:
                self.problem(
                    spec.lines["terminal"], f"terminal state {name!r} may not have transitions"
                )
            if not terminal and not transitions:
                self.problem(
                    line,
                    f"state {name!r} has no transitions and is not terminal "
                    "(a dead end): add transitions or 'terminal: true'",
                )
            failure = spec.get("failure", False)
            if not isinstance(failure, bool):
                self.problem(spec.lines["failure"], "'failure' must be true or false")
            elif failure and terminal is not True:
                self.problem(
                    spec.lines["failure"],
                    f"'failure' marks a terminal state, and {name!r} is not terminal",
                )
            if terminal is True and failure is not True and _sounds_like_failure(name):
                self.warn(
                    line,
                    f"W3: terminal state {name!r} is named like a failure but does not set "
                    "'failure: true' (set it, or rename the state if it is a success)",
                )
            if gates:
                self.check_gate_routing(name, spec, gates, transitions, skip)
            if terminal is True:
                state["terminal"] = True
            if terminal is True and failure is True:
                state["failure"] = True
            if transitions:
                state["transitions"] = transitions
            if accepts:
                state["accepts"] = accepts
            if gates:
                state["gates"] = gates
            if skip:
                state["skip_if"] = skip
            states[name] = state
        return states, initial or ""

    def check_gate_routing(
        self,
        name: str,
        spec: Mapping,
        gates: dict[str, Any],
        transitions: list[dict[str, Any]],
        skip: dict[str, Any],
    ) -> None:
        """A legacy-gate state (gates that no `when` or `skip_if` routes on): an error unless
        allowed."""
        conditions = [key for t in transitions for key in t.get("when", {})] + list(skip)
        routed = any(key.startswith("gates.") for key in conditions)
        if routed or self.legacy_gates == "allow":
            return
        fields = ", ".join(
            f"gates.{gate}.{field}" for gate in gates for field in GATE_OUTPUTS[gates[gate]["type"]]
        )
        message = (
            f"D5: state {name!r} has gates ({', '.join(gates)}) that no 'when' condition routes on "
            f"(legacy gates): add a 'when' on {fields}, or allow legacy gates"
        )
        if self.legacy_gates == "warn":
            self.warn(
                spec.lines["gates"],
                message + "; legacy behavior: they only block until they pass",
            )
        else:
            self.problem(spec.lines["gates"], message + " with --allow-legacy-gates")

    def simple_form(
        self, front: Mapping, body: list[tuple[int, str]]
    ) -> tuple[dict[str, Any], str]:
        sections = self.sections(body, None)
        if not sections:
            self.problem(
                0,
                "no states: declare 'states' in the front-matter or write one "
                "'## state' section per state",
            )
            raise self.fail()
        targets: dict[str, tuple[int, list[str]]] = {}
        for section in sections.values():
            self.state_lines[section.name] = section.line
            if not _STATE_NAME.fullmatch(section.name):
                self.problem(
                    section.line,
                    f"invalid state name {section.name!r}: use letters, digits, '_' and '-'",
                )
            kept = []
            for number, text in section.body:
                match = _TRANSITIONS_LINE.fullmatch(text)
                if match is None:
                    kept.append((number, text))
                    continue
                if section.name in targets:
                    self.problem(number, f"state {section.name!r} has a second Transitions line")
                    continue
                targets[section.name] = (number, self.target_list(match.group(1), number))
            section.body = kept
        initial = self.text_field(front, "initial_state", required=False) or next(iter(sections))
        if initial not in sections:
            self.problem(
                front.lines["initial_state"], f"initial_state {initial!r} has no '## section'"
            )
        states: dict[str, Any] = {}
        for name, section in sections.items():
            state = self.section_text(name, section.line, section)
            line, names = targets.get(name, (section.line, []))
            for target in names:
                if target not in sections:
                    self.problem(line, f"unknown target {target!r} in the transitions of {name!r}")
            if names:
                state["accepts"] = {
                    SIMPLE_FORM_FIELD: {
                        "field_type": "enum",
                        "required": True,
                        "values": list(dict.fromkeys(names)),
                        "description": "the state to go to next",
                    }
                }
                state["transitions"] = [
                    {"target": target, "when": {SIMPLE_FORM_FIELD: target}}
                    for target in dict.fromkeys(names)
                ]
            else:
                state["terminal"] = True
            states[name] = state
        return states, initial

    def target_list(self, text: str, line: int) -> list[str]:
        try:
            value = parse(text, first_line=line)
        except YamlError as exc:
            self.problem(exc.line, f"bad Transitions line: {exc.message}")
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem(line, "a Transitions line lists state names: **Transitions**: [a, b]")
            return []
        return value

    # -- sections ------------------------------------------------------------------------------

    def sections(
        self, body: list[tuple[int, str]], declared: set[str] | None
    ) -> dict[str, _Section]:
        """`## name` sections; with `declared`, only headings naming a declared state count."""
        sections: dict[str, _Section] = {}
        current: _Section | None = None
        fence = ""
        for number, text in body:
            marker = _FENCE.match(text)
            if marker is not None:
                fence = "" if fence == marker.group(1) else (fence or marker.group(1))
            heading = _HEADING.fullmatch(text) if not fence else None
            if heading is not None and (declared is None or heading.group(1) in declared):
                name = heading.group(1)
                if name in sections:
                    self.problem(
                        number,
                        f"a second '## {name}' section (the first is on line "
                        f"{sections[name].line})",
                    )
                    current = None
                    continue
                current = sections[name] = _Section(name, number, [])
            elif current is not None:
                current.body.append((number, text))
        return sections

    def section_text(self, name: str, line: int, section: _Section | None) -> dict[str, Any]:
        if section is None:
            self.problem(line, f"state {name!r} has no '## {name}' section in the body")
            return {"directive": ""}
        split = next((i for i, (_, t) in enumerate(section.body) if t.strip() == _DETAILS), None)
        directive = section.body if split is None else section.body[:split]
        details = [] if split is None else section.body[split + 1 :]
        state: dict[str, Any] = {"directive": _join(directive)}
        if not state["directive"]:
            self.problem(section.line, f"the '## {name}' section has no directive text")
        if _join(details):
            state["details"] = _join(details)
        for number, text in section.body:
            for variable in REFERENCE.findall(text):
                self.references.append((number, variable))
        return state


def _sounds_like_failure(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _FAILURE_WORDS)


def _join(lines: list[tuple[int, str]]) -> str:
    return "\n".join(text.rstrip() for _, text in lines).strip("\n")
