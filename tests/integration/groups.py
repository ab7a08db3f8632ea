"""Group-consumer test support: brokers registered in a real ZooKeeper, producing, and collecting streams."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.integration.broker import wait_until
from tests.integration.test_cli import Command, twlog  # noqa: F401  (Command: what start_twlog returns)
from twlog.broker.service import BrokerService
from twlog.client.connection import BrokerConnection
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer.group import GroupConsumer, GroupState
from twlog.consumer.stream import GroupMessage, GroupStream
from twlog.coord import paths
from twlog.coord.zk import NoNodeError, ZooKeeper
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, OffsetsRequest, ProduceRequest
from twlog.storage.message import encode_message_set

#: Fast rebalances and no long holds, so that tests stay short.
FAST = {"rebalance_backoff_ms": 50, "max_wait_ms": 200, "auto_commit_interval_ms": 100, "session_timeout_s": 4.0}


class ZkBroker:
    """An in-process broker on 127.0.0.1 that registers itself in ZooKeeper (C{BrokerConfig.zookeeper}); it can
    be stopped (it leaves ZooKeeper, then drops its connections) and started again on the same port and logs."""

    def __init__(self, testcase: TestCase, hosts: str, broker_id: int, partitions: int = 4) -> None:
        self.testcase = testcase
        self.hosts = hosts
        self.broker_id = broker_id
        self.partitions = partitions
        self.log_dir = testcase.mktemp()
        self.port = 0
        self.service: BrokerService | None = None
        self._connection: BrokerConnection | None = None

    async def start(self) -> ZkBroker:
        config = BrokerConfig(log=LogConfig(self.log_dir, num_partitions=self.partitions, flush_messages=1),
                              port=self.port, interface="127.0.0.1", broker_id=self.broker_id, zookeeper=self.hosts)
        self.service = BrokerService(config, reactor, stop_reactor_on_error=False, zookeeper_session_timeout_s=4.0)
        self.service.startService()
        await self.service.listening
        self.port = self.service.broker.port
        self.testcase.addCleanup(self.stop)
        return self

    async def stop(self) -> None:
        """Leave ZooKeeper and stop serving (connections drop)."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()
        if self.service is not None:
            service, self.service = self.service, None
            if service.running:
                await service.stopService()

    async def produce(self, topic: str, partition: int, payloads: list[bytes]) -> None:
        """Append C{payloads} and wait until they are flushed (visible to consumers)."""
        if self._connection is None:
            self._connection = BrokerConnection("127.0.0.1", self.port, reactor=reactor)
        request = AckProduceRequest(ACK_FLUSHED, 10_000,
                                    (ProduceRequest(topic, partition, encode_message_set(payloads)),))
        results = (await self._connection.request(request)).results
        assert all(r.error == 0 for r in results), results


    async def offsets(self, topic: str, partition: int) -> int:
        """The partition's latest (flushed) offset, by OFFSETS -1."""
        if self._connection is None:
            self._connection = BrokerConnection("127.0.0.1", self.port, reactor=reactor)
        return (await self._connection.request(OffsetsRequest(topic, partition, -1, 1))).offsets[0]


def payloads(topic: str, broker_id: int, partition: int, count: int, start: int = 0) -> list[bytes]:
    """Distinct payloads naming where they were sent: C{<topic>/<broker>-<partition>/<n>}."""
    return [f"{topic}/{broker_id}-{partition}/{n}".encode() for n in range(start, start + count)]


async def start_brokers(testcase: TestCase, hosts: str, count: int, partitions: int = 4) -> list[ZkBroker]:
    """C{count} registered brokers with ids 0 ... count-1."""
    return [await ZkBroker(testcase, hosts, i, partitions).start() for i in range(count)]


async def produce_all(brokers: Iterable[ZkBroker], topic: str, per_partition: int, start: int = 0) -> set[bytes]:
    """Produce C{per_partition} messages to every partition of every broker; return the payloads."""
    sent: set[bytes] = set()
    for broker in brokers:
        for partition in range(broker.partitions):
            batch = payloads(topic, broker.broker_id, partition, per_partition, start)
            await broker.produce(topic, partition, batch)
            sent.update(batch)
    return sent


async def registered(zk: ZooKeeper, topic: str, brokers: Iterable[ZkBroker]) -> None:
    """Wait (on watches) until every broker has registered C{topic}, which it does after its first write."""
    ids = {str(b.broker_id) for b in brokers}
    path = paths.broker_topic_path(topic)
    while True:
        changed: Deferred = Deferred()

        def watch(event, changed=changed) -> None:
            if not changed.called:
                changed.callback(event)

        try:
            children = await zk.children(path, watch=watch)
        except NoNodeError:
            if await zk.exists(path, watch=watch) is not None:
                continue
            children = []
        if ids <= set(children):
            return
        await changed


