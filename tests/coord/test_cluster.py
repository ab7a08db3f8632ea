"""ClusterView, deterministic: brokers and topic partitions followed through a FakeZooKeeper's watches."""

from __future__ import annotations

from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.coord import paths
from twlog.coord.cluster import ClusterView, parse_broker_address
from twlog.coord.registration import broker_value
from twlog.partition import TopicPartition


class ClusterViewTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.server = FakeZooKeeperServer()
        self.zk = FakeZooKeeper(self.server)
        self.zk.start()
        self.broker = FakeZooKeeper(self.server)
        self.broker.start()
        self.changes = 0

    def view(self, topics=("clicks",)) -> ClusterView:
        view = ClusterView(self.zk, topics)
        self.successResultOf(view.start())
        view.add_listener(self.changed)
        self.addCleanup(view.stop)
        return view

    def changed(self) -> None:
        self.changes += 1

    def register(self, broker_id: int, value: bytes, topics: dict[str, int] | None = None,
                 zk: FakeZooKeeper | None = None) -> None:
        zk = zk or self.broker
        self.successResultOf(zk.create(paths.broker_id_path(broker_id), value, ephemeral=True, makepath=True))
        for topic, count in (topics or {}).items():
            self.successResultOf(zk.create(paths.broker_topic_path(topic, broker_id), str(count).encode(),
                                           ephemeral=True, makepath=True))

    def test_empty(self) -> None:
        """No broker, no registration: empty, and the paths it watches exist."""
        view = self.view()
        self.assertEqual((view.brokers, view.partitions("clicks"), view.topics()), ({}, [], ["clicks"]))

    def test_follows_brokers_and_topics(self) -> None:
        """Brokers and topic registrations appear and go as they do in ZooKeeper, and listeners hear each."""
        view = self.view()
        self.register(2, b"127.0.0.1:9093")
        self.assertEqual((view.brokers, self.changes), ({2: ("127.0.0.1", 9093)}, 1))
        self.successResultOf(self.broker.create(paths.broker_topic_path("clicks", 2), b"3", ephemeral=True,
                                                makepath=True))
        self.assertEqual(view.partitions("clicks"), [(2, 0), (2, 1), (2, 2)])
        self.assertEqual(view.topic_partitions("clicks"), [TopicPartition.on_broker("clicks", 2, p) for p in range(3)])
        self.assertEqual(self.changes, 2)
        self.successResultOf(self.broker.stop())  # the broker dies: its ephemeral nodes go
        self.assertEqual((view.brokers, view.partitions("clicks")), ({}, []))

    def test_all_topics(self) -> None:
        """A view of all topics (a broker's) follows topics registered after it started; ready once read."""
        view = ClusterView(self.zk, all_topics=True)
        self.assertFalse(view.ready)
        self.register(1, b"h:1", {"a": 2})
        self.successResultOf(view.start())
        self.addCleanup(view.stop)
        self.assertTrue(view.ready and view.connected)
        self.assertEqual((view.topics(), view.holders("a")), (["a"], {1: 2}))
        self.successResultOf(self.broker.create(paths.broker_topic_path("b", 1), b"3", ephemeral=True,
                                                makepath=True))
        self.assertEqual((view.topics(), view.holders("b")), (["a", "b"], {1: 3}))
        self.successResultOf(self.broker.delete(paths.broker_id_path(1)))
        self.assertEqual(view.holders("b"), {})  # registered by a broker that is not live

    def test_all_topics_from_an_empty_cluster(self) -> None:
        """Started before any broker or topic path exists, a view of all topics still hears of the first topic
        registered later, and of its holder's partitions."""
        view = ClusterView(self.zk, all_topics=True)
        self.successResultOf(view.start())
        view.add_listener(self.changed)
        self.addCleanup(view.stop)
        self.assertEqual(view.topics(), [])
        self.register(1, b"h:1", {"orders": 2})
        self.assertEqual((view.topics(), view.holders("orders")), (["orders"], {1: 2}))
        self.assertGreaterEqual(self.changes, 2)

    def test_kafka_07_registration_value(self) -> None:
        """A 0.7 broker's creator:host:port (creator <host>-<ms>) reads as (host, port)."""
        view = self.view()
        self.register(1, b"10.0.0.1-1300000000:10.0.0.1:9092", {"clicks": 2})
        self.assertEqual(view.brokers, {1: ("10.0.0.1", 9092)})
        self.assertEqual(view.partitions("clicks"), [(1, 0), (1, 1)])

    def test_what_twlog_writes(self) -> None:
        """What a twlog broker registers (0.7's form, IPv6 in brackets) reads back as its host and port."""
        view = self.view()
        self.register(1, broker_value("10.0.0.1", 9092, 1300000000000).encode())
        self.register(2, broker_value("::1", 9093, 1300000000000).encode())
        self.assertEqual(view.brokers, {1: ("10.0.0.1", 9092), 2: ("::1", 9093)})

    def test_partitions_only_of_live_brokers_sorted(self) -> None:
        """A topic's partitions are those of live brokers, sorted by (broker id, partition), numerically."""
        self.register(10, b"h:10", {"clicks": 1})
        self.register(2, b"h:2", {"clicks": 2})
        self.successResultOf(self.broker.create(paths.broker_topic_path("clicks", 7), b"4", ephemeral=True))
        view = self.view()
        self.assertEqual(view.partitions("clicks"), [(2, 0), (2, 1), (10, 0)])

    def test_bad_registration_is_ignored(self) -> None:
        """A broker value that is not host:port is skipped; the others still count."""
        self.register(1, b"garbage")
        self.register(2, b"h:2")
        self.assertEqual(self.view().brokers, {2: ("h", 2)})

    def test_malformed_values_warned_once(self) -> None:
        """Every kind of bad value is skipped with one warning, not again when a watch reads it again."""
        warnings: list[str] = []
        self.register(2, b"h:2")
        bad = [(f"{paths.BROKER_IDS}/x", b"h:1"), (paths.broker_topic_path("clicks", 2), b"n"),
               (paths.broker_topic_path("clicks", 9), b"1"), (f"{paths.broker_topic_path('clicks')}/b", b"1"),
               (paths.broker_topic_path("a b", 2), b"1")]
        for path, value in bad:
            self.successResultOf(self.broker.create(path, value, makepath=True))
        view = ClusterView(self.zk, ["clicks", "a b"])
        def observer(event) -> None:
            if event.get("log_source") is view:
                warnings.append(event["problem"])

        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        self.successResultOf(view.start())
        self.addCleanup(view.stop)
        self.register(3, b"h:3", {"clicks": 1})  # watches read brokers and the topic again
        self.assertEqual(view.topic_partitions("clicks"), [TopicPartition("clicks", "3-0")])
        self.assertEqual(sorted(warnings), [
            "/brokers/ids/x: 'x' is not a broker id",
            "/brokers/topics/a b: the topic name 'a b' may only contain letters, digits, '.', '_' and '-'",
            "/brokers/topics/clicks/2: partition count b'n' is not a non-negative integer",
            "/brokers/topics/clicks/9: broker 9 is not live (no usable /brokers/ids/9)",
            "/brokers/topics/clicks/b: 'b' is not a broker id",
        ])

    def test_topic_registered_later(self) -> None:
        """A topic nobody registered yet is watched for its creation."""
        view = self.view()
        self.register(0, b"h:1")
        self.assertEqual(view.partitions("clicks"), [])
        self.successResultOf(self.broker.create(paths.broker_topic_path("clicks", 0), b"2", ephemeral=True,
                                                makepath=True))
        self.assertEqual(view.partitions("clicks"), [(0, 0), (0, 1)])

    def test_watch_topic_later(self) -> None:
        """A topic followed after start is read at once, and followed."""
        self.register(0, b"h:1", {"t": 2})
        view = self.view(())
        self.successResultOf(view.watch_topic("t"))
        self.assertEqual(view.partitions("t"), [(0, 0), (0, 1)])
        self.assertEqual(view.topics(), ["t"])
        self.register(3, b"h:3", {"t": 1})
        self.assertEqual(view.partitions("t"), [(0, 0), (0, 1), (3, 0)])

    def test_reads_again_after_reconnecting(self) -> None:
        """Changes made while the connection was lost (watches gone) are read on reconnecting."""
        view = self.view()
        self.zk.suspend()
        self.register(4, b"h:4", {"clicks": 1})
        self.assertEqual(view.brokers, {})
        self.zk.reconnect()
        self.assertEqual((view.brokers, view.partitions("clicks")), ({4: ("h", 4)}, [(4, 0)]))
        self.register(5, b"h:5")  # watching again
        self.assertEqual(set(view.brokers), {4, 5})

    def test_reads_again_in_a_new_session(self) -> None:
        """After the session expired, the new session reads (and watches) everything again."""
        view = self.view()
        self.register(4, b"h:4")
        self.zk.expire()
        self.register(6, b"h:6")
        self.zk.reconnect()
        self.assertEqual(set(view.brokers), {4, 6})
        self.register(7, b"h:7")
        self.assertEqual(set(view.brokers), {4, 6, 7})

    def test_stopped_view_ignores_watches(self) -> None:
        """After stop, changes are not followed and listeners are not called."""
        view = self.view()
        view.stop()
        self.register(1, b"h:1")
        self.assertEqual((view.brokers, self.changes), ({}, 0))


