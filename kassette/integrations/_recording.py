"""The one engine behind every model-call integration: record a call, replay it, check it.

A model call is a step whose `result` is the provider's response (a stream: `{"stream":
...}`, its chunks stored compactly by `kassette._model_streams`) and whose `call` is
`{"provider", "method", "request"}`: the request as sent, as JSON, without credentials and
transport options (`kassette._codec.CallRecord`). Live, the
request goes to the provider and both are journaled; on replay the response is rebuilt into
the SDK's own type and no request is made, once the code's request is found equal to the
recorded one. A different request raises `ReplayMismatchError` naming the first differing
path (`messages[2].content`, `temperature`): the journal's answer belongs to the old request.

A provider module (`kassette.integrations.openai`, `.anthropic`) says only what differs: its
SDK's types (`Provider`) and which resources of the client are journaled. Everything else
lives in this module, the streams included: each is the SDK's own `Stream` class with a mixin
from here in front.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pydantic

from kassette._journal import CallRecord, validate_name
from kassette._json_diff import ABSENT
from kassette._json_diff import first_difference as _first_difference
from kassette._llm_calls import read_llm_result, response_method
from kassette._model_streams import compacted, expanded, is_stored_stream
from kassette._workflow import AsyncContext, Context
from kassette.core import Run
from kassette.errors import InvalidArgumentError, ReplayMismatchError
from kassette.integrations._requests import request_of, sendable, without_nulls

__all__ = [
    "AsyncLiveStream",
    "AsyncReplayedStream",
    "Call",
    "Journaled",
    "LiveStream",
    "Passthrough",
    "Provider",
    "Recorder",
    "ReplayedStream",
    "first_difference",
    "recorder",
]

Chunk = TypeVar("Chunk")

_SHORT = 60  # characters of each value a mismatch message shows


@dataclass(frozen=True)
class Provider:
    """What one SDK contributes: its name in the journal, its client classes (blocking and
    async) and stream classes (`Stream`, `AsyncStream`), the sentinels it uses for an
    argument not given (`NotGiven`, `Omit`), the types a recorded response or stream chunk is
    rebuilt into per method, and its lenient constructor."""

    name: str
    clients: tuple[type, type]
    streams: tuple[type, type]
    omitted: tuple[type, ...]
    types: Mapping[tuple[str, bool], Any]  # (method, stream) -> the SDK type of the JSON
    construct: Callable[..., Any]  # the SDK's `construct_type(value=, type_=)`
    _adapters: dict[tuple[str, bool], pydantic.TypeAdapter[Any]] = field(
        default_factory=dict, compare=False
    )
    # the SDK's stream classes with this module's relaying or replaying in front: live,
    # replayed, async live, async replayed (so `isinstance(s, openai.Stream)` holds)
    stream_classes: tuple[type, type, type, type] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        sdk_stream, sdk_async_stream = self.streams
        classes = tuple(
            type(mixin.__name__, (mixin, base), {"__module__": __name__})
            for mixin, base in [
                (LiveStream, sdk_stream),
                (ReplayedStream, sdk_stream),
                (AsyncLiveStream, sdk_async_stream),
                (AsyncReplayedStream, sdk_async_stream),
            ]
        )
        object.__setattr__(self, "stream_classes", classes)

    def rebuild(self, method: str, stream: bool, data: Any) -> Any:
        """A recorded response or chunk as the SDK type it was live."""
        adapter = self._adapters.get((method, stream))
        if adapter is None:
            adapter = self._adapters[method, stream] = pydantic.TypeAdapter(
                self.types[method, stream]
            )
        try:
            return adapter.validate_python(data)
        except pydantic.ValidationError:
            # The SDKs build responses without validating them, so a provider whose JSON is
            # not quite the reference API's works live; its recording must replay the same way.
            return self.construct(value=data, type_=self.types[method, stream])


def recorder(
    provider: Provider, client: object, ctx: Context | AsyncContext | Run, name: str | None
) -> Recorder:
    """The checked arguments of a provider's `journaled(client, ctx, *, name=None)`."""
    blocking, asynchronous = provider.clients
    if not isinstance(client, blocking | asynchronous):
        raise InvalidArgumentError(
            f"journaled() wraps an {provider.name}.{blocking.__name__} or "
            f"{asynchronous.__name__}, not {client!r}"
        )
    if not isinstance(ctx, Context | AsyncContext | Run):
        raise InvalidArgumentError(f"journaled() needs the workflow's ctx or a Run, not {ctx!r}")
    if name is not None:
        validate_name(name)
    return Recorder(provider, ctx, name, asynchronous=isinstance(client, asynchronous))


