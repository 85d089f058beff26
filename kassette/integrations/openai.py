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

from __future__ import annotations

from typing import Any, TypeVar, cast

try:
    import openai
    from openai import AsyncOpenAI, AsyncStream, OpenAI, Stream
    from openai._models import construct_type
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without openai
    raise ImportError(
        "kassette.integrations.openai needs the openai SDK, which is not installed: "
        'pip install "kassette[openai]"'
    ) from exc

from kassette._workflow import AsyncContext, Context
from kassette.core import Run
from kassette.integrations import _recording

__all__ = ["journaled"]

Client = TypeVar("Client", OpenAI, AsyncOpenAI)


def journaled(
    client: Client, ctx: Context | AsyncContext | Run, *, name: str | None = None
) -> Client:
    """`client` with its model calls journaled as steps of `ctx`'s run.

    `ctx` is the workflow's context (inside a `parallel` branch, the branch's), or a `Run` from
    `kassette.core.open_run`. Wrap the client in every invocation: the wrapper belongs to one
    session. `name` names the steps (default: the method, e.g. `chat.completions.create`).
    The result is typed as the client itself.
    """
    recorder = _recording.recorder(_OPENAI, client, ctx, name)
    return cast(Client, _JournaledClient(client, recorder))


class _JournaledClient(_recording.Passthrough):
    @property
    def chat(self) -> _Chat:
        return _Chat(self._wrapped.chat, self._recorder)

    @property
    def responses(self) -> _recording.Journaled:
        return _recording.Journaled(self._wrapped.responses, self._recorder, "responses.create")

    def with_options(self, **options: object) -> _JournaledClient:
        return _JournaledClient(self._wrapped.with_options(**options), self._recorder)

    copy = with_options


class _Chat(_recording.Passthrough):
    @property
    def completions(self) -> _Completions:
        return _Completions(self._wrapped.completions, self._recorder, "chat.completions.create")


class _Completions(_recording.Journaled):
    """`chat.completions`: `create` journaled by the engine, `stream` the SDK's own stream
    helper (`ChatCompletionStreamManager`) over a journaled `create(stream=True)`."""

    def stream(self, **kwargs: Any) -> Any:
        # the SDK's helper builds the request (a response_format type as its JSON schema, the
        # tools checked) and calls its resource's `create`: here, the journaled one
        return type(self._wrapped).stream(_StreamRequests(self), **kwargs)


class _StreamRequests(_recording.Passthrough):
    """The completions resource as the stream helper sees it: its `create` is journaled as
    `chat.completions.stream`; everything else is the SDK's."""

    def __init__(self, completions: _Completions) -> None:
        super().__init__(completions._wrapped, completions._recorder)
        self._completions = completions

    def create(self, **kwargs: Any) -> Any:
        journaled, send = self._completions, self._wrapped.create
        if self._recorder.asynchronous:
            return journaled.call_async("chat.completions.stream", kwargs, send)
        return journaled.call_sync("chat.completions.stream", kwargs, send)


_OPENAI = _recording.Provider(
    name="openai",
    clients=(OpenAI, AsyncOpenAI),
    streams=(Stream, AsyncStream),
    omitted=(openai.NotGiven, openai.Omit),
    types={
        ("chat.completions.create", False): ChatCompletion,
        ("chat.completions.create", True): ChatCompletionChunk,
        ("chat.completions.stream", True): ChatCompletionChunk,
        ("responses.create", False): Response,
        ("responses.create", True): ResponseStreamEvent,
    },
    construct=construct_type,
)
