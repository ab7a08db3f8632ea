"""Tests for twlog.client.discovery: the broker-address parser, partition locations, and discovery's reading
of METADATA answers and of ZooKeeper registrations (Kafka 0.7's layout), without a network."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.client.discovery import (
    PartitionLocation,
    discover,
    format_address,
    metadata_partitions,
    parse_brokers,
    registered_partitions,
)
from twlog.coord import paths
from twlog.errors import InvalidTopic
from twlog.partition import TopicPartition
from twlog.protocol.codec import MetadataResponse, TopicMetadata


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
        a = PartitionLocation(TopicPartition("t", 10, 0), "a", 1)
        b = PartitionLocation(TopicPartition("t", 2, 1), "z", 9)
        self.assertEqual((a.topic, a.broker_id, a.partition, a.name), ("t", 10, 0, "10-0"))
        self.assertEqual(sorted([a, b]), [b, a])
        self.assertEqual(str(a), "t:10-0 at a:1")


class MetadataPartitionsTests(SynchronousTestCase):
    def test_partitions_of_the_topics_asked(self) -> None:
        """The broker's partitions of each topic asked, numbered per broker; other topics are ignored."""
        metadata = MetadataResponse(3, "h", 1, (TopicMetadata("t", 0, 2), TopicMetadata("other", 0, 5)))
        self.assertEqual(metadata_partitions(metadata, ["t", "absent"], "h:1"),
                         [TopicPartition("t", 3, 0), TopicPartition("t", 3, 1)])

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
            [PartitionLocation(TopicPartition("clicks", 0, p), "10.0.0.1", 9092) for p in (0, 1)],
        )

    def test_twlog_registration_and_departed_brokers(self) -> None:
        """host:port registrations are read; topics registered by brokers no longer live are left out."""
        zk = FakeBlockingZooKeeper({
            paths.broker_id_path(1): b"b1.example:9093",
            paths.broker_topic_path("t", 1): b"1",
            paths.broker_topic_path("t", 7): b"4",  # broker 7 left: its /brokers/ids node is gone
        })
        self.assertEqual(registered_partitions(zk, ["t", "none"]),
                         [PartitionLocation(TopicPartition("t", 1, 0), "b1.example", 9093)])

    def test_discover_needs_one_source(self) -> None:
        """discover takes exactly one of brokers and zookeeper."""
        self.assertRaises(ValueError, discover, ["t"])
        self.assertRaises(ValueError, discover, ["t"], brokers="h:1", zookeeper="z:2181")