class Recorder:
    """Where a wrapped client's calls are journaled: a context or run, and a step name."""

    def __init__(
        self,
        provider: Provider,
        ctx: Context | AsyncContext | Run,
        name: str | None,
        *,
        asynchronous: bool,
    ) -> None:
        self.provider = provider
        self.ctx = ctx
        self.name = name
        self.asynchronous = asynchronous

    def call(self, method: str, kwargs: dict[str, Any]) -> Call:
        return Call(self, method, kwargs)


class Call:
    """One journaled call: its step, its request, and the recorded answer if there is one."""

    def __init__(self, recorder: Recorder, method: str, kwargs: dict[str, Any]) -> None:
        self.provider = recorder.provider
        self.ctx = recorder.ctx
        self.asynchronous = recorder.asynchronous
        self.method = method
        # what the SDK is given: nothing in it that recording could consume (`_requests`)
        self.kwargs = sendable(kwargs)
        self.stream = self.kwargs.get("stream") is True
        self.call: CallRecord = {
            "provider": self.provider.name,
            "method": method,
            "request": request_of(self.kwargs, self.provider.omitted),
        }
        self.step = recorder.ctx.begin_step(recorder.name or method)

    def replayed(self) -> Any:
        """The recorded response, or the SDK's stream of the recorded chunks, as SDK objects;
        `ReplayMismatchError` when the journal holds another kind of answer or request."""
        step, result = self.step, self.step.result
        recorded_stream = is_stored_stream(result)
        if recorded_stream != self.stream:
            self._mismatch(
                f"journal has a {_shape(recorded_stream)} at {step.step_id}, the code asks for "
                f"a {_shape(self.stream)}"
            )
        self._check_request(step.call)
        if not self.stream:
            return self.provider.rebuild(self.method, False, result)
        chunks = [
            self.provider.rebuild(self.method, True, chunk) for chunk in expanded(result)["stream"]
        ]
        replayed = self.provider.stream_classes[3 if self.asynchronous else 1]
        return replayed(chunks)

    def _check_request(self, recorded: CallRecord | None) -> None:
        if recorded is None:  # journaled by another writer: its result must be such an answer
            found = read_llm_result(self.step.result)
            if found is None or found.shape != (self.provider.name, _endpoint(self.method)):
                self._mismatch(
                    f"step {self.step.step_id} records no model call (no `call` field) and its "
                    f"result is no {self.provider.name} {_endpoint(self.method)} response, while "
                    f"the code makes {self.provider.name} {self.method} there"
                )
            return
        if recorded.get("provider") != self.provider.name or _endpoint(
            recorded.get("method")
        ) != _endpoint(self.method):
            self._mismatch(
                f"journal has a {recorded.get('provider')} {recorded.get('method')} call at step "
                f"{self.step.step_id}, the code makes {self.provider.name} {self.method}"
            )
        # compared as the provider reads them: a null field is an absent one
        difference = first_difference(
            without_nulls(recorded.get("request")), without_nulls(self.call["request"])
        )
        if difference is not None:
            path, journal, code = difference
            self._mismatch(
                f"the request of {self.method} at step {self.step.step_id} differs from the "
                f"journal's at {path}: journal {_shorten(journal, code)}, code "
                f"{_shorten(code, journal)}. The recorded answer belongs to the old request: to "
                "ask the new one, fork the run at this step "
                f'(workflow.fork("{self.step.run.run_id}", step="{self.step.step_id}")) or '
                "start a new run"
            )

    def _mismatch(self, message: str) -> None:
        step = self.step
        run_id = step.run.run_id
        raise ReplayMismatchError(
            f"run {run_id}: {message}",
            run_id=run_id,
            step_id=step.step_id,
            offset=step.entry["offset"] if step.entry else None,
        )

    def record(self, result: Any) -> None:
        self.step.record(result, call=self.call)

    async def record_async(self, result: Any) -> None:
        """`record`, its append written off the event loop in an async workflow."""
        if isinstance(self.ctx, AsyncContext):
            await self.ctx.record_step(self.step, result, call=self.call)
        else:
            self.record(result)

    def record_response(self, response: Any) -> Any:
        self.record(response.to_dict(mode="json"))
        return response

    async def record_response_async(self, response: Any) -> Any:
        await self.record_async(response.to_dict(mode="json"))
        return response

    def record_stream(self, chunks: list[Any]) -> None:
        self.record(_stream_json(chunks))

    async def record_stream_async(self, chunks: list[Any]) -> None:
        await self.record_async(_stream_json(chunks))


