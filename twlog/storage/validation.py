# -*- test-case-name: tests.storage.test_validation,tests.storage.test_validation_views,tests.storage.test_message -*-
"""Whether a message set is whole, valid messages: the broker's check of every append.

L{scan} walks a buffer and stops at the first entry that is not a whole, valid
message, saying why; L{validate_message_set} is what an append must pass (every
entry, and inside every compressed wrapper); L{check_wrapper} and
L{open_wrapper} check (and open) one compressed wrapper within a bound on what
it decompresses to.  Everything works on whole buffers without building an
object per message, so the broker can check every CRC of an append at memory
speed.  Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import NamedTuple

from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    KNOWN_CODECS,
    DecompressedTooLarge,
    codec_name,
    decompress,
)
from twlog.storage.crc import crc32
from twlog.storage.entry import (
    HEADER0,
    HEADER1,
    LENGTH,
    MAGIC_ATTRIBUTES,
    MAGIC_PLAIN,
    MIN_MESSAGE_BYTES,
    entry_problem,
)
from twlog.storage.kernel import MAGIC1, WRAPPERS, walk

__all__ = [
    "ScanResult", "check_entries", "check_wrapper", "check_wrapper_at", "open_wrapper", "scan", "validate_message_set",
]


#: The kernel walk of L{scan}: every kind of message, compressed wrappers taken whole.
_SET = MAGIC1 | WRAPPERS


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
    is built: the loop is the broker's hottest, so it is the kernel's
    (L{twlog.storage.kernel.walk}, compiled when built), and only a failure pays
    for a diagnosis, in Python.
    """
    n = len(buf)
    pos, positions, _, found = walk(buf, 0, -1, max_message_bytes, _SET)
    if wrappers is not None:
        wrappers.extend(found)
    if pos < n:
        return _diagnose(buf, pos, len(positions) - 1, max_message_bytes, origin)
    return ScanResult(pos, len(positions) - 1, None)


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
    size, magic, _ = HEADER0.unpack_from(buf, pos)
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


def check_entries(
    buf: bytes | bytearray | memoryview, max_message_bytes: int = 0x7FFFFFFF, wrappers: list[int] | None = None
) -> ScanResult:
    """L{scan} C{buf} and raise unless it is whole, valid entries (compressed wrappers are not opened): the
    shallow check of L{validate_message_set}, and all a follower does to the leader's bytes.

    @raise MessageSizeTooLarge: an entry is larger than C{max_message_bytes}.
    @raise InvalidMessage: naming the first problem and its byte position.
    """
    result = scan(buf, max_message_bytes, wrappers=wrappers)
    if result.problem is not None:
        if result.oversize:
            error = MessageSizeTooLarge(result.problem)
            error.message_size, error.limit = result.oversize, max_message_bytes
            raise error
        raise InvalidMessage(result.problem)
    return result


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
        size, magic, codec, crc = HEADER1.unpack_from(buf, 0)
        whole = size == n - 4 and size <= max_message_bytes and magic == MAGIC_ATTRIBUTES
        if whole and codec in (CODEC_GZIP, CODEC_SNAPPY) and crc32(memoryview(buf)[10:]) == crc:
            check_wrapper_at(buf, 0, size, max_decompressed_bytes)
            return 1
    wrappers: list[int] = []
    result = check_entries(buf, max_message_bytes, wrappers)
    for pos in wrappers:
        check_wrapper_at(buf, pos, LENGTH.unpack_from(buf, pos)[0], max_decompressed_bytes)
    return result.count


def check_wrapper_at(buf: bytes | bytearray | memoryview, pos: int, size: int, max_decompressed_bytes: int) -> None:
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
    """The end of the run of whole, CRC-valid uncompressed messages at the start of C{buf}, and how many.

    The inner set of a compressed wrapper: the kernel's walk without wrappers.
    """
    pos, positions, _, _ = walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1)
    return pos, len(positions) - 1


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
    unpack0 = HEADER0.unpack_from
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
            crc = LENGTH.unpack_from(inner, pos + 6)[0] & 0xFFFFFFFF
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
