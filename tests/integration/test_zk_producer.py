"""Brokers registering in a real ZooKeeper, and producers finding brokers and partitions there (127.0.0.1)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.test_registration import node_until
from tests.integration.zookeeper import connect, expire_session, fresh_connect_string
from twlog.broker.service import BrokerService
from twlog.config import BrokerConfig, LogConfig
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.registration import BrokerIdInUse
from twlog.coord.zk import ZooKeeper, ZooKeeperUnavailable
from twlog.coord.zkserver import free_port
from twlog.errors import ConnectionFailed, PartitionsOffline
from twlog.partition import TopicPartition
from twlog.producer import Producer, hash_partitioner


async def next_change(view: ClusterView) -> None:
    """Fire on the view's next change (after the producer, which listens first, has seen it)."""
    changed: Deferred = Deferred()

    def listener() -> None:
        view.remove_listener(listener)
        changed.callback(None)

    view.add_listener(listener)
    await changed


async def partitions_until(producer: Producer, topic: str, predicate: Callable[[list[TopicPartition]], bool]):
    """The producer's partitions of C{topic} once C{predicate} holds of them, waiting on the view's changes."""
    while True:
        partitions = await producer.partitions(topic)
        if predicate(partitions):
            return partitions
        await next_change(producer.cluster)


def ends(brokers: dict[int, BrokerService], topic: str) -> dict[tuple[int, int], int]:
    """The end offset of every partition of C{topic} on C{brokers}, by (broker id, partition)."""
    result = {}
    for broker_id, service in brokers.items():
        for (name, partition), log in service.logs.logs().items():
            if name == topic:
                result[(broker_id, partition)] = log.end_offset
    return result


class BrokerRegistryTests(TestCase):
    timeout = 60

    async def test_registers_id_and_existing_topics(self) -> None:
        """A broker started with zookeeper registers host:port and the partition count of each topic it holds."""
        zk = await connect(self)
        log_dir = self.mktemp()
        for name in ("clicks-0", "clicks-2", "views-0"):
            os.makedirs(os.path.join(log_dir, name))
        service = await start_broker(self, log_dir, zookeeper=zk.hosts, broker_id=4)
        value, _ = await zk.get(paths.broker_id_path(4))
        self.assertEqual(value.split(b":")[1:], [b"127.0.0.1", str(service.broker.port).encode()])  # 0.7's split
        self.assertEqual(sorted(await zk.children(paths.BROKER_TOPICS)), ["clicks", "views"])
        self.assertEqual((await zk.get(paths.broker_topic_path("clicks", 4)))[0], b"3")
        self.assertEqual((await zk.get(paths.broker_topic_path("views", 4)))[0], b"1")

    async def test_new_topic_registers_on_first_write(self) -> None:
        """The first write to a topic creates it on the broker, which registers it with its partition count."""
        zk = await connect(self)
        service = await start_broker(self, zookeeper=zk.hosts, broker_id=1, num_partitions=4)
        producer = Producer(f"127.0.0.1:{service.broker.port}", ack="appended")
        self.addCleanup(producer.close)
        await producer.send("fresh", [b"a", b"b"])
        await node_until(zk, paths.broker_topic_path("fresh", 1), lambda stat: stat is not None)
        self.assertEqual((await zk.get(paths.broker_topic_path("fresh", 1)))[0], b"4")

    async def test_same_id_refused(self) -> None:
        """A second broker with an id a live broker holds fails to start, naming the holder's address."""
        hosts = fresh_connect_string()
        first = await start_broker(self, zookeeper=hosts, broker_id=2)
        config = BrokerConfig(log=LogConfig(self.mktemp()), broker_id=2, port=0, zookeeper=hosts)
        second = BrokerService(config, reactor, stop_reactor_on_error=False)
        second.startService()
        self.addCleanup(second.stopService)
        with self.assertRaises(BrokerIdInUse) as caught:
            await second.listening
        holder = f"127.0.0.1:{first.broker.port}"
        self.assertEqual(str(caught.exception), f"broker id 2 is already registered by a live broker at {holder}")
        self.assertIsNone(second.zookeeper)

    async def test_zookeeper_unreachable(self) -> None:
        """A broker whose ZooKeeper cannot be reached fails to start after the connect timeout."""
        config = BrokerConfig(log=LogConfig(self.mktemp()), port=0, zookeeper=f"127.0.0.1:{free_port()}")
        service = BrokerService(config, reactor, stop_reactor_on_error=False, zookeeper_connect_timeout_s=0.5)
        service.startService()
        self.addCleanup(service.stopService)
        with self.assertRaises(ZooKeeperUnavailable):
            await service.listening

    async def test_registers_again_after_session_expiry(self) -> None:
        """When the broker's session expires, its id and topics come back under its new session."""
        zk = await connect(self)
        service = await start_broker(self, zookeeper=zk.hosts, broker_id=3)
        service.logs.get_or_create_log("t", 0)
        await node_until(zk, paths.broker_topic_path("t", 3), lambda stat: stat is not None)
        old = service.zookeeper.client_id[0]
        expire_session(service.zookeeper)
        for path in (paths.broker_id_path(3), paths.broker_topic_path("t", 3)):
            stat = await node_until(zk, path, lambda stat: stat is not None and stat.ephemeralOwner not in (0, old))
            self.assertEqual(stat.ephemeralOwner, service.zookeeper.client_id[0])

    async def test_stop_deregisters(self) -> None:
        """A stopped broker's nodes are gone from ZooKeeper."""
        zk = await connect(self)
        service = await start_broker(self, zookeeper=zk.hosts, broker_id=6)
        service.logs.get_or_create_log("t", 0)
        await node_until(zk, paths.broker_topic_path("t", 6), lambda stat: stat is not None)
        await service.stopService()
        self.assertIsNone(await zk.exists(paths.broker_id_path(6)))
        self.assertIsNone(await zk.exists(paths.broker_topic_path("t", 6)))


