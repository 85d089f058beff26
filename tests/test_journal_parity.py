"""Every consumer of a journal derives the same run state: one reducer, checked by Hypothesis.

Journals are generated two ways: by driving the real API (sessions, steps, suspends,
deliveries, parallel branches, cancels, forks of forks with differing versions), and as raw
entry sequences no kassette writer produces (upstream's `name`-keyed events, resumes before
their suspend, entries after a terminal, odd versions). For each run, `kassette status` (the
CLI), `run_status` (core), explore's Arrow path, explore's plain-Python path, the lineage and
`reduce_run` over the raw lines must agree.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kassette import KassetteError, LocalStorage, Suspended
from kassette import explore as kx
from kassette._cli import main as cli_main
from kassette._journal import Journal, RunStatus, encode, format_timestamp, reduce_run
from kassette._workflow import Context
from kassette.core import cancel_run, fork_run, open_run, read_journal, run_status
from kassette.explore import _decode
from kassette.testing import FakeClock

VERSIONS = st.sampled_from([None, "v1", "v2"])
EVENTS = st.sampled_from(["approve", "review"])
SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- journals made by the real API ---------------------------------------------------------------


def act(storage: LocalStorage, clock: FakeClock, data: st.DataObject, runs: list[str]) -> None:
    """One thing a user does: open a session and work in it, cancel a run, or fork one."""
    action = data.draw(st.sampled_from(["session", "session", "session", "cancel", "fork"]))
    clock.advance(data.draw(st.sampled_from([0, 0.0004, 1])))  # same millisecond, or not
    if action == "fork" and runs:
        source = data.draw(st.sampled_from(runs))
        entries = len(Journal.parse(_bytes(storage, source), source).entries)
        offset = data.draw(st.integers(0, entries))
        fork_id = f"fork{len(runs)}"
        fork_run(storage, source, offset=offset, new_run_id=fork_id, clock=clock)
        runs.append(fork_id)
        return
    if action == "cancel" and runs:
        cancel_run(storage, data.draw(st.sampled_from(runs)), "enough", clock=clock)
        return
    fresh = not runs or data.draw(st.booleans())
    run_id = f"root{len(runs)}" if fresh else data.draw(st.sampled_from(runs))
    with open_run(storage, run_id, version=data.draw(VERSIONS), clock=clock) as run:
        if fresh:
            runs.append(run_id)
        work(run, data)


def work(run: Any, data: st.DataObject) -> None:
    """Steps, waits, deliveries and parallel blocks, then maybe an end."""
    for _ in range(data.draw(st.integers(0, 4))):
        kind = data.draw(st.sampled_from(["step", "wait", "deliver", "parallel"]))
        if kind == "step":
            run.record(
                data.draw(st.sampled_from(["plan", "act"])), lambda: data.draw(st.integers())
            )
        elif kind == "wait":
            run.wait_for_event(data.draw(EVENTS))
        elif kind == "deliver" and run.journal.pending_events:
            run.deliver(data.draw(st.sampled_from(run.journal.pending_events)), {"ok": True})
        elif kind == "parallel":
            shape = data.draw(st.sampled_from(["step", "wait"]))

            def branch(ctx: Context, shape: str = shape) -> Any:
                return ctx.step("x", lambda: 1) if shape == "step" else ctx.suspend("review")

            Context(run, run.ids).parallel({"left": branch, "right": branch})
    end = data.draw(st.sampled_from([None, None, "complete", "fail", "cancel"]))
    if end == "complete":
        run.complete({"n": len(run.journal.entries)})
    elif end == "fail":
        run.fail(ValueError("no good"))
    elif end == "cancel":
        run.cancel("done here")


@SETTINGS
@given(data=st.data())
def test_every_consumer_agrees_on_journals_the_api_writes(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        storage, clock, runs = LocalStorage(folder), FakeClock(), []
        for _ in range(data.draw(st.integers(1, 7))):
            with contextlib.suppress(Suspended, KassetteError):
                act(storage, clock, data, runs)
        check_consumers_agree(storage, Path(folder))


# -- journals no kassette writer produces ---------------------------------------------------------


def raw_entries(data: st.DataObject) -> list[dict[str, Any]]:
    """A start, then any sequence of kassette's entry types with loosely typed fields."""
    entries: list[dict[str, Any]] = []
    session = 1
    for index in range(data.draw(st.integers(1, 12))):
        kind = "start" if index == 0 else data.draw(st.sampled_from(RAW_KINDS))
        session += kind == "start" and index > 0
        fields = data.draw(RAW_FIELDS[kind])
        moment = format_timestamp(1_767_225_600 + index * data.draw(st.sampled_from([0, 0.5, 60])))
        entry = {"type": kind, "session": session, "offset": index, "timestamp": moment}
        entries.append(entry | fields)
    return entries


