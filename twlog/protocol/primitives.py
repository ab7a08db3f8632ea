# -*- test-case-name: tests.protocol.test_codec,tests.protocol.test_responses -*-
"""The wire's primitive readers and writers: integers, strings, counts (pure, no Twisted).

Readers take C{(buf, pos)} and return C{(value, next_pos)}; a truncated or
malformed input raises L{MalformedRequest}, never C{struct.error}.  The request
codec (L{twlog.protocol.codec}) and the response codec
(L{twlog.protocol.responses}) are both built from these.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from twlog.errors import MalformedRequest

T = TypeVar("T")

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


def need(buf: bytes, pos: int, n: int, what: str) -> None:
    """Raise L{MalformedRequest} unless C{n} (non-negative) bytes are left in C{buf} at C{pos}."""
    if n < 0 or pos + n > len(buf):
        raise MalformedRequest(f"truncated {what} at byte {pos}")


def done(buf: bytes, pos: int, what: str) -> None:
    """Raise L{MalformedRequest} if bytes are left in C{buf} after C{pos}."""
    if pos != len(buf):
        raise MalformedRequest(f"{len(buf) - pos} unexpected bytes after the {what}")


def check_count(count: int) -> None:
    """Raise L{MalformedRequest} for a negative array count."""
    if count < 0:
        raise MalformedRequest(f"negative count {count}")


def read_int16(buf: bytes, pos: int) -> tuple[int, int]:
    """An int16 at C{pos}."""
    need(buf, pos, 2, "int16")
    return I16.unpack_from(buf, pos)[0], pos + 2


def read_int32(buf: bytes, pos: int) -> tuple[int, int]:
    """An int32 at C{pos}."""
    need(buf, pos, 4, "int32")
    return I32.unpack_from(buf, pos)[0], pos + 4


def read_int64(buf: bytes, pos: int) -> tuple[int, int]:
    """An int64 at C{pos}."""
    need(buf, pos, 8, "int64")
    return I64.unpack_from(buf, pos)[0], pos + 8


def read_str(buf: bytes, pos: int) -> tuple[str, int]:
    """An int16-prefixed UTF-8 string at C{pos}."""
    n, pos = read_int16(buf, pos)
    need(buf, pos, n, "string")
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n  # str(): bytes or a memoryview
    except UnicodeDecodeError:
        raise MalformedRequest(f"string at byte {pos} is not UTF-8") from None


def write_str(value: str) -> bytes:
    """An int16-prefixed UTF-8 string."""
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for the protocol")
    return I16.pack(len(data)) + data


def read_many(
    buf: bytes, pos: int, count: int, reader: Callable[[bytes, int], tuple[T, int]]
) -> tuple[tuple[T, ...], int]:
    """C{count} items read one after the other with C{reader}."""
    check_count(count)
    items = []
    for _ in range(count):
        item, pos = reader(buf, pos)
        items.append(item)
    return tuple(items), pos
