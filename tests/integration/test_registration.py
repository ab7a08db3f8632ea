"""BrokerRegistration against a real ZooKeeper: the broker registry's nodes, conflicts, expiry and stop."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.fakes import FakeLogs
from tests.integration.zookeeper import connect, expire_session
from twlog.config import BrokerConfig, LogConfig
from twlog.coord import paths
from twlog.coord.cluster import parse_broker_address
from twlog.coord.registration import BrokerIdInUse, BrokerRegistration, broker_address
from twlog.coord.zk import CONNECTED, SUSPENDED, ZnodeStat, ZooKeeper


async def node_until(zk: ZooKeeper, path: str, predicate: Callable[[ZnodeStat | None], bool]) -> ZnodeStat | None:
    """Wait (on exists watches, not by polling) until C{predicate(stat of path)} holds; return that stat."""
    while True:
        changed: Deferred = Deferred()
        stat = await zk.exists(path, watch=lambda event: None if changed.called else changed.callback(event))
        if predicate(stat):
            return stat
        await changed


def config(broker_id: int = 5, host: str = "127.0.0.1") -> BrokerConfig:
    return BrokerConfig(log=LogConfig("unused"), broker_id=broker_id, host=host)


class RegistrationTests(TestCase):
    timeout = 60

    async def registration(self, zk: ZooKeeper, logs: FakeLogs, port: int = 9092, **options) -> BrokerRegistration:
        """A started registration, stopped when the test ends."""
        registration = BrokerRegistration(zk, config(), logs, port, clock=reactor, **options)
        await registration.start()
        self.addCleanup(registration.stop)
        return registration

    async def test_registers_id_and_topics(self) -> None:
        """The id node holds host:port and each topic node the partition count, all ephemeral to the session."""
        zk = await connect(self)
        await self.registration(zk, FakeLogs({"clicks": 3, "views": 1}), port=9093)
        value, stat = await zk.get(paths.broker_id_path(5))
        self.assertRegex(value, rb"^127\.0\.0\.1-\d{13}:127\.0\.0\.1:9093$")  # Kafka 0.7's form
        self.assertEqual((parse_broker_address(value), stat.ephemeralOwner), (("127.0.0.1", 9093), zk.client_id[0]))
        for topic, count in (("clicks", b"3"), ("views", b"1")):
            value, stat = await zk.get(paths.broker_topic_path(topic, 5))
            self.assertEqual((value, stat.ephemeralOwner), (count, zk.client_id[0]))

    async def test_new_topic_is_registered(self) -> None:
        """A topic created after start (a first write) gets its node."""
        zk = await connect(self)
        logs = FakeLogs()
        await self.registration(zk, logs)
        logs.create("fresh", 4)
        await node_until(zk, paths.broker_topic_path("fresh", 5), lambda stat: stat is not None)
        self.assertEqual((await zk.get(paths.broker_topic_path("fresh", 5)))[0], b"4")

    async def test_id_held_by_another_live_broker(self) -> None:
        """An id registered by another live session is refused, naming that broker's address."""
        zk = await connect(self)
        other = await connect(self, zk.hosts)
        await other.create(paths.broker_id_path(5), b"10.0.0.9:9092", ephemeral=True, makepath=True)
        registration = BrokerRegistration(zk, config(), FakeLogs({"t": 1}), 9092, clock=reactor)
        with self.assertRaises(BrokerIdInUse) as caught:
            await registration.start()
        self.assertEqual(str(caught.exception), "broker id 5 is already registered by a live broker at 10.0.0.9:9092")
        self.assertIsNone(await zk.exists(paths.broker_topic_path("t", 5)))

    async def test_persistent_node_is_refused(self) -> None:
        """A persistent node on the id path is refused too, saying it is no live broker."""
        zk = await connect(self)
        await zk.create(paths.broker_id_path(5), b"10.0.0.9:9092", makepath=True)
        registration = BrokerRegistration(zk, config(), FakeLogs(), 9092, clock=reactor)
        with self.assertRaises(BrokerIdInUse) as caught:
            await registration.start()
        self.assertIn("persistent node, not by a live broker", str(caught.exception))

    async def test_waits_for_its_own_previous_registration(self) -> None:
        """A registration of this very address by an older session (a crashed run) is waited out, then replaced."""
        zk = await connect(self)
        previous = ZooKeeper(zk.hosts)
        await previous.start()
        await previous.create(paths.broker_id_path(5), b"127.0.0.1:9092", ephemeral=True, makepath=True)
        registration = BrokerRegistration(zk, config(), FakeLogs(), 9092, clock=reactor, stale_wait_s=30)
        started = registration.start()
        self.addCleanup(registration.stop)
        await previous.stop()  # its session ends, as an expiring one would
        await started
        stat = await zk.exists(paths.broker_id_path(5))
        self.assertEqual(stat.ephemeralOwner, zk.client_id[0])

    async def test_previous_registration_that_stays(self) -> None:
        """A registration of this address that does not go within stale_wait_s is refused, not waited on forever."""
        zk = await connect(self)
        other = await connect(self, zk.hosts)
        await other.create(paths.broker_id_path(5), b"127.0.0.1:9092", ephemeral=True, makepath=True)
        registration = BrokerRegistration(zk, config(), FakeLogs(), 9092, clock=reactor, stale_wait_s=0.2)
        with self.assertRaises(BrokerIdInUse) as caught:
            await registration.start()
        self.assertIn("did not expire in time", str(caught.exception))

    async def test_replaces_topic_node_of_another_session(self) -> None:
        """A topic node under our id left by another session is replaced by ours (we hold the id)."""
        zk = await connect(self)
        await zk.create(paths.broker_topic_path("t", 5), b"9", makepath=True)
        await self.registration(zk, FakeLogs({"t": 2}))
        value, stat = await zk.get(paths.broker_topic_path("t", 5))
        self.assertEqual((value, stat.ephemeralOwner), (b"2", zk.client_id[0]))

    async def test_registers_again_after_session_expiry(self) -> None:
        """After the session expires, the id and every topic (old and new) are registered in the new session."""
        zk = await connect(self)
        observer = await connect(self, zk.hosts)
        logs = FakeLogs({"a": 2})
        registration = await self.registration(zk, logs)
        logs.create("b", 1)
        await node_until(observer, paths.broker_topic_path("b", 5), lambda stat: stat is not None)
        old_session = zk.client_id[0]
        expire_session(zk)
        for path in (paths.broker_id_path(5), paths.broker_topic_path("a", 5), paths.broker_topic_path("b", 5)):
            stat = await node_until(
                observer, path, lambda stat: stat is not None and stat.ephemeralOwner not in (0, old_session)
            )
            self.assertEqual(stat.ephemeralOwner, zk.client_id[0])
        self.assertEqual((await observer.get(paths.broker_topic_path("a", 5)))[0], b"2")
        self.assertEqual(registration.registrations, 2)

    async def test_checks_registration_after_reconnecting(self) -> None:
        """After a lost connection on the same session, a registration that went missing is made again."""
        zk = await connect(self)
        await self.registration(zk, FakeLogs({"t": 1}))
        zk._tell_state(SUSPENDED)  # as the adapter reports a lost connection
        await zk.delete(paths.broker_topic_path("t", 5))  # as if a write had failed meanwhile
        zk._tell_state(CONNECTED)
        stat = await node_until(zk, paths.broker_topic_path("t", 5), lambda stat: stat is not None)
        self.assertEqual(stat.ephemeralOwner, zk.client_id[0])

    async def test_stop_deletes_own_nodes(self) -> None:
        """Stopping deletes the nodes this session registered and leaves the session open."""
        zk = await connect(self)
        registration = BrokerRegistration(zk, config(), FakeLogs({"t": 1}), 9092, clock=reactor)
        await registration.start()
        await registration.stop()
        self.assertIsNone(await zk.exists(paths.broker_id_path(5)))
        self.assertIsNone(await zk.exists(paths.broker_topic_path("t", 5)))
        self.assertTrue(zk.connected)


class AddressTests(SynchronousTestCase):
    def test_broker_address(self) -> None:
        """Addresses are host:port, with IPv6 hosts in brackets."""
        self.assertEqual(broker_address("127.0.0.1", 9092), "127.0.0.1:9092")
        self.assertEqual(broker_address("::1", 9092), "[::1]:9092")
