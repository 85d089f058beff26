"""The journal codec: encoding, parsing, corruption, status derivation and the validators."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kassette._codec import parse_moment
from kassette._journal import (
    TERMINAL_TYPES,
    ErrorInfo,
    Journal,
    RunStatus,
    check_json,
    encode,
    format_timestamp,
    parse_timestamp,
    validate_name,
)
from kassette.core import cancel_run, fork_run, open_run, read_journal
from kassette.errors import (
    EventNameCollisionError,
    InvalidArgumentError,
    JournalCorruptionError,
    NotSerializableError,
    Suspended,
    TerminalRunError,
)
from kassette.storage import validate_run_id
from kassette.storage._local import LocalStorage
from kassette.testing import FakeClock

STAMP = "2026-01-01T00:00:00.000Z"
CAMEL_CASE = re.compile(r"[a-z]+(?:[A-Z][a-z]*)*")
ENVELOPE = ("type", "session", "offset", "timestamp")
FIELDS_OF_TYPE = {
    "start": {"metadata", "version", "source"},
    "step": {"stepId", "name", "result", "kind", "attempts", "durationMs"},
    "suspend": {"eventId", "event", "reason", "timeoutAt"},
    "resume": {"eventId", "event", "value"},
    "complete": {"result"},
    "error": {"error"},
    "cancel": {"reason"},
}


def entry(offset: int, kind: str, session: int = 1, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "session": session, "offset": offset, "timestamp": STAMP, **fields}


def journal_of(*entries: dict[str, Any], run_id: str = "r1") -> Journal:
    return Journal.parse(b"".join(encode(e) for e in entries), run_id)


def start(offset: int = 0, session: int = 1, **fields: Any) -> dict[str, Any]:
    return entry(offset, "start", session, metadata=fields.pop("metadata", None), **fields)


def step(offset: int, step_id: str, result: Any = None, session: int = 1) -> dict[str, Any]:
    return entry(offset, "step", session, stepId=step_id, name=step_id.split("#")[0], result=result)


def suspend(offset: int, event_id: str, session: int = 1, **fields: Any) -> dict[str, Any]:
    name = fields.pop("event", event_id.rsplit("/", 1)[-1].split("#")[0])
    return entry(offset, "suspend", session, eventId=event_id, event=name, **fields)


def resume(offset: int, event_id: str, value: Any, session: int = 2) -> dict[str, Any]:
    name = event_id.rsplit("/", 1)[-1].split("#")[0]
    return entry(offset, "resume", session, eventId=event_id, event=name, value=value)


# -- strategies ---------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
names = st.text(st.characters(codec="utf-8", exclude_characters="#/"), min_size=1, max_size=12)
optional_text = st.none() | st.text(max_size=20)


def _without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


entry_fields = st.one_of(
    st.builds(
        lambda metadata, version, source: (
            "start",
            _without_none({"metadata": metadata, "version": version, "source": source})
            | {"metadata": metadata},
        ),
        json_values,
        optional_text,
        st.none() | st.fixed_dictionaries({"runId": names, "fromOffset": st.integers(0, 99)}),
    ),
    st.builds(
        lambda step_id, result, kind, attempts, duration: (
            "step",
            _without_none(
                {
                    "stepId": step_id,
                    "name": step_id,
                    "result": result,
                    "kind": kind,
                    "attempts": attempts,
                    "durationMs": duration,
                }
            )
            | {"result": result},
        ),
        names,
        json_values,
        st.sampled_from([None, "step", "sleep", "parallel"]),
        st.none() | st.integers(1, 10),
        st.none() | st.floats(0, 1e6),
    ),
    st.builds(
        lambda event, reason, timeout_at: (
            "suspend",
            _without_none(
                {"eventId": event, "event": event, "reason": reason, "timeoutAt": timeout_at}
            ),
        ),
        names,
        optional_text,
        st.none() | st.just("2026-01-01T01:00:00.000Z"),
    ),
    st.builds(
        lambda event, value: ("resume", {"eventId": event, "event": event, "value": value}),
        names,
        json_values,
    ),
    st.builds(lambda result: ("complete", {"result": result}), json_values),
    st.builds(
        lambda name, message, trace: (
            "error",
            {"error": _without_none({"name": name, "message": message, "traceback": trace})},
        ),
        names,
        st.text(max_size=30),
        optional_text,
    ),
    st.builds(lambda reason: ("cancel", {"reason": reason}), optional_text),
    st.builds(
        lambda kind, payload: (kind, {"payloadOfTheFuture": payload}),
        st.sampled_from(["checkpoint", "annotation", "x-vendor"]),
        json_values,
    ),
)


@st.composite
def journals(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Entries of every type with non-decreasing sessions and dense offsets."""
    drawn = draw(st.lists(entry_fields, min_size=1, max_size=12))
    session = 1
    entries = []
    for offset, (kind, fields) in enumerate(drawn):
        session += draw(st.integers(0, 1))
        entries.append(
            {"type": kind, "session": session, "offset": offset, "timestamp": STAMP, **fields}
        )
    return entries


