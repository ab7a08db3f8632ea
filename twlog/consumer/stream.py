# -*- test-case-name: tests.consumer.test_stream,tests.consumer.test_group -*-
"""A group consumer's streams and its fetch loops: one loop per broker, bounded queues per stream.

A L{GroupStream} is an endless async iterator fed by L{BrokerFetcher}s: each
fetcher sends WAIT_FETCH requests for every partition the consumer owns on
its broker, so an idle consumer is woken by the broker rather than polling.
A stream holds at most C{max_queued} messages: a partition whose stream is
full is left out of the next fetch (back-pressure), and the fetcher is woken
when the stream has room again.  Handing a message to the application moves
its partition's consumed offset (what the group commits) to the message's
C{next_offset}.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import attrs
from twisted.internet.defer import CancelledError, Deferred, DeferredList, fail
from twisted.logger import Logger

from twlog.client.connection import BrokerConnection, IBrokerConnection
from twlog.client.fetching import answer, log_skip
from twlog.client.options import ClientOptions
from twlog.client.reader import SEND_NEXT, Fetched, PartitionReader, check_on_corrupt
from twlog.client.serde import Deserializer, deserialize_one
from twlog.envelope import strip
from twlog.errors import (
    NO_ERROR,
    BrokerError,
    BrokerTimeout,
    ClientClosed,
    ConnectionFailed,
    FetchSizeTooSmall,
    InvalidMessage,
    OffsetOutOfRange,
    ProtocolViolation,
    error_for,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, LATEST, OffsetsRequest, WaitFetchRequest
from twlog.storage.message import DEFAULT_MAX_DECOMPRESSED_BYTES, MessageAndOffset

#: C{auto_offset_reset} values and the OFFSETS time each asks for.
RESET_TIMES = {"smallest": EARLIEST, "largest": LATEST}


class GroupMessage(NamedTuple):
    """A message from a group stream: the L{MessageAndOffset} fields plus where it came from."""

    topic: str
    #: The partition it came from (its C{name} is C{<broker id>-<n>}, or C{<n>} of a replicated topic).
    partition: TopicPartition
    offset: int
    next_offset: int
    payload: bytes


def _of_tp(what: str) -> attrs.Factory:
    """A field's default: that attribute of the partition (kept as a slot: the fetch loop reads it often)."""
    return attrs.Factory(lambda self: getattr(self.tp, what), takes_self=True)


def _from_offset() -> attrs.Factory:
    return attrs.Factory(lambda self: self.fetch_offset, takes_self=True)


@attrs.define(eq=False, repr=False)
class OwnedPartition:
    """A partition a consumer owns in one rebalance generation: where to fetch next and what was consumed."""

    tp: TopicPartition
    #: The broker fetched from: the partition's leader when this generation started.
    leader: int
    stream: GroupStream
    #: The next offset to fetch (None: not known yet, ask the broker per C{auto_offset_reset}).
    fetch_offset: int | None = attrs.field(alias="offset")
    #: The offset after the last message handed to the application: what a commit writes.
    consumed: int | None = attrs.field(init=False, default=_from_offset())
    #: The offset last written to ZooKeeper (None: never, by this owner).
    committed: int | None = attrs.field(init=False, default=_from_offset())
    #: False once the generation that owns it stopped: its data is dropped, it is never fetched again.
    active: bool = attrs.field(init=False, default=True)
    #: Fetching stopped for good after an error that was handed to the application.
    failed: bool = attrs.field(init=False, default=False)
    #: Not fetched before this time (after a broker error on this partition).
    paused_until: float = attrs.field(init=False, default=0.0)
    #: The offset of the last message fetched and the offset after it (a known message boundary).
    boundary: tuple[int, int] | None = attrs.field(init=False, default=None)
    topic: str = attrs.field(init=False, default=_of_tp("topic"))
    name: str = attrs.field(init=False, default=_of_tp("name"))
    #: The number the leader knows it by, in requests.
    number: int = attrs.field(init=False, default=_of_tp("number"))

    def __repr__(self) -> str:
        return f"<OwnedPartition {self.topic}/{self.name} fetch={self.fetch_offset} consumed={self.consumed}>"


class _Chunk:
    """The messages of one fetch of one partition, or an error to hand to the application in their place."""

    __slots__ = ("error", "messages", "owned", "pos")

    def __init__(self, owned: OwnedPartition, messages: tuple[MessageAndOffset, ...] = (),
                 error: Exception | None = None) -> None:
        self.owned = owned
        self.messages = messages
        self.pos = 0
        self.error = error


