"""A loopback HTTP proxy between boto3 and an S3 server that injects faults when told to.

Point a boto3 client's `endpoint_url` at `FaultProxy.url`; every request is forwarded to the
upstream server as it came, until a `Fault` matches. A fault fires on the `nth` request whose
method and path match, for `times` requests in a row, and then:

- `drop`: forwards the request (the server commits it), then closes the connection without
  answering, so the client cannot know whether its write landed;
- `error`: answers `status` with an S3 error document for `code` without forwarding;
- `delay`: holds the request back for `seconds`, or (`until_overtaken`) until a later request
  with the same method and path has been answered, then forwards it: a client that timed out
  meanwhile and retried is followed by its own late request.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from xml.sax.saxutils import escape

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "expect"}


@dataclass
class Fault:
    action: Literal["drop", "error", "delay"]
    method: str = "PUT"
    path_contains: str = ""
    nth: int = 1
    times: int = 1
    status: int = 503
    code: str = "ServiceUnavailable"
    message: str = "Please reduce your request rate."
    seconds: float = 0.0
    until_overtaken: bool = False
    matched: int = 0
    fired: int = 0
    finished: threading.Event = field(default_factory=threading.Event)
    """Set when the last firing is done (for `delay` and `drop`: after forwarding)."""
    overtaken: threading.Event = field(default_factory=threading.Event)
    held: tuple[str, str] | None = None

    def _take(self, method: str, path: str) -> bool:
        if method != self.method or self.path_contains not in path:
            return False
        self.matched += 1
        if self.nth <= self.matched < self.nth + self.times:
            self.fired += 1
            return True
        return False


@dataclass
class Exchange:
    """One request, logged before its answer is sent, so the log is complete once the client
    has its answer."""

    method: str
    path: str
    status: int  # the answer: the server's, or the injected error's
    fault: str | None
    delivered: bool = True  # False: the answer did not reach the client


class FaultProxy:
    """Forwards to `upstream` (host, port); `inject` arms faults, `exchanges` logs traffic."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.exchanges: list[Exchange] = []
        self._faults: list[Fault] = []
        self._mutex = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def inject(self, fault: Fault) -> Fault:
        with self._mutex:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._mutex:
            self._faults.clear()
            self.exchanges.clear()

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self._mutex:
            for fault in self._faults:
                if fault._take(method, path):
                    return fault
        return None

    def _log(self, exchange: Exchange) -> None:
        with self._mutex:
            self.exchanges.append(exchange)
            for fault in self._faults:
                if fault.held == (exchange.method, exchange.path) and exchange.fault is None:
                    fault.overtaken.set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _proxy(self) -> None:
        proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
        body = self._read_body()
        fault = proxy._fault_for(self.command, self.path)
        name = fault.action if fault else None
        try:
            if fault is not None and fault.action == "error":
                proxy._log(Exchange(self.command, self.path, fault.status, name))
                self._send_error(fault)
                return
            if fault is not None and fault.action == "delay":
                if fault.until_overtaken:
                    fault.held = (self.command, self.path)
                    fault.overtaken.wait(fault.seconds)
                else:
                    time.sleep(fault.seconds)
            status, headers, payload = self._forward(proxy.upstream, body)
            exchange = Exchange(self.command, self.path, status, name)
            proxy._log(exchange)
            if fault is not None and fault.action == "drop":
                exchange.delivered = False
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            try:
                self._send(status, headers, payload)
            except OSError:  # the client gave up (a `delay` past its timeout)
                exchange.delivered = False
                self.close_connection = True
        finally:
            if fault is not None and fault.fired == fault.times:
                fault.finished.set()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                chunk = self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    while self.rfile.readline().strip():  # trailers
                        pass
                    return b"".join(chunks)
                chunks.append(chunk)
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _forward(
        self, upstream: tuple[str, int], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        connection = http.client.HTTPConnection(*upstream, timeout=60)
        try:
            connection.request(self.command, self.path, body=body or None, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            return response.status, response.getheaders(), payload
        finally:
            connection.close()

    def _send(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response_only(status)
        length = None
        for key, value in headers:
            if key.lower() == "content-length":
                length = value
            elif key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", length or "0")
        else:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _send_error(self, fault: Fault) -> None:
        payload = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{escape(fault.code)}</Code><Message>{escape(fault.message)}</Message>"
            "<RequestId>fault-proxy</RequestId></Error>"
        ).encode()
        self.send_response_only(fault.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
