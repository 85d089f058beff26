"""`make lab`: the explorer's front door, run as a user runs it.

The target is run for real in a subprocess, on the virtualenv running this test (its install
step is skipped with make's `-o`: the test must not install into a shared environment): it
writes the demo store, then starts JupyterLab on notebooks/ on 127.0.0.1 with a token, and the
test asks the server what it serves before stopping it by its process group.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from lab_support import lab_environment, stop, wait_for_server

from kassette import LocalStorage

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
NOTEBOOKS = sorted(path.name for path in (ROOT / "notebooks").glob("*.ipynb"))


def get(url: str) -> Any:
    """GET a JSON answer from the server on 127.0.0.1, never through a proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as response:
        assert response.status == 200, url
        return json.load(response)


@pytest.mark.skipif(MAKE is None, reason="no make on PATH")
def test_make_lab_writes_the_store_and_serves_the_notebooks(tmp_path: Path) -> None:
    assert MAKE is not None
    env = lab_environment(tmp_path)
    token, store, log = secrets.token_hex(16), tmp_path / "store", tmp_path / "make-lab.log"
    lab_args = [
        *("--no-browser", "--ip=127.0.0.1", "--port=0"),  # as root: the Makefile allows it
        f"--IdentityProvider.token={token}",
        *("--ServerApp.terminals_enabled=False", "--LabApp.news_url=None"),
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    venv = Path(sys.prefix)
    command = [
        *(MAKE, "--no-print-directory", "-C", str(ROOT), "lab"),
        *(f"VENV={venv}", "-o", f"{venv}/.installed-lab"),  # installed: skip pip
        f"LAB_STORE={store}",
        f"LAB_ARGS={' '.join(lab_args)}",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make, JupyterLab and its children: one group to stop
        )
    try:
        url = wait_for_server(process, tmp_path / "runtime", log)
        assert url.startswith("http://127.0.0.1:"), url
        status = get(f"{url}api/status?token={token}")
        assert status["started"]
        listing = get(f"{url}api/contents?token={token}")
        served = {item["name"] for item in listing["content"]}
        assert NOTEBOOKS and set(NOTEBOOKS) <= served, served
        notebook = get(f"{url}api/contents/{NOTEBOOKS[0]}?token={token}&content=0")
        assert notebook["type"] == "notebook"
    finally:
        stop(process)
    printed = log.read_text()
    assert re.search(r"http://127\.0\.0\.1:\d+/lab\?token=", printed), printed[-3000:]  # masked
    assert "Open 01-explore-a-run.ipynb first" in printed
    if os.getuid() == 0:  # JupyterLab refuses root unless told: `make lab` says so and tells it
        assert "Running as root: JupyterLab gets --allow-root." in printed
    # the store (what it holds: tests/test_examples.py's check_demo_store)
    runs = set(LocalStorage(store).list_runs())
    assert {"INC-4821", "support-1", "support-1.draft-reply.19"} <= runs, runs


IMPORT = re.compile(r"^\s*(?:from\s+(\w+)[\w.]*\s+import\s|import\s+(\w+))", re.MULTILINE)


def imported_modules() -> set[str]:
    """The top-level modules the notebooks' code cells and docs/'s code blocks import."""
    texts = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts += ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    for path in sorted((ROOT / "docs").glob("*.md")):
        texts += re.findall(r"```(?:python|text|py)?\n(.*?)```", path.read_text(), re.DOTALL)
    return {name for text in texts for pair in IMPORT.findall(text) for name in pair if name}


def lab_requirements() -> set[str]:
    """The distributions the `lab` extra names, its kassette[...] extras unfolded."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    names, todo = set(), list(extras["lab"])
    while todo:
        requirement = todo.pop()
        if nested := re.fullmatch(r"kassette\[([\w,]+)\]", requirement):
            todo += [item for extra in nested[1].split(",") for item in extras[extra]]
        else:
            names.add(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower())
    return names


def test_the_lab_extra_installs_what_the_notebooks_and_docs_import() -> None:
    """`make lab` installs the `lab` extra: every module a notebook or a doc imports comes with
    Python, with kassette, or from a distribution that extra names (OTLP's included)."""
    providers = metadata.packages_distributions()
    needed = lab_requirements()
    assert {"opentelemetry-proto", "opentelemetry-sdk", "jupyterlab"} <= needed
    missing = {}
    for module in imported_modules() - set(sys.stdlib_module_names) - {"kassette"}:
        dists = {name.lower().replace("_", "-") for name in providers.get(module, [])}
        if not dists & needed:
            missing[module] = sorted(dists)
    assert not missing, missing
