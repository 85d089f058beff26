"""The entry codec: a journal line's bytes and the entry they hold, both ways.

An entry is one JSON object on one `\n`-terminated UTF-8 line: the envelope (`type`,
`session`, `offset`, `timestamp`), then the fields of its type; the `TypedDict`s below spell out
kassette's own types. This module owns the one JSON encoder (compact, UTF-8, no NaN or
infinities), the one line decoder, the timestamp format, and `check_entry`, the test every
reader applies to a decoded line. Pure functions: no storage, no state.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, NoReturn, NotRequired, TypedDict, cast

from kassette._timestamps import format_timestamp, parse_moment, parse_timestamp
from kassette.errors import InvalidArgumentError, JournalCorruptionError, NotSerializableError

__all__ = [
    "KNOWN_TYPES",
    "MAX_DEPTH",
    "MAX_LINE_DEPTH",
    "REQUIRED_TEXT",
    "TERMINAL_TYPES",
    "UTF8_ERRORS",
    "CallRecord",
    "CancelEntry",
    "CompleteEntry",
    "Entry",
    "ErrorEntry",
    "ErrorPayload",
    "KnownEntry",
    "ResumeEntry",
    "Source",
    "StartEntry",
    "StepEntry",
    "SuspendEntry",
    "check_call_record",
    "check_entry",
    "check_json",
    "check_json_encoded",
    "decode_line",
    "decode_vouched",
    "encode",
    "encode_entry",
    "escapes_surrogate",
    "event_id",
    "event_name",
    "format_timestamp",
    "json_text",
    "new_run_id",
    "parse_json",
    "parse_moment",
    "parse_timestamp",
    "plain",
    "read_entry",
    "shallow",
    "to_json",
    "too_deep",
    "validate_name",
]

Entry = dict[str, Any]

TERMINAL_TYPES = frozenset({"complete", "error", "cancel"})
KNOWN_TYPES = frozenset({"start", "step", "suspend", "resume"}) | TERMINAL_TYPES
# The text fields that replay and the run's state are keyed by, per type: each tuple needs one
# of its keys. Upstream (TypeScript) kassette names a suspend's and a resume's event `name`.
REQUIRED_TEXT = {
    "step": (("stepId",), ("name",)),
    "suspend": (("eventId", "name"),),
    "resume": (("eventId", "name"),),
}
MAX_DEPTH = 100
"""How deep arrays and objects may nest in a value kassette journals: a step's result, a run's
input, a resume's value, a return value. Python's JSON decoder recurses once per level, so a
limit well under the interpreter's recursion limit (1000) is what lets every accepted value be
read back wherever replay happens, even deep inside a workflow's own calls."""
MAX_LINE_DEPTH = MAX_DEPTH + 1
"""How deep a journal line may nest: a value, and the entry around it."""
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_INNERMOST = re.compile(rb"\[\]|\{\}")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# what json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False) builds per
# call; built once, as encoding is on every append's path
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_TEXT = json.encoder.encode_basestring  # how _ENCODER writes a string (ensure_ascii=False)
# what json.loads runs once past its checks (its memo of keys is per call: safe to share)
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _c_encoder() -> Callable[[object, int], list[str]] | None:
    """What `_ENCODER.encode` runs once past its checks (see `_encode`), or None to use the
    public encoder: `c_make_encoder` is CPython's undocumented accelerator, called by
    position, so a Python whose signature differs (or that has none) must still import
    kassette. A probe checks the call builds the text the journal's format says."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    probe = {"a": [1, 2.5, "\u00e9\n", None, True], "b": {}}
    try:
        encode: Callable[[object, int], list[str]] = make(
            None, _ENCODER.default, _TEXT, None, ":", ",", False, False, False
        )
        if "".join(encode(probe, 0)) != '{"a":[1,2.5,"\u00e9\\n",null,true],"b":{}}':
            return None
    except Exception:  # any failure means "not this CPython's signature"
        return None
    return encode


_C_ENCODE = _c_encoder()
# `_ENCODER.encode` looks `c_make_encoder` up per call: used while it is the one probed (or None)
_C_MAKE = getattr(json.encoder, "c_make_encoder", None) if _C_ENCODE is not None else None


def _dumps(value: object) -> str:
    """`_ENCODER.encode(value)`, on the pure-Python encoder whenever the C one cannot be used:
    one whose signature differs, or one put in `json.encoder` after kassette checked it."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or make is _C_MAKE:
        return _ENCODER.encode(value)
    return "".join(_ENCODER.iterencode(value))  # not one-shot: the pure-Python encoder


