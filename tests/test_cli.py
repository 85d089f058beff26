"""The `kassette` command: output shapes, exit codes and JSON errors, on real journals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kassette import LocalStorage, Workflow, kassette
from kassette._cli import main
from kassette.core import fork_run, open_run, run_status
from kassette.errors import StorageNotFoundError
from kassette.testing import FakeClock

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Cli:
    """Runs `main` in-process against one journal directory and captures what it prints."""

    def __init__(self, directory: Path, capture: pytest.CaptureFixture[bytes]) -> None:
        self.directory = directory
        self.url = f"file:{directory}"
        self.storage = LocalStorage(directory)
        self._capture = capture

    def __call__(self, *args: str, storage: bool = True) -> tuple[int, bytes, bytes]:
        argv = ["--storage", self.url, *args] if storage else list(args)
        code = main(argv)
        return (code, *self.captured())

    def captured(self) -> tuple[bytes, bytes]:
        out, err = self._capture.readouterr()
        return out, err

    def json_lines(self, *args: str, storage: bool = True) -> list[Any]:
        code, out, err = self(*args, storage=storage)
        assert (code, err) == (0, b"")
        return [json.loads(line) for line in out.splitlines()]

    def error(self, *args: str, storage: bool = True) -> tuple[int, dict[str, Any]]:
        code, out, err = self(*args, storage=storage)
        assert out == b""
        assert err.endswith(b"\n") and err.count(b"\n") == 1  # exactly one JSON line
        return code, json.loads(err)["error"]

    def files(self) -> list[str]:
        return sorted(os.listdir(self.directory)) if self.directory.exists() else []


@pytest.fixture
def cli(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> Cli:
    return Cli(tmp_path / "journals", capsysbinary)


def three_steps(
    storage: LocalStorage, calls: Counter[str], clock: FakeClock | None = None
) -> Workflow[Any, Any]:
    """A workflow `a -> b -> c` that counts how often each step really runs."""

    def work(ctx: Any, value: int) -> dict[str, int]:
        def step(name: str, result: int) -> int:
            def live() -> int:
                calls[name] += 1
                return result

            return ctx.step(name, live)  # type: ignore[no-any-return]

        a = step("a", value + 1)
        b = step("b", a * 10)
        return {"c": step("c", b + 5)}

    return kassette(work, storage=storage, version="v1", clock=clock)


def suspending(storage: LocalStorage, clock: FakeClock | None = None) -> Workflow[Any, Any]:
    def work(ctx: Any, value: Any) -> Any:
        ctx.step("prepare", lambda: value)
        return ctx.suspend("approval", reason="needs a human")

    workflow: Workflow[Any, Any] = kassette(work, storage=storage, clock=clock)
    return workflow


def write_runs(cli: Cli) -> FakeClock:
    """done: completed, waiting: suspended, open: running, broken: failed; created in this
    order, a second apart (the clock returned)."""
    clock = FakeClock()
    three_steps(cli.storage, Counter(), clock).start(1, run_id="done")
    clock.advance(1)
    suspending(cli.storage, clock).start("x", run_id="waiting")
    clock.advance(1)
    with open_run(cli.storage, "open", input={"n": 1}, clock=clock) as run:
        run.record("first", lambda: 1)
    clock.advance(1)

    def fails(ctx: Any, value: Any) -> None:
        raise RuntimeError("boom")

    kassette(fails, storage=cli.storage, clock=clock).start(None, run_id="broken")
    clock.advance(1)
    return clock


def run_module(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k != "KASSETTE_STORAGE"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PROJECT_ROOT), environment.get("PYTHONPATH")])
    )
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "kassette", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        timeout=60,
        check=False,
    )


# -- list ------------------------------------------------------------------------------------


def test_list_prints_one_run_and_status_per_line_oldest_first(cli: Cli) -> None:
    write_runs(cli)
    assert cli.json_lines("list") == [
        {"runId": "done", "status": "completed"},
        {"runId": "waiting", "status": "suspended"},
        {"runId": "open", "status": "running"},
        {"runId": "broken", "status": "failed"},
    ]


def test_list_orders_a_fork_by_its_own_start_and_after_its_source(cli: Cli) -> None:
    """A fork is as old as its own `start` entry, not as the entries it copied; one made in the
    same millisecond as its source still follows it, whatever the run ids."""
    clock = FakeClock()
    workflow = three_steps(cli.storage, Counter(), clock)
    workflow.start(1, run_id="z-root")
    workflow.fork("z-root", offset=2, new_run_id="y-fork")  # the same millisecond
    clock.advance(1)
    workflow.start(2, run_id="m-root")
    clock.advance(1)
    workflow.fork("y-fork", offset=3, new_run_id="a-late-fork")  # copies z-root's old entries
    (cli.directory / "b-mangled.jsonl").write_bytes(b"not json\n")  # no time: listed last
    oldest_first = ["z-root", "y-fork", "m-root", "a-late-fork", "b-mangled"]
    assert [run["runId"] for run in cli.json_lines("list")] == oldest_first
    assert [run["runId"] for run in cli.json_lines("list", "--limit", "2")] == oldest_first[:2]


def test_list_filters_by_status_then_limits(cli: Cli) -> None:
    clock = write_runs(cli)
    three_steps(cli.storage, Counter(), clock).start(2, run_id="done2")
    assert cli.json_lines("list", "--status", "completed") == [
        {"runId": "done", "status": "completed"},
        {"runId": "done2", "status": "completed"},
    ]
    assert cli.json_lines("list", "--limit", "2") == [
        {"runId": "done", "status": "completed"},
        {"runId": "waiting", "status": "suspended"},
    ]
    assert cli.json_lines("list", "--status", "completed", "--limit", "1") == [
        {"runId": "done", "status": "completed"}
    ]
    assert cli.json_lines("list", "--limit", "0") == []


def test_list_of_an_empty_directory_prints_nothing(cli: Cli) -> None:
    cli.directory.mkdir()
    assert cli("list") == (0, b"", b"")


def test_list_shows_a_corrupt_journal_as_corrupt_and_keeps_going(cli: Cli) -> None:
    write_runs(cli)
    (cli.directory / "mangled.jsonl").write_bytes(b"not json\n")
    runs = cli.json_lines("list")
    assert {"runId": "mangled", "status": "corrupt"} in runs
    assert len(runs) == 5
    assert cli.json_lines("list", "--status", "corrupt") == [
        {"runId": "mangled", "status": "corrupt"}
    ]


@pytest.mark.parametrize("args", [["list"], ["tree"], ["export", "out", "--format", "jsonl"]])
def test_a_stray_file_is_not_a_run_and_is_named_once_on_stderr(
    cli: Cli, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file named like a journal but not like a run (`retry-fix copy.jsonl`, a copy made in
    a file manager) is skipped by every verb that lists runs, which says so once on stderr."""
    monkeypatch.chdir(tmp_path)
    write_runs(cli)
    expected = cli("list")
    shutil.rmtree("out", ignore_errors=True)
    clean = cli(*args)
    assert clean[0] == 0 and clean[2] == b""
    shutil.rmtree("out", ignore_errors=True)
    done = (cli.directory / "done.jsonl").read_bytes()
    (cli.directory / "retry-fix copy.jsonl").write_bytes(done)
    (cli.directory / "good (copy).jsonl").write_bytes(done)
    code, out, err = cli(*args)
    assert (code, out) == (0, clean[1])  # the same answer as without the strays
    assert err.count(b"\n") == 1
    warning = json.loads(err)["warning"]
    assert warning["files"] == ["good (copy).jsonl", "retry-fix copy.jsonl"]
    assert "not runs" in warning["message"]
    assert cli("list")[1] == expected[1]


