# -*- test-case-name: tests.consumer.test_walk -*-
"""Counting messages in a partition's log by walking their length fields: how many messages lie between two
offsets (a group's lag in messages), and the offset N messages before or after another (a reset by a shift).

Offsets are byte positions (docs/protocol.md), so a count of messages needs the message boundaries in between:
the walk FETCHes from a message start and steps from each length field to the next message
(C{offset + 4 + N}), reading no payload it does not have to (a message longer than a fetch costs one request
for its header).  A walk backwards first asks BOUNDARIES for a message start some way before the offset, then
walks forward from there, widening the window until it holds N messages.  Every walk is bounded in the bytes it
spans (L{MAX_WALK_BYTES}).

C{request} is a broker connection's C{request} (L{twlog.client.connection.BrokerConnection.request}).
"""

from __future__ import annotations

from collections import deque

from twlog.errors import TwlogError
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, LATEST, BoundariesRequest, FetchRequest, OffsetsRequest
from twlog.storage.entry import LENGTH, LENGTH_BYTES, MIN_MESSAGE_BYTES

#: The bytes asked for per FETCH of a walk.
FETCH_CHUNK = 256 * 1024

#: The fewest bytes asked for (enough for a length field and a message header).
MIN_FETCH_BYTES = 64

#: The most bytes of log one walk spans (a shift by N, or a count): beyond it the walk is refused.
MAX_WALK_BYTES = 64 * 1024 * 1024

#: The first window a backward shift looks in, per message asked for (it grows fourfold until it is enough).
_BACK_WINDOW_PER_MESSAGE = 256


class WalkTooFar(TwlogError):
    """A walk would span more than L{MAX_WALK_BYTES} of log."""


async def end_offsets(request, tp: TopicPartition) -> tuple[int, int]:
    """C{(earliest, latest)} of C{tp} (OFFSETS -2 and -1): where its log starts and its (flushed) end."""
    return await _single_offset(request, tp, EARLIEST), await _single_offset(request, tp, LATEST)


async def walk(request, tp: TopicPartition, start: int, end: int, visit, max_bytes: int | None = None) -> int:
    """Call C{visit(offset)} for each message start from C{start} (a message start) up to C{end}, in order,
    while it returns a true value; return where the walk stopped (C{end}, or the offset C{visit} refused).

    @raise WalkTooFar: the walk would pass C{start + max_bytes} (default L{MAX_WALK_BYTES}).
    @raise TwlogError: the log does not hold messages there (a bad length field, no bytes before C{end}).
    """
    max_bytes = MAX_WALK_BYTES if max_bytes is None else max_bytes
    position = start
    while position < end:
        size = min(FETCH_CHUNK, max(end - position, MIN_FETCH_BYTES))
        chunk = (await request(FetchRequest(tp.topic, tp.number, position, size))).messages
        if len(chunk) < LENGTH_BYTES:
            raise TwlogError(f"{tp} has no message at {position} although its log runs to {end}")
        at = 0
        while at + LENGTH_BYTES <= len(chunk) and position < end:
            if position - start > max_bytes:
                raise WalkTooFar(f"walking the messages of {tp} from {start} would read more than {max_bytes:,} "
                                 "bytes of its log")
            size = LENGTH.unpack_from(chunk, at)[0]
            if size < MIN_MESSAGE_BYTES:
                raise TwlogError(f"{tp} has a bad message length {size} at {position}")
            if not visit(position):
                return position
            position += LENGTH_BYTES + size
            at += LENGTH_BYTES + size
    return position


async def count_messages(request, tp: TopicPartition, start: int, end: int, max_bytes: int) -> int | None:
    """How many messages start in C{[start, end)} (C{start} a message start), or None when that spans more than
    C{max_bytes} (not walked)."""
    if end - start > max_bytes:
        return None
    count = 0

    def one(_offset: int) -> bool:
        nonlocal count
        count += 1
        return True

    await walk(request, tp, start, end, one, max_bytes)
    return count


async def shift_offset(request, tp: TopicPartition, offset: int, messages: int) -> tuple[int, bool]:
    """The offset C{messages} messages after C{offset} (before it, when negative), and whether it was clamped to
    the log's earliest offset or end (there were fewer messages that way).

    An offset before the earliest (retention deleted it) shifts from the earliest; one past the end, from the end.

    @raise WalkTooFar: the shift spans more than L{MAX_WALK_BYTES} of log.
    """
    earliest, latest = await end_offsets(request, tp)
    offset = min(max(offset, earliest), latest)
    if messages >= 0:
        return await _forward(request, tp, offset, messages, latest)
    return await _backward(request, tp, offset, -messages, earliest)


async def _forward(request, tp: TopicPartition, offset: int, messages: int, latest: int) -> tuple[int, bool]:
    left = messages

    def step(_offset: int) -> bool:
        nonlocal left
        if left == 0:
            return False
        left -= 1
        return True

    reached = await walk(request, tp, offset, latest, step)
    return reached, left > 0


async def _backward(request, tp: TopicPartition, offset: int, messages: int, earliest: int) -> tuple[int, bool]:
    window = max(4096, messages * _BACK_WINDOW_PER_MESSAGE)
    while True:
        low = max(earliest, offset - window)
        [start] = (await request(BoundariesRequest(tp.topic, tp.number, (low,)))).offsets
        starts: deque[int] = deque(maxlen=messages)
        await walk(request, tp, start, offset, lambda at: starts.append(at) is None)
        if len(starts) == messages:
            return starts[0], False
        if low == earliest:
            return earliest, True
        if window >= MAX_WALK_BYTES:
            raise WalkTooFar(f"shifting {tp} back {messages:,} messages from {offset} would read more than "
                             f"{MAX_WALK_BYTES:,} bytes of its log")
        window = min(window * 4, MAX_WALK_BYTES)


async def _single_offset(request, tp: TopicPartition, time: int) -> int:
    offsets = (await request(OffsetsRequest(tp.topic, tp.number, time, 1))).offsets
    return offsets[0] if offsets else 0
