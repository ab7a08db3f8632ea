"""One broker address bootstraps the whole cluster: CLUSTER_METADATA from brokers following a real ZooKeeper,
discovery and the producer through one address, unreachable brokers named, and a missing chroot said at once."""

from __future__ import annotations

import time

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.groups import produce_all, registered, start_brokers
from tests.integration.zookeeper import connect, fresh_connect_string, zookeeper_server
from twlog.client.discovery import discover
from twlog.client.sync import SyncConnection
from twlog.consumer.group import GroupConsumer
from twlog.coord.zk import MissingChroot, ZooKeeper
from twlog.errors import ConnectionFailed
from twlog.partition import TopicPartition
from twlog.producer import Producer
from twlog.protocol.responses import VIEW_CURRENT, VIEW_STANDALONE, BrokerAddress, TopicLayout

TOPIC = "clicks"


def cluster_metadata(port: int, topics=()):
    """CLUSTER_METADATA from the broker at 127.0.0.1:C{port}, asked from a thread (the broker runs here)."""

    def ask():
        with SyncConnection("127.0.0.1", port, timeout_s=5) as connection:
            return connection.cluster_metadata(topics)

    return deferToThread(ask)


class ClusterTestCase(TestCase):
    timeout = 60

    async def cluster(self, count: int = 2, partitions: int = 2):
        """C{count} brokers registered in a fresh chroot, each holding C{partitions} partitions of TOPIC with
        data, and each broker's view of the cluster showing all of them."""
        zk = await connect(self)
        brokers = await start_brokers(self, zk.hosts, count, partitions)
        await produce_all(brokers, TOPIC, 3)
        await registered(zk, TOPIC, brokers)
        for broker in brokers:
            view = broker.service.cluster
            await wait_until(lambda view=view: view.ready and len(view.holders(TOPIC)) == count)
        return zk, brokers


class ClusterMetadataTests(ClusterTestCase):
    async def test_every_broker_and_partition(self):
        """Any broker started with --zookeeper answers with every live broker and every broker's partitions."""
        _, brokers = await self.cluster()
        expected_brokers = tuple(BrokerAddress(b.broker_id, "127.0.0.1", b.port) for b in brokers)
        for broker in brokers:
            answer = await cluster_metadata(broker.port)
            self.assertEqual((answer.broker_id, answer.view), (broker.broker_id, VIEW_CURRENT))
            self.assertEqual(answer.brokers, expected_brokers)
            self.assertEqual(answer.topics, (TopicLayout(TOPIC, 0, ((0, 2), (1, 2))),))

    async def test_follows_brokers_leaving(self):
        """A broker that stops leaves the others' list of live brokers (its registration goes with it), and stays a
        holder of its partitions with no address: they exist, and are offline (/twlog/held)."""
        _, brokers = await self.cluster()
        await brokers[1].stop()
        view = brokers[0].service.cluster
        await wait_until(lambda: 1 not in view.brokers)
        answer = await cluster_metadata(brokers[0].port)
        self.assertEqual([b.broker_id for b in answer.brokers], [0])
        self.assertEqual(answer.topics, (TopicLayout(TOPIC, 0, ((0, 2), (1, 2))),))

    async def test_without_zookeeper(self):
        """A broker without ZooKeeper describes itself alone, and says so."""
        service = await start_broker(self, broker_id=5, num_partitions=3)
        await deferToThread(lambda: None)
        answer = await cluster_metadata(service.broker.port)
        self.assertEqual(answer.view, VIEW_STANDALONE)
        self.assertEqual(answer.brokers, (BrokerAddress(5, "127.0.0.1", service.broker.port),))
        self.assertEqual(answer.topics, ())


