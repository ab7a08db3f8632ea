# -*- test-case-name: tests.storage.test_message -*-
"""One entry of a message set: its layout, and the reading of its header.

An entry is C{[int32 N][message of N bytes]}, big-endian:

  - magic 0: C{[int8 0][uint32 crc32(payload)][payload]}: 9 bytes of overhead;
  - magic 1: C{[int8 1][int8 attributes][uint32 crc32(payload)][payload]}, where
    attribute bits 0-1 name a codec (0 none, 1 gzip, 2 snappy).

The writer (L{twlog.storage.message}), the validator (L{twlog.storage.validation})
and the readers of fetched sets (L{twlog.storage.fetched}, L{twlog.storage.batch})
all read an entry's header here, so there is one reading of it.  Pure.
"""

from __future__ import annotations

import struct

from twlog.storage.compression import CODEC_NONE, KNOWN_CODECS
from twlog.storage.crc import crc32

__all__ = [
    "CODEC_MASK", "HEADER0", "HEADER1", "LENGTH", "LENGTH_BYTES", "MAGIC_ATTRIBUTES", "MAGIC_PLAIN",
    "MIN_MESSAGE_BYTES", "OVERHEAD", "entry_header", "entry_problem",
]

MAGIC_PLAIN = 0
MAGIC_ATTRIBUTES = 1

CODEC_MASK = 0x03

LENGTH_BYTES = 4
#: Bytes an uncompressed (magic 0) message adds to its payload: length, magic, CRC.
OVERHEAD = 9
#: The smallest legal entry size N: a magic-0 message with an empty payload.
MIN_MESSAGE_BYTES = 5

LENGTH = struct.Struct(">i")
HEADER0 = struct.Struct(">iBI")  # N, magic, crc
HEADER1 = struct.Struct(">iBBI")  # N, magic, attributes, crc


def entry_header(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int, int] | str:
    """The codec, payload start and CRC of the entry C{buf[pos:end]} (its length sane), or what is wrong with it."""
    magic = buf[pos + 4]
    if magic == MAGIC_PLAIN:
        return CODEC_NONE, pos + 9, LENGTH.unpack_from(buf, pos + 5)[0] & 0xFFFFFFFF
    if magic != MAGIC_ATTRIBUTES:
        return f"unknown magic {magic}"
    if end - pos < 10:
        return "magic-1 message too short"
    if buf[pos + 5] not in KNOWN_CODECS:
        return f"unknown attributes {buf[pos + 5]:#x}"
    return buf[pos + 5], pos + 10, LENGTH.unpack_from(buf, pos + 6)[0] & 0xFFFFFFFF


def entry_problem(buf: bytes | bytearray | memoryview, pos: int, end: int) -> str | None:
    """What is wrong with the whole entry C{buf[pos:end]} (magic, attributes, CRC), or None."""
    header = entry_header(buf, pos, end)
    if isinstance(header, str):
        return header
    _, start, crc = header
    return "CRC mismatch" if crc32(buf[start:end]) != crc else None