STEP_HEAD = b'{"type":"step","session":1,"offset":1,"timestamp":"2026-01-01T00:00:00Z",'
HOSTILE_LINES = {
    "nested 10,000 deep": STEP_HEAD
    + b'"stepId":"a","name":"a","result":'
    + b"[" * 10_000
    + b"]" * 10_000
    + b"}\n",
    "invalid UTF-8": STEP_HEAD + b'"stepId":"a","name":"a","result":"\xff"}\n',
    "surrogate bytes": STEP_HEAD + b'"stepId":"a","name":"a","result":"\xed\xa0\x80"}\n',
    "an offset written 01": STEP_HEAD.replace(b'"offset":1', b'"offset":01')
    + b'"stepId":"a","name":"a","result":1}\n',
}


@pytest.mark.parametrize("hostile", HOSTILE_LINES)
def test_a_hostile_line_is_corruption_for_every_verb(tmp_path: Path, hostile: str) -> None:
    """In a real process: exit 4 and one JSON error naming the offset, never a traceback;
    `list` and `tree` show the run as corrupt and go on."""
    storage = LocalStorage(tmp_path / "j")
    three_steps(storage, Counter()).start(1, run_id="good")
    first = (tmp_path / "j" / "good.jsonl").read_bytes().splitlines(keepends=True)[0]
    (tmp_path / "j" / "bad.jsonl").write_bytes(first + HOSTILE_LINES[hostile])
    env = {"KASSETTE_STORAGE": "file:j"}
    for verb in (
        ["status", "bad"],
        ["dump", "bad"],
        ["cancel", "bad"],
        ["fork", "bad", "--from-offset", "1"],
    ):
        done = run_module(*verb, cwd=tmp_path, env=env)
        assert (done.returncode, done.stdout) == (4, b""), (verb, done.stderr[-300:])
        error = json.loads(done.stderr)["error"]
        assert (error["type"], error["runId"], error["offset"]) == (
            "JournalCorruptionError",
            "bad",
            1,
        )
    listed = run_module("list", cwd=tmp_path, env=env)
    assert (listed.returncode, listed.stderr) == (0, b"")
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [
        {"runId": "good", "status": "completed"},
        {"runId": "bad", "status": "corrupt"},
    ]
    tree = run_module("tree", cwd=tmp_path, env=env)
    assert (tree.returncode, tree.stdout) == (0, b"good (completed)\nbad (corrupt)\n")
    assert sorted(os.listdir(tmp_path / "j")) == ["bad.jsonl", "good.jsonl"]


