"""A request as the provider reads it, for comparing two: without the ids the provider
assigned afresh on each call (tool-call ids, item ids, a previous response's id), which a
conversation hands back, so two requests that ask the same compare equal."""

from __future__ import annotations

from typing import Any

from kassette._llm_calls import without_fields

__all__ = ["VOLATILE_REQUEST_FIELDS", "comparable_request"]

VOLATILE_REQUEST_FIELDS = frozenset({"id", "call_id", "tool_call_id", "tool_use_id"})
"""Fields of a request that the provider assigned afresh on each call (the ids of earlier tool
calls and items the conversation hands back): two requests that differ only there ask the same.
`comparable_request()` leaves them out."""
_CONVERSATION_FIELDS = ("messages", "input", "system")  # a request's turns: where the ids are


def comparable_request(request: Any) -> Any:
    """A request without `VOLATILE_REQUEST_FIELDS` (at any depth, but never inside a tool's
    arguments or a tool use's input): two requests that ask the same compare equal."""
    if not isinstance(request, dict):
        return request
    return {
        key: without_fields(item, VOLATILE_REQUEST_FIELDS) if key in _CONVERSATION_FIELDS else item
        for key, item in request.items()
        if key != "previous_response_id"
    }
