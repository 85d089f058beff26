"""The request comparison every model-call integration shares (`kassette.integrations._recording`):
which path a changed request names, and what counts as a change."""

from __future__ import annotations

from typing import Any

import pytest

from kassette.integrations._recording import first_difference
from kassette.integrations._requests import request_of, sendable


class Sentinel:
    """Stands in for an SDK's `NotGiven`."""


@pytest.mark.parametrize(
    ("recorded", "current", "expected"),
    [
        ({"t": 0.7}, {"t": 0.7}, None),
        ({"t": 1}, {"t": 1.0}, None),  # one JSON number
        ({"t": 1}, {"t": True}, ("t", 1, True)),
        ({"t": 0}, {"t": False}, ("t", 0, False)),
        ({"t": None}, {"t": 0}, ("t", None, 0)),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, None),  # key order is not a difference
        ({"a": 1, "b": 2}, {"b": 3, "a": 0}, ("a", 1, 0)),  # the recorded order decides
        ({"m": [1, 2]}, {"m": [1, 2, 3]}, ("m[2]", "(absent)", 3)),
        ({"m": [{"c": "x"}] * 3}, {"m": [{"c": "x"}] * 2 + [{"c": "y"}]}, ("m[2].c", "x", "y")),
        ({"m": {"user id": 1}}, {"m": {"user id": 2}}, ('m["user id"]', 1, 2)),
        ({"m": []}, {"m": {}}, ("m", [], {})),
        ({"m": "x"}, {"m": ["x"]}, ("m", "x", ["x"])),
        ({"seed": 1}, {}, ("seed", 1, "(absent)")),
        ([1], {"a": 1}, ("(the request)", [1], {"a": 1})),
    ],
)
def test_first_difference_names_the_path(recorded: Any, current: Any, expected: Any) -> None:
    found = first_difference(recorded, current)
    if expected is None:
        assert found is None
        return
    assert found is not None
    path, journal, code = found
    shown = tuple(repr(v) if repr(v) == "(absent)" else v for v in (journal, code))
    assert (path, *shown) == expected


def test_request_of_leaves_out_what_is_not_sent() -> None:
    def numbers() -> Any:
        yield 1
        yield Sentinel()
        yield 2

    request = request_of(
        sendable(
            {
                "model": "m",
                "top_p": Sentinel(),
                "metadata": {"user": "u", "skip": Sentinel()},
                "stop": ("a", "b"),
                "seq": numbers(),
                "timeout": 3,
                "extra_headers": {"x": "1"},
                "extra_query": {"q": "1"},
                "extra_body": {"seed": 7, "model": "override"},
            }
        ),
        (Sentinel,),
    )
    assert request == {
        "model": "override",  # extra_body wins, as the SDKs merge it
        "metadata": {"user": "u"},
        "stop": ["a", "b"],
        "seq": [1, 2],
        "seed": 7,
    }


def test_sendable_consumes_nothing_and_changes_only_what_could_be_consumed() -> None:
    import base64
    import io

    file = io.BytesIO(b"0123456789")
    file.seek(3)  # the SDK reads from where the file stands
    untouched = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    order = {"b": 1, "a": 2}
    kwargs = sendable({
        "messages": [untouched, {"role": "user", "content": (p for p in ["x", "y"])}],
        "stop": {"zeta", "alpha", "mid"},
        "keys": order.keys(),
        "data": file,
    })  # fmt: skip
    assert kwargs["messages"][0] is untouched, "what nothing could consume is the user's own"
    assert kwargs["messages"][1]["content"] == ["x", "y"]
    assert kwargs["stop"] == ["alpha", "mid", "zeta"]
    assert kwargs["keys"] is not None and list(kwargs["keys"]) == ["b", "a"]
    request = request_of(kwargs, ())
    assert request["keys"] == ["b", "a"], "a dict's keys keep their order"
    assert base64.b64decode(request["data"]) == b"3456789"
    assert file.tell() == 3 and kwargs["data"] is file, "the file is read, not consumed"
    assert request_of(kwargs, ()) == request, "recording twice records the same"
