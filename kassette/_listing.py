"""Listing: a run's status read from its journal's bytes without decoding its step lines.

`kassette list` folds every run of a store, so the status of a run (`RunStatus`) is read here
the fast way: a step's result cannot change a run's status, so a step line as kassette and
upstream write it is matched and checked for its envelope, its ids and its text, and only the
other lines (a start, suspends, resumes, the end) are decoded and folded by `reduce_entry`.
`Journal.status_of` is this; `Journal.parse(...).status()` gives the same answer by decoding
everything, and both end in `folded_status`, the one place where a fold's counts and times
become a `RunStatus`. tests/test_journal_parity.py holds them to each other.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from kassette._codec import (
    UTF8_ERRORS,
    Entry,
    check_entry,
    decode_vouched,
    escapes_surrogate,
    read_entry,
    shallow,
    too_deep,
)
from kassette._state import RunState, RunStatus, reduce_entry

__all__ = ["folded_status", "status_of"]

_STEP_HEAD = (
    rb'\{"type":"step","session":([1-9][0-9]{0,17}),"offset":(0|[1-9][0-9]{0,17}),'
    rb'"timestamp":"([^"\\\n]*)","stepId":"[^"\\\n]*(?:\\.[^"\\\n]*)*","name":"'
)
_STEP_LINE = re.compile(_STEP_HEAD)
# a whole step line (without its `\n`), ending its object: `.*` goes to the line's end at once
# (groups: session and offset as written, `1,"offset":7`; session; offset; timestamp)
# (possessive: what follows a part never matches its last character, and backtracking costs)
_STEP_LINE_WHOLE = re.compile(
    rb'\{"type":"step","session":(([1-9][0-9]{0,17}+),"offset":(0|[1-9][0-9]{0,17}+)),'
    rb'"timestamp":"([^"\\\n]*+)","stepId":"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+","name":".*\}',
    re.DOTALL,
)
_SESSION = operator.itemgetter(2)  # of a `_STEP_LINE_WHOLE` match, as written
_OFFSET = operator.itemgetter(3)
# how a line writes each offset, a constant: a journal's step lines are checked against it by
# one tuple comparison (journals longer than this build their own)
_OFFSETS = tuple(b"%d" % offset for offset in range(512))
_NO_STATE = RunState()  # a run with no entries (immutable: shared)


def status_of(data: bytes, run_id: str) -> RunStatus:
    """The run's status from its journal's bytes, as `parse(...).status()` gives it, without
    decoding step lines: a step's result does not change the run's status.

    A step line as kassette and upstream write it (`_STEP_LINE`) is checked for its
    envelope (type, session, the offset expected there, a timestamp), its `stepId` and
    `name`, for text and for ending its object; the rest (its result) is read by replay,
    `dump` and `kassette.explore`.
    Every other line is decoded and checked as `parse` does. When the checks made over the
    whole journal at once vouch for every line's text, the step lines are matched and
    checked by C loops, not one Python iteration each (`_vouched_status`): `kassette list`
    folds every run.
    """
    data = bytes(data)
    end = data.rfind(b"\n") + 1  # the complete lines end here; a torn line may follow
    # Checks that hold for every line when they hold for all of them at once, made in C
    # over the whole journal (the torn line too, which can only fail them); a step line
    # is checked on its own for what they do not show.
    text = data.isascii() or _is_text(data[:end])
    few_brackets = shallow(data)
    no_escape = not escapes_surrogate(data)
    if text and few_brackets and no_escape:
        status = _vouched_status(data, run_id)
        if status is not None:
            return status
    return _status_line_by_line(data, run_id, end, text, few_brackets, no_escape)


def _vouched_status(data: bytes, run_id: str) -> RunStatus | None:
    """`status_of` for a journal whose text the journal-wide checks vouch for: the step
    lines are matched and checked by C loops (`map`, `filter`, list comparisons), not one
    Python iteration each, and the other lines decoded by the JSON scanner alone. None when a
    line is not as expected there: the line by line fold then finds what, and says it as
    `parse` does."""
    lines = data.split(b"\n")
    del lines[-1]  # a torn line, or nothing after the last `\n`
    count = len(lines)
    heads = list(map(_STEP_LINE_WHOLE.fullmatch, lines))
    matched = list(filter(None, heads))
    others: list[int] = []  # the lines that are not step lines as kassette writes them
    index = -1
    for _ in range(count - len(matched)):
        index = heads.index(None, index + 1)
        others.append(index)
    max_session = 0
    if matched:
        # each step line's offset is its line's, compared all at once
        offsets, expected = tuple(map(_OFFSET, matched)), _offsets(count)
        if others == [0] or others == [0, count - 1]:  # a start, steps, perhaps an end
            in_place = offsets == expected[1 : len(offsets) + 1]
        else:
            in_place = _in_place(offsets, expected, others)
        if not in_place:
            return None
        max_session = max(map(int, set(map(_SESSION, matched))))  # a set of one, mostly
    state = _NO_STATE
    steps = len(matched)
    stamps: dict[int, Any] = {}  # the timestamps `created_at` may need: entry 0, non-steps
    entry: Entry | None = None
    for index in others:
        entry = decode_vouched(lines[index])
        if entry is None:
            return None
        entry = check_entry(entry, run_id, index, index + 1)
        if entry["session"] > max_session:
            max_session = entry["session"]
        if entry["type"] == "step":
            steps += 1
        else:
            state = reduce_entry(state, entry)
        stamps[index] = entry.get("timestamp")
    if others and others[-1] == count - 1:
        updated = entry.get("timestamp") if entry is not None else None
    elif matched:  # the last line is a step line
        updated = matched[-1][4].decode("utf-8", UTF8_ERRORS)
        if count == 1:
            stamps[0] = updated
    else:
        updated = None
    return _folded(
        run_id, state, max_session, count, steps, stamps, lines[0] if count else b"", updated
    )


def _in_place(values: tuple[bytes, ...], expected: tuple[bytes, ...], others: list[int]) -> bool:
    """Whether `values`, one per line but the lines `others`, are `expected` at their lines."""
    start = checked = 0
    for other in others:
        if values[checked : checked + other - start] != expected[start:other]:
            return False
        checked += other - start
        start = other + 1
    return values[checked:] == expected[start : start + len(values) - checked]


def _offsets(count: int) -> tuple[bytes, ...]:
    """How a line writes its offset (`7`), for the offsets below `count` at least."""
    if count <= len(_OFFSETS):
        return _OFFSETS
    return tuple(b"%d" % offset for offset in range(count))


def _status_line_by_line(
    data: bytes, run_id: str, end: int, text: bool, few_brackets: bool, no_escape: bool
) -> RunStatus:
    """`status_of`, a line at a time: the step lines that the journal-wide checks
    (`text`, `few_brackets`, `no_escape`) do not vouch for are checked on their own."""
    state, max_session, steps, count = _NO_STATE, 0, 0, 0
    stamps: dict[int, Any] = {}  # the timestamps `created_at` may need: entry 0, non-steps
    last: Any = None  # the last entry, or the match of the last step line
    session_text = b""  # a step line's session as written, while it repeats
    match_step = _STEP_LINE.match
    start = 0
    while start < end:
        stop = data.index(b"\n", start)
        step = match_step(data, start, stop)
        if (
            step is not None
            and int(step[2]) == count
            and data[stop - 1] == 0x7D  # `}`
            and (
                (text and few_brackets and no_escape)
                or _plain_text(data[start:stop], text, few_brackets, no_escape)
            )
        ):
            if step[1] != session_text:
                session_text = step[1]
                max_session = max(max_session, int(session_text))
            steps += 1
            last = step
        else:
            last = read_entry(data[start:stop], run_id, count, count + 1)
            max_session = max(max_session, last["session"])
            if last["type"] == "step":
                steps += 1
            else:
                state = reduce_entry(state, last)
            stamps[count] = last.get("timestamp")
        count += 1
        start = stop + 1
    if type(last) is not dict and last is not None:  # a step line's match
        last = {"timestamp": last[3].decode("utf-8", UTF8_ERRORS)}
        if count == 1:
            stamps[0] = last["timestamp"]
    stamp = last.get("timestamp") if last is not None else None
    first = data[: data.index(b"\n")] if count else b""
    return _folded(run_id, state, max_session, count, steps, stamps, first, stamp)


def _folded(
    run_id: str,
    state: RunState,
    sessions: int,
    entries: int,
    steps: int,
    stamps: dict[int, Any],
    first_line: bytes,
    updated_at: str | None,
) -> RunStatus:
    """The status a fold of `status_of` found. `stamps` holds the timestamps of the lines it
    decoded, by offset; entry 0's is read from `first_line` when the fold matched it as a step
    line, since `created_at` may need it."""

    if 0 not in stamps and entries:  # only entry 0 can be missing: a step line's match
        stamps[0] = read_entry(first_line, run_id, 0, 1).get("timestamp")
    return folded_status(run_id, state, sessions, entries, steps, stamps.get, updated_at)


def folded_status(
    run_id: str,
    state: RunState,
    sessions: int,
    entries: int,
    steps: int,
    stamp: Callable[[int], Any],
    updated_at: str | None,
) -> RunStatus:
    """A run's `RunStatus` from what a fold of its entries counted: the one place where the
    counts (entries, step entries, the highest session) and the two times become a status,
    for `Journal.status` and for `status_of` alike. `created_at` is the timestamp of the
    entry that created the run (`RunState.creation_offset`: a fork's own `start`, else
    entry 0), read through `stamp(offset)`; `updated_at` that of the last entry."""
    created_at = stamp(state.creation_offset) if entries else None
    return RunStatus.of_fields(
        {
            "run_id": run_id,
            "status": state.status,
            "version": state.version,
            "source": dict(state.source) if state.source is not None else None,
            "sessions": sessions,
            "entries": entries,
            "steps": steps,
            "pending_events": state.pending_events,
            "result": state.result,
            "error": state.error,
            "created_at": created_at,
            "updated_at": updated_at,
        }
    )


def _plain_text(line: bytes, text: bool, few_brackets: bool, no_escape: bool) -> bool:
    """Whether a step line reads as text and is `plain`, checking only what the journal-wide
    checks (`text`, `few_brackets`, `no_escape`) did not show."""
    return (
        (text or _is_text(line))
        and (few_brackets or not too_deep(line))
        and (no_escape or not escapes_surrogate(line))
    )


def _is_text(line: bytes) -> bool:
    """Whether `line` reads as text by the journal's one rule (`UTF8_ERRORS`)."""
    try:
        line.decode("utf-8", UTF8_ERRORS)
    except UnicodeDecodeError:
        return False
    return True
