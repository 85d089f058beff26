"""One agent's code, run two ways: in "production", traced by the official OpenInference
instrumentations and exported by the OpenTelemetry SDK as OTLP/JSON lines; and as a kassette
workflow that replays an imported trace.

`python -m tests.explore.import_support URL OUT TASKS_JSON [--fail-city CITY]` is production:
it instruments the real `openai` and `anthropic` SDKs with `openinference-instrumentation-
openai` / `-anthropic`, runs `agent` once per task against the model server at URL (each run
a trace under an `agent` span), and writes the spans as the OpenTelemetry SDK encodes them
(`encode_spans`), one OTLP/JSON `ExportTraceServiceRequest` a line, as the Collector's file
exporter does; it prints each task's answer (or error) as a JSON line.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CHAT_MODEL = "gpt-4o-mini"
CLAUDE = "claude-sonnet-4-5"

Tool = Callable[[str, Callable[[], Any]], Any]


@contextlib.contextmanager
def sdk_clients(server: Any) -> Iterator[tuple[Any, Any]]:
    """The real OpenAI and Anthropic clients on the model server, closed at the end."""
    import anthropic
    import openai

    with (
        openai.OpenAI(base_url=server.openai_base_url, api_key="unused", max_retries=0) as gpt,
        anthropic.Anthropic(
            base_url=server.anthropic_base_url, api_key="unused", max_retries=0
        ) as claude,
    ):
        yield gpt, claude


def get_weather(city: str, fail_city: str | None = None) -> dict[str, Any]:
    if city == fail_city:
        raise RuntimeError(f"no weather station in {city}")
    return {"city": city, "celsius": 10 + len(city)}


def agent(openai_client: Any, anthropic_client: Any, tool: Tool, task: dict[str, Any]) -> str:
    """The agent: ask for the weather with a tool, answer, have Claude summarise."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Use get_weather for {task['city']}, then advise."}
    ]
    reply = openai_client.chat.completions.create(
        model=CHAT_MODEL, messages=messages, tools=TOOLS, temperature=0
    )
    message = reply.choices[0].message
    for call in message.tool_calls or []:
        arguments = json.loads(call.function.arguments)
        result = tool(
            "get_weather",
            lambda a=arguments: get_weather(a.get("city", task["city"]), task.get("fail")),
        )
        messages += [
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)},
        ]
        reply = openai_client.chat.completions.create(
            model=CHAT_MODEL, messages=messages, tools=TOOLS, temperature=0
        )
    advice = reply.choices[0].message.content or ""
    summary = anthropic_client.messages.create(
        model=CLAUDE,
        max_tokens=200,
        messages=[{"role": "user", "content": f"Summarise in one line: {advice}"}],
    )
    return str(summary.content[0].text)


def _produce(url: str, out: str, tasks: list[dict[str, Any]]) -> None:
    import anthropic
    import openai
    from google.protobuf import json_format
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class JsonLinesExporter(SpanExporter):
        """The OpenTelemetry SDK's OTLP encoding of each batch, as one OTLP/JSON line."""

        def __init__(self, path: str) -> None:
            self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by shutdown

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            request = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
            for resource in request.get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in span:  # OTLP/JSON's ids are hex, protobuf JSON's base64
                                span[key] = base64.b64decode(span[key]).hex()
            self.file.write(json.dumps(request) + "\n")
            self.file.flush()
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            self.file.close()

    provider = TracerProvider()
    # a small batch: a trace's spans are spread over several lines, as in production
    provider.add_span_processor(BatchSpanProcessor(JsonLinesExporter(out), max_export_batch_size=3))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    AnthropicInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("weather-agent")

    def tool(name: str, run: Callable[[], Any]) -> Any:
        kind = {"openinference.span.kind": "TOOL", "tool.name": name}
        with tracer.start_as_current_span(name, attributes=kind) as span:
            result = run()
            span.set_attribute("output.value", json.dumps(result))
            span.set_attribute("output.mime_type", "application/json")
            return result

    openai_client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    anthropic_client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    for task in tasks:
        attributes = {
            "openinference.span.kind": "AGENT",
            "input.value": json.dumps(task),
            "input.mime_type": "application/json",
        }
        with tracer.start_as_current_span("agent", attributes=attributes) as root:
            try:
                answer = agent(openai_client, anthropic_client, tool, task)
            except RuntimeError as exc:
                print(json.dumps({"error": str(exc)}), flush=True)
                continue  # the span records the exception and the error status
            root.set_attribute("output.value", answer)
            root.set_attribute("output.mime_type", "text/plain")
            print(json.dumps({"answer": answer}), flush=True)
    provider.shutdown()


if __name__ == "__main__":
    _produce(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