def test_list_shows_a_journal_opening_with_a_broken_step_line_as_corrupt(cli: Cli) -> None:
    """Its first entry's time is read from that line: corruption, not a traceback."""
    write_runs(cli)
    head = STEP_HEAD.replace(b'"offset":1', b'"offset":0')
    broken = head + b'"stepId":"a","name":"a","result":[1,}\n'
    fine = STEP_HEAD + b'"stepId":"b","name":"b"}\n'
    (cli.directory / "headless.jsonl").write_bytes(broken + fine)
    runs = cli.json_lines("list")
    assert runs[-1] == {"runId": "headless", "status": "corrupt"}
    assert len(runs) == 5


@pytest.mark.parametrize("args", [["--limit", "-1"], ["--limit", "many"], ["--status", "finished"]])
def test_list_refuses_bad_options(cli: Cli, args: list[str]) -> None:
    code, error = cli.error("list", *args)
    assert (code, error["type"]) == (2, "UsageError")


# -- status ----------------------------------------------------------------------------------


def test_status_prints_the_run_status_object(cli: Cli) -> None:
    write_runs(cli)
    [status] = cli.json_lines("status", "waiting")
    assert status == run_status(cli.storage, "waiting").to_dict()
    assert status["runId"] == "waiting"
    assert status["status"] == "suspended"
    assert status["pendingEvents"] == ["approval"]
    [status] = cli.json_lines("status", "done")
    assert (status["status"], status["result"], status["version"]) == (
        "completed",
        {"c": 25},
        "v1",
    )
    [status] = cli.json_lines("status", "broken")
    assert status["error"] == {"name": "RuntimeError", "message": "boom"}


def test_status_output_is_one_line(cli: Cli) -> None:
    write_runs(cli)
    code, out, _ = cli("status", "done")
    assert code == 0 and out.count(b"\n") == 1 and out.endswith(b"\n")


# -- dump ------------------------------------------------------------------------------------


def test_dump_prints_the_journal_byte_for_byte(cli: Cli) -> None:
    write_runs(cli)
    stored = (cli.directory / "done.jsonl").read_bytes()
    assert cli("dump", "done") == (0, stored, b"")


def test_dump_from_an_offset_prints_the_lines_from_there(cli: Cli) -> None:
    write_runs(cli)
    lines = (cli.directory / "done.jsonl").read_bytes().splitlines(keepends=True)
    for offset in range(len(lines) + 2):
        code, out, _ = cli("dump", "done", "--offset", str(offset))
        assert (code, out) == (0, b"".join(lines[offset:]))
    first = json.loads(cli("dump", "done", "--offset", "2")[1].splitlines()[0])
    assert first["offset"] == 2