# -- encode / parse round trip ------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(journals())
def test_encode_then_parse_gives_the_same_entries(entries: list[dict[str, Any]]) -> None:
    lines = [encode(e) for e in entries]
    for line in lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1  # newlines in strings are escaped
        assert json.loads(line) == json.loads(line.decode("utf-8"))
    journal = Journal.parse(b"".join(lines), "r1")
    assert journal.entries == entries
    assert [e["offset"] for e in journal.entries] == list(range(len(entries)))
    assert journal.next_offset == len(entries)
    assert journal.max_session == entries[-1]["session"]


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=20).filter(lambda text: not text.isascii()))
def test_unicode_is_written_as_utf8_not_escaped(text: str) -> None:
    line = encode(step(0, "s", {"text": text, "nested": [text, {"k": text}]}))
    for char in text:
        if not char.isascii():
            assert char.encode("utf-8") in line  # raw UTF-8, not a \\u escape
    assert Journal.parse(line, "r1").entries[0]["result"]["nested"][1]["k"] == text


def test_encode_is_compact_and_keeps_key_order() -> None:
    line = encode(entry(0, "step", stepId="a", name="a", result={"z": 1, "a": [1, 2]}))
    assert line == (
        b'{"type":"step","session":1,"offset":0,"timestamp":"2026-01-01T00:00:00.000Z",'
        b'"stepId":"a","name":"a","result":{"z":1,"a":[1,2]}}\n'
    )


def test_encode_refuses_nan() -> None:
    with pytest.raises(ValueError):
        encode(step(0, "a", math.nan))


def test_empty_journal_parses_empty() -> None:
    journal = Journal.parse(b"", "r1")
    assert journal.entries == [] and journal.next_offset == 0 and journal.max_session == 0
    assert journal.state.status == "running"
    assert journal.status().created_at is None


# -- torn tails and corruption ------------------------------------------------------------


def test_torn_final_line_is_ignored() -> None:
    data = encode(start()) + encode(step(1, "a", 1))
    for cut in range(1, len(encode(step(1, "a", 1)))):
        journal = Journal.parse(data[: len(data) - cut], "r1")
        assert journal.entries == [start()]


def test_torn_final_line_that_is_valid_json_is_still_ignored() -> None:
    data = encode(start()) + encode(step(1, "a", 1)).rstrip(b"\n")
    assert Journal.parse(data, "r1").entries == [start()]


