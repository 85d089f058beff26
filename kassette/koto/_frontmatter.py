"""Front-matter: the subset of YAML that koto templates are written in, read without PyYAML.

Block mappings and block lists (including lists of mappings, `- key: value`), flow lists and
mappings (`[a, b]`, `{target: done, when: {x: 1}}`, possibly over several lines), plain,
single- and double-quoted scalars (also over several lines), literal and folded block scalars
(`|`, `>`, with `-`/`+` chomping) and `#` comments. Plain scalars resolve as YAML 1.2's core
schema does: null, booleans, integers and floats; everything else is a string. Anchors,
aliases, tags, complex keys and multiple documents are refused with the line they are on.

Nesting is limited to `MAX_DEPTH` levels (block and flow collections each), so no template
can exhaust the interpreter's stack.

Every mapping and list remembers the line it starts on and the line of each of its keys or
items (`Mapping.lines`, `Sequence.lines`), so the template compiler can name lines in errors.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_DEPTH", "Mapping", "Sequence", "YamlError", "parse"]

MAX_DEPTH = 64


class YamlError(ValueError):
    """The front-matter is not in the supported YAML subset; `line` is 1-based in the file."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.message = message
        self.line = line


class Mapping(dict[str, Any]):
    """A YAML mapping as a dict, with the line of the mapping and of each key."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.lines: dict[str, int] = {}


class Sequence(list[Any]):
    """A YAML list, with the line of the list and of each item."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.lines: list[int] = []


@dataclass
class _Line:
    number: int  # 1-based, in the file
    indent: int
    text: str  # without indentation and comment; never empty
    raw: str  # the whole line as written (block scalars need it)


_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_TRUES = frozenset({"true", "True", "TRUE"})
_FALSES = frozenset({"false", "False", "FALSE"})
_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
    "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
    "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_BLOCK_HEADER = re.compile(r"([|>])([-+]?)")


def parse(text: str, *, first_line: int = 1) -> Any:
    """The value of a YAML document in the supported subset; `first_line` numbers its first line.

    An empty document is None.
    """
    lines = _significant_lines(text.split("\n"), first_line)
    parser = _Parser(lines, text.split("\n"), first_line)
    if not lines:
        return None
    value = parser.block(lines[0].indent)
    if parser.position < len(lines):
        line = lines[parser.position]
        raise YamlError("unexpected indentation or content after the document", line.number)
    return value


def _significant_lines(raw_lines: list[str], first_line: int) -> list[_Line]:
    lines = []
    for index, raw in enumerate(raw_lines):
        number = first_line + index
        stripped = raw.lstrip(" ")
        if stripped.startswith("\t") and stripped.strip():
            raise YamlError("tabs may not be used for indentation", number)
        text = _strip_comment(stripped).rstrip()
        if not text:
            continue
        if text in ("---", "...") and len(raw) == len(stripped):
            raise YamlError("only one YAML document is supported", number)
        lines.append(_Line(number, len(raw) - len(stripped), text, raw))
    return lines


def _strip_comment(text: str) -> str:
    """`text` without a trailing `# comment` (a `#` inside quotes or a word is not one)."""
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"'" and (index == 0 or text[index - 1] in " \t[{,:-?"):
            end = _past_quote(text, index)
            if end is None:
                return text
            index = end
            continue
        if char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index]
        index += 1
    return text


def _past_quote(text: str, start: int) -> int | None:
    """The index just past the quote closing the one at `text[start]`, or None if unclosed.

    In double quotes a backslash escapes the next character; in single quotes `''` is one `'`.
    """
    quote, index = text[start], start + 1
    while index < len(text):
        char = text[index]
        if quote == '"' and char == "\\":
            index += 2
            continue
        if char == quote:
            if quote == "'" and text[index + 1 : index + 2] == "'":
                index += 2
                continue
            return index + 1
        index += 1
    return None


