"""Integrations: journaling third-party SDK calls as kassette steps.

Each integration is a module of its own that imports its SDK, so `import kassette` never does:

- `kassette.integrations.openai`: `journaled(OpenAI(), ctx)` records every
  `chat.completions.create` and `responses.create` call, streams included, and replays them
  without a request (`pip install "kassette[openai]"`).
"""