class AddressTests(SynchronousTestCase):
    def test_formats(self) -> None:
        """Registrations read as host:port, IPv6 in brackets, and Kafka 0.7's creator:host:port."""
        self.assertEqual(parse_broker_address(b"127.0.0.1:9092"), ("127.0.0.1", 9092))
        self.assertEqual(parse_broker_address(b"10.0.0.1-1300000000:10.0.0.1:9092"), ("10.0.0.1", 9092))
        self.assertEqual(parse_broker_address(b"[::1]:9092"), ("::1", 9092))

    def test_07_forms(self) -> None:
        """0.7's <host>-<ms>:<host>:<port> with hyphenated names, IPv6 bracketed or bare, and surrounding space."""
        cases = {
            b"10.0.0.1-1300000000:10.0.0.1:9092": ("10.0.0.1", 9092),
            b"my-host-1300000000000:my-host:9092": ("my-host", 9092),
            b"[::1]-1300000000000:[::1]:9092": ("::1", 9092),
            b"::1-1300000000000:::1:9092": ("::1", 9092),
            b"some-creator:h:1": ("h", 1),
            b" h:1\n": ("h", 1),
        }
        for value, address in cases.items():
            self.assertEqual(parse_broker_address(value), address, value)

    def test_bad(self) -> None:
        """A value without a host or a port is a ValueError."""
        for value in (b"garbage", b"h:", b":9092", b"h:99999", b"h:x", b"x[::1]:9", b"\xff:1"):
            self.assertRaises(ValueError, parse_broker_address, value)
