"""`kassette export OUT --format F`: the CLI verb over kx.export."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import RUNS, populate

from kassette import LocalStorage
from kassette.cli import main


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
    if format == "parquet":
        assert pq.read_table(out / "entries").num_rows == summary["entries"]


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


def test_without_the_explore_extra_the_error_names_the_install(url: str, tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.modules['pyarrow'] = None  # as if the explore extra were not installed\n"
        "from kassette.cli import main\n"
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
        "import sys, kassette.cli\n"
        "print(sorted(m for m in ('pandas', 'pyarrow', 'numpy', 'ipywidgets', 'kassette.explore')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