class _Parser:
    def __init__(self, lines: list[_Line], raw_lines: list[str], first_line: int) -> None:
        self.lines = lines
        self.raw_lines = raw_lines
        self.first_line = first_line
        self.position = 0
        self.depth = 0

    def _current(self) -> _Line | None:
        return self.lines[self.position] if self.position < len(self.lines) else None

    def block(self, indent: int) -> Any:
        """The block node whose lines start at the current line, indented `indent`."""
        line = self._current()
        assert line is not None and line.indent == indent
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YamlError(f"nested more than {MAX_DEPTH} levels deep", line.number)
            if _is_item(line.text):
                return self._sequence(indent)
            if _split_key(line.text, line.number) is not None:
                return self._mapping(indent)
            return self._inline_value(line.text, line, indent - 1)
        finally:
            self.depth -= 1

    def _sequence(self, indent: int) -> Sequence:
        first = self.lines[self.position]
        sequence = Sequence(first.number)
        while (line := self._current()) is not None and line.indent == indent:
            if not _is_item(line.text):
                break  # the next key of a mapping whose list sits at the key's column
            rest = line.text[1:].lstrip(" ")
            sequence.lines.append(line.number)
            if not rest:
                self.position += 1
                sequence.append(self._nested(indent))
                continue
            # `- key: value` or `- - x`: the item is a block starting inside this line
            offset = indent + len(line.text) - len(rest)
            if _is_item(rest) or _split_key(rest, line.number) is not None:
                self.lines[self.position] = _Line(line.number, offset, rest, line.raw)
                sequence.append(self.block(offset))
            else:
                sequence.append(self._inline_value(rest, line, indent))
        if (line := self._current()) is not None and line.indent > indent:
            raise YamlError("unexpected indentation", line.number)
        return sequence

    def _mapping(self, indent: int) -> Mapping:
        first = self.lines[self.position]
        mapping = Mapping(first.number)
        while (line := self._current()) is not None and line.indent == indent:
            split = _split_key(line.text, line.number)
            if split is None:
                if _is_item(line.text):
                    raise YamlError("a list item where a 'key: value' was expected", line.number)
                raise YamlError(f"expected 'key: value', found {line.text!r}", line.number)
            key, rest = split
            if key in mapping:
                raise YamlError(
                    f"duplicate key {key!r} (first on line {mapping.lines[key]})", line.number
                )
            mapping.lines[key] = line.number
            if not rest:
                self.position += 1
                nxt = self._current()
                if nxt is not None and nxt.indent == indent and _is_item(nxt.text):
                    mapping[key] = self._sequence(indent)  # a list may sit at its key's column
                else:
                    mapping[key] = self._nested(indent)
            else:
                mapping[key] = self._inline_value(rest, line, indent)
        if (line := self._current()) is not None and line.indent > indent:
            raise YamlError("unexpected indentation", line.number)
        return mapping

    def _nested(self, parent_indent: int) -> Any:
        """The block value under a `key:` or `-` with nothing after it; None when absent."""
        line = self._current()
        if line is None or line.indent <= parent_indent:
            return None
        return self.block(line.indent)

    def _inline_value(self, text: str, line: _Line, parent_indent: int) -> Any:
        """A value written after `key:` or `- `; consumes the line and its continuations."""
        self.position += 1
        header = _BLOCK_HEADER.fullmatch(text)
        if header is not None:
            return self._block_scalar(header.group(1), header.group(2), line, parent_indent)
        if text[0] in "&*!%@`":
            raise YamlError(
                f"unsupported YAML feature at {text[:20]!r} (anchors, aliases, tags and "
                "directives are not supported)",
                line.number,
            )
        if text.startswith("? "):
            raise YamlError("complex keys ('? ') are not supported", line.number)
        # flow collections and quoted scalars may continue on more-indented lines
        while not _is_complete(text):
            nxt = self._current()
            if nxt is None or nxt.indent <= parent_indent:
                raise YamlError(f"unterminated value {text[:40]!r}", line.number)
            text = f"{text} {nxt.text}"
            self.position += 1
        if text[0] in "[{":
            flow = _Flow(text, line.number)
            value = flow.value()
            flow.end()
            return value
        if text[0] in "\"'":
            value, end = _quoted(text, 0, line.number)
            if text[end:].strip():
                raise YamlError(
                    f"unexpected text after a quoted string: {text[end:]!r}", line.number
                )
            return value
        # a plain scalar may go on over more-indented lines, joined by spaces
        while (nxt := self._current()) is not None and nxt.indent > parent_indent:
            text = f"{text} {nxt.text}"
            self.position += 1
        if ": " in text or text.endswith(":"):
            raise YamlError(
                f"a plain value may not contain ': ' ({text[:40]!r}); quote it", line.number
            )
        return _resolve(text, line.number)

    def _block_scalar(self, style: str, chomp: str, line: _Line, parent_indent: int) -> str:
        start = line.number - self.first_line + 1  # index of the first content line in raw
        body: list[str] = []
        indent: int | None = None
        index = start
        while index < len(self.raw_lines):
            raw = self.raw_lines[index]
            if raw.strip():
                leading = len(raw) - len(raw.lstrip(" "))
                if leading <= parent_indent:
                    break
                if indent is None:
                    indent = leading
                if leading < indent:
                    break
                body.append(raw[indent:])
            else:
                body.append("")
            index += 1
        # skip the significant lines the block scalar covered
        last = self.first_line + index - 1
        while (nxt := self._current()) is not None and nxt.number <= last:
            self.position += 1
        trailing = 0
        while body and not body[-1]:
            body.pop()
            trailing += 1
        text = "\n".join(body) if style == "|" else _fold(body)
        if chomp == "-" or not text:
            return text
        if chomp == "+":
            return text + "\n" * (trailing + 1)
        return text + "\n"


