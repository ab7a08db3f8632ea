# -*- test-case-name: tests.producer.test_producer,tests.integration.test_client,tests.integration.test_zk_producer -*-
"""The producer: batches of messages to a topic's partitions, fire-and-forget or acknowledged.

A batch passed to L{Producer.send} is one request: PRODUCE when C{ack="none"}
(the paper's fire-and-forget), ACK_PRODUCE otherwise, answered with the offsets.
Which partition it goes to, and which partitions a topic has (from a static
broker list or from ZooKeeper), is the L{Router}'s job; the connections are a
L{ConnectionPool}'s, one per broker.

With C{batch_size} set, the producer is asynchronous: messages queue per
partition in a L{Batcher} (bounded, with a block or drop policy) and go out as
one request when C{batch_size} messages are queued or C{linger_ms} has passed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, fail
from twisted.logger import Logger

from twlog.client.connection import BrokerConnection, IBrokerConnection
from twlog.client.discovery import parse_brokers
from twlog.client.options import ClientOptions
from twlog.client.pool import ConnectionPool
from twlog.client.serde import Serializer, serialize_batch
from twlog.coord.cluster import ClusterView
from twlog.coord.zk import IZooKeeper
from twlog.deprecation import renamed
from twlog.envelope import AUDIT_TOPIC, AuditSettings, audit_trail
from twlog.errors import (
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    LeaderNotAvailable,
    NotLeader,
)
from twlog.partition import TopicPartition
from twlog.producer.batcher import Batcher, check_settings
from twlog.producer.delivery import deliver, deliver_sets
from twlog.producer.failover import PartitionQueue, deliver_following, wait_created
from twlog.producer.fast import FireAndForget
from twlog.producer.router import Partitioner, Router, hash_partitioner
from twlog.protocol.codec import (
    ACK_ALL,
    ACK_APPENDED,
    ACK_FLUSHED,
    ACK_NONE,
    ProduceResult,
)
from twlog.storage.message import CODEC_NAMES, CODEC_NONE

ACK_MODES = {"none": ACK_NONE, "appended": ACK_APPENDED, "flushed": ACK_FLUSHED, "all": ACK_ALL}


def _payloads(messages: bytes | Sequence[bytes]) -> list[bytes]:
    if isinstance(messages, (bytes, bytearray, memoryview)):
        messages = [messages]
    payloads = []
    for message in messages:
        if not isinstance(message, (bytes, bytearray, memoryview)):
            raise TypeError(f"messages must be bytes, not {type(message).__name__}; encode text first")
        payloads.append(bytes(message))
    if not payloads:
        raise ValueError("no messages to send")
    return payloads


class _Serialized(list):
    """Payloads a serializer made (not to be serialized again)."""


def _codec_number(codec: int | str) -> int:
    if isinstance(codec, str):
        if codec not in CODEC_NAMES:
            raise ValueError(f"codec must be one of {', '.join(CODEC_NAMES)}, not {codec!r}")
        return CODEC_NAMES[codec]
    return codec


class Producer:
    """Sends message batches to the partitions of topics, over reconnecting broker connections.

    Give exactly one of C{brokers} and C{zookeeper}.

    @param brokers: C{"host:port,host:port"} or a list of C{(host, port)}.
    @param zookeeper: a ZooKeeper connect string (C{host:port[,...][/chroot]}):
        the producer opens a session on first use and closes it in L{close};
        or a started L{IZooKeeper} session, which it leaves open.
    @param ack: C{"none"} (fire-and-forget PRODUCE), C{"appended"}, C{"flushed"} or C{"all"} (ACK_PRODUCE; L{send}
        fires with the L{ProduceResult}); C{"all"}: every in-sync replica holds it (docs/replication.md).
    @param partitioner: C{(key, n) -> index} for keyed sends; default L{hash_partitioner}.
    @param codec: a C{CODEC_*} number or name (C{"gzip"}); each batch is compressed as one wrapper.
    @param batch_size: turn on async batching: send a partition's queue at this many messages ...
    @param linger_ms: ... or this long after its first message.
    @param max_queued_messages: the async queue's bound (messages queued or in flight).
    @param on_full: C{"block"} or C{"drop"}: what L{send} does when the async queue is full.
    @param ack_timeout_ms: how long the broker may take to flush, with C{ack="flushed"}.
    @param retries: how many times a batch whose outcome is unknown is resent (L{ConnectionLost}
        after the write, L{OutcomeUnknown}): at-least-once, a resend may store it twice (docs/protocol.md,
        ACK_PRODUCE).  Failures to connect are not retried here: each request already waits
        C{connect_attempts} attempts with backoff.
    @param leader_wait_s: how long a batch for a replicated partition follows its moving leader, one batch of
        the partition at a time, in order (L{twlog.producer.failover}).
    @param options: the L{ClientOptions} of the broker connections; its fields may also be given
        as keywords (C{timeout_s=5}), replacing those of C{options}.
    @param connection_factory: C{(host, port) -> IBrokerConnection} (tests); default L{BrokerConnection}.
    @param audit: instrument for the audit trail (L{twlog.envelope}): True (origin: the host name), an
        origin name, or L{AuditSettings}: every payload goes in an envelope, and every window a monitoring
        event per topic goes to the topic C{twlog-audit}.
    @param serializer: C{(topic, value) -> bytes} (or a Deferred of it), such as L{twlog.avro.AvroSerializer}:
        then L{send} takes values (a list is a batch of values) and sends their serialized bytes.
    """

    _log = Logger()

    def __init__(
        self,
        brokers: str | Sequence[tuple[str, int]] | None = None,
        *,
        zookeeper: str | IZooKeeper | None = None,
        reactor=None,
        ack: str = "none",
        partitioner: Partitioner | None = None,
        codec: int | str = CODEC_NONE,
        batch_size: int | None = None,
        linger_ms: int = 10,
        max_queued_messages: int = 10_000,
        on_full: str = "block",
        ack_timeout_ms: int = 10_000,
        retries: int = 1,
        leader_wait_s: float = 30.0,
        options: ClientOptions | None = None,
        connection_factory: Callable[[str, int], IBrokerConnection] | None = None,
        rng: random.Random | None = None,
        audit: AuditSettings | bool | str = False,
        serializer: Serializer | None = None,
        **overrides: Any,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        if (brokers is None) == (zookeeper is None):
            raise ValueError("give either brokers (a static list) or zookeeper (a connect string), not both or none")
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {', '.join(ACK_MODES)}, not {ack!r}")
        check_settings(batch_size, max_queued_messages, on_full)
        self._reactor = reactor
        self.ack = ack
        self.codec = _codec_number(codec)
        self.ack_timeout_ms = ack_timeout_ms
        self.retries = retries
        self.leader_wait_s = leader_wait_s
        self._queue = PartitionQueue(lambda tp, sets: deliver_following(self, tp, sets, deliver_sets))
        self.options = options = ClientOptions.build(options, **overrides)
        self._ack = ACK_MODES[ack]
        if connection_factory is None:
            def connection_factory(host: str, port: int) -> BrokerConnection:
                return BrokerConnection(host, port, reactor=reactor, options=options)

        self._pool = ConnectionPool(connection_factory, parse_brokers(brokers) if brokers is not None else ())
        self._router = Router(self._pool, zookeeper=zookeeper, reactor=reactor, partitioner=partitioner, rng=rng,
                              zookeeper_credentials=options.zookeeper_credentials, listener=options.listener)
        self._batcher: Batcher | None = None
        if batch_size is not None:
            self._batcher = Batcher(reactor, self._deliver_batch, batch_size=batch_size, linger_ms=linger_ms,
                                    max_queued_messages=max_queued_messages, on_full=on_full)
        self._in_flight: set[Deferred] = set()
        self._closed = False
        self._audit = audit_trail(audit, reactor, self._publish_audit)
        self.serializer = serializer
        #: The hot path of fire-and-forget sends (L{FireAndForget}), and whether send() may try it first.
        self._fast = FireAndForget(self._router, self._pool)
        self._fast_ok = self._batcher is None and self._ack == ACK_NONE and not self._audit

    # -- public API ------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Messages queued or being sent (async mode)."""
        return self._batcher.queued if self._batcher is not None else 0

    @property
    def dropped(self) -> int:
        """Messages dropped because the queue was full (C{on_full="drop"})."""
        return self._batcher.dropped if self._batcher is not None else 0

    @property
    def failed(self) -> int:
        """Messages of async batches whose delivery failed."""
        return self._batcher.failed if self._batcher is not None else 0

    @property
    def cluster(self) -> ClusterView | None:
        """With ZooKeeper, the view of live brokers and registrations the producer follows, once started."""
        return self._router.cluster

    def send(
        self, topic: str, messages: bytes | Sequence[bytes], key: bytes | str | None = None, *,
        partition_index: int | None = None, partition: int | None = None,
    ) -> Deferred[ProduceResult | None]:
        """Send C{messages} (one bytes, or a list: one request) to a partition of C{topic}.

        The partition is the one at C{partition_index} if given (an index into the topic's partitions sorted
        by name, as C{twlog produce --partition N} counts), else chosen by the partitioner from C{key}, else at
        random.  C{partition=} is the deprecated name of C{partition_index=}.

        Indices and keys count over every partition known, offline ones included (L{partitions} with
        C{offline=True}): when the partition they pick is on a broker that is down, the send fails
        (L{PartitionsOffline}, or the L{ConnectionFailed} of reaching it) and is never sent elsewhere.  A random
        batch whose broker cannot be reached is sent to a partition of another live broker (with
        L{ConnectionLost}, one that may have stored it: at least once), and random batches avoid that broker
        for a while.

        Without batching the Deferred fires once the request is written (C{ack="none"}: with None) or
        acknowledged (with the L{ProduceResult}: the offset of the first message and the next offset).  With
        batching it fires with None once the messages are queued; delivery failures are logged, counted in
        C{failed}, and raised by the next L{flush}.

        @raise QueueFull: async mode with C{on_full="drop"} and no room.  @raise ConnectionFailed: no broker.
        @raise BrokerError: the broker rejected the batch (acknowledged modes).
        @raise PartitionsOffline: the partition the index or key picks is on a broker that is down.
        """
        if (self._fast_ok and partition is None and self.codec == CODEC_NONE and self.serializer is None
                and not self._closed):
            sent = self._fast.send(topic, messages, key.encode("utf-8") if isinstance(key, str) else key,
                                   partition_index)
            if sent is not None:
                return sent
        partition = renamed("partition", "partition_index", partition, partition_index)
        if self.serializer is not None and topic != AUDIT_TOPIC and not isinstance(messages, _Serialized):
            return self._track(serialize_batch(self.serializer, topic, messages).addCallback(
                lambda payloads: self.send(topic, _Serialized(payloads), key, partition_index=partition)))
        try:
            payloads = _payloads(messages)
        except (TypeError, ValueError) as e:
            return fail(e)
        if self._closed:
            return fail(ClientClosed("the producer is closed"))
        if isinstance(key, str):
            key = key.encode("utf-8")
        if self._audit is not None and topic != AUDIT_TOPIC:
            payloads = self._audit.stamp(topic, payloads)
        if self._batcher is None:
            if self._ack == ACK_NONE:
                sent = self._fast.send(topic, payloads, key, partition, self.codec)
                if sent is not None:
                    return sent
            return self._track(Deferred.fromCoroutine(self._send_now(topic, payloads, key, partition)))
        return self._track(Deferred.fromCoroutine(self._enqueue(topic, payloads, key, partition)))

    def partitions(self, topic: str, *, offline: bool = False) -> Deferred[list[TopicPartition]]:
        """The live partitions of C{topic}, ordered by (broker id, partition), asking the brokers (or ZooKeeper)
        if not known yet; with C{offline}, every partition known, those of brokers that are down included:
        what C{partition_index=} and keys count over."""
        return Deferred.fromCoroutine(self._partitions(topic, offline))

    async def _partitions(self, topic: str, offline: bool) -> list[TopicPartition]:
        live = await self._router.partitions(topic)
        return self._router.numbered(topic, live) if offline else live

    def flush(self) -> Deferred[None]:
        """Send everything queued now, and fire once all of it has been delivered.

        @raise Exception: the first delivery error of an async batch since the last flush.
        """
        return Deferred.fromCoroutine(self._flush())

    def close(self) -> Deferred[None]:
        """Flush, then close every connection; later sends fail with L{ClientClosed}."""
        return Deferred.fromCoroutine(self._close())

    # -- delivery ------------------------------------------------------------------

    async def _send_now(
        self, topic: str, payloads: list[bytes], key: bytes | None, index: int | None
    ) -> ProduceResult | None:
        tried: set[int] = set()
        last: ConnectionFailed | None = None
        created_wait = 0.0  # how long a batch waited for a topic its first write creates replicated
        while True:
            try:
                target = self._router.choose(topic, await self._router.partitions(topic), key, index, avoid=tried)
            except ConnectionFailed:
                if last is None:
                    raise
                raise last from None  # no other broker is left to try: the last one's error
            broker = self._router.layout().leader(target) if target.fixed_leader is None else target.fixed_leader
            try:
                result = await self._deliver(target, payloads)
            except (LeaderNotAvailable, NotLeader) as e:  # (a topic being created replicated: wait_created)
                created_wait = await wait_created(self, target, e, created_wait)
                continue
            except ConnectionFailed as e:
                self._router.down.failed(broker)
                if index is not None or key is not None or broker is None:  # (None: waiting was the retry)
                    # Pinned: never elsewhere.  Say that its partition is offline, if the cluster knows it now
                    # (unless the batch may be stored: that must not be lost from the error).
                    if not isinstance(e, ConnectionLost):
                        self._router.choose(topic, await self._router.partitions(topic), key, index)
                    raise
                # Unpinned: to a partition of another broker, while one is left to try.
                tried.add(broker)
                last = e
                self._log.info("broker {broker} could not take a batch for {topic} ({error}); sending it to another "
                               "partition", broker=broker, topic=topic, error=str(e))
                continue
            self._router.down.reached(broker)
            return result

    async def _deliver(self, target: TopicPartition, payloads: list[bytes]) -> ProduceResult | None:
        if target.fixed_leader is None:  # a replicated partition: in its turn, following its leader
            return await self._queue.deliver(target, payloads)
        return await deliver(self, target, payloads)

    def _publish_audit(self, events: list[bytes]) -> None:
        self.send(AUDIT_TOPIC, events).addErrback(lambda f: self._log.failure("publishing audit events failed", f))

    def _deliver_batch(self, target: TopicPartition, payloads: list[bytes]) -> Deferred:
        return self._track(Deferred.fromCoroutine(self._deliver(target, payloads)))

    def _track(self, d: Deferred) -> Deferred:
        """Remember C{d} until it fires, so flush() can wait for it."""
        if d.called:
            return d
        self._in_flight.add(d)

        def done(result: object) -> object:
            self._in_flight.discard(d)
            return result

        return d.addBoth(done)

    async def _enqueue(self, topic: str, payloads: list[bytes], key: bytes | None, index: int | None) -> None:
        batcher = self._batcher
        await batcher.reserve(len(payloads))
        try:
            target = self._router.choose(topic, await self._router.partitions(topic), key, index)
        except BaseException:
            batcher.release(len(payloads))
            raise
        batcher.add(target, payloads)

    async def _flush(self) -> None:
        self._pool.write_gathered()  # (the fire-and-forget frames sent at once: handed to the transports now)
        while True:
            if self._batcher is not None:
                self._batcher.send_all()
            if not self._in_flight:
                break
            await DeferredList(list(self._in_flight), consumeErrors=True)
        error = self._batcher.take_error() if self._batcher is not None else None
        if error is not None:
            raise error

    async def _close(self) -> None:
        if self._closed:
            return
        if self._audit is not None:
            self._audit.close()  # the current window's events go out with the last flush
        try:
            await self._flush()
        finally:
            self._closed = True
            if self._batcher is not None:
                self._batcher.close()
            router_closed = Deferred.fromCoroutine(self._router.close())  # (stops following the cluster now)
            await self._pool.close()
            await router_closed


__all__ = ["ACK_MODES", "Partitioner", "ProduceResult", "Producer", "hash_partitioner"]
