"""Model calls as journaled steps: record/replay for the OpenAI Python SDK.

`journaled(client, ctx)` wraps an `openai.OpenAI` (or `AsyncOpenAI`) client for one workflow
invocation. Its `chat.completions.create` and `responses.create` are steps: live, the request
goes to the provider and the response, as the JSON the API sent, is journaled; on replay that
JSON is rebuilt into the same SDK type (`ChatCompletion`, `Response`) and no request is made.

    @kassette(storage=storage)
    def agent(ctx, task):
        client = journaled(OpenAI(), ctx)
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=[...])

With `stream=True`, chunks reach the caller as they arrive and the whole stream is journaled
when it ends (`{"stream": [chunk, ...]}`); a replay yields the recorded chunks one by one as
`ChatCompletionChunk` or `ResponseStreamEvent` objects. A stream closed before its end is not
journaled, so that call runs again on the next invocation. Steps are named after the method
(`chat.completions.create`, `responses.create`, or `name=`) and counted like any other step.
Every other attribute of the client passes through unjournaled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar, cast

try:
    import openai
    import pydantic
    from openai import AsyncOpenAI, AsyncStream, OpenAI, Stream
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without openai
    raise ImportError(
        "kassette.integrations.openai needs the openai SDK, which is not installed: "
        'pip install "kassette[openai]"'
    ) from exc

from kassette.core import Run
from kassette.errors import InvalidArgumentError, ReplayMismatchError
from kassette.journal import validate_name
from kassette.workflow import AsyncContext, Context

__all__ = ["journaled"]

Client = TypeVar("Client", OpenAI, AsyncOpenAI)
Chunk = TypeVar("Chunk", bound=openai.BaseModel)

# the SDK types a recorded response and a recorded stream chunk are rebuilt into, per method
_TYPES: dict[str, tuple[Any, Any]] = {
    "chat.completions.create": (ChatCompletion, ChatCompletionChunk),
    "responses.create": (Response, ResponseStreamEvent),
}
_ADAPTERS: dict[tuple[str, bool], pydantic.TypeAdapter[Any]] = {}


def journaled(
    client: Client, ctx: Context | AsyncContext | Run, *, name: str | None = None
) -> Client:
    """`client` with its model calls journaled as steps of `ctx`'s run.

    `ctx` is the workflow's context (inside a `parallel` branch, the branch's), or a `Run` from
    `kassette.core.open_run`. Wrap the client in every invocation: the wrapper belongs to one
    session. `name` names the steps (default: the method, e.g. `chat.completions.create`).
    The result is typed as the client itself.
    """
    if not isinstance(client, OpenAI | AsyncOpenAI):
        raise InvalidArgumentError(
            f"journaled() wraps an openai.OpenAI or AsyncOpenAI, not {client!r}"
        )
    if not isinstance(ctx, Context | AsyncContext | Run):
        raise InvalidArgumentError(f"journaled() needs the workflow's ctx or a Run, not {ctx!r}")
    if name is not None:
        validate_name(name)
    recorder = _Recorder(ctx, name, asynchronous=isinstance(client, AsyncOpenAI))
    return cast(Client, _JournaledClient(client, recorder))


class _Recorder:
    """Where a wrapped client's calls are journaled: a context or run, and a step name."""

    def __init__(
        self, ctx: Context | AsyncContext | Run, name: str | None, *, asynchronous: bool
    ) -> None:
        self.ctx = ctx
        self.name = name
        self.asynchronous = asynchronous

    def call(self, method: str, kwargs: dict[str, Any]) -> _Call:
        return _Call(self, method, kwargs.get("stream") is True)


class _Call:
    """One journaled call: its step id, and the recorded answer if the journal has one."""

    def __init__(self, recorder: _Recorder, method: str, stream: bool) -> None:
        self.method = method
        self.stream = stream
        self.ctx = recorder.ctx
        self.step = recorder.ctx.begin_step(recorder.name or method)

    def replayed(self) -> Any:
        """The recorded response, or a list of the recorded chunks, as SDK objects."""
        step = self.step
        result = step.result
        recorded_stream = isinstance(result, dict) and set(result) == {"stream"}
        if recorded_stream != self.stream:
            run_id = step.run.run_id
            raise ReplayMismatchError(
                f"run {run_id}: journal has a {_shape(recorded_stream)} at "
                f"{step.step_id}, the code asks for a {_shape(self.stream)}",
                run_id=run_id,
                step_id=step.step_id,
                offset=step.entry["offset"] if step.entry else None,
            )
        if self.stream:
            return [_rebuild(self.method, True, chunk) for chunk in result["stream"]]
        return _rebuild(self.method, False, result)

    def record(self, result: Any) -> None:
        self.step.record(result)

    def record_response(self, response: Any) -> Any:
        self.record(response.to_dict(mode="json"))
        return response

    def record_stream(self, chunks: list[Any]) -> None:
        self.record({"stream": [chunk.to_dict(mode="json") for chunk in chunks]})

    async def written(self, record: Callable[[Any], Any], value: Any) -> Any:
        """`record(value)`, its append written off the event loop in an async workflow."""
        if isinstance(self.ctx, AsyncContext):
            return await self.ctx._written(record, value)
        return record(value)

    async def record_response_async(self, response: Any) -> Any:
        return await self.written(self.record_response, response)

    async def record_stream_async(self, chunks: list[Any]) -> None:
        await self.written(self.record_stream, chunks)


