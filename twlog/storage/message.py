# -*- test-case-name: tests.storage.test_message -*-
"""The message and message-set format, shared by the log files and the wire; and writing it.

A message set is a run of entries C{[int32 N][message of N bytes]}, big-endian
(L{twlog.storage.entry} reads one entry's header):

  - magic 0: C{[int8 0][uint32 crc32(payload)][payload]}: 9 bytes of overhead;
  - magic 1: C{[int8 1][int8 attributes][uint32 crc32(payload)][payload]}, where
    attribute bits 0-1 name a codec (0 none, 1 gzip, 2 snappy).  A compressed set
    is one magic-1 wrapper whose payload is the compressed bytes of an inner set.

This module writes sets (L{encode_message}, L{encode_message_set}).  Checking a
set is L{twlog.storage.validation}'s job and reading a fetched one
L{twlog.storage.fetched}'s; their names are re-exported here, where every
caller has always imported them.  Everything is pure (no I/O, no clock).
"""

from __future__ import annotations

from collections.abc import Iterable

from twlog.storage.compression import (
    CODEC_GZIP,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DecompressedTooLarge,
    compress,
    decompress,
)
from twlog.storage.crc import crc32
from twlog.storage.entry import (
    CODEC_MASK,
    HEADER0,
    HEADER1,
    LENGTH_BYTES,
    MAGIC_ATTRIBUTES,
    MAGIC_PLAIN,
    MIN_MESSAGE_BYTES,
    OVERHEAD,
    entry_header,
    entry_problem,
)
from twlog.storage.fetched import CorruptMessage, MessageAndOffset, framing_problem, iter_messages, scan_messages
from twlog.storage.validation import ScanResult, check_wrapper, open_wrapper, scan, validate_message_set

#: The writers defined here, and the names callers have always imported from here (re-exported).
__all__ = (
    "CODEC_GZIP", "CODEC_MASK", "CODEC_NAMES", "CODEC_NONE", "CODEC_SNAPPY", "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LENGTH_BYTES", "MAGIC_ATTRIBUTES", "MAGIC_PLAIN", "MIN_MESSAGE_BYTES", "OVERHEAD",
    "CorruptMessage", "DecompressedTooLarge", "MessageAndOffset", "ScanResult", "check_wrapper", "compress",
    "decompress", "encode_message", "encode_message_set", "entry_header", "entry_problem", "framing_problem",
    "iter_messages", "open_wrapper", "scan", "scan_messages", "validate_message_set",
)


def encode_message(payload: bytes, codec: int | None = None) -> bytes:
    """One message entry, length prefix included.

    With C{codec=None} this is a magic-0 message; with a codec number it is a
    magic-1 message carrying that codec in its attributes (the payload is
    taken as already compressed).
    """
    if codec is None:
        return HEADER0.pack(len(payload) + 5, MAGIC_PLAIN, crc32(payload)) + payload
    return HEADER1.pack(len(payload) + 6, MAGIC_ATTRIBUTES, codec & CODEC_MASK, crc32(payload)) + payload


def encode_message_set(payloads: Iterable[bytes], codec: int = CODEC_NONE) -> bytes:
    """A message set holding C{payloads}, compressed as one wrapper when C{codec} is set."""
    pack = HEADER0.pack
    parts: list[bytes] = []
    append = parts.append
    for payload in payloads:
        append(pack(len(payload) + 5, MAGIC_PLAIN, crc32(payload)))
        append(payload)
    inner = b"".join(parts)
    if codec == CODEC_NONE:
        return inner
    return encode_message(compress(codec, inner), codec)
