"""Template compile errors name the file and the line; both template forms compile."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Koto

from kassette.koto._compiler import compile_text
from kassette.koto._template import SIMPLE_FORM_FIELD, TemplateError

GOOD = """---
name: t
version: "1"
initial_state: a
states:
  a:
    accepts:
      pick: {type: enum, values: [x, y], required: true}
    transitions:
      - {target: b, when: {pick: x}}
      - {target: a, when: {pick: y}}
  b:
    terminal: true
---
## a
Pick.
## b
Done.
"""


def problems(source: str) -> list[tuple[int, str]]:
    with pytest.raises(TemplateError) as caught:
        compile_text(source, "t.md")
    assert all(line.startswith("t.md:") for line in caught.value.lines())
    return caught.value.problems


def one_problem(source: str) -> tuple[int, str]:
    found = problems(source)
    assert len(found) == 1, found
    return found[0]


def test_the_good_template_compiles() -> None:
    compiled = compile_text(GOOD).data
    assert compiled["states"]["a"]["transitions"][0] == {"target": "b", "when": {"pick": "x"}}
    assert compiled["states"]["b"] == {"directive": "Done.", "terminal": True}


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (("target: b, when: {pick: x}", "target: c, when: {pick: x}"), 10, "unknown target 'c'"),
        (
            ("    terminal: true", "    terminal: true\n    colour: red"),
            14,
            "unknown field 'colour'",
        ),
        (("version:", "versoin:"), 3, "unknown field 'versoin'"),
        (("{pick: x}}", "{pick: z}}"), 10, "bad when: 'z' is not one of"),
        (("{pick: x}}", "{nope: x}}"), 10, "bad when: 'nope'"),
        (("{pick: x}}", "{gates.ci.exit_code: 0}}"), 10, "has no gate 'ci'"),
        (("Pick.", "Pick {{WHO}}."), 16, "undeclared variable {{WHO}}"),
        (("## b\nDone.\n", ""), 12, "has no '## b' section"),
        (("      pick:", "      pick: [oops"), 8, "unterminated"),
        (("{pick: y}}", "{pick: x}}"), 11, "can both match"),
        (("type: enum, values: [x, y]", "type: text"), 8, "has type 'text'"),
        (("initial_state: a", "initial_state: q"), 4, "initial_state 'q' is not a declared"),
    ],
)
def test_compile_errors_name_the_line(change: tuple[str, str], line: int, words: str) -> None:
    source = GOOD.replace(*change)
    assert source != GOOD
    found = problems(source)
    assert any(number == line and words in message for number, message in found), found


def test_unreachable_and_dead_end_states() -> None:
    unreachable = GOOD.replace(
        "  b:\n    terminal: true", "  b:\n    terminal: true\n  c:\n    terminal: true"
    ).replace("## b\n", "## c\nC.\n## b\n")
    assert one_problem(unreachable) == (14, "state 'c' is unreachable from the initial state 'a'")
    stuck = GOOD.replace("      - {target: b, when: {pick: x}}\n", "")
    found = problems(stuck)
    assert (11, "state 'b' is unreachable from the initial state 'a'") in found
    assert (6, "no terminal state is reachable from state 'a'") in found
    dead = GOOD.replace("  b:\n    terminal: true", "  b: {}")
    assert "dead end" in one_problem(dead)[1]


def test_no_front_matter() -> None:
    assert one_problem("# just markdown\n")[0] == 1
    assert "never closed" in one_problem("---\nname: x\n")[1]


def test_the_simple_form() -> None:
    template = compile_text(
        "---\nname: s\nversion: '1'\n---\n## one\nFirst.\n**Transitions**: [two, three]\n"
        "## two\nSecond.\n**Transitions**: [three]\n## three\nLast.\n"
    )
    one = template.state("one")
    assert template.initial_state == "one"
    assert one["directive"] == "First."
    assert one["accepts"][SIMPLE_FORM_FIELD]["values"] == ["two", "three"]
    assert one["transitions"] == [
        {"target": "two", "when": {SIMPLE_FORM_FIELD: "two"}},
        {"target": "three", "when": {SIMPLE_FORM_FIELD: "three"}},
    ]
    assert template.state("three")["terminal"] is True
    bad = "---\nname: s\nversion: '1'\n---\n## one\nFirst.\n**Transitions**: [nowhere]\n"
    assert one_problem(bad) == (7, "unknown target 'nowhere' in the transitions of 'one'")


def test_sections_ignore_headings_in_code_and_keep_other_headings() -> None:
    source = GOOD.replace(
        "## a\nPick.\n",
        "## a\nPick.\n```\n## b\n```\n## Notes\nmore text\n<!-- details -->\nthe details\n",
    )
    state = compile_text(source).state("a")
    assert state["directive"] == "Pick.\n```\n## b\n```\n## Notes\nmore text"
    assert state["details"] == "the details"


def test_the_compiled_form_is_canonical() -> None:
    first = compile_text(GOOD)
    second = compile_text(GOOD.replace('version: "1"', "version: '1'") + "\n\n")
    assert first.text == second.text and first.sha256 == second.sha256


def test_the_cli_reports_every_problem_with_file_and_line(koto: Koto) -> None:
    koto.write("bad.md", GOOD.replace("target: b,", "target: c,").replace("Pick.", "{{WHO}}"))
    result = koto("template", "compile", "bad.md")
    assert result.code == 3
    answer = result.json
    assert answer["code"] == "template_error"
    assert answer["file"] == "bad.md"
    assert answer["line"] == 10
    assert answer["errors"] == [
        "bad.md:10: unknown target 'c' in the transitions of 'a'",
        "bad.md:16: undeclared variable {{WHO}}: declare it under 'variables'",
    ]
    koto.write("bad2.md", "not valid front-matter")
    assert koto("template", "compile", "bad2.md").code == 3
    init = koto("init", "x", "--template", "bad.md")
    assert (init.code, init.json["line"]) == (3, 10)
    assert koto("template", "compile", "missing.md").code == 3


def test_the_template_in_the_docs_compiles() -> None:
    document = (Path(__file__).resolve().parents[2] / "docs" / "koto.md").read_text()
    source = document.split("```markdown\n", 1)[1].split("```\n", 1)[0]
    template = compile_text(source, "docs/koto.md")
    assert template.state("assess")["gates"]["ci"]["timeout"] == 30
    assert template.variables["DEPTH"] == {"required": False, "default": "normal"}