class Collector:
    """Reads every stream of some consumers and records what each delivered, with the owner at that moment."""

    def __init__(self) -> None:
        self.received: list[tuple[str, GroupMessage]] = []
        #: Messages delivered from a partition the receiving consumer did not own at that moment.
        self.unowned: list[tuple[str, GroupMessage]] = []
        self.errors: list[tuple[str, Exception]] = []
        self._stopped: set[str] = set()
        self._conditions: list[tuple[Callable[[], bool], Deferred]] = []
        self._readers: list[Deferred] = []

    def read(self, consumer: GroupConsumer, streams: dict[str, list[GroupStream]]) -> None:
        """Start reading every stream of C{consumer}."""
        for topic_streams in streams.values():
            for stream in topic_streams:
                self._readers.append(Deferred.fromCoroutine(self._read(consumer, stream)))

    def stop(self, consumer: GroupConsumer) -> None:
        """Stop recording C{consumer}'s messages (it crashed: what it gets now is lost with it)."""
        self._stopped.add(consumer.consumer_id)

    async def _read(self, consumer: GroupConsumer, stream: GroupStream) -> None:
        name = consumer.consumer_id
        try:
            async for message in stream:
                if name in self._stopped:
                    return
                if message.partition.name not in consumer.owned().get(message.topic, {}):
                    self.unowned.append((name, message))
                self.received.append((name, message))
                self._check()
        except Exception as e:
            self.errors.append((name, e))
            conditions, self._conditions = self._conditions, []
            for _, d in conditions:
                d.errback(e)

    def payloads(self) -> Counter:
        """How many times each payload was received."""
        return Counter(m.payload for _, m in self.received)

    def when(self, predicate: Callable[[], bool]) -> Deferred:
        """Fire once C{predicate()} holds (checked after every message)."""
        d: Deferred = Deferred()
        if predicate():
            d.callback(None)
        else:
            self._conditions.append((predicate, d))
        return d

    def has_all(self, expected: set[bytes]) -> Deferred:
        """Fire once every payload of C{expected} was received."""
        return self.when(lambda: expected <= set(self.payloads()))

    def _check(self) -> None:
        for item in list(self._conditions):
            predicate, d = item
            if predicate():
                self._conditions.remove(item)
                d.callback(None)


def ownership(consumers: Iterable[GroupConsumer]) -> dict[tuple[str, str], list[str]]:
    """(topic, partition) -> the consumers that say they deliver it now."""
    owners: dict[tuple[str, str], list[str]] = {}
    for consumer in consumers:
        for topic, partitions in consumer.owned().items():
            for name in partitions:
                owners.setdefault((topic, name), []).append(consumer.consumer_id)
    return owners


def settled(consumers: list[GroupConsumer], expected: set[tuple[str, str]]) -> bool:
    """Every consumer STABLE with no rebalance due, and C{expected} partitions each owned by exactly one."""
    if any(c.state is not GroupState.STABLE or c.rebalancing for c in consumers):
        return False
    owners = ownership(consumers)
    return set(owners) == expected and all(len(o) == 1 for o in owners.values())


async def wait_settled(consumers: list[GroupConsumer], expected: set[tuple[str, str]], timeout_s: float = 20) -> None:
    """Wait until the group is L{settled} (a state no single event announces)."""
    await wait_until(lambda: settled(consumers, expected), timeout_s=timeout_s, step_s=0.01)


def partition_names(topic: str, brokers: Iterable[ZkBroker]) -> set[tuple[str, str]]:
    """Every (topic, partition name) of C{brokers}."""
    return {(topic, paths.partition_name(b.broker_id, p)) for b in brokers for p in range(b.partitions)}


def start_twlog(*args: str):
    """Start C{python -m twlog.cli ARGS} (this tree's twlog): the command's process protocol, with C{out}, C{err},
    C{ended} firing with (status, out, err), and C{process}, its transport."""
    started: list = []
    twlog(*args, started=started)
    process, command = started[0]
    command.process = process
    return command


def run_twlog(*args: str) -> Deferred:
    """Run C{twlog ARGS}; fire with (exit status, stdout, stderr) as text."""
    return start_twlog(*args).ended.addCallback(lambda r: (r[0], r[1].decode(), r[2].decode()))
