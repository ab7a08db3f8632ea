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

A replicated topic's partition (C{"0"} to C{"P-1"}) is read from its leader,
wherever it is: the consumer asks its broker (CLUSTER_METADATA_V2, L{twlog.client.leaders})
which broker leads it, and reads there; on L{NotLeader}, L{LeaderNotAvailable} or
a lost connection it asks again (after a backoff) and goes on at the same
offset, up to L{FOLLOW_REFRESHES} times in a row.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.client.connection import BrokerConnection, IBrokerConnection
from twlog.client.fetching import log_skip, read
from twlog.client.leaders import FOLLOW_REFRESHES, LeaderFinder
from twlog.client.options import ClientOptions
from twlog.client.reader import (
    BATCH,
    MESSAGES,
    ON_CORRUPT,
    REFRESH_ON,
    FetchedMessages,
    PartitionReader,
    Refresh,
    check_on_corrupt,
    decode_fetched,
)
from twlog.client.serde import Deserializer, deserialize_all
from twlog.client.sync import check_topic
from twlog.consumer.batches import BATCH_MAX_BYTES, BatchReader
from twlog.errors import ClientClosed, ConnectionFailed
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, LATEST, OffsetsRequest
from twlog.storage.batch import MessageBatch
from twlog.storage.message import CorruptMessage, MessageAndOffset

__all__ = ["EARLIEST", "LATEST", "ON_CORRUPT", "CorruptMessage", "FetchedMessages", "MessageStream", "SimpleConsumer",
           "check_on_corrupt", "decode_fetched"]

_log = Logger()


def follows_leader(partition: str | int | TopicPartition, tp: TopicPartition) -> bool:
    """Whether C{partition} (as given) names a replicated topic's partition, read from its leader: a name
    C{"<n>"} (a bare int is the deprecated number on the consumer's broker, read there)."""
    return not isinstance(partition, int) and tp.fixed_leader is None


def partition_identity(topic: str, partition: str | int | TopicPartition) -> TopicPartition:
    """C{topic}'s C{partition}, from its name (C{"1-0"}, C{"3"}).

    An int is the number a broker knows it by: the deprecated form, from when per-broker numbers were the API.

    @raise ValueError: C{partition} is not a partition name.
    """
    if isinstance(partition, TopicPartition):
        return partition
    if isinstance(partition, int) and not isinstance(partition, bool):
        warnings.warn(f"partition numbers are deprecated: name {topic}'s partition (such as '<broker id>-{partition}')",
                      DeprecationWarning, stacklevel=3)
        return TopicPartition(topic, str(partition))
    return TopicPartition(topic, partition)


