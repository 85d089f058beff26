"""Model calls as journaled steps: record/replay for the Anthropic Python SDK.

`journaled(client, ctx)` wraps an `anthropic.Anthropic` (or `AsyncAnthropic`) client for one
workflow invocation. Its `messages.create` is a step: live, the request goes to the API and
the `Message`, as the JSON the API sent, is journaled with the request (the entry's `call`); on
replay that JSON is rebuilt into `anthropic.types.Message` and no request is made, once the
code's request is found equal to the recorded one (else `ReplayMismatchError` names the first
differing path: `system`, `messages[2].content`, `temperature`).

    @kassette(storage=storage)
    def agent(ctx, task):
        client = journaled(Anthropic(), ctx)
        reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, messages=[...])

With `stream=True` the raw server-sent events (`message_start`, `content_block_delta`, ...,
`message_stop`) reach the caller as they arrive and are journaled when the stream ends
(`{"stream": ...}`: every event, stored compactly); a replay yields them again as
`RawMessageStreamEvent` objects.
`messages.stream(...)` is the SDK's own `MessageStreamManager` over that same journaled stream,
so `.text_stream`, `get_final_message()` and its events work live and replayed. A stream closed
before its end is not journaled, so that call runs again on the next invocation. Steps are
named after the method (`messages.create`, `messages.stream`, or `name=`). Every other
attribute of the client passes through unjournaled. The engine, shared with the OpenAI
integration, is `kassette.integrations._recording`.
"""

from kassette._public import publish as _publish
from kassette.integrations._anthropic import journaled

__all__ = ["journaled"]

_publish(globals(), "kassette.integrations.anthropic")
