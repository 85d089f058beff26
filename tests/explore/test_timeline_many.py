"""kx.timeline of many runs: past `MOST_BARS` bars it aggregates, says so, and stays small."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from many_runs import ENTRIES_PER_RUN, write_runs
from test_frames import waited_journal

from kassette import LocalStorage, MemoryStorage
from kassette import explore as kx
from kassette.explore import _timeline
from kassette.explore._timeline_overview import MOST_BARS

MIME = "application/vnd.vegalite.v5+json"


def titles(spec: Any) -> list[str]:
    """Every title and subtitle text in a spec, at any depth."""
    found: list[str] = []
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key in ("title", "subtitle", "text") and isinstance(value, str):
                found.append(value)
            found += titles(value)
    elif isinstance(spec, list):
        for item in spec:
            found += titles(item)
    return found


def test_a_timeline_of_10000_runs_aggregates_says_so_and_leaves_under_a_megabyte(
    tmp_path: Path,
) -> None:
    """300,000 entries: the notebook keeps counts per time bucket and the bars of the 40 runs
    that started last (not 300,000 bars: 8 MB, and Vega's "Maximum call stack size")."""
    write_runs(tmp_path / "runs", 10_000)
    journals = kx.load(LocalStorage(tmp_path / "runs"))
    assert len(journals.entries) == 10_000 * ENTRIES_PER_RUN
    chart = kx.timeline(journals)
    bundle = chart._repr_mimebundle_()
    size = len(json.dumps(bundle))
    print(f"\n10,000-run timeline: {size / 1e6:.3f} MB in the notebook")
    assert size < 1_000_000
    assert chart.aggregated and chart.activity is not None
    spec = bundle[MIME]
    said = " / ".join(titles(spec))
    assert "10,000 runs, 300,000 entries, aggregated" in said, said
    assert "counted per 5 min" in said and "the 40 runs that started last" in said, said
    steps = int((journals.entries["type"] == "step").sum())
    assert sum(record["steps"] for record in spec["datasets"]["steps"]) == steps
    assert {bar["run_id"] for bar in chart.bars} == set(journals.run_ids[-40:])
    assert len(spec["datasets"]["bars"]) == len(chart.bars) < MOST_BARS
    assert repr(chart).startswith("Timeline: 10000 runs, 272500 steps, 2500 waits, aggregated")
    assert bundle["text/plain"] == repr(chart)
    assert chart.chart.to_dict(validate=True)  # a valid Vega-Lite spec (shown unvalidated)
    some = journals.run_ids[1000:1500]  # 500 runs, still too many bars: only theirs counted
    part = kx.timeline(journals, some)
    assert part.aggregated and part.activity is not None and part.runs == 500
    mine = journals.entries[journals.entries["run_id"].isin(some)]
    assert part.activity.step_count == int((mine["type"] == "step").sum())
    assert {bar["run_id"] for bar in part.bars} == set(some[-40:])


def test_the_aggregates_count_runs_at_work_and_waiting_and_steps_per_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that works 2.5 s, waits a minute for a review and works 2 s more, beside one
    that works from 10 s to 20 s: buckets of a second, the wait counted as waiting."""
    monkeypatch.setattr(_timeline, "MOST_BARS", 0)  # aggregate these few
    storage = MemoryStorage()
    storage.append("waited", waited_journal(), token=None)
    lines = [
        {"type": "start", "session": 1, "offset": 0, "timestamp": "2025-12-29T09:20:10.000Z"},
        {"type": "step", "session": 1, "offset": 1, "timestamp": "2025-12-29T09:20:20.000Z",
         "stepId": "s", "name": "s", "result": 1, "durationMs": 10_000},
        {"type": "complete", "session": 1, "offset": 2, "timestamp": "2025-12-29T09:20:20.000Z",
         "result": 1},
    ]  # fmt: skip
    storage.append("busy", b"".join(json.dumps(x).encode() + b"\n" for x in lines), token=None)
    chart = kx.timeline(kx.load(storage))
    found = chart.activity
    assert found is not None and found.width == 1  # 64.5 s in at most 120 buckets: 1 s each
    runs = {(r["at"][11:19], r["state"]): r["runs"] for r in found.runs}
    assert runs["09:20:01", "working"] == 1 and runs["09:20:01", "waiting"] == 0
    assert runs["09:20:15", "working"] == 1 and runs["09:20:15", "waiting"] == 1
    assert runs["09:20:40", "working"] == 0 and runs["09:20:40", "waiting"] == 1
    assert runs["09:21:03", "working"] == 1 and runs["09:21:03", "waiting"] == 0
    ended = {(r["at"][11:19], r["name"]): r["steps"] for r in found.steps}
    assert ended == {("09:20:02", "a"): 1, ("09:20:20", "s"): 1, ("09:21:04", "b"): 1}
    assert (found.step_count, found.waits) == (3, 1)
    assert {bar["run_id"] for bar in chart.bars} == {"waited", "busy"}
    assert chart.chart.to_dict(validate=True)


def test_altair_loads_without_compiling_the_iri_grammars_it_never_uses() -> None:
    """The first chart of a session imports Altair: jsonschema's optional IRI check (38
    grammars compiled at import) is left out of it, and stays importable for anyone else."""
    script = (
        "import sys\n"
        "from kassette.explore._timeline import import_altair\n"
        "alt = import_altair()\n"
        "assert alt.Chart and 'jsonschema' in sys.modules\n"
        "assert 'rfc3987_syntax' not in sys.modules, 'compiled'\n"
        "import importlib.util\n"
        "print(importlib.util.find_spec('rfc3987_syntax') is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() in ("True", "False")  # importable where installed
