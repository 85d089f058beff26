"""A small OpenAI-compatible server on 127.0.0.1 that counts the requests it answers.

It speaks just enough of the API for the real openai SDK: `POST /v1/chat/completions` and
`POST /v1/responses`, each as one JSON response or, with `"stream": true`, as server-sent
events (chat chunks ending in `data: [DONE]`; Responses API events `response.created`,
`response.output_text.delta`..., `response.completed`). The reply to the n-th request is
`reply n: <last input text>` (streamed one word per chunk), so a test can tell a replayed
response (an old n) from a new one, and `requests` counts what reached the server. The model
`sloppy` gets a response without its `created` time, as some OpenAI-compatible providers send.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CREATED = 1767225600  # 2026-01-01T00:00:00Z


class FakeOpenAI:
    """The server, started on a free loopback port in a daemon thread."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self._mutex = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def count(self, path: str, body: dict[str, Any]) -> int:
        with self._mutex:
            self.requests[path] += 1
            self.bodies.append(body)
            return self.total


def _last_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        content = body["messages"][-1]["content"]
    else:
        content = body.get("input", "")
        if isinstance(content, list):
            content = content[-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


def _chat_completion(number: int, text: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": CREATED,
        "model": "fake-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def _chat_chunks(number: int, text: str) -> Iterator[dict[str, Any]]:
    words = text.split(" ")
    for index, word in enumerate(words):
        delta = {"role": "assistant", "content": word} if index == 0 else {"content": " " + word}
        yield {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": "fake-1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
    yield {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "fake-1",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }


def _response(number: int, text: str, status: str = "completed") -> dict[str, Any]:
    message = {
        "type": "message",
        "id": f"msg_{number}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return {
        "id": f"resp_{number}",
        "object": "response",
        "created_at": CREATED,
        "model": "fake-1",
        "status": status,
        "output": [message] if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": None,
        "top_p": None,
    }


def _response_events(number: int, text: str) -> Iterator[dict[str, Any]]:
    sequence = 0
    yield {
        "type": "response.created",
        "sequence_number": sequence,
        "response": _response(number, text, "in_progress"),
    }
    for index, word in enumerate(text.split(" ")):
        sequence += 1
        yield {
            "type": "response.output_text.delta",
            "sequence_number": sequence,
            "item_id": f"msg_{number}",
            "output_index": 0,
            "content_index": 0,
            "delta": word if index == 0 else " " + word,
            "logprobs": [],
        }
    yield {
        "type": "response.completed",
        "sequence_number": sequence + 1,
        "response": _response(number, text),
    }


def _handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no access log on stderr

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.partition("?")[0]  # a query (`extra_query`) names no other route
            if path not in ("/v1/chat/completions", "/v1/responses"):
                self._json(404, {"error": {"message": f"no route {self.path}", "type": "x"}})
                return
            number = server.count(path, body)
            text = f"reply {number}: {_last_text(body)}"
            chat = path == "/v1/chat/completions"
            if not body.get("stream"):
                payload = _chat_completion(number, text) if chat else _response(number, text)
                if body.get("model") == "sloppy":  # a provider whose JSON is not quite OpenAI's
                    del payload["created" if chat else "created_at"]
                self._json(200, payload)
                return
            events = _chat_chunks(number, text) if chat else _response_events(number, text)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for event in events:
                    name = "" if chat else f"event: {event['type']}\n"
                    self.wfile.write(f"{name}data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                if chat:
                    self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client closed the stream before its end

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
