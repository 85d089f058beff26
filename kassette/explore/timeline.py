"""Timeline: where each run's time went, as an interactive Altair chart.

One row per run, one bar per step on a time axis: a step's entry is journaled when the step
ends, so its bar runs from `timestamp - duration_ms` to `timestamp`. A suspend is drawn as a
pale bar up to the resume that ends it (or to the run's last entry), so waiting for a human
shows as a gap in the work. A step also gets a tick 2 px wide where it ended (a wait, where it
began): a bar is as long as the step took, and a step of microseconds in a run of minutes
would otherwise be far below a pixel wide, drawing nothing. Bars are coloured by step name;
a tooltip gives the run, the step id, its name and its duration.

`timeline` returns a `Timeline`: `.chart` is the `altair.Chart`; in a notebook it shows as a
Vega-Lite v5 spec (`application/vnd.vegalite.v5+json`), which JupyterLab and VS Code draw with
the Vega they ship (interactive: zoom and pan on the time axis, tooltips), with no server, no
network and no renderer setting changed. Its data is inlined as values, which Altair's
5,000-row limit does not apply to, so 500 runs chart without changing that limit for the rest
of the notebook.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kassette.errors import RunNotFoundError
from kassette.explore._read import unique_run_ids
from kassette.explore.frames import Journals

__all__ = ["Timeline", "bars", "timeline"]

_HINT = 'kx.timeline needs altair: pip install "kassette[explore]"'
_ROW_HEIGHT = 18  # px per run
_MAX_HEIGHT = 9000  # px: past this, rows get thinner rather than the chart taller
_MIME = "application/vnd.vegalite.v5+json"  # what JupyterLab 4 and VS Code render built in
_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def timeline(
    journals: Journals, run_ids: Iterable[str] | None = None, *, width: int = 720
) -> Timeline:
    """A chart of each run's steps on a time axis (all runs, or `run_ids` in that order).

    Returns a `Timeline` (display it; `.chart` is the `altair.Chart`, to save or change).
    Bars are coloured by step name, suspends are pale bars up to their resume, and
    tooltips name the step and its duration.
    """
    try:
        import altair as alt
    except ImportError as exc:  # pragma: no cover - exercised in a bare environment
        raise ImportError(f"{_HINT} ({exc})") from exc
    wanted = unique_run_ids(run_ids)
    if wanted is not None:
        known = set(journals.run_ids)
        for run_id in wanted:
            if run_id not in known:
                raise RunNotFoundError(f"run {run_id} is not in these journals", run_id=run_id)
    order = wanted if wanted is not None else journals.run_ids
    records = bars(journals, order)
    rows = max(1, len(order))
    band = max(3, min(_ROW_HEIGHT, _MAX_HEIGHT // rows))
    data = alt.InlineData(values=records)  # inline values: no row limit, none changed
    base = alt.Chart(data)
    tooltip = [
        alt.Tooltip("run_id:N", title="run"),
        alt.Tooltip("step_id:N", title="step id"),
        alt.Tooltip("name:N", title="name"),
        alt.Tooltip("kind:N", title="kind"),
        alt.Tooltip("duration_s:Q", title="seconds", format=".3f"),
        alt.Tooltip("start:T", title="from", format="%Y-%m-%d %H:%M:%S.%L"),
        alt.Tooltip("end:T", title="to", format="%Y-%m-%d %H:%M:%S.%L"),
    ]
    y = alt.Y("run_id:N", sort=order, title=None, axis=alt.Axis(labelLimit=220))
    scale = alt.Scale(padding=6)  # px: a tick at either end of the time axis shows whole
    x = alt.X("start:T", title="time (UTC)", axis=alt.Axis(format="%H:%M:%S"), scale=scale)
    color = alt.Color("name:N", title="step", legend=alt.Legend(symbolLimit=30))
    kind = {"step": alt.datum.kind == "step", "wait": alt.datum.kind == "suspended"}
    steps = (
        base.mark_bar(size=max(2, band - 4))
        .encode(x=x, x2="end:T", y=y, color=color, tooltip=tooltip)
        .transform_filter(kind["step"])
    )
    # A bar is as long as its step took: a step of microseconds in a run of minutes is far
    # below a pixel wide. So each step also gets a tick 2 px wide where it ended, and each
    # wait one where it began, visible at any zoom (a bar never drawn wider than it was).
    ends = (
        base.mark_tick(thickness=2, size=max(2, band - 4), opacity=1)
        .encode(x=alt.X("end:T", scale=scale), y=y, color=color, tooltip=tooltip)
        .transform_filter(kind["step"])
    )
    waits = (
        base.mark_bar(size=max(1, band // 3), color="#bbbbbb", opacity=0.7)
        .encode(x=x, x2="end:T", y=y, tooltip=tooltip)
        .transform_filter(kind["wait"])
    )
    begins = (
        base.mark_tick(thickness=2, size=max(1, band // 3), color="#999999", opacity=1)
        .encode(x=alt.X("start:T", scale=scale), y=y, tooltip=tooltip)
        .transform_filter(kind["wait"])
    )
    chart = (
        alt.layer(waits, begins, steps, ends)
        .properties(width=width, height=alt.Step(band), title="steps over time")
        .interactive(bind_y=False)
    )
    return Timeline(chart, records, len(order))


def bars(journals: Journals, run_ids: list[str]) -> list[dict[str, Any]]:
    """One record per step (and per suspension) of `run_ids`: run_id, step_id, name, kind
    ("step" or "suspended"), start and end (ISO text, UTC), duration_s."""
    entries = journals.to_arrow("entries")
    wanted = pa.array(run_ids, pa.string())
    rows = entries.filter(
        pc.and_(
            pc.is_in(entries.column("run_id"), wanted),
            pc.is_in(entries.column("type"), pa.array(["step", "suspend", "resume"])),
        )
    ).select(["run_id", "type", "timestamp", "step_id", "name", "event", "duration_ms"])
    last = _last_times(entries, wanted)
    records: list[dict[str, Any]] = []
    waiting: dict[tuple[str, str | None], Any] = {}
    columns = [rows.column(name).to_pylist() for name in rows.column_names]
    for run_id, kind, stamp, step_id, name, event, duration in zip(*columns, strict=True):
        if stamp is None:
            continue
        if kind == "step":
            seconds = (duration or 0.0) / 1000
            start = stamp.timestamp() - seconds
            records.append(_bar(run_id, step_id, name or step_id, "step", start, stamp, seconds))
        elif kind == "suspend":
            waiting[run_id, event or step_id] = stamp
        else:
            began = waiting.pop((run_id, event or step_id), None)
            if began is not None:
                records.append(_wait(run_id, event or step_id, began, stamp))
    for (run_id, event), began in waiting.items():  # still waiting: up to the last entry
        end = last.get(run_id, began)
        records.append(_wait(run_id, event, began, max(end, began)))
    return records


def _bar(
    run_id: str, step_id: str | None, name: str | None, kind: str, start: float, end: Any,
    seconds: float,
) -> dict[str, Any]:  # fmt: skip
    return {
        "run_id": run_id,
        "step_id": step_id,
        "name": name,
        "kind": kind,
        "start": _iso(start),
        "end": end.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "duration_s": round(seconds, 6),
    }


def _wait(run_id: str, event: str | None, began: Any, ended: Any) -> dict[str, Any]:
    seconds = (ended - began).total_seconds()
    return _bar(run_id, event, f"(waiting: {event})", "suspended", began.timestamp(), ended,
                seconds)  # fmt: skip


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _last_times(entries: pa.Table, wanted: pa.Array) -> dict[str, Any]:
    rows = entries.filter(pc.is_in(entries.column("run_id"), wanted))
    if not rows.num_rows:
        return {}
    grouped = rows.group_by("run_id").aggregate([("timestamp", "max")])
    return dict(
        zip(
            grouped.column("run_id").to_pylist(),
            grouped.column("timestamp_max").to_pylist(),
            strict=True,
        )
    )


class Timeline:
    """A timeline chart: `.chart` (an `altair.Chart`), `.bars` (its records), and in a
    notebook the chart itself."""

    def __init__(self, chart: Any, bars: list[dict[str, Any]], runs: int) -> None:
        self.chart, self.bars, self.runs = chart, bars, runs

    def to_dict(self) -> dict[str, Any]:
        """The Vega-Lite spec, as JupyterLab's built-in renderer (Vega-Lite 5) reads it."""
        spec: dict[str, Any] = self.chart.to_dict()
        spec["$schema"] = _SCHEMA
        return spec

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {_MIME: self.to_dict(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        steps = sum(bar["kind"] == "step" for bar in self.bars)
        waits = len(self.bars) - steps
        return f"Timeline: {self.runs} runs, {steps} steps, {waits} waits"
