"""Model calls and tokens, SQL over journals, and the timeline chart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import altair as alt
import pandas as pd
import pytest

from kassette import InvalidArgumentError, MemoryStorage, RunNotFoundError
from kassette import explore as kx
from kassette._journal import encode, format_timestamp
from kassette.core import fork_run


def chat(tokens: tuple[int, int]) -> dict[str, Any]:
    usage = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
    usage["total_tokens"] = sum(tokens)
    return {"id": "c1", "object": "chat.completion", "model": "gpt-x", "usage": usage}


def response(tokens: tuple[int, int]) -> dict[str, Any]:
    usage = {"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)}
    return {"id": "r1", "object": "response", "model": "gpt-r", "usage": usage}


STEPS = [
    ("chat.completions.create", chat((100, 20))),
    ("lookup", {"usage": {"prompt_tokens": 9}, "note": "not a model call"}),
    ("responses.create", response((50, 5))),
    (
        "stream",
        {
            "stream": [
                {"object": "chat.completion.chunk", "model": "gpt-s", "choices": []},
                {
                    "object": "chat.completion.chunk",
                    "model": "gpt-s",
                    "usage": chat((7, 3))["usage"],
                },
            ]
        },
    ),
    (
        "rstream",
        {
            "stream": [
                {"type": "response.created", "response": {"object": "response"}},
                {"type": "response.completed", "response": response((4, 1))},
            ]
        },
    ),
]


def journal(steps: list[tuple[str, Any]], start: float = 1.767e9) -> bytes:
    lines = [{"type": "start", "metadata": {}}]
    lines += [{"type": "step", "stepId": n, "name": n, "result": r, "durationMs": 1500.0}
              for n, r in steps]  # fmt: skip
    lines.append({"type": "suspend", "eventId": "review", "event": "review"})
    return b"".join(
        encode({"type": line["type"], "session": 1, "offset": number,
                "timestamp": format_timestamp(start + 2 * number),
                **{k: v for k, v in line.items() if k != "type"}})
        for number, line in enumerate(lines)
    )  # fmt: skip


@pytest.fixture
def storage() -> MemoryStorage:
    storage = MemoryStorage()
    storage.append("calls", journal(STEPS), token=None)
    fork_run(storage, "calls", offset=3, new_run_id="fork")  # copies the first two model calls
    return storage


def test_llm_calls_has_a_row_per_model_call(storage: MemoryStorage) -> None:
    journals = kx.load(storage)
    calls = journals.llm_calls
    own = calls[calls["run_id"] == "calls"]
    assert own["step_id"].tolist() == ["chat.completions.create", "responses.create", "stream",
                                       "rstream"]  # fmt: skip
    assert own["model"].tolist() == ["gpt-x", "gpt-r", "gpt-s", "gpt-r"]
    assert own["input_tokens"].tolist() == [100, 50, 7, 4]
    assert own["output_tokens"].tolist() == [20, 5, 3, 1]
    assert own["total_tokens"].tolist() == [120, 55, 10, 5]
    assert own["duration_ms"].tolist() == [1500.0] * 4 and not own["copied"].any()
    copied = calls[calls["run_id"] == "fork"]
    assert copied["step_id"].tolist() == ["chat.completions.create"]  # offset 1 < 3
    assert copied["copied"].tolist() == [True]
    assert journals.to_arrow("llm_calls").schema == kx.LLM_CALL_SCHEMA


def test_runs_count_only_their_own_calls_and_entries_say_copied(storage: MemoryStorage) -> None:
    journals = kx.load(storage)
    runs = journals.runs.set_index("run_id")
    assert runs.loc["calls", ["llm_calls", "input_tokens", "output_tokens"]].tolist() == [
        4,
        161,
        29,
    ]
    assert runs.loc["fork", ["llm_calls", "input_tokens", "output_tokens"]].tolist() == [0, 0, 0]
    entries = journals.entries
    fork = entries[entries["run_id"] == "fork"]
    assert fork["copied"].tolist() == [True, True, True, False]  # start at 3 is its own
    assert not entries[entries["run_id"] == "calls"]["copied"].any()
    assert journals.to_arrow("runs").schema == kx.RUN_SCHEMA
    assert journals.to_arrow("entries").schema == kx.ENTRY_SCHEMA


def test_sql_over_runs_entries_and_llm_calls(storage: MemoryStorage) -> None:
    journals = kx.load(storage)
    frame = journals.sql(
        "select r.run_id, count(c.offset) as calls, sum(c.input_tokens) as tokens "
        "from runs r left join llm_calls c on c.run_id = r.run_id and not c.copied "
        "group by r.run_id order by r.run_id"
    )
    assert isinstance(frame, pd.DataFrame)
    assert frame["run_id"].tolist() == ["calls", "fork"]
    assert frame["calls"].tolist() == [4, 0]
    steps = journals.sql("select count(*) as n from entries where type = 'step'")
    assert steps["n"].tolist() == [int((journals.entries["type"] == "step").sum())]
    with pytest.raises(InvalidArgumentError, match=r"sql: .*nope"):
        journals.sql("select * from nope")
    with pytest.raises(InvalidArgumentError):
        journals.sql("  ")


def values(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's data, inlined in the spec (as a named dataset, given once)."""
    data = spec["data"] if "data" in spec else spec["layer"][0]["data"]
    return spec["datasets"][data["name"]]  # type: ignore[no-any-return]