GOOD = encode(start()) + encode(step(1, "a", 1))
CORRUPTIONS = {
    "garbage": (GOOD + b"{not json\n" + encode(step(3, "c")), 3, 2),
    "blank line": (GOOD + b"\n" + encode(step(2, "c")), 3, 2),
    "non-object": (GOOD + b'["a list"]\n' + encode(step(3, "c")), 3, 2),
    "json string": (GOOD + b'"text"\n' + encode(step(3, "c")), 3, 2),
    "offset gap": (GOOD + encode(step(3, "c")), 3, 2),
    "duplicate offset": (GOOD + encode(step(1, "b")), 3, 2),
    "missing offset": (
        GOOD + encode({k: v for k, v in step(2, "b").items() if k != "offset"}),
        3,
        2,
    ),
    "missing stepId": (
        GOOD + encode({k: v for k, v in step(2, "b").items() if k != "stepId"}),
        3,
        2,
    ),
    "missing eventId": (
        GOOD + encode({k: v for k, v in suspend(2, "e").items() if k != "eventId"}),
        3,
        2,
    ),
    "session zero": (GOOD + encode(step(2, "b", session=0)), 3, 2),
    "no type": (GOOD + encode({k: v for k, v in step(2, "b").items() if k != "type"}), 3, 2),
    "invalid utf-8": (GOOD + b'{"type":"\xff"}\n' + encode(step(3, "c")), 3, 2),
    "bad first line": (b"{oops\n" + GOOD, 1, 0),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corruption_names_run_line_and_offset(case: str) -> None:
    data, line, offset = CORRUPTIONS[case]
    with pytest.raises(JournalCorruptionError) as caught:
        Journal.parse(data, "run-42")
    error = caught.value
    assert error.run_id == "run-42" and error.offset == offset
    message = str(error)
    assert "run-42" in message
    assert f"line {line}" in message
    assert str(offset) in message.split(f"line {line}", 1)[1]


def test_corrupt_final_complete_line_is_not_a_torn_tail() -> None:
    with pytest.raises(JournalCorruptionError):
        Journal.parse(GOOD + b"{half\n", "r1")


def test_unknown_entry_types_are_skipped_but_counted() -> None:
    journal = journal_of(
        start(),
        entry(1, "checkpoint", payload={"anything": [1, 2]}),
        step(2, "a", "x"),
        entry(3, "telemetry", session=2),
        suspend(4, "approval", session=2),
    )
    assert journal.next_offset == 5 and journal.max_session == 2
    assert list(journal.steps) == ["a"] and journal.steps["a"]["offset"] == 2
    assert journal.state.status == "suspended"
    status = journal.status()
    assert status.entries == 5 and status.steps == 1 and status.pending_events == ("approval",)


def test_unknown_types_need_no_known_fields() -> None:
    journal = journal_of(start(), entry(1, "step-v2"), entry(2, "suspend-v2"))
    assert journal.steps == {} and journal.suspends == {}


# -- indexes and status ---------------------------------------------------------------------


def test_first_record_is_authoritative() -> None:
    journal = journal_of(
        start(),
        suspend(1, "approval"),
        start(2, session=2),
        resume(3, "approval", "first"),
        start(4, session=3),
        resume(5, "approval", "second", session=3),
    )
    assert journal.resumes["approval"]["value"] == "first"
    assert journal.pending_events == ()


@pytest.mark.parametrize(
    ("tail", "state"),
    [
        ([], "running"),
        ([step(1, "a")], "running"),
        ([suspend(1, "e")], "suspended"),
        ([suspend(1, "e"), start(2, session=2), resume(3, "e", 1)], "running"),
        ([entry(1, "complete", result={"ok": True})], "completed"),
        ([entry(1, "error", error={"name": "ValueError", "message": "bad"})], "failed"),
        ([entry(1, "cancel", reason="stop")], "canceled"),
        ([suspend(1, "e"), entry(2, "cancel", session=2, reason="timeout")], "canceled"),
        ([suspend(1, "e"), entry(2, "complete", result=None)], "completed"),
    ],
)
def test_status_is_derived_from_the_journal(tail: list[dict[str, Any]], state: str) -> None:
    journal = journal_of(start(version="v1"), *tail)
    assert journal.state.status == state
    status = journal.status()
    assert status.status == state and status.run_id == "r1" and status.version == "v1"
    assert status.entries == 1 + len(tail)
    assert status.sessions == max(e["session"] for e in [start(), *tail])
    assert (journal.terminal is not None) is (state in ("completed", "failed", "canceled"))


def test_status_fields() -> None:
    journal = journal_of(
        start(metadata={"q": 1}, version="v2", source={"runId": "src", "fromOffset": 3}),
        step(1, "a", 1),
        step(2, "a#2", 2),
        entry(3, "complete", session=2, result=[1, 2]),
    )
    status = journal.status()
    assert status == RunStatus(
        run_id="r1",
        status="completed",
        version="v2",
        source={"runId": "src", "fromOffset": 3},
        sessions=2,
        entries=4,
        steps=2,
        pending_events=(),
        result=[1, 2],
        error=None,
        created_at=STAMP,
        updated_at=STAMP,
    )
    assert status.to_dict() == {
        "runId": "r1",
        "status": "completed",
        "version": "v2",
        "source": {"runId": "src", "fromOffset": 3},
        "sessions": 2,
        "entries": 4,
        "steps": 2,
        "pendingEvents": [],
        "result": [1, 2],
        "error": None,
        "createdAt": STAMP,
        "updatedAt": STAMP,
    }


def test_failed_status_carries_the_error() -> None:
    journal = journal_of(
        start(), entry(1, "error", error={"name": "KeyError", "message": "'x'", "traceback": "t"})
    )
    status = journal.status()
    assert status.error == ErrorInfo("KeyError", "'x'") and status.result is None
    assert status.to_dict()["error"] == {"name": "KeyError", "message": "'x'"}


def test_status_html_escapes() -> None:
    journal = journal_of(start(), entry(1, "complete", result="<script>alert(1)</script>"))
    rendered = journal.status()._repr_html_()
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered
    assert rendered.startswith("<table>")


def test_first_terminal_entry_decides() -> None:
    journal = journal_of(start(), entry(1, "complete", result=1), entry(2, "cancel", reason="x"))
    assert journal.state.status == "completed" and journal.terminal is not None
    assert journal.terminal["offset"] == 1
    assert {"complete", "error", "cancel"} == TERMINAL_TYPES


def test_version_and_source_come_from_start_entries() -> None:
    journal = journal_of(
        start(metadata={"a": 1}),
        start(1, session=2, version="v1"),
        start(2, session=3, version="v2"),
    )
    assert journal.version == "v1"  # the first start that has one
    assert journal.source is None
    assert journal.first_start is not None and journal.first_start["metadata"] == {"a": 1}


def test_a_fork_start_sets_source_and_restarts_the_version() -> None:
    journal = journal_of(
        start(metadata={"a": 1}, version="v1"),
        start(1, session=2, source={"runId": "a", "fromOffset": 1}),
        start(2, session=3, version="v2", source={"runId": "b", "fromOffset": 2}),
    )
    assert journal.source == {"runId": "b", "fromOffset": 2}  # a fork of a fork: the newest
    assert journal.version == "v2"  # the copied entries ran the source's code
    unversioned_fork = journal_of(
        start(version="v1"), start(1, session=2, source={"runId": "a", "fromOffset": 1})
    )
    assert unversioned_fork.version is None
    continued = journal_of(*unversioned_fork.entries, start(2, session=3, version="v3"))
    assert continued.version == "v3"


def test_pending_events_in_journal_order() -> None:
    journal = journal_of(
        start(),
        suspend(1, "g/b/ok", event="ok"),
        suspend(2, "g/a/ok", event="ok"),
        suspend(3, "review"),
        start(4, session=2),
        resume(5, "g/a/ok", True),
    )
    assert journal.pending_events == ("g/b/ok", "review")
    assert journal.status().pending_events == ("g/b/ok", "review")


# -- resolve_event --------------------------------------------------------------------------


def test_resolve_event_by_id_and_by_name() -> None:
    journal = journal_of(start(), suspend(1, "g/a/approve", event="approve"), suspend(2, "other"))
    assert journal.resolve_event("g/a/approve") == ("g/a/approve", False)
    assert journal.resolve_event("approve") == ("g/a/approve", False)
    assert journal.resolve_event("other") == ("other", False)
    assert journal.resolve_event("nothing") is None


def test_resolve_event_name_collision() -> None:
    journal = journal_of(
        start(),
        suspend(1, "g/a/approve", event="approve"),
        suspend(2, "g/b/approve", event="approve"),
    )
    with pytest.raises(EventNameCollisionError) as caught:
        journal.resolve_event("approve")
    assert caught.value.run_id == "r1"
    assert "g/a/approve" in str(caught.value) and "g/b/approve" in str(caught.value)
    assert journal.resolve_event("g/b/approve") == ("g/b/approve", False)  # ids still work


def test_resolve_event_delivered() -> None:
    journal = journal_of(
        start(),
        suspend(1, "g/a/approve", event="approve"),
        start(2, session=2),
        resume(3, "g/a/approve", 1),
    )
    assert journal.resolve_event("g/a/approve") == ("g/a/approve", True)
    assert journal.resolve_event("approve") == ("g/a/approve", True)


def test_resolve_event_prefers_pending_name_over_delivered_name() -> None:
    journal = journal_of(
        start(),
        suspend(1, "g/a/approve", event="approve"),
        resume(2, "g/a/approve", 1, session=1),
        suspend(3, "g/b/approve", event="approve"),
    )
    assert journal.resolve_event("approve") == ("g/b/approve", False)
    # an exact id is final: a redelivery of a delivered event stays a no-op
    collision = journal_of(
        start(), suspend(1, "x"), resume(2, "x", 1, session=1), suspend(3, "x#2")
    )
    assert collision.resolve_event("x") == ("x", True)
    assert collision.resolve_event("x#2") == ("x#2", False)


# -- check_json -----------------------------------------------------------------------------


class Opaque:
    def __repr__(self) -> str:  # the same test id in every process (pytest-xdist compares them)
        return "Opaque()"


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        Opaque(),
        math.nan,
        math.inf,
        -math.inf,
        {"nested": [1, {"deep": math.nan}]},
        {(1, 2): "tuple key"},
        "\ud800",  # a lone surrogate cannot be written as UTF-8
        {"k": ["\udfff"]},
        complex(1, 2),
    ],
    ids=repr,
)
def test_check_json_refuses(value: object) -> None:
    with pytest.raises(NotSerializableError) as caught:
        check_json(value, "result of step 'fetch'")
    assert isinstance(caught.value, TypeError)
    assert "result of step 'fetch'" in str(caught.value)


