"""`kx.send_otlp` against hostile and busy endpoints (issues 31 section 5, 32 items 14-16).

Every endpoint is a server on 127.0.0.1 started by the test: an HTTP one answering each POST
from a script (busy answers with and without `Retry-After`, a redirect), and a raw socket one
for what HTTP servers never send (a malformed status line, an answer cut short, an answer
trickled a byte at a time).
"""

from __future__ import annotations

import contextlib
import email.utils
import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from kassette import InvalidArgumentError, MemoryStorage, StorageError
from kassette import explore as kx
from kassette.explore import _otlp_send


def line(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, separators=(",", ":")) + "\n").encode()


def simple_run(index: int) -> bytes:
    began = f"2026-01-0{1 + index % 9}T00:00:{index % 60:02d}.000Z"
    step = {"stepId": "a", "name": "a", "result": index}
    entries = [
        {"type": "start", "session": 1, "offset": 0, "timestamp": began, "metadata": index},
        {"type": "step", "session": 1, "offset": 1, "timestamp": began} | step,
        {"type": "complete", "session": 1, "offset": 2, "timestamp": began, "result": index},
    ]
    return b"".join(line(entry) for entry in entries)


@pytest.fixture(scope="module")
def journals() -> Any:
    storage = MemoryStorage()
    for index in range(10):
        storage.append(f"run-{index}", simple_run(index), token=None)
    return kx.load(storage)


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers the n-th POST with `script[n]` (status, headers), the last entry repeated;
    keeps every request (method, path, body)."""

    script: ClassVar[list[tuple[int, dict[str, str]]]] = []
    seen: ClassVar[list[tuple[str, str, bytes]]] = []

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append((method, self.path, self.rfile.read(length)))
        posts = sum(1 for kind, _, _ in self.seen if kind == "POST")
        status, headers = (
            self.script[min(posts, len(self.script)) - 1] if method == "POST" else (200, {})
        )
        body = b"<html>log in</html>" if method == "GET" else b"busy" if status >= 400 else b""
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self._answer("POST")

    def do_GET(self) -> None:
        self._answer("GET")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[
    Callable[[list[tuple[int, dict[str, str]]]], tuple[str, type[Scripted]]]
]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(script: list[tuple[int, dict[str, str]]]) -> tuple[str, type[Scripted]]:
        handler = type("Handler", (Scripted,), {"script": script, "seen": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1/traces", handler

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoffs send_otlp sleeps, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(_otlp_send, "_sleep", slept.append)
    return slept


def runs_of(body: bytes) -> list[str]:
    request = ExportTraceServiceRequest.FromString(body)
    found = []
    for span in request.resource_spans[0].scope_spans[0].spans:
        if not span.parent_span_id:
            (run_id,) = [
                kv.value.string_value for kv in span.attributes if kv.key == "kassette.run_id"
            ]
            found.append(run_id)
    return found


def test_busy_answers_are_retried_after_retry_after_or_a_backoff(
    journals: Any, scripted: Any, waits: list[float]
) -> None:
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    url, handler = scripted(
        [(429, {"Retry-After": "3"}), (503, {}), (503, {"Retry-After": later}), (200, {})]
    )
    sent = kx.send_otlp(journals, url, progress=False, runs_per_request=10)
    assert sent["requests"] == 1 and sent["runs"] == 10
    posts = [body for method, _, body in handler.seen if method == "POST"]
    assert len(posts) == 4 and len(set(posts)) == 1  # the same batch, sent again
    assert waits[:2] == [3.0, 1.0]  # Retry-After's seconds; then 2 x 0.5 s (the second retry)
    assert 60 < waits[2] <= 120  # an HTTP date: until then


def test_giving_up_names_the_batch_and_a_resumed_send_does_not_start_over(
    journals: Any, scripted: Any, waits: list[float]
) -> None:
    url, handler = scripted([(200, {}), (503, {})])  # the second batch: 503 for ever
    with pytest.raises(StorageError) as raised:
        kx.send_otlp(journals, url, progress=False, runs_per_request=4, retries=2)
    third = journals.run_ids[4]
    message = str(raised.value)
    assert f"batch 2 (runs {third} .. {journals.run_ids[7]}, 4 runs) after 3 attempts" in message
    assert "HTTP 503" in message
    assert f"resume_from={third!r}" in message
    assert len(waits) == 2
    first = [runs_of(body) for method, _, body in handler.seen if method == "POST"]
    assert first[0] == journals.run_ids[:4]
    url, handler = scripted([(200, {})])
    sent = kx.send_otlp(journals, url, progress=False, runs_per_request=4, resume_from=third)
    again = [runs_of(body) for method, _, body in handler.seen if method == "POST"]
    assert again == [journals.run_ids[4:8], journals.run_ids[8:]]  # not the first batch again
    assert sent["runs"] == 6
    with pytest.raises(InvalidArgumentError, match="resume_from"):
        kx.send_otlp(journals, url, progress=False, resume_from="no-such-run")


def test_a_redirect_on_a_post_is_an_error_naming_the_batch(journals: Any, scripted: Any) -> None:
    url, handler = scripted([(302, {"Location": "/login"})])
    with pytest.raises(StorageError) as raised:
        kx.send_otlp(journals, url, progress=False, runs_per_request=4)
    message = str(raised.value)
    ids = journals.run_ids
    assert f"batch 1 (runs {ids[0]} .. {ids[3]}, 4 runs)" in message
    assert "HTTP 302 Found (a redirect to /login: a POST is not followed)" in message
    assert [method for method, _, _ in handler.seen] == ["POST"]  # the login page never asked


class RawServer:
    """A TCP server on 127.0.0.1 that reads a request and answers with `answer(connection)`."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.answer = answer
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/traces"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection, contextlib.suppress(OSError):  # OSError: the client hung up
                _read_request(connection)
                self.answer(connection)

    def close(self) -> None:
        self.listener.close()


