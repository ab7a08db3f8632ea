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
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from twlog.errors import FetchSizeTooSmall, InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import (
    CODEC_GZIP,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    KNOWN_CODECS,
    DecompressedTooLarge,
    codec_name,
    compress,
    decompress,
)
from twlog.storage.crc import crc32

__all__ = [
    "CODEC_GZIP", "CODEC_NAMES", "CODEC_NONE", "CODEC_SNAPPY", "DEFAULT_MAX_DECOMPRESSED_BYTES", "CorruptMessage",
    "DecompressedTooLarge", "MessageAndOffset", "ScanResult", "check_wrapper", "compress", "decompress",
    "encode_message", "open_wrapper",
    "encode_message_set", "iter_messages", "scan", "scan_messages", "validate_message_set",
]

MAGIC_PLAIN = 0
MAGIC_ATTRIBUTES = 1

CODEC_MASK = 0x03

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
    #: When C{problem} is set: the stop is an entry larger than the maximum (its size N), not a bad one.
    oversize: int = 0


class CorruptMessage(InvalidMessage):
    """A stored message that cannot be read: where it is, where the next one starts, and why.

    Readers hand out the valid messages before it first, then raise this (or,
    told to skip, log it and go on at C{next_offset}).  C{next_offset} is None
    when the message's length field is not sane, so where the next message
    starts is unknown and the message cannot be skipped.
    """

    def __init__(self, reason: str, offset: int, next_offset: int | None, topic: str | None = None,
                 partition: int | str | None = None) -> None:
        self.reason = reason
        self.offset = offset
        self.next_offset = next_offset
        self.topic = topic
        self.partition = partition
        where = f"{topic}-{partition}: " if topic is not None else ""
        if next_offset is None:
            after = "where the next message starts is unknown (its length field is not sane, or not readable)"
        else:
            after = f"the next message starts at offset {next_offset}"
        super().__init__(f"{where}the message at offset {offset} is corrupt ({reason}); {after}")

    def __reduce__(self):
        return (CorruptMessage, (self.reason, self.offset, self.next_offset, self.topic, self.partition))

    @property
    def byte_range(self) -> str:
        """C{[offset, next_offset)} as text, for logs."""
        return f"[{self.offset}, {self.next_offset if self.next_offset is not None else '?'})"

    def named(self, topic: str, partition: int | str) -> CorruptMessage:
        """This error, naming the partition it was found in."""
        return CorruptMessage(self.reason, self.offset, self.next_offset, topic, partition)


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


def scan(
    buf: bytes | bytearray | memoryview,
    max_message_bytes: int = 0x7FFFFFFF,
    origin: int = 0,
    wrappers: list[int] | None = None,
) -> ScanResult:
    """Walk the entries of C{buf} and stop at the first one that is not a whole, valid message.

    A message is valid here when its size is sane (at least the header, at most
    C{max_message_bytes}), its magic and attributes are known (a codec, no other
    bit), and its CRC matches.  Compressed wrappers are checked as one message,
    not opened: their positions are appended to C{wrappers} when given, for
    L{validate_message_set} to open.  Problems name byte positions counted from
    C{origin} (the position of C{buf} in a larger file).  No per-message object
    is built: the loop is the broker's hottest, so the common case (magic 0, all
    well) takes one C{unpack_from} and one CRC, and only a failure pays for a
    diagnosis.
    """
    n = len(buf)
    unpack0 = _HEADER0.unpack_from
    check = crc32
    pos = 0
    count = 0
    try:
        while pos < n:
            size, magic, crc = unpack0(buf, pos)  # struct.error: fewer than 9 bytes left
            end = pos + 4 + size
            if size < MIN_MESSAGE_BYTES or size > max_message_bytes or end > n:
                return _diagnose(buf, pos, count, max_message_bytes, origin)
            if magic == MAGIC_PLAIN:
                if check(buf[pos + 9 : end]) != crc:
                    return _diagnose(buf, pos, count, max_message_bytes, origin)
            elif (
                magic != MAGIC_ATTRIBUTES
                or size < 6
                or buf[pos + 5] not in KNOWN_CODECS
                or check(buf[pos + 10 : end]) != _LENGTH.unpack_from(buf, pos + 6)[0] & 0xFFFFFFFF
            ):
                return _diagnose(buf, pos, count, max_message_bytes, origin)
            elif buf[pos + 5] and wrappers is not None:
                wrappers.append(pos)
            pos = end
            count += 1
    except struct.error:
        return _diagnose(buf, pos, count, max_message_bytes, origin)
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
        return ScanResult(
            pos, count, f"message size {size} at byte {pos} exceeds the maximum {max_message_bytes}", oversize=size
        )
    if pos + 4 + size > n:
        return ScanResult(
            pos, count, f"partial message at byte {pos}: {size} bytes announced, {n - pos - 4} present", size + 4
        )
    problem = entry_problem(buf, pos, pos + 4 + size)
    if problem == "CRC mismatch":
        problem = "CRC mismatch in message"
    return ScanResult(pos, count, f"{problem} at byte {pos}")


