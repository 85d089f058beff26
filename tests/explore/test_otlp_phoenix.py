"""Journals exported to a real Arize Phoenix server (issue 22 section 3).

Phoenix (the `arize-phoenix` package) pins its own dependencies, so it lives in a venv of its
own: `.venv-phoenix/` at the repository root (`.ci/run` creates it), or the interpreter named
by `$KASSETTE_PHOENIX_PYTHON`. The fixture starts `phoenix.server.main serve` on free
127.0.0.1 ports with its SQLite in a temporary directory and telemetry off, waits (bounded) for
`/healthz`, then the test posts the runs with `kx.send_otlp` and reads the spans back through
Phoenix's REST API (`/v1/projects/default/spans`). Every port Phoenix opens is bound to
127.0.0.1: its HTTP port by PHOENIX_HOST, its gRPC port (which Phoenix binds to `[::]`
whatever it is told) by starting it through `LOCAL_ONLY`, which rewrites the address grpc's
server is given; a test reads the sockets the process group listens on from /proc and checks
them. Without Phoenix the module is skipped,
except under CI=true, where a missing one fails unless `.ci/run` said it could not install
it (KASSETTE_NO_PHOENIX).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kassette import MemoryStorage
from kassette import explore as kx
from kassette.testing import fake_model_server

sys.path.insert(0, str(Path(__file__).parent))
from otel_support import RUNS, populate

ROOT = Path(__file__).resolve().parents[2]
PHOENIX_PYTHON = Path(
    os.environ.get("KASSETTE_PHOENIX_PYTHON") or ROOT / ".venv-phoenix" / "bin" / "python"
)
NO_PHOENIX = (
    f"no Arize Phoenix at {PHOENIX_PYTHON} (.ci/run makes .venv-phoenix with "
    "`pip install arize-phoenix`; or set KASSETTE_PHOENIX_PYTHON)"
)
REQUIRED = os.environ.get("CI") == "true" and not os.environ.get("KASSETTE_NO_PHOENIX")
START_TIMEOUT = 180.0  # s: Phoenix migrates its SQLite and starts in 20-30 s on a busy machine
INGEST_TIMEOUT = 60.0  # s: Phoenix writes received spans in batches


# Phoenix's gRPC server binds "[::]:PORT" (phoenix/server/grpc_server.py) with no setting to
# change it: the process is started with grpc's add_*_port wrapped to bind 127.0.0.1 instead
LOCAL_ONLY = """
import runpy, sys
from grpc.aio import _server

def local(add):
    def bind(self, address, *args):
        return add(self, "127.0.0.1:" + address.rsplit(":", 1)[1], *args)
    return bind

