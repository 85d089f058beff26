"""Timestamps: the journal's one format for a moment (ISO 8601 UTC, milliseconds, `Z`), and the
one way every reader parses one (any ISO 8601 form Python reads; no zone means UTC).

`kassette._codec` re-exports these names, where they were first defined.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["format_timestamp", "parse_moment", "parse_timestamp"]


def format_timestamp(epoch_seconds: float) -> str:
    """ISO 8601 UTC with milliseconds and `Z`, the journal's one timestamp format."""
    global _last_second
    millis = round(epoch_seconds * 1000)  # not int(): 1.001 * 1000 is 1000.999...
    seconds, ms = divmod(millis, 1000)
    cached_seconds, prefix = _last_second
    if seconds != cached_seconds:  # strftime is most of the cost; appends come many a second
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _last_second = (seconds, prefix)
    return f"{prefix}.{ms:03d}Z"


_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00")  # (epoch second, its text)


def parse_moment(text: str) -> datetime:
    """A journal timestamp as an aware UTC datetime: any ISO 8601 form Python reads, one
    without a zone taken as UTC. `ValueError` for anything else. Every reader parses with it."""
    from datetime import UTC, datetime  # imported when first needed, to keep imports light

    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch for a journal timestamp (see `parse_moment`). A timestamp in the
    journal's own format (`format_timestamp`) is read without a `datetime` (`kassette list`
    reads one per run): the same number, as both divide the same whole milliseconds."""
    moment = _CANONICAL_MOMENT.fullmatch(text)
    if moment is not None:
        day, hours, minutes, seconds, millis = moment.groups()
        days = _epoch_days.get(day)
        if days is None:
            days = _days_since_epoch(day)
        hour, minute, second = int(hours), int(minutes), int(seconds)
        if days is not None and hour < 24 and minute < 60 and second < 60:
            return ((((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + int(millis)) / 1000
    return parse_moment(text).timestamp()


_CANONICAL_MOMENT = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z", re.ASCII)
_epoch_days: dict[str, int] = {}  # the dates `parse_timestamp` met, as days since 1970-01-01


def _days_since_epoch(day: str) -> int | None:
    """Days from 1970-01-01 to the date `day` (YYYY-MM-DD), remembered; None if it is none."""
    from datetime import date

    try:
        days = date.fromisoformat(day).toordinal() - 719_163  # date(1970, 1, 1).toordinal()
    except ValueError:
        return None
    if len(_epoch_days) >= 4096:  # a store's runs span few days; never grow without bound
        _epoch_days.clear()
    _epoch_days[day] = days
    return days
