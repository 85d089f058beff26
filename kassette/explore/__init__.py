"""kassette.explore: journals as data, in a notebook.

    from kassette import explore as kx

    journals = kx.load("file:.kassette")   # .runs and .entries (pandas), .to_arrow(), .to_parquet()
    print(kx.lineage(journals))            # the fork forest, as text (and HTML in Jupyter)
    kx.compare(journals, ["plan", "plan-retry"])   # steps side by side, first divergence marked
    kx.RunTree(journals)                   # a widget: click a run to see its entries
    kx.CompareView(journals, run_ids)      # a widget: many branches side by side, with diffs
    kx.timeline(journals)                  # a chart: each run's steps on a time axis
    journals.sql("select ... from runs")   # DuckDB over runs, entries and llm_calls
    kx.ForkExplorer(workflow, "plan")      # a widget: pick a fork point, fork, compare
    kx.fan_out(workflow, "plan", step="draft", n=8, score=...)   # branches, run concurrently
    kx.to_otlp(journals)                   # runs as OpenTelemetry traces (OTLP/JSON)
    kx.import_otlp("traces.jsonl", store)  # traces (and kx.import_inspect: eval logs) as runs
    kx.experiment(workflow, runs, step="draft", variants={...}, score=..., name="x")  # paired stats

Data first (frames with fixed Arrow schemas), display second (text and HTML), widgets last.
Needs the `explore` extra: pandas and pyarrow, and anywidget and ipywidgets for the widgets.
"""

from __future__ import annotations

import importlib.util as _util
import typing as _typing

from kassette._extras import install_hint as _install_hint
from kassette._public import publish as _publish

# Checked, not imported here: `kx.<Tab>` offers kassette's names, not `pandas` or `pyarrow`.
for _needed in ("pandas", "pyarrow"):
    try:
        _found = _util.find_spec(_needed)
    except ValueError:  # a module set to None in sys.modules (as a bare environment's test does)
        _found = None
    if _found is None:  # pragma: no cover - exercised in a bare environment
        raise ImportError(f"{_install_hint('kassette.explore', _needed)} (no module {_needed!r})")

from kassette.explore._branches import Branches, FanOutInterrupted, fan_out  # noqa: E402
from kassette.explore._compare import compare  # noqa: E402
from kassette.explore._experiment import ExperimentInterrupted, Variant, experiment  # noqa: E402
from kassette.explore._experiment_result import Experiment  # noqa: E402
from kassette.explore._export import export  # noqa: E402
from kassette.explore._frames import (  # noqa: E402
    ENTRY_SCHEMA,
    LLM_CALL_SCHEMA,
    RUN_SCHEMA,
    Journals,
    load,
)
from kassette.explore._import_otlp import import_otlp  # noqa: E402
from kassette.explore._import_runs import ImportReport  # noqa: E402
from kassette.explore._lineage import Lineage, RunNode, lineage  # noqa: E402
from kassette.explore._sequential import decided  # noqa: E402
from kassette.explore._stats import summarize  # noqa: E402  (scipy loads on first call)
from kassette.explore._timeline import timeline  # noqa: E402  (altair loads on first call)

if _typing.TYPE_CHECKING:
    from kassette.explore._import_inspect import import_inspect
    from kassette.explore._otlp import to_otlp
    from kassette.explore._otlp_send import send_otlp
    from kassette.explore._widgets import CompareView, ForkExplorer, RunTree

__all__ = [
    "ENTRY_SCHEMA",
    "LLM_CALL_SCHEMA",
    "RUN_SCHEMA",
    "Branches",
    "CompareView",
    "Experiment",
    "ExperimentInterrupted",
    "FanOutInterrupted",
    "ForkExplorer",
    "ImportReport",
    "Journals",
    "Lineage",
    "RunNode",
    "RunTree",
    "Variant",
    "compare",
    "decided",
    "experiment",
    "export",
    "fan_out",
    "import_inspect",
    "import_otlp",
    "lineage",
    "load",
    "send_otlp",
    "summarize",
    "timeline",
    "to_otlp",
]

_publish(globals(), "kassette.explore")
_WIDGETS = {"CompareView", "ForkExplorer", "RunTree"}
_OTLP = {"send_otlp", "to_otlp"}
_IMPORT_INSPECT = "import_inspect"  # reads Inspect AI's logs: the `inspect` extra


def __getattr__(name: str) -> _typing.Any:
    """The widgets import ipywidgets, the OTLP functions opentelemetry-proto (the `otel`
    extra) and `import_inspect` Inspect AI (the `inspect` extra), so they load on first use."""
    if name in _WIDGETS:
        from kassette.explore import _widgets as widgets

        found = getattr(widgets, name)
    elif name in _OTLP:
        from kassette.explore import _otlp, _otlp_send

        found = getattr(_otlp_send if name == "send_otlp" else _otlp, name)
    elif name == _IMPORT_INSPECT:
        from kassette.explore import _import_inspect

        found = _import_inspect.import_inspect
    else:
        raise AttributeError(f"module 'kassette.explore' has no attribute {name!r}")
    found.__module__ = __name__  # its public home, as for the names loaded above
    return found


def __dir__() -> list[str]:
    """`dir(kx)` and `kx.<Tab>`: the public names, the lazy ones included, and no helper
    this module imports."""
    return sorted(__all__)


del annotations  # `from __future__ import annotations` leaves the name behind
