"""A fake model server: a real HTTP server on 127.0.0.1 speaking OpenAI's and Anthropic's APIs.

It answers `POST /v1/chat/completions` and `POST /v1/responses` as OpenAI does and `POST
/v1/messages` as Anthropic does, as one JSON body or, with `"stream": true`, as server-sent
events, well enough for the real `openai` and `anthropic` SDKs. What it answers is
`_model_answers`'s business and how each provider spells it `_model_wire`'s; this module is
the HTTP server and what it remembers: the requests it received, the failures it was asked
for, the prompt prefixes it has seen (cached tokens).

Standard library only, and not imported by `kassette`: `kassette.testing.fake_model_server`
imports it on call.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from kassette.testing._model_answers import Prompt, answer, count_tokens
from kassette.testing._model_wire import ROUTES, Event, Reply, error_body, invalid_reason

__all__ = ["FakeModelServer"]

_CACHE_MINIMUM = 1024  # tokens: OpenAI caches a repeated prompt prefix from this length
_CACHE_BLOCK = 128  # and counts cached tokens in blocks of this size
_CHUNK_LATENCY_RATIO = 20  # a stream chunk takes latency / 20, as tokens follow the first byte


class FakeModelServer:
    """The server, listening from construction until `close()` (or the end of a `with` block).

    `url` is its root (`http://127.0.0.1:PORT`); give the OpenAI SDK `openai_base_url` and the
    Anthropic SDK `anthropic_base_url`, with any API key. `requests` lists every `(path, body)`
    that reached it, failed ones included, in arrival order; `fail_next(n, status=529)` makes
    the next `n` requests fail with that provider's error JSON. `latency` is the seconds before
    each response (a stream's first event), and a twentieth of it between a stream's events.
    `seed` changes what non-zero temperatures sample, never the answer at temperature 0.
    """

    def __init__(self, *, port: int = 0, seed: int = 0, latency: float = 0.0) -> None:
        if latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {latency!r}")
        self.seed = seed
        self.latency = latency
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._failures: list[int] = []
        self._prefixes: set[str] = set()
        self._last_created = 0
        self._mutex = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-model-server", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url  # the Anthropic SDK adds /v1 itself

    @property
    def request_count(self) -> int:
        with self._mutex:
            return len(self.requests)

    def fail_next(self, n: int = 1, *, status: int = 529) -> None:
        """Answer the next `n` requests with `status` (529, 429, 500, ...) and the error JSON."""
        with self._mutex:
            self._failures.extend([status] * n)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeModelServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FakeModelServer(url={self.url!r}, seed={self.seed}, latency={self.latency})"

    def _arrive(self, path: str, body: dict[str, Any]) -> int | None:
        """Count a request; the error status it gets, if `fail_next` asked for one."""
        with self._mutex:
            self.requests.append((path, body))
            return self._failures.pop(0) if self._failures else None

    def _created(self) -> int:
        """A creation time in seconds that differs for every response, as ids do."""
        with self._mutex:
            self._last_created = max(int(time.time()), self._last_created + 1)
            return self._last_created

    def _cached_tokens(self, prompt: Prompt) -> int:
        """Tokens of the prompt's prefix (all but the last turn) already seen, if long enough."""
        prefix = Prompt(prompt.model, prompt.system, prompt.turns[:-1], prompt.tools)
        tokens = count_tokens(prefix.key())
        if tokens < _CACHE_MINIMUM:
            return 0
        with self._mutex:
            seen = prefix.key() in self._prefixes
            self._prefixes.add(prefix.key())
        return tokens // _CACHE_BLOCK * _CACHE_BLOCK if seen else 0


def _handler(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no access log on stderr

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            route = ROUTES.get(path)
            provider = route[0] if route else "anthropic" if "messages" in path else "openai"
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, error_body(provider, 400, "The body is not valid JSON."))
                return
            status = server._arrive(path, body)
            if route is None:
                self._json(404, error_body(provider, 404, f"No route for POST {path}."))
                return
            problem = invalid_reason(provider, body)
            if status is not None or problem:
                self._json(status or 400, error_body(provider, status or 400, problem))
                return
            _provider, read, respond, stream, done_line = route
            # OpenAI caches a long prompt's prefix by itself, Anthropic where it is marked
            caching = provider == "openai" or "cache_control" in json.dumps(body)
            prompt = read(body)
            cached = server._cached_tokens(prompt) if caching else 0
            reply = Reply(
                answer(prompt, seed=server.seed), created=server._created(), cached=cached
            )
            time.sleep(server.latency)
            if not body.get("stream"):
                self._json(200, respond(reply, body))
                return
            self._stream(stream(reply, body), done_line)

        def _stream(self, events: Iterator[Event], done_line: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self._ids()
            self.end_headers()
            self.close_connection = True
            try:
                for index, (name, data) in enumerate(events):
                    if index:
                        time.sleep(server.latency / _CHUNK_LATENCY_RATIO)
                    line = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{line}data: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                if done_line:
                    self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client closed the stream before its end

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status in (429, 500, 503, 529):
                self.send_header("retry-after-ms", "10")  # the SDKs' retries stay quick
            self._ids()
            self.end_headers()
            self.wfile.write(data)

        def _ids(self) -> None:
            request_id = f"req_{uuid.uuid4().hex[:24]}"
            self.send_header("request-id", request_id)  # Anthropic's header
            self.send_header("x-request-id", request_id)  # OpenAI's

    return Handler
