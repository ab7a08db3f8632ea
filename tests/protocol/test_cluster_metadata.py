"""CLUSTER_METADATA (type 8): the byte layout of docs/protocol.md, built by hand, and the broker's answers."""

from __future__ import annotations

import struct

import attrs
from twisted.trial.unittest import SynchronousTestCase

from tests.protocol.test_server import BrokerTestMixin
from twlog.errors import (
    NO_ERROR,
    InvalidTopic,
    LeaderNotAvailable,
    MalformedRequest,
    ProtocolViolation,
    ReplicatedTopic,
)
from twlog.protocol import codec
from twlog.protocol.codec import ClusterMetadataRequest, MetadataRequest, decode_request, decode_response
from twlog.protocol.replication_codec import (
    NO_BROKER,
    ClusterMetadataV2Request,
    ReplicatedLayout,
    decode_cluster_metadata_v2_response,
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
    decode_cluster_metadata_response,
    encode_cluster_metadata_response,
)
from twlog.storage.message import encode_message_set


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def kstr(s: str) -> bytes:
    data = s.encode()
    return i16(len(data)) + data


#: A two-broker cluster as the documented layout writes it.
FRAME = (
    i16(0) + i32(1) + i8(VIEW_CURRENT)
    + i16(2) + i32(0) + kstr("a.example") + i32(9092) + i32(1) + kstr("b.example") + i32(9093)
    + i16(2)
    + kstr("clicks") + i16(0) + i16(2) + i32(0) + i32(4) + i32(1) + i32(2)
    + kstr("a/b") + i16(InvalidTopic.code) + i16(0)
)
VALUE = ClusterMetadataResponse(
    1, VIEW_CURRENT,
    (BrokerAddress(0, "a.example", 9092), BrokerAddress(1, "b.example", 9093)),
    (TopicLayout("clicks", 0, ((0, 4), (1, 2))), TopicLayout("a/b", InvalidTopic.code)),
)


class LayoutTests(SynchronousTestCase):
    def test_request(self) -> None:
        """The request is [int16 8][int16 count][topics], as METADATA's with another type; 0 topics is all."""
        self.assertEqual(codec.encode_request(ClusterMetadataRequest(("a", "b"))),
                         i16(8) + i16(2) + kstr("a") + kstr("b"))
        self.assertEqual(codec.encode_request(ClusterMetadataRequest()), i16(8) + i16(0))
        self.assertEqual(decode_request(i16(8) + i16(1) + kstr("x")), ClusterMetadataRequest(("x",)))
        self.assertEqual(decode_request(i16(7) + i16(0)), MetadataRequest())
        self.assertRaises(MalformedRequest, decode_request, i16(8) + i16(1))

    def test_response_by_hand(self) -> None:
        """error, answering broker, view, brokers (id, host, port), then per topic error and (broker, count) holders."""
        self.assertEqual(decode_cluster_metadata_response(FRAME), VALUE)
        self.assertEqual(encode_cluster_metadata_response(NO_ERROR, VALUE), FRAME)
        self.assertEqual(decode_response(ClusterMetadataRequest(), FRAME), VALUE)

    def test_accessors(self) -> None:
        """addresses maps ids to (host, port); layout finds a topic's entry."""
        self.assertEqual(VALUE.addresses, {0: ("a.example", 9092), 1: ("b.example", 9093)})
        self.assertEqual(VALUE.layout("clicks").holders, ((0, 4), (1, 2)))
        self.assertIsNone(VALUE.layout("nope"))

    def test_error_only(self) -> None:
        """An error-only frame decodes with broker id -1 and nothing else."""
        self.assertEqual(decode_cluster_metadata_response(i16(InvalidTopic.code)),
                         ClusterMetadataResponse(-1, VIEW_STANDALONE, (), (), InvalidTopic.code))

    def test_prefixes_and_trailing_bytes(self) -> None:
        """Every strict prefix (but the bare error), and one byte more, are protocol violations."""
        for n in range(len(FRAME)):
            if n != 2:
                self.assertRaises(ProtocolViolation, decode_cluster_metadata_response, FRAME[:n])
        self.assertRaises(ProtocolViolation, decode_cluster_metadata_response, FRAME + b"\x00")
        self.assertRaises(ProtocolViolation, decode_cluster_metadata_response, i16(0) + i32(1) + i8(1) + i16(-1))


