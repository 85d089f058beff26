"""A trace's spans read as a run: which spans are steps, and what each step journals.

The spans are walked in the order they started. A *model-call span* (OpenInference
`openinference.span.kind` `LLM`, a GenAI `gen_ai.operation.name` such as `chat`, or
kassette's own `kassette.model_call.method`) is a model-call step; a *tool span*
(OpenInference `TOOL`, GenAI `execute_tool`) is a step named after its tool; kassette's own
entry spans are the steps they were, with their step ids. Other spans (agents, chains,
sessions) are structure, and a step's descendants are part of that step. A span whose status
is an error is where the run failed in the source: its steps stop before it, and the error is
kept as how the run ended. Where the source lacks what a step needs, the run is partial and
its steps stop there (`kassette.explore._import_runs`).

Attribute names are the GenAI semantic conventions' (`gen_ai.*`, current and the older
indexed `gen_ai.prompt.N.*` / `gen_ai.completion.N.*`), OpenInference's (`llm.*`, `tool.*`,
`input.value`, `output.value`) and kassette's (`kassette.*`, docs/otel.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kassette._llm_calls import read_llm_result
from kassette.explore._import_calls import SourceCall, fill_tool_call_ids, rebuild
from kassette.explore._import_messages import source_call
from kassette.explore._import_runs import ImportedRun, StepNames, StepNaming, timestamp_of

__all__ = ["Span", "run_of_trace"]

_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "responses"})
_ERROR = 2  # OTLP's STATUS_CODE_ERROR


@dataclass
class Span:
    """One span as read from OTLP/JSON: hex ids, nanosecond times, attributes as values.
    `input=` of `import_otlp` receives the root span as this."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    end: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status: int = 0
    message: str = ""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    line: int = 0

    def describe(self) -> str:
        return f"span {self.span_id} ({self.name}, line {self.line})"


def run_of_trace(
    trace_id: str,
    spans: list[Span],
    file_name: str,
    step_names: StepNaming,
    input: Callable[[Span], Any] | None,
) -> ImportedRun:
    """The run a trace's spans make."""
    spans.sort(key=lambda span: (span.start, span.end))
    ids = {span.span_id for span in spans}
    roots = [span for span in spans if not span.parent_id] or [
        span for span in spans if span.parent_id not in ids
    ]
    root = roots[0]
    attributes = root.attributes
    own_id = next(
        (s.attributes["kassette.run_id"] for s in spans if "kassette.run_id" in s.attributes),
        None,
    )
    run = ImportedRun(
        run_id=str(own_id) if own_id else f"otlp-{trace_id}",
        key=f"otlp trace {trace_id}",
        source=f"otlp:{file_name}#{trace_id}",
        started_at=timestamp_of(root.start),
    )
    run.input = input(root) if input is not None else _json_value(attributes.get("input.value"))
    params = _json_value(attributes.get("kassette.params"))
    if isinstance(params, dict) and params:
        run.params = params
    run.data = {"traceId": trace_id, "rootSpanId": root.span_id, "rootSpan": root.name}
    if "kassette.version" in attributes:
        run.data["version"] = attributes["kassette.version"]
    run.ended = _ended(root)
    for span in spans:
        if span.parent_id and span.parent_id not in ids:
            run.lacks(f"{span.describe()}: its parent span {span.parent_id} is not in the source")
    if "kassette.fork.source_run_id" in attributes:
        run.lacks(
            f"a fork of run {attributes['kassette.fork.source_run_id']} at offset "
            f"{attributes.get('kassette.fork.offset')}: its copied steps are not in its trace"
        )
    _steps(run, spans, StepNames(step_names))
    return run


