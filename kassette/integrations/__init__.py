"""Integrations: journaling third-party SDK calls as kassette steps.

Each integration is a module of its own that imports its SDK, so `import kassette` never does:

- `kassette.integrations.openai`: `journaled(OpenAI(), ctx)` records every
  `chat.completions.create` and `responses.create` call, streams and the
  `chat.completions.stream` helper included, and replays them without a request
  (`pip install "kassette[openai]"`).
- `kassette.integrations.anthropic`: `journaled(Anthropic(), ctx)` records every
  `messages.create` (streamed too) and `messages.stream` call (`pip install
  "kassette[anthropic]"`).

- `kassette.integrations.otel`: `instrument(tracer_provider)` emits each run's OpenTelemetry
  spans as its entries are journaled, the spans `kx.to_otlp` exports (`pip install
  "kassette[otel]"`; docs/otel.md).

The model-call integrations each record the request with the response (the step entry's
`call`), and a replay whose request changed raises `ReplayMismatchError`. Both run on one
engine,
`kassette.integrations._recording`.
"""
