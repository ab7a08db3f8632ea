"""Helpers shared by the storage tests: payloads of a known size, and reading a log back."""

from __future__ import annotations

from twlog.storage.log import Log
from twlog.storage.message import iter_messages

MSG = 100  # payload bytes; each entry is 109 bytes on disk
ENTRY = MSG + 9


def payloads(n: int, start: int = 0) -> list[bytes]:
    """n distinct 100-byte payloads."""
    return [(b"%08d" % i).ljust(MSG, b".") for i in range(start, start + n)]


def read_all(log: Log, offset: int | None = None, max_bytes: int = 4096) -> list[bytes]:
    """Every visible payload from C{offset} (default: the start), fetch by fetch, as a consumer would."""
    offset = log.start_offset if offset is None else offset
    out = []
    while True:
        region = log.read(offset, max_bytes)
        messages = list(iter_messages(region.read(), region.offset))
        if not messages:
            return out
        out.extend(m.payload for m in messages)
        offset = messages[-1].next_offset