def _fold(lines: list[str]) -> str:
    """A folded block scalar's text: breaks between plain lines become spaces."""
    out = lines[0] if lines else ""
    for previous, line in itertools.pairwise(lines):
        if not line:
            out += "\n"
        elif not previous:
            out += line
        elif previous.startswith(" ") or line.startswith(" "):
            out += "\n" + line
        else:
            out += " " + line
    return out


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _split_key(text: str, number: int) -> tuple[str, str] | None:
    """(`key`, rest) when `text` is `key: rest` or `key:`; None when it is not a mapping entry."""
    if text[0] in "\"'":
        try:
            key, end = _quoted(text, 0, number)
        except YamlError:
            return None
        rest = text[end:].lstrip(" ")
        if rest == ":" or rest.startswith(": "):
            return key, rest[1:].strip()
        return None
    if text[0] in "[{#&*!|>%@`?" or _is_item(text):
        return None
    index = text.find(":")
    while index != -1:
        if index + 1 == len(text) or text[index + 1] == " ":
            key = text[:index].rstrip()
            if not key:
                return None
            return key, text[index + 1 :].strip()
        index = text.find(":", index + 1)
    return None


def _is_complete(text: str) -> bool:
    """Whether a flow collection or quoted scalar starting `text` ends in it."""
    if text[0] not in "[{\"'":
        return True
    depth, index = 0, 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            end = _past_quote(text, index)
            if end is None:
                return False
            if depth == 0:
                return True
            index = end
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return True
        index += 1
    return False


def _quoted(text: str, start: int, number: int) -> tuple[str, int]:
    """The quoted scalar at `text[start]` and the index just past its closing quote."""
    quote = text[start]
    out: list[str] = []
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == quote:
            if quote == "'" and text[index + 1 : index + 2] == "'":
                out.append("'")
                index += 2
                continue
            return "".join(out), index + 1
        if quote == '"' and char == "\\":
            code = text[index + 1 : index + 2]
            if code in _HEX_ESCAPES:
                digits = text[index + 2 : index + 2 + _HEX_ESCAPES[code]]
                if len(digits) != _HEX_ESCAPES[code] or not all(
                    d in "0123456789abcdefABCDEF" for d in digits
                ):
                    raise YamlError(f"bad escape \\{code}{digits}", number)
                out.append(chr(int(digits, 16)))
                index += 2 + len(digits)
                continue
            if code not in _ESCAPES:
                raise YamlError(f"unknown escape \\{code} in a double-quoted string", number)
            out.append(_ESCAPES[code])
            index += 2
            continue
        out.append(char)
        index += 1
    raise YamlError(f"unterminated {quote}quoted{quote} string", number)