def test_check_json_refuses_cycles() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(NotSerializableError):
        check_json(cycle, "x")


def test_check_json_returns_what_replay_sees() -> None:
    assert check_json((1, (2, 3)), "x") == [1, [2, 3]]
    assert check_json({"t": (1,)}, "x") == {"t": [1]}
    assert check_json({1: "a", None: "b"}, "x") == {"1": "a", "null": "b"}
    assert check_json("ünïcødé ✓", "x") == "ünïcødé ✓"
    assert check_json(None, "x") is None


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_check_json_is_identity_on_json(value: Any) -> None:
    assert check_json(value, "x") == value
    assert (
        Journal.parse(encode(step(0, "s", check_json(value, "x"))), "r").entries[0]["result"]
        == value
    )


# -- validators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run_id",
    [
        "",
        "/",
        "a/b",
        "..",
        "../etc",
        ".",
        ".hidden",
        "a b",
        " a",
        "a\n",
        "x" * 201,
        "é",
        "a\\b",
        "a:b",
        "-leading",
        "_leading",
        None,
        12,
    ],
)
def test_validate_run_id_refuses(run_id: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_run_id(run_id)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("run_id", ["a", "0", "x" * 200, "INC-4821", "a.b_c-d", "a..b", "Z9"])
def test_validate_run_id_accepts(run_id: str) -> None:
    assert validate_run_id(run_id) == run_id


@pytest.mark.parametrize("name", ["", "a#2", "a/b", "#", "/", None, 3])
def test_validate_name_refuses(name: object) -> None:
    with pytest.raises(InvalidArgumentError, match="event"):
        validate_name(name, "event")


@pytest.mark.parametrize("name", ["analyze", "human approval", "ünï", "a.b-c_d", "1"])
def test_validate_name_accepts(name: str) -> None:
    assert validate_name(name) == name


# -- timestamps -----------------------------------------------------------------------------

ISO_MS_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_format_timestamp() -> None:
    assert format_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert format_timestamp(1_767_225_600.0) == "2026-01-01T00:00:00.000Z"
    assert format_timestamp(1_767_225_600.123) == "2026-01-01T00:00:00.123Z"
    assert format_timestamp(1.001) == "1970-01-01T00:00:01.001Z"
    assert format_timestamp(1_767_225_600.1) == "2026-01-01T00:00:00.100Z"


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=253_402_300_799_999))  # up to 9999-12-31
def test_timestamps_round_trip_at_millisecond_precision(millis: int) -> None:
    text = format_timestamp(millis / 1000)
    assert ISO_MS_UTC.fullmatch(text)
    assert text.endswith(f".{millis % 1000:03d}Z")
    assert round(parse_timestamp(text) * 1000) == millis


