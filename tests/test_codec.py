"""The entry codec against hostile input: deep nesting, invalid UTF-8, lone surrogates.

Whatever kassette accepts it can replay inside a workflow; whatever a journal holds that it
cannot read is `JournalCorruptionError` at that line's offset, in every reader, never a raw
`RecursionError` or `UnicodeDecodeError`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kassette import MemoryStorage, NotSerializableError, kassette
from kassette._codec import (
    MAX_DEPTH,
    check_json,
    check_json_encoded,
    decode_line,
    encode,
    encode_entry,
)
from kassette._journal import Journal
from kassette.core import fork_run, open_run, read_journal
from kassette.errors import JournalCorruptionError

STAMP = "2026-01-01T00:00:00.000Z"


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value `depth` arrays deep (alternating with objects), built without recursion."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def journal_bytes(*entries: dict[str, Any]) -> bytes:
    return b"".join(encode(entry) for entry in entries)


START = {"type": "start", "session": 1, "offset": 0, "timestamp": STAMP, "metadata": None}


def step_line(result: bytes, offset: int = 1) -> bytes:
    head = f'{{"type":"step","session":1,"offset":{offset},"timestamp":"{STAMP}",'
    return head.encode() + b'"stepId":"a","name":"a","result":' + result + b"}\n"


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


# -- 1. what is accepted is replayable ----------------------------------------------------------


def test_values_nest_up_to_the_limit_and_no_deeper() -> None:
    assert check_json(nested(MAX_DEPTH), "value") == nested(MAX_DEPTH)
    for depth in (MAX_DEPTH + 1, 990, 10_000):
        with pytest.raises(NotSerializableError, match=f"deeper than {MAX_DEPTH}"):
            check_json(nested(depth), "value")
    wide = [[i, {"k": [i]}] for i in range(50_000)]  # many brackets, shallow: accepted
    assert check_json(wide, "value") == wide


def test_a_value_that_contains_itself_is_refused_as_circular() -> None:
    """The append path's encoder keeps no table of the containers it is in: a cycle still
    says circular, and one reached twice per level (a dict holding itself twice) is not
    walked exponentially."""
    in_list: list[Any] = []
    in_list.append(in_list)
    twice: dict[str, Any] = {}
    twice["a"] = twice["b"] = twice
    shared = {"x": [twice]}
    for value in (in_list, twice, shared):
        with pytest.raises(NotSerializableError, match="Circular reference"):
            check_json(value, "value")
    with open_run(MemoryStorage(), "r1") as run:
        with pytest.raises(NotSerializableError, match="Circular reference"):
            run.record("loop", lambda: twice)
        assert run.journal.next_offset == 1  # the start only


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 990, 10_000])
def test_a_too_deep_step_result_is_refused_and_the_run_stays_open(depth: int) -> None:
    storage = MemoryStorage()
    deep = nested(depth)

    def flow(ctx: Any, value: Any) -> Any:
        return ctx.step("a", lambda: deep if value == "deep" else "fine")

    workflow = kassette(flow, storage=storage)
    with pytest.raises(NotSerializableError):
        workflow.start("deep", run_id="r")
    journal = read_journal(storage, "r")
    assert [e["type"] for e in journal.entries] == ["start"]
    assert journal.status().status == "running"

    def fixed(ctx: Any, value: Any) -> Any:
        return ctx.step("a", lambda: "fine")

    assert kassette(fixed, storage=storage).start(run_id="r").result == "fine"


def test_too_deep_inputs_resume_values_and_return_values_are_refused_unwritten() -> None:
    storage = MemoryStorage()
    deep = nested(MAX_DEPTH + 1)

    def flow(ctx: Any, value: Any) -> Any:
        return deep if value == "return deep" else ctx.suspend("approval")

    workflow = kassette(flow, storage=storage)
    with pytest.raises(NotSerializableError):
        workflow.start(deep, run_id="input")
    assert storage.read("input") is None
    with pytest.raises(NotSerializableError):
        workflow.start("return deep", run_id="returns")
    assert read_journal(storage, "returns").status().status == "running"  # not failed
    assert workflow.start("x", run_id="r").status == "suspended"
    before = storage.read("r")
    with pytest.raises(NotSerializableError):
        workflow.resume("r", "approval", deep)
    after = storage.read("r")
    assert before is not None and after is not None and after.data == before.data
    assert workflow.resume("r", "approval", "ok").result == "ok"
    with open_run(storage, "core") as run:
        for call in (
            lambda: run.record("deep", lambda: deep),
            lambda: run.complete(deep),
            lambda: run.append_entry("note", {"deep": deep}),
            lambda: run.deliver("nothing", deep),
        ):
            with pytest.raises(NotSerializableError):
                call()
    assert [e["type"] for e in read_journal(storage, "core").entries] == ["start"]


def test_a_value_at_the_limit_recorded_at_top_level_replays_deep_inside_a_workflow() -> None:
    storage = MemoryStorage()
    value = nested(MAX_DEPTH)
    with open_run(storage, "r") as run:
        run.record("a", lambda: value)
        run.record("b", lambda: value)

    def flow(ctx: Any, _: Any) -> Any:
        def down(levels: int) -> Any:  # user code that is itself deep in the stack
            if levels:
                return down(levels - 1)
            return ctx.step("a", lambda: None)

        headroom = sys.getrecursionlimit() - MAX_DEPTH - 400
        return [down(headroom) == value, ctx.step("b", lambda: 0) == value]

    result = kassette(flow, storage=storage).start(run_id="r")
    assert result.status == "success" and result.result == [True, True]
    with open_run(storage, "r2") as run, pytest.raises(NotSerializableError):
        run.record("a", lambda: nested(986))  # refused where it was recorded


# -- 2. and 3. what a journal holds that cannot be read is corruption at its offset --------------


HOSTILE = {
    "deep": deep_json(10_000),
    "just too deep": deep_json(MAX_DEPTH + 1),  # the entry around it makes MAX_DEPTH + 2
    "invalid UTF-8": b'"\xff\xfe"',
    "surrogate bytes": b'"\xed\xa0\x80"',
    "escaped lone surrogate": b'"\\ud800"',
    "overlong UTF-8": b'"\xc0\xaf"',
}


@pytest.mark.parametrize("name", HOSTILE)
def test_every_hostile_line_is_corruption_at_its_offset(name: str) -> None:
    data = (
        journal_bytes(START)
        + step_line(HOSTILE[name])
        + journal_bytes(
            {"type": "cancel", "session": 2, "offset": 2, "timestamp": STAMP, "reason": None}
        )
    )
    with pytest.raises(JournalCorruptionError) as caught:
        Journal.parse(data, "r")
    assert (caught.value.run_id, caught.value.offset) == ("r", 1)
    assert "line 2" in str(caught.value)
    with pytest.raises(ValueError):
        decode_line(step_line(HOSTILE[name])[:-1])


def test_a_line_at_the_limit_reads_and_forks() -> None:
    storage = MemoryStorage()
    data = journal_bytes(START) + step_line(deep_json(MAX_DEPTH))
    storage.append("r", data, token=None)
    journal = read_journal(storage, "r")
    expected: Any = 1
    for _ in range(MAX_DEPTH):
        expected = [expected]
    assert journal.steps["a"]["result"] == expected
    new = fork_run(storage, "r", offset=2)
    assert read_journal(storage, new).entries[1] == journal.entries[1]


def test_a_surrogate_in_a_journal_never_reaches_fork() -> None:
    storage = MemoryStorage()
    storage.append("r", journal_bytes(START) + step_line(b'"\xed\xa0\x80"'), token=None)
    with pytest.raises(JournalCorruptionError) as caught:
        fork_run(storage, "r", offset=2)
    assert caught.value.offset == 1
    assert list(storage.list_runs()) == ["r"]


def test_an_escaped_surrogate_pair_is_a_character_not_corruption() -> None:
    line = step_line(b'"\\ud83d\\ude00 ok"')
    assert Journal.parse(journal_bytes(START) + line, "r").steps["a"]["result"] == "\U0001f600 ok"
    escaped_backslash = step_line(b'"\\\\ud800"')  # the text \ud800, not a surrogate
    assert Journal.parse(journal_bytes(START) + escaped_backslash, "r").steps["a"]["result"] == (
        "\\ud800"
    )


SPLICED_VALUES: list[Any] = [
    None,
    0,
    -0.0,
    1e300,
    'ü ✓ \u2028 "quoted" \\ \n',
    [],
    {},
    (1, "two", [3.5, None]),
    {"nested": {"list": [1, {"a": True}], "empty": {}}, "text": "é"},
    {1: "int key", "x": [True, False]},
    {1: "merged away", "1": "kept"},  # two keys that JSON makes one
]


@pytest.mark.parametrize("value", SPLICED_VALUES)
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"kind": "sleep", "attempts": 2, "durationMs": 1.5},
        {'é \u2028 "q" \\ \x00': 'é \u2028 "q" \\ \x00 \U0001f600', "big": 10**30},
        {"tiny": 1e-7, "flag": True, "none": None, "list": [1, "a"], "negative": -0.0},
    ],
)
def test_a_line_spliced_around_the_checked_text_decodes_to_the_entry(
    value: Any, extra: dict[str, Any]
) -> None:
    """The step line is built around the text `check_json_encoded` produced (the result is
    encoded once): it decodes to the entry that holds the checked value, and is byte for byte
    the ordinary encoding unless JSON merged two of the value's keys."""
    checked, text = check_json_encoded(value, "a result")
    assert checked == check_json(value, "a result")
    fields = {"stepId": "s", "name": "s", "result": checked, **extra}
    entry, line = encode_entry("step", 1, 3, "2026-01-01T00:00:00.000Z", fields, ("result", text))
    assert entry == {
        "type": "step",
        "session": 1,
        "offset": 3,
        "timestamp": "2026-01-01T00:00:00.000Z",
        **fields,
    }
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line[:-1]) == entry
    assert encode_entry("step", 1, 3, "2026-01-01T00:00:00.000Z", fields)[1] == encode(entry)
    if value != {1: "merged away", "1": "kept"}:
        assert line == encode(entry)


