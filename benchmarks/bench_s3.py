"""What an append costs on S3Storage, next to LocalStorage, for runs of 10, 100 and 1,000 steps.

Starts a moto S3 server on 127.0.0.1 (the `dev` extra), records N steps in one session on
each backend and prints, per run: the journal's size, the bytes the backend sent to storage
(PUT bodies for S3, bytes written for local files) and their ratio to the journal, the PUTs
and GETs (an open of the finished run: its requests), and the latency of an append (`record`
of a step whose function returns at once, so the time is the journal's; the last column
averages the final tenth of the run). Two S3 rows per size: `s3 single` is the layout before
chunks (every append rewrites the whole journal, so bytes grow with the square of the run's
length), `s3 chunked` the chunked layout (docs/object-storage-design.md), `s3 chunked, kept`
the same with superseded chunks kept whole, as before they were emptied. `stored/journal` is
the bytes of all the run's objects in the bucket over the journal's. The exit status is 0
when the chunked layout sends at most 4x the journal at 1,000 steps (or the largest size run).

    python benchmarks/bench_s3.py [--steps 10 100 1000] [--result-bytes 200]

moto answers from memory on this machine: the latencies are the client's and server's CPU
(signing, checksums, HTTP), not a network round trip, which a real bucket adds to every append.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout

from _moto import BUCKET, moto_client

from kassette.core import open_run
from kassette.storage import Storage
from kassette.storage._chunks import Policy
from kassette.storage._local import LocalStorage
from kassette.storage._s3 import S3Storage

TARGET = 4.0


@dataclass(frozen=True)
class Measurement:
    backend: str
    steps: int
    journal_bytes: int
    sent_bytes: int
    puts: int
    open_gets: int
    append_ms: list[float]
    stored_bytes: int

    @property
    def ratio(self) -> float:
        return self.sent_bytes / self.journal_bytes

    def row(self) -> list[str]:
        latencies = sorted(self.append_ms)
        p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
        last_tenth = self.append_ms[-max(1, len(self.append_ms) // 10) :]
        return [
            self.backend,
            str(self.steps),
            f"{self.journal_bytes:,}",
            f"{self.sent_bytes:,}",
            f"{self.ratio:.2f}x",
            f"{self.stored_bytes / self.journal_bytes:.2f}x",
            str(self.puts),
            str(self.open_gets),
            f"{statistics.mean(latencies):.2f}",
            f"{statistics.median(latencies):.2f}",
            f"{p95:.2f}",
            f"{statistics.mean(last_tenth):.2f}",
        ]


HEADER = [
    "backend",
    "steps",
    "journal bytes",
    "bytes sent",
    "sent/journal",
    "stored/journal",
    "PUTs",
    "GETs to open",
    "append mean ms",
    "p50 ms",
    "p95 ms",
    "last 10% mean ms",
]


def measure(
    backend: str,
    storage: Storage,
    steps: int,
    result: str,
    sent: Callable[[], int],
    requests: Counter[str],
    stored: Callable[[str], int],
) -> Measurement:
    run_id = f"bench-{steps}-{uuid.uuid4().hex[:8]}"
    before, puts = sent(), requests["PutObject"]
    latencies = []
    with open_run(storage, run_id, metadata={"steps": steps}) as run:
        for number in range(steps):
            started = time.perf_counter()
            run.record(f"step-{number}", lambda: result)
            latencies.append((time.perf_counter() - started) * 1000)
    sent_bytes, puts = sent() - before, requests["PutObject"] - puts
    gets = requests["GetObject"]
    snapshot = storage.read(run_id)  # what opening the run again reads
    assert snapshot is not None
    return Measurement(
        backend,
        steps,
        len(snapshot.data),
        sent_bytes,
        puts,
        requests["GetObject"] - gets,
        latencies,
        stored(run_id),
    )


class _CountingLocal(LocalStorage):
    """LocalStorage that counts the bytes its appends hand to the file system."""

    written = 0

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        type(self).written += len(data)
        return super().append(run_id, data, token=token)


class _Unemptied(S3Storage):
    """S3Storage as it was before superseded chunks were emptied: they stay whole."""

    _empty_superseded = False


class _SingleObject(S3Storage):
    """S3Storage as it was before chunks: the head never stops being the whole journal."""

    _policy = Policy(short_lines=sys.maxsize, short_bytes=sys.maxsize)


def _measure_all(client: Any, args: argparse.Namespace) -> list[Any]:
    """Every row of the table, on the moto server behind `client`."""
    uploaded = [0]
    requests: Counter[str] = Counter()

    def count_upload(request: Any, **_: Any) -> None:
        uploaded[0] += int(request.headers.get("Content-Length", 0))

    def count_request(model: Any, **_: Any) -> None:
        requests[model.name] += 1

    client.meta.events.register("before-send.s3.PutObject", count_upload)
    client.meta.events.register("before-call.s3", count_request)
    single = _SingleObject(BUCKET, "single", client=client)
    unemptied = _Unemptied(BUCKET, "unemptied", client=client)
    chunked = S3Storage(BUCKET, "chunked", client=client)

    def in_bucket(storage: S3Storage) -> Callable[[str], int]:
        def stored(run_id: str) -> int:  # the bytes of every object of the run
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix=f"{storage.prefix}/{run_id}/"
            )
            return sum(item["Size"] for page in pages for item in page.get("Contents", []))

        return stored

    result = "x" * args.result_bytes
    local_requests: Counter[str] = Counter()

    rows = []
    with tempfile.TemporaryDirectory() as directory:
        local = _CountingLocal(Path(directory) / "journals")
        on_disk = lambda run_id: (local.path / f"{run_id}.jsonl").stat().st_size  # noqa: E731
        for steps in args.steps:
            written = lambda: _CountingLocal.written  # noqa: E731
            rows.append(measure("local", local, steps, result, written, local_requests, on_disk))
            sent = lambda: uploaded[0]  # noqa: E731
            for name, storage in [
                ("s3 single", single),
                ("s3 chunked, kept", unemptied),
                ("s3 chunked", chunked),
            ]:
                rows.append(
                    measure(name, storage, steps, result, sent, requests, in_bucket(storage))
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--result-bytes", type=int, default=200, help="size of each step result")
    args = parser.parse_args(argv)

    with moto_client(max_pool_connections=16) as client:
        rows = _measure_all(client, args)

    table = [HEADER, *(m.row() for m in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    print(
        f"# {args.result_bytes}-byte step results; python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus"
    )
    print("| " + " | ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in table[1:]:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) + " |")
    largest = max(args.steps)
    ratio = next(m.ratio for m in rows if m.backend == "s3 chunked" and m.steps == largest)
    met = ratio <= TARGET
    print(
        f"chunked layout at {largest} steps: {ratio:.2f}x the journal uploaded "
        f"(target <= {TARGET:.0f}x): {'met' if met else 'NOT met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