_server.Server.add_insecure_port = local(_server.Server.add_insecure_port)
_server.Server.add_secure_port = local(_server.Server.add_secure_port)
sys.argv = ["phoenix", "serve"]
runpy.run_module("phoenix.server.main", run_name="__main__", alter_sys=True)
"""


@dataclass
class Phoenix:
    url: str
    pid: int
    ports: tuple[int, int]  # HTTP, gRPC


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    if not PHOENIX_PYTHON.exists():
        if REQUIRED:
            pytest.fail(f"{NO_PHOENIX}: CI=true, and .ci/run did not report failing to install it")
        pytest.skip(NO_PHOENIX)
    work = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    url = f"http://127.0.0.1:{port}"
    with (work / "phoenix.log").open("wb") as log:
        process = subprocess.Popen(
            [str(PHOENIX_PYTHON), "-c", LOCAL_ONLY],
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"Phoenix exited: {(work / 'phoenix.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Phoenix not up in {START_TIMEOUT} s: {work / 'phoenix.log'}")
            time.sleep(0.5)
        yield Phoenix(url, process.pid, (port, grpc_port))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


def group_sockets(group: int) -> list[tuple[str, str, int]]:
    """(protocol, address, port) of every TCP socket listening and every UDP socket bound by
    the processes of `group` (a process group id), read from /proc."""
    inodes: set[str] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != group:  # the process group (after state and ppid)
                continue
            for fd in (stat.parent / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:  # a process that ended meanwhile
            continue
    found = []
    for protocol in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/{group}/net/{protocol}").read_text().splitlines()[1:]:
            fields = line.split()
            (host, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            listening = state == "0A" if protocol.startswith("tcp") else int(port, 16) != 0
            if inode in inodes and listening:
                found.append((protocol, address(host), int(port, 16)))
    return found


def address(hexed: str) -> str:
    """/proc/net's address: 32-bit words of the address, each in host (little-endian) order;
    an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) as the IPv4 one it is."""
    raw = b"".join(bytes.fromhex(hexed[at : at + 8])[::-1] for at in range(0, len(hexed), 8))
    if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4 address on IPv6
        raw = raw[12:]
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw)


def test_every_port_phoenix_opens_is_bound_to_127_0_0_1(phoenix: Phoenix) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not set(phoenix.ports) <= {port for _, _, port in group_sockets(phoenix.pid)}:
        assert time.monotonic() < deadline, group_sockets(phoenix.pid)  # gRPC starts later
        time.sleep(0.5)
    found = group_sockets(phoenix.pid)
    assert set(phoenix.ports) <= {port for _, _, port in found}  # HTTP and gRPC both open
    assert {host for _, host, _ in found} == {"127.0.0.1"}, found


def phoenix_spans(url: str) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):  # pages
        query = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
        with urllib.request.urlopen(f"{url}/v1/projects/default/spans?{query}", timeout=30) as r:
            page = json.loads(r.read())
        spans.extend(page["data"])
        cursor = page.get("next_cursor")
        if not cursor:
            return spans
    raise AssertionError("more than 100 pages of spans")


def settled(url: str, wanted: int) -> list[dict[str, Any]]:
    """Phoenix's spans once it holds at least `wanted` (it inserts in batches)."""
    deadline = time.monotonic() + INGEST_TIMEOUT
    while True:
        spans = phoenix_spans(url)
        if len(spans) >= wanted or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def test_phoenix_holds_every_run_as_its_trace(phoenix: Phoenix) -> None:
    url = phoenix.url
    storage = MemoryStorage()
    with fake_model_server(seed=7) as server:
        populate(storage, server)
    journals = kx.load(storage)
    expected = kx.to_otlp(journals)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    sent = kx.send_otlp(journals, f"{url}/v1/traces", progress=False)
    assert sent == {"runs": len(RUNS), "spans": len(expected), "requests": 1}
    spans = settled(url, len(expected))

    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        by_run[span["attributes"]["kassette.run_id"]].append(span)
    assert sorted(by_run) == sorted(RUNS)
    entries = journals.entries
    own = entries[~entries["copied"]]
    calls = journals.llm_calls
    calls = calls[~calls["copied"]]
    for run in journals.runs.itertuples():
        got = by_run[run.run_id]
        rows = own[own["run_id"] == run.run_id]
        # span counts: the run, its sessions, its own steps and suspends
        spanned = rows["type"].isin(["step", "suspend"]).sum()
        assert len(got) == 1 + rows["session"].nunique() + spanned, run.run_id
        assert len({span["context"]["trace_id"] for span in got}) == 1
        # parent/child: one root; sessions under it; entries under a session or a block
        ids = {span["context"]["span_id"]: span for span in got}
        (root,) = [span for span in got if span["parent_id"] is None]
        assert root["name"] == f"run {run.run_id}"
        for span in got:
            if span is root:
                continue
            parent = ids[span["parent_id"]]
            a, p = span["attributes"], parent["attributes"]
            if "kassette.offset" not in a:
                assert parent is root
            elif a["kassette.step_id"].startswith("gather/"):
                assert p["kassette.step_id"] == "gather"
            else:
                assert parent["name"] == f"session {a['kassette.session']}"
        assert root["status_code"] == {"completed": "OK", "failed": "ERROR"}[run.status]
        # token counts and model names, as the llm_calls frame reads the journal
        llm = {span["attributes"]["kassette.offset"]: span for span in got
               if span["span_kind"] == "LLM"}  # fmt: skip
        mine = calls[calls["run_id"] == run.run_id]
        assert sorted(llm) == sorted(mine["offset"])
        for call in mine.itertuples():
            a = llm[call.offset]["attributes"]
            assert a["llm.token_count.prompt"] == call.input_tokens
            assert a["llm.token_count.completion"] == call.output_tokens
            assert a["gen_ai.usage.input_tokens"] == call.input_tokens
            assert a["llm.model_name"] == a["gen_ai.response.model"] == call.model
        # the fork links: the source and its span before the fork point, both in Phoenix
        if isinstance(run.parent_run_id, str):  # pd.NA for a run that is no fork
            a = root["attributes"]
            assert a["kassette.fork.source_run_id"] == run.parent_run_id
            assert a["kassette.fork.offset"] == run.fork_offset
            point = [s for s in by_run[run.parent_run_id]
                     if s["attributes"].get("kassette.offset") == run.fork_offset - 1]  # fmt: skip
            assert [s["attributes"]["kassette.step_id"] for s in point] == ["plan"]
            linked = next(s for s in expected if s["spanId"] == root["context"]["span_id"])
            assert {link["spanId"] for link in linked["links"]} == {
                point[0]["context"]["span_id"],
                next(s for s in by_run[run.parent_run_id] if s["parent_id"] is None)["context"][
                    "span_id"
                ],
            }
    (failed,) = [s for s in by_run["failed"] if s["parent_id"] is None]
    assert failed["status_message"] == "the plan cannot be done"
    assert [event["name"] for event in failed["events"]] == ["exception"]

    # a second export adds no spans: send everything again, then a run that was not there,
    # and once that one is in, count
    kx.send_otlp(journals, f"{url}/v1/traces", progress=False)
    later = MemoryStorage()
    with fake_model_server(seed=8) as server:
        populate(later, server)
    sentinel = kx.load(later, ["failed"])
    renamed = sentinel.to_arrow("entries"), sentinel.to_arrow("runs")

    def renamed_table(table: pa.Table) -> pa.Table:
        column = pa.array(["sentinel"] * table.num_rows, pa.string())
        return table.set_column(table.schema.get_field_index("run_id"), "run_id", column)

    extra = kx.Journals(renamed_table(renamed[0]), renamed_table(renamed[1]))
    extra_spans = kx.send_otlp(extra, f"{url}/v1/traces", progress=False)["spans"]
    after = settled(url, len(spans) + extra_spans)
    deadline = time.monotonic() + INGEST_TIMEOUT
    while not any(s["attributes"]["kassette.run_id"] == "sentinel" for s in after):
        assert time.monotonic() < deadline, "the sentinel run never arrived"
        time.sleep(0.5)
        after = phoenix_spans(url)
    counts = Counter(span["attributes"]["kassette.run_id"] for span in after)
    assert counts.pop("sentinel") == extra_spans
    assert counts == Counter(span["attributes"]["kassette.run_id"] for span in spans)
