"""OTLP/JSON spans as binary protobuf, for `send_otlp`: the wire format of
`opentelemetry/proto/trace/v1/trace.proto`, written directly (no message objects).

Only what the OTLP mapping writes is encoded: spans with ids, names, kinds, times,
attributes (string, bool, int, double and array values), events, links and a status, in one
resource and one instrumentation scope. The tests parse every body with the official
`opentelemetry-proto` messages and compare it with the OTLP/JSON of the same spans.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["request_bytes", "span_field"]

_VARINT, _FIXED64, _LEN = 0, 1, 2
_DOUBLE = struct.Struct("<d")
_FIXED = struct.Struct("<Q")
_DOUBLE_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _varint(number: int) -> bytes:
    number &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def _text(number: int, text: str) -> bytes:
    return _field(number, text.encode()) if text else b""


def _fixed64(number: int, value: int) -> bytes:
    return _varint(number << 3 | _FIXED64) + _FIXED.pack(value) if value else b""


def _enum(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value) if value else b""


def _any_value(value: Mapping[str, Any]) -> bytes:
    # AnyValue's members are a oneof: the one set is written even when it is a default
    ((kind, item),) = value.items()
    if kind == "stringValue":
        return _field(1, item.encode())
    if kind == "boolValue":
        return _varint(2 << 3 | _VARINT) + _varint(int(item))
    if kind == "intValue":
        return _varint(3 << 3 | _VARINT) + _varint(int(item))
    if kind == "doubleValue":
        number = _DOUBLE_WORDS[item] if isinstance(item, str) else float(item)
        return _varint(4 << 3 | _FIXED64) + _DOUBLE.pack(number)
    if kind == "arrayValue":
        return _field(5, b"".join(_field(1, _any_value(v)) for v in item.get("values", [])))
    raise ValueError(f"no protobuf encoding for an AnyValue of {kind}")


def _attributes(number: int, pairs: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(
        _field(number, _text(1, pair["key"]) + _field(2, _any_value(pair["value"])))
        for pair in pairs
    )


def span_field(span: Mapping[str, Any]) -> bytes:
    """One OTLP/JSON span as a `Span` message, in a `ScopeSpans.spans` field."""
    parts = [_field(1, bytes.fromhex(span["traceId"])), _field(2, bytes.fromhex(span["spanId"]))]
    if span.get("parentSpanId"):
        parts.append(_field(4, bytes.fromhex(span["parentSpanId"])))
    parts += [
        _text(5, span.get("name", "")),
        _enum(6, span.get("kind", 0)),
        _fixed64(7, int(span.get("startTimeUnixNano", 0))),
        _fixed64(8, int(span.get("endTimeUnixNano", 0))),
        _attributes(9, span.get("attributes", [])),
    ]
    for event in span.get("events", []):
        body = _fixed64(1, int(event.get("timeUnixNano", 0))) + _text(2, event.get("name", ""))
        parts.append(_field(11, body + _attributes(3, event.get("attributes", []))))
    for link in span.get("links", []):
        body = _field(1, bytes.fromhex(link["traceId"])) + _field(2, bytes.fromhex(link["spanId"]))
        parts.append(_field(13, body + _attributes(4, link.get("attributes", []))))
    if "status" in span:
        status = span["status"]
        parts.append(
            _field(15, _text(2, status.get("message", "")) + _enum(3, status.get("code", 0)))
        )
    return _field(2, b"".join(parts))


def request_bytes(
    resource: list[dict[str, Any]], scope: tuple[str, str], spans: Iterable[bytes]
) -> bytes:
    """An `ExportTraceServiceRequest` of one resource (its attributes, OTLP/JSON) and one
    scope (name, version) holding `spans` (each a `span_field`)."""
    name, version = scope
    scope_spans = _field(1, _text(1, name) + _text(2, version)) + b"".join(spans)
    resource_spans = _field(1, _attributes(1, resource)) + _field(2, scope_spans)
    return _field(1, resource_spans)
