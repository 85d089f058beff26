"""Model calls as journaled steps: record/replay for the OpenAI Python SDK.

`journaled(client, ctx)` wraps an `openai.OpenAI` (or `AsyncOpenAI`) client for one workflow
invocation. Its `chat.completions.create` and `responses.create` are steps: live, the request
goes to the provider and the response, as the JSON the API sent, is journaled with the request
(the entry's `call`); on replay that JSON is rebuilt into the same SDK type (`ChatCompletion`,
`Response`) and no request is made, once the code's request is found equal to the recorded one
(else `ReplayMismatchError` names the first differing path).

    @kassette(storage=storage)
    def agent(ctx, task):
        client = journaled(OpenAI(), ctx)
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=[...])

With `stream=True`, chunks reach the caller as they arrive and the whole stream is journaled
when it ends (`{"stream": ...}`: every chunk, stored compactly); a replay yields the recorded
chunks one by one as `ChatCompletionChunk` or `ResponseStreamEvent` objects. A stream closed
before its end is not journaled, so that call runs again on the next invocation.
`chat.completions.stream(...)` is the SDK's own stream helper over that same journaled stream,
so its events,
`get_final_completion()` and a `response_format` type's parsing work live and replayed. Steps
are named after the method (`chat.completions.create`, `chat.completions.stream`,
`responses.create`, or `name=`) and counted like any other step.
Every other attribute of the client passes through unjournaled. The engine, shared with the
Anthropic integration, is `kassette.integrations._recording`.
"""

from kassette._public import publish as _publish
from kassette.integrations._openai import journaled

__all__ = ["journaled"]

_publish(globals(), "kassette.integrations.openai")
