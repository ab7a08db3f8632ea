# -*- test-case-name: tests.integration.test_schema_registry -*-
"""L{Journal}: the registry's records in the twlog topic C{twlog-schemas}, appended and read in order.

Every record goes to the topic's first partition (index 0: partitions ordered by broker id and
partition, as the producer and discovery both order them), acknowledged once flushed: when
L{Journal.append} returns, the record is on disk and readable.  A journal given ZooKeeper that
finds no such topic creates it replicated when the cluster has L{REPLICATION_FACTOR} live brokers
or more (one partition, L{REPLICATION_FACTOR} replicas, C{min.insync.replicas}
L{MIN_INSYNC_REPLICAS}); on a replicated topic, however created, records are acknowledged with
C{ack="all"} (every in-sync replica holds the record, the leader has flushed it), and the
partition's leader is found again after the connection to it drops.  L{Journal.read_new} reads from
where the last read stopped to the partition's end.  Once found, that partition is kept: if the
cluster later shows another first partition (its broker is down), the journal refuses to read or
write elsewhere, naming the partition.  The journal watches its connection to that partition's
broker and calls C{on_lost} when it drops; L{Journal.probe} is a quiet check that the cluster takes
connections again (one TCP connection, no reconnecting client and no log line).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from twlog.client.connection import BrokerConnection, client_endpoint
from twlog.client.discovery import PartitionLocation, discover, parse_brokers
from twlog.client.options import ClientOptions
from twlog.client.topics import create_replicated
from twlog.consumer.simple import LATEST, SimpleConsumer
from twlog.coord import paths
from twlog.coord.replication.store import ReplicatedTopicExists
from twlog.coord.zk import NoNodeError, ZooKeeper, ZooKeeperUnavailable, split_chroot
from twlog.errors import ConnectionFailed, TwlogError, UnknownTopic
from twlog.partition import TopicPartition, address_text
from twlog.producer import Producer

#: The topic holding the registry's records (Confluent's registry keeps its own in the Kafka topic _schemas).
TOPIC = "twlog-schemas"
#: With this many live brokers or more, the topic is created replicated, on this many of them...
REPLICATION_FACTOR = 3
#: ... taking a record while this many replicas are in sync (Kafka's usual 3 and 2: one broker may be lost).
MIN_INSYNC_REPLICAS = 2


class _QuietFactory(Factory):
    """A probe's connection: made and closed, with no log line."""

    noisy = False
    protocol = Protocol


