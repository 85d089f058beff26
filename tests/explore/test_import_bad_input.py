"""What an import does with bad input: a clear error naming the line or span, or a partial
run saying what is missing; never a traceback, never a half-written run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage
from kassette import explore as kx
from kassette.errors import InvalidArgumentError
from kassette.testing import fake_model_server
from tests.explore.test_import_otlp import TASKS, produce

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("production") / "traces.jsonl"
    with fake_model_server() as server:
        produce(server, out, TASKS[:2])
    return out


def requests_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def spans_of(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        span
        for request in requests
        for resource in request["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def write(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(request) + "\n" for request in requests))
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kassette", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def whole_runs_only(store: Path, clean: Path) -> list[str]:
    """The runs in `store`, each checked to be byte for byte the clean import's."""
    written = sorted(path.name for path in store.glob("*.jsonl"))
    for name in written:
        assert without_file_name(store / name) == without_file_name(clean / name)
    return written


def without_file_name(journal: Path) -> list[Any]:
    """A journal's entries, but for the file name in `imported.from`."""
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    entries[0]["imported"].pop("from")
    return entries


def test_a_malformed_line_is_an_error_naming_it_and_fixing_it_imports_the_rest(
    traces: Path, tmp_path: Path
) -> None:
    kx.import_otlp(traces, tmp_path / "clean")
    lines = traces.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join([*lines[:2], '{"resourceSpans": [oops\n', *lines[2:]]))
    store = tmp_path / "store"
    with pytest.raises(InvalidArgumentError, match=r"bad\.jsonl line 3: not JSON"):
        kx.import_otlp(bad, LocalStorage(store))
    before = whole_runs_only(store, tmp_path / "clean")  # the traces that ended before it
    assert len(before) < len(TASKS[:2])
    done = cli("--storage", f"file:{store}", "import", "otlp", str(bad))
    assert done.returncode == 2 and done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "InvalidArgumentError" and "line 3" in error["message"]
    assert "Traceback" not in done.stderr
    fixed = kx.import_otlp(traces, LocalStorage(store))
    assert len(fixed.written) == 2 - len(before)
    assert len(whole_runs_only(store, tmp_path / "clean")) == 2


def test_a_truncated_file_is_an_error_naming_its_last_line(traces: Path, tmp_path: Path) -> None:
    kx.import_otlp(traces, tmp_path / "clean")
    data = traces.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) - 40])
    count = cut.read_bytes().count(b"\n") + 1
    done = cli("--storage", f"file:{tmp_path / 'store'}", "import", "otlp", str(cut))
    assert done.returncode == 2
    message = json.loads(done.stderr)["error"]["message"]
    assert f"cut.jsonl line {count}: truncated" in message
    assert len(whole_runs_only(tmp_path / "store", tmp_path / "clean")) < 2


def test_unknown_attributes_and_spans_change_nothing(traces: Path, tmp_path: Path) -> None:
    requests = requests_of(traces)
    for span in spans_of(requests):
        span["attributes"].append({"key": "acme.shard", "value": {"intValue": "7"}})
        span["attributes"].append({"key": "acme.blob", "value": {"kvlistValue": {"values": []}}})
    first = spans_of(requests)[0]
    extra = {**first, "spanId": "00000000000000aa", "name": "acme.cache.lookup", "attributes": []}
    requests[0]["resourceSpans"][0]["scopeSpans"][0]["spans"].append(extra)
    plain = kx.import_otlp(traces, LocalStorage(tmp_path / "plain"))
    noisy = kx.import_otlp(write(tmp_path / "noisy.jsonl", requests), LocalStorage(tmp_path / "n"))
    assert noisy.run_ids == plain.run_ids and noisy.partial == {}
    for run_id in plain.run_ids:
        a = (tmp_path / "plain" / f"{run_id}.jsonl").read_text().splitlines()[1:]
        b = (tmp_path / "n" / f"{run_id}.jsonl").read_text().splitlines()[1:]
        assert a == b


def test_spans_whose_parent_is_missing_make_a_partial_run_naming_them(
    traces: Path, tmp_path: Path
) -> None:
    requests = requests_of(traces)
    roots = {span["spanId"] for span in spans_of(requests) if not span.get("parentSpanId")}
    for request in requests:
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = [s for s in scope["spans"] if s["spanId"] not in roots]
    report = kx.import_otlp(write(tmp_path / "orphans.jsonl", requests), tmp_path / "store")
    assert len(report.partial) == 2
    for missing in report.partial.values():
        assert all("its parent span" in line and "is not in the source" in line for line in missing)
        assert any("ChatCompletion" in line for line in missing)


