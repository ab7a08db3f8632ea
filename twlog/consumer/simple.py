# -*- test-case-name: tests.client.test_consumer -*-
"""The simple consumer: fetch from one broker by offset, ask for offsets, and stream a partition.

Kafka 0.7's SimpleConsumer, on Twisted: the consumer names the topic,
partition and byte offset, and gets the messages with the offset to fetch
next.  Every CRC is checked and a partial trailing entry dropped
(L{scan_messages}).  A corrupt message never hides the valid ones before it: a
fetch returns those, and the next fetch (at the corrupt message's offset)
raises L{CorruptMessage} naming the partition, the message's offset and the
offset after it, or, with C{on_corrupt="skip"}, logs the byte range and goes
on past it.  L{MessageStream} is the async iterator over one partition
that never ends: it uses the waiting fetch (WAIT_FETCH), so an idle consumer is
woken by new data instead of sleeping and polling.  Rewinding is starting a
new fetch or stream at any offset.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import attrs
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.client.connection import BrokerConnection, IBrokerConnection
from twlog.client.options import ClientOptions
from twlog.client.serde import Deserializer, deserialize_all
from twlog.client.sync import check_topic
from twlog.consumer.batches import BatchReader, decode_fetched_batch, too_small
from twlog.errors import (
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    FetchSizeTooSmall,
    OffsetNotOnBoundary,
    ProtocolViolation,
    check,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, LATEST, FetchRequest, OffsetsRequest, WaitFetchRequest
from twlog.storage.batch import MessageBatch
from twlog.storage.message import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    MIN_MESSAGE_BYTES,
    CorruptMessage,
    MessageAndOffset,
    scan_messages,
)

__all__ = ["EARLIEST", "LATEST", "CorruptMessage", "FetchedMessages", "MessageStream", "SimpleConsumer",
           "decode_fetched"]

#: What a consumer does at a corrupt message: raise L{CorruptMessage} (after the valid messages
#: before it), or log its byte range and go on after it.
ON_CORRUPT = ("fail", "skip")

_log = Logger()


def partition_number(topic: str, partition: str | int) -> int:
    """The number a broker knows C{topic}'s C{partition} by: from its name (C{"1-0"}, C{"3"}).

    An int is the number itself: the deprecated form, from when per-broker numbers were the API.

    @raise ValueError: C{partition} is not a partition name.
    """
    if isinstance(partition, TopicPartition):
        return partition.number
    if isinstance(partition, int) and not isinstance(partition, bool):
        warnings.warn(f"partition numbers are deprecated: name {topic}'s partition (such as '<broker id>-{partition}')",
                      DeprecationWarning, stacklevel=3)
        return partition
    return TopicPartition(topic, partition).number


def check_on_corrupt(on_corrupt: str) -> str:
    """C{on_corrupt} if it is one of L{ON_CORRUPT}."""
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be 'fail' or 'skip', not {on_corrupt!r}")
    return on_corrupt


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


def decode_fetched(
    data: bytes, topic: str, partition: int, offset: int, max_bytes: int, *, on_corrupt: str = "fail",
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> FetchedMessages:
    """The messages in the fetched bytes C{data} that start at C{offset}.

    The valid messages before a corrupt one are returned, with C{next_offset}
    at the corrupt one (and C{corrupt} set): a fetch from there raises it.  With
    C{on_corrupt="skip"}, a corrupt message whose length is sane is logged and
    skipped instead.

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
                skipped.append(skip(error))
                next_offset = error.next_offset
            elif messages or skipped:
                return FetchedMessages(tuple(messages), next_offset, error, tuple(skipped))
            else:
                raise error
    except FetchSizeTooSmall:
        if messages or skipped:  # pragma: no cover - scan_messages raises it for a first entry only
            raise
        needed = int.from_bytes(data[:4], "big", signed=True) + 4 if len(data) >= 4 else None
        raise too_small(topic, partition, offset, max_bytes, needed) from None
    return FetchedMessages(tuple(messages), next_offset, None, tuple(skipped))


def skip(error: CorruptMessage) -> CorruptMessage:
    """Log that the corrupt message C{error} is skipped, naming its byte range; return it."""
    _log.warn("skipping the corrupt message at bytes {range} of {topic}-{partition}: {reason}",
              range=error.byte_range, topic=error.topic, partition=error.partition, reason=error.reason)
    return error