class Journal:
    """Appends records to C{twlog-schemas} (ack flushed) and reads them back in order.

    Give exactly one of C{brokers} (C{host:port,...}) and C{zookeeper} (a connect string).
    """

    _log = Logger()

    def __init__(self, *, brokers: str | None = None, zookeeper: str | None = None, reactor=None,
                 options: ClientOptions | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self._brokers = brokers
        self._zookeeper = zookeeper
        self._source = {"brokers": brokers} if brokers is not None else {"zookeeper": zookeeper}
        #: Which twlog cluster holds the records: its ZooKeeper connect string, or its brokers.
        self.cluster = zookeeper if zookeeper is not None else brokers
        self.options = ClientOptions.build(options)
        self._producer: Producer | None = None
        #: The partition holding the records, once found (kept for the life of the journal).
        self._location: PartitionLocation | None = None
        self._consumer: SimpleConsumer | None = None
        self._connection: BrokerConnection | None = None
        self._watched = None
        #: Called with a reason when the connection to the partition's broker drops on its own.
        self.on_lost: Callable[[str], object] | None = None
        #: The offset after the last record read.
        self.position = 0

    async def append(self, record: dict) -> int:
        """Append C{record}; its offset, once the broker has flushed it."""
        payload = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        if self._location is None and self._zookeeper is not None:
            await self._create_topic()
            await self._locate()
        ack = "all" if self._replicated else "flushed"
        if self._producer is not None and self._producer.ack != ack:  # (the topic was made replicated meanwhile)
            await self.disconnect()
            await self._locate()
        if self._producer is None:
            self._producer = Producer(self._brokers, zookeeper=self._zookeeper, reactor=self._reactor, ack=ack,
                                      options=self.options)
        if self._location is not None:
            first = (await self._producer.partitions(TOPIC))[0]
            if first != self._location.tp:
                raise ConnectionFailed(self._moved(first))
        result = await self._producer.send(TOPIC, payload, partition_index=0)
        return result.offset

    async def read_new(self) -> list[tuple[int, Any]]:
        """The records from L{position} to the end of the partition, in order, as C{(offset, record)}.

        L{position} moves only when every record is read (a read cut short reads them again).
        """
        location = await self._locate()
        if location is None:
            return []
        consumer = self._consumer
        (end,) = await consumer.offsets(TOPIC, location.name, LATEST, 1)
        records = []
        position = self.position
        while position < end:
            fetched = await consumer.fetch(TOPIC, location.name, position)
            if fetched.next_offset == position:
                raise TwlogError(f"no progress reading {location} at offset {position}")
            for message in fetched:
                try:
                    records.append((message.offset, json.loads(message.payload)))
                except ValueError:
                    self._log.warn("{topic}@{offset} is not a JSON record: ignored", topic=TOPIC, offset=message.offset)
            position = fetched.next_offset
        self.position = position
        self._watch()
        return records

    async def probe(self) -> None:
        """Return once one TCP connection is taken: by the partition's broker once found, else by one of the
        brokers or ZooKeeper servers given.

        @raise ConnectionFailed: none takes one, naming each and why.
        """
        if self._location is not None:
            targets = [(self._location.host, self._location.port)]
        else:
            targets = parse_brokers(self._brokers if self._brokers is not None else split_chroot(self._zookeeper)[0])
        reasons = []
        for host, port in targets:
            endpoint = client_endpoint(self._reactor, host, port, self.options.connect_timeout_s)
            try:
                protocol = await endpoint.connect(_QuietFactory())
            except Exception as e:
                why = " ".join(str(e).split()).rstrip(".") or type(e).__name__
                reasons.append(f"{address_text(host, port)}: {why}")
                continue
            protocol.transport.loseConnection()
            return
        raise ConnectionFailed("cannot connect to " + "; ".join(reasons))

    @property
    def _replicated(self) -> bool:
        """Whether the records' partition, once found, is a replicated topic's (its leader may move)."""
        return self._location is not None and self._location.tp.fixed_leader is None

    async def _create_topic(self) -> None:
        """Create the topic replicated if the cluster in ZooKeeper has L{REPLICATION_FACTOR} live brokers or more;
        with fewer, leave it to the first append (as the brokers create topics).  A topic created meanwhile (by
        another registry) is used as it is.

        @raise ConnectionFailed: ZooKeeper cannot be reached.
        """
        zk = ZooKeeper(self._zookeeper, reactor=self._reactor, connect_timeout_s=self.options.connect_timeout_s,
                       credentials=self.options.zookeeper_credentials)
        try:
            await zk.start()
            try:
                live = [name for name in await zk.children(paths.BROKER_IDS) if name.isdigit()]
            except NoNodeError:
                live = []
            if len(live) < REPLICATION_FACTOR:
                return
            try:
                await create_replicated(zk, TOPIC, 1, REPLICATION_FACTOR, clock=self._reactor,
                                        min_insync_replicas=MIN_INSYNC_REPLICAS)
            except ReplicatedTopicExists:
                return
            self._log.info("created {topic}: 1 partition on {replicas} of the {live} live brokers, "
                           "min.insync.replicas {minimum}", topic=TOPIC, replicas=REPLICATION_FACTOR, live=len(live),
                           minimum=MIN_INSYNC_REPLICAS)
        except ZooKeeperUnavailable as e:
            raise ConnectionFailed(str(e)) from None
        finally:
            await zk.stop()

    def disconnect(self) -> Deferred[None]:
        """Close the consumer and the producer (stopping their reconnection attempts); remade on use.  A
        replicated partition's leader is found again then (it may have moved)."""
        self._watched = None
        if self._replicated:
            self._location = None
        consumer, self._consumer, self._connection = self._consumer, None, None
        producer, self._producer = self._producer, None

        async def close() -> None:
            for client in (consumer, producer):
                if client is not None:
                    try:
                        await client.close()
                    except Exception as e:  # (closing a client of a dead broker: nothing to report)
                        self._log.debug("closing {client}: {error}", client=client, error=e)

        return Deferred.fromCoroutine(close())

    async def close(self) -> None:
        await self.disconnect()

    def _moved(self, first: TopicPartition) -> str:
        where = self._location
        return (f"the first partition of {TOPIC} is now {first.name}, not {where.name} (broker {where.leader} at "
                f"{where.address}), which holds the registry's records: is broker {where.leader} down?")

    async def _locate(self) -> PartitionLocation | None:
        if self._location is None:
            try:
                locations = await deferToThread(discover, [TOPIC], options=self.options, check_reachable=False,
                                                **self._source)
            except UnknownTopic:
                return None  # nothing registered yet
            self._location = locations[0]
        if self._consumer is None:
            location = self._location

            def connect() -> BrokerConnection:
                self._connection = BrokerConnection(location.host, location.port, reactor=self._reactor,
                                                    options=self.options)
                return self._connection

            self._consumer = SimpleConsumer(location.host, location.port, reactor=self._reactor, options=self.options,
                                            connection_factory=connect)
        return self._location

    def _watch(self) -> None:
        """Call C{on_lost} when the connection just used drops (not when L{disconnect} closes it)."""
        protocol = self._connection.current if self._connection is not None else None
        if protocol is None or protocol is self._watched or not protocol.usable:
            return
        self._watched = protocol
        location = self._location

        def dropped(_) -> None:
            if protocol is self._watched:
                self._watched = None
                if self.on_lost is not None:
                    self.on_lost(f"the connection to broker {location.leader} at {location.address} dropped")

        protocol.when_lost().addCallback(dropped)