def entry_header(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int, int] | str:
    """The codec, payload start and CRC of the entry C{buf[pos:end]} (its length sane), or what is wrong with it."""
    magic = buf[pos + 4]
    if magic == MAGIC_PLAIN:
        return CODEC_NONE, pos + 9, _LENGTH.unpack_from(buf, pos + 5)[0] & 0xFFFFFFFF
    if magic != MAGIC_ATTRIBUTES:
        return f"unknown magic {magic}"
    if end - pos < 10:
        return "magic-1 message too short"
    if buf[pos + 5] not in KNOWN_CODECS:
        return f"unknown attributes {buf[pos + 5]:#x}"
    return buf[pos + 5], pos + 10, _LENGTH.unpack_from(buf, pos + 6)[0] & 0xFFFFFFFF


def entry_problem(buf: bytes | bytearray | memoryview, pos: int, end: int) -> str | None:
    """What is wrong with the whole entry C{buf[pos:end]} (magic, attributes, CRC), or None."""
    header = entry_header(buf, pos, end)
    if isinstance(header, str):
        return header
    _, start, crc = header
    return "CRC mismatch" if crc32(buf[start:end]) != crc else None


def validate_message_set(
    buf: bytes | bytearray | memoryview,
    max_message_bytes: int = 0x7FFFFFFF,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> int:
    """Check that C{buf} is whole, valid messages and nothing else; return how many.

    Every entry is checked as by L{scan}; then every compressed wrapper is
    decompressed (into at most C{max_decompressed_bytes}) and its inner set
    checked the same way: whole, valid, uncompressed messages, at least one.
    A set that passes is one every reader can read.

    @raise MessageSizeTooLarge: an entry is larger than C{max_message_bytes}, or
        a wrapper decompresses to more than C{max_decompressed_bytes}.
    @raise InvalidMessage: naming the first problem and its byte position.
    """
    n = len(buf)
    if n >= 10:  # the usual compressed produce: one wrapper and nothing else, checked without the general walk
        size, magic, codec, crc = _HEADER1.unpack_from(buf, 0)
        whole = size == n - 4 and size <= max_message_bytes and magic == MAGIC_ATTRIBUTES
        if whole and codec in (CODEC_GZIP, CODEC_SNAPPY) and crc32(memoryview(buf)[10:]) == crc:
            _check_wrapper_at(buf, 0, size, max_decompressed_bytes)
            return 1
    wrappers: list[int] = []
    result = scan(buf, max_message_bytes, wrappers=wrappers)
    if result.problem is not None:
        if result.oversize:
            error = MessageSizeTooLarge(result.problem)
            error.message_size, error.limit = result.oversize, max_message_bytes
            raise error
        raise InvalidMessage(result.problem)
    for pos in wrappers:
        _check_wrapper_at(buf, pos, _LENGTH.unpack_from(buf, pos)[0], max_decompressed_bytes)
    return result.count


def _check_wrapper_at(buf: bytes | bytearray | memoryview, pos: int, size: int, max_decompressed_bytes: int) -> None:
    """L{check_wrapper} on the wrapper of C{size} bytes at C{pos} of C{buf}, its errors naming that position."""
    try:
        check_wrapper(buf[pos + 5], memoryview(buf)[pos + 10 : pos + 4 + size], max_decompressed_bytes)
    except InvalidMessage as e:
        raise InvalidMessage(f"the {codec_name(buf[pos + 5])} message at byte {pos}: {e}") from None
    except DecompressedTooLarge as e:
        error = DecompressedTooLarge(f"the message at byte {pos}: {e}")
        error.limit = e.limit
        raise error from None


def _plain_prefix(buf: bytes | bytearray) -> tuple[int, int]:
    """The end of the run of whole, CRC-valid magic-0 messages at the start of C{buf}, and how many.

    The inner set of a compressed wrapper as 0.7 producers write it; the
    loop of L{scan} without its other cases (about 15% less per message).
    """
    n = len(buf)
    unpack0 = _HEADER0.unpack_from
    check = crc32
    pos = count = 0
    try:
        while pos < n:
            size, magic, crc = unpack0(buf, pos)
            end = pos + 4 + size
            if magic or end > n or size < MIN_MESSAGE_BYTES or check(buf[pos + 9 : end]) != crc:
                break
            pos = end
            count += 1
    except struct.error:
        pass
    return pos, count


def check_wrapper(codec: int, payload: bytes | memoryview, max_decompressed_bytes: int) -> int:
    """Validate a compressed wrapper's payload, as the broker does on append; how many messages it holds.

    Whole-buffer work: the payload is decompressed within the bound (read in
    place, no copy of it), then the inner set is walked once by L{scan}, the
    same loop (one C{unpack_from} and one C-level CRC per message, no
    per-message object) that checks an uncompressed set.

    @raise InvalidMessage: as L{open_wrapper}.
    @raise DecompressedTooLarge: as L{open_wrapper}.
    """
    inner = decompress(codec, payload, max_decompressed_bytes)
    if not inner:
        raise InvalidMessage("it holds no message")
    end, count = _plain_prefix(inner)
    if end == len(inner):
        return count
    nested: list[int] = []
    result = scan(inner, wrappers=nested)  # not all magic 0: the full rules, and the diagnosis
    if nested:
        raise InvalidMessage(f"it holds a compressed message (at byte {nested[0]} inside it): nesting is refused")
    if result.problem is not None:
        raise InvalidMessage(f"inside it, {result.problem}")
    return result.count


def open_wrapper(codec: int, payload: bytes | memoryview, max_decompressed_bytes: int) -> list[bytes]:
    """The payloads of the inner set of a compressed wrapper: decompressed within the bound, every entry checked.

    One pass over the inner set, copying each payload out (L{check_wrapper} validates without copying).

    @raise InvalidMessage: the payload does not decompress, or the inner set is empty,
        malformed, has a bad CRC, or holds a compressed message (nesting is refused).
    @raise DecompressedTooLarge: it decompresses to more than C{max_decompressed_bytes}.
    """
    inner = decompress(codec, payload, max_decompressed_bytes)
    if not isinstance(inner, bytes):
        inner = bytes(inner)  # slices of bytes are the payloads handed out
    payloads: list[bytes] = []
    n = len(inner)
    if not n:
        raise InvalidMessage("it holds no message")
    unpack0 = _HEADER0.unpack_from
    check = crc32
    pos = 0
    while pos < n:
        if n - pos < 9:
            raise InvalidMessage(f"inside it, partial message header at byte {pos}")
        size, magic, crc = unpack0(inner, pos)
        end = pos + 4 + size
        if size < MIN_MESSAGE_BYTES or end > n:
            raise InvalidMessage(f"inside it, {_diagnosis(inner, pos, 0, 0x7FFFFFFF).problem}")
        if magic == MAGIC_PLAIN:
            start = pos + 9
        elif magic == MAGIC_ATTRIBUTES and size >= 6 and inner[pos + 5] == CODEC_NONE:
            start = pos + 10
            crc = _LENGTH.unpack_from(inner, pos + 6)[0] & 0xFFFFFFFF
        elif magic == MAGIC_ATTRIBUTES and size >= 6 and inner[pos + 5] in KNOWN_CODECS:
            raise InvalidMessage(f"it holds a compressed message (at byte {pos} inside it): nesting is refused")
        else:
            raise InvalidMessage(f"inside it, {entry_problem(inner, pos, end)} at byte {pos}")
        body = inner[start:end]
        if check(body) != crc:
            raise InvalidMessage(f"inside it, CRC mismatch in message at byte {pos}")
        payloads.append(body)
        pos = end
    return payloads


# -- decoding ---------------------------------------------------------------


def framing_problem(buf: bytes | bytearray | memoryview, pos: int, offset: int,
                    whole_buffer: bool) -> CorruptMessage | None:
    """Where a message set (from log C{offset}) stops, at an entry whose length field is cut, below the minimum or
    runs past C{buf}: a L{CorruptMessage} with no next offset, or None for a fetch's partial last entry (dropped).
    @raise FetchSizeTooSmall: the entry is the first of a fetched buffer (not C{whole_buffer}) and runs past it."""
    n = len(buf)
    if n - pos < 4:
        if whole_buffer:
            return CorruptMessage(f"a partial length field of {n - pos} bytes", offset + pos, None)
        if pos == 0:  # a fetch of 1-3 bytes: not even the size fits
            raise FetchSizeTooSmall(f"the message at offset {offset} is larger than the fetch size {n}")
        return None
    size = _LENGTH.unpack_from(buf, pos)[0]
    if size < MIN_MESSAGE_BYTES:
        return CorruptMessage(f"its length field says {size} bytes, below the minimum", offset + pos, None)
    if whole_buffer:
        return CorruptMessage(f"{size} bytes announced, {n - pos - 4} present", offset + pos, None)
    if pos == 0:
        raise FetchSizeTooSmall(f"the message at offset {offset} is {size + 4} bytes, larger than the fetch size {n}")
    return None


def scan_messages(
    buf: bytes | bytearray | memoryview,
    offset: int,
    *,
    deep: bool = True,
    whole_buffer: bool = False,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[MessageAndOffset | CorruptMessage]:
    """Decode the messages of a fetched buffer that starts at log C{offset}, reporting bad ones in line.

    Yields a L{MessageAndOffset} per valid message and a L{CorruptMessage}
    (not raised) per bad one, in log order, and goes on after a bad message
    whose length field is sane; it stops after one whose length is not (its
    C{next_offset} is None).  A partial last entry (a fetch cuts the set at its
    byte limit) is dropped, unless it is the only entry and C{buf} is full:
    then the message is larger than the fetch size, and L{FetchSizeTooSmall}
    says so rather than stall.  With C{deep}, compressed wrappers are opened
    (within C{max_decompressed_bytes}, refusing nesting); their inner messages
    carry the wrapper's offset, and the last one the offset after the wrapper,
    so that a consumer committing C{next_offset} never skips a message.  A
    wrapper with anything wrong inside is one bad message.

    @param whole_buffer: the buffer is a complete set (not cut by a fetch
        limit), so a partial entry is a bad one.
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    n = len(buf)
    pos = 0
    unpack = _LENGTH.unpack_from
    while pos < n:
        size = unpack(buf, pos)[0] if n - pos >= 4 else -1
        end = pos + 4 + size
        if size < MIN_MESSAGE_BYTES or end > n:
            problem = framing_problem(buf, pos, offset, whole_buffer)
            if problem is not None:
                yield problem
            return
        header = entry_header(buf, pos, end)
        if header.__class__ is str:
            yield CorruptMessage(header, offset + pos, offset + end)
            pos = end
            continue
        codec, start, crc = header
        payload = buf[start:end]
        if crc32(payload) != crc:
            yield CorruptMessage("CRC mismatch", offset + pos, offset + end)
        elif codec == CODEC_NONE or not deep:
            yield MessageAndOffset(offset + pos, offset + end, payload)
        else:
            try:
                inner = open_wrapper(codec, payload, max_decompressed_bytes)
            except (InvalidMessage, MessageSizeTooLarge) as e:
                yield CorruptMessage(f"{codec_name(codec)} message: {e}", offset + pos, offset + end)
            else:
                here = offset + pos
                for p in inner[:-1]:
                    yield MessageAndOffset(here, here, p)
                yield MessageAndOffset(here, offset + end, inner[-1])
        pos = end


def iter_messages(
    buf: bytes | bytearray | memoryview,
    offset: int,
    *,
    deep: bool = True,
    whole_buffer: bool = False,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[MessageAndOffset]:
    """The valid messages of a fetched buffer that starts at log C{offset} (see L{scan_messages}).

    The valid messages before a bad one are yielded first; then the bad one
    raises.

    @raise CorruptMessage: (an L{InvalidMessage}) naming the bad message's offset and the offset after it.
    @raise FetchSizeTooSmall: the buffer holds only part of its first message.
    """
    for item in scan_messages(buf, offset, deep=deep, whole_buffer=whole_buffer,
                              max_decompressed_bytes=max_decompressed_bytes):
        if type(item) is CorruptMessage:
            raise item
        yield item