def test_dump_keeps_bytes_the_library_would_not_write_itself(cli: Cli) -> None:
    """A journal from another writer (spaces, key order, escapes) is passed through as is."""
    cli.directory.mkdir()
    stored = (
        b'{"offset": 0, "session": 1, "type": "start", "timestamp": "2026-01-01T00:00:00.000Z",'
        b' "metadata": "caf\\u00e9"}\n'
        b'{"type":"step","session":1,"offset":1,"timestamp":"2026-01-01T00:00:01.000Z",'
        b'"stepId":"s","name":"s","result":"\xc3\xa9t\xc3\xa9"}\n'
    )
    (cli.directory / "foreign.jsonl").write_bytes(stored)
    assert cli("dump", "foreign") == (0, stored, b"")
    assert cli("dump", "foreign", "--offset", "1")[1] == stored.splitlines(keepends=True)[1]


def test_dump_never_prints_a_torn_final_line(cli: Cli) -> None:
    write_runs(cli)
    path = cli.directory / "open.jsonl"
    complete = path.read_bytes()
    path.write_bytes(complete + b'{"type":"step","sess')
    assert cli("dump", "open") == (0, complete, b"")
    assert cli("dump", "open", "--offset", "3") == (0, b"", b"")


def test_dump_refuses_a_negative_offset(cli: Cli) -> None:
    write_runs(cli)
    code, error = cli.error("dump", "done", "--offset", "-1")
    assert (code, error["type"]) == (2, "UsageError")


# -- fork ------------------------------------------------------------------------------------


def test_fork_then_start_continues_live_after_the_fork_point(cli: Cli) -> None:
    calls: Counter[str] = Counter()
    workflow = three_steps(cli.storage, calls)
    workflow.start(1, run_id="source")
    before = (cli.directory / "source.jsonl").read_bytes()
    assert calls == Counter(a=1, b=1, c=1)

    [printed] = cli.json_lines("fork", "source", "--from-step", "b", "--new-run-id", "branch")
    assert printed == {"runId": "branch"}
    status = run_status(cli.storage, "branch")
    assert status.source == {"runId": "source", "fromOffset": 2}
    assert status.status == "running"

    result = workflow.start(run_id="branch")
    assert (result.status, result.result) == ("success", {"c": 25})
    assert calls == Counter(a=1, b=2, c=2)  # `a` came from the journal, b and c ran again
    assert (cli.directory / "source.jsonl").read_bytes() == before


def test_fork_from_an_offset_with_a_generated_id(cli: Cli) -> None:
    calls: Counter[str] = Counter()
    workflow = three_steps(cli.storage, calls)
    workflow.start(1, run_id="source")
    [printed] = cli.json_lines("fork", "source", "--from-offset", "1")
    new_run_id = printed["runId"]
    assert len(new_run_id) == 32
    lines = (cli.directory / f"{new_run_id}.jsonl").read_bytes().splitlines()
    source_lines = (cli.directory / "source.jsonl").read_bytes().splitlines()
    assert lines[0] == source_lines[0]
    assert json.loads(lines[1])["source"] == {"runId": "source", "fromOffset": 1}
    assert workflow.start(run_id=new_run_id).result == {"c": 25}
    assert calls == Counter(a=2, b=2, c=2)


@pytest.mark.parametrize(
    "point",
    [
        [],
        ["--from-offset", "1", "--from-step", "b"],
        ["--from-offset", "-1"],
    ],
    ids=["neither", "both", "negative"],
)
def test_fork_needs_exactly_one_valid_fork_point(cli: Cli, point: list[str]) -> None:
    three_steps(cli.storage, Counter()).start(1, run_id="source")
    files = cli.files()
    code, error = cli.error("fork", "source", *point, "--new-run-id", "branch")
    assert (code, error["type"]) == (2, "UsageError")
    assert cli.files() == files


@pytest.mark.parametrize(
    "point", [["--from-offset", "99"], ["--from-step", "nope"]], ids=["offset", "step"]
)
def test_fork_at_a_point_the_source_does_not_have_writes_nothing(
    cli: Cli, point: list[str]
) -> None:
    three_steps(cli.storage, Counter()).start(1, run_id="source")
    files = cli.files()
    code, error = cli.error("fork", "source", *point, "--new-run-id", "branch")
    assert (code, error["type"], error["runId"]) == (2, "InvalidArgumentError", "source")
    assert cli.files() == files


def test_fork_just_past_the_terminal_entry_is_refused(cli: Cli) -> None:
    three_steps(cli.storage, Counter()).start(1, run_id="source")
    terminal = run_status(cli.storage, "source").entries - 1
    assert cli("fork", "source", "--from-offset", str(terminal), "--new-run-id", "ok")[0] == 0
    code, error = cli.error("fork", "source", "--from-offset", str(terminal + 1))
    assert (code, error["offset"]) == (2, terminal + 1)