class GroupStream:
    """One of a group consumer's streams of a topic: an async iterator that never ends (until closed).

    It yields L{GroupMessage}s from the partitions its stream id owns, in
    order within each partition.  If the consumer's rebalance fails, the
    waiting call (or else the next one) raises L{RebalanceFailed}, once; later
    calls wait for a later rebalance to succeed.  An error of one partition (a message larger than C{fetch_max_bytes}, a
    corrupt message) is raised once, in that partition's place.  After the
    consumer is closed, iteration ends.
    """

    def __init__(self, topic: str, stream_id: str, max_queued: int, *, manual_offsets: bool = False,
                 envelope: bool = False, deserializer: Deserializer | None = None) -> None:
        if max_queued < 1:
            raise ValueError("the queue bound must be at least 1 message")
        self.topic = topic
        self.stream_id = stream_id
        self.max_queued = max_queued
        #: Messages fetched and not yet handed out.
        self.queued = 0
        #: Handing a message out does not move its partition's consumed offset (L{GroupConsumer.acknowledge} does).
        self.manual_offsets = manual_offsets
        #: Hand out payloads without their audit envelope (L{twlog.envelope}).
        self.envelope = envelope
        #: C{(topic, payload) -> value}: the messages handed out carry the value as their C{payload}.
        self.deserializer = deserializer
        self._chunks: deque[_Chunk] = deque()
        self._waiters: deque[Deferred[GroupMessage]] = deque()
        self._error: Exception | None = None
        self._closed = False
        #: Nothing is handed out (messages are still queued): the consumer is out of touch with ZooKeeper.
        self.paused = False
        self._room_listeners: list[Callable[[], object]] = []

    def __repr__(self) -> str:
        return f"<GroupStream {self.topic} {self.stream_id} queued={self.queued}>"

    @property
    def full(self) -> bool:
        """Whether the queue is at its bound (its partitions are not fetched meanwhile)."""
        return self.queued >= self.max_queued

    def __aiter__(self) -> GroupStream:
        return self

    def __anext__(self) -> Deferred[GroupMessage]:
        """The next message (a Deferred, so both C{async for} and the blocking facade can wait on it)."""
        if self._closed:
            return fail(StopAsyncIteration())
        if self._error is not None:
            error, self._error = self._error, None
            return fail(error)
        if self._chunks and not self._waiters and not self.paused:
            return self._take()
        d: Deferred[GroupMessage] = Deferred(canceller=self._forget)
        self._waiters.append(d)
        return d

    # -- called by the fetchers and the consumer ------------------------------------------

    def deliver(self, owned: OwnedPartition, messages: tuple[MessageAndOffset, ...]) -> None:
        """Queue fetched C{messages} of C{owned} (dropped if its generation stopped)."""
        if not messages or not owned.active or self._closed:
            return
        self._chunks.append(_Chunk(owned, messages))
        self.queued += len(messages)
        self._hand_out()

    def deliver_error(self, owned: OwnedPartition, error: Exception) -> None:
        """Queue C{error} to be raised, once, after C{owned}'s messages already queued."""
        if owned.active and not self._closed:
            self._chunks.append(_Chunk(owned, error=error))
            self._hand_out()

    def pause(self) -> None:
        """Hand nothing out until L{resume} (fetched messages stay queued, up to the bound)."""
        self.paused = True

    def resume(self) -> None:
        """Hand messages out again, to the calls waiting first."""
        self.paused = False
        self._hand_out()

    def add_room_listener(self, listener: Callable[[], object]) -> None:
        """Call C{listener()} whenever the stream goes from full to having room."""
        self._room_listeners.append(listener)

    def clear(self) -> None:
        """Drop everything queued and forget the room listeners (the consumer stopped fetching)."""
        self._chunks.clear()
        self.queued = 0
        self._room_listeners = []

    def set_error(self, error: Exception | None) -> None:
        """Raise C{error} once: in the calls waiting now, or else in the next call (None: forget it).

        Once is enough to tell the application, and a loop that catches it and
        calls again then waits for data instead of spinning on the reactor.
        """
        self._error = None
        if error is not None:
            waiters, self._waiters = self._waiters, deque()
            if not waiters:
                self._error = error
            for d in waiters:
                d.errback(error)

    def close(self) -> None:
        """End the iteration: waiting and later calls raise C{StopAsyncIteration}."""
        self._closed = True
        self.clear()
        waiters, self._waiters = self._waiters, deque()
        for d in waiters:
            d.errback(StopAsyncIteration())

    # -- internals ------------------------------------------------------------------------

    def _forget(self, d: Deferred[GroupMessage]) -> None:
        if d in self._waiters:
            self._waiters.remove(d)

    def _hand_out(self) -> None:
        while self._waiters and self._chunks and not self.paused:
            waiter = self._waiters.popleft()
            self._take().chainDeferred(waiter)

    def _take(self) -> Deferred[GroupMessage]:
        chunk = self._chunks[0]
        if chunk.error is not None:
            self._chunks.popleft()
            return fail(chunk.error)
        was_full = self.full
        message = chunk.messages[chunk.pos]
        chunk.pos += 1
        if chunk.pos == len(chunk.messages):
            self._chunks.popleft()
        self.queued -= 1
        owned = chunk.owned
        if not self.manual_offsets:
            owned.consumed = message.next_offset
        if was_full and not self.full:
            for listener in list(self._room_listeners):
                listener()
        payload = strip(message.payload) if self.envelope else message.payload
        return deserialize_one(self.deserializer, owned.topic,
                               GroupMessage(owned.topic, owned.tp, message.offset, message.next_offset, payload))

    def holds(self, owned: OwnedPartition) -> bool:
        """Whether messages of C{owned} are queued."""
        return any(chunk.owned is owned for chunk in self._chunks)


