"""Export: a compiled template as a diagram, the picture the seed article says koto lacks.

`mermaid` gives a Mermaid `stateDiagram-v2` (GitHub and most Markdown viewers draw it);
`html` gives one self-contained page, no scripts and nothing fetched, with the machine drawn
as an SVG (states in rows by their distance from the initial state, each edge labelled with
its `when`) and each state's directive, evidence, gates and transitions below it.
"""

from __future__ import annotations

import html
import json
from collections import deque
from typing import Any

from kassette.koto._template import Template

__all__ = ["FORMATS", "export", "to_html", "to_mermaid"]

FORMATS = ("mermaid", "html")
_BOX_WIDTH, _BOX_HEIGHT, _COLUMN_GAP, _ROW_GAP, _MARGIN = 170, 44, 50, 90, 30


def export(template: Template, format: str) -> str:
    return to_mermaid(template) if format == "mermaid" else to_html(template)


def _condition(when: dict[str, Any] | None) -> str:
    if not when:
        return ""
    return ", ".join(f"{key} = {json.dumps(value)}" for key, value in when.items())


def to_mermaid(template: Template) -> str:
    lines = ["stateDiagram-v2", f"    [*] --> {template.initial_state}"]
    for name, state in template.states.items():
        if state.get("gates"):
            gates = ", ".join(f"{g} ({spec['type']})" for g, spec in state["gates"].items())
            lines.append(f"    note right of {name} : gates {_mermaid_text(gates)}")
        for transition in state.get("transitions", []):
            label = _mermaid_text(_condition(transition.get("when")))
            suffix = f" : {label}" if label else ""
            lines.append(f"    {name} --> {transition['target']}{suffix}")
        if state.get("terminal"):
            lines.append(f"    {name} --> [*]")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    """Label text Mermaid will not read as syntax."""
    return text.replace(":", "#58;").replace(";", "#59;").replace('"', "#quot;")


def _layers(template: Template) -> list[list[str]]:
    """States in rows: the initial state, then each state at its shortest distance from it."""
    depth = {template.initial_state: 0}
    queue = deque([template.initial_state])
    while queue:
        name = queue.popleft()
        for transition in template.state(name).get("transitions", []):
            if transition["target"] not in depth:
                depth[transition["target"]] = depth[name] + 1
                queue.append(transition["target"])
    rows: list[list[str]] = []
    for name in template.states:  # unreachable states cannot compile; keep them anyway
        level = depth.get(name, max(depth.values()) + 1)
        while len(rows) <= level:
            rows.append([])
        rows[level].append(name)
    return rows


