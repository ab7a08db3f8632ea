"""ClusterView against a real ZooKeeper: brokers and topic partitions followed through watches."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.integration.zookeeper import connect
from twlog.coord import paths
from twlog.coord.cluster import ClusterView, parse_broker_address
from twlog.coord.zk import ZooKeeper


def next_change(view: ClusterView) -> Deferred:
    """Fire on the view's next change."""
    d: Deferred = Deferred()

    def listener() -> None:
        view.remove_listener(listener)
        d.callback(None)

    view.add_listener(listener)
    return d


class ClusterViewTests(TestCase):
    timeout = 60

    async def test_follows_brokers_and_topics(self) -> None:
        """Brokers and topic registrations appear and disappear in the view as they do in ZooKeeper."""
        zk = await connect(self)
        view = ClusterView(zk, ["clicks"])
        await view.start()
        self.addCleanup(view.stop)
        self.assertEqual((view.brokers, view.partitions("clicks")), ({}, []))

        broker = ZooKeeper(zk.hosts)
        await broker.start()
        changed = next_change(view)
        await broker.create(paths.broker_id_path(2), b"127.0.0.1:9093", ephemeral=True, makepath=True)
        await changed
        self.assertEqual(view.brokers, {2: ("127.0.0.1", 9093)})

        changed = next_change(view)
        await broker.create(paths.broker_topic_path("clicks", 2), b"3", ephemeral=True, makepath=True)
        await changed
        self.assertEqual(view.partitions("clicks"), [(2, 0), (2, 1), (2, 2)])

        changed = next_change(view)
        await broker.stop()  # the broker dies: its ephemeral nodes go
        await changed
        self.assertEqual(view.partitions("clicks"), [])

    async def test_watch_topic_later(self) -> None:
        """A topic followed after start is read at once."""
        zk = await connect(self)
        await zk.create(paths.broker_id_path(0), b"h:1", makepath=True)
        await zk.create(paths.broker_topic_path("t", 0), b"2", makepath=True)
        view = ClusterView(zk)
        await view.start()
        self.addCleanup(view.stop)
        await view.watch_topic("t")
        self.assertEqual(view.partitions("t"), [(0, 0), (0, 1)])


class AddressTests(SynchronousTestCase):
    def test_formats(self) -> None:
        """Registrations read as host:port, and Kafka 0.7's creator:host:port."""
        self.assertEqual(parse_broker_address(b"127.0.0.1:9092"), ("127.0.0.1", 9092))
        self.assertEqual(parse_broker_address(b"broker-1234:10.0.0.5:9092"), ("10.0.0.5", 9092))
