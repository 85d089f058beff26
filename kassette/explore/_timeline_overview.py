"""The timeline of many runs, aggregated: what a chart of 10,000 runs can draw and a notebook keep.

A bar per step is 300,000 marks at 10,000 runs: megabytes in the notebook and more than Vega
draws. Past `MOST_BARS` bars, `kx.timeline` draws instead, on one time axis cut in about
`BUCKETS` buckets of a round width (seconds, minutes or hours):

- how many runs were working and how many waiting (between a suspend and the session that
  resumed them) in each bucket, as a stacked area;
- how many steps ended in each bucket, stacked by step name (by kind past nine names);

and `_timeline.py` adds below them the bars of the most recent runs. Everything is counted
column-wise with Arrow and NumPy: the aggregates are a few hundred records, whatever the number
of runs. A fork's copied prefix counts for its source only.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kassette._codec import format_timestamp

__all__ = ["BUCKETS", "MOST_BARS", "Activity", "activity", "bar_count", "charts", "most_recent"]

MOST_BARS = 4_500  # bars drawn one by one (about 200 bytes each: 0.9 MB); past it, aggregated
BUCKETS = 120  # time buckets across the whole span, at most
# Round bucket widths, in seconds: a bucket reads as "2 min", not "137.4 s".
_WIDTHS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
           86400, 172800, 604800]  # fmt: skip
_WORKING, _WAITING = "#4c78a8", "#bbbbbb"
Ints = npt.NDArray[np.int64]


class Activity(NamedTuple):
    """The aggregates of many runs: `runs` (bucket, state working or waiting, count),
    `steps` (bucket, name, kind, count), the bucket width in seconds, and totals."""

    runs: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    width: int
    entries: int
    step_count: int
    waits: int


def _own(journals: Any, order: list[str]) -> pa.Table:
    """The entries of `order`'s runs that the runs wrote themselves, with a time."""
    entries = journals.to_arrow("entries")
    keep = pc.and_(pc.invert(entries.column("copied")), entries.column("timestamp").is_valid())
    if len(order) != len(journals.run_ids):
        keep = pc.and_(keep, pc.is_in(entries.column("run_id"), pa.array(order, pa.string())))
    return entries.filter(keep).select(["run_id", "type", "timestamp", "name", "kind"])


def bar_count(journals: Any, order: list[str]) -> int:
    """How many bars `bars()` would make: one per step and per suspend (an upper bound)."""
    entries = journals.to_arrow("entries")
    marks = pc.is_in(entries.column("type"), pa.array(["step", "suspend"]))
    if len(order) != len(journals.run_ids):
        marks = pc.and_(marks, pc.is_in(entries.column("run_id"), pa.array(order, pa.string())))
    return int(pc.sum(pc.cast(marks, pa.int64())).as_py() or 0)


def most_recent(journals: Any, order: list[str], count: int) -> list[str]:
    """The `count` runs of `order` that started last, oldest first."""
    runs = journals.to_arrow("runs").select(["run_id", "started_at"])
    if len(order) != len(journals.run_ids):
        runs = runs.filter(pc.is_in(runs.column("run_id"), pa.array(order, pa.string())))
    runs = runs.filter(runs.column("started_at").is_valid())
    latest = pc.sort_indices(runs, sort_keys=[("started_at", "ascending")])  # stable
    last: list[str] = runs.column("run_id").take(latest[max(len(latest) - count, 0) :]).to_pylist()
    return last


def activity(journals: Any, order: list[str]) -> Activity | None:
    """Runs working and waiting, and steps ended, per time bucket (None: nothing timed)."""
    own = _own(journals, order)
    if not own.num_rows:
        return None
    stamps = pc.cast(own.column("timestamp"), pa.int64()).to_numpy(zero_copy_only=False)
    first, last = int(stamps.min()), int(stamps.max())
    width = next((w for w in _WIDTHS if w * 1000 * BUCKETS >= last - first + 1), _WIDTHS[-1])
    size = width * 1000
    buckets = (last - first) // size + 1
    bucket = (stamps - first) // size
    # runs: from their first entry to their last; waiting: from a suspend to the next entry
    # the entries are in run order: a run is one stretch of rows (numbered, not compared as text)
    run_ids = pc.dictionary_encode(own.column("run_id").combine_chunks()).indices.to_numpy()
    starts = np.flatnonzero(np.r_[True, run_ids[1:] != run_ids[:-1]])
    ends = np.r_[starts[1:], len(run_ids)] - 1
    busy = _in_bucket(bucket[starts], bucket[ends], buckets)
    is_suspend = pc.equal(own.column("type"), "suspend").to_numpy(zero_copy_only=False)
    suspends = np.flatnonzero(is_suspend)
    same = suspends + 1 < len(run_ids)
    same[same] &= run_ids[suspends[same] + 1] == run_ids[suspends[same]]
    until = np.where(same, np.minimum(suspends + 1, len(run_ids) - 1), -1)
    resumed = np.where(same, bucket[until], buckets - 1)  # still waiting: to the end
    waiting = _in_bucket(bucket[suspends], resumed, buckets)
    runs = []
    for number in range(buckets):
        at = _span(first, size, number)
        runs.append({**at, "state": "working", "runs": int(busy[number] - waiting[number])})
        runs.append({**at, "state": "waiting", "runs": int(waiting[number])})
    steps = _steps(own, bucket, first, size)
    total = int(pc.sum(pc.equal(own.column("type"), "step")).as_py() or 0)
    return Activity(runs, steps, width, int(own.num_rows), total, len(suspends))