def _read_request(connection: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(h.split(b":")[1])
        for h in head.split(b"\r\n")
        if h.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += connection.recv(65536)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 two hundred\r\n\r\n",  # a malformed status line
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial',  # a 200 cut short
        b"HTTP/1.1 500 Oops\r\nContent-Length: 100\r\n\r\nstack",  # a 500 cut short
        b"garbage\r\n",
    ],
    ids=["bad-status-line", "200-cut-short", "500-cut-short", "no-http"],
)
def test_a_broken_answer_is_a_kassette_error_naming_the_batch(journals: Any, answer: bytes) -> None:
    server = RawServer(lambda connection: connection.sendall(answer))
    try:
        with pytest.raises(StorageError) as raised:
            kx.send_otlp(journals, server.url, progress=False, runs_per_request=4, timeout=30)
    finally:
        server.close()
    assert type(raised.value) is StorageError
    ids = journals.run_ids
    assert f"batch 1 (runs {ids[0]} .. {ids[3]}, 4 runs)" in str(raised.value)
    assert f"resume_from={ids[0]!r}" in str(raised.value)


def test_the_timeout_is_a_deadline_for_each_batch_against_a_trickle(journals: Any) -> None:
    # a byte every 0.1 s: no single read waits as long as the timeout, and after 20 s the
    # answer is a complete 200; a deadline stops it long before
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + b"x" * 200
    stop = threading.Event()

    def trickle(connection: socket.socket) -> None:
        for byte in answer:
            if stop.wait(0.1):
                return
            connection.sendall(bytes([byte]))

    server = RawServer(trickle)
    try:
        with pytest.raises(StorageError) as raised:
            kx.send_otlp(journals, server.url, progress=False, runs_per_request=4, timeout=1)
    finally:
        stop.set()
        server.close()
    ids = journals.run_ids
    assert f"batch 1 (runs {ids[0]} .. {ids[3]}, 4 runs)" in str(raised.value)
    assert "within the timeout of 1 s" in str(raised.value)