def validate_name(name: object, what: str = "step") -> str:
    """Step, event and branch names are non-empty strings without the reserved `#` and `/`."""
    if not isinstance(name, str) or not name or "#" in name or "/" in name:
        raise InvalidArgumentError(
            f"invalid {what} name {name!r}: names are non-empty and may not contain '#' or '/'"
        )
    return name


def check_json(value: object, what: str) -> Any:
    """Return `value` as replay will see it (via a JSON round trip), or raise a `TypeError`.

    Live code and replayed code must get the same value, so a tuple comes back as a list here
    too. Sets, bytes, arbitrary objects, NaN and infinities are refused, and so is a value
    whose arrays and objects nest deeper than `MAX_DEPTH`: replay must be able to read it back
    wherever the workflow is.
    """
    return check_json_encoded(value, what)[0]


def check_json_encoded(value: object, what: str) -> tuple[Any, bytes]:
    """`check_json`, and the JSON text (UTF-8) the value was checked as, for a caller that
    journals it (`encode_entry`): a value is then encoded once per append, not twice. Replay
    decodes that text, which is exactly what the returned value was decoded from."""
    try:
        try:
            text = _encode(value)
        except RecursionError:  # as deep as the interpreter allows, or a value in itself:
            _dumps(value)  # this encoder tells a cycle (ValueError), or recurses again
            raise
        data = text.encode()  # a lone surrogate passes json.dumps but cannot be written as UTF-8
    except (TypeError, ValueError) as exc:
        raise NotSerializableError(f"{what} is not JSON-serialisable: {exc}") from exc
    except RecursionError:  # the encoder recursed as deep as the value: measure it without
        if not _deeper_than(value, MAX_DEPTH):
            raise
        data = None
    if data is None or too_deep(data, MAX_DEPTH):
        raise NotSerializableError(
            f"{what} is nested deeper than {MAX_DEPTH} arrays and objects, kassette's limit"
        )
    return _SCAN(text, 0)[0], data  # the whole text is one value: it was just encoded