def test_fork_into_a_different_existing_run_is_refused(cli: Cli) -> None:
    write_runs(cli)
    before = (cli.directory / "open.jsonl").read_bytes()
    code, error = cli.error("fork", "done", "--from-offset", "1", "--new-run-id", "open")
    assert (code, error["type"]) == (2, "RunExistsError")
    assert (cli.directory / "open.jsonl").read_bytes() == before


# -- tree ------------------------------------------------------------------------------------


def test_tree_draws_forks_and_forks_of_forks(cli: Cli) -> None:
    clock = FakeClock()  # 2026-01-01T00:00:00Z
    three_steps(cli.storage, Counter(), clock).start(1, run_id="root")
    clock.advance(1)
    suspending(cli.storage, clock).start("x", run_id="other")
    fork_run(cli.storage, "root", step="c", new_run_id="late", clock=clock)
    fork_run(cli.storage, "root", offset=1, new_run_id="early", clock=clock)
    fork_run(cli.storage, "late", offset=2, new_run_id="late-again", clock=clock)
    cli.storage.append(  # a fork whose source was deleted (or lives elsewhere)
        "orphan",
        b'{"type":"start","session":1,"offset":0,"timestamp":"2026-01-01T00:00:00.500Z",'
        b'"metadata":null,"source":{"runId":"gone","fromOffset":4}}\n',
        token=None,
    )
    code, out, err = cli("tree")
    assert (code, err) == (0, b"")
    assert out.decode() == (  # roots oldest first, as `list` lists them
        "root (completed)\n"
        "├── early (running, from offset 1)\n"
        "└── late (running, from offset 3)\n"
        "    └── late-again (running, from offset 2)\n"
        "orphan (running, fork of gone at offset 4, gone not found)\n"
        "other (suspended)\n"
    )
    expected_root_tree = out.decode().split("orphan (")[0]
    for member in ("root", "early", "late", "late-again"):
        assert cli("tree", member)[1].decode() == expected_root_tree
    assert cli("tree", "other")[1] == b"other (suspended)\n"


def test_tree_of_a_cycle_member_is_its_tree_in_the_whole_forest(cli: Cli) -> None:
    """Only a hand-edited journal makes a cycle of sources: `a` and `b` name each other."""
    for run_id, source, offset in (("a", "b", 5), ("b", "a", 0), ("c", "b", 1)):
        start = (
            '{"type":"start","session":1,"offset":0,"timestamp":"2026-01-01T00:00:00.000Z",'
            f'"metadata":null,"source":{{"runId":"{source}","fromOffset":{offset}}}}}\n'
        )
        cli.storage.append(run_id, start.encode(), token=None)
    whole = cli("tree")[1]
    assert whole.decode() == (
        "a (running, from offset 5)\n"
        "└── b (running, from offset 0)\n"
        "    └── c (running, from offset 1)\n"
    )
    for member in ("a", "b", "c"):
        assert cli("tree", member)[1] == whole


def test_tree_shows_a_corrupt_journal_as_its_own_root(cli: Cli) -> None:
    cli.directory.mkdir()
    (cli.directory / "mangled.jsonl").write_bytes(b"{}\n")
    assert cli("tree") == (0, b"mangled (corrupt)\n", b"")


def test_tree_of_nothing_prints_nothing(cli: Cli) -> None:
    cli.directory.mkdir()
    assert cli("tree") == (0, b"", b"")


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_prints_the_new_status_and_a_second_cancel_fails(cli: Cli) -> None:
    write_runs(cli)
    [status] = cli.json_lines("cancel", "waiting", "--reason", "obsolete")
    assert status == run_status(cli.storage, "waiting").to_dict()
    assert status["status"] == "canceled"
    last = json.loads((cli.directory / "waiting.jsonl").read_bytes().splitlines()[-1])
    assert (last["type"], last["reason"]) == ("cancel", "obsolete")

    before = (cli.directory / "waiting.jsonl").read_bytes()
    code, error = cli.error("cancel", "waiting")
    assert (code, error["type"], error["runId"]) == (1, "RunCancelledError", "waiting")
    assert (cli.directory / "waiting.jsonl").read_bytes() == before


def test_cancel_of_a_completed_run_is_a_terminal_run_error(cli: Cli) -> None:
    write_runs(cli)
    code, error = cli.error("cancel", "done")
    assert (code, error["type"]) == (1, "TerminalRunError")


