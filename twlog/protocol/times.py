# -*- test-case-name: tests.cli.test_common -*-
"""Times as users write them, for OFFSETS (L{twlog.protocol.codec.OffsetsRequest.time}): C{latest}, C{earliest},
milliseconds since the epoch, or an ISO 8601 date/time.  Shared by the command line and the console.  Pure."""

from __future__ import annotations

from datetime import datetime, timezone

from twlog.protocol.codec import EARLIEST, LATEST

__all__ = ["parse_time"]


def parse_time(text: str) -> int:
    """C{latest}, C{earliest}, milliseconds since the epoch, or an ISO 8601 date/time (UTC unless it says).

    @raise ValueError: none of these, naming what is accepted.
    """
    if text == "latest":
        return LATEST
    if text == "earliest":
        return EARLIEST
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"time {text!r} is not latest, earliest, milliseconds since the epoch, or a date/time like "
            "2024-05-01T12:00:00"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)