def test_timeline_draws_steps_and_waits(storage: MemoryStorage) -> None:
    journals = kx.load(storage)
    chart = kx.timeline(journals, ["calls"])
    assert repr(chart) == "Timeline: 1 runs, 5 steps, 1 waits"
    first = chart.bars[0]
    assert first["run_id"] == "calls" and first["name"] == "chat.completions.create"
    assert first["duration_s"] == 1.5 and first["end"] == "2025-12-29T09:20:02.000Z"
    assert first["start"] == "2025-12-29T09:20:00.500Z"  # the entry's time less its duration
    wait = chart.bars[-1]
    assert wait["kind"] == "suspended" and wait["start"] == wait["end"]  # nothing after it yet
    bundle = chart._repr_mimebundle_()
    spec = bundle["application/vnd.vegalite.v5+json"]
    assert spec["$schema"].endswith("vega-lite/v5.json")
    assert len(values(spec)) == 6 and "text/plain" in bundle
    assert chart.chart.to_dict(validate=True)  # a valid Vega-Lite spec (shown unvalidated)
    with pytest.raises(RunNotFoundError):
        kx.timeline(journals, ["typo"])


def test_timeline_marks_encode_fields_the_data_has(storage: MemoryStorage) -> None:
    """Every bar spans x..x2 on one run's row, on fields each record holds as ISO text; each
    step also has a tick where it ended, so a step far shorter than a pixel still shows."""
    spec = kx.timeline(kx.load(storage)).to_dict()
    records = values(spec)
    layers = {
        (layer["mark"]["type"], layer["transform"][-1]["filter"]): layer for layer in spec["layer"]
    }
    assert sorted(mark for mark, _ in layers) == ["bar", "bar", "tick", "tick"]
    for (mark, rule), layer in layers.items():
        waits = "===" in rule  # the others are what is not a wait
        encoding = layer["encoding"]
        fields = ["x", "y"] + (["x2"] if mark == "bar" else [])
        assert encoding["x"]["type"] == "temporal" and encoding["y"]["type"] == "nominal"
        mine = [record for record in records if (record["kind"] == "suspended") == waits]
        assert mine, rule
        for channel in fields:
            field = encoding[channel]["field"]
            assert all(isinstance(record[field], str) and record[field] for record in mine)
        for record in mine:
            assert datetime.fromisoformat(record["start"]) <= datetime.fromisoformat(record["end"])
    tick = layers["tick", "(datum.kind !== 'suspended')"]
    assert tick["encoding"]["x"]["field"] == "end" and tick["mark"]["thickness"] >= 2


def test_timeline_of_280_runs_draws_each_bar_and_keeps_the_global_row_limit() -> None:
    storage = MemoryStorage()
    for run in range(280):
        storage.append(f"r{run:03d}", journal(STEPS * 3, start=1.767e9 + run), token=None)
    journals = kx.load(storage)
    chart = kx.timeline(journals)
    spec = chart.to_dict()
    assert len(values(spec)) == 280 * 16 == len(chart.bars) and not chart.aggregated
    text = json.dumps(spec)  # serialisable as it is, and under a megabyte
    assert len(text) < 1_000_000
    assert text.count('"2025-12-29T') == 2 * 280 * 16  # each bar's data written once
    assert alt.data_transformers.options.get("max_rows", 5000) == 5000  # left alone
    assert len(spec["layer"][0]["encoding"]["y"]["sort"]) == 280
    assert repr(chart) == "Timeline: 280 runs, 4200 steps, 280 waits, 40 a page"


def shown_rows(spec: dict[str, Any], page: int) -> set[str]:
    """The runs a page shows: the records the page filter of every layer keeps."""
    pages = [layer["transform"][0]["filter"] for layer in spec["layer"]]
    assert len(set(pages)) == 1 and "page" in pages[0]
    expression = pages[0].replace("&&", "and").replace("datum.row", "row")
    return {
        record["run_id"]
        for record in values(spec)
        if eval(expression, {"page": page, "row": record["row"]})  # the filter, as Python
    }


