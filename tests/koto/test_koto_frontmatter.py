"""The front-matter reader: the YAML subset templates use, with line numbers in errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml  # a dev dependency: these tests never skip
from hypothesis import given, settings
from hypothesis import strategies as st

from kassette.koto._frontmatter import Mapping, YamlError, parse

HERE = Path(__file__).parent
SOURCES = sorted(HERE.glob("templates/*.md")) + sorted(HERE.parents[1].glob("examples/koto/*.md"))


def test_block_and_flow_forms() -> None:
    text = """\
name: review   # a comment
version: "1.0"
quoted: 'it''s # not a comment'
escaped: "tab\\there \\u00e9"
states:
  a:
    transitions:
      - {target: b, when: {x: 1, y: [p, q]}}
      - target: c
        when:
          gates.ci.exit_code: 0
    list:
    - one
    - - nested
      - two
  b: {terminal: true}
multi: [a,
  b]
folded: >
  one
  two

  three
literal: |-
  keep  spacing
    and indent # inside
plain: words that
  continue
numbers: [1, -2, 3.5, 1e3, 0x10, 0o17, true, False, null, ~, ""]
empty:
"""
    value = parse(text)
    assert value["name"] == "review" and value["version"] == "1.0"
    assert value["quoted"] == "it's # not a comment"
    assert value["escaped"] == "tab\there é"
    a = value["states"]["a"]
    assert a["transitions"] == [
        {"target": "b", "when": {"x": 1, "y": ["p", "q"]}},
        {"target": "c", "when": {"gates.ci.exit_code": 0}},
    ]
    assert a["list"] == ["one", ["nested", "two"]]
    assert value["multi"] == ["a", "b"]
    assert value["folded"] == "one two\nthree\n"
    assert value["literal"] == "keep  spacing\n  and indent # inside"
    assert value["plain"] == "words that continue"
    assert value["numbers"] == [1, -2, 3.5, 1000.0, 16, 15, True, False, None, None, ""]
    assert value["empty"] is None
    assert isinstance(value, Mapping)
    assert value.lines["states"] == 5
    assert a["transitions"].lines == [8, 9]
    assert a["transitions"][1].lines == {"target": 9, "when": 10}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, "duplicate key 'a' (first on line 1)"),
        ("a:\n\t- x\n", 2, "tabs"),
        ("a: &anchor 1\n", 1, "anchors"),
        ("a: *alias\n", 1, "anchors"),
        ("a: !!str 1\n", 1, "tags"),
        ("a: [1, 2\n", 1, "unterminated"),
        ("a: 'open\nb: c\n", 1, "unterminated"),
        ("a: b: c\n", 1, "quote it"),
        ("a:\n  - x\n y: 1\n", 3, "unexpected indentation"),
        ("- a\nb: c\n", 2, "after the document"),
        ("a: 1\n---\nb: 2\n", 2, "one YAML document"),
        ("a: .inf\n", 1, "not supported"),
        ('a: "\\q"\n', 1, "unknown escape"),
        ("? complex\n", 1, "complex keys"),
    ],
)
def test_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(YamlError) as caught:
        parse(text, first_line=1)
    assert caught.value.line == line
    assert words in str(caught.value)


def test_line_numbers_count_from_first_line() -> None:
    with pytest.raises(YamlError) as caught:
        parse("a: 1\na: 2\n", first_line=10)
    assert caught.value.line == 11


def _front_matter(path: Path) -> str:
    return path.read_text().split("---\n")[1]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_agrees_with_pyyaml_on_every_template(path: Path) -> None:
    text = _front_matter(path)
    assert parse(text) == yaml.safe_load(text)


_text = st.text(st.sampled_from("abcxyz XYZ_-.,!?"), min_size=1, max_size=12)
_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _text
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.sampled_from("abcdef_"), min_size=1, max_size=6), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    value=st.dictionaries(
        st.text(st.sampled_from("klmn_"), min_size=1, max_size=5), _values, min_size=1, max_size=5
    ),
    flow=st.booleans(),
)
def test_reads_what_pyyaml_writes(value: dict[str, Any], flow: bool) -> None:
    text = yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True, width=30)
    assert yaml.safe_load(text) == value
    assert parse(text) == value