def test_parse_timestamp_reads_other_iso_forms() -> None:
    assert parse_timestamp("2026-01-01T00:00:00Z") == 1_767_225_600.0
    assert parse_timestamp("2026-01-01T01:00:00+01:00") == 1_767_225_600.0


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-30_610_224_000_000, max_value=253_402_300_799_999))
def test_parse_timestamp_reads_the_journals_format_as_a_datetime_does(millis: int) -> None:
    """The journal's own format is read without a datetime: the very same float, from year 1000
    (`format_timestamp` writes four digits from there) to 9999."""
    text = format_timestamp(millis / 1000)
    assert parse_timestamp(text) == parse_moment(text).timestamp()


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-29T00:00:00.000Z",  # not a leap year
        "2026-13-01T00:00:00.000Z",
        "2026-00-10T00:00:00.000Z",
        "0000-01-01T00:00:00.000Z",
        "2026-01-01T24:00:00.000Z",
        "2026-01-01T23:60:00.000Z",
        "2026-01-01T23:59:60.000Z",
        "2026-01-01T23:59:5x.000Z",
    ],
)
def test_parse_timestamp_refuses_what_looks_like_the_journals_format_but_is_no_time(
    text: str,
) -> None:
    with pytest.raises(ValueError):
        parse_timestamp(text)
    assert parse_timestamp("2024-02-29T23:59:59.999Z") == 1_709_251_199.999  # a leap day


# -- a journal cut at any byte ----------------------------------------------------------------


def returning(value: Any, *, calls: list[int] | None = None, index: int = 0) -> Any:
    """A step function giving `value`, noting `index` in `calls` when it runs."""

    def fn() -> Any:
        if calls is not None:
            calls.append(index)
        return value

    return fn


