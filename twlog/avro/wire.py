# -*- test-case-name: tests.avro.test_wire -*-
"""Confluent's wire format: the magic byte 0, the schema id (4 bytes, big-endian), the Avro binary body."""

from __future__ import annotations

import struct

#: The first byte of every framed message.
MAGIC = 0

_HEADER = struct.Struct(">bI")
HEADER_BYTES = _HEADER.size


class WireFormatError(ValueError):
    """A payload that is not in Confluent's wire format (too short, or another magic byte)."""


def frame(schema_id: int, body: bytes) -> bytes:
    """The message for C{body}, Avro written with the schema registered as C{schema_id}."""
    if not 0 <= schema_id <= 0xFFFFFFFF:
        raise ValueError(f"a schema id is a 4-byte unsigned int, not {schema_id}")
    return _HEADER.pack(MAGIC, schema_id) + body


def unframe(payload: bytes) -> tuple[int, memoryview]:
    """The schema id and the Avro body of a framed message.

    @raise WireFormatError: it is shorter than the 5-byte header, or its first byte is not 0.
    """
    if len(payload) < HEADER_BYTES:
        raise WireFormatError(f"{len(payload)} bytes is shorter than the 5-byte header (magic byte 0, schema id)")
    magic, schema_id = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise WireFormatError(f"magic byte {magic & 0xFF} is not 0: not Confluent's Avro wire format")
    return schema_id, memoryview(payload)[HEADER_BYTES:]
