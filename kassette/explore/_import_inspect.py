"""Inspect AI eval logs as runs: `import_inspect(log, storage)` journals each sample's epoch.

An Inspect log (`.eval` or `.json`, read with `inspect_ai.log`, the `inspect` extra) holds
samples, each run once per epoch, each with its events. A sample's epoch becomes a run
`inspect-<eval id>-<sample id>-<epoch>`: its input is the sample's input (a text, or its
messages as JSON), its model events are model-call steps and its tool events steps named
after the tool function, in the order they happened; its scores, target and Inspect's ids
are kept in the start entry's `imported.data`, and how it ended (its output's completion,
its error) in `imported.ended`.

A model event is journaled as an Anthropic `messages.create` call when its model is
Anthropic's (`anthropic/...`), else as an OpenAI `chat.completions.create` call (the shape
most providers serve), its request written from the event's messages, tools and generation
config; the model name is the part after Inspect's provider prefix. A model or tool event
that failed, and content kassette does not rebuild (reasoning, images), end the run's steps
there, said in the report.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from kassette.errors import InvalidArgumentError
from kassette.explore._import_calls import Message, SourceCall, ToolCall, rebuild
from kassette.explore._import_runs import (
    ImportedRun,
    ImportReport,
    Reporter,
    StepNames,
    StepNaming,
    run_id_of,
    storage_of,
    timestamp_of,
)
from kassette.storage import Storage

_HINT = 'kx.import_inspect needs Inspect AI: pip install "kassette[inspect]"'

try:
    from inspect_ai.log import read_eval_log, read_eval_log_samples
except ImportError as exc:  # pragma: no cover - exercised in an environment without the extra
    raise ImportError(f"{_HINT} ({exc})") from exc

__all__ = ["import_inspect"]

# Inspect's GenerateConfig fields, in OpenAI's and Anthropic's request words
_CONFIG = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_tokens",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "seed": "seed",
    "stop_seqs": "stop",
}


def import_inspect(
    log: str | os.PathLike[str],
    storage: Storage | str | os.PathLike[str],
    *,
    step_names: StepNaming = None,
) -> ImportReport:
    """Journal each sample (and epoch) of the Inspect log `log` as a run of `storage`.

    Model events become model-call steps named as `journaled(client, ctx)` names them
    (`chat.completions.create`, `messages.create`), tool events steps named after the tool
    (or as `step_names` maps those names); the sample's input is the run's input, its
    scores are kept. Importing the same log again writes nothing twice.
    """
    path = Path(log)
    if not path.is_file():
        raise InvalidArgumentError(f"no Inspect log at {path}")
    try:
        header = read_eval_log(str(path), header_only=True)
    except Exception as exc:  # Inspect raises what its reader meets: say which file
        raise InvalidArgumentError(f"{path.name}: not an Inspect log ({exc})") from None
    eval_id = header.eval.eval_id
    with Reporter(storage_of(storage)) as reporter:
        try:
            for sample in read_eval_log_samples(str(path), all_samples_required=False):
                data = sample.model_dump(mode="json", exclude_none=True)
                reporter.write(_run(data, eval_id, header.eval.task, path.name, step_names))
        except InvalidArgumentError:
            raise
        except Exception as exc:  # a sample Inspect cannot read: the runs before it are written
            raise InvalidArgumentError(f"{path.name}: an unreadable sample ({exc})") from None
        return reporter.report()


def _run(
    sample: dict[str, Any], eval_id: str, task: str, file_name: str, step_names: StepNaming
) -> ImportedRun:
    sample_id, epoch = sample.get("id"), sample.get("epoch", 1)
    events = [e for e in sample.get("events", []) if isinstance(e, dict)]
    started = next((e["timestamp"] for e in events if "timestamp" in e), None)
    run = ImportedRun(
        run_id=run_id_of("inspect", eval_id, sample_id, epoch),
        key=f"inspect eval {eval_id} sample {sample_id} epoch {epoch}",
        source=f"inspect:{file_name}#{sample_id}/{epoch}",
        started_at=_timestamp(started or sample.get("started_at")),
    )
    given = sample.get("input")
    run.input = given if isinstance(given, str) else [_plain(m) for m in given or []]
    run.data = {
        "task": task,
        "evalId": eval_id,
        "sampleId": sample_id,
        "epoch": epoch,
        "uuid": sample.get("uuid"),
        "target": sample.get("target"),
        "scores": sample.get("scores", {}),
    }
    output = sample.get("output") or {}
    run.ended = {"status": "completed", "output": output.get("completion")}
    if sample.get("error"):
        error = sample["error"]
        run.ended = {
            "status": "failed",
            "error": {"name": "Error", "message": error.get("message")},
        }
    names = StepNames(step_names)
    for event in events:
        if run.stopped:
            break
        if event.get("event") == "model":
            _model_step(run, event, names)
        elif event.get("event") == "tool":
            _tool_step(run, event, names)
    return run


def _model_step(run: ImportedRun, event: dict[str, Any], names: StepNames) -> None:
    provider_model = str(event.get("model") or "")
    provider, _, model = provider_model.partition("/")
    provider = "anthropic" if provider == "anthropic" else "openai"
    method = "messages.create" if provider == "anthropic" else "chat.completions.create"
    name = names.name(method)
    step_id = names.next_id(name)
    where = f"model event {event.get('uuid')} ({provider_model}), step {step_id}"
    if event.get("error"):
        run.lacks(f"{where}: failed in the source ({event['error']}); replay runs it live")
        return
    call = _source_call(provider, method, model or provider_model, event)
    built = rebuild(call) if isinstance(call, SourceCall) else call
    if isinstance(built, str):
        run.lacks(f"{where}: {built}")
        return
    request, response = built
    run.add_step(
        {
            "stepId": step_id,
            "name": name,
            "result": response,
            "call": {"provider": provider, "method": method, "request": request},
            **_timing(event),
        }
    )


def _source_call(provider: str, method: str, model: str, event: dict[str, Any]) -> SourceCall | str:
    call = SourceCall(provider, method, model=model)
    messages = []
    for message in event.get("input") or []:
        read = _message(message)
        if isinstance(read, str):
            return read
        messages.append(read)
    call.messages = messages
    config = event.get("config") or {}
    call.parameters = {wire: config[key] for key, wire in _CONFIG.items() if key in config}
    if provider == "anthropic" and "stop" in call.parameters:
        call.parameters["stop_sequences"] = call.parameters.pop("stop")
    if provider == "anthropic" and "max_tokens" not in call.parameters:
        return "its request's max_tokens is not in the log (Anthropic's messages need it)"
    tools = [t for t in event.get("tools") or [] if isinstance(t, dict)]
    if tools:
        call.tools = [_tool(provider, t) for t in tools]
    output = event.get("output") or {}
    choices = output.get("choices") or []
    if not choices:
        return "its output has no answer"
    answer = _message(choices[0].get("message") or {})
    if isinstance(answer, str):
        return answer
    call.text = answer.content or ""
    call.tool_calls = list(answer.tool_calls)
    call.finish_reason = choices[0].get("stop_reason")
    call.response_model = model
    usage = output.get("usage") or {}
    call.input_tokens, call.output_tokens = usage.get("input_tokens"), usage.get("output_tokens")
    return call


def _message(message: dict[str, Any]) -> Message | str:
    """An Inspect chat message in neutral words (a sentence for content not rebuilt)."""
    content = message.get("content")
    if isinstance(content, list):
        kinds = {part.get("type") for part in content if isinstance(part, dict)}
        if kinds - {"text"}:
            return f"a message with {', '.join(sorted(map(str, kinds - {'text'})))} content"
        content = "".join(str(part.get("text") or "") for part in content)
    calls = tuple(
        ToolCall(str(c.get("id") or ""), str(c.get("function") or ""), c.get("arguments"))
        for c in message.get("tool_calls") or []
        if isinstance(c, dict)
    )
    return Message(
        str(message.get("role") or "user"),
        content if isinstance(content, str) else None,
        calls,
        message.get("tool_call_id"),
    )


def _tool(provider: str, tool: dict[str, Any]) -> dict[str, Any]:
    name, description = tool.get("name"), tool.get("description")
    parameters = tool.get("parameters") or {"type": "object", "properties": {}}
    if provider == "anthropic":
        return {"name": name, "description": description, "input_schema": parameters}
    function = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": function}


def _tool_step(run: ImportedRun, event: dict[str, Any], names: StepNames) -> None:
    name = names.name(str(event.get("function") or "tool"))
    step_id = names.next_id(name)
    if event.get("error"):
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        run.lacks(
            f"tool event {event.get('uuid')} ({name}), step {step_id}: failed in the source "
            f"({message}); kassette journals no failed step, so a replay runs it live"
        )
        return
    run.add_step({"stepId": step_id, "name": name, "result": event.get("result"), **_timing(event)})


def _timing(event: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"imported": {"event": event.get("uuid")}}
    started, completed = event.get("timestamp"), event.get("completed")
    if started:
        found["timestamp"] = _timestamp(completed or started)
    if started and completed:
        duration = datetime.fromisoformat(completed) - datetime.fromisoformat(started)
        found["durationMs"] = round(duration.total_seconds() * 1000, 3)
    return found


def _timestamp(moment: Any) -> str:
    if not isinstance(moment, str):
        return "1970-01-01T00:00:00.000Z"
    parsed = datetime.fromisoformat(moment)
    nanos = int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000
    return timestamp_of(nanos)


def _plain(message: Any) -> Any:
    return json.loads(json.dumps(message, ensure_ascii=False))