def parse_json(text: str | bytes, what: str = "the value", *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value a person gave (the CLI's `--result`, koto's `--with-data`), or
    `InvalidArgumentError` for anything kassette could not journal as given: not JSON, `NaN`
    or `Infinity` (not JSON), a number too large for a float (`1e999`) or an int (5,000
    digits), or arrays and objects nested more than `max_depth` levels (told before the
    recursive parser runs). The one rule for values typed on a command line."""
    data = text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else text
    if too_deep(data, max_depth):
        raise InvalidArgumentError(f"{what} is nested more than {max_depth} levels deep")
    try:
        value = json.loads(data, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:  # unreachable past too_deep; kept as the parser's own guard
        raise InvalidArgumentError(f"{what} is nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # also UnicodeDecodeError, and int()'s digit limit
        raise InvalidArgumentError(f"not valid JSON: {exc}") from None
    if b"\\u" in data and _ESCAPED_SURROGATE.search(data):
        try:  # "\ud800" is JSON, but a lone surrogate is no character a journal can hold
            _dumps(value).encode()
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"{what} holds a lone surrogate such as \\ud800") from None
    return value


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is too large for a number")
    return number


def _encode(value: object) -> str:
    """`_ENCODER.encode(value)` without its per-call set-up, for the append path. It keeps no
    table of the containers it is inside (which one call at a time could use), so a value that
    contains itself raises `RecursionError`, as a too deep one does, not `ValueError`."""
    return "".join(_C_ENCODE(value, 0)) if _C_ENCODE is not None else _dumps(value)


def json_text(value: object) -> str:
    """`to_json(value)` for a value decoded from JSON text (so without cycles, and not too
    deep: see `_encode`), at a third of its cost: explore writes a run's params, input and
    result back as text for every run it loads."""
    return _encode(value)


def new_run_id() -> str:
    """A fresh run id: a uuid4 in hex."""
    import uuid  # imported when first needed, to keep `import kassette` light

    return uuid.uuid4().hex


def to_json(value: object) -> str:
    """`value` as compact JSON text: the encoding of every journal line and of every JSON value
    kassette prints. `ValueError` for NaN and infinities, `TypeError` for what is not JSON."""
    return _dumps(value)


def encode(entry: Mapping[str, Any]) -> bytes:
    """One entry as its journal line: compact JSON, UTF-8, `\\n`-terminated."""
    return (_dumps(entry) + "\n").encode()


def encode_entry(
    kind: str,
    session: int,
    offset: int,
    timestamp: str,
    fields: Mapping[str, Any],
    raw: tuple[str, bytes] | None = None,
) -> tuple[Entry, bytes]:
    """The entry `{"type": kind, "session": session, "offset": offset, "timestamp": timestamp,
    **fields}` and its journal line, byte for byte `encode(entry)`: how an open session
    writes each entry. The envelope is written by a template and the fields' strings and
    numbers directly (the JSON encoder costs about a microsecond per key).

    `raw` is (a key of `fields`, that value's JSON text as `check_json_encoded` gave it): a
    value is not encoded twice. The line then decodes to the entry (and is `encode`'s
    bytes unless the original value had keys JSON merged, say 1 and "1": the line holds both,
    and decoding keeps the last, as the round trip did).
    """
    entry = {"type": kind, "session": session, "offset": offset, "timestamp": timestamp, **fields}
    text = (
        f'{{"type":{_TEXT(kind)},"session":{session:d},"offset":{offset:d},'
        f'"timestamp":{_TEXT(timestamp)}'
    )
    if raw is None:
        for name, item in fields.items():
            text += f",{_TEXT(name)}:{_scalar(item)}"
        return entry, (text + "}\n").encode()
    key, value = raw
    parts = []
    for name, item in fields.items():
        if name == key:
            parts.append((text + f",{_TEXT(name)}:").encode())
            parts.append(value)
            text = ""
        else:
            text += f",{_TEXT(name)}:{_scalar(item)}"
    parts.append((text + "}\n").encode())
    return entry, b"".join(parts)


def _scalar(value: Any) -> str:
    """`value` as `_ENCODER` writes it, without its call overhead for the strings and numbers
    of an entry's fields (anything else goes to the encoder)."""
    kind = type(value)
    if kind is str:
        return _TEXT(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return _dumps(value)


UTF8_ERRORS = "strict"
"""How a journal line's bytes are read as text, by every reader (`decode_line`, status):
strictly, so invalid bytes, surrogates and overlong forms are corruption."""


def decode_line(line: bytes) -> Any:
    """The JSON value of a journal line (without its `\\n`), by the one rule every reader
    follows: strict UTF-8 (a leading byte order mark is skipped), JSON, arrays and objects
    nested at most `MAX_LINE_DEPTH` deep, no string that UTF-8 cannot hold (an escaped lone
    surrogate). `ValueError` otherwise.

    A line that starts with `{"` goes to the C scanner directly, without `json.loads`'s
    wrappers: every replayed entry is decoded twice (see `Entries`), so the saving counts.
    """
    if line.startswith(b"\xef\xbb\xbf"):  # a byte order mark, as an editor may write one
        line = line[3:]
    text = line.decode("utf-8", UTF8_ERRORS)
    if too_deep(line, MAX_LINE_DEPTH):
        raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} arrays and objects")
    if not line.startswith(b'{"'):
        value = json.loads(text)
    else:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration as stop:  # the scanner's "no value here", as raw_decode says it
            raise json.JSONDecodeError("Expecting value", text, stop.value) from None
        if end != len(text) and text[end:].strip(" \t\n\r"):
            raise json.JSONDecodeError("Extra data", text, end)
    if b"\\u" in line and _ESCAPED_SURROGATE.search(line):
        _dumps(value).encode()  # UnicodeEncodeError (a ValueError) for a lone one
    return value


def decode_vouched(line: bytes) -> Any:
    """`decode_line` for a line known to be UTF-8 text, nested no deeper than `MAX_LINE_DEPTH`
    and free of escaped lone surrogates (as a reader checks a whole journal at once): the JSON
    scanner alone. None for anything but one JSON value that fills the line (a leading byte
    order mark or a trailing blank too): `decode_line` reads those, or says what is wrong."""
    text = line.decode("utf-8", UTF8_ERRORS)
    try:
        value, end = _SCAN(text, 0)  # a leading mark or blank: StopIteration
    except (StopIteration, ValueError):
        return None
    return value if end == len(text) else None


def read_entry(line: bytes, run_id: str, expected: int, line_number: int | None = None) -> Entry:
    """The entry a journal line (without its `\\n`) holds, if it can be the entry at offset
    `expected` (`decode_line`, then `check_entry`); else `JournalCorruptionError` naming the
    run, the line and the offset. Every reader of journal lines reads them with this."""
    try:
        decoded = decode_line(line)
    except ValueError as exc:
        where = f"line {line_number if line_number is not None else expected + 1}"
        raise JournalCorruptionError(
            f"run {run_id}: {where} (offset {expected}) is not a JSON object: {exc}",
            run_id=run_id,
            offset=expected,
        ) from None
    return check_entry(decoded, run_id, expected, line_number)


def plain(line: bytes) -> bool:
    """Whether a line certainly keeps `decode_line`'s rules beyond JSON and UTF-8: nested no
    deeper than `MAX_LINE_DEPTH`, and no escape that may be a lone surrogate. For a reader that
    skips decoding a line (the status of a run does not need a step's result); a line this is
    False for may still decode: decode it to know."""
    return not too_deep(line) and not escapes_surrogate(line)


def shallow(data: bytes) -> bool:
    """Whether no line of `data` can nest deeper than `MAX_LINE_DEPTH`, told by counting its
    opening brackets, all lines at once (see `too_deep`). False says nothing about a line."""
    arrays = data.count(b"[") if b"[" in data else 0  # found by memchr: a fraction of a count
    return arrays + data.count(b"{") <= MAX_LINE_DEPTH


def escapes_surrogate(data: bytes) -> bool:
    """Whether `data` holds an escape that may be a lone surrogate (`\\ud800`); for several
    lines at once, True if any line does (the pattern never spans a line)."""
    # a backslash is found by memchr, a fraction of the search (and of `b"\\u" in data`)
    return b"\\" in data and _ESCAPED_SURROGATE.search(data) is not None


def too_deep(data: bytes, limit: int = MAX_LINE_DEPTH) -> bool:
    """Whether the JSON text `data` nests arrays and objects deeper than `limit`, found
    without recursion (what it protects is the recursive decoder). A text with fewer brackets
    than that cannot be; otherwise strings are cut out and innermost pairs removed, a level at
    a time. A text the removal cannot empty is malformed: left for the parser to refuse."""
    if data.count(b"[") + data.count(b"{") <= limit:  # what `shallow` tells for all lines
        return False
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        inner = _INNERMOST.sub(b"", brackets)
        if inner == brackets:
            return False
        brackets = inner
    return bool(brackets)


def _deeper_than(value: object, limit: int) -> bool:
    """Whether the arrays and objects (lists, tuples, dicts) of `value` nest deeper than
    `limit`, walked without recursion."""
    level: list[object] = [value]
    for _ in range(limit):
        level = [
            inner
            for item in level
            if isinstance(item, list | tuple | dict)
            for inner in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return False
    return any(isinstance(item, list | tuple | dict) for item in level)


# -- the entry types ---------------------------------------------------------------------------


class _Envelope(TypedDict):
    """What every entry has; `offset` is dense from 0, `session` counts invocations from 1."""

    session: int
    offset: int
    timestamp: str


class Source(TypedDict):
    """Where a fork came from: the source run and the offset its copied entries stop before."""

    runId: str
    fromOffset: int


class StartEntry(_Envelope):
    """Opens a session. The first start records the run's input (and `params`, if given); a
    fork's own start has `source` (and the fork's `params`), and `version` names the code that
    continues the run from there."""

    type: Literal["start"]
    metadata: Any
    version: NotRequired[str]
    source: NotRequired[Source]
    params: NotRequired[dict[str, Any]]


class CallRecord(TypedDict):
    """The request of a model call, journaled next to its response (a step's `result`):
    `provider` ("openai", "anthropic"), the SDK `method` (`chat.completions.create`, ...), and
    the `request` as sent, as JSON, without credentials or transport options."""

    provider: str
    method: str
    request: dict[str, Any]


class StepEntry(_Envelope):
    """A step's result, replayed instead of running the step again. `call`: the step is a model
    call and this is its request (see `CallRecord`). `edited`: the result was given to a fork
    (`fork(..., result=...)`), the step never ran."""

    type: Literal["step"]
    stepId: str
    name: str
    result: Any
    call: NotRequired[CallRecord]
    kind: NotRequired[Literal["sleep", "parallel"]]
    attempts: NotRequired[int]
    durationMs: NotRequired[float]
    edited: NotRequired[bool]


class SuspendEntry(_Envelope):
    """The run waits for an event; pending until a resume with the same `eventId`."""

    type: Literal["suspend"]
    eventId: str
    event: str
    reason: NotRequired[str]
    timeoutAt: NotRequired[str]


class ResumeEntry(_Envelope):
    """The value delivered for a suspend; the first one for an `eventId` is final. `edited`:
    the value was given to a fork at that suspend or resume (`fork(..., result=...)`)."""

    type: Literal["resume"]
    eventId: str
    event: str
    value: Any
    edited: NotRequired[bool]


class CompleteEntry(_Envelope):
    type: Literal["complete"]
    result: Any


class ErrorPayload(TypedDict, total=False):
    name: str
    message: str
    traceback: str


class ErrorEntry(_Envelope):
    type: Literal["error"]
    error: ErrorPayload


class CancelEntry(_Envelope):
    type: Literal["cancel"]
    reason: str | None


KnownEntry = (
    StartEntry | StepEntry | SuspendEntry | ResumeEntry | CompleteEntry | ErrorEntry | CancelEntry
)


def check_entry(entry: object, run_id: str, expected: int, line_number: int | None = None) -> Entry:
    """Return `entry` if it can be the entry at offset `expected`, else raise
    `JournalCorruptionError`: a JSON object with the envelope, and for kassette's own types the
    text fields replay and the run's state are keyed by. Every reader checks with this."""
    if type(entry) is dict:
        offset, session, kind = entry.get("offset"), entry.get("session"), entry.get("type")
        if (
            type(offset) is int
            and offset == expected
            and type(session) is int
            and session >= 1
            and type(kind) is str
        ):
            for keys in REQUIRED_TEXT.get(kind, ()):  # on every entry read: no generators
                for key in keys:
                    if type(entry.get(key)) is str:
                        break
                else:
                    break
            else:
                return entry
    _corrupt(entry, run_id, expected, line_number)


def _corrupt(entry: object, run_id: str, expected: int, line_number: int | None) -> NoReturn:
    """Raise the `JournalCorruptionError` that says what is wrong with `entry`."""
    where = f"line {line_number if line_number is not None else expected + 1}"
    if not isinstance(entry, dict):
        raise JournalCorruptionError(
            f"run {run_id}: {where} (offset {expected}) is not a JSON object",
            run_id=run_id,
            offset=expected,
        )
    offset, session = entry.get("offset"), entry.get("session")
    if type(offset) is not int or offset != expected:
        kind = (
            "duplicate offset"
            if isinstance(offset, int) and offset < expected
            else ("offset gap" if isinstance(offset, int) else "missing offset")
        )
        raise JournalCorruptionError(
            f"run {run_id}: {kind} at {where}: expected offset {expected}, got {offset!r}",
            run_id=run_id,
            offset=expected,
        )
    if type(session) is not int or session < 1 or not isinstance(entry.get("type"), str):
        raise JournalCorruptionError(
            f"run {run_id}: {where} (offset {offset}) lacks a valid type or session",
            run_id=run_id,
            offset=offset,
        )
    keys = next(
        keys
        for keys in REQUIRED_TEXT[entry["type"]]
        if not any(isinstance(entry.get(key), str) for key in keys)
    )
    raise JournalCorruptionError(
        f"run {run_id}: {entry['type']} entry at {where} (offset {offset}) lacks "
        f"{' or '.join(map(repr, keys))}",
        run_id=run_id,
        offset=offset,
    )


def event_id(entry: Mapping[str, Any]) -> str:
    """The id of a checked suspend's or resume's event: `eventId`, or upstream's `name`."""
    value = entry.get("eventId")
    return value if isinstance(value, str) else entry["name"]


def event_name(entry: Mapping[str, Any]) -> str:
    """The event a checked suspend waits for (or a resume delivers): `event`, else its id."""
    value = entry.get("event")
    return value if isinstance(value, str) else event_id(entry)


def check_call_record(call: CallRecord, step_id: str, run_id: str) -> CallRecord:
    """A step's `call` field as replay will see it, if it has a `CallRecord`'s shape (else
    `InvalidArgumentError`)."""
    value = check_json(call, f"call of step {step_id!r}")
    if not (
        isinstance(value, dict)
        and isinstance(value.get("provider"), str)
        and isinstance(value.get("method"), str)
        and isinstance(value.get("request"), dict)
    ):
        raise InvalidArgumentError(
            f"the call of step {step_id!r} must be {{'provider': str, 'method': str, "
            f"'request': dict}}, not {call!r}",
            run_id=run_id,
            step_id=step_id,
        )
    return cast(CallRecord, value)