def _write_real_journal(storage: LocalStorage, results: list[Any], suspend_after: bool) -> None:
    """Two sessions of steps through the core, ending with a suspend or a completion."""
    clock = FakeClock()
    half = len(results) // 2
    with open_run(storage, "cut", input={"input": results[:1]}, clock=clock) as run:
        for index, value in enumerate(results[:half]):
            run.record(f"step-{index % 3}", returning(value))
    with open_run(storage, "cut", input={"input": results[:1]}, clock=clock) as run:
        for index, value in enumerate(results):
            run.record(f"step-{index % 3}", returning(value))
        if suspend_after:
            with pytest.raises(Suspended):
                run.wait_for_event("approval", timeout=60, reason="check ✓")
        else:
            run.complete({"done": len(results)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    results=st.lists(json_values, min_size=1, max_size=6),
    suspend_after=st.booleans(),
    cut_fraction=st.floats(min_value=0, max_value=1),
)
def test_journal_cut_at_any_byte_is_a_valid_prefix_and_can_be_appended_to(
    results: list[Any], suspend_after: bool, cut_fraction: float
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        storage = LocalStorage(directory)
        _write_real_journal(storage, results, suspend_after)
        path = Path(directory) / "cut.jsonl"
        data = path.read_bytes()
        original = Journal.parse(data, "cut").entries
        cut = round(cut_fraction * len(data))
        with open(path, "r+b") as file:
            file.truncate(cut)

        prefix = Journal.parse(path.read_bytes(), "cut").entries
        assert prefix == original[: len(prefix)]
        assert len(encode_all(prefix)) <= cut < len(encode_all(original[: len(prefix) + 1])) or (
            cut == len(data) and prefix == original
        )

        if any(e["type"] in TERMINAL_TYPES for e in prefix):
            before = path.read_bytes()
            with pytest.raises(TerminalRunError):
                open_run(storage, "cut", input={"input": results[:1]})
            assert path.read_bytes() == before
            return
        calls: list[int] = []
        with open_run(storage, "cut", input={"input": results[:1]}) as run:
            for index, value in enumerate(results):
                recorded = run.record(
                    f"step-{index % 3}",
                    returning(value, calls=calls, index=index),
                )
                assert recorded == check_json(value, "x")
            run.record("after-cut", lambda: "appended")
        journal = read_journal(storage, "cut")
        assert journal.entries[: len(prefix)] == prefix
        assert [e["offset"] for e in journal.entries] == list(range(len(journal.entries)))
        recorded_before = {e["stepId"] for e in prefix if e["type"] == "step"}
        step_ids = [
            f"step-{i % 3}" + (f"#{i // 3 + 1}" if i >= 3 else "") for i in range(len(results))
        ]
        assert calls == [i for i, step_id in enumerate(step_ids) if step_id not in recorded_before]
        assert journal.steps["after-cut"]["result"] == "appended"
        assert journal.entries[len(prefix)]["type"] == "start"
        assert journal.entries[len(prefix)]["session"] == journal.max_session
        assert journal.first_start is not None
        assert journal.first_start["metadata"] == {"input": check_json(results[:1], "x")}


def encode_all(entries: list[dict[str, Any]]) -> bytes:
    return b"".join(encode(e) for e in entries)


def test_every_byte_cut_of_a_real_journal_parses_as_a_prefix(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    _write_real_journal(storage, [1, "ü", {"a": [None, 2.5]}, [True]], suspend_after=True)
    data = (tmp_path / "cut.jsonl").read_bytes()
    original = Journal.parse(data, "cut").entries
    boundaries = [0]
    for e in original:
        boundaries.append(boundaries[-1] + len(encode(e)))
    assert boundaries[-1] == len(data)
    for cut in range(len(data) + 1):
        complete = sum(1 for b in boundaries[1:] if b <= cut)
        assert Journal.parse(data[:cut], "cut").entries == original[:complete]


def test_core_writes_camel_case_keys_of_the_documented_fields(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    clock = FakeClock()
    with open_run(storage, "src", input={"ticketId": 1}, version="v1", clock=clock) as run:
        run.record("analyze", lambda: {"snake_case_inside_payloads": "is the user's"})
        run.begin_step("nap", kind="sleep").record({"wakeAt": STAMP})
        run.begin_step("retried").record(1, attempts=2)
        with pytest.raises(Suspended):
            run.wait_for_event("approval", timeout=5, reason="why")
    with open_run(storage, "src", clock=clock) as run:
        run.deliver("approval", {"ok": True})
        run.fail(RuntimeError("boom"))
    fork_run(storage, "src", offset=3, new_run_id="dst")
    with open_run(storage, "dst") as run:
        run.complete("fine")
    cancel_run(storage, fork_run(storage, "src", offset=2), "enough")
    seen: set[str] = set()
    for run_id in storage.list_runs():
        for parsed in read_journal(storage, run_id).entries:
            keys = list(parsed)
            assert keys[:4] == list(ENVELOPE)
            assert set(keys[4:]) <= FIELDS_OF_TYPE[parsed["type"]], parsed
            assert all(CAMEL_CASE.fullmatch(key) for key in keys)
            assert ISO_MS_UTC.fullmatch(parsed["timestamp"])
            seen.add(parsed["type"])
            seen.update(keys)
    assert set(FIELDS_OF_TYPE) <= seen  # every entry type was written
    assert {"source", "version", "kind", "attempts", "durationMs", "timeoutAt"} <= seen


def test_a_timestamp_without_a_zone_is_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")  # not the machine's zone, whatever it is
    time.tzset()
    try:
        assert parse_timestamp("2026-01-01T00:00:00") == parse_timestamp(STAMP) == 1_767_225_600
        assert parse_timestamp("2026-01-01T01:00:00+01:00") == 1_767_225_600
        with pytest.raises(ValueError):
            parse_timestamp("yesterday")
    finally:
        monkeypatch.undo()
        time.tzset()


# -- a run's status without decoding step results ------------------------------------------------


STEP_RESULTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["step", "step", "step-reordered", "suspend", "resume", "note"]),
            st.text(max_size=6),
            STEP_RESULTS,
            st.integers(1, 3),
        ),
        max_size=12,
    ),
    st.sampled_from([None, "complete", "cancel"]),
    st.binary(max_size=6),
)
def test_status_without_step_bodies_is_the_parsed_journals_status(
    shape: list[tuple[str, str, Any, int]], end: str | None, torn: bytes
) -> None:
    stamp = "2026-05-08T14:21:03Z"
    entries: list[dict[str, Any]] = [
        {"type": "start", "session": 1, "offset": 0, "timestamp": stamp, "metadata": None}
    ]
    session = 1
    for kind, text, result, bump in shape:
        session = max(session, bump)
        envelope = {"session": session, "offset": len(entries), "timestamp": stamp}
        if kind == "step":
            entries.append(
                {"type": "step", **envelope, "stepId": text, "name": "n", "result": result}
            )
        elif kind == "step-reordered":  # a writer with another key order: the slow path
            entries.append(
                {"name": "n", "type": "step", "result": result, **envelope, "stepId": text}
            )
        elif kind in ("suspend", "resume"):
            entries.append({"type": kind, **envelope, "eventId": text or "e", "event": "e"})
        else:
            entries.append({"type": "note", **envelope, "text": text})
    if end is not None:
        entries.append({"type": end, "session": session, "offset": len(entries), "timestamp": "x"})
    data = b"".join(encode(entry) for entry in entries) + torn.replace(b"\n", b"")
    assert Journal.status_of(data, "r") == Journal.parse(data, "r").status()


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"step","session":1,"offset":2,"timestamp":"t","stepId":"a","name":"n","result":1}',
        b'{"type":"step","session":0,"offset":1,"timestamp":"t","stepId":"a","name":"n","result":1}',
        b'{"type":"step","session":1,"offset":1,"timestamp":"t","stepId":"a","name":7,"result":1}',
        b'{"type":"step","session":1,"offset":1,"timestamp":"t","stepId":"a","name":"n\xff"}',
        b'{"type":"step","session":1,"offset":1,"timestamp":"t","stepId":"a","name":"n"',
        b'{"type":"step","session":1,"offset":01,"timestamp":"t","stepId":"a","name":"n"}',
        b'{"type":"step","session":01,"offset":1,"timestamp":"t","stepId":"a","name":"n"}',
    ],
)
def test_status_without_step_bodies_still_finds_a_broken_step_envelope(line: bytes) -> None:
    start = encode({"type": "start", "session": 1, "offset": 0, "timestamp": "t"})
    with pytest.raises(JournalCorruptionError):
        Journal.parse(start + line + b"\n", "r")
    with pytest.raises(JournalCorruptionError):
        Journal.status_of(start + line + b"\n", "r")
    steps = _step_line(2, b"1") + _step_line(3, b"1")  # followed by step lines: the same
    with pytest.raises(JournalCorruptionError) as status:
        Journal.status_of(start + line + b"\n" + steps, "r")
    assert status.value.offset == 1