def _in_bucket(begin: Ints, end: Ints, buckets: int) -> Ints:
    """How many of the spans `begin[i]..end[i]` (bucket numbers, inclusive) cover each bucket."""
    change = np.zeros(buckets + 1, dtype=np.int64)
    np.add.at(change, begin, 1)
    np.add.at(change, np.maximum(end, begin) + 1, -1)
    return np.cumsum(change)[:buckets]


def _span(first: int, size: int, number: int) -> dict[str, str]:
    begin = (first + number * size) / 1000
    return {"at": format_timestamp(begin), "to": format_timestamp(begin + size / 1000)}


def _steps(own: pa.Table, bucket: Ints, first: int, size: int) -> list[dict[str, Any]]:
    """Steps ended per bucket and step name (with its kind)."""
    is_step = pc.equal(own.column("type"), "step")
    table = pa.table(
        {
            "bucket": pa.array(bucket),
            "name": pc.fill_null(own.column("name"), "(unnamed)"),
            "kind": pc.fill_null(own.column("kind"), "step"),
        }
    ).filter(is_step)
    grouped = table.group_by(["bucket", "name", "kind"]).aggregate([("bucket", "count")])
    return [
        {**_span(first, size, number), "name": name, "kind": kind, "steps": count}
        for number, name, kind, count in zip(
            *(grouped.column(c).to_pylist() for c in ("bucket", "name", "kind", "bucket_count")),
            strict=True,
        )
    ]


def width_text(seconds: int) -> str:
    """A bucket width as a person says it: 30 s, 2 min, 1 h, 1 day."""
    for unit, name in ((86400, "day"), (3600, "h"), (60, "min")):
        if seconds >= unit and seconds % unit == 0:
            return f"{seconds // unit} {name}"
    return f"{seconds} s"


def charts(alt: Any, found: Activity, color: Any, width: int) -> Any:
    """The two aggregate charts, one above the other on a shared time axis, from the datasets
    named `runs` and `steps` (`found.runs`, `found.steps`)."""
    x = alt.X("at:T", title=None, axis=alt.Axis(format="%H:%M", labelOverlap=True))
    span = [alt.Tooltip("at:T", title="from", format="%Y-%m-%d %H:%M:%S"),
            alt.Tooltip("to:T", title="to", format="%H:%M:%S")]  # fmt: skip
    state = alt.Color(
        "state:N",
        title="runs",
        scale=alt.Scale(domain=["working", "waiting"], range=[_WORKING, _WAITING]),
    )
    runs = (
        alt.Chart(alt.NamedData(name="runs"))
        .mark_area(interpolate="step-after", opacity=0.85)
        .encode(
            x=x,
            y=alt.Y("runs:Q", stack=True, title="runs"),
            color=state,
            order=alt.Order("state:N", sort="descending"),
            tooltip=[*span, alt.Tooltip("state:N"), alt.Tooltip("runs:Q")],
        )
        .properties(width=width, height=90, title="runs working and waiting")
    )
    bucket = width_text(found.width)
    steps = (
        alt.Chart(alt.NamedData(name="steps"))
        .mark_bar()
        .encode(
            x=x,
            x2="to:T",
            y=alt.Y("sum(steps):Q", title="steps"),
            color=color,
            tooltip=[
                *span,
                alt.Tooltip("name:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("sum(steps):Q", title="steps"),
            ],
        )
        .properties(width=width, height=120, title=f"steps ended per {bucket}")
    )
    return alt.vconcat(runs, steps).resolve_scale(color="independent")