# -- errors and exit codes -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["status", "missing"],
        ["dump", "missing"],
        ["cancel", "missing"],
        ["tree", "missing"],
        ["fork", "missing", "--from-offset", "0"],
    ],
)
def test_a_missing_run_exits_3(cli: Cli, args: list[str]) -> None:
    write_runs(cli)
    files = cli.files()
    code, error = cli.error(*args)
    assert (code, error["type"], error["runId"]) == (3, "RunNotFoundError", "missing")
    assert cli.files() == files


@pytest.mark.parametrize(
    "args",
    [
        ["status", "mangled"],
        ["dump", "mangled"],
        ["cancel", "mangled"],
        ["fork", "mangled", "--from-offset", "0"],
    ],
)
def test_a_garbage_line_in_the_middle_exits_4(cli: Cli, args: list[str]) -> None:
    write_runs(cli)
    lines = (cli.directory / "done.jsonl").read_bytes().splitlines(keepends=True)
    (cli.directory / "mangled.jsonl").write_bytes(b"".join([lines[0], b"#garbage\n", *lines[1:]]))
    files = cli.files()
    code, error = cli.error(*args)
    assert (code, error["type"], error["runId"]) == (4, "JournalCorruptionError", "mangled")
    assert "line 2" in error["message"]
    assert cli.files() == files


@pytest.mark.parametrize(
    "args",
    [
        ["status", "../x"],
        ["status", "a/b"],
        ["dump", "../x"],
        ["cancel", "a/b"],
        ["tree", "../x"],
        ["fork", "a/b", "--from-offset", "0"],
        ["fork", "done", "--from-offset", "0", "--new-run-id", "../x"],
    ],
)
def test_a_bad_run_id_exits_2_before_any_io(cli: Cli, args: list[str]) -> None:
    write_runs(cli)
    files = cli.files()
    code, error = cli.error(*args)
    assert (code, error["type"]) == (2, "InvalidArgumentError")
    assert "invalid run id" in error["message"]
    assert cli.files() == files