def test_status_of_a_journal_opening_with_a_step_line_whose_result_is_broken() -> None:
    """Its first entry's time is read from the line, which is then corruption (it was a bare
    JSONDecodeError: `kassette list` stopped with a traceback)."""
    data = _step_line(0, b"[1,}") + _step_line(1, b"1")
    with pytest.raises(JournalCorruptionError) as parsed:
        Journal.parse(data, "r")
    with pytest.raises(JournalCorruptionError) as status:
        Journal.status_of(data, "r")
    assert parsed.value.offset == status.value.offset == 0


def test_status_of_every_byte_cut_of_a_real_journal_is_the_parsed_prefixs(tmp_path: Path) -> None:
    """Two sessions as the core writes them, a suspend, a resume: whatever a reader finds."""
    storage = LocalStorage(tmp_path)
    _write_real_journal(storage, [1, "ü", {"a": [None, 2.5]}, [True]], suspend_after=False)
    data = (tmp_path / "cut.jsonl").read_bytes()
    assert Journal.parse(data, "cut").max_session == 2
    for cut in range(len(data) + 1):
        assert Journal.status_of(data[:cut], "cut") == Journal.parse(data[:cut], "cut").status()


def test_status_is_the_run_status_its_constructor_builds() -> None:
    """Both folds end in `kassette._listing.folded_status`, which fills a RunStatus's fields at
    once (`RunStatus.of_fields`): every field, nothing else, still frozen, as its constructor
    builds it."""
    stamp = "2026-01-01T00:00:00.000Z"
    source = {"runId": "src", "fromOffset": 1}
    data = b"".join(
        encode(entry)
        for entry in [
            {"type": "start", "session": 1, "offset": 0, "timestamp": stamp, "metadata": 1},
            {"type": "start", "session": 2, "offset": 1, "timestamp": stamp, "source": source},
            {"type": "error", "session": 2, "offset": 2, "timestamp": stamp, "error": {}},
        ]
    )
    for status in (Journal.status_of(data, "r"), Journal.parse(data, "r").status()):
        built = RunStatus(**{f.name: getattr(status, f.name) for f in dataclasses.fields(status)})
        assert status == built and vars(status) == vars(built)
        assert (status.source, status.sessions, status.error) == (source, 2, ErrorInfo("Error", ""))
        with pytest.raises(dataclasses.FrozenInstanceError):
            status.status = "running"  # type: ignore[misc]


