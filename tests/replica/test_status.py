"""REPLICA_STATUS (type 15) on a leader: its epoch, high watermark and end, and each follower's end and time since
it was last caught up, as the leader knows them; NotLeader for a partition it does not lead.  On a real Broker and
log, the fake ZooKeeper and task.Clock (L{LeaderTestMixin})."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.replica.test_leader import LeaderTestMixin
from twlog.errors import NO_ERROR, NotLeader
from twlog.protocol.codec import ACK_APPENDED, decode_request, decode_response, encode_request
from twlog.protocol.replica_status_codec import (
    REPLICA_STATUS,
    UNKNOWN,
    FollowerStatus,
    ReplicaStatus,
    ReplicaStatusRequest,
    ReplicaStatusResponse,
)


class ReplicaStatusTests(LeaderTestMixin, SynchronousTestCase):
    def status(self, *partitions: int, topic: str = "t") -> ReplicaStatusResponse:
        """Ask the broker, through the codec both ways (the request decoded from its bytes, the answer from its)."""
        request = decode_request(encode_request(ReplicaStatusRequest(topic, partitions)))
        return decode_response(request, self.broker.handlers[ReplicaStatusRequest](request))

    def test_the_leader_reports_what_it_knows(self) -> None:
        """Follower 2 fetched at the leader's end (caught up, in the ISR); follower 3, outside the ISR, never
        fetched: its end is unknown, and it has not been caught up since the leader started."""
        self.start_leader(isr=(1, 2))
        self.produce(b"one", b"two", ack=ACK_APPENDED)
        end = self.logs.get_log("t", 0).end_offset
        self.clock.advance(1.5)
        self.replica_fetch(2, end)
        self.clock.advance(0.25)
        self.assertEqual(self.status(0), ReplicaStatusResponse(NO_ERROR, (
            ReplicaStatus(0, NO_ERROR, 4, end, end, (FollowerStatus(2, end, 250), FollowerStatus(3, UNKNOWN, 1750))),
        )))

    def test_a_lagging_follower_and_the_high_watermark(self) -> None:
        """The high watermark is the ISR's minimum end: a follower of the ISR behind the leader holds it back,
        and its end and lag say by how much."""
        self.start_leader(isr=(1, 2, 3))
        self.produce(b"a", ack=ACK_APPENDED)
        first = self.logs.get_log("t", 0).end_offset
        self.replica_fetch(2, first)
        self.replica_fetch(3, first)
        self.clock.advance(0.5)
        self.produce(b"b", ack=ACK_APPENDED)
        end = self.logs.get_log("t", 0).end_offset
        self.replica_fetch(2, end)
        self.clock.advance(2)
        (status,) = self.status(0).partitions
        self.assertEqual((status.high_watermark, status.leader_end), (first, end))
        self.assertEqual(status.followers, (FollowerStatus(2, end, 2000), FollowerStatus(3, first, 2500)))

    def test_a_partition_not_led_here(self) -> None:
        """A partition this broker does not lead, or of a topic it does not know, is NotLeader (16) with every
        offset unknown; the others in the request are answered; each error is counted for the metrics."""
        self.start_leader()
        response = self.status(5, 0)
        self.assertEqual(response.partitions[0], ReplicaStatus(5, NotLeader.code))
        self.assertEqual((response.partitions[1].partition, response.partitions[1].error), (0, NO_ERROR))
        self.assertEqual(self.status(0, topic="other").partitions, (ReplicaStatus(0, NotLeader.code),))
        self.assertEqual(self.broker.error_counts[REPLICA_STATUS, NotLeader.code], 2)

    def test_a_stopped_leader_answers_not_leader(self) -> None:
        """Once this broker stops leading the partition (a new election), it no longer answers for it."""
        self.start_leader()
        self.manager.stop_partition("t", 0)
        self.assertEqual(self.status(0).partitions, (ReplicaStatus(0, NotLeader.code),))
