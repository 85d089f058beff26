"""Templates compiled to JSON, and drawn as Mermaid and as a self-contained HTML page."""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser

from conftest import Koto


def test_compile_prints_the_compiled_json(koto: Koto) -> None:
    result = koto("template", "compile", koto.template("lifecycle"))
    assert result.code == 0
    compiled = json.loads(result.stdout)
    assert compiled["initial_state"] == "plan"
    assert compiled["states"]["build"]["accepts"]["outcome"] == {
        "field_type": "enum",
        "required": True,
        "values": ["ok", "broken"],
    }
    assert compiled["states"]["plan"]["details"].startswith("Write the approach")
    # the stored copy of a session is exactly this, and its hash is the session's
    koto.ok("init", "s", "--template", koto.template("lifecycle"), "--var", "TASK=t")
    status = koto.ok("status", "s")
    assert status["template_hash"] == hashlib.sha256(result.stdout).hexdigest()


def test_mermaid(koto: Koto) -> None:
    result = koto("template", "export", koto.template("gates"), "--format", "mermaid")
    assert result.code == 0
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert "    [*] --> check" in lines
    assert "    check --> passed : gates.flag.exit_code = 0" in lines
    assert "    fix --> passed" in lines
    assert "    passed --> [*]" in lines
    assert "    note right of fix : gates fixed (command)" in lines


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.ids += [value for name, value in attrs if name == "id" and value]


def test_html_is_self_contained(koto: Koto) -> None:
    out = koto.cwd / "diagram.html"
    answer = koto.ok(
        "template", "export", koto.template("lifecycle"), "--format", "html", "--output", str(out)
    )
    assert answer == {"format": "html", "output": str(out)}
    page = out.read_text()
    parser = _Collect()
    parser.feed(page)
    assert "svg" in parser.tags and "script" not in parser.tags
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for state in ("plan", "build", "review", "done", "rejected"):
        assert f"state-{state}" in parser.ids and state in parser.ids
    assert "outcome = &quot;ok&quot;" in page


def test_export_of_a_compiled_json(koto: Koto) -> None:
    compiled = koto("template", "compile", koto.template("gates"), "--allow-legacy-gates").stdout
    (koto.cwd / "gates.json").write_bytes(compiled)
    assert koto("template", "export", "gates.json").stdout.startswith(b"stateDiagram-v2")
