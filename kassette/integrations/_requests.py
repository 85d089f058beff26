"""A model call's request, as the SDK will send it and as the journal records it.

Recording must never change what the model receives: nothing the user passes may be consumed
or altered by being recorded. Two steps keep that true:

- `sendable(kwargs)` is what goes to the SDK: the user's arguments, with every one-shot
  iterable (a generator of content parts, at any depth) read once into a list, every set made
  a sorted list (a set's order is its hash order, which differs between processes), and a file
  object that cannot be rewound read once into an in-memory copy. Everything else is the
  user's own object, untouched.
- `request_of(kwargs)` is the JSON the journal records for those arguments: what the SDK puts
  on the wire. Arguments not given and transport options are left out, `extra_body` is merged
  in, a pydantic object is its JSON, and a file (an open file, a `BytesIO`, a `pathlib.Path`:
  what the Anthropic SDK sends base64-encoded, as an image's or a document's `data`) is its
  bytes in base64, read without moving the file's position, so that a changed file is a
  changed request.

`without_nulls(request)` is a request as the provider reads it, for comparing two: a key whose
value is null is the same as a key that is absent (SDK versions differ in which they
send for an optional field, and both providers read them alike).
"""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import date, datetime, time
from typing import Any

import pydantic

__all__ = ["TRANSPORT", "request_of", "sendable", "without_nulls"]

# keyword arguments of an SDK method that shape the HTTP exchange, not what the model is asked
TRANSPORT = frozenset({"extra_headers", "extra_query", "timeout"})


def sendable(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments to give the SDK for `kwargs`: equal to them, but with nothing left that
    recording them (or the SDK sending them) could consume or reorder (module docstring)."""
    return {key: _frozen(value) for key, value in kwargs.items()}


def _frozen(value: Any) -> Any:
    if value is None or isinstance(value, str | bytes | bytearray | int | float):
        return value
    if isinstance(value, io.IOBase):
        return value if _rewindable(value) else io.BytesIO(_read_all(value))
    if isinstance(value, pydantic.BaseModel | os.PathLike):
        return value
    if isinstance(value, Mapping):
        items = {key: _frozen(item) for key, item in value.items()}
        # the user's own mapping (a TypedDict, a pydantic-free dict) when nothing in it changed
        same = all(items[key] is item for key, item in value.items())
        return value if same else items
    if isinstance(value, set | frozenset):  # not a dict's keys: those have their order
        return sorted((_frozen(item) for item in value), key=_order)
    if isinstance(value, Iterator):  # a generator, `map`, `iter(...)`: read once, here
        return [_frozen(item) for item in value]
    if isinstance(value, list | tuple):
        items_list = [_frozen(item) for item in value]
        if all(new is old for new, old in zip(items_list, value, strict=True)):
            return value
        return items_list if isinstance(value, list) else tuple(items_list)
    return value


def _order(item: Any) -> str:
    """The canonical order of a set's items: by their JSON text."""
    return json.dumps(_plain(item, ()), sort_keys=True, ensure_ascii=False)


def request_of(kwargs: Mapping[str, Any], omitted: tuple[type, ...]) -> dict[str, Any]:
    """The request an SDK method sends for `kwargs` (already `sendable`), as JSON: arguments
    not given (`omitted` sentinels) and transport options left out, `extra_body` merged in as
    the SDK merges it, pydantic objects (a previous answer's message passed back) as their
    JSON, files as their bytes in base64."""
    request = {
        key: _plain(value, omitted)
        for key, value in kwargs.items()
        if key not in TRANSPORT and key != "extra_body" and not isinstance(value, omitted)
    }
    extra = kwargs.get("extra_body")
    if isinstance(extra, Mapping):
        request.update(_plain(extra, omitted))
    return request


def _plain(value: Any, omitted: tuple[type, ...]) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {
            str(key): _plain(item, omitted)
            for key, item in value.items()
            if not isinstance(item, omitted)
        }
    if isinstance(value, pydantic.BaseModel):  # as the SDKs send one
        return value.model_dump(mode="json", exclude_unset=True, by_alias=True)
    if isinstance(value, io.IOBase | os.PathLike):  # as the Anthropic SDK sends a file
        return base64.b64encode(_file_bytes(value)).decode("ascii")
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted((_plain(item, omitted) for item in value), key=_json_order)
    if isinstance(value, Iterable) and not isinstance(value, bytes | bytearray | Iterator):
        return [_plain(item, omitted) for item in value if not isinstance(item, omitted)]
    # nothing an SDK sends as JSON (or an iterator `sendable` did not see): the SDK will refuse
    # it or read it; the request records what it was, without consuming it
    return str(value)


def _json_order(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


# -- files, read without being consumed ------------------------------------------------------


def _rewindable(file: io.IOBase) -> bool:
    try:
        return file.seekable()
    except (OSError, ValueError):  # a closed file: the SDK will say so
        return False


def _read_all(file: io.IOBase) -> bytes:
    content = file.read()
    return content.encode() if isinstance(content, str) else bytes(content or b"")


def _file_bytes(file: io.IOBase | os.PathLike[Any]) -> bytes:
    """A file's bytes from where the SDK will start reading it, the position left as it was."""
    if isinstance(file, os.PathLike):
        with open(os.fspath(file), "rb") as opened:
            return opened.read()
    if isinstance(file, io.BytesIO):
        return file.getvalue()[file.tell() :]
    if not _rewindable(file):  # `sendable` made it a BytesIO; a closed one reads as empty
        return b""
    position = file.tell()
    try:
        return _read_all(file)
    finally:
        file.seek(position)


# -- comparing requests --------------------------------------------------------------------------


def without_nulls(value: Any) -> Any:
    """A request as the provider reads it: every object key whose value is null left out."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value