def _steps(run: ImportedRun, spans: list[Span], names: StepNames) -> None:
    rebuilt: list[tuple[Any, str, str]] = []  # the last answer rebuilt: its tool call ids
    inside: set[str] = set()  # spans that are part of a step
    asked: list[tuple[Span, str]] = []  # tool calls the last model call asked for, unanswered
    for span in spans:  # past a missing part no step is journaled, but what is missing is said
        if span.parent_id in inside:
            inside.add(span.span_id)
            continue
        kind = _kind(span)
        if kind is None:
            continue
        inside.add(span.span_id)
        if kind == "model" and asked:
            _unanswered(run, asked)
        if span.status == _ERROR:  # where the run failed in the source: its steps end here
            if not run.stopped:
                run.ended = {
                    "status": "failed",
                    "error": _error(span),
                    "span": span.span_id,
                    "stepName": _default_name(span, kind),
                }
            run.stopped = True
            return
        if kind == "kassette":
            _kassette_step(run, span, names, rebuilt)
        elif kind == "model":
            asked = _model_step(run, span, names, rebuilt)
        else:
            name = _default_name(span, "tool")
            answered = next(
                (i for i, (_, asked_for) in enumerate(asked) if asked_for == name), None
            )
            if answered is not None:
                del asked[answered]
            _tool_step(run, span, names, name)
    if asked:
        _unanswered(run, asked)


def _kind(span: Span) -> str | None:
    attributes = span.attributes
    if "kassette.entry_type" in attributes:
        return "kassette" if attributes["kassette.entry_type"] == "step" else None
    oi = attributes.get("openinference.span.kind")
    operation = attributes.get("gen_ai.operation.name")
    if oi == "LLM" or operation in _MODEL_OPERATIONS:
        return "model"
    if oi == "TOOL" or operation == "execute_tool":
        return "tool"
    return None


def _default_name(span: Span, kind: str) -> str:
    attributes = span.attributes
    if kind == "tool":
        return str(attributes.get("tool.name") or attributes.get("gen_ai.tool.name") or span.name)
    if kind == "kassette":
        return str(attributes.get("kassette.step_id") or span.name).split("#")[0]
    return _provider_method(span)[1]


def _provider_method(span: Span) -> tuple[str, str]:
    """The provider and the SDK method of a model-call span."""
    attributes = span.attributes
    provider = str(
        attributes.get("gen_ai.provider.name")
        or attributes.get("gen_ai.system")
        or attributes.get("llm.provider")
        or attributes.get("llm.system")
        or ""
    ).lower()
    provider = "openai" if provider.endswith("openai") else provider
    method = attributes.get("kassette.model_call.method")
    if isinstance(method, str):
        return provider, method
    if provider == "anthropic":
        streamed = "stream" in span.name.lower()
        return provider, "messages.stream" if streamed else "messages.create"
    responses = span.name == "Response" or attributes.get("gen_ai.operation.name") == "responses"
    return provider, "responses.create" if responses else "chat.completions.create"


def _model_step(
    run: ImportedRun, span: Span, names: StepNames, rebuilt: list[tuple[Any, str, str]]
) -> list[tuple[Span, str]]:
    provider, method = _provider_method(span)
    name = names.name(method)
    step_id = names.next_id(name)
    call = source_call(provider, method, span.attributes)
    built = rebuild(call) if isinstance(call, SourceCall) else call
    if isinstance(built, str):
        run.lacks(f"{span.describe()}, step {step_id}: {built}")
        return []
    request, response = built
    _pass_back(rebuilt, call, request, response, provider, method)
    run.add_step(
        {
            "stepId": step_id,
            "name": name,
            "result": response,
            "call": {"provider": provider, "method": method, "request": request},
            **_timing(span),
        }
    )
    read = read_llm_result(response, {"provider": provider, "method": method})
    return [(span, str(c.get("name"))) for c in (read.tool_calls if read else [])]


def _pass_back(
    rebuilt: list[tuple[Any, str, str]],
    call: SourceCall | str,
    request: Any,
    response: Any,
    provider: str,
    method: str,
) -> None:
    """Fill the last rebuilt answer's missing tool call ids from this request, which passes
    them back; remember this answer if it was rebuilt (not the source's own response)."""
    for answer, its_provider, its_method in rebuilt:
        fill_tool_call_ids(answer, its_provider, its_method, request)
    own = isinstance(call, SourceCall) and response is call.response
    rebuilt[:] = [] if own else [(response, provider, method)]