class SimpleConsumer:
    """Fetches from one broker, by topic, partition and offset.

    A partition is named as everywhere (C{"1-0"}; C{"3"} of a replicated topic).  A 0.7 partition must be
    one this broker holds; a replicated one is read from its leader, which this broker names.
    A bare int (the number the broker knows it by) still works, with a DeprecationWarning.

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
        batch_max_bytes: int = BATCH_MAX_BYTES,
        max_wait_ms: int = 10_000,
        min_bytes: int = 1,
        on_corrupt: str = "fail",
        options: ClientOptions | None = None,
        connection_factory: Callable[[], IBrokerConnection] | None = None,
        deserializer: Deserializer | None = None,
        **overrides: Any,
    ) -> None:
        """@param max_bytes: bytes per fetch of the per-message API (L{fetch}, L{stream}...).
        @param batch_max_bytes: bytes per fetch of the batch readers (L{fetch_batch}, L{batches}): 1 MiB by
            default, where a sendfile broker is fastest (docs/performance.md); the paper's 200 KB stays available.
        @param on_corrupt: C{"fail"}: a corrupt message raises L{CorruptMessage} (after the valid
            messages before it); C{"skip"}: it is logged with its byte range and skipped.
        @param deserializer: C{(topic, payload) -> value} (or a Deferred of it), such as
            L{twlog.avro.AvroDeserializer}: fetches and streams hand out messages whose C{payload} is the value.
        @param overrides: fields of L{ClientOptions} replacing those of C{options} (C{timeout_s=5}...).
        """
        if reactor is None:
            from twisted.internet import reactor
        if max_bytes <= 0 or batch_max_bytes <= 0:
            raise ValueError("max_bytes and batch_max_bytes must be positive")
        self.host = host
        self.port = port
        self.max_bytes = max_bytes
        self.batch_max_bytes = batch_max_bytes
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self.deserializer = deserializer
        self._reactor = reactor
        self.options = ClientOptions.build(options, **overrides).for_fetches(max(max_bytes, batch_max_bytes))
        if connection_factory is None:

            def connection_factory() -> BrokerConnection:
                return BrokerConnection(host, port, reactor=reactor, options=self.options)

        self._new_connection = connection_factory
        self._connection = connection_factory()
        #: Where replicated partitions' leaders are (asked of this consumer's broker).
        self.leaders = LeaderFinder(self._connection, lambda h, p: BrokerConnection(h, p, reactor=reactor,
                                                                                 options=self.options),
                                    reactor, self.options)
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
        tp = partition_identity(topic, partition)
        follow = follows_leader(partition, tp)
        reader = self._reader(tp, offset, max_bytes or self.max_bytes, MESSAGES, follow=follow)
        return Deferred.fromCoroutine(self._fetch_led(reader, max_wait_ms, min_bytes, follow))

    def fetch_batch(self, topic: str, partition: str | int, offset: int, max_bytes: int | None = None
                    ) -> Deferred[MessageBatch]:
        """L{fetch}, decoded as a L{MessageBatch} (L{twlog.storage.batch}): no object per message until iterated."""
        tp = partition_identity(topic, partition)
        follow = follows_leader(partition, tp)
        reader = self._reader(tp, offset, max_bytes or self.batch_max_bytes, BATCH, follow=follow)
        return Deferred.fromCoroutine(self._fetch_led(reader, None, None, follow))

    def batches(self, topic: str, partition: str | int, offset: int, *, max_bytes: int | None = None,
                end: int | None = None, pipeline: bool = True) -> BatchReader:
        """An async iterator of L{MessageBatch}es from C{offset} (to C{end}, or the log's end), on its own
        connection, asking for each next fetch before the current one is decoded (L{BatchReader})."""
        if self._closed:
            raise ClientClosed("the consumer is closed")
        tp = partition_identity(topic, partition)
        reader = BatchReader(self, self._reader(tp, offset, max_bytes or self.batch_max_bytes, BATCH, end=end),
                             pipeline=pipeline)
        self._streams.add(reader)
        return reader

    def offsets(self, topic: str, partition: str | int, time: int = LATEST, max_offsets: int = 1
                ) -> Deferred[list[int]]:
        """Valid offsets before C{time} (L{LATEST} -1, L{EARLIEST} -2, or ms since the epoch), newest first."""
        tp = partition_identity(topic, partition)
        return Deferred.fromCoroutine(self._offsets(tp, time, max_offsets, follows_leader(partition, tp)))

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
        # A lost connection is retried once (the retry reconnects with backoff), then surfaces.
        tp = partition_identity(topic, partition)
        follow = follows_leader(partition, tp)
        reader = self._reader(tp, offset, max_bytes or self.max_bytes, MESSAGES, max_refreshes=1, follow=follow)
        stream = MessageStream(self, reader, idle_timeout_s, follow=follow)
        self._streams.add(stream)
        return stream

    def close(self) -> Deferred[None]:
        """Close the connection and every stream."""
        self._closed = True
        closing = [self._connection.close(), self.leaders.close(), *(s.close() for s in list(self._streams))]
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)

    # -- internals -----------------------------------------------------------

    def _reader(self, tp: TopicPartition, offset: int, max_bytes: int, decode: str, *, follow: bool = False,
                **options: Any) -> PartitionReader:
        """A reader of C{tp} from C{offset} with the consumer's rules, knowing the boundary a fetch found there."""
        # One broker, and a fetch is the caller's to retry; a replicated partition's leader is followed.
        options.setdefault("max_refreshes", 0)
        if follow:
            options["max_refreshes"] = FOLLOW_REFRESHES
            options["refresh_on"] = (*REFRESH_ON, ConnectionFailed)
        return PartitionReader(tp, offset, max_bytes=max_bytes, on_corrupt=self.on_corrupt, decode=decode,
                               max_decompressed_bytes=self.options.max_decompressed_bytes, label=tp.number,
                               boundary=self._boundaries.get((tp.topic, tp.number)), on_skip=log_skip, **options)

    async def _fetch(self, connection: IBrokerConnection, reader: PartitionReader, max_wait_ms: int | None,
                     min_bytes: int | None, on_refresh: Callable[[Refresh], object] | None = None,
                     request: Any = None) -> Any:
        """One fetch of C{reader}'s (always twlog's WAIT_FETCH: a plain fetch waits 0 ms), deserialized."""
        if self._closed:
            raise ClientClosed("the consumer is closed")
        if max_wait_ms is None:
            max_wait_ms, min_bytes = 0, 0
        elif min_bytes is None:
            min_bytes = self.min_bytes
        fetched = await read(connection, reader, request, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                             on_refresh=on_refresh)
        if reader.boundary is not None:
            self._boundaries[reader.tp.topic, reader.tp.number] = reader.boundary
        if self.deserializer is not None and isinstance(fetched, FetchedMessages):
            fetched = attrs.evolve(fetched, messages=await deserialize_all(self.deserializer, reader.tp.topic,
                                                                           fetched.messages))
        return fetched

    async def _fetch_led(self, reader: PartitionReader, max_wait_ms: int | None, min_bytes: int | None,
                         follow: bool) -> Any:
        """L{_fetch} on the consumer's connection, or a replicated partition's leader's (followed on refreshes)."""
        if follow:
            connection = await self.leaders.connection(reader.tp)
            return await self._fetch(connection, reader, max_wait_ms, min_bytes, self.leaders.follow_for(reader.tp))
        return await self._fetch(self._connection, reader, max_wait_ms, min_bytes)

    async def _offsets(self, tp: TopicPartition, time: int, max_offsets: int, follow: bool) -> list[int]:
        if self._closed:
            raise ClientClosed("the consumer is closed")
        check_topic(tp.topic, f"OFFSETS {tp.topic}-{tp.number}")
        request = OffsetsRequest(tp.topic, tp.number, time, max_offsets)
        if follow:
            return list((await self.leaders.request(tp, request)).offsets)
        response = await self._connection.request(request)
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

    def __init__(self, consumer: SimpleConsumer, reader: PartitionReader, idle_timeout_s: float | None = None, *,
                 follow: bool = False) -> None:
        self.topic = reader.tp.topic
        self.partition = reader.tp.number
        self.next_offset = reader.offset
        self.max_bytes = reader.max_bytes
        self.idle_timeout_s = idle_timeout_s
        self._consumer = consumer
        self._reader = reader
        #: Whether the partition is a replicated one, read from its leader wherever it moves.
        self._follow = follow
        self._connection: BrokerConnection | None = None
        self._buffer: deque[MessageAndOffset] = deque()
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
        clock = self._consumer._reactor
        started = clock.seconds()
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
                self._connection = await self._first_connection()
            try:
                fetched = await self._consumer._fetch(self._connection, self._reader, wait_ms, None, self._retrying)
            except (ConnectionFailed, ClientClosed):
                if self._closed:
                    raise StopAsyncIteration from None
                raise
            self._buffer.extend(fetched.messages)
        message = self._buffer.popleft()
        self.next_offset = message.next_offset
        return message

    async def _first_connection(self) -> IBrokerConnection:
        """The stream's own connection: to the consumer's broker, or to a replicated partition's leader."""
        tp = self._reader.tp
        if self._follow:
            host, port = await self._consumer.leaders.address(tp)
            return self._consumer.leaders.connect(host, port)
        return self._consumer._new_connection()

    def _retrying(self, refresh: Refresh) -> Deferred | None:
        """The reader asks to retry: after a lost connection the connection reconnects (with backoff) by itself;
        a replicated partition's leader is asked again, and the stream moves there (L{LeaderFinder.moved})."""
        self._log.info("stream {topic}-{partition}: {error}; retrying", topic=self.topic, partition=self.partition,
                       error=refresh.error)
        if self._follow:
            return Deferred.fromCoroutine(self._moved(refresh))
        return None

    async def _moved(self, refresh: Refresh) -> IBrokerConnection:
        self._connection = await self._consumer.leaders.moved(self._reader.tp, refresh, self._connection)
        return self._connection


async def _nothing() -> None:
    return None
