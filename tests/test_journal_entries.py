"""A parsed journal keeps its bytes and decodes entries when read (`Entries`, `EntryIndex`)."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kassette._journal import Entries, EntryIndex, Journal, decode_line, encode
from kassette.errors import JournalCorruptionError

STAMP = "2026-01-01T00:00:00.000Z"


def entry(offset: int, kind: str, session: int = 1, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "session": session, "offset": offset, "timestamp": STAMP, **fields}


def step(offset: int, step_id: str, result: Any, session: int = 1) -> dict[str, Any]:
    return entry(offset, "step", session, stepId=step_id, name=step_id.split("#")[0], result=result)


ENTRIES = [
    entry(0, "start", metadata={"ticket": "INC-1"}),
    step(1, "a", {"text": "ü" * 3, "n": [1, 2.5, None]}),
    entry(2, "suspend", eventId="approval", event="approval"),
    entry(3, "resume", 2, eventId="approval", event="approval", value=True),
    step(4, "a#2", [1]),
    step(5, "a#2", "a duplicate id: the first record stays authoritative", session=2),
]


def parsed() -> Journal:
    return Journal.parse(b"".join(encode(e) for e in ENTRIES), "r1")


def test_parsed_entries_read_like_a_list_of_dicts() -> None:
    journal = parsed()
    assert isinstance(journal.entries, Entries)
    assert journal.entries == ENTRIES and ENTRIES == journal.entries  # noqa: SIM300 (reflected)
    assert list(journal.entries) == ENTRIES
    assert journal.entries[1] == ENTRIES[1] and journal.entries[-1] == ENTRIES[-1]
    assert journal.entries[2:4] == ENTRIES[2:4] and isinstance(journal.entries[2:4], list)
    assert len(journal.entries) == journal.next_offset == 6
    assert journal.entries != ENTRIES[:-1] and journal.entries != "not a list"
    assert repr(journal.entries) == repr(ENTRIES)
    with pytest.raises(IndexError):
        journal.entries[6]
    with pytest.raises(TypeError):
        hash(journal.entries)


def test_indexes_read_like_dicts_of_the_first_entry_per_id() -> None:
    journal = parsed()
    assert isinstance(journal.steps, EntryIndex)
    assert journal.steps == {"a": ENTRIES[1], "a#2": ENTRIES[4]}
    assert list(journal.steps) == ["a", "a#2"] and len(journal.steps) == 2
    assert journal.steps["a#2"]["result"] == [1]
    assert journal.steps.get("a#2") == ENTRIES[4]
    assert journal.steps.get("b") is None and journal.steps.get("b", "none") == "none"
    assert "a" in journal.steps and "b" not in journal.steps and 1 not in journal.steps
    assert journal.suspends == {"approval": ENTRIES[2]}
    assert journal.resumes["approval"]["value"] is True
    assert journal.pending_events == ()
    assert repr(journal.steps) == repr({"a": ENTRIES[1], "a#2": ENTRIES[4]})
    with pytest.raises(KeyError):
        journal.steps["b"]


def test_each_read_decodes_afresh_so_callers_cannot_change_the_journal() -> None:
    journal = parsed()
    first = journal.steps["a"]
    first["result"] = "changed by a caller"
    assert journal.steps["a"]["result"] == ENTRIES[1]["result"]
    assert journal.entries[1]["result"] == ENTRIES[1]["result"]


def test_entries_added_live_follow_the_parsed_ones() -> None:
    journal = parsed()
    live = step(6, "b", {"x": 1}, session=2)
    journal.add(live)
    assert journal.entries[6] is live and journal.steps["b"] is live
    assert journal.entries == [*ENTRIES, live]
    assert journal.status().steps == 4 and journal.status().entries == 7
    assert journal.status().updated_at == STAMP


def test_a_new_journal_holds_what_is_added() -> None:
    journal = Journal("r1")
    assert journal.entries == [] and journal.steps == {} and not journal.entries
    for e in ENTRIES:
        journal.add(e)
    assert journal.entries == ENTRIES and journal.steps["a"] is ENTRIES[1]
    assert journal.max_session == 2 and journal.status().steps == 3


def test_parse_copies_mutable_bytes() -> None:
    data = bytearray(b"".join(encode(e) for e in ENTRIES))
    journal = Journal.parse(data, "r1")  # type: ignore[arg-type]
    data[:] = b" " * len(data)
    assert journal.entries == ENTRIES


def test_torn_tail_is_not_an_entry_and_is_never_decoded() -> None:
    data = b"".join(encode(e) for e in ENTRIES) + b'{"type":"step","sess'
    journal = Journal.parse(data, "r1")
    assert journal.entries == ENTRIES and list(journal.entries)[-1] == ENTRIES[-1]


@pytest.mark.parametrize(
    "line",
    [
        # not kassette's own encoding, but JSON that json.loads reads: still read the same way
        b'\xef\xbb\xbf{"type":"start","session":1,"offset":0,"timestamp":"t"}\n',
        b' {"type": "start", "session": 1, "offset": 0, "timestamp": "t"}\r\n',
        b'{"type" : "start", "session":1, "offset":0, "timestamp":"t"} \t\r\n',
    ],
)
def test_lines_decode_exactly_as_json_loads_does(line: bytes) -> None:
    journal = Journal.parse(line, "r1")
    assert journal.entries == [json.loads(line)]


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"start","session":1,"offset":0,"timestamp":"t"} x\n',
        b'{"type":"start","session":1,"offset":0,"timestamp":"t"\xff}\n',
        b'{"type":"start","session":1,"offset":0,"timestamp":"t"}{}\n',
        b'{"type":"start","session":1,"offset":0,"timestamp":\n',
        b'{"type":"start","session":1,"offset":0,"timestamp":"t",}\n',
        # what json.loads reads but UTF-8 cannot hold: a surrogate, as bytes or escaped
        b'{"type":"start","session":1,"offset":0,"timestamp":"t","x":"\xed\xa0\x80"}\n',
        b'{"type":"start","session":1,"offset":0,"timestamp":"t","x":"\\udc00"}\n',
        # or in another encoding json.loads detects
        '{"type":"start","session":1,"offset":0,"timestamp":"t"}'.encode("utf-16-le") + b"\n",
    ],
)
def test_what_strict_utf8_json_refuses_is_corruption(line: bytes) -> None:
    with pytest.raises(ValueError):
        strict_loads(line[:-1])
    with pytest.raises(JournalCorruptionError) as caught:
        Journal.parse(line, "r1")
    assert caught.value.offset == 0


def strict_loads(line: bytes) -> Any:
    """The rule, spelled out: UTF-8 (after an optional BOM), JSON, every string UTF-8 can hold."""
    value = json.loads(line.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    json.dumps(value, ensure_ascii=False).encode()  # a lone surrogate cannot be UTF-8
    return value


def _loads_outcome(decode: Any, line: bytes) -> tuple[str, Any]:
    try:
        return "value", decode(line)
    except ValueError:
        return "error", None


JSON_LINES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=10,
).map(lambda value: json.dumps({"k": value}, ensure_ascii=False).encode())


@given(
    line=JSON_LINES,
    cut=st.integers(min_value=0, max_value=200),
    noise=st.binary(max_size=4),
)
def test_decode_line_agrees_with_strict_json(line: bytes, cut: int, noise: bytes) -> None:
    """Whole, cut short, or with bytes spliced in: the same value, or both refuse."""
    for candidate in (line, line[:cut], line[:cut] + noise + line[cut:], line + noise):
        assert _loads_outcome(decode_line, candidate) == _loads_outcome(strict_loads, candidate)


def test_a_parsed_journal_holds_about_its_size_in_memory() -> None:
    """As dicts, these ~1 KB entries would take about five times the journal's size."""
    text = "a realistic step result, mostly text " * 25
    lines = [encode(entry(0, "start", metadata=None))] + [
        encode(step(i, f"s#{i}", {"id": i, "content": text, "usage": {"in": i, "out": 2}}))
        for i in range(1, 2001)
    ]
    data = b"".join(lines)
    tracemalloc.start()
    try:
        journal = Journal.parse(data, "r1")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert journal.status().steps == 2000
    assert held < len(data) / 2  # only the indexes: the bytes were the caller's already


def test_a_live_run_keeps_its_entries_as_the_lines_it_wrote(tmp_path: Any) -> None:
    from kassette.core import open_run
    from kassette.storage._local import LocalStorage

    results = [
        {"choices": [{"message": {"content": f"answer {i} " + "word " * 150}}], "usage": [i] * 20}
        for i in range(300)
    ]
    storage = LocalStorage(tmp_path)
    with open_run(storage, "r1", input=None) as run:
        tracemalloc.start()
        try:
            for result in results:
                assert run.record("s", lambda result=result: result) == result
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert run.journal.steps["s#300"]["result"] == results[299]
    snapshot = storage.read("r1")
    assert snapshot is not None
    assert held < 1.5 * len(snapshot.data)  # as dicts: about five times the journal
