"""The suite in two sets: `make test-fast` (`pytest -m "not slow"`), every module's tests in a
few minutes, and the `slow` set, what needs real browsers, servers, clusters or campaigns of
killed processes. `make test` runs both.

A test is `slow` when its file is in `SLOW_FILES` or matches `SLOW_PATTERNS` (the whole file
is of that kind), when it uses a fixture of `SLOW_FIXTURES`, when its function is in
`SLOW_FUNCTIONS`, when it is a notebook cell (nbval), or when it is marked
`@pytest.mark.slow` itself. Mark a new test file here by its path, or a single test with the
mark; a test is slow when it starts browsers, Phoenix, Dask clusters, JupyterLab or many
processes, or alone takes more than about 2 seconds on a 2-core machine.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# whole files whose every test is of one slow kind (paths from the repository's root)
SLOW_FILES = {
    "tests/test_journal_parity.py": "every consumer of thousands of generated journals",
    "tests/test_crash.py": "SIGKILL campaigns",
    "tests/test_crash_group_commit.py": "SIGKILL campaigns",
    "tests/test_examples.py": "every example run as a program",
    "tests/explore/test_fan_out_interrupt.py": "SIGINT campaigns in every executor, Dask's too",
    "tests/explore/test_branches_processes.py": "Dask clusters and process pools",
    "tests/explore/test_otlp_phoenix.py": "a real Arize Phoenix server",
    "tests/explore/test_lab.py": "JupyterLab",
    "tests/koto/test_koto_s3.py": "machines sharing S3, in processes",
    # the koto CLI as a process for every verb of every scenario (the fast set keeps koto's
    # config, template, frontmatter, gates, context, export and concurrency tests)
    "tests/koto/test_koto_examples.py": "the koto CLI, a process per verb",
    "tests/koto/test_koto_hostile.py": "the koto CLI, a process per verb",
    "tests/koto/test_koto_lifecycle.py": "the koto CLI, a process per verb",
    "tests/koto/test_koto_scenarios.py": "the koto CLI, a process per verb",
    "tests/koto/test_koto_upstream.py": "the koto CLI, a process per verb",
}
SLOW_PATTERNS = {"tests/explore/test_*browser*.py": "Chromium driven by Playwright"}
SLOW_FIXTURES = {"lab": "JupyterLab and Chromium", "page": "Chromium"}
# functions whose every case starts a Python program (a doc's block or command)
SLOW_FUNCTIONS = {
    "tests/test_docs.py::test_python_block_is_an_example_or_runs": "each block a program",
    "tests/test_docs.py::test_console_block_is_what_the_real_command_prints": "a shell",
    # single tests that alone take many seconds
    "tests/test_journal.py::test_status_without_step_bodies_is_the_parsed_journals_status": "",
    "tests/storage/test_s3.py::test_cli_verbs_work_on_s3": "the CLI against moto, per verb",
    "tests/storage/test_s3_chunks.py::"
    "test_a_long_run_uploads_at_most_four_times_its_journal_one_put_per_append": "",
    "tests/storage/test_s3_chunks.py::test_a_merge_empties_the_small_chunks_it_replaces": "",
    "tests/storage/test_s3_chunks.py::test_opening_a_run_reads_its_head_then_its_live_chunks": "",
}


def slow_reason(item: pytest.Item) -> str | None:
    """Why `item` is in the slow set, or None when it is in the fast one."""
    path = Path(str(item.path)).resolve()
    relative = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    if path.suffix == ".ipynb":
        return "a notebook run under nbval"
    if relative in SLOW_FILES:
        return SLOW_FILES[relative]
    for pattern, reason in SLOW_PATTERNS.items():
        if fnmatch(relative, pattern):
            return reason
    function = getattr(item, "originalname", None) or item.name
    if f"{relative}::{function}" in SLOW_FUNCTIONS:
        return SLOW_FUNCTIONS[f"{relative}::{function}"] or "it alone takes many seconds"
    fixtures = set(getattr(item, "fixturenames", ())) & set(SLOW_FIXTURES)
    return SLOW_FIXTURES[min(fixtures)] if fixtures else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and slow_reason(item) is not None:
            item.add_marker(pytest.mark.slow)