def test_a_timeline_of_500_runs_shows_40_a_page_with_a_slider() -> None:
    """The chart's height is bounded: 40 rows, whatever the number of runs."""
    storage = MemoryStorage()
    for run in range(500):
        storage.append(f"r{run:03d}", journal(STEPS, start=1.767e9 + run), token=None)
    journals = kx.load(storage)
    spec = kx.timeline(journals).to_dict()
    (param,) = [param for param in spec["params"] if param["name"] == "page"]
    assert param["value"] == 1 and param["bind"]["input"] == "range"
    assert (param["bind"]["min"], param["bind"]["max"]) == (1, 13)  # 500 runs, 40 a page
    assert spec["height"] == {"step": 18}  # px per row: at most 40 rows drawn at once
    first, last = shown_rows(spec, 1), shown_rows(spec, 13)
    assert first == {f"r{run:03d}" for run in range(40)}
    assert last == {f"r{run:03d}" for run in range(480, 500)}
    assert set().union(*(shown_rows(spec, page) for page in range(1, 14))) == set(journals.run_ids)
    few = kx.timeline(journals, journals.run_ids[:40]).to_dict()
    assert all(param["name"] != "page" for param in few["params"])
    assert all(len(layer["transform"]) == 1 for layer in few["layer"])


def test_each_step_name_has_its_own_colour_or_bars_are_coloured_by_kind() -> None:
    storage = MemoryStorage()
    storage.append("calls", journal(STEPS), token=None)
    spec = kx.timeline(kx.load(storage)).to_dict()
    color = spec["layer"][2]["encoding"]["color"]
    names = sorted(name for name, _ in STEPS)
    assert color["field"] == "name" and color["scale"]["domain"] == names
    assert len(set(color["scale"]["range"])) == len(names)  # none repeats
    assert not {"#bbbbbb", "#999999"} & set(color["scale"]["range"])  # a wait's greys
    many = [(f"tool-{number}", {"n": number}) for number in range(12)] + STEPS[:1]
    storage.append("busy", journal(many), token=None)
    chart = kx.timeline(kx.load(storage), ["busy"])
    color = chart.to_dict()["layer"][2]["encoding"]["color"]
    assert color["field"] == "kind" and color["scale"]["domain"] == ["step", "model call"]
    assert len(set(color["scale"]["range"])) == 2
    kinds = {bar["name"]: bar["kind"] for bar in chart.bars}
    assert kinds["chat.completions.create"] == "model call" and kinds["tool-3"] == "step"
    tooltip = [item["field"] for item in chart.to_dict()["layer"][2]["encoding"]["tooltip"]]
    assert "name" in tooltip  # the name on hover


def test_a_timeline_with_nothing_to_draw_says_so(storage: MemoryStorage) -> None:
    empty = kx.timeline(kx.load(MemoryStorage()))
    assert repr(empty) == "Timeline: no runs"
    spec = empty._repr_mimebundle_()["application/vnd.vegalite.v5+json"]
    assert spec["mark"]["type"] == "text" and values(spec) == [{"message": "no runs"}]
    only_starts = MemoryStorage()
    only_starts.append("new", journal([])[: journal([]).index(b"\n") + 1], token=None)
    spec = kx.timeline(kx.load(only_starts)).to_dict()
    assert values(spec) == [{"message": "no steps in 1 run"}]


def _former_iso(moment: datetime) -> str:
    """How the chart wrote a moment before it used the journal's `format_timestamp`."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_timeline_writes_times_as_the_journal_does_and_as_it_did() -> None:
    storage = MemoryStorage()
    durations = [100.0, 300.0, 700.0, 1.0, 0.0, 2999.0]  # whole ms, most not exact in binary
    lines = [{"type": "start", "metadata": {}}]
    lines += [{"type": "step", "stepId": f"s{n}", "name": f"s{n}", "result": n, "durationMs": d}
              for n, d in enumerate(durations)]  # fmt: skip
    stamps = [1.767e9 + 0.123 + 3.007 * n for n in range(len(lines))]
    entries = [
        {**line, "session": 1, "offset": n, "timestamp": format_timestamp(stamps[n])}
        for n, line in enumerate(lines)
    ]
    storage.append("times", b"".join(encode(entry) for entry in entries), token=None)
    bars = kx.timeline(kx.load(storage), ["times"]).bars
    assert len(bars) == len(durations)
    for bar, stamp, duration in zip(bars, stamps[1:], durations, strict=True):
        end = datetime.fromtimestamp(round(stamp, 3), UTC)
        start = end - timedelta(milliseconds=duration)
        assert bar["end"] == format_timestamp(stamp) == _former_iso(end)
        assert bar["start"] == _former_iso(start) == format_timestamp(start.timestamp())