def _stream_json(chunks: list[Any]) -> dict[str, Any]:
    """A stream's chunks as the journal stores them: every one, compactly (`_model_streams`)."""
    return {"stream": compacted([chunk.to_dict(mode="json") for chunk in chunks])}


def _shape(stream: bool) -> str:
    return "stream" if stream else "response"


def _endpoint(method: object) -> object:
    return response_method(method) if isinstance(method, str) else method


# -- comparing requests ------------------------------------------------------------------------


def first_difference(recorded: Any, current: Any) -> tuple[str, Any, Any] | None:
    """Where a code's request first differs from the recorded one (`kassette._json_diff`),
    the whole request named `(the request)`."""
    found = _first_difference(recorded, current)
    return None if found is None else (found[0] or "(the request)", found[1], found[2])


def _shorten(value: Any, other: Any) -> str:
    """`value` as JSON in at most about `_SHORT` characters; for two strings, the part around
    where they start to differ, so that the difference shows."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str) and isinstance(other, str):
        start = next(
            (i for i, (a, b) in enumerate(zip(value, other, strict=False)) if a != b),
            min(len(value), len(other)),
        )
        start = max(0, start - _SHORT // 3)
        text = value[start : start + _SHORT]
        return json.dumps(
            ("…" if start else "") + text + ("…" if start + _SHORT < len(value) else ""),
            ensure_ascii=False,
        )
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


# -- the wrapped client ----------------------------------------------------------------------


class Passthrough:
    """Attributes a wrapper does not journal come from the wrapped SDK object."""

    def __init__(self, wrapped: Any, recorder: Recorder) -> None:
        self._wrapped = wrapped
        self._recorder = recorder

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._wrapped, attribute)


class Journaled(Passthrough):
    """A resource whose `create` is journaled as `method`; blocking or awaitable like the
    client. `call_sync`/`call_async` are the engine for any other journaled method too."""

    def __init__(self, wrapped: Any, recorder: Recorder, method: str) -> None:
        super().__init__(wrapped, recorder)
        self._method = method

    def create(self, **kwargs: Any) -> Any:
        if self._recorder.asynchronous:
            return self.call_async(self._method, kwargs, self._wrapped.create)
        return self.call_sync(self._method, kwargs, self._wrapped.create)

    def call_sync(self, method: str, kwargs: dict[str, Any], send: Callable[..., Any]) -> Any:
        """`send(**kwargs)` journaled as `method`, or its recorded answer."""
        call = self._recorder.call(method, kwargs)
        if call.step.replayed:
            return call.replayed()
        response = send(**call.kwargs)
        if call.stream:
            live: type = self._recorder.provider.stream_classes[0]
            return live(response, call.record_stream)
        return call.record_response(response)

    async def call_async(
        self, method: str, kwargs: dict[str, Any], send: Callable[..., Awaitable[Any]]
    ) -> Any:
        """`call_sync` for an async client."""
        call = self._recorder.call(method, kwargs)
        if call.step.replayed:
            return call.replayed()
        response = await send(**call.kwargs)
        if call.stream:
            live: type = self._recorder.provider.stream_classes[2]
            return live(response, call.record_stream_async)
        return await call.record_response_async(response)


# -- streams: mixins for the SDK's stream classes, live (relaying and recording) or replayed --


class LiveStream(Generic[Chunk]):
    """Relays the SDK's stream chunk by chunk; journals the chunks when it is exhausted. A
    provider's class puts this first and its SDK's `Stream` second."""

    def __init__(self, stream: Any, finish: Callable[[list[Chunk]], None]) -> None:
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


class _NoResponse:
    """A replayed stream's `response`: there was no HTTP exchange, so closing it does nothing
    (the SDKs' stream helpers close their stream's response when they end)."""

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class ReplayedStream(Generic[Chunk]):
    """The recorded chunks of a stream, as the SDK's stream gave them; no HTTP response."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self._iterator = iter(chunks)
        self.response = _NoResponse()

    def __next__(self) -> Chunk:
        return next(self._iterator)

    def __iter__(self) -> Iterator[Chunk]:
        yield from self._iterator

    def close(self) -> None:
        pass


class AsyncLiveStream(Generic[Chunk]):
    """`LiveStream` for an async client."""

    def __init__(self, stream: Any, finish: Callable[[list[Chunk]], Awaitable[None]]) -> None:
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


class AsyncReplayedStream(Generic[Chunk]):
    """`ReplayedStream` for an async client."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks = iter(chunks)
        self.response = _NoResponse()

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