class DiscoveryTests(ClusterTestCase):
    async def test_one_address_finds_every_partition(self):
        """discover() with one broker's address returns the partitions of both brokers, with their addresses."""
        _, brokers = await self.cluster()
        for broker in brokers:
            found = await deferToThread(discover, [TOPIC], brokers=f"127.0.0.1:{broker.port}", timeout_s=5)
            self.assertEqual([str(p.tp) for p in found], ["clicks:0-0", "clicks:0-1", "clicks:1-0", "clicks:1-1"])
            self.assertEqual({p.leader: p.port for p in found}, {b.broker_id: b.port for b in brokers})

    async def test_first_address_down(self):
        """An address that does not answer is skipped when another given one describes the cluster."""
        _, brokers = await self.cluster()
        dead = await start_broker(self)
        port = dead.broker.port
        await dead.stopService()
        found = await deferToThread(discover, [TOPIC], brokers=f"127.0.0.1:{port},127.0.0.1:{brokers[1].port}",
                                    timeout_s=5)
        self.assertEqual(len(found), 4)

    async def test_unreachable_broker_is_named(self):
        """A registered broker holding partitions that cannot be reached fails discovery, naming it and them."""
        _, brokers = await self.cluster()
        service = brokers[1].service
        port, service.port = service.port, None
        await port.stopListening()  # still registered in ZooKeeper, but no longer answering
        service.factory.disconnect_all()
        error = await self.assertFailure(
            deferToThread(discover, [TOPIC], brokers=f"127.0.0.1:{brokers[0].port}", timeout_s=5), ConnectionFailed
        )
        self.assertIn(f"broker 1 at 127.0.0.1:{brokers[1].port} holds clicks:1-0, clicks:1-1 but cannot be reached",
                      str(error))

    async def test_standalone_brokers_are_each_asked(self):
        """Brokers without ZooKeeper know only themselves: every address is asked, and one down is named."""
        one = await start_broker(self, broker_id=1, num_partitions=1)
        two = await start_broker(self, broker_id=2, num_partitions=1)
        for service in (one, two):
            producer = Producer(f"127.0.0.1:{service.broker.port}", ack="flushed")
            await producer.send(TOPIC, [b"m"], partition_index=0)
            await producer.close()
        both = f"127.0.0.1:{one.broker.port},127.0.0.1:{two.broker.port}"
        found = await deferToThread(discover, [TOPIC], brokers=both, timeout_s=5)
        self.assertEqual([p.tp for p in found], [TopicPartition(TOPIC, "1-0"), TopicPartition(TOPIC, "2-0")])
        await two.stopService()
        error = await self.assertFailure(deferToThread(discover, [TOPIC], brokers=both, timeout_s=5),
                                         ConnectionFailed)
        self.assertIn(f"127.0.0.1:{two.broker.port}", str(error))

    async def test_producer_through_one_address(self):
        """The producer given one broker's address writes to every partition of the cluster."""
        _, brokers = await self.cluster()
        producer = Producer(f"127.0.0.1:{brokers[0].port}", ack="flushed")
        self.addCleanup(producer.close)
        partitions = await producer.partitions(TOPIC)
        self.assertEqual([p.name for p in partitions], ["0-0", "0-1", "1-0", "1-1"])
        before = await brokers[1].offsets(TOPIC, 1)
        await producer.send(TOPIC, [b"to broker 1"], partition_index=3)
        self.assertGreater(await brokers[1].offsets(TOPIC, 1), before)


class ChrootTests(TestCase):
    timeout = 60

    async def test_missing_chroot_is_one_line_at_once(self):
        """A chroot that does not exist fails discovery and sessions within seconds, saying what was meant."""
        servers = zookeeper_server().connect_string
        started = time.monotonic()
        error = await self.assertFailure(deferToThread(discover, [TOPIC], zookeeper=f"{servers}/twlog-nosuch"),
                                         ConnectionFailed)
        self.assertEqual(str(error).splitlines(), [str(error)])
        self.assertIn(f"ZooKeeper at {servers} has no /twlog-nosuch: did you mean {servers} (no chroot)?",
                      str(error))
        session = ZooKeeper(f"{servers}/twlog-nosuch", reactor=reactor)
        await self.assertFailure(session.start(), MissingChroot)
        self.assertLess(time.monotonic() - started, 10)

    async def test_group_consumer_and_producer(self):
        """A group consumer and a ZooKeeper producer given a missing chroot fail with MissingChroot at once."""
        hosts = zookeeper_server().connect_string + "/twlog-nosuch"
        consumer = GroupConsumer(hosts, "g", reactor=reactor)
        await self.assertFailure(consumer.start(), MissingChroot)
        producer = Producer(zookeeper=hosts)
        self.addCleanup(producer.close)
        error = await self.assertFailure(producer.send(TOPIC, b"m"), MissingChroot)
        self.assertIn("has no /twlog-nosuch", str(error))

    async def test_broker_creates_its_chroot(self):
        """A broker started with a chroot that does not exist yet creates it, and clients then find it."""
        hosts = fresh_connect_string() + "/sub"
        [broker] = await start_brokers(self, hosts, 1, 1)
        await broker.produce(TOPIC, 0, [b"m"])
        zk = await connect(self, hosts)
        await registered(zk, TOPIC, [broker])
        found = await deferToThread(discover, [TOPIC], zookeeper=hosts)
        self.assertEqual([str(p.tp) for p in found], ["clicks:0-0"])
