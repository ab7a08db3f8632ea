"""Tests for twlog.client.discovery: the broker-address parser, partition locations, and discovery's reading
of METADATA answers and of ZooKeeper registrations (Kafka 0.7's layout), without a network."""

from __future__ import annotations

from functools import partial

from twisted.trial.unittest import SynchronousTestCase

from twlog.client import discovery
from twlog.client.discovery import (
    PartitionLocation,
    cluster_partitions,
    discover,
    format_address,
    metadata_partitions,
    parse_brokers,
    registered_partitions,
)
from twlog.coord import paths
from twlog.coord.replication.values import PartitionState, TopicAssignment
from twlog.errors import (
    ConnectionFailed,
    InvalidRequest,
    InvalidTopic,
    LeaderNotAvailable,
    PartitionsOffline,
    UnknownTopic,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import MetadataResponse, TopicMetadata, describe_request
from twlog.protocol.replication_codec import (
    NO_BROKER,
    ClusterMetadataV2Request,
    ClusterMetadataV2Response,
    ReplicatedLayout,
)
from twlog.protocol.replication_codec import PartitionState as ReplicatedPartition
from twlog.protocol.responses import (
    VIEW_CURRENT,
    VIEW_STALE,
    VIEW_STANDALONE,
    VIEW_STARTING,
    BrokerAddress,
    ClusterMetadataResponse,
    TopicLayout,
)


class FakeBlockingZooKeeper:
    """The reads of a BlockingZooKeeper over a dict of paths to values."""

    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def get(self, path: str) -> bytes | None:
        return self.nodes.get(path)


class ParseBrokersTests(SynchronousTestCase):
    def test_parse_brokers(self) -> None:
        """host:port lists, IPv6 in brackets, and lists of pairs parse; anything else is a ValueError."""
        self.assertEqual(parse_brokers("a:1, b:2"), [("a", 1), ("b", 2)])
        self.assertEqual(parse_brokers("[::1]:9092"), [("::1", 9092)])
        self.assertEqual(parse_brokers([("a", "3")]), [("a", 3)])
        self.assertRaises(ValueError, parse_brokers, "a")
        self.assertRaises(ValueError, parse_brokers, "")

    def test_format_address(self) -> None:
        """Addresses print as host:port, IPv6 hosts in brackets (so they parse back)."""
        self.assertEqual(format_address("h", 1), "h:1")
        self.assertEqual(format_address("::1", 9092), "[::1]:9092")
        self.assertEqual(parse_brokers(format_address("::1", 9092)), [("::1", 9092)])


class LocationTests(SynchronousTestCase):
    def test_location_is_a_partition_and_an_address(self) -> None:
        """A location exposes its partition's identity and sorts as its TopicPartition, whatever the address."""
        a = PartitionLocation(TopicPartition("t", "10-0"), 10, "a", 1)
        b = PartitionLocation(TopicPartition("t", "2-1"), 2, "z", 9)
        self.assertEqual((a.topic, a.leader, a.number, a.name), ("t", 10, 0, "10-0"))
        self.assertEqual(sorted([a, b]), [b, a])
        self.assertEqual(str(a), "t:10-0 at a:1")


class MetadataPartitionsTests(SynchronousTestCase):
    def test_partitions_of_the_topics_asked(self) -> None:
        """The broker's partitions of each topic asked, numbered per broker; other topics are ignored."""
        metadata = MetadataResponse(3, "h", 1, (TopicMetadata("t", 0, 2), TopicMetadata("other", 0, 5)))
        self.assertEqual(metadata_partitions(metadata, ["t", "absent"], "h:1"),
                         [TopicPartition("t", "3-0"), TopicPartition("t", "3-1")])

    def test_refused_topic_raises(self) -> None:
        """A topic the broker refuses raises its typed error, naming the broker."""
        metadata = MetadataResponse(3, "h", 1, (TopicMetadata("a/b", InvalidTopic.code, 0),))
        error = self.assertRaises(InvalidTopic, metadata_partitions, metadata, ["a/b"], "h:1")
        self.assertIn("broker h:1 refuses topic 'a/b'", str(error))


class RegisteredPartitionsTests(SynchronousTestCase):
    def test_kafka_07_registration_value(self) -> None:
        """A 0.7 broker registers creator:host:port with creator host-ms; the host is the middle part."""
        zk = FakeBlockingZooKeeper({
            paths.broker_id_path(0): b"10.0.0.1-1300000000:10.0.0.1:9092",
            paths.broker_topic_path("clicks", 0): b"2",
        })
        self.assertEqual(
            registered_partitions(zk, ["clicks"]),
            [PartitionLocation(TopicPartition.on_broker("clicks", 0, p), 0, "10.0.0.1", 9092) for p in (0, 1)],
        )

    def test_replicated_topic_at_its_leaders(self) -> None:
        """A replicated topic (no 0.7 registration) is read from /twlog/topics: partitions 0..P-1 at their
        states' leaders; one with no state yet is offline (left out only when asked to)."""
        zk = FakeBlockingZooKeeper({
            paths.broker_id_path(1): b"b1:9093",
            paths.broker_id_path(2): b"b2:9093",
            paths.replicated_topic_path("r"): TopicAssignment("r", {0: (1, 2), 1: (2, 1), 2: (1, 2)}).encode(),
            paths.partition_state_path("r", 0): PartitionState(2, 3, 1, (2, 1)).encode(),
            paths.partition_state_path("r", 1): PartitionState(1, 0, 1, (1,)).encode(),
        })
        self.assertRaises(PartitionsOffline, registered_partitions, zk, ["r"])
        self.assertEqual(registered_partitions(zk, ["r"], allow_partial=True), [
            PartitionLocation(TopicPartition("r", "0"), 2, "b2", 9093),
            PartitionLocation(TopicPartition("r", "1"), 1, "b1", 9093),
        ])

    def test_twlog_registration_and_departed_brokers(self) -> None:
        """host:port registrations are read; topics registered by brokers no longer live are left out."""
        zk = FakeBlockingZooKeeper({
            paths.broker_id_path(1): b"b1.example:9093",
            paths.broker_topic_path("t", 1): b"1",
            paths.broker_topic_path("t", 7): b"4",  # broker 7 left: its /brokers/ids node is gone
        })
        self.assertEqual(registered_partitions(zk, ["t", "none"]),
                         [PartitionLocation(TopicPartition("t", "1-0"), 1, "b1.example", 9093)])

    def test_discover_needs_one_source(self) -> None:
        """discover takes exactly one of brokers and zookeeper."""
        self.assertRaises(ValueError, discover, ["t"])
        self.assertRaises(ValueError, discover, ["t"], brokers="h:1", zookeeper="z:2181")


class FakeSyncConnection:
    """A SyncConnection to a table of brokers by (host, port): each answers CLUSTER_METADATA and METADATA as
    given, or is down (None)."""

    brokers: dict = {}
    sleeps: list = []

    def __init__(self, host: str, port: int, options=None) -> None:
        self.broker = self.brokers[host, port]
        if self.broker is None:
            raise ConnectionFailed(f"cannot connect to broker {host}:{port}: refused")
        self.broker.setdefault("asked", 0)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def cluster_metadata_v2(self, topics=()):
        """An older broker (no "cluster_v2" given) answers InvalidRequest, as twlog before type 14 does."""
        self.broker["asked_v2"] = self.broker.get("asked_v2", 0) + 1
        if "cluster_v2" not in self.broker:
            raise InvalidRequest(f"broker refused {describe_request(ClusterMetadataV2Request(tuple(topics)))}")
        return self.broker["cluster_v2"]

    def cluster_metadata(self, topics=()):
        self.broker["asked"] += 1
        answers = self.broker["cluster"]
        return answers.pop(0) if isinstance(answers, list) else answers

    def metadata(self, topics=()):
        return MetadataResponse(self.broker["id"], "h", 1, ())


def layout(view: int, me: int, brokers: dict[int, int], holders: dict[int, int]) -> ClusterMetadataResponse:
    """A CLUSTER_METADATA answer from broker C{me}: brokers id -> port on host h, topic t held as C{holders}."""
    return ClusterMetadataResponse(me, view, tuple(BrokerAddress(b, "h", p) for b, p in sorted(brokers.items())),
                                   (TopicLayout("t", 0, tuple(sorted(holders.items()))),))


class BootstrapTests(SynchronousTestCase):
    """discover() from broker addresses: one broker that follows ZooKeeper describes the cluster."""

    def setUp(self) -> None:
        self.discover = partial(discover, sleep=FakeSyncConnection.sleeps.append, connect=FakeSyncConnection)
        FakeSyncConnection.sleeps.clear()
        FakeSyncConnection.brokers = {}

    def broker(self, port: int, broker_id: int, cluster) -> None:
        FakeSyncConnection.brokers["h", port] = {"id": broker_id, "cluster": cluster}

    def test_one_address_finds_every_partition(self) -> None:
        """One address of a ZooKeeper cluster gives every broker's partitions, with their addresses."""
        self.broker(1, 0, layout(VIEW_CURRENT, 0, {0: 1, 1: 2}, {0: 2, 1: 1}))
        FakeSyncConnection.brokers["h", 2] = {"id": 1}  # asked METADATA only: is it reachable, as broker 1?
        found = self.discover(["t"], brokers="h:1")
        self.assertEqual([(str(p.tp), p.port) for p in found], [("t:0-0", 1), ("t:0-1", 1), ("t:1-0", 2)])

    def test_unreachable_holder_is_named(self) -> None:
        """A broker holding partitions that does not answer fails discovery, naming it and its partitions."""
        self.broker(1, 0, layout(VIEW_CURRENT, 0, {0: 1, 1: 2}, {0: 1, 1: 2}))
        FakeSyncConnection.brokers["h", 2] = None
        with self.assertRaises(ConnectionFailed) as caught:
            self.discover(["t"], brokers="h:1")
        self.assertIn("broker 1 at h:2 holds t:1-0, t:1-1 but cannot be reached", str(caught.exception))
        self.assertEqual(len(self.discover(["t"], brokers="h:1", check_reachable=False)), 3)

    def test_stale_registration_is_named(self) -> None:
        """A holder's address answering as another broker is an error, not a read of the wrong partitions."""
        self.broker(1, 0, layout(VIEW_CURRENT, 0, {0: 1, 1: 2}, {1: 1}))
        FakeSyncConnection.brokers["h", 2] = {"id": 7}
        with self.assertRaises(ConnectionFailed) as caught:
            self.discover(["t"], brokers="h:1")
        self.assertIn("h:2 answers as broker 7", str(caught.exception))

    def test_next_address_when_one_is_down(self) -> None:
        """An address that does not answer is skipped when a later one describes the cluster."""
        FakeSyncConnection.brokers["h", 1] = None
        self.broker(2, 1, layout(VIEW_CURRENT, 1, {1: 2}, {1: 1}))
        self.assertEqual([str(p.tp) for p in self.discover(["t"], brokers="h:1,h:2")], ["t:1-0"])

    def test_standalone_brokers_are_merged(self) -> None:
        """Brokers without ZooKeeper each describe themselves: every address is asked, and all must answer."""
        self.broker(1, 0, layout(VIEW_STANDALONE, 0, {0: 1}, {0: 1}))
        self.broker(2, 1, layout(VIEW_STANDALONE, 1, {1: 2}, {1: 2}))
        self.broker(3, 1, layout(VIEW_STANDALONE, 1, {1: 3}, {1: 2}))  # broker 1 again, another address
        found = self.discover(["t"], brokers="h:1,h:2,h:3")
        self.assertEqual([(p.name, p.port) for p in found], [("0-0", 1), ("1-0", 2), ("1-1", 2)])
        FakeSyncConnection.brokers["h", 2] = None
        with self.assertRaises(ConnectionFailed) as caught:
            self.discover(["t"], brokers="h:1,h:2")
        self.assertIn("cannot connect to broker h:2", str(caught.exception))

    def test_starting_broker_is_asked_again(self) -> None:
        """A broker that has not read ZooKeeper yet is asked again after a short wait (bounded), then named."""
        self.broker(1, 0, [layout(VIEW_STARTING, 0, {0: 1}, {}), layout(VIEW_CURRENT, 0, {0: 1}, {0: 1})])
        self.assertEqual([p.name for p in self.discover(["t"], brokers="h:1")], ["0-0"])
        self.assertEqual(FakeSyncConnection.sleeps, [discovery.STARTING_WAIT_S])
        self.broker(1, 0, layout(VIEW_STARTING, 0, {0: 1}, {}))
        with self.assertRaises(ConnectionFailed) as caught:
            self.discover(["t"], brokers="h:1")
        self.assertIn("broker h:1 has not read the cluster from ZooKeeper yet", str(caught.exception))
        self.assertEqual(FakeSyncConnection.brokers["h", 1]["asked"], discovery.STARTING_RETRIES + 1)

    def test_stale_view_is_used(self) -> None:
        """A broker whose ZooKeeper session is down describes the cluster as it last saw it."""
        self.broker(1, 0, layout(VIEW_STALE, 0, {0: 1}, {0: 1}))
        self.assertEqual([p.name for p in self.discover(["t"], brokers="h:1")], ["0-0"])

    def test_unknown_topic(self) -> None:
        """A topic with no holders is an UnknownTopic naming the live brokers and the address asked."""
        self.broker(1, 0, layout(VIEW_CURRENT, 0, {0: 1, 1: 2}, {}))
        with self.assertRaises(UnknownTopic) as caught:
            self.discover(["t"], brokers="h:1")
        self.assertIn("topic 't' is on none of the brokers of the cluster (live: 0, 1; asked h:1)",
                      str(caught.exception))

    def test_cluster_partitions(self) -> None:
        """cluster_partitions reads one answer: InvalidTopic raises; a holder without an address is a broker that
        is down: an error naming it and its partitions, or, when a partial answer is allowed, a warning."""
        refused = ClusterMetadataResponse(0, VIEW_CURRENT, (), (TopicLayout("a b", InvalidTopic.code),))
        self.assertRaises(InvalidTopic, cluster_partitions, refused, ["a b"])
        orphan = layout(VIEW_CURRENT, 0, {0: 1}, {0: 1, 4: 2})
        with self.assertRaises(PartitionsOffline) as caught:
            cluster_partitions(orphan, ["t"])
        self.assertEqual(str(caught.exception), "broker 4, which holds t:4-0..4-1, is not registered: down?")
        self.assertEqual([tp.name for tp in caught.exception.offline], ["4-0", "4-1"])
        self.assertEqual([p.name for p in caught.exception.available], ["0-0"])
        with self.assertLogs(discovery.__name__, "WARNING") as logged:
            self.assertEqual([p.name for p in cluster_partitions(orphan, ["t"], allow_partial=True)], ["0-0"])
        self.assertEqual(len(logged.records), 1)
        self.assertIn("leaving out 2 partitions that cannot be read: broker 4, which holds t:4-0..4-1",
                      logged.output[0])
        self.assertEqual(cluster_partitions(orphan, ["other"]), [])
        everything_down = layout(VIEW_CURRENT, 0, {0: 1}, {4: 1})
        self.assertRaises(PartitionsOffline, cluster_partitions, everything_down, ["t"], allow_partial=True)


def replicated_answer(me: int = 0, view: int = VIEW_CURRENT) -> ClusterMetadataV2Response:
    """A CLUSTER_METADATA_V2 answer: brokers 0 and 1 (ports 1, 2), 0.7 topic t on broker 0, replicated topic r
    with partition 0 led by broker 1 and partition 1 offline."""
    return ClusterMetadataV2Response(me, view, 1, (BrokerAddress(0, "h", 1), BrokerAddress(1, "h", 2)), (
        TopicLayout("t", 0, ((0, 1),)),
        ReplicatedLayout("r", 0, (ReplicatedPartition(0, 0, 1, 4, (1, 0), (1, 0)),
                                  ReplicatedPartition(1, LeaderNotAvailable.code, NO_BROKER, 2, (0, 1), (0,)))),
    ))


class ClusterMetadataV2Tests(SynchronousTestCase):
    """Discovery asks CLUSTER_METADATA_V2 first and reads replicated topics' leaders; an older broker, which
    closes the connection on type 14, is asked type 8."""

    def setUp(self) -> None:
        self.discover = partial(discover, sleep=FakeSyncConnection.sleeps.append, connect=FakeSyncConnection)
        FakeSyncConnection.brokers = {}

    def test_replicated_topic_located_at_its_leaders(self) -> None:
        FakeSyncConnection.brokers["h", 1] = {"id": 0, "cluster_v2": replicated_answer()}
        FakeSyncConnection.brokers["h", 2] = {"id": 1}
        found = self.discover(["r"], brokers="h:1", allow_partial=True)
        self.assertEqual([(str(p.tp), p.leader, p.port) for p in found], [("r:0", 1, 2)])
        with self.assertRaises(PartitionsOffline) as caught:
            self.discover(["r"], brokers="h:1")
        self.assertIn("r:1 has no live leader", str(caught.exception))
        self.assertEqual(FakeSyncConnection.brokers["h", 1].get("asked", 0), 0, "type 8 never asked")

    def test_07_topic_through_v2(self) -> None:
        FakeSyncConnection.brokers["h", 1] = {"id": 0, "cluster_v2": replicated_answer()}
        self.assertEqual([str(p.tp) for p in self.discover(["t"], brokers="h:1")], ["t:0-0"])

    def test_older_broker_is_asked_type_8(self) -> None:
        FakeSyncConnection.brokers["h", 1] = {"id": 0, "cluster": layout(VIEW_CURRENT, 0, {0: 1}, {0: 2})}
        self.assertEqual([str(p.tp) for p in self.discover(["t"], brokers="h:1")], ["t:0-0", "t:0-1"])
        self.assertEqual((FakeSyncConnection.brokers["h", 1]["asked_v2"], FakeSyncConnection.brokers["h", 1]["asked"]),
                         (1, 1))

    def test_merged_standalone_answers_keep_v2(self) -> None:
        """Standalone answers, one V2 and one from an older broker, merge into a V2 answer."""
        mine = ClusterMetadataV2Response(0, VIEW_STANDALONE, NO_BROKER, (BrokerAddress(0, "h", 1),),
                                         (TopicLayout("t", 0, ((0, 1),)),))
        FakeSyncConnection.brokers["h", 1] = {"id": 0, "cluster_v2": mine}
        FakeSyncConnection.brokers["h", 2] = {"id": 1, "cluster": layout(VIEW_STANDALONE, 1, {1: 2}, {1: 1})}
        found = self.discover(["t"], brokers="h:1,h:2")
        self.assertEqual([str(p.tp) for p in found], ["t:0-0", "t:1-0"])
        cluster = discovery.bootstrap("h:1,h:2", ("t",), sleep=None, connect=FakeSyncConnection)
        self.assertIsInstance(cluster.response, ClusterMetadataV2Response)
