# -*- test-case-name: tests.client.test_reader -*-
"""The partition reader: the one place the rules for reading a partition live, with no I/O (h11's shape).

A L{PartitionReader} says what to ask a partition's leader next
(L{PartitionReader.next_request}) and makes sense of the answer
(L{PartitionReader.receive}): the bytes of a fetch, or the typed error the
request raised.  The Twisted consumer, the group fetcher, the blocking client
and the Spark workers send the requests and hand the answers back; the rules
are here, once:

  - B{a refused offset}: the broker refuses to read from an offset
    (L{OffsetNotOnBoundary}) where the last message read ends.  The message
    there is corrupt: it is read again from the previous message boundary
    (L{Reread}), whose bytes run into it, and decoded from the refused offset.
  - B{the size probe}: after L{FetchSizeTooSmall}, a 4-byte FETCH
    (L{SizeProbe}) learns the size of the message, which the error then names.
  - B{corrupt messages}: the valid messages before one are returned first;
    then it raises L{CorruptMessage} (C{on_corrupt="fail"}), or is logged with
    its byte range and skipped (C{"skip"}).
  - B{boundaries}: the last message read and the offset after it
    (L{PartitionReader.boundary}), kept for the first rule.
  - B{leader routing}: on L{NotLeader}, L{LeaderNotAvailable} or a lost
    connection (the broker is gone), the reader asks for the layout to be
    refreshed (L{Refresh}) and the same request to be sent again, to the
    partition's leader then; after C{max_refreshes} such answers in a row, the
    error is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from twlog.errors import (
    ConnectionLost,
    FetchSizeTooSmall,
    LeaderNotAvailable,
    NotLeader,
    OffsetNotOnBoundary,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import FetchRequest
from twlog.storage.batch import MessageBatch, decode_batch
from twlog.storage.message import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    MIN_MESSAGE_BYTES,
    CorruptMessage,
    MessageAndOffset,
    scan_messages,
)

__all__ = ["BATCH", "MESSAGES", "ON_CORRUPT", "REFRESH_ON", "Fetch", "Fetched", "FetchedMessages",
           "PartitionReader", "Refresh", "Reread", "SEND_NEXT", "SizeProbe", "check_on_corrupt",
           "decode_fetched", "decode_fetched_batch", "too_small"]

_logger = logging.getLogger(__name__)

#: What a reader does at a corrupt message: raise L{CorruptMessage} (after the valid messages
#: before it), or log its byte range and go on after it.
ON_CORRUPT = ("fail", "skip")
#: The answers that mean "ask the partition's leader, as the layout says now": the broker is gone, or not it.
REFRESH_ON = (NotLeader, LeaderNotAvailable, ConnectionLost)
#: Decode modes: a fetch's messages as L{FetchedMessages}, or as a L{MessageBatch}.
MESSAGES = "messages"
BATCH = "batch"
#: What a reader calls for each corrupt message it skips.
OnSkip = Callable[[CorruptMessage], object]


def check_on_corrupt(on_corrupt: str) -> str:
    """C{on_corrupt} if it is one of L{ON_CORRUPT}."""
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be 'fail' or 'skip', not {on_corrupt!r}")
    return on_corrupt


def log_skip(error: CorruptMessage) -> None:
    """Log (with the standard library's C{logging}) that the corrupt message C{error} is skipped, naming its
    byte range.  Twisted drivers pass their own C{on_skip}, which logs to Twisted's logger."""
    _logger.warning("skipping the corrupt message at bytes %s of %s-%s: %s", error.byte_range, error.topic,
                    error.partition, error.reason)


# -- requests ------------------------------------------------------------------------------------


@attrs.frozen
class Fetch:
    """Fetch C{max_bytes} from C{offset} (sent as twlog's WAIT_FETCH, which names every error precisely)."""

    offset: int
    max_bytes: int

    def part(self, tp: TopicPartition) -> FetchRequest:
        return FetchRequest(tp.topic, tp.number, self.offset, self.max_bytes)


@attrs.frozen
class Reread:
    """Fetch from C{previous}, the message boundary before the refused C{offset}, and decode from C{offset}."""

    previous: int
    offset: int
    max_bytes: int
    refusal: OffsetNotOnBoundary

    def part(self, tp: TopicPartition) -> FetchRequest:
        return FetchRequest(tp.topic, tp.number, self.previous, self.max_bytes + self.offset - self.previous)


@attrs.frozen
class SizeProbe:
    """A 4-byte FETCH (sent as Kafka 0.7's plain FETCH): the length field of the message at C{offset}."""

    offset: int
    #: The fetch size the message did not fit in.
    max_bytes: int

    def part(self, tp: TopicPartition) -> FetchRequest:
        return FetchRequest(tp.topic, tp.number, self.offset, 4)


Request = Fetch | Reread | SizeProbe


# -- events --------------------------------------------------------------------------------------


@attrs.frozen
class Fetched:
    """A fetch's messages (L{FetchedMessages}, a L{MessageBatch}, or what the reader's decode made)."""

    value: Any

    @property
    def next_offset(self) -> int:
        return self.value.next_offset


@attrs.frozen
class Refresh:
    """Refresh the layout (where the partition's leader is), reconnect, then send L{PartitionReader.next_request}."""

    error: Exception
    attempt: int


class _SendNext:
    """Send L{PartitionReader.next_request} (a size probe or a re-read) and hand its answer back."""

    def __repr__(self) -> str:
        return "SEND_NEXT"


SEND_NEXT = _SendNext()


# -- decoding ------------------------------------------------------------------------------------


@attrs.frozen
class FetchedMessages:
    """The messages of one fetch, every CRC checked, and the offset to fetch next."""

    messages: tuple[MessageAndOffset, ...]
    #: Where the next fetch starts: after the last whole message, or the fetch's offset if there was none.
    next_offset: int
    #: The corrupt message at C{next_offset} that ended this fetch: the next fetch raises it.
    corrupt: CorruptMessage | None = None
    #: The corrupt messages skipped (with C{on_corrupt="skip"}), each logged with its byte range.
    skipped: tuple[CorruptMessage, ...] = ()

    def __iter__(self) -> Iterator[MessageAndOffset]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def last_boundary(self) -> tuple[int, int] | None:
        """The last message's offset and the offset after it, or None (as L{MessageBatch.last_boundary})."""
        return (self.messages[-1].offset, self.messages[-1].next_offset) if self.messages else None


def too_small(topic: str, partition: int | str, offset: int, max_bytes: int, needed: int | None) -> FetchSizeTooSmall:
    """The error for a message at C{offset} larger than C{max_bytes}, naming the size C{needed} when known."""
    if needed is None:
        return FetchSizeTooSmall(
            f"the message at offset {offset} of {topic}-{partition} is larger than max_bytes={max_bytes}; "
            f"fetch it with a larger max_bytes"
        )
    return FetchSizeTooSmall(
        f"the message at offset {offset} of {topic}-{partition} is {needed} bytes, larger than "
        f"max_bytes={max_bytes}; fetch it with max_bytes={needed} or more"
    )


def _needed(data: bytes) -> int | None:
    """The size of the entry C{data} starts with (length field included), from its length field."""
    return int.from_bytes(data[:4], "big", signed=True) + 4 if len(data) >= 4 else None


def decode_fetched(
    data: bytes, topic: str, partition: int | str, offset: int, max_bytes: int, *, on_corrupt: str = "fail",
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES, on_skip: OnSkip = log_skip,
) -> FetchedMessages:
    """The messages in the fetched bytes C{data} that start at C{offset}.

    The valid messages before a corrupt one are returned, with C{next_offset} at the corrupt one (and
    C{corrupt} set).  With C{on_corrupt="skip"}, a corrupt message whose length is sane is logged and skipped.

    @raise FetchSizeTooSmall: the first message does not fit in C{max_bytes}.
    @raise CorruptMessage: (an L{InvalidMessage}) the first message is corrupt, and not skipped.
    """
    messages: list[MessageAndOffset] = []
    skipped: list[CorruptMessage] = []
    next_offset = offset
    try:
        for item in scan_messages(data, offset, max_decompressed_bytes=max_decompressed_bytes):
            if type(item) is not CorruptMessage:
                messages.append(item)
                next_offset = item.next_offset
                continue
            error = item.named(topic, partition)
            if on_corrupt == "skip" and error.next_offset is not None:
                on_skip(error)
                skipped.append(error)
                next_offset = error.next_offset
            elif messages or skipped:
                return FetchedMessages(tuple(messages), next_offset, error, tuple(skipped))
            else:
                raise error
    except FetchSizeTooSmall:
        if messages or skipped:  # pragma: no cover - scan_messages raises it for a first entry only
            raise
        raise too_small(topic, partition, offset, max_bytes, _needed(data)) from None
    return FetchedMessages(tuple(messages), next_offset, None, tuple(skipped))


def decode_fetched_batch(
    data: bytes, topic: str, partition: int | str, offset: int, max_bytes: int, *, on_corrupt: str = "fail",
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES, on_skip: OnSkip = log_skip,
) -> MessageBatch:
    """L{decode_fetched}, as a L{MessageBatch} (L{twlog.storage.batch}): no object per message until iterated."""
    try:
        batch = decode_batch(data, offset, topic=topic, partition=partition, on_corrupt=on_corrupt,
                             max_decompressed_bytes=max_decompressed_bytes)
    except FetchSizeTooSmall:
        raise too_small(topic, partition, offset, max_bytes, _needed(data)) from None
    for error in batch.skipped:
        on_skip(error)
    return batch


_DECODERS = {MESSAGES: decode_fetched, BATCH: decode_fetched_batch}


# -- the reader ------------------------------------------------------------------------------------


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


@attrs.define(eq=False, repr=False)
class PartitionReader:
    """Reads one partition from an offset: what to ask next, and what each answer means (see the module).

    @param decode: L{MESSAGES}, L{BATCH}, or C{(reader, data, offset) -> value} (the value has
        C{next_offset} and C{last_boundary}; L{decode_messages} does the corrupt-message rule).
    @param label: how errors and logs name the partition (default: its name).
    @param boundary: a known boundary: the offset of a message and the offset after it.
    @param trusted_start: C{offset} is known to start a message (a committed offset): a refusal there
        means the message is corrupt.  Otherwise such a refusal is raised as it came.
    @param max_refreshes: how many refresh-and-retry answers in a row before the error is raised.
    """

    tp: TopicPartition
    #: Where the next fetch starts.
    offset: int
    max_bytes: int = attrs.field(kw_only=True, validator=_positive)
    on_corrupt: str = attrs.field(kw_only=True, default="fail", converter=check_on_corrupt)
    max_decompressed_bytes: int = attrs.field(kw_only=True, default=DEFAULT_MAX_DECOMPRESSED_BYTES)
    end: int | None = attrs.field(kw_only=True, default=None)
    _decode: str | Callable[..., Any] = attrs.field(kw_only=True, default=MESSAGES)
    label: int | str = attrs.field(kw_only=True, default=attrs.Factory(lambda self: self.tp.name, takes_self=True))
    boundary: tuple[int, int] | None = attrs.field(kw_only=True, default=None)
    trusted_start: bool = attrs.field(kw_only=True, default=False)
    max_refreshes: int = attrs.field(kw_only=True, default=3)
    #: The answers that ask for a refresh (L{REFRESH_ON}; a reader that follows a moving leader adds
    #: L{twlog.errors.ConnectionFailed}: a leader that died cannot be connected to at all).
    refresh_on: tuple[type[BaseException], ...] = attrs.field(kw_only=True, default=REFRESH_ON)
    on_skip: OnSkip = attrs.field(kw_only=True, default=log_skip)
    #: Where reading started.
    start: int = attrs.field(init=False, default=attrs.Factory(lambda self: self.offset, takes_self=True))
    #: Refresh-and-retry answers in a row.
    refreshes: int = attrs.field(init=False, default=0)
    _queued: Request | None = attrs.field(init=False, default=None)
    _sent: Request | None = attrs.field(init=False, default=None)

    def __repr__(self) -> str:
        return f"<PartitionReader {self.tp.topic}/{self.tp.name} at {self.offset}>"

    @property
    def done(self) -> bool:
        """Whether reading reached C{end}."""
        return self.end is not None and self.offset >= self.end

    def next_request(self) -> Request:
        """What to send next: a queued probe, re-read or retry, else a L{Fetch} from L{offset}."""
        request, self._queued = self._queued, None
        self._sent = request if request is not None else Fetch(self.offset, self.max_bytes)
        return self._sent

    def fetch_at(self, offset: int) -> Fetch:
        """A L{Fetch} from C{offset}, sent ahead of the answers before it (a pipelined reader); hand its answer
        to L{receive} with it."""
        return Fetch(offset, self.max_bytes)

    def receive(self, answer: bytes | Exception, request: Request | None = None) -> Fetched | Refresh | _SendNext:
        """What C{answer} (the fetched bytes, or the error the request raised) to C{request} (default: the last
        L{next_request}) means: L{Fetched}, L{SEND_NEXT}, or L{Refresh}.

        @raise FetchSizeTooSmall: naming the size of the message when the probe learnt it.
        @raise CorruptMessage: the message at the offset is corrupt and not skipped.
        @raise BrokerError: any other refusal (L{twlog.errors.OffsetOutOfRange}...), or a refresh error
            answered more than C{max_refreshes} times in a row.
        """
        request = request if request is not None else self._sent
        if request is None:
            raise ValueError("receive() before next_request()")
        if isinstance(request, SizeProbe):
            needed = _needed(answer) if isinstance(answer, bytes | bytearray) and len(answer) == 4 else None
            raise too_small(self.tp.topic, self.label, request.offset, request.max_bytes, needed)
        if isinstance(answer, BaseException):
            return self._refused(request, answer)
        self.refreshes = 0
        if isinstance(request, Reread):
            value = self._reread(request, bytes(answer[request.offset - request.previous :]))
        else:
            value = self.decode(answer, request.offset)
        last = value.last_boundary
        if last is not None and last[1] == value.next_offset:
            self.boundary = last
        self.offset = value.next_offset
        return Fetched(value)

    def decode(self, data: bytes, offset: int) -> Any:
        """C{data}, fetched from C{offset}, decoded as the reader's mode says."""
        if callable(self._decode):
            return self._decode(self, data, offset)
        return self.decode_messages(data, offset, _DECODERS[self._decode])

    def decode_messages(self, data: bytes, offset: int, decoder: Callable[..., Any] = decode_fetched) -> Any:
        """C{data} as L{FetchedMessages} (or with C{decoder}), the corrupt-message rule applied."""
        return decoder(data, self.tp.topic, self.label, offset, self.max_bytes, on_corrupt=self.on_corrupt,
                       max_decompressed_bytes=self.max_decompressed_bytes, on_skip=self.on_skip)

    # -- internals ---------------------------------------------------------------------------------

    def _refused(self, request: Request, error: BaseException) -> Refresh | _SendNext:
        if isinstance(error, self.refresh_on):
            self.refreshes += 1
            if self.refreshes > self.max_refreshes:
                raise error
            self._queued = request
            return Refresh(error, self.refreshes)
        if isinstance(error, FetchSizeTooSmall) and isinstance(request, Fetch):
            self._queued = SizeProbe(request.offset, request.max_bytes)
            return SEND_NEXT
        if isinstance(error, OffsetNotOnBoundary) and isinstance(request, Fetch):
            if self.boundary is not None and self.boundary[1] == request.offset and self.boundary[0] < request.offset:
                self._queued = Reread(self.boundary[0], request.offset, request.max_bytes, error)
                return SEND_NEXT
            if self.trusted_start or request.offset != self.start:
                raise CorruptMessage(f"the broker refuses to read from it: {error}", request.offset, None,
                                     self.tp.topic, self.label)
        raise error

    def _reread(self, request: Reread, data: bytes) -> Any:
        """The bytes from the refused offset, read from the boundary before it: decode them; the message there
        is corrupt if it is not whole in them."""
        offset, refusal = request.offset, request.refusal
        if not data:
            raise refusal
        try:
            return self.decode(data, offset)
        except FetchSizeTooSmall:
            size = int.from_bytes(data[:4], "big", signed=True) if len(data) >= 4 else -1
            after = offset + 4 + size if size >= MIN_MESSAGE_BYTES else None
            error = CorruptMessage(f"the broker refuses to read from it: {refusal}", offset, after,
                                   self.tp.topic, self.label)
        if self.on_corrupt == "skip" and error.next_offset is not None:
            self.on_skip(error)
            return self._skipped(offset, error)
        raise error

    def _skipped(self, offset: int, error: CorruptMessage) -> Any:
        """An empty result of the reader's mode that skipped C{error}."""
        if self._decode == BATCH:
            return MessageBatch(offset, [], error.next_offset, None, (error,))
        return FetchedMessages((), error.next_offset, None, (error,))