class BrokerFetcher:
    """The fetch loop of one consumer for one broker: one WAIT_FETCH at a time for all its owned partitions there.

    A partition is fetched from C{fetch_offset}; one without an offset gets one
    from the broker first (OFFSETS, per C{reset}: C{"smallest"} or
    C{"largest"}), and so does one whose offset is out of range.  Connection
    problems are retried with C{retry_policy} until L{stop} (the group
    rebalances when ZooKeeper notices a broker is gone).
    """

    _log = Logger()

    def __init__(
        self,
        broker_id: int,
        partitions: list[OwnedPartition],
        connection: IBrokerConnection,
        *,
        clock,
        fetch_max_bytes: int,
        max_wait_ms: int,
        reset: str,
        retry_policy: Callable[[int], float],
        on_corrupt: str = "fail",
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    ) -> None:
        self.broker_id = broker_id
        #: C{"fail"}: a corrupt message is raised in its partition's place, after the messages before it,
        #: and the partition is not fetched any more; C{"skip"}: it is logged and skipped.
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self.max_decompressed_bytes = max_decompressed_bytes
        self.partitions = partitions
        self.connection = connection
        self.fetch_max_bytes = fetch_max_bytes
        self.max_wait_ms = max_wait_ms
        self.reset_time = RESET_TIMES[reset]
        self.reset = reset
        self._clock = clock
        self._retry_policy = retry_policy
        self._running = False
        self._wakeup: Deferred[None] | None = None
        self._done: Deferred[None] | None = None
        #: Fetch requests sent (for tests and statistics).
        self.requests = 0

    @classmethod
    def connect(cls, broker_id: int, address: tuple[str, int], partitions: list[OwnedPartition], *, reactor,
                fetch_max_bytes: int, max_wait_ms: int, reset: str, on_corrupt: str = "fail",
                options: ClientOptions | None = None, **overrides: Any) -> BrokerFetcher:
        """A fetcher with a new connection to the broker at C{address}, retrying with the options' policy.

        @param overrides: fields of L{ClientOptions} replacing those of C{options} (C{timeout_s=5}...).
        """
        options = ClientOptions.build(options, **overrides).for_fetches(fetch_max_bytes * len(partitions))
        host, port = address
        connection = BrokerConnection(host, port, reactor=reactor, options=options)
        return cls(broker_id, partitions, connection, clock=reactor, fetch_max_bytes=fetch_max_bytes,
                   max_wait_ms=max_wait_ms, reset=reset, retry_policy=options.backoff(), on_corrupt=on_corrupt,
                   max_decompressed_bytes=options.max_decompressed_bytes)

    def start(self) -> None:
        """Start the loop (and tell the streams to wake it when they have room)."""
        self._running = True
        for stream in {id(p.stream): p.stream for p in self.partitions}.values():
            stream.add_room_listener(self.wake)
        self._done = Deferred.fromCoroutine(self._run())
        self._done.addErrback(lambda f: self._log.failure("fetch loop for broker {broker} failed", f,
                                                          broker=self.broker_id))

    def stop(self) -> Deferred[None]:
        """Stop at once: any answer still coming is dropped; fire once the connection is closed."""
        self._running = False
        self._fire_wakeup()
        closing = [self.connection.close()]
        if self._done is not None:
            closing.append(self._done)
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)

    def wake(self) -> None:
        """A stream has room again: fetch its partitions in the next round (or now, if the loop is idle)."""
        self._fire_wakeup()

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while self._running:
            try:
                await self._round()
                failures = 0
            except (ConnectionFailed, BrokerTimeout, ClientClosed) as e:  # ProtocolViolation is a ConnectionFailed
                if not self._running:
                    return
                failures += 1
                delay = self._retry_policy(failures)
                self._log.info("fetching from broker {broker}: {error}; retrying in {delay:.2f} s",
                               broker=self.broker_id, error=e, delay=delay)
                await self._pause(delay)
            except Exception:
                if not self._running:
                    return
                failures += 1
                self._log.failure("fetching from broker {broker} failed; retrying", broker=self.broker_id)
                await self._pause(self._retry_policy(failures))

    async def _round(self) -> None:
        for p in self.partitions:
            if p.fetch_offset is None and not p.failed and p.paused_until <= self._clock.seconds():
                await self._reset(p)
                if not self._running:
                    return
        now = self._clock.seconds()
        ready = [p for p in self.partitions
                 if not p.failed and not p.stream.full and p.paused_until <= now and p.fetch_offset is not None]
        if not ready:
            paused = [p.paused_until for p in self.partitions if not p.failed and p.paused_until > now]
            await self._pause(min(paused) - now if paused else None)
            return
        readers = [self._reader(p) for p in ready]
        request = WaitFetchRequest(self.max_wait_ms, 1, tuple(r.next_request().part(r.tp) for r in readers))
        self.requests += 1
        parts = (await self.connection.request(request)).parts
        if not self._running:
            return  # stopped meanwhile: the data belongs to nobody now
        if len(parts) != len(ready):
            raise ProtocolViolation(f"broker {self.broker_id} answered {len(ready)} fetches with {len(parts)} parts")
        for p, reader, part in zip(ready, readers, parts):
            if not self._running:
                return
            got = part.messages if part.error == NO_ERROR else error_for(
                part.error, f"broker {self.broker_id} refused {p.topic}/{p.name}@{p.fetch_offset}")
            await self._take(p, reader, got)

    def _reader(self, p: OwnedPartition) -> PartitionReader:
        """A reader of C{p} for one round: from its fetch offset (a committed offset: a message starts there)."""
        return PartitionReader(p.tp, p.fetch_offset, max_bytes=self.fetch_max_bytes, on_corrupt=self.on_corrupt,
                               max_decompressed_bytes=self.max_decompressed_bytes, label=p.name, boundary=p.boundary,
                               trusted_start=True, max_refreshes=0, on_skip=log_skip)

    async def _take(self, p: OwnedPartition, reader: PartitionReader, got: bytes | Exception) -> None:
        """Hand C{p}'s part of the answer to its reader, send the probe or re-read it asks for, act on what it says."""
        offset = p.fetch_offset
        try:
            event = reader.receive(got)
            while event is SEND_NEXT:
                got = await answer(self.connection, reader, reader.next_request())
                if isinstance(got, (ConnectionFailed, BrokerTimeout)):
                    raise got  # the connection's trouble: the loop retries it
                event = reader.receive(got)
        except OffsetOutOfRange:
            self._log.warn("{topic}/{partition}: offset {offset} is out of range; resetting to the {reset}",
                           topic=p.topic, partition=p.name, offset=offset, reset=self.reset)
            await self._reset(p)
            return
        except (FetchSizeTooSmall, InvalidMessage) as e:
            self._give_up(p, e)
            return
        except BrokerError as e:  # NotLeader, LeaderNotAvailable...: the group rebalances when the layout changes
            self._pause_partition(p, e)
            return
        if isinstance(event, Fetched) and event.next_offset != offset:
            p.fetch_offset = event.next_offset
            p.boundary = reader.boundary
            p.stream.deliver(p, event.value.messages)

    def _pause_partition(self, p: OwnedPartition, error: Exception) -> None:
        """Leave C{p} out of the fetches for a while, after the broker refused it."""
        delay = self._retry_policy(3)
        self._log.warn("{error}; asking again in {delay:.2f} s", error=error, delay=delay)
        p.paused_until = self._clock.seconds() + delay

    def _give_up(self, p: OwnedPartition, error: Exception) -> None:
        self._log.error("{topic}/{partition}: {error}; it is not fetched any more", topic=p.topic,
                        partition=p.name, error=error)
        p.failed = True
        p.stream.deliver_error(p, error)

    async def _reset(self, p: OwnedPartition) -> None:
        """Start C{p} at the broker's smallest or largest offset."""
        try:
            response = await self.connection.request(OffsetsRequest(p.topic, p.number, self.reset_time, 1))
        except BrokerError as e:
            self._pause_partition(p, e)
            return
        if not self._running or not p.active:
            return
        offsets = response.offsets
        offset = offsets[0] if offsets else 0
        p.fetch_offset = offset
        if not p.stream.holds(p):
            p.consumed = offset  # nothing of the old range is waiting to be handed out

    def _fire_wakeup(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None and not wakeup.called:
            wakeup.callback(None)

    async def _pause(self, delay_s: float | None) -> None:
        """Wait until woken (L{wake}, L{stop}) or C{delay_s} has passed."""
        if not self._running:
            return
        wakeup: Deferred[None] = Deferred()
        self._wakeup = wakeup
        timer = None
        if delay_s is not None:
            timer = self._clock.callLater(max(delay_s, 0.0), self._fire_wakeup)
        try:
            await wakeup
        except CancelledError:
            pass
        finally:
            if timer is not None and timer.active():
                timer.cancel()