def _unanswered(run: ImportedRun, asked: list[tuple[Span, str]]) -> None:
    span = asked[0][0]
    tools = ", ".join(name for _, name in asked)
    run.lacks(f"{span.describe()} asked for tool calls ({tools}) with no tool span answering them")
    asked.clear()


def _tool_step(run: ImportedRun, span: Span, names: StepNames, tool: str) -> None:
    name = names.name(tool)
    step_id = names.next_id(name)
    attributes = span.attributes
    if "output.value" in attributes:
        result = _output(attributes["output.value"], attributes.get("output.mime_type"))
    elif "gen_ai.tool.call.result" in attributes:
        result = _json_value(attributes["gen_ai.tool.call.result"])
    else:
        run.lacks(f"{span.describe()}, step {step_id}: the tool's output is not in the source")
        return
    run.add_step({"stepId": step_id, "name": name, "result": result, **_timing(span)})


def _kassette_step(
    run: ImportedRun, span: Span, names: StepNames, rebuilt: list[tuple[Any, str, str]]
) -> None:
    attributes = span.attributes
    step_id = str(attributes.get("kassette.step_id") or span.name)
    names.given(step_id)
    name = step_id.rsplit("/", 1)[-1].split("#")[0]
    kind = attributes.get("kassette.kind", "step")
    step: dict[str, Any] = {"stepId": step_id, "name": name}
    if kind == "sleep":
        step |= {"kind": "sleep", "result": {"wakeAt": _iso(span.end)}}
    elif kind == "parallel":
        run.lacks(f"{span.describe()}: parallel block {step_id}'s branch names are not in traces")
        return
    elif "kassette.model_call.method" in attributes:
        provider, method = _provider_method(span)
        call = source_call(provider, method, attributes)
        built = rebuild(call) if isinstance(call, SourceCall) else call
        if isinstance(built, str):
            run.lacks(f"{span.describe()}, step {step_id}: {built}")
            return
        _pass_back(rebuilt, call, built[0], built[1], provider, method)
        step |= {
            "result": built[1],
            "call": {"provider": provider, "method": method, "request": built[0]},
        }
    elif "output.value" in attributes:
        step["result"] = _output(attributes["output.value"], attributes.get("output.mime_type"))
    else:
        run.lacks(f"{span.describe()}, step {step_id}: its result is not in the source")
        return
    if attributes.get("kassette.edited") is True:
        step["edited"] = True
    run.add_step({**step, **_timing(span)})


def _timing(span: Span) -> dict[str, Any]:
    return {
        "durationMs": round(max(span.end - span.start, 0) / 1_000_000, 3),
        "timestamp": timestamp_of(span.end or span.start),
        "imported": {"traceId": span.trace_id, "spanId": span.span_id},
    }


def _ended(root: Span) -> dict[str, Any]:
    """How the run ended in the source: the root span's status, output and exception."""
    attributes = root.attributes
    status = attributes.get("kassette.status")
    ended: dict[str, Any] = {}
    if root.status == _ERROR or status == "failed":
        ended = {"status": "failed", "error": _error(root)}
    elif isinstance(status, str):
        ended = {"status": status}
    elif root.status == 1:
        ended = {"status": "completed"}
    if "output.value" in attributes:
        output = _output(attributes["output.value"], attributes.get("output.mime_type"))
        ended["output"] = output
    return ended


def _error(span: Span) -> dict[str, str]:
    """A failed span's error: its `exception` event's type and message, else its status's."""
    for name, attributes in span.events:
        if name == "exception":
            return {
                "name": str(attributes.get("exception.type") or "Error"),
                "message": str(attributes.get("exception.message") or span.message),
            }
    return {"name": "Error", "message": span.message}


def _output(value: Any, mime: Any) -> Any:
    """A span's `output.value`: JSON when it says so (or, with no type, when it parses)."""
    if mime in (None, "application/json") and isinstance(value, str):
        return _json_value(value)
    return value


def _json_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _iso(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, UTC).isoformat().replace("+00:00", "Z")
