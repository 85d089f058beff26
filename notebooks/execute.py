"""Run notebooks top to bottom in a fresh kernel and store their outputs and widget state.

    .venv/bin/python notebooks/execute.py notebooks/*.ipynb

The notebooks are kept with their outputs, and `pytest --nbval` (part of `make test`) runs
them again and compares what they show, so rerun this after changing a notebook or what it
displays, and commit the result. Widget state is stored in the notebook's metadata, so
JupyterLab shows the widgets of a saved notebook without running it, once the notebook is
trusted (`jupyter trust`; tests/explore/test_browser.py checks this).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpec

_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_TIMEOUT = 120.0


class _ThisPython(KernelManager):
    """A kernel running this interpreter, whatever `python` is on PATH."""

    @property
    def kernel_spec(self) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python 3 (ipykernel)",
            language="python",
        )


def execute(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    manager = _ThisPython()
    manager.start_kernel(cwd=str(path.parent))
    client = manager.client()
    client.start_channels()
    widgets: dict[str, dict[str, Any]] = {}
    try:
        client.wait_for_ready(timeout=_TIMEOUT)
        for number, cell in enumerate(c for c in notebook.cells if c.cell_type == "code"):
            cell.outputs, cell.execution_count = _run(client, cell.source, widgets), number + 1
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    notebook.metadata["widgets"] = {
        _WIDGET_STATE: {"version_major": 2, "version_minor": 0, "state": widgets}
    }
    notebook.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    nbformat.write(notebook, path)


def _run(client: Any, source: str, widgets: dict[str, dict[str, Any]]) -> list[Any]:
    """The outputs of one cell; widget models it opens or updates are folded into `widgets`."""
    message_id = client.execute(source)
    outputs: list[Any] = []
    deadline = time.monotonic() + _TIMEOUT
    while True:
        try:
            message = client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except Empty:
            raise TimeoutError(f"a cell took longer than {_TIMEOUT}s:\n{source}") from None
        if message["parent_header"].get("msg_id") != message_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "status" and content["execution_state"] == "idle":
            return outputs
        if kind == "stream":
            if outputs and outputs[-1].get("name") == content["name"]:
                outputs[-1]["text"] += content["text"]
            else:
                outputs.append(nbformat.v4.new_output("stream", **content))
        elif kind in ("display_data", "execute_result"):
            fields = {"data": content["data"], "metadata": content.get("metadata", {})}
            if kind == "execute_result":
                fields["execution_count"] = content["execution_count"]
            outputs.append(nbformat.v4.new_output(kind, **fields))
        elif kind == "error":
            raise RuntimeError(f"cell failed: {content['ename']}: {content['evalue']}\n{source}")
        elif kind in ("comm_open", "comm_msg"):
            _fold_widget(widgets, content)


def _fold_widget(widgets: dict[str, dict[str, Any]], content: dict[str, Any]) -> None:
    data = content.get("data", {})
    state = data.get("state")
    if state is None:
        return
    model = widgets.setdefault(content["comm_id"], {"state": {}})
    model["state"].update(state)
    for key, field in (
        ("model_name", "_model_name"),
        ("model_module", "_model_module"),
        ("model_module_version", "_model_module_version"),
    ):
        if field in model["state"]:
            model[key] = model["state"][field]


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(f"executing {argument}", file=sys.stderr)
        execute(Path(argument))