class ZooKeeperProducerTests(TestCase):
    timeout = 60

    async def cluster(self, count: int, **overrides) -> tuple[str, dict[int, BrokerService]]:
        """A fresh ZooKeeper chroot and C{count} brokers (ids 0..count-1) registered in it."""
        hosts = fresh_connect_string()
        brokers = {}
        for broker_id in range(count):
            brokers[broker_id] = await start_broker(self, zookeeper=hosts, broker_id=broker_id, **overrides)
        return hosts, brokers

    def producer(self, hosts: str, **options) -> Producer:
        options.setdefault("ack", "appended")
        producer = Producer(zookeeper=hosts, **options)
        self.addCleanup(producer.close)
        return producer

    async def test_discovers_brokers_then_sends_keyed_and_random(self) -> None:
        """With 3 registered brokers, keyed batches go to the key's partition and random ones all arrive."""
        hosts, brokers = await self.cluster(3, num_partitions=2)
        for service in brokers.values():  # the topic exists on every broker already
            service.logs.get_or_create_log("events", 0)
        producer = self.producer(hosts, rng=random.Random(7))
        partitions = await partitions_until(producer, "events", lambda ps: len(ps) == 6)
        self.assertEqual(partitions, [TopicPartition.on_broker("events", b, p) for b in range(3) for p in range(2)])
        self.assertEqual(sorted(producer.cluster.brokers), [0, 1, 2])

        before = ends(brokers, "events")
        keys = (b"alice", b"bob", b"carol", b"dave")
        for key in keys:
            result = await producer.send("events", [key + b"-1", key + b"-2"], key=key)
            target = partitions[hash_partitioner(key, 6)]
            self.assertEqual(result.partition, target.number)
            self.assertEqual(ends(brokers, "events")[(target.fixed_leader, target.number)], result.next_offset)
        for i in range(30):
            await producer.send("events", [b"r%d" % i] * 3)
        after = ends(brokers, "events")
        appended = sum(after[k] - before.get(k, 0) for k in after)  # 9 bytes of overhead per message
        keyed = sum(2 * (9 + len(key) + 2) for key in keys)
        self.assertEqual(appended, keyed + sum(3 * (9 + len(b"r%d" % i)) for i in range(30)))
        self.assertGreater(len([k for k in after if after[k] > before.get(k, 0)]), 3)  # spread, not one target

    async def test_new_topic_bootstraps_then_follows_registrations(self) -> None:
        """An unregistered topic starts at partition 0 of each live broker; registrations then add the rest."""
        hosts, brokers = await self.cluster(2, num_partitions=3)
        producer = self.producer(hosts)
        self.assertEqual(await producer.partitions("new"), [TopicPartition.on_broker("new", b, 0) for b in (0, 1)])

        await producer.send("new", b"first", partition_index=0)  # broker 0 creates "new" with 3 partitions
        partitions = await partitions_until(producer, "new", lambda ps: len(ps) == 4)
        self.assertEqual([tp.name for tp in partitions], ["0-0", "0-1", "0-2", "1-0"])

        await producer.send("new", b"second", partition_index=3)  # partition 0 of broker 1, still bootstrapped
        partitions = await partitions_until(producer, "new", lambda ps: len(ps) == 6)
        self.assertEqual(partitions, [TopicPartition.on_broker("new", b, p) for b in (0, 1) for p in range(3)])
        self.assertEqual(ends(brokers, "new"), {(0, 0): 14, (1, 0): 15})

    async def test_routes_around_a_stopped_broker_and_picks_it_up_again(self) -> None:
        """A stopped broker's partitions are left out and sends go to the others; restarted, it is used again."""
        hosts, brokers = await self.cluster(3)
        producer = self.producer(hosts, rng=random.Random(1))
        for index in range(3):  # bootstrap: partition 0 of each broker
            await producer.send("t", b"hello", partition_index=index)
        await partitions_until(producer, "t", lambda ps: len(producer.cluster.partitions("t")) == 3)

        log_dir = brokers[1].config.log.log_dir
        await brokers.pop(1).stopService()
        partitions = await partitions_until(producer, "t", lambda ps: 1 not in {p.fixed_leader for p in ps})
        self.assertEqual(partitions, [TopicPartition("t", "0-0"), TopicPartition("t", "2-0")])
        for i in range(20):
            result = await producer.send("t", b"m%d" % i)
            self.assertEqual(result.partition, 0)
        before = sum(ends(brokers, "t").values())

        brokers[1] = await start_broker(self, log_dir, zookeeper=hosts, broker_id=1)  # a new port
        partitions = await partitions_until(producer, "t", lambda ps: len(ps) == 3)
        self.assertEqual(partitions, [TopicPartition.on_broker("t", b, 0) for b in range(3)])
        result = await producer.send("t", b"back", partition_index=1)
        self.assertEqual(brokers[1].logs.get_log("t", 0).end_offset, result.next_offset)
        self.assertEqual(result.offset, 14)  # after the "hello" it kept
        self.assertEqual(sum(v for k, v in ends(brokers, "t").items() if k[0] != 1), before)

    async def test_send_waiting_on_a_broker_that_leaves_goes_elsewhere(self) -> None:
        """A random send waiting to reach an unreachable broker is sent to a live one once that broker
        deregisters; a keyed one is not moved: it fails naming its partition, now offline."""
        hosts, brokers = await self.cluster(2)
        # (seeded: its first random choice is index 1, broker 1's partition)
        producer = self.producer(hosts, connect_attempts=20, rng=random.Random(0))
        for index in range(2):
            await producer.send("t", b"hello", partition_index=index)
        await partitions_until(producer, "t", lambda ps: len(producer.cluster.partitions("t")) == 2)
        key = next(k for k in (b"k%d" % i for i in range(100)) if hash_partitioner(k, 2) == 1)  # broker 1's

        gone = brokers[1]  # stops serving, but is still registered (as a hung broker would be)
        await gone.port.stopListening()
        gone.port = None
        gone.factory.disconnect_all()
        # (once the producer has seen its connection to broker 1 go: a batch written into the dying connection
        # would be "may be stored", rightly, which is another test's case)
        connection = producer._pool.get(1)
        await wait_until(lambda: connection.current is None or not connection.current.usable)
        sending = producer.send("t", b"rerouted")
        keyed = producer.send("t", b"keyed", key=key)
        await gone.registration.stop()
        result = await sending
        self.assertEqual((result.partition, result.offset), (0, 14))
        with self.assertRaises(PartitionsOffline) as caught:
            await keyed
        self.assertIn("cannot write to t:1-0, its key's partition", str(caught.exception))
        self.assertEqual(ends(brokers, "t"), {(0, 0): 31, (1, 0): 14})

    async def test_no_live_broker(self) -> None:
        """With no broker registered a send fails with ConnectionFailed; once one registers, sends work."""
        hosts = fresh_connect_string()
        producer = self.producer(hosts)
        with self.assertRaises(ConnectionFailed) as caught:
            await producer.send("t", b"m")
        self.assertIn("no broker is registered in ZooKeeper", str(caught.exception))
        await start_broker(self, zookeeper=hosts, broker_id=9)
        while 9 not in producer.cluster.brokers:
            await next_change(producer.cluster)
        result = await producer.send("t", b"m")
        self.assertEqual(result.next_offset, 10)

    async def test_close_stops_its_session_only(self) -> None:
        """close() stops the session the producer opened, and leaves a session it was given open."""
        hosts, _ = await self.cluster(1)
        own = self.producer(hosts)
        await own.partitions("t")
        session = own._router._zk
        self.assertTrue(session.connected)
        await own.close()
        self.assertFalse(session.connected)

        given = await connect(self, hosts)
        shared = Producer(zookeeper=given, ack="appended")
        await shared.send("t", b"m")
        await shared.close()
        self.assertTrue(given.connected)

    def test_brokers_or_zookeeper(self) -> None:
        """A producer needs exactly one of a broker list and a ZooKeeper connect string."""
        self.assertRaises(ValueError, Producer)
        self.assertRaises(ValueError, Producer, "127.0.0.1:9092", zookeeper="127.0.0.1:2181")
        self.assertIsInstance(Producer(zookeeper=ZooKeeper("127.0.0.1:1")), Producer)