def _shape(stream: bool) -> str:
    return "stream" if stream else "response"


def _rebuild(method: str, stream: bool, data: Any) -> Any:
    """A recorded response or chunk as the SDK type it was live."""
    adapter = _ADAPTERS.get((method, stream))
    if adapter is None:
        adapter = _ADAPTERS[method, stream] = pydantic.TypeAdapter(_TYPES[method][stream])
    try:
        return adapter.validate_python(data)
    except pydantic.ValidationError:
        # The SDK builds responses without validating them, so a provider whose JSON is not
        # quite OpenAI's works live; its recording must replay the same way.
        from openai._models import construct_type

        return construct_type(value=data, type_=_TYPES[method][stream])


# -- the wrapped client: only the two create methods differ from the SDK's ------------------


class _Passthrough:
    """Attributes this wrapper does not journal come from the wrapped SDK object."""

    def __init__(self, wrapped: Any, recorder: _Recorder) -> None:
        self._wrapped = wrapped
        self._recorder = recorder

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._wrapped, attribute)


class _JournaledClient(_Passthrough):
    @property
    def chat(self) -> _Chat:
        return _Chat(self._wrapped.chat, self._recorder)

    @property
    def responses(self) -> _Create:
        return _Create(self._wrapped.responses, self._recorder, "responses.create")

    def with_options(self, **options: Any) -> _JournaledClient:
        return _JournaledClient(self._wrapped.with_options(**options), self._recorder)

    copy = with_options


class _Chat(_Passthrough):
    @property
    def completions(self) -> _Create:
        return _Create(self._wrapped.completions, self._recorder, "chat.completions.create")


class _Create(_Passthrough):
    """A resource whose `create` is journaled; blocking or awaitable like the client."""

    def __init__(self, wrapped: Any, recorder: _Recorder, method: str) -> None:
        super().__init__(wrapped, recorder)
        self._method = method

    def create(self, **kwargs: Any) -> Any:
        if self._recorder.asynchronous:
            return self._create_async(kwargs)
        call = self._recorder.call(self._method, kwargs)
        if call.step.replayed:
            replayed = call.replayed()
            return _ReplayedStream(replayed) if call.stream else replayed
        response = self._wrapped.create(**kwargs)
        if call.stream:
            return _LiveStream(response, call.record_stream)
        return call.record_response(response)

    async def _create_async(self, kwargs: dict[str, Any]) -> Any:
        call = self._recorder.call(self._method, kwargs)
        if call.step.replayed:
            replayed = call.replayed()
            return _AsyncReplayedStream(replayed) if call.stream else replayed
        response = await self._wrapped.create(**kwargs)
        if call.stream:
            return _AsyncLiveStream(response, call.record_stream_async)
        return await call.record_response_async(response)


# -- streams: the SDK's stream types, live (relaying and recording) or replayed -------------


class _LiveStream(Stream[Chunk], Generic[Chunk]):
    """Relays the SDK's stream chunk by chunk; journals the chunks when it is exhausted."""

    def __init__(self, stream: Stream[Chunk], finish: Callable[[list[Chunk]], None]) -> None:
        self._stream = stream
        self.response = stream.response
        self._finish = finish
        self._iterator = self._relay()

    def _relay(self) -> Iterator[Chunk]:
        chunks = []
        for chunk in self._stream:
            chunks.append(chunk)
            yield chunk
        self._finish(chunks)

    def __next__(self) -> Chunk:
        return next(self._iterator)

    def __iter__(self) -> Iterator[Chunk]:
        yield from self._iterator

    def close(self) -> None:
        self._stream.close()


class _ReplayedStream(Stream[Chunk], Generic[Chunk]):
    """The recorded chunks of a stream, as the SDK's stream gave them; no HTTP response."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self._iterator = iter(chunks)

    def __next__(self) -> Chunk:
        return next(self._iterator)

    def __iter__(self) -> Iterator[Chunk]:
        yield from self._iterator

    def close(self) -> None:
        pass


class _AsyncLiveStream(AsyncStream[Chunk], Generic[Chunk]):
    """`_LiveStream` for `AsyncOpenAI`."""

    def __init__(
        self, stream: AsyncStream[Chunk], finish: Callable[[list[Chunk]], Awaitable[None]]
    ) -> None:
        self._stream = stream
        self.response = stream.response
        self._finish = finish
        self._iterator = self._relay()

    async def _relay(self) -> AsyncIterator[Chunk]:
        chunks = []
        async for chunk in self._stream:
            chunks.append(chunk)
            yield chunk
        await self._finish(chunks)

    async def __anext__(self) -> Chunk:
        return await self._iterator.__anext__()

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        async for chunk in self._iterator:
            yield chunk

    async def close(self) -> None:
        await self._stream.close()


class _AsyncReplayedStream(AsyncStream[Chunk], Generic[Chunk]):
    """`_ReplayedStream` for `AsyncOpenAI`."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks = iter(chunks)

    async def __anext__(self) -> Chunk:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        for chunk in self._chunks:
            yield chunk

    async def close(self) -> None:
        pass