async def read_past_refusal(
    connection: IBrokerConnection, topic: str, partition: int, previous: int, offset: int, max_bytes: int,
    refusal: Exception, *, on_corrupt: str = "fail", max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    decode: Callable[..., Any] = decode_fetched,
) -> FetchedMessages:
    """What to make of the broker's refusal (L{OffsetNotOnBoundary}) to read from C{offset}, a message boundary
    (the message at C{previous} ends there): the message at C{offset} is corrupt.  Read it from C{previous},
    whose bytes run into it, and decode from C{offset} as L{decode_fetched} does.

    @raise CorruptMessage: naming C{offset} and, if its length field is sane, the offset after it.
    """
    fetch = FetchRequest(topic, partition, previous, max_bytes + (offset - previous))
    part = (await connection.request(WaitFetchRequest(0, 0, (fetch,)))).parts[0]
    data = check(part, f"broker {connection.address} refused WAIT_FETCH {topic}-{partition}@{previous}").messages
    data = data[offset - previous :]
    if not data:
        raise refusal
    try:
        return decode(data, topic, partition, offset, max_bytes, on_corrupt=on_corrupt,
                      max_decompressed_bytes=max_decompressed_bytes)
    except FetchSizeTooSmall:
        size = int.from_bytes(data[:4], "big", signed=True) if len(data) >= 4 else -1
        after = offset + 4 + size if size >= MIN_MESSAGE_BYTES else None
        error = CorruptMessage(f"the broker refuses to read from it: {refusal}", offset, after, topic, partition)
    if on_corrupt == "skip" and error.next_offset is not None:
        return FetchedMessages((), error.next_offset, None, (skip(error),))
    raise error


async def message_size(connection: BrokerConnection, topic: str, partition: int, offset: int) -> int | None:
    """The size (length field included) of the message at C{offset}, from its first 4 bytes, or None.

    A FETCH of 4 bytes: the broker answers it as Kafka 0.7 would, with the start of the message.
    """
    try:
        data = (await connection.request(FetchRequest(topic, partition, offset, 4))).messages
    except Exception:
        return None
    return int.from_bytes(data, "big", signed=True) + 4 if len(data) == 4 else None


