"""Templates: a workflow's state machine, written as Markdown with YAML front-matter.

The front-matter declares the machine (`name`, `version`, `initial_state`, `variables`,
`states` with their `transitions`, `accepts` and `gates`); each state's `## name` section in
the Markdown body is its directive, split from optional longer `details` by a
`<!-- details -->` line. The simple form of the seed article works too: no `states` in the
front-matter, every `##` heading is a state, a `**Transitions**: [a, b]` line lists where it
may go, and a state without one is terminal.

`kassette.koto._compiler.compile_template` checks everything that can be checked before a
session runs (unknown targets and fields, `when` conditions that name undeclared fields or
gates, undeclared `{{VARIABLES}}`, states that are unreachable or cannot reach a terminal
state, transitions that can both match) and reports every problem with its file and line.
The compiled form is canonical JSON; its SHA-256 pins a session to the exact template it was
started with. This module holds the compiled form only: reading a session never loads the
compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from kassette.koto._errors import KotoError

__all__ = [
    "FORMAT_VERSION",
    "MAX_TEMPLATE_BYTES",
    "SIMPLE_FORM_FIELD",
    "Template",
    "TemplateError",
    "read_source",
]

FORMAT_VERSION = 1
SIMPLE_FORM_FIELD = "transition"
MAX_TEMPLATE_BYTES = 1 << 20


class TemplateError(KotoError):
    """A template that does not compile (`template_error`); `problems` holds (line, message)
    pairs, line 0 when no line applies. `str()` gives one `file:line: message` line per
    problem; the JSON error adds the file, the first problem's line and every problem."""

    def __init__(self, path: str, problems: list[tuple[int, str]]) -> None:
        self.path = path
        self.problems = sorted(problems)
        lines = self.lines()
        super().__init__(
            "template_error",
            "\n".join(lines),
            extra={"file": path, "line": self.line, "errors": lines},
        )

    @property
    def line(self) -> int:
        return self.problems[0][0]

    def lines(self) -> list[str]:
        return [
            f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}"
            for line, message in self.problems
        ]


def read_source(path: str | Path) -> bytes:
    """The bytes of the template file at `path`: a regular file of at most MAX_TEMPLATE_BYTES
    (a device, FIFO or directory is refused without reading it); `TemplateError` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except OSError as exc:
        raise TemplateError(str(path), [(0, f"cannot read template: {exc}")]) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TemplateError(str(path), [(0, "a template must be a regular file")])
        chunks, size = [], 0
        while size <= MAX_TEMPLATE_BYTES and (chunk := os.read(fd, MAX_TEMPLATE_BYTES + 1)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise TemplateError(str(path), [(0, f"cannot read template: {exc}")]) from exc
    finally:
        os.close(fd)
    if size > MAX_TEMPLATE_BYTES:
        raise TemplateError(
            str(path), [(0, f"the template is larger than {MAX_TEMPLATE_BYTES} bytes")]
        )
    return b"".join(chunks)


class Template:
    """A compiled template: `data` (the JSON object), its canonical bytes and their SHA-256.

    `warnings` are the compiler's `file:line: message` warnings (not part of the JSON)."""

    __slots__ = ("data", "sha256", "text", "warnings")

    def __init__(
        self, data: dict[str, Any], text: bytes, sha256: str, warnings: tuple[str, ...] = ()
    ) -> None:
        self.data = data
        self.text = text
        self.sha256 = sha256
        self.warnings = warnings

    def __repr__(self) -> str:
        return f"Template({self.name!r}, sha256={self.sha256[:12]}...)"

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Template:
        text = (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        return cls(data, text, hashlib.sha256(text).hexdigest())

    @classmethod
    def from_json(cls, text: bytes) -> Template:
        """A stored compiled template, taken as it is (its hash is of these exact bytes)."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            raise ValueError("not a compiled koto template (format_version 1)")
        return cls(data, bytes(text), hashlib.sha256(text).hexdigest())

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def initial_state(self) -> str:
        return str(self.data["initial_state"])

    @property
    def states(self) -> dict[str, dict[str, Any]]:
        return self.data["states"]  # type: ignore[no-any-return]

    @property
    def variables(self) -> dict[str, dict[str, Any]]:
        return self.data.get("variables", {})  # type: ignore[no-any-return]

    def state(self, name: str) -> dict[str, Any]:
        return self.states[name]
