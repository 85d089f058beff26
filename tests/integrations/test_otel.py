"""`kassette.integrations.otel.instrument()` (issue 22 section 4): live spans, as steps happen,
through the OpenTelemetry SDK (an in-memory exporter), equal to what `kx.to_otlp` exports from
the same journal, and nothing again for replayed steps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kassette import InvalidArgumentError, MemoryStorage, kassette
from kassette import explore as kx
from kassette.integrations import otel


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    otel.instrument(provider)
    try:
        yield memory
    finally:
        otel.uninstrument()


def agent(storage: MemoryStorage, seen: list[str]) -> Any:
    @kassette(storage=storage)
    def review(ctx: Any, goal: str) -> dict[str, Any]:
        plan = ctx.step("plan", lambda: seen.append("plan") or {"goal": goal})
        ctx.parallel(
            {
                "left": lambda branch: branch.step("fetch", lambda: "L"),
                "right": lambda branch: branch.step("fetch", lambda: "R"),
            },
            name="gather",
        )
        verdict = ctx.suspend("review")
        after = ctx.step("after", lambda: seen.append("after") or "done")
        return {"plan": plan, "verdict": verdict, "after": after}

    return review


def exported(storage: MemoryStorage, run_id: str) -> dict[str, dict[str, Any]]:
    found = kx.to_otlp(kx.load(storage, [run_id]))
    return {span["spanId"]: span for span in found["resourceSpans"][0]["scopeSpans"][0]["spans"]}


def test_spans_are_emitted_as_steps_happen_and_match_the_export(
    exporter: InMemorySpanExporter,
) -> None:
    storage, seen = MemoryStorage(), []
    review = agent(storage, seen)
    assert review.start("ship it", run_id="r").status == "suspended"
    first = {f"{span.context.span_id:016x}": span for span in exporter.get_finished_spans()}
    names = sorted(span.name for span in first.values())
    assert names == sorted(
        ["plan", "gather", "gather/left/fetch", "gather/right/fetch", "session 1",
         "suspend review"]
    )  # fmt: skip
    assert "run r" not in names  # the run has not ended
    exporter.clear()

    assert review.resume("r", "review", "approved").status == "success"
    assert seen == ["plan", "after"]  # the resume replayed plan
    second = {f"{span.context.span_id:016x}": span for span in exporter.get_finished_spans()}
    assert sorted(span.name for span in second.values()) == ["after", "run r", "session 2"]
    assert not set(first) & set(second)  # nothing replayed is emitted again

    expected = exported(storage, "r")
    for span_id, span in {**first, **second}.items():
        want = expected[span_id]  # every live span is one the export has, same id
        assert f"{span.context.trace_id:032x}" == want["traceId"]
        assert span.name == want["name"]
        parent = f"{span.parent.span_id:016x}" if span.parent else ""
        assert parent == want.get("parentSpanId", "")
        attributes = dict(span.attributes or {})
        assert attributes["kassette.run_id"] == "r"
        if "kassette.offset" in attributes:
            wanted = {pair["key"] for pair in want["attributes"]}
            assert set(attributes) == wanted - {"kassette.pending"} | (
                {"kassette.pending"} & set(attributes)
            )
            if span.name in ("plan", "after", "gather/left/fetch"):
                assert span.start_time == int(want["startTimeUnixNano"])
                assert span.end_time == int(want["endTimeUnixNano"])
    (root,) = [span for span in second.values() if span.name == "run r"]
    assert root.status.status_code == StatusCode.OK


def test_a_failed_run_emits_its_exception_and_uninstrument_stops(
    exporter: InMemorySpanExporter,
) -> None:
    storage = MemoryStorage()

    @kassette(storage=storage)
    def failing(ctx: Any, _: Any) -> None:
        ctx.step("first", lambda: 1)
        raise ValueError("no")

    failing.start(None, run_id="bad")
    (root,) = [span for span in exporter.get_finished_spans() if span.name == "run bad"]
    assert root.status.status_code == StatusCode.ERROR
    assert [(event.name, event.attributes["exception.type"]) for event in root.events] == [
        ("exception", "ValueError")
    ]
    otel.uninstrument()
    exporter.clear()
    failing.start(None, run_id="bad2")
    assert exporter.get_finished_spans() == ()
    with pytest.raises(InvalidArgumentError):
        otel.instrument(object())