def _resolve(text: str, number: int) -> Any:
    """A plain scalar's value under the YAML 1.2 core schema (without .inf and .nan)."""
    if text in _NULLS:
        return None
    if text in _TRUES:
        return True
    if text in _FALSES:
        return False
    if _INT.fullmatch(text):
        return _integer(text, text, 10, number)
    if re.fullmatch(r"0o[0-7]+", text):
        return _integer(text, text[2:], 8, number)
    if re.fullmatch(r"0x[0-9a-fA-F]+", text):
        return _integer(text, text[2:], 16, number)
    if _FLOAT.fullmatch(text):
        value = float(text)
        if not math.isfinite(value):
            raise YamlError(f"{text[:40]} is too large for a number", number)
        return value
    if text.lower() in (".inf", "-.inf", "+.inf", ".nan"):
        raise YamlError(f"{text} is not supported (not representable in JSON)", number)
    return text


def _integer(text: str, digits: str, base: int, number: int) -> int:
    """`digits` in `base`, or a `YamlError` for an integer too long for Python to write as
    decimal text (over 4,300 digits), which is what the compiled template's JSON holds."""
    try:
        value = int(digits, base)
        str(value)
    except ValueError:
        shown = f"{text[:20]}..." if len(text) > 20 else text
        raise YamlError(f"the integer {shown} has too many digits", number) from None
    return value


class _Flow:
    """A flow collection, `[...]` or `{...}`, on one (joined) line."""

    def __init__(self, text: str, number: int) -> None:
        self.text = text
        self.number = number
        self.index = 0
        self.depth = 0

    def _skip(self) -> None:
        while self.index < len(self.text) and self.text[self.index] == " ":
            self.index += 1

    def _peek(self) -> str:
        self._skip()
        return self.text[self.index] if self.index < len(self.text) else ""

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            found = self.text[self.index : self.index + 10] or "the end of the line"
            raise YamlError(f"expected {char!r} in a flow collection, found {found!r}", self.number)
        self.index += 1

    def end(self) -> None:
        if self._peek():
            raise YamlError(
                f"unexpected text after a flow collection: {self.text[self.index :]!r}",
                self.number,
            )

    def value(self) -> Any:
        char = self._peek()
        if char in "[{":
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise YamlError(f"nested more than {MAX_DEPTH} levels deep", self.number)
                return self._list() if char == "[" else self._mapping()
            finally:
                self.depth -= 1
        if char in "\"'":
            value, self.index = _quoted(self.text, self.index, self.number)
            return value
        return _resolve(self._plain(), self.number)

    def _plain(self) -> str:
        start = self.index
        while self.index < len(self.text):
            char = self.text[self.index]
            if char in ",[]{}":
                break
            if char == ":" and self.text[self.index + 1 : self.index + 2] in (" ", ",", "}", ""):
                break
            self.index += 1
        text = self.text[start : self.index].strip()
        if text and text[0] in "&*!%@`|>":
            raise YamlError(f"unsupported YAML feature at {text[:20]!r}", self.number)
        return text

    def _list(self) -> Sequence:
        sequence = Sequence(self.number)
        self._expect("[")
        while self._peek() != "]":
            if not self._peek():
                raise YamlError("unterminated flow list '['", self.number)
            sequence.append(self.value())
            sequence.lines.append(self.number)
            if self._peek() == ",":
                self.index += 1
            elif self._peek() != "]":
                raise YamlError("expected ',' or ']' in a flow list", self.number)
        self.index += 1
        return sequence

    def _mapping(self) -> Mapping:
        mapping = Mapping(self.number)
        self._expect("{")
        while self._peek() != "}":
            if not self._peek():
                raise YamlError("unterminated flow mapping '{'", self.number)
            if self._peek() in "\"'":
                key, self.index = _quoted(self.text, self.index, self.number)
            else:
                key = self._plain()
                if not key:
                    raise YamlError("empty key in a flow mapping", self.number)
            if key in mapping:
                raise YamlError(f"duplicate key {key!r}", self.number)
            value: Any = None
            if self._peek() == ":":
                self.index += 1
                if self._peek() not in (",", "}"):
                    value = self.value()
            mapping[key] = value
            mapping.lines[key] = self.number
            if self._peek() == ",":
                self.index += 1
            elif self._peek() != "}":
                raise YamlError("expected ',' or '}' in a flow mapping", self.number)
        self.index += 1
        return mapping
