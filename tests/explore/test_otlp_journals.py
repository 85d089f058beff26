"""OTLP export of hand-written journals: hostile values, fork points of every kind, ids that
name one journal, chat messages, and the streaming layout of `traces.jsonl` (issues 29
section 1, 30 section 4, 31 section 5, 32 items 12, 13 and 17).

Every line an export writes is read back with `google.protobuf.json_format.Parse` into the
official `ExportTraceServiceRequest` (after OTLP/JSON's hex ids become protobuf JSON's
base64), and every protobuf body `send_otlp` posts must equal those messages.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from otel_support import attrs, parse_line

from kassette import LocalStorage, MemoryStorage, Storage
from kassette import explore as kx
from kassette.explore import _otlp


def stamp(second: int) -> str:
    minutes, seconds = divmod(second, 60)
    return f"2026-03-01T10:{minutes:02d}:{seconds:02d}.000Z"


def write(storage: Storage, run_id: str, entries: list[dict[str, Any]]) -> None:
    lines = []
    for offset, entry in enumerate(entries):
        head = {"type": entry.pop("type"), "session": entry.pop("session", 1), "offset": offset,
                "timestamp": entry.pop("timestamp", stamp(offset))}  # fmt: skip
        lines.append(json.dumps(head | entry, separators=(",", ":")) + "\n")
    storage.append(run_id, "".join(lines).encode(), token=None)


def spans_of(request: ExportTraceServiceRequest) -> list[Span]:
    return [span for r in request.resource_spans for s in r.scope_spans for span in s.spans]


def exported(storage: Storage, tmp_path: Path, **options: Any) -> list[Span]:
    out = tmp_path / "otlp"
    kx.export(storage, out, format="otlp", progress=False, **options)
    lines = (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    return [span for text in lines for span in spans_of(parse_line(text))]


def model_step(request: dict[str, Any], result: Any, step_id: str = "chat") -> dict[str, Any]:
    return {"type": "step", "stepId": step_id, "name": "chat.completions.create", "result": result,
            "call": {"provider": "openai", "method": "chat.completions.create", "request": request},
            "durationMs": 250}  # fmt: skip


def chat_answer(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}  # fmt: skip


def simple(result: Any = 1) -> list[dict[str, Any]]:
    return [
        {"type": "start", "metadata": {"n": 1}},
        {"type": "step", "stepId": "a", "name": "a", "result": result},
        {"type": "complete", "result": result},
    ]


# -- issue 32 item 12: an integer past 64 bits ---------------------------------------------------


def test_a_parameter_past_64_bits_exports_as_its_digits(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    request = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "seed": 2**70,
               "temperature": float("nan"), "max_tokens": -3}  # fmt: skip
    answer = chat_answer({"role": "assistant", "content": "ok"})
    write(storage, "huge", [{"type": "start", "metadata": None}, model_step(request, answer),
                            {"type": "complete", "result": 2**80}])  # fmt: skip
    write(storage, "plain", simple())
    spans = exported(storage, tmp_path, include_content=True)
    (call,) = [s for s in spans if attrs(s).get("openinference.span.kind") == "LLM"]
    a = attrs(call)
    assert a["gen_ai.request.seed"] == str(2**70)  # a string: protobuf holds no such int
    assert a["gen_ai.request.max_tokens"] == -3
    assert a["gen_ai.request.temperature"] != a["gen_ai.request.temperature"]  # NaN
    assert json.loads(a["llm.invocation_parameters"])["seed"] == 2**70
    assert {attrs(s)["kassette.run_id"] for s in spans} == {"huge", "plain"}
    command = [sys.executable, "-m", "kassette", "--storage", f"file:{storage.path}", "export",
               str(tmp_path / "cli"), "--format", "otlp", "--include-content"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert (tmp_path / "cli" / "traces.jsonl").read_bytes() == (
        tmp_path / "otlp" / "traces.jsonl"
    ).read_bytes()


def test_the_cli_reports_an_unexpected_failure_as_one_json_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kassette import _cli as cli

    storage = LocalStorage(tmp_path / "store")
    write(storage, "plain", simple())

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(kx, "export", broken)
    code = cli.main(["--storage", f"file:{storage.path}", "export", str(tmp_path / "out"),
                     "--format", "otlp"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    (only,) = err.splitlines()
    assert json.loads(only)["error"] == {
        "type": "OverflowError",
        "message": "Python int too large to convert to C long",
    }


# -- issue 32 item 13: a stream's tool-call delta with "index": null -----------------------------


def test_a_stream_tool_call_index_null_is_flagged_and_the_rest_is_read(tmp_path: Path) -> None:
    storage = MemoryStorage()
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "model": "gpt-x", "choices": [{"index": 0,
         "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "t1", "type": "function",
                   "function": {"name": "lookup", "arguments": "{\"q\":"}}]}}]},
        {"id": "c", "object": "chat.completion.chunk", "model": "gpt-x", "choices": [{"index": 0,
         "delta": {"tool_calls": [{"index": None, "function": {"arguments": "1}"}}]},
         "finish_reason": "tool_calls"}]},
    ]  # fmt: skip
    request = {"model": "gpt-x", "messages": [{"role": "user", "content": "q"}], "stream": True,
               "temperature": 0.5}  # fmt: skip
    write(storage, "bad", [{"type": "start", "metadata": None},
                           model_step(request, {"stream": chunks}),
                           {"type": "complete", "result": None}])  # fmt: skip
    write(storage, "good", simple())
    found = kx.to_otlp(kx.load(storage), include_content=True)
    spans = spans_of(parse_line(json.dumps(found)))
    (call,) = [s for s in spans if attrs(s).get("openinference.span.kind") == "LLM"]
    a = attrs(call)
    assert call.name == "chat gpt-x"
    assert a["gen_ai.request.temperature"] == 0.5
    assert a["gen_ai.provider.name"] == "openai"
    # read as well as it can be: the call and its arguments, and a note of what was odd
    assert "index" in a["kassette.notes"] and "kassette.unreadable" not in a
    assert json.loads(a["input.value"])["messages"] == request["messages"]
    assert {attrs(s)["kassette.run_id"] for s in spans} == {"bad", "good"}
    assert len([s for s in spans if attrs(s)["kassette.run_id"] == "good"]) == 3


# -- issue 32 item 17: ids name this journal -----------------------------------------------------


def root_of(spans: list[Span], run_id: str) -> Span:
    (root,) = [s for s in spans if not s.parent_span_id and attrs(s)["kassette.run_id"] == run_id]
    return root


def test_ids_name_the_journal_not_only_the_run_id(tmp_path: Path) -> None:
    first, other_store = LocalStorage(tmp_path / "first"), LocalStorage(tmp_path / "other")
    write(first, "ticket-1", simple())
    before = spans_of(parse_line(json.dumps(kx.to_otlp(kx.load(first)))))
    again = spans_of(parse_line(json.dumps(kx.to_otlp(kx.load(first)))))
    assert [s.span_id for s in before] == [s.span_id for s in again]  # an export is stable
    # deleted and created again, a minute later: the same run id, another journal
    first.delete_run("ticket-1")
    later = [{**entry, "timestamp": stamp(60 + offset)} for offset, entry in enumerate(simple())]
    write(first, "ticket-1", later)
    recreated = spans_of(parse_line(json.dumps(kx.to_otlp(kx.load(first)))))
    write(
        other_store, "ticket-1", [{**e, "timestamp": stamp(5 + o)} for o, e in enumerate(simple())]
    )
    elsewhere = spans_of(parse_line(json.dumps(kx.to_otlp(kx.load(other_store)))))
    traces = {spans[0].trace_id for spans in (before, recreated, elsewhere)}
    assert len(traces) == 3
    ids = [{s.span_id for s in spans} for spans in (before, recreated, elsewhere)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    # the documented rule: the run id and its first start's time in ms
    me = "ticket-1\0" + str(1_772_359_260_000)  # 2026-03-01T10:01:00Z
    assert recreated[0].trace_id == hashlib.sha256(f"kassette-trace\0{me}".encode()).digest()[:16]


# -- issue 30 section 4: fork links point at spans an export holds --------------------------------


def source_entries() -> list[dict[str, Any]]:
    return [
        {"type": "start", "metadata": None},  # 0
        {"type": "step", "stepId": "plan", "name": "plan", "result": 1},  # 1
        {"type": "suspend", "eventId": "review", "event": "review", "reason": None},  # 2
        {"type": "start", "session": 2, "metadata": None},  # 3: a session's start
        {"type": "resume", "session": 2, "eventId": "review", "event": "review", "value": 1},  # 4
        {"type": "step", "session": 2, "stepId": "act", "name": "act", "result": 2},  # 5
        {"type": "complete", "session": 2, "result": 2},  # 6: the final entry
    ]


def forked(
    entries: list[dict[str, Any]], source: str, offset: int, session: int, second: int
) -> list[dict[str, Any]]:
    own = [
        {"type": "start", "session": session, "metadata": None, "timestamp": stamp(second),
         "source": {"runId": source, "fromOffset": offset}},
        {"type": "step", "session": session, "stepId": "own", "name": "own", "result": 3,
         "timestamp": stamp(second + 1)},
        {"type": "complete", "session": session, "result": 3, "timestamp": stamp(second + 2)},
    ]  # fmt: skip
    copied = [
        {**entry, "timestamp": entry.get("timestamp", stamp(number))}
        for number, entry in enumerate(entries[:offset])
    ]
    return copied + own


def test_every_fork_link_points_at_an_exported_span(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    write(storage, "source", source_entries())
    points = {"at-step": 1, "at-suspend": 2, "at-session-start": 3, "at-resume": 4,
              "at-act": 5, "at-final": 6}  # fmt: skip
    for number, (run_id, offset) in enumerate(points.items()):
        write(storage, run_id, forked(source_entries(), "source", offset, 3, 100 + 10 * number))
    # a fork of a fork: after the fork's own start, and inside its copied prefix
    fork = forked(source_entries(), "source", 4, 3, 100 + 10 * 3)
    write(storage, "fork-of-fork", forked(fork, "at-resume", 6, 4, 300))
    write(storage, "inside-prefix", forked(fork, "at-resume", 2, 4, 400))
    spans = exported(storage, tmp_path)
    by_ids = {(s.trace_id, s.span_id): s for s in spans}
    for run_id, offset in points.items():
        root = root_of(spans, run_id)
        assert [attrs(link)["kassette.link"] for link in root.links] == [
            "fork source",
            "fork point",
        ]
        assert [attrs(link)["kassette.fork.offset"] for link in root.links] == [offset] * 2
        whole, point = (by_ids[link.trace_id, link.span_id] for link in root.links)
        assert attrs(whole)["kassette.run_id"] == attrs(point)["kassette.run_id"] == "source"
        assert not whole.parent_span_id
        before = offset - 1  # the source's span of the entry before the fork point
        if "kassette.offset" in attrs(point):
            assert attrs(point)["kassette.offset"] == before
        else:  # that entry has no span (a start, a resume): its session's
            assert attrs(point)["kassette.session"] == source_entries()[before].get("session", 1)
    root = root_of(spans, "fork-of-fork")  # the entry before 6 (at-resume's "own") is its
    (point,) = [by_ids[link.trace_id, link.span_id] for link in root.links][1:]
    assert attrs(point)["kassette.run_id"] == "at-resume"
    assert attrs(point)["kassette.step_id"] == "own"
    root = root_of(spans, "inside-prefix")  # the entry before 2 was written by source
    links = [by_ids[link.trace_id, link.span_id] for link in root.links]
    assert [attrs(s)["kassette.run_id"] for s in links] == ["source", "source"]
    assert attrs(root)["kassette.fork.source_run_id"] == "at-resume"


# -- issue 31 section 5: chat messages ----------------------------------------------------------


def test_content_gives_chat_messages_and_a_tool_call_only_answer_its_calls(tmp_path: Path) -> None:
    storage = MemoryStorage()
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in "},
                                     {"type": "text", "text": "Oslo?"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
    ]  # fmt: skip
    asked = {"id": "call_2", "type": "function",
             "function": {"name": "clothes", "arguments": "{\"temp\":-3}"}}  # fmt: skip
    answer = chat_answer(
        {"role": "assistant", "content": None, "tool_calls": [asked]}, "tool_calls"
    )
    anthropic = {"type": "step", "stepId": "claude", "name": "messages.create", "result": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "tool_use", "id": "tu_1", "name": "search", "input": {"q": "x"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 2}},
        "call": {"provider": "anthropic", "method": "messages.create", "request": {
            "model": "claude-x", "max_tokens": 100, "system": "Plan.", "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "text", "text": "Searching."},
                 {"type": "tool_use", "id": "tu_0", "name": "search", "input": {"q": "a"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_0",
                                              "content": "found a"}]}]}}}  # fmt: skip
    write(storage, "chat", [{"type": "start", "metadata": None},
                            model_step({"model": "gpt-x", "messages": messages}, answer),
                            anthropic, {"type": "complete", "result": None}])  # fmt: skip
    found = kx.to_otlp(kx.load(storage), include_content=True)
    spans = spans_of(parse_line(json.dumps(found)))
    (openai,) = [attrs(s) for s in spans if attrs(s).get("kassette.step_id") == "chat"]
    expected = {
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Be brief.",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": "Weather in Oslo?",
        "llm.input_messages.2.message.role": "assistant",
        "llm.input_messages.2.message.tool_calls.0.tool_call.id": "call_1",
        "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "weather",
        "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments":
            "{\"city\":\"Oslo\"}",
        "llm.input_messages.3.message.role": "tool",
        "llm.input_messages.3.message.content": "-3 C",
        "llm.input_messages.3.message.tool_call_id": "call_1",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "clothes",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{\"temp\":-3}",
    }  # fmt: skip
    assert {
        k: v for k, v in openai.items() if k.startswith("llm.") and "_messages." in k
    } == expected
    assert json.loads(openai["output.value"]) == {
        "tool_calls": [{"name": "clothes", "arguments": '{"temp":-3}'}]
    }
    assert json.loads(openai["gen_ai.input.messages"])[2] == {"role": "assistant", "parts": [
        {"type": "tool_call", "id": "call_1", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"}
    ]}  # fmt: skip
    assert json.loads(openai["gen_ai.input.messages"])[3] == {"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "call_1", "response": "-3 C"}]}  # fmt: skip
    assert json.loads(openai["gen_ai.output.messages"]) == [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": None, "name": "clothes", "arguments": "{\"temp\":-3}"}],
        "finish_reason": "tool_calls"}]  # fmt: skip
    (claude,) = [attrs(s) for s in spans if attrs(s).get("kassette.step_id") == "claude"]
    roles = [claude[f"llm.input_messages.{n}.message.role"] for n in range(4)]
    assert roles == ["system", "user", "assistant", "tool"]
    assert claude["llm.input_messages.2.message.content"] == "Searching."
    assert claude["llm.input_messages.2.message.tool_calls.0.tool_call.function.name"] == "search"
    assert claude["llm.input_messages.3.message.tool_call_id"] == "tu_0"
    assert claude["llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments"] == (
        '{"q":"x"}'
    )
    without = spans_of(parse_line(json.dumps(kx.to_otlp(kx.load(storage)))))
    assert not any(k.startswith(("llm.input_messages", "gen_ai.input", "output.value", "input."))
                   for s in without for k in attrs(s))  # fmt: skip


# -- issue 29 section 1: the streaming layout, and the protobuf bodies --------------------------


def test_traces_jsonl_is_one_bounded_request_per_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_otlp, "RUNS_PER_REQUEST", 7)
    monkeypatch.setattr(_otlp, "REQUEST_BYTES", 20_000)
    storage = LocalStorage(tmp_path / "store")
    for number in range(40):
        write(storage, f"run-{number:02d}", simple({"n": number}))
    big = [{"type": "start", "metadata": None}]
    big += [
        {"type": "step", "stepId": f"s{n}", "name": "s", "result": "x" * 900} for n in range(60)
    ]
    write(storage, "run-big", big)
    out = tmp_path / "otlp"
    kx.export(storage, out, format="otlp", progress=False, include_content=True)
    data = (out / "traces.jsonl").read_bytes()
    lines = data.decode().splitlines()
    assert len(lines) > 40 // 7 + 2
    seen: list[bytes] = []
    for text in lines:
        spans = spans_of(parse_line(text))
        runs = {attrs(s)["kassette.run_id"] for s in spans}
        assert 1 <= len(runs) <= 7
        assert len(text.encode()) <= 20_000 + 3_000  # a batch, or one span past the limit
        seen += [s.span_id for s in spans]
    assert len(seen) == len(set(seen)) == 40 * 3 + 1 + 1 + 60
    kx.export(storage, out, format="otlp", progress=False, include_content=True, overwrite=True)
    assert (out / "traces.jsonl").read_bytes() == data  # the same bytes twice


class Keeper(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_send_otlp_posts_the_protobuf_of_the_exported_json(tmp_path: Path) -> None:
    storage = MemoryStorage()
    request = {"model": "gpt-x", "messages": [{"role": "user", "content": "héllo ✓"}],
               "seed": 2**70, "temperature": float("inf"), "stop": ["a", "b"],
               "top_k": -1}  # fmt: skip
    answer = chat_answer({"role": "assistant", "content": "ünïcode"})
    write(storage, "a", [{"type": "start", "metadata": {"x": [1, {"y": None}]}},
                         model_step(request, answer), {"type": "error", "error": {
                             "name": "E", "message": "m", "traceback": "t"}}])  # fmt: skip
    write(storage, "b", simple())
    write(storage, "c", forked(simple()[:2], "b", 1, 2, 30))
    journals = kx.load(storage)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("K", (Keeper,), {"bodies": []}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        kx.send_otlp(journals, url, include_content=True, progress=False, runs_per_request=2)
        bodies = server.RequestHandlerClass.bodies  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
    assert len(bodies) == 2
    posted = [ExportTraceServiceRequest.FromString(body) for body in bodies]
    whole = parse_line(json.dumps(kx.to_otlp(journals, include_content=True)))
    assert [s for r in posted for s in spans_of(r)] == spans_of(whole)
    for request_message in posted:  # the resource and scope as in the JSON
        assert request_message.resource_spans[0].resource == whole.resource_spans[0].resource
        assert request_message.resource_spans[0].scope_spans[0].scope == (
            whole.resource_spans[0].scope_spans[0].scope
        )


def test_entries_in_any_order_give_the_same_spans_in_the_runs_order(tmp_path: Path) -> None:
    storage = MemoryStorage()
    write(storage, "source", source_entries())
    write(storage, "fork", forked(source_entries(), "source", 2, 3, 100))
    write(storage, "plain", simple())
    journals = kx.load(storage)
    entries, runs = journals.to_arrow("entries"), journals.to_arrow("runs")
    shuffled = entries.take(list(range(entries.num_rows))[::-1])  # runs and offsets reversed
    expected = kx.to_otlp(journals)
    assert kx.to_otlp(kx.Journals(shuffled, runs)) == expected
    roots = [s for s in spans_of(parse_line(json.dumps(expected))) if not s.parent_span_id]
    assert [attrs(root)["kassette.run_id"] for root in roots] == runs.column("run_id").to_pylist()
