"""Journals written by upstream TypeScript kassette load (fixtures/upstream/, see its README)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import FIXTURES

from kassette import LocalStorage
from kassette import explore as kx


@pytest.fixture
def journals() -> kx.Journals:
    return kx.load(LocalStorage(FIXTURES / "upstream"))


def test_every_run_and_complete_entry_loads(journals: kx.Journals) -> None:
    assert sorted(journals.run_ids) == ["INC-4821", "INC-4821-gentle", "TKT-7"]
    counts = journals.entries.groupby("run_id").size().to_dict()
    assert counts == {"INC-4821": 7, "INC-4821-gentle": 7, "TKT-7": 3}  # TKT-7's torn tail


def test_statuses_versions_and_sources(journals: kx.Journals) -> None:
    runs = journals.runs.set_index("run_id")
    assert runs["status"].to_dict() == {
        "INC-4821": "completed",  # its suspend and resume name the event with `name`
        "INC-4821-gentle": "running",
        "TKT-7": "failed",
    }
    assert runs.loc["INC-4821", "version"] == "triage-v1"
    assert runs.loc["INC-4821", "sessions"] == 2
    assert runs.loc["INC-4821-gentle", "parent_run_id"] == "INC-4821"
    assert runs.loc["INC-4821-gentle", "fork_offset"] == 5
    assert runs.loc["TKT-7", "error"] == "TypeError: draft is not a function"
    assert pd.isna(runs.loc["TKT-7", "version"])


def test_timestamps_with_and_without_milliseconds(journals: kx.Journals) -> None:
    times = journals.entries.set_index(["run_id", "offset"])["timestamp"]
    assert times[("INC-4821", 0)] == pd.Timestamp("2026-05-08T14:21:03Z")
    assert times[("TKT-7", 0)] == pd.Timestamp("2026-05-10T08:00:00.250Z")
    assert times[("TKT-7", 2)] == pd.Timestamp("2026-05-10T08:00:03Z")
    runs = journals.runs.set_index("run_id")
    assert runs.loc["TKT-7", "duration_s"] == 2.75
    assert runs.loc["INC-4821", "duration_s"] == 41 * 60 + 41


def test_absent_fields_are_missing_not_invented(journals: kx.Journals) -> None:
    entries = journals.entries.set_index(["run_id", "offset"])
    step = entries.loc[("INC-4821", 1)]
    assert step["kind"] == "step" and pd.isna(step["duration_ms"])
    suspend = entries.loc[("INC-4821", 2)]
    assert suspend["name"] == "human-approval"
    assert json.loads(entries.loc[("INC-4821", 3), "value"]) == {}


def test_an_upstream_suspend_keyed_by_name_lands_in_event_and_step_id(
    journals: kx.Journals,
) -> None:
    entries = journals.entries.set_index(["run_id", "offset"])
    for offset in (2, 4):  # the suspend and its resume
        entry = entries.loc[("INC-4821", offset)]
        assert entry["event"] == "human-approval" and entry["step_id"] == "human-approval"
    step = entries.loc[("INC-4821", 1)]
    assert pd.isna(step["event"]) and step["step_id"] == "analyze"  # a step's name is not one
    assert json.loads(entries.loc[("INC-4821", 3), "value"]) == {}


def test_unknown_entry_types_keep_their_type_and_payload(journals: kx.Journals) -> None:
    note = journals.entries.set_index(["run_id", "offset"]).loc[("INC-4821-gentle", 6)]
    assert note["type"] == "annotation"
    assert json.loads(note["value"]) == {"note": "trying a gentler fix", "author": "sre"}


def test_non_ascii_and_escapes_survive(journals: kx.Journals) -> None:
    entries = journals.entries.set_index(["run_id", "offset"])
    start = json.loads(entries.loc[("TKT-7", 0), "value"])
    assert start["metadata"]["ticket"]["title"] == "Refund – 20 €"  # noqa: RUF001
    error = json.loads(entries.loc[("TKT-7", 2), "value"])["error"]
    assert error["stack"].splitlines()[1].strip().startswith("at triage")


def test_lineage_of_upstream_runs(journals: kx.Journals) -> None:
    assert str(kx.lineage(journals)) == (
        "INC-4821 (completed, 2 steps)\n"
        "└── INC-4821-gentle (running, from offset 5, 1 step)\n"
        "TKT-7 (failed, 1 step)\n"
    )