@pytest.mark.parametrize("url", ["ftp://x", "journals", "s3"])
def test_an_unknown_storage_scheme_exits_2(cli: Cli, url: str) -> None:
    code, error = cli.error("--storage", url, "list", storage=False)
    assert (code, error["type"]) == (2, "InvalidArgumentError")
    assert "unknown storage URL" in error["message"]


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--bogus"],
        ["--bogus", "list"],
        ["explode"],
        ["export"],  # OUT is required
        ["export", "out", "--format", "xlsx"],
        [],
        ["status"],
        ["status", "a", "b"],
    ],
)
def test_usage_errors_are_one_json_line_and_exit_2(cli: Cli, args: list[str]) -> None:
    code, error = cli.error(*args)
    assert (code, error["type"]) == (2, "UsageError")
    assert error["message"].startswith("kassette")


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["status", "run"],
        ["dump", "run"],
        ["tree"],
        ["tree", "run"],
        ["fork", "run", "--from-offset", "0", "--new-run-id", "new"],
        ["cancel", "run"],
        ["export", "exported"],
    ],
)
def test_a_missing_storage_directory_exits_3_and_nothing_is_created(
    cli: Cli, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, error = cli.error(*args)
    assert (code, error["type"]) == (3, "StorageNotFoundError")
    assert error["message"].startswith(f"storage {cli.url} not found")
    assert sorted(os.listdir(tmp_path)) == []  # neither the storage nor an export directory


def test_a_regular_file_as_the_storage_is_not_found_as_in_kassette_explore(
    cli: Cli, tmp_path: Path
) -> None:
    """One rule for "storage not found" (`kassette.storage._local.check_exists`): a regular
    file at the path is not a store, for the CLI as for `kx.load`."""
    cli.directory.write_bytes(b"")
    code, error = cli.error("list")
    assert (code, error["type"]) == (3, "StorageNotFoundError")
    assert "is a file, not a directory" in error["message"]
    kx = pytest.importorskip("kassette.explore")
    with pytest.raises(StorageNotFoundError, match="is a file, not a directory"):
        kx.load(cli.url)


def test_a_storage_error_exits_5(cli: Cli) -> None:
    cli.directory.mkdir()
    (cli.directory / "unreadable.jsonl").mkdir()  # reading it fails with an OSError
    code, error = cli.error("status", "unreadable")
    assert (code, error["type"]) == (5, "StorageError")


# -- storage selection and help --------------------------------------------------------------


def test_storage_may_come_before_or_after_the_verb(cli: Cli, tmp_path: Path) -> None:
    write_runs(cli)
    (tmp_path / "empty").mkdir()
    empty = f"file:{tmp_path / 'empty'}"
    for argv in (
        ["--storage", cli.url, "list", "--limit", "1"],
        ["list", "--storage", cli.url, "--limit", "1"],
        ["list", "--limit", "1", "--storage", cli.url],
        ["--storage", empty, "list", "--storage", cli.url, "--limit", "1"],  # the later wins
    ):
        assert main(argv) == 0
        out = cli.captured()[0]
        assert json.loads(out) == {"runId": "done", "status": "completed"}, argv
    assert main(["--storage", cli.url, "list", "--storage", empty]) == 0
    assert cli.captured() == (b"", b"")


def test_storage_defaults_to_the_environment_then_to_dot_kassette(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_runs(cli)
    monkeypatch.setenv("KASSETTE_STORAGE", cli.url)
    assert len(cli.json_lines("list", storage=False)) == 4

    monkeypatch.delenv("KASSETTE_STORAGE")
    monkeypatch.chdir(tmp_path)
    code, error = cli.error("list", storage=False)
    assert (code, error["type"]) == (3, "StorageNotFoundError")
    assert error["message"].startswith("storage file:.kassette not found")
    three_steps(LocalStorage(tmp_path / ".kassette"), Counter()).start(1, run_id="here")
    assert cli.json_lines("list", storage=False) == [{"runId": "here", "status": "completed"}]


@pytest.mark.parametrize(
    "verb", [[], ["list"], ["status"], ["dump"], ["fork"], ["tree"], ["cancel"], ["export"]]
)
def test_help_prints_to_stdout_and_exits_0(cli: Cli, verb: list[str]) -> None:
    code, out, err = cli(*verb, "--help", storage=False)
    assert (code, err) == (0, b"")
    assert out.startswith(b"usage: kassette")


# -- the real command ------------------------------------------------------------------------


def test_python_m_kassette_end_to_end(tmp_path: Path) -> None:
    calls: Counter[str] = Counter()
    workflow = three_steps(LocalStorage(tmp_path / ".kassette"), calls)
    workflow.start(1, run_id="source")

    listed = run_module("list", cwd=tmp_path)  # the default storage, file:.kassette
    assert (listed.returncode, listed.stderr) == (0, b"")
    assert json.loads(listed.stdout) == {"runId": "source", "status": "completed"}

    forked = run_module(
        "fork", "source", "--from-step", "c", "--new-run-id", "branch", cwd=tmp_path
    )
    assert (forked.returncode, json.loads(forked.stdout)) == (0, {"runId": "branch"})
    assert workflow.start(run_id="branch").result == {"c": 25}
    assert calls == Counter(a=1, b=1, c=2)

    dumped = run_module("--storage", "file:.kassette", "dump", "branch", cwd=tmp_path)
    assert dumped.stdout == (tmp_path / ".kassette" / "branch.jsonl").read_bytes()

    tree = run_module("tree", "branch", "--storage", "file:.kassette", cwd=tmp_path)
    assert tree.stdout.decode() == ("source (completed)\n└── branch (completed, from offset 3)\n")


def test_python_m_kassette_errors_and_help(tmp_path: Path) -> None:
    unknown = run_module("list", "--bogus", cwd=tmp_path)
    assert (unknown.returncode, unknown.stdout) == (2, b"")
    assert json.loads(unknown.stderr)["error"]["type"] == "UsageError"

    (tmp_path / "j").mkdir()
    missing = run_module("status", "nope", cwd=tmp_path, env={"KASSETTE_STORAGE": "file:j"})
    assert missing.returncode == 3
    assert json.loads(missing.stderr) == {
        "error": {"type": "RunNotFoundError", "message": "run nope not found", "runId": "nope"}
    }
    (tmp_path / "j").rmdir()
    nowhere = run_module("list", cwd=tmp_path, env={"KASSETTE_STORAGE": "file:j"})
    assert (nowhere.returncode, nowhere.stdout) == (3, b"")
    assert json.loads(nowhere.stderr)["error"] == {
        "type": "StorageNotFoundError",
        "message": "storage file:j not found: the directory j does not exist "
        "(kassette creates it when a workflow writes its first run)",
    }

    scheme = run_module("--storage", "ftp://x", "list", cwd=tmp_path)
    assert scheme.returncode == 2
    assert json.loads(scheme.stderr)["error"]["type"] == "InvalidArgumentError"

    helped = run_module("--help", cwd=tmp_path)
    assert (helped.returncode, helped.stderr) == (0, b"")
    assert b"fork" in helped.stdout and b"Exit codes" in helped.stdout
    assert not (tmp_path / ".kassette").exists() and not (tmp_path / "j").exists()


OUTPUT_VERBS = [
    ["list"],
    ["status", "done"],
    ["dump", "done"],
    ["tree"],
    ["fork", "done", "--from-offset", "1", "--new-run-id", "copy"],
    ["cancel", "waiting"],
    ["--help"],
]


def run_with_stdout(
    args: list[str], cwd: Path, stdout: Any, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k != "KASSETTE_STORAGE"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PROJECT_ROOT), environment.get("PYTHONPATH")])
    )
    return subprocess.run(
        [sys.executable, "-m", "kassette", *args],
        cwd=cwd,
        env={**environment, **env},
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("args", OUTPUT_VERBS, ids=lambda args: args[0])
@pytest.mark.parametrize("where", ["/dev/full", "closed"])
def test_a_stdout_that_cannot_be_written_is_one_json_error_and_exit_5(
    cli: Cli, tmp_path: Path, args: list[str], where: str
) -> None:
    write_runs(cli)
    env = {"KASSETTE_STORAGE": cli.url}
    if where == "closed":  # the shell's `>&-`: the process starts with no file descriptor 1
        script = "import os, sys; os.close(1); os.execv(sys.executable, sys.argv[1:])"
        environment = {k: v for k, v in os.environ.items() if k != "KASSETTE_STORAGE"}
        environment["PYTHONPATH"] = str(PROJECT_ROOT)
        done = subprocess.run(
            [sys.executable, "-c", script, sys.executable, "-m", "kassette", *args],
            cwd=tmp_path,
            env={**environment, **env},
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    else:
        with open("/dev/full", "wb") as full:
            done = run_with_stdout(args, tmp_path, full, env)
    assert done.returncode == 5, done.stderr.decode()
    assert done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "OutputError" and "stdout" in error["message"]


def test_a_reader_that_goes_away_is_an_output_error_too(cli: Cli, tmp_path: Path) -> None:
    write_runs(cli)
    for number in range(200):  # a journal longer than a pipe holds
        with open_run(cli.storage, "long") as run:
            run.record(f"step-{number}", lambda: "x" * 1000)
    reader = subprocess.Popen(  # closes the pipe without reading, as `head` does when done
        [sys.executable, "-c", "import os; os.close(0)"], stdin=subprocess.PIPE
    )
    assert reader.stdin is not None
    done = run_with_stdout(["dump", "long"], tmp_path, reader.stdin, {"KASSETTE_STORAGE": cli.url})
    reader.stdin.close()
    reader.wait(timeout=60)
    assert done.returncode == 5 and b"Traceback" not in done.stderr
    assert json.loads(done.stderr)["error"]["type"] == "OutputError"


def test_an_empty_storage_url_is_a_usage_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    write_runs(cli)
    monkeypatch.chdir(cli.directory.parent)
    for argv in (["--storage", "", "list"], ["list", "--storage", ""]):
        code, error = cli.error(*argv, storage=False)
        assert (code, error["type"]) == (2, "UsageError")
        assert "--storage" in error["message"] and "empty" in error["message"]
    monkeypatch.setenv("KASSETTE_STORAGE", "")  # an empty variable is an unset one
    code, error = cli.error("list", storage=False)
    assert (code, error["type"]) == (3, "StorageNotFoundError")
    assert error["message"].startswith("storage file:.kassette not found")


def test_docs_describe_exactly_the_registered_verbs() -> None:
    from kassette._cli import _parser

    [verbs] = [
        action.choices
        for action in _parser()._actions
        if isinstance(action.choices, dict) and "list" in action.choices
    ]
    docs = (PROJECT_ROOT / "docs" / "cli.md").read_text()
    documented = {
        line.split("`")[1].split()[0] for line in docs.splitlines() if line.startswith("### `")
    }
    verbs_promised = {"list", "status", "dump", "fork", "tree", "cancel", "export", "import"}
    assert documented == set(verbs) == verbs_promised