@attrs.define
class FakeCluster:
    """A ClusterSource in memory."""

    brokers: dict = attrs.Factory(dict)
    registrations: dict = attrs.Factory(dict)
    #: What /twlog/held remembers: topic -> {broker id: count}, of brokers live or not.
    held: dict = attrs.Factory(dict)
    ready: bool = True
    connected: bool = True

    def topics(self) -> list[str]:
        return sorted(self.registrations)

    def holders(self, topic: str) -> dict[int, int]:
        return {b: n for b, n in self.registrations.get(topic, {}).items() if b in self.brokers}

    def offline_holders(self, topic: str) -> dict[int, int]:
        return {b: n for b, n in self.held.get(topic, {}).items() if b not in self.brokers}


class HandlerTests(BrokerTestMixin, SynchronousTestCase):
    def ask(self, *topics: str) -> ClusterMetadataResponse:
        return decode_cluster_metadata_response(self.broker.cluster_metadata(ClusterMetadataRequest(topics)))

    def setUp(self) -> None:
        self.make_broker(broker_id=3, num_partitions=2)
        self.broker.port = 9094
        self.logs.get_or_create_log("mine", 0).append(encode_message_set([b"m"]))

    def test_standalone(self) -> None:
        """Without ZooKeeper the broker is the cluster: itself, and its topics (all of them when none is named)."""
        answer = self.ask()
        self.assertEqual((answer.broker_id, answer.view), (3, VIEW_STANDALONE))
        self.assertEqual(answer.brokers, (BrokerAddress(3, "127.0.0.1", 9094),))
        self.assertEqual(answer.topics, (TopicLayout("mine", 0, ((3, 2),)),))

    def test_named_topics(self) -> None:
        """A named topic nobody holds has no holders (only partitions that exist are reported); a bad name
        gets InvalidTopic."""
        self.assertEqual(self.ask("new", "a b", "mine").topics, (
            TopicLayout("new", 0), TopicLayout("a b", InvalidTopic.code), TopicLayout("mine", 0, ((3, 2),)),
        ))

    def test_cluster(self) -> None:
        """With a cluster view: every live broker and every topic's holders; its own counts from its logs."""
        self.broker.cluster = FakeCluster(
            brokers={1: ("b1", 9092), 3: ("old", 1), 5: ("b5", 9092)},
            registrations={"clicks": {1: 4, 5: 2, 9: 8}, "mine": {1: 1}, "gone": {9: 1}},
        )
        answer = self.ask()
        self.assertEqual(answer.view, VIEW_CURRENT)
        self.assertEqual(answer.addresses, {1: ("b1", 9092), 3: ("127.0.0.1", 9094), 5: ("b5", 9092)})
        self.assertEqual(answer.topics, (
            TopicLayout("clicks", 0, ((1, 4), (5, 2))),
            TopicLayout("mine", 0, ((1, 1), (3, 2))),
        ))

    def test_offline_holders(self) -> None:
        """A broker that held a topic and is not live is listed as a holder with no address (its partitions
        exist and are offline); a live one's record adds nothing to its registration."""
        self.broker.cluster = FakeCluster(
            brokers={1: ("b1", 9092)},
            registrations={"clicks": {1: 4}},
            held={"clicks": {1: 4, 2: 3}, "gone": {7: 1}},
        )
        answer = self.ask("clicks", "gone")
        self.assertEqual(answer.topics, (TopicLayout("clicks", 0, ((1, 4), (2, 3))), TopicLayout("gone", 0, ((7, 1),))))
        self.assertNotIn(2, answer.addresses)

    def test_view_states(self) -> None:
        """Disconnected: the last layout, said to be stale; not read yet: itself alone, said to be starting."""
        cluster = self.broker.cluster = FakeCluster(brokers={1: ("b1", 9092)}, registrations={"clicks": {1: 4}},
                                                    connected=False)
        answer = self.ask("clicks")
        self.assertEqual((answer.view, answer.topics), (VIEW_STALE, (TopicLayout("clicks", 0, ((1, 4),)),)))
        cluster.ready = False
        answer = self.ask("clicks")
        self.assertEqual((answer.view, [b.broker_id for b in answer.brokers]), (VIEW_STARTING, [3]))
        self.assertEqual(answer.topics, (TopicLayout("clicks", 0),))


@attrs.define
class FakeReplicatedCluster(FakeCluster):
    """A ClusterSource that also holds replicated topics (as ClusterView.replicated gives them)."""

    replicated_topics: dict = attrs.Factory(dict)

    def topics(self) -> list[str]:
        return sorted(set(self.registrations) | set(self.replicated_topics))

    def holders(self, topic: str) -> dict[int, int]:
        if topic in self.replicated_topics:  # as ClusterLayout.holders: leaders' counts
            return {p.leader: 1 for p in self.replicated_topics[topic].partitions if p.leader >= 0}
        return super().holders(topic)

    def replicated(self, topic: str):
        return self.replicated_topics.get(topic)


