"""Tests for twlog.replica.manager: roles per partition, and the requests served once installed on a Broker
(through the broker's protocol on a StringTransport, as on the wire)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.replica.test_follower import FollowerTestMixin, Link
from tests.replica.test_leader import LeaderTestMixin, frame
from twlog.coord.replication.values import PartitionState
from twlog.errors import InvalidRequest, NotLeader
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED
from twlog.protocol.replication_codec import (
    EpochEndOffset,
    EpochEndOffsetRequest,
    EpochQuery,
    ReplicaFetch,
    ReplicaFetchRequest,
    decode_epoch_end_offset_response,
    decode_replica_fetch_response,
    encode_request,
)
from twlog.storage.message import iter_messages


def responses(transport) -> list[bytes]:
    """The response frames written to C{transport} (size prefixes taken off)."""
    data, frames = transport.value(), []
    while data:
        size = int.from_bytes(data[:4], "big")
        frames.append(data[4 : 4 + size])
        data = data[4 + size :]
    return frames


def request_frame(request) -> bytes:
    body = encode_request(request)
    return len(body).to_bytes(4, "big") + body


class WireTests(LeaderTestMixin, SynchronousTestCase):
    def test_unknown_types_until_installed(self) -> None:
        """A broker without the replica side answers REPLICA_FETCH as an unknown type (InvalidRequest)."""
        self.make_broker()
        protocol, transport = self.connect()
        protocol.dataReceived(request_frame(ReplicaFetchRequest(2, 0, 1, (ReplicaFetch("t", 0, 0, 0, 100),))))
        self.assertEqual(responses(transport), [InvalidRequest.code.to_bytes(2, "big")])

    def test_served_once_installed(self) -> None:
        """Installed, the broker answers both types in order on one connection, the fetch's bytes sent as a
        file region."""
        self.start_leader()
        self.produce(b"over the wire", ack=ACK_APPENDED)
        end = self.logs.get_log("t", 0).end_offset
        protocol, transport = self.connect()
        protocol.dataReceived(request_frame(EpochEndOffsetRequest((EpochQuery("t", 0, 4, 4),)))
                              + request_frame(ReplicaFetchRequest(2, 0, 1, (ReplicaFetch("t", 0, 4, 0, 1000),))))
        epochs, fetched = responses(transport)
        self.assertEqual(decode_epoch_end_offset_response(epochs).answers, (EpochEndOffset(0, 4, end),))
        part = decode_replica_fetch_response(fetched).parts[0]
        self.assertEqual([m.payload for m in iter_messages(part.messages, 0)], [b"over the wire"])
        self.assertEqual((part.leader_end, self.leader.state.ends[2]), (end, 0))


class RoleTests(FollowerTestMixin, SynchronousTestCase):
    def test_leader_to_follower_and_back(self) -> None:
        """Becoming a follower stops leading (waiting sets get NotLeader, fetches are refused), and becoming
        leader again stops the follower's fetcher."""
        self.start_leader(isr=(1, 2))
        self.produce(b"a", ack=ACK_APPENDED)
        links = []
        self.manager._connect = lambda broker: links.append(Link(self.broker)) or links[-1]
        waiting = self.produce(b"b")
        follower = self.manager.become_follower("t", 0, leader_id=2, leader_epoch=5)
        result = codec.decode_ack_produce_response(self.successResultOf(waiting)).results[0]
        self.assertEqual(result.error, NotLeader.code)
        self.assertEqual(set(self.manager.followers), {("t", 0)})
        self.assertEqual(self.manager.leaders, {})
        refused = codec.decode_ack_produce_response(self.produce(b"c", ack=ACK_APPENDED)).results[0]
        self.assertEqual(refused.error, NotLeader.code)
        leader = self.manager.become_leader("t", 0, (1, 2, 3), PartitionState(1, 6, 1, (1, 2)), 3)
        self.assertEqual(self.manager.followers, {})
        asked = len(links[0].requests)
        self.assertGreater(asked, 0)
        self.clock.advance(10)  # past many backoffs: the stopped fetcher asks nothing more
        self.assertEqual(len(links[0].requests), asked)
        self.assertIsNone(follower.ended)
        self.assertEqual(self.logs.get_log("t", 0).epochs.latest_epoch, 6)
        self.assertIs(self.manager.leaders[("t", 0)], leader)


class ReadGateTests(FollowerTestMixin, SynchronousTestCase):
    """A follower does not serve clients' reads of its partition: NotLeader, naming the leader."""

    def follow(self):
        self.start_leader(isr=(1, 2))
        self.produce(b"a", ack=ACK_APPENDED)
        self.manager._connect = lambda broker: Link(self.broker)
        return self.manager.become_follower("t", 0, leader_id=2, leader_epoch=5)

    def test_wait_fetch_fetch_and_offsets_refused(self) -> None:
        self.follow()
        parts = codec.decode_multifetch_response(frame(self.broker.wait_fetch(
            codec.WaitFetchRequest(0, 0, (codec.FetchRequest("t", 0, 0, 1000),))))).parts
        self.assertEqual(parts[0].error, NotLeader.code)
        offsets = codec.decode_offsets_response(frame(self.broker.offsets(codec.OffsetsRequest("t", 0, -1, 1))))
        self.assertEqual((offsets.error, offsets.offsets), (NotLeader.code, ()))
        error = self.assertRaises(NotLeader, self.manager.check_read, "t", 0)
        self.assertIn("its leader, broker 2", str(error))
        self.assertRaises(NotLeader, self.broker.boundaries, codec.BoundariesRequest("t", 0, (0,)))
        # A 0.7 FETCH gets 0.7's nearest code, not data.
        self.assertNotEqual(codec.decode_fetch_response(frame(self.broker.fetch(codec.FetchRequest("t", 0, 0, 1000))))
                            .error, 0)

    def test_held_wait_fetch_answered_on_becoming_follower(self) -> None:
        """A client's WAIT_FETCH held on the leader is answered NotLeader as soon as the broker follows."""
        self.start_leader(isr=(1, 2))
        end = self.logs.get_log("t", 0).end_offset
        held = self.broker.wait_fetch(codec.WaitFetchRequest(10_000, 1, (codec.FetchRequest("t", 0, end, 1000),)))
        self.assertNoResult(held)
        self.manager._connect = lambda broker: Link(self.broker)
        self.manager.become_follower("t", 0, leader_id=2, leader_epoch=5)
        parts = codec.decode_multifetch_response(frame(self.successResultOf(held))).parts
        self.assertEqual(parts[0].error, NotLeader.code)

    def test_leader_and_unreplicated_partitions_are_read(self) -> None:
        self.start_leader(isr=(1, 2))
        self.manager.check_read("t", 0)
        self.manager.check_read("other", 0)
        parts = codec.decode_multifetch_response(frame(self.broker.wait_fetch(
            codec.WaitFetchRequest(0, 0, (codec.FetchRequest("t", 0, 0, 1000),))))).parts
        self.assertEqual(parts[0].error, 0)
