"""The code of `kassette.integrations.openai` (its docstring says what it does)."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from kassette._extras import requires

with requires("kassette.integrations.openai"):
    import openai
    from openai import AsyncOpenAI, AsyncStream, OpenAI, Stream
    from openai._models import construct_type
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent

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