def test_a_live_steps_result_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import kassette._codec as codec

    big = {"text": "x" * 100_000}
    encoded: list[int] = []  # the length of each text the codec's encoder produced
    real = codec._encode

    def counting(value: Any) -> str:
        text = real(value)
        encoded.append(len(text))
        return text

    with open_run(MemoryStorage(), "r1") as run:
        monkeypatch.setattr(codec, "_encode", counting)
        assert run.record("big", lambda: big) == big
        monkeypatch.undo()
        assert 100_000 < sum(encoded) < 101_000 and max(encoded) < 100_100
        assert run.journal.steps["big"]["result"] == big


@pytest.mark.parametrize(
    "replacement",
    [
        "lambda *args: (_ for _ in ()).throw(TypeError('takes 10 arguments'))",
        "lambda *args: (lambda value, level: ['not json'])",
        "None",
    ],
    ids=["signature-changed", "different-output", "absent"],
)
def test_import_falls_back_to_the_public_encoder_when_the_c_accelerator_differs(
    replacement: str,
) -> None:
    """`codec` calls CPython's undocumented `c_make_encoder` by position: a Python where that
    call fails or builds other text must still import kassette and journal the same bytes."""
    script = (
        "import json.encoder\n"
        "accelerator = json.encoder.c_make_encoder\n"
        f"json.encoder.c_make_encoder = {replacement}\n"
        "import kassette._codec as codec\n"
        "json.encoder.c_make_encoder = accelerator  # json's own calls are not under test\n"
        "assert codec._C_ENCODE is None\n"
        "entry = {'type': 'step', 'stepId': 'a', 'result': {'x': [1, 'é', 2.5]}}\n"
        "print(repr(codec.encode(entry)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = encode({"type": "step", "stepId": "a", "result": {"x": [1, "é", 2.5]}})
    assert done.stdout.rstrip("\n") == repr(expected)


@pytest.mark.parametrize("when", ["before-import", "after-import"])
def test_journal_writes_use_the_pure_python_encoder_while_the_c_one_cannot_be_used(
    when: str, tmp_path: Path
) -> None:
    """With `c_make_encoder` replaced by a function of another signature, and left so, a run
    still journals, replays and forks: every encoding in the codec falls back to the
    pure-Python encoder (issue 30 section 4)."""
    broken = "json.encoder.c_make_encoder = lambda markers, default: None\n"
    script = (
        "import json.encoder\n"
        + (broken if when == "before-import" else "")
        + "from kassette import LocalStorage, kassette\n"
        "from kassette.core import read_journal\n"
        + (broken if when == "after-import" else "")
        + f"storage = LocalStorage({str(tmp_path)!r})\n"
        "@kassette(storage=storage)\n"
        "def flow(ctx, topic):\n"
        "    return ctx.step('draft', lambda: {'topic': topic, 'x': [1, 'é', 2.5, None]})\n"
        "assert flow.start('tides', run_id='r').status == 'success'\n"
        "forked = flow.fork('r', step='draft', result={'edited': True}, new_run_id='f')\n"
        "steps = [e['result'] for e in read_journal(storage, 'r').entries if e['type'] == 'step']\n"
        "print(repr((steps, forked.result)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(
        ([{"topic": "tides", "x": [1, "é", 2.5, None]}], {"edited": True})
    )
