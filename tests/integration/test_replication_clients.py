"""Clients following a replicated partition's leader, on loopback with the suite's real ZooKeeper: two in-process
brokers, each with a L{ReplicaManager} installed by hand (the roles the state znodes say), a leader moved by
writing its next state; the producer (with ZooKeeper, and with a static broker list), the simple consumer's
stream and the group consumer follow it, and every partition keeps its order with nothing acknowledged lost."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.groups import FAST
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.client.connection import BrokerConnection
from twlog.consumer import GroupConsumer, SimpleConsumer
from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.replication.values import PartitionState
from twlog.coord.zk import NoNodeError
from twlog.partition import TopicPartition
from twlog.producer import Producer
from twlog.replica.manager import ReplicaManager

TOPIC = "orders"
REPLICAS = {0: (1, 2), 1: (2, 1)}


def in_order(values: list[int], count: int) -> None:
    """C{values} (read from one partition) hold 0..count-1, in order: a resend may repeat a value right after
    itself (at least once), nothing is missing, nothing goes back."""
    first_seen = list(dict.fromkeys(values))
    assert first_seen == list(range(count)), f"read {values}"
    assert values == sorted(values), f"out of order: {values}"


class FollowTheLeaderTests(TestCase):
    timeout = 120

    def setUp(self) -> Deferred[None]:
        return Deferred.fromCoroutine(self.start_cluster())

    async def start_cluster(self) -> None:
        self.hosts = fresh_connect_string()
        self.services = {b: await start_broker(self, broker_id=b, zookeeper=self.hosts,
                                                     topic_partitions={TOPIC: len(REPLICAS)}) for b in (1, 2)}
        self.zk = await connect(self, self.hosts)
        self.managers = {}
        for b, service in self.services.items():
            manager = ReplicaManager(b, service.logs, self.zk, reactor, connect=self._connect_to, lag_time_ms=30_000)
            manager.install(service.broker)
            self.managers[b] = manager
            self.addCleanup(self._stop_roles, manager)
        await store.create_replicated_topic(self.zk, TOPIC, REPLICAS, {"min.insync.replicas": "2"})
        for p in REPLICAS:
            state, version = await self._state(p)
            self._apply(p, state, version)

    def _connect_to(self, broker_id: int) -> BrokerConnection:
        """A follower's connection to its leader (closed when the test ends)."""
        connection = BrokerConnection("127.0.0.1", self.services[broker_id].broker.port, reactor=reactor)
        self.addCleanup(connection.close)
        return connection

    async def _stop_roles(self, manager: ReplicaManager) -> None:
        for key in [*manager.leaders, *manager.followers]:
            stopping = manager.stop_partition(*key)
            if stopping is not None:
                await stopping

    async def _state(self, p: int) -> tuple[PartitionState, int]:
        """The partition's state (the brokers' controller writes the first one)."""
        for _ in range(400):
            try:
                return await store.read_state(self.zk, TOPIC, p)
            except NoNodeError:
                await deferLater(reactor, 0.05, lambda: None)
        raise AssertionError(f"no state for {TOPIC}-{p}")

    def _apply(self, p: int, state: PartitionState, version: int) -> None:
        """Every replica takes the role C{state} gives it, in one reactor turn."""
        self.managers[state.leader].become_leader(TOPIC, p, REPLICAS[p], state, version, min_isr=2)
        for b in REPLICAS[p]:
            if b != state.leader:
                self.managers[b].become_follower(TOPIC, p, state.leader, state.leader_epoch)

    async def move(self, p: int) -> int:
        """Move partition C{p}'s leadership to its other replica (what the controller does): the next state, at
        leader epoch + 1, then the roles.  The new leader."""
        state, version = await self._state(p)
        new = next(b for b in REPLICAS[p] if b != state.leader)
        moved = PartitionState(new, state.leader_epoch + 1, state.controller_epoch, (new, state.leader))
        version = await store.write_state_cas(self.zk, TOPIC, p, moved, version)
        self._apply(p, moved, version)
        return new

    async def produce(self, producer: Producer, start: int, count: int, key: bytes) -> None:
        """Sends C{start}..C{start+count-1} with C{key}, all in flight at once (one batch each)."""
        sends = [producer.send(TOPIC, b"%d" % n, key) for n in range(start, start + count)]
        results = await DeferredList(sends, consumeErrors=True)
        failed = [r.getErrorMessage() for ok, r in results if not ok]
        self.assertEqual(failed, [])

    async def read_all(self, consumer: SimpleConsumer, partition: str, count: int) -> list[int]:
        values: list[int] = []
        stream = consumer.stream(TOPIC, partition, 0, idle_timeout_s=20)
        async for message in stream:
            values.append(int(message.payload))
            if len(set(values)) == count:
                break
        await stream.close()
        return values

    async def test_producer_and_consumers_follow_moves(self) -> None:
        zk_producer = Producer(zookeeper=self.hosts, ack="all", ack_timeout_ms=5000, leader_wait_s=20)
        self.addCleanup(zk_producer.close)
        port = self.services[1].broker.port
        static_producer = Producer(f"127.0.0.1:{port}", ack="all", ack_timeout_ms=5000, leader_wait_s=20)
        self.addCleanup(static_producer.close)
        numbered = await zk_producer.partitions(TOPIC)
        self.assertEqual(numbered, [TopicPartition(TOPIC, "0"), TopicPartition(TOPIC, "1")])
        self.assertEqual(await static_producer.partitions(TOPIC), numbered)
        # A key for each partition (the partitioner hashes over 0..P-1).
        keys = {}
        for n in range(100):
            key = b"key-%d" % n
            keys.setdefault(zk_producer._router.choose(TOPIC, numbered, key, None).name, key)
        consumer = SimpleConsumer("127.0.0.1", self.services[2].broker.port)  # it asks broker 2 where leaders are
        self.addCleanup(consumer.close)
        stream = consumer.stream(TOPIC, "0", 0, idle_timeout_s=30)
        streamed: list[int] = []

        async def follow() -> None:
            async for message in stream:
                streamed.append(int(message.payload))
                if len(set(streamed)) == 300:
                    return

        reading = Deferred.fromCoroutine(follow())

        await self.produce(zk_producer, 0, 100, keys["0"])
        moving = self.produce(zk_producer, 100, 100, keys["0"])
        self.assertEqual(await self.move(0), 2)  # while those are in flight
        await moving
        await self.produce(static_producer, 200, 50, keys["0"])
        self.assertEqual(await self.move(0), 1)  # back, between two sends of the static producer
        await self.produce(static_producer, 250, 50, keys["0"])
        await self.produce(zk_producer, 0, 20, keys["1"])
        self.assertEqual(await self.move(1), 1)
        await self.produce(static_producer, 20, 20, keys["1"])

        await reading
        in_order(streamed, 300)
        in_order(await self.read_all(consumer, "0", 300), 300)
        in_order(await self.read_all(consumer, "1", 40), 40)
        self.assertEqual(await consumer.offsets(TOPIC, "1"),
                         [self.services[1].logs.get_log(TOPIC, 1).visible_end])

        # The group consumer: partitions 0 and 1, offsets under /consumers/<g>/offsets/<t>/<p>.
        group = GroupConsumer(self.hosts, "g", reactor=reactor, **FAST)
        self.addCleanup(group.close)
        (messages,) = (await group.create_message_streams({TOPIC: 1}))[TOPIC]
        got: dict[str, list[int]] = {"0": [], "1": []}
        moved = False
        for _ in range(10_000):  # (bounded: 340 distinct messages, and what a move resends)
            message = await messages.__anext__()
            got[message.partition.name].append(int(message.payload))
            if not moved and len(got["0"]) >= 100:
                moved = True
                await self.move(0)  # the group rebalances on the view's change, and reads on from its offsets
            if len(set(got["0"])) == 300 and len(set(got["1"])) == 40:
                break
        in_order(got["0"], 300)
        in_order(got["1"], 40)
        await group.commit()
        for p in ("0", "1"):
            value, _ = await self.zk.get(paths.offset_path("g", TOPIC, p))
            self.assertEqual(int(value), self.services[1].logs.get_log(TOPIC, int(p)).visible_end)
