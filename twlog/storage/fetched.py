# -*- test-case-name: tests.storage.test_fetched -*-
"""Reading the message set a fetch returned: its messages, and its corrupt ones in line.

A fetched buffer starts at a log offset and may end in a partial entry (the
fetch cut the set at its byte limit).  L{scan_messages} yields a
L{MessageAndOffset} per valid message and a L{CorruptMessage} per bad one;
L{iter_messages} yields the valid ones and raises at the first bad one;
L{framing_problem} says where a set stops.  The consumers, the blocking client,
the Spark reader and L{twlog.storage.batch} share these.  Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from twlog.errors import FetchSizeTooSmall, InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import CODEC_NONE, DEFAULT_MAX_DECOMPRESSED_BYTES, codec_name
from twlog.storage.crc import crc32
from twlog.storage.entry import LENGTH, MAGIC_PLAIN, MIN_MESSAGE_BYTES, entry_header
from twlog.storage.validation import open_wrapper

__all__ = ["CorruptMessage", "MessageAndOffset", "framing_problem", "iter_messages", "scan_messages"]


class MessageAndOffset(NamedTuple):
    """One decoded message: its offset, the offset to fetch after it, and its payload."""

    offset: int
    next_offset: int
    payload: bytes


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
    size = LENGTH.unpack_from(buf, pos)[0]
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
    unpack = LENGTH.unpack_from
    while pos < n:
        size = unpack(buf, pos)[0] if n - pos >= 4 else -1
        end = pos + 4 + size
        if size < MIN_MESSAGE_BYTES or end > n:
            problem = framing_problem(buf, pos, offset, whole_buffer)
            if problem is not None:
                yield problem
            return
        if buf[pos + 4] == MAGIC_PLAIN:
            # The common entry read inline (a call per message costs this loop a fifth of its speed);
            # entry_header reads every other kind, and says what is wrong with a bad one.
            codec, start, crc = CODEC_NONE, pos + 9, unpack(buf, pos + 5)[0] & 0xFFFFFFFF
        else:
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