def _svg(template: Template) -> str:
    rows = _layers(template)
    columns = max(len(row) for row in rows)
    width = 2 * _MARGIN + columns * _BOX_WIDTH + (columns - 1) * _COLUMN_GAP + 160
    height = 2 * _MARGIN + len(rows) * _BOX_HEIGHT + (len(rows) - 1) * _ROW_GAP
    position: dict[str, tuple[float, float]] = {}
    for level, row in enumerate(rows):
        span = len(row) * _BOX_WIDTH + (len(row) - 1) * _COLUMN_GAP
        left = (width - 160 - span) / 2
        for index, name in enumerate(row):
            x = left + index * (_BOX_WIDTH + _COLUMN_GAP)
            position[name] = (x, _MARGIN + level * (_BOX_HEIGHT + _ROW_GAP))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="state diagram">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
    ]
    for name, state in template.states.items():
        for index, transition in enumerate(state.get("transitions", [])):
            parts.append(
                _edge(
                    position[name],
                    position[transition["target"]],
                    index,
                    _condition(transition.get("when")),
                )
            )
    for name, (x, y) in position.items():
        state = template.state(name)
        fill = "#e8f5e9" if state.get("terminal") else "#e3f2fd"
        stroke = "#2e7d32" if name == template.initial_state else "#546e7a"
        dash = ' stroke-dasharray="5,3"' if state.get("gates") else ""
        parts.append(
            f'<g class="state" id="state-{html.escape(name)}"><rect x="{x:.0f}" y="{y:.0f}" '
            f'width="{_BOX_WIDTH}" height="{_BOX_HEIGHT}" rx="10" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="2"{dash}/><text x="{x + _BOX_WIDTH / 2:.0f}" '
            f'y="{y + _BOX_HEIGHT / 2 + 5:.0f}" text-anchor="middle" font-size="14">'
            f"{html.escape(name)}</text></g>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _edge(source: tuple[float, float], target: tuple[float, float], index: int, label: str) -> str:
    (sx, sy), (tx, ty) = source, target
    text = html.escape(label)
    if source == target:  # a loop on the box's right side
        x, y = sx + _BOX_WIDTH, sy + _BOX_HEIGHT / 2
        path = (
            f"M{x:.0f},{y - 8:.0f} C{x + 60:.0f},{y - 40:.0f} {x + 60:.0f},{y + 40:.0f} "
            f"{x:.0f},{y + 8:.0f}"
        )
        lx, ly = x + 50, y + 4
    else:
        start = (sx + _BOX_WIDTH / 2, sy + (_BOX_HEIGHT if ty > sy else 0))
        end = (tx + _BOX_WIDTH / 2, ty + (0 if ty > sy else _BOX_HEIGHT))
        if ty <= sy:  # back or sideways edges bow out to the right, apart from forward ones
            bow = 80 + 30 * index
            start = (sx + _BOX_WIDTH, sy + _BOX_HEIGHT / 2)
            end = (tx + _BOX_WIDTH, ty + _BOX_HEIGHT / 2)
            path = (
                f"M{start[0]:.0f},{start[1]:.0f} C{start[0] + bow:.0f},{start[1]:.0f} "
                f"{end[0] + bow:.0f},{end[1]:.0f} {end[0]:.0f},{end[1]:.0f}"
            )
            lx, ly = max(start[0], end[0]) + bow * 0.75, (start[1] + end[1]) / 2
        else:
            path = f"M{start[0]:.0f},{start[1]:.0f} L{end[0]:.0f},{end[1]:.0f}"
            lx, ly = (start[0] + end[0]) / 2 + 6, (start[1] + end[1]) / 2
    label_svg = (
        f'<text x="{lx:.0f}" y="{ly:.0f}" font-size="11" fill="#333">{text}</text>' if text else ""
    )
    return (
        f'<g class="edge"><path d="{path}" fill="none" stroke="#555" stroke-width="1.5" '
        f'marker-end="url(#arrow)"/>{label_svg}</g>'
    )


def to_html(template: Template) -> str:
    data = template.data
    title = f"{data['name']} {data['version']}"
    sections = []
    for name, state in template.states.items():
        items = []
        if state.get("terminal"):
            items.append("<p><em>terminal</em></p>")
        if state.get("accepts"):
            fields = "".join(
                f"<li><code>{html.escape(field)}</code>: {html.escape(spec['field_type'])}"
                + (f" ({', '.join(map(html.escape, spec['values']))})" if "values" in spec else "")
                + (" <strong>required</strong>" if spec.get("required") else "")
                + "</li>"
                for field, spec in state["accepts"].items()
            )
            items.append(f"<h4>Evidence</h4><ul>{fields}</ul>")
        if state.get("gates"):
            gates = "".join(
                f"<li><code>{html.escape(gate)}</code> ({html.escape(spec['type'])}): <code>"
                f"{html.escape(spec.get('command') or spec.get('key') or '')}</code></li>"
                for gate, spec in state["gates"].items()
            )
            items.append(f"<h4>Gates</h4><ul>{gates}</ul>")
        if state.get("transitions"):
            moves = "".join(
                f"<li>&rarr; <a href='#{html.escape(t['target'])}'>{html.escape(t['target'])}"
                f"</a> {html.escape(_condition(t.get('when')) or '(otherwise)')}</li>"
                for t in state["transitions"]
            )
            items.append(f"<h4>Transitions</h4><ul>{moves}</ul>")
        sections.append(
            f"<section id='{html.escape(name)}'><h3>{html.escape(name)}</h3>"
            f"<pre>{html.escape(state['directive'])}</pre>{''.join(items)}</section>"
        )
    description = html.escape(data.get("description", ""))
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:72em}"
        "pre{white-space:pre-wrap;background:#f6f8fa;padding:.6em;border-radius:6px}"
        "section{border-top:1px solid #ddd;margin-top:1em}"
        "</style></head><body>"
        f"<h1>{html.escape(data['name'])} <small>{html.escape(data['version'])}</small></h1>"
        f"<p>{description}</p><p>Initial state: <a href='#{html.escape(template.initial_state)}'>"
        f"{html.escape(template.initial_state)}</a>. Dashed boxes have gates; green boxes are "
        f"terminal.</p>\n{_svg(template)}\n<h2>States</h2>{''.join(sections)}"
        f"<p><small>template sha256 {template.sha256}</small></p></body></html>\n"
    )
