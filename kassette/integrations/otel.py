"""Live OpenTelemetry spans: a run's steps in a trace viewer while the run runs.

`instrument(tracer_provider=None)` makes every run of this process emit, as its entries are
journaled, the spans `kx.to_otlp` gives for the same journal (docs/otel.md): same trace and
span ids, names, parents and attributes. A step's span is emitted when its entry is durable;
the session's span, its parallel blocks and suspends when the session ends (a terminal entry,
or a suspend); the run's root span with the terminal entry. Replay appends nothing, so
replayed steps are not emitted again. A later export of the same journal gives the same ids,
so a viewer keeps one copy (the root span it already has wins).

Spans go through a tracer of the given OpenTelemetry SDK `TracerProvider` (the `otel` extra;
default the global one) to its span processors and exporters (OTLP, console, in memory); the
tracer's id generator gives the mapping's ids.
`uninstrument()` stops it. A failure to emit is logged, never raised into the workflow.
"""

from kassette._public import publish as _publish
from kassette.integrations._otel import instrument, uninstrument

__all__ = ["instrument", "uninstrument"]

_publish(globals(), "kassette.integrations.otel")
