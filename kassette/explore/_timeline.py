"""Timeline: where each run's time went, as an interactive Altair chart.

One row per run, one bar per step on a time axis: a step's entry is journaled when the step
ends, so its bar runs from `timestamp - duration_ms` to `timestamp`. A suspend is drawn as a
pale bar up to the resume that ends it (or to the run's last entry), so waiting for a human
shows as a gap in the work. A step also gets a tick 2 px wide where it ended (a wait, where it
began): a bar is as long as the step took, and a step of microseconds in a run of minutes
would otherwise be far below a pixel wide, drawing nothing. Bars are coloured by step name,
no colour used twice; past nine names, by kind (step, model call, sleep, parallel), the name
in the tooltip, which gives the run, the step id, its name and its duration. The chart's
height is bounded: more than 40 runs are shown 40 at a time, a slider picking the page. With
nothing to draw, the chart says so ("no runs").

`timeline` returns a `Timeline`: `.chart` is the `altair.Chart`; in a notebook it shows as a
Vega-Lite v5 spec (`application/vnd.vegalite.v5+json`), which JupyterLab and VS Code draw with
the Vega they ship (interactive: zoom and pan on the time axis, tooltips), with no server, no
network and no renderer setting changed. Its data is inlined as values, which Altair's
5,000-row limit does not apply to, so 500 runs chart without changing that limit for the rest
of the notebook.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kassette._codec import format_timestamp
from kassette._extras import requires
from kassette.errors import RunNotFoundError
from kassette.explore._frames import Journals
from kassette.explore._read import unique_run_ids
from kassette.explore._timeline_overview import (
    MOST_BARS,
    Activity,
    activity,
    bar_count,
    charts,
    most_recent,
    width_text,
)

__all__ = ["Timeline", "bars", "timeline"]

_ROW_HEIGHT = 18  # px per run
_PAGE = 40  # runs a page shows: the chart is never taller than 40 rows (720 px)
# Vega's tableau10 without its grey (a wait's colour): nine hues told apart at a glance. More
# step names than that and colours would repeat, so the bars are coloured by kind instead.
_PALETTE = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2",
            "#ff9da6", "#9d755d"]  # fmt: skip
_KINDS = {"step": "#4c78a8", "model call": "#f58518", "sleep": "#72b7b2", "parallel": "#b279a2"}
_WAIT, _WAIT_BEGINS = "#bbbbbb", "#999999"
_MIME = "application/vnd.vegalite.v5+json"  # what JupyterLab 4 and VS Code render built in
_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def timeline(
    journals: Journals, run_ids: Iterable[str] | None = None, *, width: int = 720
) -> Timeline:
    """A chart of each run's steps on a time axis (all runs, or `run_ids` in that order).

    Returns a `Timeline` (display it; `.chart` is the `altair.Chart`, to save or change).
    Bars are coloured by step name (by kind, the name on hover, past nine names), suspends
    are pale bars up to their resume, and tooltips name the step and its duration. More than
    40 runs are shown 40 at a time, with a page slider above the chart.
    """
    alt = import_altair()
    wanted = unique_run_ids(run_ids)
    if wanted is not None:
        known = set(journals.run_ids)
        for run_id in wanted:
            if run_id not in known:
                raise RunNotFoundError(f"run {run_id} is not in these journals", run_id=run_id)
    order = wanted if wanted is not None else journals.run_ids
    if bar_count(journals, order) > MOST_BARS:
        return _aggregated(alt, journals, order, width)
    records = bars(journals, order)
    if not records:
        return Timeline(_message(alt, order, width), records, len(order))
    chart = _drawn(alt, records, order, width)
    return Timeline(with_datasets(chart, bars=records), records, len(order))


def _aggregated(alt: Any, journals: Journals, order: list[str], width: int) -> Timeline:
    """Too many bars to draw one by one: runs and steps per time bucket, and below them the
    bars of the `_PAGE` runs that started last, all on one chart that says so."""
    found = activity(journals, order)
    if found is None:
        return Timeline(_message(alt, order, width), [], len(order))
    recent = most_recent(journals, order, _PAGE)
    records = bars(journals, recent)
    every = [*records, *({"name": s["name"], "kind": s["kind"]} for s in found.steps)]
    color = _colors(alt, every)
    detail = _drawn(alt, records, recent, width, color=color).properties(
        title=f"the {len(recent)} runs that started last, step by step "
        "(kx.timeline(journals, run_ids) draws others)"
    )
    title = alt.TitleParams(
        f"steps over time: {len(order):,} runs, {found.entries:,} entries, aggregated",
        subtitle=f"too many to draw one bar per step ({found.step_count:,} steps, "
        f"{found.waits:,} waits): counted per {width_text(found.width)}",
        anchor="start",
    )
    chart = alt.vconcat(charts(alt, found, color, width), detail, title=title)
    chart = chart.resolve_scale(x="independent", color="independent")
    chart = with_datasets(chart, bars=records, runs=found.runs, steps=found.steps)
    return Timeline(chart, records, len(order), activity=found)


def _drawn(
    alt: Any, records: list[dict[str, Any]], order: list[str], width: int, color: Any = None,
    data: str = "bars",
) -> Any:  # fmt: skip
    """One bar per step and per wait of the runs `order`, `_PAGE` runs a page, from the
    dataset named `data`."""
    pages = -(-len(order) // _PAGE)
    band = _ROW_HEIGHT
    base = alt.Chart(alt.NamedData(name=data))  # the records: in the spec's `datasets`
    page = None
    if pages > 1:  # a slider picks the page; the rows of the others are filtered out
        page = alt.param(
            name="page",
            value=1,
            bind=alt.binding_range(min=1, max=pages, step=1, name=f"page (of {pages}) "),
        )
        shown = f"datum.row >= (page - 1) * {_PAGE} && datum.row < page * {_PAGE}"
        base = base.transform_filter(shown)
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
    color = color if color is not None else _colors(alt, records)
    work, wait = alt.datum.kind != "suspended", alt.datum.kind == "suspended"
    steps = (
        base.mark_bar(size=band - 4)
        .encode(x=x, x2="end:T", y=y, color=color, tooltip=tooltip)
        .transform_filter(work)
    )
    # A bar is as long as its step took: a step of microseconds in a run of minutes is far
    # below a pixel wide. So each step also gets a tick 2 px wide where it ended, and each
    # wait one where it began, visible at any zoom (a bar never drawn wider than it was).
    ends = (
        base.mark_tick(thickness=2, size=band - 4, opacity=1)
        .encode(x=alt.X("end:T", scale=scale), y=y, color=color, tooltip=tooltip)
        .transform_filter(work)
    )
    waits = (
        base.mark_bar(size=band // 3, color=_WAIT, opacity=0.7)
        .encode(x=x, x2="end:T", y=y, tooltip=tooltip)
        .transform_filter(wait)
    )
    begins = (
        base.mark_tick(thickness=2, size=band // 3, color=_WAIT_BEGINS, opacity=1)
        .encode(x=alt.X("start:T", scale=scale), y=y, tooltip=tooltip)
        .transform_filter(wait)
    )
    title = "steps over time" + (f": {len(order)} runs, {_PAGE} a page" if page else "")
    chart = alt.layer(waits, begins, steps, ends).properties(
        width=width, height=alt.Step(band), title=title
    )
    if page is not None:
        chart = chart.add_params(page)
    return chart.interactive(bind_y=False)


def import_altair() -> Any:
    """Altair, imported in about a third of the time when it is the first to need jsonschema.

    jsonschema compiles rfc3987-syntax's 38 grammars when it is imported, if that package is
    installed (JupyterLab's jupyter-events brings it): about three quarters of Altair's import,
    5 s on a busy 2-core machine, for an "iri" format check Altair never makes. So while Altair
    imports jsonschema, that optional module reads as missing; it stays importable afterwards.
    """
    if "altair" in sys.modules:
        return sys.modules["altair"]
    skip = "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules
    if skip:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]
    try:
        with requires("kx.timeline"):
            import altair
    finally:
        if skip:
            del sys.modules["rfc3987_syntax"]
    return altair


def with_datasets(chart: Any, **datasets: list[dict[str, Any]]) -> Any:
    """`chart` with its data as the spec's named `datasets`, each written once. Given last:
    Altair copies a chart's data whenever it layers, concatenates or binds a chart, which
    at thousands of records took longer than drawing them."""
    chart.datasets = datasets
    return chart


def _colors(alt: Any, records: list[dict[str, Any]]) -> Any:
    """Each step name its own colour, none repeated; past the palette, a colour per kind."""
    names = sorted({bar["name"] for bar in records if bar["kind"] != "suspended"})
    if len(names) <= len(_PALETTE):
        scale = alt.Scale(domain=names, range=_PALETTE[: len(names)])
        return alt.Color("name:N", title="step", scale=scale, legend=alt.Legend(symbolLimit=0))
    kinds = [kind for kind in _KINDS if any(bar["kind"] == kind for bar in records)]
    scale = alt.Scale(domain=kinds, range=[_KINDS[kind] for kind in kinds])
    title = f"kind ({len(names)} step names: hover a bar)"
    return alt.Color("kind:N", title=title, scale=scale)


def _message(alt: Any, order: list[str], width: int) -> Any:
    """A chart that says there is nothing to draw, rather than an empty strip."""
    text = "no runs" if not order else f"no steps in {len(order)} run{'s' * (len(order) != 1)}"
    data = alt.InlineData(values=[{"message": text}])
    mark = alt.Chart(data).mark_text(fontSize=14, color="#666666")
    return mark.encode(text="message:N").properties(width=width, height=40, title="steps over time")


def bars(journals: Journals, run_ids: list[str]) -> list[dict[str, Any]]:
    """One record per step (and per suspension) of `run_ids`: run_id, row (the run's place in
    `run_ids`), step_id, name, kind ("step", "model call", "sleep", "parallel", or "suspended"
    for a suspension), start and end (ISO text, UTC), duration_s."""
    entries = journals.to_arrow("entries")
    wanted = pa.array(run_ids, pa.string())
    rows = entries.filter(
        pc.and_(
            pc.is_in(entries.column("run_id"), wanted),
            pc.is_in(entries.column("type"), pa.array(["step", "suspend", "resume"])),
        )
    ).select(["run_id", "offset", "type", "timestamp", "step_id", "name", "kind", "event",
              "duration_ms"])  # fmt: skip
    calls = journals.to_arrow("llm_calls").select(["run_id", "offset"]).to_pylist()
    models = {(call["run_id"], call["offset"]) for call in calls}
    place = {run_id: number for number, run_id in enumerate(run_ids)}
    last = _last_times(entries, wanted)
    records: list[dict[str, Any]] = []
    waiting: dict[tuple[str, str | None], Any] = {}
    columns = [rows.column(name).to_pylist() for name in rows.column_names]
    for run_id, offset, entry, stamp, step_id, name, kind, event, duration in zip(
        *columns, strict=True
    ):
        if stamp is None:
            continue
        if entry == "step":
            seconds = (duration or 0.0) / 1000
            what = "model call" if (run_id, offset) in models else kind or "step"
            start = stamp.timestamp() - seconds
            records.append(
                _bar(run_id, place[run_id], step_id, name or step_id, what, start, stamp, seconds)
            )
        elif entry == "suspend":
            waiting[run_id, event or step_id] = stamp
        else:
            began = waiting.pop((run_id, event or step_id), None)
            if began is not None:
                records.append(_wait(run_id, place[run_id], event or step_id, began, stamp))
    for (run_id, event), began in waiting.items():  # still waiting: up to the last entry
        end = last.get(run_id, began)
        records.append(_wait(run_id, place[run_id], event, began, max(end, began)))
    return records


def _bar(
    run_id: str, row: int, step_id: str | None, name: str | None, kind: str, start: float,
    end: Any, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    return {
        "run_id": run_id,
        "row": row,
        "step_id": step_id,
        "name": name,
        "kind": kind,
        "start": format_timestamp(start),
        "end": format_timestamp(end.timestamp()),
        "duration_s": round(seconds, 6),
    }


def _wait(run_id: str, row: int, event: str | None, began: Any, ended: Any) -> dict[str, Any]:
    seconds = (ended - began).total_seconds()
    return _bar(run_id, row, event, f"(waiting: {event})", "suspended", began.timestamp(), ended,
                seconds)  # fmt: skip


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
    """A timeline chart: `.chart` (an `altair.Chart`), `.bars` (its records: the runs drawn
    step by step), `.activity` (the per-bucket counts of an aggregated chart, else None), and
    in a notebook the chart itself."""

    def __init__(
        self, chart: Any, bars: list[dict[str, Any]], runs: int, *, activity: Activity | None = None
    ) -> None:
        self.chart, self.bars, self.runs, self.activity = chart, bars, runs, activity

    @property
    def aggregated(self) -> bool:
        """True when the runs were too many to draw one bar per step (see `activity`)."""
        return self.activity is not None

    def to_dict(self) -> dict[str, Any]:
        """The Vega-Lite spec, as JupyterLab's built-in renderer (Vega-Lite 5) reads it."""
        import altair as alt

        # the datasets are plain JSON already: Altair need not walk 100,000 values to say so
        datasets, self.chart.datasets = self.chart.datasets, alt.Undefined
        try:
            spec: dict[str, Any] = self.chart.to_dict(validate=False)  # tests validate it
        finally:
            self.chart.datasets = datasets
        if datasets is not alt.Undefined:
            spec["datasets"] = datasets
        spec["$schema"] = _SCHEMA
        return spec

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {_MIME: self.to_dict(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        if not self.runs:
            return "Timeline: no runs"
        if self.activity is not None:
            found = self.activity
            return (
                f"Timeline: {self.runs} runs, {found.step_count} steps, {found.waits} waits, "
                f"aggregated per {width_text(found.width)}; the {_PAGE} that started last "
                "step by step"
            )
        waits = sum(bar["kind"] == "suspended" for bar in self.bars)
        steps = len(self.bars) - waits
        pages = f", {_PAGE} a page" if self.runs > _PAGE else ""
        return f"Timeline: {self.runs} runs, {steps} steps, {waits} waits{pages}"