EVENT_KEYS = st.sampled_from(
    [{"eventId": "e1", "event": "e"}, {"eventId": "e2", "event": "e"}, {"name": "upstream"}]
)
RAW_KINDS = ["start", "step", "suspend", "resume", "complete", "error", "cancel", "note"]
RAW_FIELDS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "start": st.fixed_dictionaries(
        {"metadata": st.none()},
        optional={
            "version": st.sampled_from(["v1", "v2", 3, None]),
            "source": st.sampled_from([{"runId": "src", "fromOffset": 1}, {"runId": "other"}]),
        },
    ),
    "step": st.builds(lambda n: {"stepId": f"s{n}", "name": "s", "result": n}, st.integers(0, 3)),
    "suspend": EVENT_KEYS,
    "resume": st.builds(lambda keys: keys | {"value": 1}, EVENT_KEYS),
    "complete": st.fixed_dictionaries({"result": st.sampled_from([None, 1, {"a": [1]}])}),
    "error": st.fixed_dictionaries(
        {"error": st.sampled_from([{"name": "E", "message": "m"}, {"name": "E"}, "text"])}
    ),
    "cancel": st.fixed_dictionaries({"reason": st.sampled_from([None, "why"])}),
    "note": st.fixed_dictionaries({"text": st.text(max_size=3)}),
}


@SETTINGS
@given(data=st.data())
def test_every_consumer_agrees_on_journals_no_kassette_writer_makes(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        storage = LocalStorage(folder)
        for run_id in ("a", "b")[: data.draw(st.integers(1, 2))]:
            lines = b"".join(encode(entry) for entry in raw_entries(data))
            storage.append(run_id, lines, token=None)
        check_consumers_agree(storage, Path(folder))


# -- the check -------------------------------------------------------------------------------------


def check_consumers_agree(storage: LocalStorage, folder: Path) -> None:
    run_ids = sorted(storage.list_runs())
    journals = kx.load(storage)
    rows = journals.runs.set_index("run_id")
    general = general_path_runs(storage, run_ids)
    assert general.equals(journals.to_arrow("runs").sort_by("run_id")), "explore's two paths"
    listed = [json.loads(line) for line in cli(folder, "list").splitlines()]
    assert [run["runId"] for run in listed] == list(rows.index), "one order, oldest first"
    assert {run["runId"]: run["status"] for run in listed} == rows["status"].to_dict()
    for run_id in run_ids:
        status = run_status(storage, run_id)
        assert status == read_journal(storage, run_id).status(), "status without step bodies"
        assert json.loads(cli(folder, "status", run_id)) == json.loads(json.dumps(status.to_dict()))
        lines = _bytes(storage, run_id).splitlines()
        state = reduce_run(json.loads(line) for line in lines)
        assert (state.status, state.version, state.pending_events, state.result, state.error) == (
            status.status,
            status.version,
            status.pending_events,
            status.result,
            status.error,
        )
        assert (dict(state.source) if state.source else None) == status.source
        row = rows.loc[run_id]
        source = status.source or {}
        note_what_was_covered(status, rows)
        assert row["status"] == status.status
        assert _none(row["version"]) == status.version
        assert _none(row["parent_run_id"]) == _typed(source.get("runId"), str)
        assert _none(row["fork_offset"]) == _typed(source.get("fromOffset"), int)
        assert list(row["pending_events"]) == list(status.pending_events)
        assert _none(row["error"]) == (str(status.error) if status.error else None)
        assert row["sessions"] == status.sessions and row["steps"] == status.steps
        assert row["started_at"].to_pydatetime() == _when(status.created_at)


def note_what_was_covered(status: RunStatus, rows: pd.DataFrame) -> None:
    """Hypothesis statistics (`--hypothesis-show-statistics`): which cases were generated."""
    event(f"status {status.status}")
    parent = (status.source or {}).get("runId")
    if isinstance(parent, str) and parent in rows.index:
        event("a fork of a fork" if _none(rows.loc[parent, "parent_run_id"]) else "a fork")
        if _none(rows.loc[parent, "version"]) != status.version:
            event("a fork whose version differs from its source's")
    if any("/" in event_id for event_id in status.pending_events):
        event("pending events of a parallel block")


def general_path_runs(storage: LocalStorage, run_ids: list[str]) -> pa.Table:
    """The runs table from explore's plain-Python reader alone."""
    batch = _decode.Batch()
    tables = []
    for run_id in run_ids:
        data = _bytes(storage, run_id)
        batch.add(run_id, data)
        tables.append(_decode._python_entries(run_id, data[: data.rfind(b"\n") + 1]))
    entries = pa.concat_tables(tables) if tables else _decode.ENTRY_SCHEMA.empty_table()
    _, runs = _decode.with_runs(entries, run_ids, batch.counts(batch.line_ends()))
    return runs.sort_by("run_id")


def cli(folder: Path, *args: str) -> str:
    """What `kassette --storage file:FOLDER ARGS...` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["--storage", f"file:{folder}", *args]) == 0
    return out.getvalue()


def _bytes(storage: LocalStorage, run_id: str) -> bytes:
    snapshot = storage.read(run_id)
    assert snapshot is not None
    return snapshot.data


def _none(value: Any) -> Any:
    return None if pd.api.types.is_scalar(value) and pd.isna(value) else value


def _typed(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