class SimpleConsumer:
    """Fetches from one broker, by topic, partition and offset.

    A partition is named as everywhere (C{"1-0"}; C{"3"} of a replicated topic), and must be one this
    broker leads.  A bare int (the number the broker knows it by) still works, with a DeprecationWarning.

    C{fetch} and C{offsets} share one connection; each L{stream} has its own,
    because a waiting fetch holds back every later answer on its connection.
    """

    _log = Logger()

    def __init__(
        self,
        host: str,
        port: int,
        *,
        reactor=None,
        max_bytes: int = 300 * 1024,
        max_wait_ms: int = 10_000,
        min_bytes: int = 1,
        on_corrupt: str = "fail",
        options: ClientOptions | None = None,
        connection_factory: Callable[[], IBrokerConnection] | None = None,
        deserializer: Deserializer | None = None,
        **overrides: Any,
    ) -> None:
        """@param on_corrupt: C{"fail"}: a corrupt message raises L{CorruptMessage} (after the valid
            messages before it); C{"skip"}: it is logged with its byte range and skipped.
        @param deserializer: C{(topic, payload) -> value} (or a Deferred of it), such as
            L{twlog.avro.AvroDeserializer}: fetches and streams hand out messages whose C{payload} is the value.
        @param overrides: fields of L{ClientOptions} replacing those of C{options} (C{timeout_s=5}...).
        """
        if reactor is None:
            from twisted.internet import reactor
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.host = host
        self.port = port
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self.deserializer = deserializer
        self.clock = reactor
        self.options = ClientOptions.build(options, **overrides).for_fetches(max_bytes)
        if connection_factory is None:

            def connection_factory() -> BrokerConnection:
                return BrokerConnection(host, port, reactor=reactor, options=self.options)

        self._new_connection = connection_factory
        self._connection = connection_factory()
        self._streams: set[MessageStream] = set()
        self._closed = False
        #: Per (topic, partition): the offset of the last message a fetch returned, and the offset after it.
        self._boundaries: dict[tuple[str, int], tuple[int, int]] = {}

    def fetch(
        self,
        topic: str,
        partition: str | int,
        offset: int,
        max_bytes: int | None = None,
        *,
        max_wait_ms: int | None = None,
        min_bytes: int | None = None,
    ) -> Deferred[FetchedMessages]:
        """Fetch up to C{max_bytes} of messages from C{offset}.

        With C{max_wait_ms}, this is a waiting fetch: the broker answers once
        C{min_bytes} (default the consumer's) are readable, or after
        C{max_wait_ms}, possibly with no messages.

        A corrupt message ends the fetch: the valid messages before it are
        returned, and a fetch from it raises L{CorruptMessage} (unless the
        consumer skips corrupt messages).

        @raise OffsetOutOfRange: the offset is outside the log.
        @raise FetchSizeTooSmall: the message at C{offset} is larger than C{max_bytes}.
        @raise CorruptMessage: the message at C{offset} is corrupt (an L{InvalidMessage} naming the
            partition, its offset and the offset after it).
        """
        number = partition_number(topic, partition)
        return Deferred.fromCoroutine(
            self._fetch(self._connection, topic, number, offset, max_bytes or self.max_bytes, max_wait_ms, min_bytes)
        )

    def fetch_batch(self, topic: str, partition: str | int, offset: int, max_bytes: int | None = None
                    ) -> Deferred[MessageBatch]:
        """L{fetch}, decoded as a L{MessageBatch} (L{twlog.storage.batch}): no object per message until iterated."""
        number = partition_number(topic, partition)
        return Deferred.fromCoroutine(self._fetch(self._connection, topic, number, offset,
                                                  max_bytes or self.max_bytes, None, None, decode_fetched_batch))

    def batches(self, topic: str, partition: str | int, offset: int, *, max_bytes: int | None = None,
                end: int | None = None, pipeline: bool = True) -> BatchReader:
        """An async iterator of L{MessageBatch}es from C{offset} (to C{end}, or the log's end), on its own
        connection, asking for each next fetch before the current one is decoded (L{BatchReader})."""
        if self._closed:
            raise ClientClosed("the consumer is closed")
        reader = BatchReader(self, topic, partition_number(topic, partition), offset,
                             max_bytes=max_bytes or self.max_bytes, end=end,
                             pipeline=pipeline)
        self._streams.add(reader)
        return reader

    def offsets(self, topic: str, partition: str | int, time: int = LATEST, max_offsets: int = 1
                ) -> Deferred[list[int]]:
        """Valid offsets before C{time} (L{LATEST} -1, L{EARLIEST} -2, or ms since the epoch), newest first."""
        return Deferred.fromCoroutine(self._offsets(topic, partition_number(topic, partition), time, max_offsets))

    def stream(
        self,
        topic: str,
        partition: str | int,
        offset: int,
        *,
        max_bytes: int | None = None,
        idle_timeout_s: float | None = None,
    ) -> MessageStream:
        """An async iterator over C{topic}-C{partition} from C{offset}, woken by new data.

        It never ends, unless C{idle_timeout_s} is given: then it ends after
        that long without a message.  Its C{next_offset} is where to resume.
        """
        if self._closed:
            raise ClientClosed("the consumer is closed")
        stream = MessageStream(self, topic, partition_number(topic, partition), offset, max_bytes or self.max_bytes,
                               idle_timeout_s)
        self._streams.add(stream)
        return stream

    def close(self) -> Deferred[None]:
        """Close the connection and every stream."""
        self._closed = True
        closing = [self._connection.close(), *(s.close() for s in list(self._streams))]
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)

    # -- internals -----------------------------------------------------------

    async def _fetch(
        self,
        connection: BrokerConnection,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int | None,
        min_bytes: int | None,
        decode: Callable[..., Any] = decode_fetched,
    ) -> FetchedMessages:
        if self._closed:
            raise ClientClosed("the consumer is closed")
        fetch = FetchRequest(topic, partition, offset, max_bytes)
        # Always twlog's WAIT_FETCH (a plain fetch waits 0 ms): on it the broker names every error precisely
        # (FetchSizeTooSmall, OffsetNotOnBoundary...), where FETCH answers as a Kafka 0.7 broker would.
        if max_wait_ms is None:
            request = WaitFetchRequest(0, 0, (fetch,))
        else:
            request = WaitFetchRequest(max_wait_ms, self.min_bytes if min_bytes is None else min_bytes, (fetch,))
        try:
            parts = (await connection.request(request)).parts
            if len(parts) != 1:
                raise ProtocolViolation(
                    f"broker {connection.address} answered a one-part WAIT_FETCH with {len(parts)} parts"
                )
            data = check(
                parts[0], f"broker {connection.address} refused WAIT_FETCH {topic}-{partition}@{offset}"
            ).messages
        except FetchSizeTooSmall:
            needed = await message_size(connection, topic, partition, offset)
            raise too_small(topic, partition, offset, max_bytes, needed) from None
        except OffsetNotOnBoundary as e:
            previous, end = self._boundaries.get((topic, partition), (None, None))
            if end != offset:
                raise
            fetched = await read_past_refusal(
                connection, topic, partition, previous, offset, max_bytes, e, on_corrupt=self.on_corrupt,
                max_decompressed_bytes=self.options.max_decompressed_bytes, decode=decode,
            )
        else:
            fetched = decode(data, topic, partition, offset, max_bytes, on_corrupt=self.on_corrupt,
                             max_decompressed_bytes=self.options.max_decompressed_bytes)
        last = fetched.last_boundary
        if last is not None and last[1] == fetched.next_offset:
            self._boundaries[topic, partition] = last
        if self.deserializer is not None and isinstance(fetched, FetchedMessages):
            fetched = attrs.evolve(fetched, messages=await deserialize_all(self.deserializer, topic, fetched.messages))
        return fetched

    async def _offsets(self, topic: str, partition: int, time: int, max_offsets: int) -> list[int]:
        if self._closed:
            raise ClientClosed("the consumer is closed")
        check_topic(topic, f"OFFSETS {topic}-{partition}")
        response = await self._connection.request(OffsetsRequest(topic, partition, time, max_offsets))
        return list(response.offsets)