def test_a_tool_call_with_no_tool_span_stops_the_run_after_the_call(
    traces: Path, tmp_path: Path
) -> None:
    requests = requests_of(traces)
    for request in requests:
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = [s for s in scope["spans"] if s["name"] != "get_weather"]
    storage = LocalStorage(tmp_path / "store")
    report = kx.import_otlp(write(tmp_path / "no-tools.jsonl", requests), storage)
    run_id = report.run_ids[0]
    (missing,) = report.partial[run_id]
    assert "asked for tool calls (get_weather) with no tool span answering them" in missing
    print(report)
    entries = kx.load(storage).entries
    steps = entries[entries.run_id == run_id]["step_id"].dropna().tolist()
    assert steps == ["chat.completions.create"]  # a replay is exact up to here, live after
    done = cli(
        "--storage", f"file:{tmp_path / 'cli'}", "import", "otlp", str(tmp_path / "no-tools.jsonl")
    )
    assert done.returncode == 0
    warnings = [json.loads(line)["warning"] for line in done.stderr.splitlines()]
    assert {w["runId"] for w in warnings} == set(report.run_ids)
    assert json.loads(done.stdout)["partial"][run_id] == [missing]


def many_traces(path: Path, copies: int, padding: int = 0) -> Path:
    """`copies` traces like the fixture's, each with its own ids; `padding` bytes of unknown
    attribute on each structure span (a large file that writes little)."""
    template = requests_of(Path(__file__).parent / "fixtures" / "import" / "traces.jsonl")
    with path.open("w") as file:
        for n in range(copies):
            for request in template:
                line = json.dumps(request)
                for old in {s["traceId"] for s in spans_of([request])}:
                    line = line.replace(old, f"{n:08x}{old[8:]}")
                if padding:
                    line = line.replace(
                        '"openinference.span.kind", "value": {"stringValue": "AGENT"}}',
                        '"openinference.span.kind", "value": {"stringValue": "AGENT"}}, '
                        f'{{"key": "acme.padding", "value": {{"stringValue": "{"x" * padding}"}}}}',
                    )
                file.write(line + "\n")
    return path


def test_an_import_killed_midway_leaves_only_whole_runs_and_finishes_when_run_again(
    tmp_path: Path,
) -> None:
    source = many_traces(tmp_path / "many.jsonl", 400)
    whole = kx.import_otlp(source, LocalStorage(tmp_path / "whole"))
    store = tmp_path / "killed"
    command = [sys.executable, "-m", "kassette", "--storage", f"file:{store}", "import", "otlp"]
    process = subprocess.Popen(
        [*command, str(source)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    deadline = time.monotonic() + 120
    while len(list(store.glob("*.jsonl"))) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    written = sorted(store.glob("*.jsonl"))
    assert 50 <= len(written) < len(whole.run_ids)  # killed midway
    for path in written:  # every run there is whole: the same bytes as an uninterrupted import
        assert path.read_bytes() == (tmp_path / "whole" / path.name).read_bytes()
    again = kx.import_otlp(source, LocalStorage(store))
    assert set(again.written) == set(whole.run_ids) - {p.stem for p in written}
    for run_id in whole.run_ids:
        assert (store / f"{run_id}.jsonl").read_bytes() == (
            tmp_path / "whole" / f"{run_id}.jsonl"
        ).read_bytes()


def test_a_large_file_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    script = (
        "import resource, sys\n"
        "from kassette import explore as kx\n"
        "report = kx.import_otlp(sys.argv[1], sys.argv[2])\n"
        "print(len(report.run_ids), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )

    def peak(source: Path, store: str) -> tuple[int, int]:
        done = subprocess.run(
            [sys.executable, "-c", script, str(source), f"file:{tmp_path / store}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        runs, kilobytes = done.stdout.split()
        return int(runs), int(kilobytes)

    small = many_traces(tmp_path / "small.jsonl", 2, padding=450_000)
    large = many_traces(tmp_path / "large.jsonl", 300, padding=450_000)
    assert large.stat().st_size > 250 * 2**20
    small_runs, small_peak = peak(small, "small")
    large_runs, large_peak = peak(large, "large")
    assert (small_runs, large_runs) == (4, 600)  # two traces a copy
    print(
        f"{large.stat().st_size / 2**20:.0f} MB imported, peak RSS {large_peak // 1024} MB "
        f"(a 1 MB file: {small_peak // 1024} MB)"
    )
    # 150 times the data, and the peak memory grows by less than a fifth of the file's size
    assert (large_peak - small_peak) * 1024 < large.stat().st_size / 5