def _step_line(offset: int, result_json: bytes) -> bytes:
    return (
        b'{"type":"step","session":1,"offset":%d,"timestamp":"t","stepId":"s%d","name":"n",'
        b'"result":%s}\n' % (offset, offset, result_json)
    )


# What the journal-wide checks cannot vouch for (each line is checked on its own then): more
# brackets in all lines than one may nest, text beyond ASCII, an escape that may be a surrogate.
WHOLE_JOURNAL_CHECKS_FAIL = {
    "brackets": [b"[" * 60 + b"]" * 60, b"{" + b'"a":{' * 50 + b"}" * 51],
    "text": [b'"\xc3\xa9t\xc3\xa9"', b'"\xe2\x82\xac"'],
    "escapes": [b'"\\ud83d\\ude00"', b'"\\u00e9"'],
}
HOSTILE_RESULTS = {
    "nested 102 deep": b"[" * 102 + b"]" * 102,
    "invalid UTF-8": b'"\xff"',
    "surrogate bytes": b'"\xed\xa0\x80"',
    "escaped lone surrogate": b'"\\ud800"',
}


@pytest.mark.parametrize("valid", WHOLE_JOURNAL_CHECKS_FAIL)
@pytest.mark.parametrize("hostile", [None, *HOSTILE_RESULTS])
def test_status_checks_each_step_line_when_the_whole_journal_checks_cannot(
    valid: str, hostile: str | None
) -> None:
    """Lines that are fine one by one but not all together take the per-line checks: the
    status still equals the parsed journal's, and a hostile step line is still corruption."""
    data = encode({"type": "start", "session": 1, "offset": 0, "timestamp": "t"})
    for result in WHOLE_JOURNAL_CHECKS_FAIL[valid]:
        data += _step_line(data.count(b"\n"), result)
    if hostile is None:
        assert Journal.status_of(data, "r") == Journal.parse(data, "r").status()
        assert Journal.status_of(data, "r").steps == 2
        return
    data += _step_line(3, HOSTILE_RESULTS[hostile]) + _step_line(4, b"1")
    with pytest.raises(JournalCorruptionError) as parsed:
        Journal.parse(data, "r")
    with pytest.raises(JournalCorruptionError) as status:
        Journal.status_of(data, "r")
    assert parsed.value.offset == status.value.offset == 3
