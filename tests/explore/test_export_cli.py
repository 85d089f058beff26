"""`kassette export OUT [--format F] [--overwrite]`: the CLI verb over kx.export."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import RUNS, populate

from kassette import LocalStorage
from kassette import explore as kx
from kassette._cli import main


@pytest.fixture
def url(tmp_path: Path) -> str:
    populate(LocalStorage(tmp_path / "journals"))
    return f"file:{tmp_path / 'journals'}"


@pytest.mark.parametrize("format", ["parquet", "jsonl", "csv"])
def test_export_prints_a_summary(
    url: str, tmp_path: Path, format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["--storage", url, "export", str(out), "--format", format]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    summary = json.loads(captured.out)
    assert (summary["format"], summary["path"], summary["runs"]) == (format, str(out), len(RUNS))
    assert all(Path(path).exists() for path in summary["files"])
    entries = kx.load(url).entries
    assert summary["entries"] == len(entries) > 0
    if format == "parquet":
        written = pq.read_table(out / "entries")
        assert written.num_rows == summary["entries"]
    elif format == "jsonl":  # a writer that emits nothing, or rows without their runs, fails
        rows = [json.loads(line) for line in (out / "entries.jsonl").read_text().splitlines()]
        assert len(rows) == summary["entries"]
        assert sorted({row["run_id"] for row in rows}) == sorted(RUNS)
        runs = (out / "runs.jsonl").read_text().splitlines()
        assert sorted(json.loads(line)["run_id"] for line in runs) == sorted(RUNS)
    else:
        with (out / "entries.csv").open(newline="") as file:
            rows = list(csv.DictReader(file))
        assert len(rows) == summary["entries"]
        assert sorted({row["run_id"] for row in rows}) == sorted(RUNS)


def test_the_format_defaults_to_parquet_as_in_kx_export(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["--storage", url, "export", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "parquet"
    assert pq.read_table(out / "runs").num_rows == len(RUNS)


def test_partition_by_writes_a_hive_dataset_of_the_same_rows(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    single, partitioned = tmp_path / "single", tmp_path / "partitioned"
    assert main(["--storage", url, "export", str(single)]) == 0
    argv = ["--storage", url, "export", str(partitioned)]
    assert main([*argv, "--partition-by", "status", "--partition-by", "run_bucket"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    statuses = {p.name for p in (partitioned / "entries").iterdir()}
    assert statuses == {f"status={s}" for s in ("completed", "failed", "suspended", "canceled")}
    assert all(Path(path).exists() for path in summary["files"])
    whole = pq.read_table(single / "entries").sort_by(
        [("run_id", "ascending"), ("offset", "ascending")]
    )
    parts = pq.read_table(partitioned / "entries").sort_by(
        [("run_id", "ascending"), ("offset", "ascending")]
    )
    assert parts.num_rows == whole.num_rows == summary["entries"]
    assert parts.column("value").to_pylist() == whole.column("value").to_pylist()


@pytest.mark.parametrize(
    "extra", [["--partition-by", "colour"], ["--partition-by", "run_id", "--format", "csv"]]
)
def test_a_bad_partition_by_exits_2_and_writes_nothing(
    url: str, tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["--storage", url, "export", str(out), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert json.loads(captured.err)["error"]["type"] == "InvalidArgumentError"
    assert not out.exists()


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("format", ["parquet", "jsonl", "csv"])
def test_a_non_empty_output_needs_overwrite(
    url: str, tmp_path: Path, format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["--storage", url, "export", str(out), "--format", format]
    assert main(argv) == 0  # into a directory that does not exist yet
    (out / "notes.txt").write_text("mine")
    before = tree(out)
    capsys.readouterr()
    LocalStorage(tmp_path / "journals").append(  # one more run: a new export would differ
        "newer",
        b'{"type":"start","session":1,"offset":0,"timestamp":"2026-01-02T00:00:00.000Z",'
        b'"metadata":null}\n',
        token=None,
    )

    assert main(argv) == 2  # again: refused, nothing written
    captured = capsys.readouterr()
    assert captured.out == ""
    error = json.loads(captured.err)["error"]
    assert error["type"] == "InvalidArgumentError"
    assert error["message"].startswith(f"cannot export into {out}: it is not empty")
    assert "--overwrite" in error["message"]
    assert tree(out) == before

    assert main([*argv, "--overwrite"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == len(RUNS) + 1
    assert (out / "notes.txt").read_text() == "mine"  # only the export's own files are replaced
    assert set(tree(out)) == set(before)


def test_an_empty_output_directory_needs_no_overwrite(url: str, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    assert main(["--storage", url, "export", str(tmp_path / "out"), "--format", "csv"]) == 0


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_output_that_is_a_file_is_refused(
    url: str, tmp_path: Path, overwrite: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.parquet"
    out.write_bytes(b"precious")
    assert main(["--storage", url, "export", str(out), *overwrite]) == 2
    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["type"], error["message"]) == (
        "InvalidArgumentError",
        f"cannot export into {out}: it is not a directory",
    )
    assert out.read_bytes() == b"precious"


def test_an_output_that_cannot_be_written_is_a_storage_error(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_bytes(b"")
    out = tmp_path / "file" / "out"  # under a file: no directory can be made there
    assert main(["--storage", url, "export", str(out), "--format", "jsonl"]) == 5
    captured = capsys.readouterr()
    assert captured.out == ""
    error = json.loads(captured.err)["error"]
    assert error["type"] == "StorageError"
    assert error["message"].startswith(f"cannot export into {out}: ")


def test_export_of_a_corrupt_journal_exits_4(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journals" / "single.jsonl"
    journal.write_bytes(journal.read_bytes().replace(b'"offset":2', b'"offset":7'))
    assert main(["--storage", url, "export", str(tmp_path / "out"), "--format", "csv"]) == 4
    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["type"], error["runId"], error["offset"]) == (
        "JournalCorruptionError",
        "single",
        2,
    )
    assert "--skip-corrupt" in error["message"]
    assert not (tmp_path / "out").exists()  # nothing exported


def test_skip_corrupt_exports_the_readable_runs_and_lists_the_corrupt_ones(
    url: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journals" / "single.jsonl"
    journal.write_bytes(journal.read_bytes().replace(b'"offset":2', b'"offset":7'))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "kassette", "--storage", url, "export", str(out), "--skip-corrupt"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    summary = json.loads(done.stdout)
    assert [(c["runId"], c["offset"]) for c in summary["corrupt"]] == [("single", 2)]
    assert summary["runs"] == len(RUNS) - 1
    exported = pq.read_table(out / "runs").column("run_id").to_pylist()
    assert sorted(exported) == sorted(set(RUNS) - {"single"})


def test_without_the_explore_extra_the_error_names_the_install(url: str, tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.modules['pyarrow'] = None  # as if the explore extra were not installed\n"
        "from kassette._cli import main\n"
        f"sys.exit(main(['--storage', {url!r}, 'export', {str(tmp_path / 'out')!r}, "
        "'--format', 'parquet']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2 and done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "ImportError"
    assert 'pip install "kassette[explore]"' in error["message"]
    assert not (tmp_path / "out").exists()


def test_the_cli_module_imports_no_explore_dependency() -> None:
    script = (
        "import sys, kassette._cli\n"
        "print(sorted(m for m in ('pandas', 'pyarrow', 'numpy', 'ipywidgets', 'kassette.explore')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
