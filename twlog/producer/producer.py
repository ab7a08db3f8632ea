# -*- test-case-name: tests.client.test_producer -*-
"""The producer: batches of messages to a topic's partitions, fire-and-forget or acknowledged.

A topic's partitions are the pairs (broker id, partition) over the brokers
that hold it, ordered by (broker id, partition), as in Kafka 0.7.  The
producer learns them in one of two ways:

  - from a static broker list: METADATA from every broker it was given;
  - from ZooKeeper (C{zookeeper=}): a L{ClusterView} watches the live brokers
    (C{/brokers/ids}) and each topic's registrations
    (C{/brokers/topics/<topic>}), and the producer opens and closes broker
    connections as brokers come and go.  A topic no live broker has
    registered starts at partition 0 of each live broker (the broker creates
    the log on the first write and registers it); registrations replace
    those bootstrap partitions as they come, and the partitions of a broker
    that left are not chosen any more (Kafka 0.7's ZKBrokerPartitionInfo).

A batch passed to L{Producer.send} is one request: PRODUCE when C{ack="none"}
(the paper's fire-and-forget), ACK_PRODUCE otherwise, answered with the offsets.

With C{batch_size} set, the producer is asynchronous: messages queue per
partition and go out as one request when C{batch_size} messages are queued or
C{linger_ms} has passed.  The queue is bounded (C{max_queued_messages},
counting messages queued or in flight), and when it is full C{on_full} says
what C{send} does: C{"block"} (its Deferred waits for room) or C{"drop"} (it
fails at once with L{QueueFull}, and C{dropped} counts the messages).
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Callable, Sequence

import attrs
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.client.connection import BrokerConnection, parse_brokers
from twlog.coord.cluster import ClusterView
from twlog.coord.zk import KazooException, ZooKeeper
from twlog.errors import ClientClosed, ConnectionFailed, ConnectionLost, ProtocolViolation, QueueFull, check, raise_for
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_FLUSHED,
    ACK_NONE,
    AckProduceRequest,
    MetadataRequest,
    ProduceRequest,
    ProduceResult,
)
from twlog.storage.message import CODEC_NAMES, CODEC_NONE, encode_message_set

ACK_MODES = {"none": ACK_NONE, "appended": ACK_APPENDED, "flushed": ACK_FLUSHED}

#: A partitioning function: C{(key, number of partitions) -> partition index}.
Partitioner = Callable[[bytes, int], int]


def hash_partitioner(key: bytes, num_partitions: int) -> int:
    """The default partitioner: CRC-32 of the key, modulo the number of partitions (stable across runs)."""
    return zlib.crc32(key) % num_partitions


@attrs.frozen
class Partition:
    """One partition of a topic: the broker that holds it and its number there."""

    broker_id: int
    partition: int


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


class _Batch:
    """Messages queued for one partition, waiting for C{batch_size} or C{linger_ms}."""

    __slots__ = ("topic", "target", "payloads", "timer")

    def __init__(self, topic: str, target: Partition) -> None:
        self.topic = topic
        self.target = target
        self.payloads: list[bytes] = []
        self.timer: IDelayedCall | None = None


class Producer:
    """Sends message batches to the partitions of topics, over reconnecting broker connections.

    Give exactly one of C{brokers} and C{zookeeper}.

    @param brokers: C{"host:port,host:port"} or a list of C{(host, port)}.
    @param zookeeper: a ZooKeeper connect string (C{host:port[,...][/chroot]}):
        the producer opens a session on first use and closes it in L{close};
        or a started L{ZooKeeper} session, which it leaves open.
    @param ack: C{"none"} (fire-and-forget PRODUCE), C{"appended"} or
        C{"flushed"} (ACK_PRODUCE; L{send} fires with the L{ProduceResult}).
    @param partitioner: C{(key, n) -> index} for keyed sends; default L{hash_partitioner}.
    @param codec: a C{CODEC_*} number or name (C{"gzip"}); each batch is compressed as one wrapper.
    @param batch_size: turn on async batching: send a partition's queue at this many messages ...
    @param linger_ms: ... or this long after its first message.
    @param max_queued_messages: the async queue's bound (messages queued or in flight).
    @param on_full: C{"block"} or C{"drop"}: what L{send} does when the async queue is full.
    @param ack_timeout_ms: how long the broker may take to flush, with C{ack="flushed"}.
    @param retries: how many times a batch is resent after its connection broke
        (L{ConnectionLost}): at-least-once, since the broker may have stored it
        before the connection broke.  Failures to connect are not retried here:
        each request already waits C{connect_attempts} attempts with backoff.
    """

    _log = Logger()

    def __init__(
        self,
        brokers: str | Sequence[tuple[str, int]] | None = None,
        *,
        zookeeper: str | ZooKeeper | None = None,
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
        timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        connect_attempts: int = 3,
        retry_policy: Callable[[int], float] | None = None,
        connection_factory: Callable[[str, int], BrokerConnection] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        if (brokers is None) == (zookeeper is None):
            raise ValueError("give either brokers (a static list) or zookeeper (a connect string), not both or none")
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {', '.join(ACK_MODES)}, not {ack!r}")
        if on_full not in ("block", "drop"):
            raise ValueError(f"on_full must be 'block' or 'drop', not {on_full!r}")
        if isinstance(codec, str):
            if codec not in CODEC_NAMES:
                raise ValueError(f"codec must be one of {', '.join(CODEC_NAMES)}, not {codec!r}")
            codec = CODEC_NAMES[codec]
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if max_queued_messages < 1:
            raise ValueError("max_queued_messages must be at least 1")
        self.clock = reactor
        self.ack = ack
        self.codec = codec
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.max_queued_messages = max_queued_messages
        self.on_full = on_full
        self.ack_timeout_ms = ack_timeout_ms
        self.retries = retries
        self.timeout_s = timeout_s
        self._ack = ACK_MODES[ack]
        self._partitioner = partitioner or hash_partitioner
        self._rng = rng or random.Random()
        if connection_factory is None:

            def connection_factory(host: str, port: int) -> BrokerConnection:
                return BrokerConnection(
                    host, port, reactor=reactor, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s,
                    connect_attempts=connect_attempts, retry_policy=retry_policy,
                )

        self._connection_factory = connection_factory
        #: The static brokers' connections (empty with ZooKeeper).
        self._connections = [] if brokers is None else [connection_factory(h, p) for h, p in parse_brokers(brokers)]
        self._by_id: dict[int, BrokerConnection] = {}
        # With ZooKeeper: the session, whether we opened it, the view once started, and the
        # live brokers each topic was bootstrapped with (partition 0 of each, until they register).
        self._zk: ZooKeeper | None = None
        self._own_zk = isinstance(zookeeper, str)
        if zookeeper is not None:
            self._zk = ZooKeeper(zookeeper, reactor=reactor) if isinstance(zookeeper, str) else zookeeper
        self._zk_started = not self._own_zk
        self._view: ClusterView | None = None
        self._view_waiters: list[Deferred[ClusterView]] = []
        self._view_starting: Deferred | None = None
        self._bootstrap: dict[str, set[int]] = {}
        self._retiring: set[Deferred] = set()
        self._topics: dict[str, list[Partition]] = {}
        self._discovering: dict[str, list[Deferred[list[Partition]]]] = {}
        self._batches: dict[tuple[str, Partition], _Batch] = {}
        self._room_waiters: deque[tuple[int, Deferred[None]]] = deque()
        self._in_flight: set[Deferred] = set()
        self._delivery_error: Exception | None = None
        self._closed = False
        #: Messages queued or being sent (async mode).
        self.queued = 0
        #: Messages dropped because the queue was full (C{on_full="drop"}).
        self.dropped = 0
        #: Messages of async batches whose delivery failed.
        self.failed = 0

    # -- public API ------------------------------------------------------------

    def send(
        self, topic: str, messages: bytes | Sequence[bytes], key: bytes | str | None = None, *,
        partition: int | None = None,
    ) -> Deferred[ProduceResult | None]:
        """Send C{messages} (one bytes, or a list: one request) to a partition of C{topic}.

        The partition is C{partition} if given (an index into the topic's
        partitions ordered by (broker id, partition)), else chosen by the
        partitioner from C{key}, else at random.

        Without batching the Deferred fires once the request is written
        (C{ack="none"}: with None) or acknowledged (with the L{ProduceResult}:
        the offset of the first message and the next offset).  With batching
        it fires with None once the messages are queued; delivery failures are
        logged, counted in C{failed}, and raised by the next L{flush}.

        @raise QueueFull: async mode with C{on_full="drop"} and no room.
        @raise ConnectionFailed: no broker could be reached.
        @raise BrokerError: the broker rejected the batch (acknowledged modes).
        """
        try:
            payloads = _payloads(messages)
        except (TypeError, ValueError) as e:
            return fail(e)
        if self._closed:
            return fail(ClientClosed("the producer is closed"))
        if isinstance(key, str):
            key = key.encode("utf-8")
        if self.batch_size is None:
            if self._ack == ACK_NONE:
                sent = self._send_at_once(topic, payloads, key, partition)
                if sent is not None:
                    return sent
            return self._track(Deferred.fromCoroutine(self._send_now(topic, payloads, key, partition)))
        return self._track(Deferred.fromCoroutine(self._enqueue(topic, payloads, key, partition)))

    def partitions(self, topic: str) -> Deferred[list[Partition]]:
        """The partitions of C{topic}, ordered by (broker id, partition), asking the brokers (or ZooKeeper)
        if not known yet."""
        return Deferred.fromCoroutine(self._partitions(topic))

    @property
    def cluster(self) -> ClusterView | None:
        """With ZooKeeper, the view of live brokers and registrations the producer follows, once started."""
        return self._view

    def flush(self) -> Deferred[None]:
        """Send everything queued now, and fire once all of it has been delivered.

        @raise Exception: the first delivery error of an async batch since the last flush.
        """
        return Deferred.fromCoroutine(self._flush())

    def close(self) -> Deferred[None]:
        """Flush, then close every connection; later sends fail with L{ClientClosed}."""
        return Deferred.fromCoroutine(self._close())

    # -- partitions --------------------------------------------------------------

    async def _partitions(self, topic: str) -> list[Partition]:
        known = self._topics.get(topic)
        if known is not None:
            return known
        # Every caller waits on its own Deferred, fired in call order, so that
        # sends made during a discovery keep their order.
        waiting: Deferred[list[Partition]] = Deferred()
        if topic in self._discovering:
            self._discovering[topic].append(waiting)
        else:
            self._discovering[topic] = [waiting]
            Deferred.fromCoroutine(self._discover(topic)).addBoth(self._discovered, topic)
        return await waiting

    def _discovered(self, result: list[Partition] | Failure, topic: str) -> None:
        waiters = self._discovering.pop(topic, [])
        if not isinstance(result, Failure):
            self._topics[topic] = result
        for d in waiters:
            if isinstance(result, Failure):
                d.errback(result.value)
            else:
                d.callback(result)

    async def _discover(self, topic: str) -> list[Partition]:
        """Ask every broker for its id and its partition count of C{topic} (or ZooKeeper, with one)."""
        if self._zk is not None:
            try:
                view = await self._cluster()
                await view.watch_topic(topic)
            except KazooException as e:
                raise ConnectionFailed(f"cannot read brokers from ZooKeeper at {self._zk.hosts}: {e!r}") from None
            if self._closed:
                raise ClientClosed("the producer is closed")
            return self._zk_partitions(topic)
        requests = [c.request(MetadataRequest((topic,))) for c in self._connections]
        answers = await DeferredList(requests, consumeErrors=True)
        partitions: set[Partition] = set()
        problems = []
        for connection, (ok, value) in zip(self._connections, answers):
            if not ok:
                problems.append(f"{connection.address}: {value.getErrorMessage()}")
                continue
            metadata = value
            self._by_id.setdefault(metadata.broker_id, connection)  # two addresses of one broker: keep the first
            for info in metadata.topics:
                if info.topic != topic:
                    continue
                raise_for(info.error, f"broker {connection.address} refuses topic {topic!r}")
                partitions.update(Partition(metadata.broker_id, p) for p in range(info.partitions))
        if not partitions:
            raise ConnectionFailed(
                f"no broker gave partitions for topic {topic!r}: " + ("; ".join(problems) or "none has any")
            )
        return sorted(partitions, key=lambda p: (p.broker_id, p.partition))

    # -- ZooKeeper ---------------------------------------------------------------------

    async def _cluster(self) -> ClusterView:
        """The started view (starting the session and the view on first use; retried after a failure)."""
        if self._view is not None:
            return self._view
        waiting: Deferred[ClusterView] = Deferred()
        self._view_waiters.append(waiting)
        if self._view_starting is None:
            self._view_starting = Deferred.fromCoroutine(self._start_cluster()).addBoth(self._cluster_started)
        return await waiting

    async def _start_cluster(self) -> ClusterView:
        if not self._zk_started:
            await self._zk.start()
            self._zk_started = True
        if self._closed:
            raise ClientClosed("the producer is closed")
        view = ClusterView(self._zk)
        view.add_listener(self._cluster_changed)
        try:
            await view.start()
        except BaseException:
            view.stop()
            raise
        return view

    def _cluster_started(self, result: ClusterView | Failure) -> None:
        self._view_starting = None
        waiters, self._view_waiters = self._view_waiters, []
        if isinstance(result, Failure):
            for d in waiters:
                d.errback(result.value)
            return
        if self._closed:
            result.stop()
            for d in waiters:
                d.errback(ClientClosed("the producer is closed"))
            return
        self._view = result
        self._cluster_changed()
        for d in waiters:
            d.callback(result)

    def _cluster_changed(self) -> None:
        """The view changed: open and close broker connections to match, and recompute known topics."""
        view = self._view
        if view is None or self._closed:
            return
        live = view.brokers
        for broker_id, connection in list(self._by_id.items()):
            if live.get(broker_id) != (connection.host, connection.port):
                del self._by_id[broker_id]
                self._log.info("broker {id} at {address} left", id=broker_id, address=connection.address)
                self._retire(connection)
        for broker_id, (host, port) in sorted(live.items()):
            if broker_id not in self._by_id:
                connection = self._by_id[broker_id] = self._connection_factory(host, port)
                self._log.info("broker {id} at {address} joined", id=broker_id, address=connection.address)
        for topic in list(self._topics):
            try:
                self._topics[topic] = self._zk_partitions(topic)
            except ConnectionFailed:
                del self._topics[topic]  # no broker: the next send says so

    def _retire(self, connection: BrokerConnection) -> None:
        """Close the connection to a broker that left; L{close} waits for it."""
        d = connection.close().addErrback(
            lambda f: self._log.warn("closing {address}: {error}", address=connection.address,
                                     error=f.getErrorMessage())
        )
        self._retiring.add(d)
        d.addBoth(lambda _: self._retiring.discard(d))

    def _zk_partitions(self, topic: str) -> list[Partition]:
        """C{topic}'s partitions on live brokers: the registered ones, plus partition 0 of each broker
        the topic was bootstrapped on that has not registered it yet."""
        view = self._view
        live = view.brokers
        if not live:
            raise ConnectionFailed(f"no broker is registered in ZooKeeper at {self._zk.hosts}: none is live")
        registered = view.partitions(topic)
        if not registered:
            # Nobody live holds it: partition 0 of each live broker, which creates the log on the first write.
            self._bootstrap[topic] = set(live)
            return [Partition(b, 0) for b in sorted(live)]
        holders = {b for b, _ in registered}
        pending = {(b, 0) for b in self._bootstrap.get(topic, ()) if b in live and b not in holders}
        return [Partition(b, p) for b, p in sorted(set(registered) | pending)]

    def _broker_left(self, broker_id: int) -> bool:
        """Whether, with ZooKeeper, C{broker_id} is no longer live (its partitions are not chosen any more)."""
        return self._view is not None and not self._closed and broker_id not in self._by_id

    # -- choosing ----------------------------------------------------------------------

    def _choose(self, topic: str, partitions: list[Partition], key: bytes | None, index: int | None) -> Partition:
        n = len(partitions)
        if index is None:
            index = self._rng.randrange(n) if key is None else self._partitioner(key, n)
        if not 0 <= index < n:
            raise ValueError(f"partition index {index} is outside topic {topic!r}'s partitions [0, {n - 1}]")
        return partitions[index]

    # -- delivery ------------------------------------------------------------------

    def _send_at_once(
        self, topic: str, payloads: list[bytes], key: bytes | None, index: int | None
    ) -> Deferred[None] | None:
        """Fire-and-forget without a coroutine, when the partitions are known and the connection can
        take the write now (the common case, and the hot path of a log producer); else None."""
        partitions = self._topics.get(topic)
        if partitions is None or topic in self._discovering:
            return None
        try:
            target = self._choose(topic, partitions, key, index)
        except ValueError as e:
            return fail(e)
        connection = self._by_id.get(target.broker_id)
        protocol = connection.ready() if connection is not None else None
        if protocol is None:
            return None
        return protocol.send(ProduceRequest(topic, target.partition, encode_message_set(payloads, self.codec)))

    async def _send_now(
        self, topic: str, payloads: list[bytes], key: bytes | None, index: int | None
    ) -> ProduceResult | None:
        target = self._choose(topic, await self._partitions(topic), key, index)
        try:
            return await self._deliver(topic, target, payloads)
        except ConnectionFailed:
            if index is not None or not self._broker_left(target.broker_id):
                raise
        # With ZooKeeper: the broker left the cluster meanwhile.  Choose again among the live ones.
        self._log.info("broker {broker} left; sending the batch for {topic} to another partition",
                       broker=target.broker_id, topic=topic)
        target = self._choose(topic, await self._partitions(topic), key, None)
        return await self._deliver(topic, target, payloads)

    async def _deliver(self, topic: str, target: Partition, payloads: list[bytes]) -> ProduceResult | None:
        connection = self._by_id.get(target.broker_id)
        if connection is None:
            self._topics.pop(topic, None)
            raise ConnectionFailed(
                f"broker {target.broker_id} left the cluster: cannot write {topic}-{target.partition}"
            )
        produce = ProduceRequest(topic, target.partition, encode_message_set(payloads, self.codec))
        attempt = 0
        while True:
            try:
                if self._ack == ACK_NONE:
                    await connection.send(produce)
                    return None
                request = AckProduceRequest(self._ack, self.ack_timeout_ms, (produce,))
                response = await connection.request(request, timeout_s=self.timeout_s + self.ack_timeout_ms / 1000)
                break
            except ConnectionLost as e:
                if attempt >= self.retries:
                    self._topics.pop(topic, None)
                    raise
                attempt += 1
                self._log.info("resending a batch to {topic}-{partition}: {error}", topic=topic,
                               partition=target.partition, error=e)
            except ConnectionFailed:
                self._topics.pop(topic, None)  # ask the brokers again next time: one may be gone, or back
                raise
            except ClientClosed:
                if not self._broker_left(target.broker_id):
                    raise
                raise ConnectionFailed(
                    f"broker {target.broker_id} left the cluster before the batch for {topic}-{target.partition} "
                    "was sent or answered"
                ) from None
        results = response.results
        if len(results) != 1:
            raise ProtocolViolation(f"broker {connection.address} answered one produce with {len(results)} results")
        return check(results[0], f"broker {connection.address} did not take the batch for {topic}-{target.partition}")

    def _track(self, d: Deferred) -> Deferred:
        """Remember C{d} until it fires, so flush() can wait for it."""
        if d.called:
            return d
        self._in_flight.add(d)

        def done(result: object) -> object:
            self._in_flight.discard(d)
            return result

        return d.addBoth(done)

    # -- async batching --------------------------------------------------------------

    async def _enqueue(self, topic: str, payloads: list[bytes], key: bytes | None, index: int | None) -> None:
        await self._reserve(len(payloads))
        try:
            target = self._choose(topic, await self._partitions(topic), key, index)
        except BaseException:
            self._release(len(payloads))
            raise
        batch = self._batches.get((topic, target))
        if batch is None:
            batch = self._batches[(topic, target)] = _Batch(topic, target)
            batch.timer = self.clock.callLater(self.linger_ms / 1000, self._send_batch, (topic, target))
        batch.payloads.extend(payloads)
        if len(batch.payloads) >= self.batch_size:
            self._send_batch((topic, target))

    def _reserve(self, count: int) -> Deferred[None]:
        """Room for C{count} messages: at once, after waiting ("block"), or L{QueueFull} ("drop")."""
        if self.queued == 0 or (not self._room_waiters and self.queued + count <= self.max_queued_messages):
            self.queued += count
            return succeed(None)
        if self.on_full == "drop":
            self.dropped += count
            return fail(
                QueueFull(
                    f"the producer's queue is full ({self.queued} of {self.max_queued_messages} messages); "
                    f"dropped {count}"
                )
            )

        def forget(d: Deferred[None]) -> None:
            self._room_waiters = deque(w for w in self._room_waiters if w[1] is not d)

        d: Deferred[None] = Deferred(canceller=forget)
        self._room_waiters.append((count, d))
        return d

    def _release(self, count: int) -> None:
        self.queued -= count
        while self._room_waiters:
            wanted, d = self._room_waiters[0]
            if self.queued and self.queued + wanted > self.max_queued_messages:
                break
            self._room_waiters.popleft()
            self.queued += wanted
            d.callback(None)

    def _send_batch(self, key: tuple[str, Partition]) -> None:
        batch = self._batches.pop(key, None)
        if batch is None:
            return
        if batch.timer is not None and batch.timer.active():
            batch.timer.cancel()
        count = len(batch.payloads)
        d = self._track(Deferred.fromCoroutine(self._deliver(batch.topic, batch.target, batch.payloads)))

        def failed(failure) -> None:
            self.failed += count
            if self._delivery_error is None:
                self._delivery_error = failure.value
            self._log.warn(
                "could not deliver {count} messages to {topic}-{partition} on broker {broker}: {error}",
                count=count, topic=batch.topic, partition=batch.target.partition,
                broker=batch.target.broker_id, error=failure.getErrorMessage(),
            )

        d.addCallbacks(lambda _: None, failed)
        d.addBoth(lambda _: self._release(count))

    async def _flush(self) -> None:
        while True:
            for key in list(self._batches):
                self._send_batch(key)
            if not self._in_flight:
                break
            await DeferredList(list(self._in_flight), consumeErrors=True)
        error, self._delivery_error = self._delivery_error, None
        if error is not None:
            raise error

    async def _close(self) -> None:
        if self._closed:
            return
        try:
            await self._flush()
        finally:
            self._closed = True
            for _, d in list(self._room_waiters):
                d.errback(ClientClosed("the producer was closed while this send waited for room"))
            self._room_waiters.clear()
            await self._close_discovery()

    async def _close_discovery(self) -> None:
        connections = list(self._by_id.values()) if self._zk is not None else self._connections
        closing = [c.close() for c in connections] + list(self._retiring)
        await DeferredList(closing, consumeErrors=True)
        if self._zk is None:
            return
        if self._view_starting is not None:
            await self._view_starting  # (fires with None once the waiters are told)
        if self._view is not None:
            self._view.remove_listener(self._cluster_changed)
            self._view.stop()
        if self._own_zk and self._zk_started:
            self._zk_started = False
            await self._zk.stop()


__all__ = ["ACK_MODES", "Partition", "Partitioner", "ProduceResult", "Producer", "hash_partitioner"]
