# -*- test-case-name: tests.storage.test_message -*-
"""The message and message-set format, shared by the log files and the wire.

A message set is a run of entries C{[int32 N][message of N bytes]}, big-endian:

  - magic 0: C{[int8 0][uint32 crc32(payload)][payload]}: 9 bytes of overhead;
  - magic 1: C{[int8 1][int8 attributes][uint32 crc32(payload)][payload]}, where
    attribute bits 0-1 name a codec (0 none, 1 gzip, 2 snappy).  A compressed set
    is one magic-1 wrapper whose payload is the compressed bytes of an inner set.

Everything here is pure (no I/O, no clock) and works on whole buffers: the
validator walks a set without building an object per message, so the broker
can check every CRC of an append at memory speed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from twlog.errors import FetchSizeTooSmall, InvalidMessage
from twlog.storage.crc import crc32

try:  # optional: snappy compression (pip install 'twlog[snappy]')
    import cramjam
except ImportError:  # pragma: no cover - depends on the install
    cramjam = None

MAGIC_PLAIN = 0
MAGIC_ATTRIBUTES = 1

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_MASK = 0x03
CODEC_NAMES = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY}

LENGTH_BYTES = 4
#: Bytes an uncompressed (magic 0) message adds to its payload: length, magic, CRC.
OVERHEAD = 9
#: The smallest legal entry size N: a magic-0 message with an empty payload.
MIN_MESSAGE_BYTES = 5

_LENGTH = struct.Struct(">i")
_HEADER0 = struct.Struct(">iBI")  # N, magic, crc
_HEADER1 = struct.Struct(">iBBI")  # N, magic, attributes, crc



class MessageAndOffset(NamedTuple):
    """One decoded message: its offset, the offset to fetch after it, and its payload."""

    offset: int
    next_offset: int
    payload: bytes


class ScanResult(NamedTuple):
    """What a walk over a buffer found: the valid prefix, its message count, and why it stopped."""

    valid_bytes: int
    count: int
    #: None when the whole buffer was valid; otherwise a one-line reason.
    problem: str | None
    #: When C{problem} is set: the stop is an entry that runs past the end of
    #: the buffer (size C{needed} bytes from C{valid_bytes}), not a bad one.
    needed: int = 0


# -- encoding ---------------------------------------------------------------


def encode_message(payload: bytes, codec: int | None = None) -> bytes:
    """One message entry, length prefix included.

    With C{codec=None} this is a magic-0 message; with a codec number it is a
    magic-1 message carrying that codec in its attributes (the payload is
    taken as already compressed).
    """
    if codec is None:
        return _HEADER0.pack(len(payload) + 5, MAGIC_PLAIN, crc32(payload)) + payload
    return _HEADER1.pack(len(payload) + 6, MAGIC_ATTRIBUTES, codec & CODEC_MASK, crc32(payload)) + payload


def encode_message_set(payloads: Iterable[bytes], codec: int = CODEC_NONE) -> bytes:
    """A message set holding C{payloads}, compressed as one wrapper when C{codec} is set."""
    pack = _HEADER0.pack
    parts: list[bytes] = []
    append = parts.append
    for payload in payloads:
        append(pack(len(payload) + 5, MAGIC_PLAIN, crc32(payload)))
        append(payload)
    inner = b"".join(parts)
    if codec == CODEC_NONE:
        return inner
    return encode_message(compress(codec, inner), codec)


# -- validation -------------------------------------------------------------


def scan(buf: bytes | bytearray | memoryview, max_message_bytes: int = 0x7FFFFFFF, origin: int = 0) -> ScanResult:
    """Walk the entries of C{buf} and stop at the first one that is not a whole, valid message.

    A message is valid when its size is sane (at least the header, at most
    C{max_message_bytes}), its magic and codec are known, and its CRC matches.
    Compressed wrappers are checked as one message; their insides are not
    decompressed here.  Problems name byte positions counted from C{origin}
    (the position of C{buf} in a larger file).  No per-message object is built: the loop is the
    broker's hottest, so the common case (magic 0, all well) takes one
    C{unpack_from} and one CRC, and only a failure pays for a diagnosis.
    """
    n = len(buf)
    unpack0 = _HEADER0.unpack_from
    check = crc32
    pos = 0
    count = 0
    while pos < n:
        if n - pos < 9:
            return _diagnose(buf, pos, count, max_message_bytes, origin)
        size, magic, crc = unpack0(buf, pos)
        end = pos + 4 + size
        if size < MIN_MESSAGE_BYTES or size > max_message_bytes or end > n:
            return _diagnose(buf, pos, count, max_message_bytes, origin)
        if magic == MAGIC_PLAIN:
            if check(buf[pos + 9 : end]) != crc:
                return _diagnose(buf, pos, count, max_message_bytes, origin)
        elif (
            magic != MAGIC_ATTRIBUTES
            or size < 6
            or buf[pos + 5] not in _CODECS
            or check(buf[pos + 10 : end]) != _LENGTH.unpack_from(buf, pos + 6)[0] & 0xFFFFFFFF
        ):
            return _diagnose(buf, pos, count, max_message_bytes, origin)
        pos = end
        count += 1
    return ScanResult(pos, count, None)


def _diagnose(
    buf: bytes | bytearray | memoryview, pos: int, count: int, max_message_bytes: int, origin: int
) -> ScanResult:
    """Say why the entry at C{pos} stopped L{scan}."""
    result = _diagnosis(buf, pos, count, max_message_bytes)
    if origin:
        result = result._replace(problem=result.problem.replace(f"at byte {pos}", f"at byte {origin + pos}"))
    return result


def _diagnosis(buf: bytes | bytearray | memoryview, pos: int, count: int, max_message_bytes: int) -> ScanResult:
    n = len(buf)
    if n - pos < 9:
        return ScanResult(pos, count, f"partial message header at byte {pos}", 9)
    size, magic, _ = _HEADER0.unpack_from(buf, pos)
    if size < MIN_MESSAGE_BYTES:
        return ScanResult(pos, count, f"message size {size} at byte {pos} is below the minimum {MIN_MESSAGE_BYTES}")
    if size > max_message_bytes:
        return ScanResult(pos, count, f"message size {size} at byte {pos} exceeds the maximum {max_message_bytes}")
    if pos + 4 + size > n:
        return ScanResult(
            pos, count, f"partial message at byte {pos}: {size} bytes announced, {n - pos - 4} present", size + 4
        )
    if magic not in (MAGIC_PLAIN, MAGIC_ATTRIBUTES):
        return ScanResult(pos, count, f"unknown magic {magic} at byte {pos}")
    if magic == MAGIC_ATTRIBUTES:
        if size < 6:
            return ScanResult(pos, count, f"magic-1 message at byte {pos} is too short")
        if buf[pos + 5] not in _CODECS:
            return ScanResult(pos, count, f"unknown attributes {buf[pos + 5]:#x} at byte {pos}")
    return ScanResult(pos, count, f"CRC mismatch in message at byte {pos}")


def validate_message_set(buf: bytes | bytearray | memoryview, max_message_bytes: int = 0x7FFFFFFF) -> int:
    """Check that C{buf} is whole, valid messages and nothing else; return how many.

    @raise InvalidMessage: naming the first problem and its byte position.
    """
    result = scan(buf, max_message_bytes)
    if result.problem is not None:
        raise InvalidMessage(result.problem)
    return result.count


# -- decoding ---------------------------------------------------------------


def iter_messages(
    buf: bytes | bytearray | memoryview, offset: int, *, deep: bool = True, whole_buffer: bool = False
) -> Iterator[MessageAndOffset]:
    """Decode the messages of a fetched buffer that starts at log C{offset}.

    A partial last entry (a fetch cuts the set at its byte limit) is dropped,
    unless it is the only entry and C{buf} is full: then the message is larger
    than the fetch size, and L{FetchSizeTooSmall} says so rather than stall.
    Every CRC is checked.  With C{deep}, compressed wrappers are opened; their
    inner messages carry the wrapper's offset, and the last one the offset
    after the wrapper, so that a consumer committing C{next_offset} never skips
    a message.

    @param whole_buffer: the buffer is a complete set (not cut by a fetch
        limit), so any partial entry is an error.
    @raise InvalidMessage: on a CRC mismatch or malformed entry.
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    n = len(buf)
    pos = 0
    while pos < n:
        if n - pos < 4:
            if pos == 0 and not whole_buffer:  # a fetch of 1-3 bytes: not even the size fits
                raise FetchSizeTooSmall(f"the message at offset {offset} is larger than the fetch size {n}")
            break
        size = _LENGTH.unpack_from(buf, pos)[0]
        end = pos + 4 + size
        if size < MIN_MESSAGE_BYTES:
            raise InvalidMessage(f"message size {size} at offset {offset + pos} is below the minimum")
        if end > n:
            if pos == 0 and not whole_buffer:
                raise FetchSizeTooSmall(
                    f"the message at offset {offset} is {size + 4} bytes, larger than the fetch size {n}"
                )
            break
        magic = buf[pos + 4]
        if magic == MAGIC_PLAIN:
            crc = _LENGTH.unpack_from(buf, pos + 5)[0] & 0xFFFFFFFF
            start = pos + 9
            codec = CODEC_NONE
        elif magic == MAGIC_ATTRIBUTES and size >= 6:
            codec = buf[pos + 5]
            crc = _LENGTH.unpack_from(buf, pos + 6)[0] & 0xFFFFFFFF
            start = pos + 10
        else:
            raise InvalidMessage(f"unknown magic {magic} at offset {offset + pos}")
        payload = buf[start:end]
        if crc32(payload) != crc:
            raise InvalidMessage(f"CRC mismatch in the message at offset {offset + pos}")
        if codec == CODEC_NONE or not deep:
            yield MessageAndOffset(offset + pos, offset + end, payload)
        else:
            inner = list(iter_messages(decompress(codec, payload), 0, deep=True, whole_buffer=True))
            for i, message in enumerate(inner):
                last = i == len(inner) - 1
                yield MessageAndOffset(offset + pos, offset + end if last else offset + pos, message.payload)
        pos = end
    if whole_buffer and pos != n:
        raise InvalidMessage(f"partial message at offset {offset + pos}")