class MessageStream:
    """An endless async iterator over one partition, using waiting fetches on its own connection.

    C{next_offset} is the offset after the last message handed out: resume
    (or commit) there.  A fetch whose connection was lost (L{ConnectionLost})
    is retried once (fetches are idempotent; the retry reconnects with backoff, so
    a restarted broker is picked up); if the retry fails too, or the broker
    cannot be reached at all, L{ConnectionFailed} surfaces.
    """

    _log = Logger()

    def __init__(
        self,
        consumer: SimpleConsumer,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.next_offset = offset
        self.max_bytes = max_bytes
        self.idle_timeout_s = idle_timeout_s
        self._consumer = consumer
        self._connection: BrokerConnection | None = None
        self._buffer: deque[MessageAndOffset] = deque()
        self._fetch_offset = offset
        self._closed = False

    def __aiter__(self) -> MessageStream:
        return self

    def __anext__(self) -> Deferred[MessageAndOffset]:
        """The next message (a Deferred, so both C{async for} and the blocking facade can wait on it)."""
        return Deferred.fromCoroutine(self._next())

    def close(self) -> Deferred[None]:
        """Stop: the iteration ends and the stream's connection is closed."""
        self._closed = True
        self._consumer._streams.discard(self)
        if self._connection is None:
            return Deferred.fromCoroutine(_nothing())
        return self._connection.close()

    async def _next(self) -> MessageAndOffset:
        clock = self._consumer.clock
        started = clock.seconds()
        retried = False
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            wait_ms = self._consumer.max_wait_ms
            if self.idle_timeout_s is not None:
                left_ms = int((started + self.idle_timeout_s - clock.seconds()) * 1000)
                if left_ms <= 0:
                    raise StopAsyncIteration
                wait_ms = min(wait_ms, left_ms)
            if self._connection is None:
                self._connection = self._consumer._new_connection()
            try:
                fetched = await self._consumer._fetch(
                    self._connection, self.topic, self.partition, self._fetch_offset, self.max_bytes, wait_ms, None
                )
            except (ConnectionFailed, ClientClosed) as e:
                if self._closed:
                    raise StopAsyncIteration from None
                if retried or not isinstance(e, ConnectionLost):
                    raise
                retried = True  # once: the retry reconnects with backoff, or fails for good
                self._log.info("stream {topic}-{partition}: {error}; retrying", topic=self.topic,
                               partition=self.partition, error=e)
                continue
            retried = False
            self._buffer.extend(fetched.messages)
            self._fetch_offset = fetched.next_offset
        message = self._buffer.popleft()
        self.next_offset = message.next_offset
        return message


async def _nothing() -> None:
    return None
