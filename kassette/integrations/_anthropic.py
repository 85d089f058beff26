"""The code of `kassette.integrations.anthropic` (its docstring says what it does)."""

from __future__ import annotations

import inspect
from typing import Any, TypeVar, cast

from kassette._extras import requires

with requires("kassette.integrations.anthropic"):
    import anthropic
    from anthropic import Anthropic, AsyncAnthropic, AsyncStream, Stream
    from anthropic._models import construct_type
    from anthropic.lib.streaming import AsyncMessageStreamManager, MessageStreamManager
    from anthropic.types import Message, RawMessageStreamEvent

from kassette._workflow import AsyncContext, Context
from kassette.core import Run
from kassette.errors import InvalidArgumentError
from kassette.integrations import _recording

__all__ = ["journaled"]

Client = TypeVar("Client", Anthropic, AsyncAnthropic)


def journaled(
    client: Client, ctx: Context | AsyncContext | Run, *, name: str | None = None
) -> Client:
    """`client` with its model calls journaled as steps of `ctx`'s run.

    `ctx` is the workflow's context (inside a `parallel` branch, the branch's), or a `Run` from
    `kassette.core.open_run`. Wrap the client in every invocation: the wrapper belongs to one
    session. `name` names the steps (default: the method, `messages.create` or
    `messages.stream`). The result is typed as the client itself.
    """
    recorder = _recording.recorder(_ANTHROPIC, client, ctx, name)
    return cast(Client, _JournaledClient(client, recorder))


class _JournaledClient(_recording.Passthrough):
    @property
    def messages(self) -> _Messages:
        return _Messages(self._wrapped.messages, self._recorder, "messages.create")

    def with_options(self, **options: object) -> _JournaledClient:
        return _JournaledClient(self._wrapped.with_options(**options), self._recorder)

    copy = with_options


class _Messages(_recording.Journaled):
    """`messages`: `create` journaled by the engine, `stream` the SDK's stream helper over a
    journaled `create(stream=True)`."""

    def stream(self, **kwargs: Any) -> Any:
        if "output_format" in kwargs:
            # parsing into a type needs the SDK's private schema transform: not journaled
            # rather than journaled differently from what the SDK would send
            raise InvalidArgumentError(
                "a journaled messages.stream() takes no output_format: pass the schema as "
                "output_config={'format': ...}, or parse the final message yourself"
            )
        request = {**kwargs, "stream": True}
        if self._recorder.asynchronous:
            events = self.call_async("messages.stream", request, self._wrapped.create)
            return AsyncMessageStreamManager(events)
        return MessageStreamManager(
            lambda: self.call_sync("messages.stream", request, self._wrapped.create),
            **_NO_OUTPUT_FORMAT,
        )


# SDKs before `output_format` (0.40 to 0.6x) take the request alone; later ones need the keyword
_NO_OUTPUT_FORMAT: dict[str, Any] = (
    {"output_format": anthropic.NOT_GIVEN}
    if "output_format" in inspect.signature(MessageStreamManager).parameters
    else {}
)

_ANTHROPIC = _recording.Provider(
    name="anthropic",
    clients=(Anthropic, AsyncAnthropic),
    streams=(Stream, AsyncStream),
    # `Omit` joined `NotGiven` as the SDK's "not given" in later versions
    omitted=tuple(
        sentinel
        for sentinel in (anthropic.NotGiven, getattr(anthropic, "Omit", None))
        if isinstance(sentinel, type)
    ),
    types={
        ("messages.create", False): Message,
        ("messages.create", True): RawMessageStreamEvent,
        ("messages.stream", True): RawMessageStreamEvent,
    },
    construct=construct_type,
)