# -- compression ------------------------------------------------------------

_SNAPPY_JAVA_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_JAVA_HEADER = struct.Struct(">8sii")
_SNAPPY_BLOCK = 32 * 1024


def _snappy():
    if cramjam is None:  # pragma: no cover - depends on the install
        raise InvalidMessage("snappy needs the cramjam package: pip install 'twlog[snappy]'")
    return cramjam.snappy


def _gzip_compress(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: gzip framing
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: bytes) -> bytes:
    return zlib.decompress(data, 47)  # 47: gzip or zlib framing


def _snappy_compress(data: bytes) -> bytes:
    """snappy-java's stream framing, as Kafka 0.7 clients wrote it: a header, then length-prefixed blocks."""
    snappy = _snappy()
    parts = [_SNAPPY_JAVA_HEADER.pack(_SNAPPY_JAVA_MAGIC, 1, 1)]
    for start in range(0, len(data), _SNAPPY_BLOCK):
        block = bytes(snappy.compress_raw(data[start : start + _SNAPPY_BLOCK]))
        parts.append(_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes) -> bytes:
    snappy = _snappy()
    if not data.startswith(_SNAPPY_JAVA_MAGIC):
        return bytes(snappy.decompress_raw(data))
    parts = []
    pos = _SNAPPY_JAVA_HEADER.size
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidMessage("truncated snappy block header")
        size = _LENGTH.unpack_from(data, pos)[0]
        if size < 0 or pos + 4 + size > len(data):
            raise InvalidMessage("truncated snappy block")
        parts.append(bytes(snappy.decompress_raw(data[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    return b"".join(parts)


_CODECS = {
    CODEC_NONE: (bytes, bytes),
    CODEC_GZIP: (_gzip_compress, _gzip_decompress),
    CODEC_SNAPPY: (_snappy_compress, _snappy_decompress),
}


def compress(codec: int, data: bytes) -> bytes:
    """Compress C{data} with C{codec} (a CODEC_* number)."""
    try:
        return _CODECS[codec][0](data)
    except KeyError:
        raise InvalidMessage(f"unknown codec {codec}") from None


def decompress(codec: int, data: bytes) -> bytes:
    """Decompress a wrapper payload; a corrupt payload is L{InvalidMessage}."""
    try:
        function = _CODECS[codec][1]
    except KeyError:
        raise InvalidMessage(f"unknown codec {codec}") from None
    try:
        return function(data)
    except InvalidMessage:
        raise
    except Exception as e:
        raise InvalidMessage(f"cannot decompress a codec-{codec} message: {e}") from None
