"""`send_otlp`: a store's traces posted to an OTLP/HTTP endpoint, batch by batch.

Each batch is the same bounded batch of runs `traces.jsonl` holds per line, posted as binary
protobuf. What the endpoint answers is read whole, within a deadline per batch. A batch the
endpoint is too busy for (HTTP 429, 502, 503, 504) is sent again after a backoff that honours
`Retry-After`; anything else that is not a 2xx (a redirect included: a POST is never followed,
since it would arrive as a bodiless GET) stops the send with a `StorageError` naming the batch
and the `resume_from=` that continues from it.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from kassette._otlp_spans import SCOPE, version
from kassette.errors import InvalidArgumentError, StorageError
from kassette.explore._bar import Progress
from kassette.explore._otlp import RUNS_PER_REQUEST, batches, resource_attributes, run_spans
from kassette.explore._otlp_proto import request_bytes, span_field

__all__ = ["send_otlp"]

RETRYABLE = frozenset({429, 502, 503, 504})  # OTLP/HTTP's "retry later" answers
_BACKOFF = 0.5  # seconds before the first retry without Retry-After; doubled each time
_BACKOFF_CAP = 30.0
_RETRY_AFTER_CAP = 300.0  # an endpoint asking for longer is waited for this long, then asked again
_sleep: Callable[[float], None] = time.sleep  # the tests' to watch


def send_otlp(
    journals: Any,
    endpoint: str,
    *,
    headers: Mapping[str, str] | None = None,
    include_content: bool = False,
    progress: bool | None = None,
    timeout: float = 30.0,
    runs_per_request: int = RUNS_PER_REQUEST,
    retries: int = 5,
    resume_from: str | None = None,
) -> dict[str, Any]:
    """Post the runs of `journals` (a `kx.Journals`) to an OTLP/HTTP traces endpoint (such as
    `http://127.0.0.1:6006/v1/traces`), as binary protobuf, in batches of `runs_per_request`
    runs (and about 4 MB at most).

    `headers` are added to each request (an API key). `progress` draws `send_otlp [###...]
    300/1000 runs` on stderr (None: when stderr is a terminal). `timeout` is a deadline for each
    batch, in seconds: connecting, sending and reading the whole answer. A batch answered with
    HTTP 429, 502, 503 or 504 is sent again, at most `retries` times, after the answer's
    `Retry-After` or a backoff doubling from 0.5 s. Any other failure raises `StorageError`
    naming the batch (its number, its first and last run ids), what the endpoint said, and
    `resume_from=FIRST_RUN_ID`: the batches before it were sent, and passing that continues
    with it (the runs before `resume_from`, in the order of `journals`, are not sent again).
    Returns the numbers of runs, spans and requests sent.
    """
    target = urllib.parse.urlsplit(endpoint)
    if target.scheme not in ("http", "https") or not target.hostname:
        raise InvalidArgumentError(f"endpoint must be an http:// or https:// URL, not {endpoint!r}")
    for name, value, least in (("runs_per_request", runs_per_request, 1), ("retries", retries, 0)):
        if type(value) is not int or value < least:
            raise InvalidArgumentError(f"{name} must be an int >= {least}, not {value!r}")
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
        raise InvalidArgumentError(f"timeout must be a number of seconds > 0, not {timeout!r}")
    entries, runs = journals.to_arrow("entries"), journals.to_arrow("runs")
    runs = _from(runs, resume_from)
    show = sys.stderr.isatty() if progress is None else progress
    bar = Progress(runs.num_rows, sys.stderr if show else None, label="send_otlp")
    sent = {"runs": 0, "spans": 0, "requests": 0}
    post = _Poster(target, {**(headers or {}), "Content-Type": "application/x-protobuf"}, timeout)
    done: set[str] = set()
    try:
        batches = _requests(entries, runs, include_content, runs_per_request)
        for number, (ids, spans, body) in enumerate(batches, start=1):
            batch = f"batch {number} (runs {ids[0]} .. {ids[-1]}, {len(ids)} runs)"
            post.send(body, batch, retries, resume=ids[0])
            fresh = [run_id for run_id in ids if run_id not in done]
            done.update(fresh)
            sent["runs"] += len(fresh)
            sent["spans"] += spans
            sent["requests"] += 1
            bar.advance(len(fresh))
    finally:
        bar.close()
    return sent


def _from(runs: pa.Table, resume_from: str | None) -> pa.Table:
    """The runs from `resume_from` on (all of them for None)."""
    if resume_from is None:
        return runs
    ids = runs.column("run_id").to_pylist()
    if resume_from not in ids:
        raise InvalidArgumentError(f"resume_from={resume_from!r} is not a run of these journals")
    return runs.slice(ids.index(resume_from))


def _requests(
    entries: pa.Table, runs: pa.Table, include_content: bool, runs_per_request: int
) -> Iterator[tuple[list[str], int, bytes]]:
    """The protobuf requests, `runs_per_request` runs (a few thousand entries) decoded at a
    time."""
    scope = (SCOPE, version())
    resource = resource_attributes()

    def encode(spans: list[dict[str, Any]]) -> bytes:
        return b"".join(map(span_field, spans))

    def request(chunks: list[bytes]) -> bytes:
        return request_bytes(resource, scope, chunks)

    def spans() -> Iterator[tuple[str, list[dict[str, Any]]]]:
        for start in range(0, runs.num_rows, runs_per_request):
            yield from run_spans(entries, runs.slice(start, runs_per_request), include_content)

    return batches(spans(), encode, request, runs_per_request)


class _Poster:
    """POSTs to one endpoint, each within a deadline, with retries of the busy answers."""

    def __init__(self, target: urllib.parse.SplitResult, headers: dict[str, str], timeout: float):
        self.target = target
        self.headers = headers
        self.timeout = timeout

    def send(self, body: bytes, batch: str, retries: int, *, resume: str) -> None:
        endpoint = urllib.parse.urlunsplit(self.target)
        resume_hint = (
            f"; the batches before it were sent: send_otlp(..., resume_from={resume!r})"
            " continues from it"
        )
        for attempt in range(retries + 1):
            try:
                status, reason, answer, wait, location = self._post(body)
            except (OSError, http.client.HTTPException) as exc:
                raise StorageError(
                    f"could not send {batch} to {endpoint}: {_said(exc)}{resume_hint}"
                ) from exc
            if 200 <= status < 300:
                return
            if status in RETRYABLE and attempt < retries:
                _sleep(wait if wait is not None else min(_BACKOFF * 2**attempt, _BACKOFF_CAP))
                continue
            said = answer[:500].decode("utf-8", "replace").strip()
            said = f"HTTP {status} {reason}" + (f": {said}" if said else "")
            if 300 <= status < 400:
                said += f" (a redirect to {location}: a POST is not followed)"
            tries = f" after {attempt + 1} attempts" if attempt else ""
            raise StorageError(f"{endpoint} refused {batch}{tries}: {said}{resume_hint}")

    def _post(self, body: bytes) -> tuple[int, str, bytes, float | None, str | None]:
        """Status, reason, body, Retry-After (seconds) and Location of one POST, all within the
        deadline: a watchdog shuts the socket when it passes, whatever the server trickles."""
        target = self.target
        kind = (
            http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(target.hostname or "", target.port, timeout=self.timeout)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            if connection.sock is not None:
                with contextlib.suppress(OSError):  # already closed: nothing left to stop
                    connection.sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self.timeout, expire)
        watchdog.daemon = True
        watchdog.start()
        path = target.path or "/"
        if target.query:
            path += f"?{target.query}"
        try:
            connection.request("POST", path, body=body, headers=self.headers)
            response = connection.getresponse()
            answer = response.read()
            if expired.is_set():  # the socket was shut under a read that took what came
                raise TimeoutError(f"no whole answer within the timeout of {self.timeout} s")
            wait = _retry_after(response.getheader("Retry-After"))
            location = response.getheader("Location")
            return response.status, response.reason, answer, wait, location
        except (OSError, http.client.HTTPException) as exc:
            if expired.is_set():
                raise TimeoutError(
                    f"no whole answer within the timeout of {self.timeout} s"
                ) from exc
            raise
        finally:
            watchdog.cancel()
            connection.close()


def _retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds: a number of seconds or an HTTP date (None if absent or
    unreadable), at most `_RETRY_AFTER_CAP`."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, min(seconds, _RETRY_AFTER_CAP)) if seconds == seconds else None


def _said(exc: BaseException) -> str:
    """An error as a line: its type (BadStatusLine, IncompleteRead) and what it says."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
