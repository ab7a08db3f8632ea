"""Clients following a replicated partition's leader, on loopback with the suite's real ZooKeeper: three brokers in
this process take the roles the controller's states give; a leader is stopped (SIGTERM's path: its leaderships
move first) while batches are in flight, and comes back.  The producer (with ZooKeeper, and with a static broker
list), the simple consumer's stream and fetches and the group consumer follow the leader: every partition keeps
its order, and nothing acknowledged is lost."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.groups import FAST
from tests.integration.test_replication_control import run
from tests.integration.test_replication_zk import until
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.cli.inspect import create_topic
from twlog.consumer import GroupConsumer, SimpleConsumer
from twlog.coord import paths
from twlog.partition import TopicPartition
from twlog.producer import Producer

TOPIC = "orders"


def in_order(values: list[int], count: int) -> None:
    """C{values} (read from one partition) hold 0..count-1, in order: a resend may repeat a value right after
    itself (at least once), nothing is missing, nothing goes back."""
    assert list(dict.fromkeys(values)) == list(range(count)), f"read {values}"
    assert values == sorted(values), f"out of order: {values}"


class FollowTheLeaderTests(TestCase):
    timeout = 120

    async def start(self, broker_id: int):
        self.brokers[broker_id] = await start_broker(self, self.log_dirs[broker_id], broker_id=broker_id,
                                                     zookeeper=self.hosts, flush_interval_ms=5,
                                                     replica_lag_time_ms=1000)
        return self.brokers[broker_id]

    def high_watermark(self, partition: int) -> int | None:
        """The high watermark of C{partition} at its leader now (None: no leader)."""
        leader = self.leader(partition)
        return None if leader is None else self.brokers[leader].logs.get_log(TOPIC, partition).high_watermark

    def leader(self, partition: int) -> int | None:
        return next((b for b, s in self.brokers.items()
                     if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.leaders), None)

    def followers(self, partition: int) -> set[int]:
        return {b for b, s in self.brokers.items()
                if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.followers}

    async def produce(self, producer: Producer, start: int, count: int, key: bytes) -> None:
        """Send C{start}..C{start+count-1} with C{key}, all in flight at once (a batch each); none may fail."""
        sends = [producer.send(TOPIC, b"%d" % n, key) for n in range(start, start + count)]
        results = await DeferredList(sends, consumeErrors=True)
        self.assertEqual([r.getErrorMessage() for ok, r in results if not ok], [])

    async def read_all(self, consumer: SimpleConsumer, partition: str, count: int) -> list[int]:
        """Fetch C{partition} from offset 0 until C{count} distinct values are read (bounded)."""
        values: list[int] = []
        offset = 0
        for _ in range(1000):
            fetched = await consumer.fetch(TOPIC, partition, offset)
            values += [int(m.payload) for m in fetched]
            offset = fetched.next_offset
            if len(set(values)) >= count:
                return values
        raise AssertionError(f"read only {values}")

    async def test_producers_and_consumers_follow_the_leader(self) -> None:
        self.hosts, self.brokers = fresh_connect_string(), {}
        self.log_dirs = {b: self.mktemp() for b in (1, 2, 3)}
        for b in (1, 2, 3):
            await self.start(b)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "2", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        for p in (0, 1):
            await until(lambda p=p: self.leader(p) is not None and len(self.followers(p)) == 2,
                        f"partition {p} has a leader and two followers")
        old = self.leader(0)
        stays = min(b for b in self.brokers if b != old)  # what the static clients are given
        address = f"127.0.0.1:{self.brokers[stays].broker.port}"

        zk_producer = Producer(zookeeper=self.hosts, ack="all", ack_timeout_ms=10_000, leader_wait_s=20)
        self.addCleanup(zk_producer.close)
        static_producer = Producer(address, ack="all", ack_timeout_ms=10_000, leader_wait_s=20)
        self.addCleanup(static_producer.close)
        numbered = await zk_producer.partitions(TOPIC)
        self.assertEqual(numbered, [TopicPartition(TOPIC, "0"), TopicPartition(TOPIC, "1")])
        self.assertEqual(await static_producer.partitions(TOPIC), numbered)
        keys: dict[str, bytes] = {}  # a key of each partition (keys hash over partitions 0..P-1)
        for n in range(100):
            keys.setdefault(zk_producer._router.choose(TOPIC, numbered, b"key-%d" % n, None).name, b"key-%d" % n)

        consumer = SimpleConsumer("127.0.0.1", self.brokers[stays].broker.port)  # it asks there where leaders are
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
        in_flight = Deferred.fromCoroutine(self.produce(zk_producer, 100, 100, keys["0"]))
        await self.brokers[old].stopService()  # controlled shutdown, with those batches in flight
        del self.brokers[old]
        await in_flight
        self.assertNotEqual(self.leader(0), old)
        await self.produce(static_producer, 200, 50, keys["0"])
        await self.start(old)  # it comes back, follows, catches up
        await until(lambda: old in self.followers(0), "the returned broker follows")
        await self.produce(static_producer, 250, 50, keys["0"])
        await self.produce(zk_producer, 0, 20, keys["1"])
        await self.produce(static_producer, 20, 20, keys["1"])

        await reading
        in_order(streamed, 300)
        in_order(await self.read_all(consumer, "0", 300), 300)
        in_order(await self.read_all(consumer, "1", 40), 40)
        leader1 = self.leader(1)
        self.assertEqual(await consumer.offsets(TOPIC, "1"),
                         [self.brokers[leader1].logs.get_log(TOPIC, 1).high_watermark])

        # The group consumer reads both from their leaders, and commits under /consumers/<g>/offsets/<t>/<p>.
        group = GroupConsumer(self.hosts, "g", reactor=reactor, **FAST)
        self.addCleanup(group.close)
        (messages,) = (await group.create_message_streams({TOPIC: 1}))[TOPIC]
        got: dict[str, list[int]] = {"0": [], "1": []}
        stopped = None
        for _ in range(10_000):  # (bounded: 340 distinct messages, and what a rebalance hands out again)
            message = await messages.__anext__()
            got[message.partition.name].append(int(message.payload))
            if stopped is None and len(got["0"]) >= 100:
                stopped = self.leader(0)
                if stopped != stays:
                    await self.brokers[stopped].stopService()  # the group rebalances on the change
                    del self.brokers[stopped]
            if len(set(got["0"])) == 300 and len(set(got["1"])) == 40:
                break
        self.assertEqual(list(dict.fromkeys(got["0"])), list(range(300)))
        self.assertEqual(list(dict.fromkeys(got["1"])), list(range(40)))
        await group.commit()
        zk = await connect(self, self.hosts)
        for p in ("0", "1"):
            await until(lambda p=p: self.leader(int(p)) is not None, f"partition {p} has a leader")
            value, _ = await zk.get(paths.offset_path("g", TOPIC, p))
            # (a new leader's high watermark reaches what the old one had once its followers fetch from it)
            await until(lambda p=p, value=value: int(value) == self.high_watermark(int(p)),
                        f"partition {p}'s high watermark reaches the committed offset")