ORDERS = ReplicatedLayout("orders", 0, (
    ReplicatedPartition(0, 0, 1, 2, (1, 5), (1, 5)),
    ReplicatedPartition(1, LeaderNotAvailable.code, NO_BROKER, 0, (5, 1), (5,)),
))


class V2HandlerTests(BrokerTestMixin, SynchronousTestCase):
    """CLUSTER_METADATA_V2 (type 14) answered by the broker, and type 8 leaving replicated topics out."""

    def setUp(self) -> None:
        self.make_broker(broker_id=3, num_partitions=2)
        self.broker.port = 9094
        self.logs.get_or_create_log("mine", 0).append(encode_message_set([b"m"]))
        self.broker.cluster = FakeReplicatedCluster(
            brokers={1: ("b1", 9092), 5: ("b5", 9092)}, registrations={"clicks": {1: 4}},
            replicated_topics={"orders": ORDERS},
        )

    def ask(self, *topics: str):
        return decode_cluster_metadata_v2_response(
            self.broker.cluster_metadata_v2(ClusterMetadataV2Request(topics)))

    def test_served(self) -> None:
        """Type 14 is in the broker's table, so a connection answers it rather than closing."""
        self.assertIn(ClusterMetadataV2Request, self.broker.handlers)

    def test_all_topics(self) -> None:
        """Every topic: 0.7 ones by holders, replicated ones by partition with leader, epoch, replicas, ISR."""
        answer = self.ask()
        self.assertEqual((answer.broker_id, answer.view, answer.controller_id), (3, VIEW_CURRENT, NO_BROKER))
        self.assertEqual(answer.addresses, {1: ("b1", 9092), 3: ("127.0.0.1", 9094), 5: ("b5", 9092)})
        self.assertEqual(answer.topics, (
            TopicLayout("clicks", 0, ((1, 4),)), TopicLayout("mine", 0, ((3, 2),)), ORDERS,
        ))

    def test_named_and_controller(self) -> None:
        """A named replicated topic, and the controller the broker knows of."""
        self.broker.controller_id = lambda: 5
        answer = self.ask("orders", "a b")
        self.assertEqual(answer.controller_id, 5)
        self.assertEqual(answer.topics, (ORDERS, TopicLayout("a b", InvalidTopic.code)))

    def test_type8_leaves_replicated_out(self) -> None:
        """Type 8 does not list replicated topics (their partitions are not <broker>-<n>): named, ReplicatedTopic."""
        all_topics = decode_cluster_metadata_response(self.broker.cluster_metadata(ClusterMetadataRequest(())))
        self.assertEqual([t.topic for t in all_topics.topics], ["clicks", "mine"])
        named = decode_cluster_metadata_response(self.broker.cluster_metadata(ClusterMetadataRequest(("orders",))))
        self.assertEqual(named.topics, (TopicLayout("orders", ReplicatedTopic.code),))

    def test_replicas_held_here_are_still_replicated(self) -> None:
        """A broker holding replicas of a replicated topic (local logs, opened unannounced) describes it as the
        view says: by partition, never as a 0.7 topic of its own; type 8 still leaves it out."""
        self.logs.get_or_create_log("orders", 0)
        self.logs.get_or_create_log("orders", 1)
        self.assertEqual(self.ask("orders").topics, (ORDERS,))
        named = decode_cluster_metadata_response(self.broker.cluster_metadata(ClusterMetadataRequest(("orders",))))
        self.assertEqual(named.topics, (TopicLayout("orders", ReplicatedTopic.code),))

    def test_standalone(self) -> None:
        """Without ZooKeeper: itself, its 0.7 topics, no controller."""
        self.broker.cluster = None
        answer = self.ask()
        self.assertEqual((answer.view, answer.controller_id), (VIEW_STANDALONE, NO_BROKER))
        self.assertEqual(answer.topics, (TopicLayout("mine", 0, ((3, 2),)),))

    def test_over_a_connection(self) -> None:
        """Over a connection: a type 14 frame gets its answer and the connection stays open."""
        protocol, transport = self.connect()
        request = codec.encode_request(ClusterMetadataV2Request(("orders",)))
        protocol.dataReceived(struct.pack(">i", len(request)) + request)
        data = transport.value()
        (size,) = struct.unpack(">i", data[:4])
        self.assertEqual(decode_cluster_metadata_v2_response(data[4:4 + size]).topics, (ORDERS,))
        self.assertFalse(transport.disconnecting)
