"""Starting and stopping a JupyterLab server in a test: its directories, URL and processes.

Shared by the browser tests (tests/explore/test_browser.py) and the `make lab` test
(tests/explore/test_lab.py), which both run a real server on 127.0.0.1 in a temporary
directory and must leave no process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

START_TIMEOUT = 60.0  # s: JupyterLab's server, then its page


def lab_environment(root: Path) -> dict[str, str]:
    """JupyterLab's and IPython's config, data, runtime and settings dirs, all under `root`."""
    env = dict(os.environ)
    for variable, name in [
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
        ("IPYTHONDIR", "ipython"),
    ]:
        (root / name).mkdir()
        env[variable] = str(root / name)
    settings = {
        # every cell in the page, not only those scrolled into view
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        # no news or update checks (they would ask for an answer, then go online)
        "@jupyterlab/apputils-extension/notification": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
        # a saved notebook keeps its widgets' state, as a user's "Save Widget State
        # Automatically" does: what a view leaves in the .ipynb is measured
        "@jupyter-widgets/jupyterlab-manager/plugin": {"saveState": True},
    }
    for plugin, values in settings.items():
        path = root / "settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return env


def wait_for_server(process: subprocess.Popen[bytes], runtime: Path, log: Path) -> str:
    """The URL JupyterLab serves at, from the file it writes once it listens."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        for info in runtime.glob("jpserver-*.json"):
            with info.open() as file:
                try:
                    return str(json.load(file)["url"])
                except (json.JSONDecodeError, KeyError):  # being written
                    pass
        time.sleep(0.1)
    raise RuntimeError(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (JupyterLab's kernels run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found += below
        pending += below
    return found


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop JupyterLab's process group, then anything it started that outlived it."""
    below = descendants(process.pid)
    for signum, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
