"""Journals as OpenTelemetry traces (issue 22): `kx.to_otlp`, `kx.export(format="otlp")`.

`traces.jsonl` is read back through the official protobuf messages (`otel_support.parse_line`:
`json_format.Parse` into `ExportTraceServiceRequest`, refusing unknown fields, after turning
OTLP/JSON's hex ids into the bytes protobuf holds) and checked field by field against
docs/otel.md's table, with
the expected values taken from the journals through other readers (`Journals.entries`,
`Journals.llm_calls`, the run's own entries).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from kassette import InvalidArgumentError, LocalStorage, MemoryStorage, StorageError
from kassette import explore as kx
from kassette.testing import fake_model_server

sys.path.insert(0, str(Path(__file__).parent))
from otel_support import DRAFT, MODEL, RUNS, attrs, parse_line, populate

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> LocalStorage:
    storage = LocalStorage(tmp_path_factory.mktemp("otel") / "store")
    with fake_model_server(seed=5) as server:
        populate(storage, server)
    return storage


def spans_of(path: Path) -> list[Span]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines
    spans = []
    for line in lines:
        request = parse_line(line)
        (resource,) = request.resource_spans
        attributes = {kv.key: kv.value.string_value for kv in resource.resource.attributes}
        assert attributes["service.name"] == "kassette"
        (scope,) = resource.scope_spans
        assert scope.scope.name == "kassette"
        spans.extend(scope.spans)
    return spans


def nanos(moment: Any) -> int:
    return int(moment.value) if hasattr(moment, "value") else int(moment.timestamp() * 1e9)


@pytest.fixture(scope="module")
def exported(store: LocalStorage, tmp_path_factory: pytest.TempPathFactory) -> list[Span]:
    out = tmp_path_factory.mktemp("export") / "otlp"
    summary = kx.export(store, out, format="otlp", progress=False)
    assert summary["files"] == [str(out / "traces.jsonl")]
    return spans_of(out / "traces.jsonl")


def by_run(spans: list[Span]) -> dict[str, list[Span]]:
    runs: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        runs[attrs(span)["kassette.run_id"]].append(span)
    return runs


def created_ms(store: LocalStorage) -> dict[str, int]:
    """Each run's creation time in ms, read by another reader: the runs frame's `started_at`
    (its first start, or a fork's own start)."""
    runs = kx.load(store).runs
    return {run.run_id: run.started_at.value // 1_000_000 for run in runs.itertuples()}


def hashed(text: str, size: int) -> bytes:
    return hashlib.sha256(text.encode()).digest()[:size]


def test_every_run_is_one_trace_with_the_documented_ids(
    store: LocalStorage, exported: list[Span]
) -> None:
    runs = by_run(exported)
    assert sorted(runs) == sorted(RUNS)
    created = created_ms(store)
    for run_id, spans in runs.items():
        me = f"{run_id}\0{created[run_id]}"
        assert {span.trace_id for span in spans} == {hashed(f"kassette-trace\0{me}", 16)}
        ids = [span.span_id for span in spans]
        assert len(set(ids)) == len(ids)
        (root,) = [span for span in spans if not span.parent_span_id]
        assert root.span_id == hashed(f"kassette-span\0{me}\0run\0{0}", 8)
        for span in spans:
            a = attrs(span)
            if "kassette.offset" in a:
                key = f"kassette-span\0{me}\0entry\0{a['kassette.offset']}"
                assert span.span_id == hashed(key, 8)
            elif span is not root:
                key = f"kassette-span\0{me}\0session\0{a['kassette.session']}"
                assert span.span_id == hashed(key, 8)


def test_spans_are_the_run_its_sessions_and_its_own_entries(
    store: LocalStorage, exported: list[Span]
) -> None:
    journals = kx.load(store)
    entries = journals.entries
    own = entries[~entries["copied"]]
    runs = by_run(exported)
    for run_id in RUNS:
        rows = own[own["run_id"] == run_id]
        spans = runs[run_id]
        sessions = [span for span in spans if "kassette.session" in attrs(span)
                    and "kassette.offset" not in attrs(span)]  # fmt: skip
        assert sorted(attrs(s)["kassette.session"] for s in sessions) == sorted(
            set(rows["session"])
        )
        # a span per step and suspend; a resume ends its suspend's span, start and
        # terminal entries are the session's and the run's
        spanned = rows[rows["type"].isin(["step", "suspend"])]
        offsets = sorted(
            attrs(s)["kassette.offset"] for s in spans if "kassette.offset" in attrs(s)
        )
        assert offsets == sorted(spanned["offset"])
        assert len(spans) == 1 + len(sessions) + len(spanned)


def test_nesting_follows_sessions_and_step_ids(exported: list[Span]) -> None:
    spans = by_run(exported)["resumed"]
    ids = {span.span_id: span for span in spans}
    (root,) = [span for span in spans if not span.parent_span_id]
    for span in spans:
        a = attrs(span)
        if span is root:
            continue
        parent = ids[span.parent_span_id]  # every parent is in the trace
        if "kassette.offset" not in a:
            assert parent is root
        elif a["kassette.step_id"].startswith("gather/"):
            assert attrs(parent)["kassette.step_id"] == "gather"
            assert parent.start_time_unix_nano <= span.start_time_unix_nano
            assert span.end_time_unix_nano <= parent.end_time_unix_nano
        else:
            assert "kassette.offset" not in attrs(parent)
            assert attrs(parent)["kassette.session"] == a["kassette.session"]
        assert parent.start_time_unix_nano <= span.start_time_unix_nano
        assert span.end_time_unix_nano <= parent.end_time_unix_nano
    assert root.status.code == Status.STATUS_CODE_OK


def test_a_suspend_s_span_is_its_wait_until_the_resume(
    store: LocalStorage, exported: list[Span]
) -> None:
    entries = kx.load(store, ["resumed"]).entries
    suspend = entries[entries["type"] == "suspend"].iloc[0]
    resume = entries[entries["type"] == "resume"].iloc[0]
    (span,) = [
        s for s in by_run(exported)["resumed"] if attrs(s).get("kassette.entry_type") == "suspend"
    ]
    assert span.name == "suspend review"
    assert span.start_time_unix_nano == nanos(suspend["timestamp"])
    assert span.end_time_unix_nano == nanos(resume["timestamp"])
    assert span.end_time_unix_nano - span.start_time_unix_nano == 60 * 10**9
    assert "kassette.pending" not in attrs(span)


def test_a_failed_run_s_error_is_an_exception_event(
    store: LocalStorage, exported: list[Span]
) -> None:
    (root,) = [s for s in by_run(exported)["failed"] if not s.parent_span_id]
    error = json.loads(kx.load(store, ["failed"]).entries.iloc[-1]["value"])["error"]
    assert root.status.code == Status.STATUS_CODE_ERROR
    assert root.status.message == error["message"] == "the plan cannot be done"
    (event,) = root.events
    assert event.name == "exception"
    assert attrs(event) == {
        "exception.type": "RuntimeError",
        "exception.message": error["message"],
        "exception.stacktrace": error["traceback"],
    }


def test_model_calls_carry_genai_and_openinference_attributes(
    store: LocalStorage, exported: list[Span]
) -> None:
    calls = kx.load(store).llm_calls
    calls = calls[~calls["copied"]]
    spans = {
        (a["kassette.run_id"], a["kassette.offset"]): (span, a)
        for span in exported
        if (a := attrs(span)).get("openinference.span.kind") == "LLM"
    }
    assert len(spans) == len(calls) == 2 * (len(RUNS) - 2)
    for call in calls.itertuples():
        span, a = spans[call.run_id, call.offset]
        assert span.kind == Span.SPAN_KIND_CLIENT
        assert span.name == f"chat {MODEL}"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == a["llm.provider"] == call.provider == "openai"
        assert a["gen_ai.request.model"] == MODEL
        assert a["gen_ai.response.model"] == a["llm.model_name"] == call.model
        assert a["gen_ai.usage.input_tokens"] == a["llm.token_count.prompt"] == call.input_tokens
        assert a["gen_ai.usage.output_tokens"] == a["llm.token_count.completion"]
        assert a["gen_ai.usage.output_tokens"] == call.output_tokens
        assert a["gen_ai.response.finish_reasons"] == [call.finish_reason]
        request = json.loads(call.request)
        assert json.loads(a["llm.invocation_parameters"]) == {
            k: v for k, v in request.items() if k != "messages"
        }
        if "temperature" in request:
            assert a["gen_ai.request.temperature"] == request["temperature"]
        # content only when asked for
        assert not {"input.value", "output.value"} & set(a)
        took = 0 if a.get("kassette.edited") else round(call.duration_ms * 1e6)  # never ran
        assert span.end_time_unix_nano - span.start_time_unix_nano == took
    temperatures = sorted(
        a["gen_ai.request.temperature"]
        for (run_id, _), (_, a) in spans.items()
        if run_id.startswith("fan.") and a["kassette.step_id"] == DRAFT
    )
    assert temperatures == [0.0, 0.2, 0.4, 0.6, 0.8]


def test_a_fork_links_to_its_source_and_does_not_repeat_its_prefix(
    store: LocalStorage, exported: list[Span]
) -> None:
    runs = by_run(exported)
    source = {span.span_id: span for span in runs["source"]}
    journals = kx.load(store)
    entries = journals.entries
    for run in journals.runs.itertuples():
        if run.run_id not in ("edited", *[f"fan.{i}" for i in range(5)]):
            continue
        (root,) = [s for s in runs[run.run_id] if not s.parent_span_id]
        a = attrs(root)
        assert a["kassette.fork.source_run_id"] == run.parent_run_id == "source"
        assert a["kassette.fork.offset"] == run.fork_offset
        assert a["kassette.fork.group"] == f"source@{run.fork_offset}"
        assert [link.trace_id for link in root.links] == [runs["source"][0].trace_id] * 2
        assert [attrs(link) for link in root.links] == [
            {"kassette.link": "fork source", "kassette.fork.offset": run.fork_offset},
            {"kassette.link": "fork point", "kassette.fork.offset": run.fork_offset},
        ]
        whole, point = (source[link.span_id] for link in root.links)  # both are exported spans
        assert not whole.parent_span_id
        # the fork point: the source's span of the entry before the fork (here its plan step)
        before = entries[(entries["run_id"] == "source")
                         & (entries["offset"] == run.fork_offset - 1)].iloc[0]  # fmt: skip
        assert attrs(point)["kassette.offset"] == run.fork_offset - 1
        assert attrs(point)["kassette.step_id"] == before["step_id"] == "plan"
        offsets = [
            attrs(s)["kassette.offset"] for s in runs[run.run_id] if "kassette.offset" in attrs(s)
        ]
        assert min(offsets) > run.fork_offset  # the copied prefix is the source's
    (edited,) = [s for s in runs["edited"] if attrs(s).get("kassette.step_id") == DRAFT]
    assert attrs(edited)["kassette.edited"] is True
    params = [attrs(s)["kassette.params"] for s in exported if not s.parent_span_id
              and attrs(s)["kassette.run_id"].startswith("fan.")]  # fmt: skip
    assert sorted(json.loads(p)["temperature"] for p in params) == [0.0, 0.2, 0.4, 0.6, 0.8]


def test_include_content_adds_prompts_answers_and_results(store: LocalStorage) -> None:
    journals = kx.load(store, ["source"])
    found = kx.to_otlp(journals, include_content=True)
    spans = list(parse_line(json.dumps(found)).resource_spans[0].scope_spans[0].spans)
    calls = journals.llm_calls
    for span in spans:
        a = attrs(span)
        if a.get("openinference.span.kind") == "LLM":
            (call,) = calls[calls["offset"] == a["kassette.offset"]].itertuples()
            assert a["output.value"] == call.response_text
            assert json.loads(a["input.value"])["messages"][0]["content"] == call.prompt
    (root,) = [s for s in spans if not s.parent_span_id]
    run = journals.runs.iloc[0]
    assert json.loads(attrs(root)["input.value"]) == json.loads(run["input"])
    assert json.loads(attrs(root)["output.value"]) == json.loads(run["result"])


def test_a_second_export_is_the_same_bytes_and_the_cli_writes_it(
    store: LocalStorage, tmp_path: Path
) -> None:
    first = kx.export(store, tmp_path / "a", format="otlp", progress=False)
    (tmp_path / "a" / "keep.txt").write_text("mine")
    kx.export(store, tmp_path / "a", format="otlp", progress=False, overwrite=True)
    command = [sys.executable, "-m", "kassette", "--storage", f"file:{store.path}", "export",
               str(tmp_path / "b"), "--format", "otlp"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == "otlp"
    a, b = (tmp_path / name / "traces.jsonl" for name in ("a", "b"))
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "a" / "keep.txt").read_text() == "mine"  # overwrite keeps others' files
    assert len(spans_of(a)) == len(spans_of(b)) > len(RUNS)
    assert first["runs"] == len(RUNS)


def test_to_otlp_of_nothing_and_of_memory_storage() -> None:
    empty = kx.to_otlp(kx.load(MemoryStorage()))
    assert parse_line(json.dumps(empty)).resource_spans[0].scope_spans[0].spans == []


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint on 127.0.0.1 that keeps what it is sent and refuses the request
    numbered `refuse` (1-based) with HTTP 400."""

    bodies: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    refuse: ClassVar[int | None] = None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append(({k.lower(): v for k, v in self.headers.items()}, body))
        refused = len(self.bodies) == self.refuse
        self.send_response(400 if refused else 200)
        self.end_headers()
        self.wfile.write(b"bad span" if refused else b"")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Collector]]]:
    handler = type("Handler", (Collector,), {"bodies": [], "refuse": None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", handler
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def test_send_otlp_posts_protobuf_batches_with_the_headers(
    store: LocalStorage, collector: tuple[str, type[Collector]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = collector
    journals = kx.load(store)
    sent = kx.send_otlp(journals, url, headers={"api_key": "k"}, runs_per_request=4, progress=True)
    assert sent["requests"] == len(handler.bodies) == 3  # 9 runs, 4 a request
    spans = []
    for headers, body in handler.bodies:
        assert headers["content-type"] == "application/x-protobuf"
        assert headers["api_key"] == "k"
        request = ExportTraceServiceRequest.FromString(body)
        spans.extend(request.resource_spans[0].scope_spans[0].spans)
    assert sent == {"runs": len(RUNS), "spans": len(spans), "requests": 3}
    whole = parse_line(json.dumps(kx.to_otlp(journals))).resource_spans[0].scope_spans[0].spans
    assert sorted(s.SerializeToString() for s in spans) == sorted(
        s.SerializeToString() for s in whole
    )
    err = capsys.readouterr().err
    assert "send_otlp  [" in err
    assert f"{len(RUNS)}/{len(RUNS)} runs" in err


def test_send_otlp_names_the_batch_an_endpoint_refuses(
    store: LocalStorage, collector: tuple[str, type[Collector]]
) -> None:
    url, handler = collector
    handler.refuse = 2
    journals = kx.load(store)
    with pytest.raises(StorageError) as raised:
        kx.send_otlp(journals, url, runs_per_request=4, progress=False)
    second = journals.run_ids[4:8]
    message = str(raised.value)
    assert f"batch 2 (runs {second[0]} .. {second[-1]}, 4 runs)" in message
    assert "HTTP 400 Bad Request: bad span" in message
    assert f"resume_from={second[0]!r}" in message
    assert len(handler.bodies) == 2  # the batches after it are not sent
    with pytest.raises(InvalidArgumentError):
        kx.send_otlp(journals, "127.0.0.1:4318", progress=False)
