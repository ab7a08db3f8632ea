"""Tests for twlog.replica.follower: a follower truncating (KIP-101) and fetching from a real leader Broker in
memory (its handlers' answers encoded and decoded as on the wire), on task.Clock and the fake ZooKeeper."""

from __future__ import annotations

from twisted.internet.defer import maybeDeferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import run_now
from tests.replica.test_leader import LeaderTestMixin, frame
from twlog.config import LogConfig
from twlog.errors import ConnectionFailed, NotFollower, check
from twlog.protocol import codec
from twlog.protocol.codec import ACK_ALL, ACK_APPENDED
from twlog.protocol.replication_codec import EpochEndOffsetRequest, ReplicaFetchRequest
from twlog.replica.follower import Follower
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set


class Link:
    """A connection to the leader's Broker in memory: requests go to its handlers, answers come back decoded and
    checked as L{twlog.client.connection.BrokerConnection} gives them; C{down} fails every request."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.requests: list = []
        self.down = False

    def request(self, request, *, timeout_s=None):
        self.requests.append(request)
        if self.down:
            raise ConnectionFailed("cannot connect to broker leader: refused")
        d = maybeDeferred(self.broker.handlers[type(request)], request, "follower")
        return d.addCallback(lambda response: check(codec.decode_response(request, frame(response)), "leader"))


class FollowerTestMixin(LeaderTestMixin):
    def start_follower(self, broker_id=2, epoch=4, **options) -> Follower:
        config = LogConfig(self.mktemp(), flush_messages=1, segment_bytes=4096, num_partitions=2)
        self.follower_logs = LogManager(config, self.clock, run_now)
        self.follower_logs.start()
        self.addCleanup(self.follower_logs.close)
        self.link = Link(self.broker)
        log = self.follower_logs.get_or_create_log("t", 0)
        self.follower = Follower(broker_id, "t", 0, log, leader_id=1, leader_epoch=epoch, connection=self.link,
                                 clock=self.clock, **options)
        return self.follower

    def leader_log(self):
        return self.logs.get_log("t", 0)

    def follower_log(self):
        return self.follower_logs.get_log("t", 0)

    def segment_bytes(self, log) -> bytes:
        """The bytes of C{log}'s segment files, once all it holds is written out."""
        log.write_out()
        return b"".join(open(s.path, "rb").read() for s in log.segments)


class FetchingTests(FollowerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.start_leader(isr=(1, 2), min_isr=2)
        self.addCleanup(lambda: self.follower.stop())

    def test_catches_up_byte_for_byte(self) -> None:
        """The follower appends the leader's bytes verbatim at the same offsets, and learns the high watermark."""
        for n in range(20):
            self.produce(b"message %d" % n, ack=ACK_APPENDED)
        self.start_follower(max_bytes=100).start()  # a few messages a fetch: many fetches
        end = self.leader_log().end_offset
        self.assertEqual(self.follower_log().end_offset, end)
        self.assertEqual(self.segment_bytes(self.follower_log()), self.segment_bytes(self.leader_log()))
        self.assertEqual(self.leader_log().high_watermark, end)
        self.clock.advance(0.5)  # the held fetch ends; the next tells the follower the high watermark
        self.assertEqual(self.follower_log().high_watermark, end)

    def test_ack_all_answered_through_a_real_follower(self) -> None:
        """An ack=all set is answered once the follower has fetched past it."""
        self.start_follower().start()
        self.assertEqual(len(self.link.requests), 2, "EPOCH_END_OFFSET, then a REPLICA_FETCH held at the end")
        d = self.produce(b"replicated", ack=ACK_ALL)  # wakes the held fetch: the follower appends and fetches on
        result = codec.decode_ack_produce_response(self.successResultOf(d)).results[0]
        self.assertEqual((result.error, result.next_offset), (0, self.follower_log().end_offset))

    def test_records_the_leaders_epoch(self) -> None:
        """The follower records the leader's epoch where it began on the leader, once its log reaches it."""
        self.produce(b"a", ack=ACK_APPENDED)
        self.start_follower().start()
        self.assertEqual(self.follower_log().epochs.entries, [(4, 0)])

    def test_stop_ends_the_loop(self) -> None:
        """After stop() (a leader change) the follower asks the leader nothing more."""
        self.start_follower().start()
        stopped = self.follower.stop()
        self.successResultOf(stopped)
        asked = len(self.link.requests)
        self.produce(b"a", ack=ACK_APPENDED)
        self.clock.advance(5)
        self.assertEqual(len(self.link.requests), asked)
        self.assertEqual(self.follower_log().end_offset, 0)

    def test_retries_after_a_connection_failure(self) -> None:
        """A failed request is tried again after the backoff, and the follower then catches up."""
        self.produce(b"a", ack=ACK_APPENDED)
        self.start_follower(backoff_s=2)
        self.link.down = True
        self.follower.start()
        self.clock.advance(1.9)
        self.assertEqual(len(self.link.requests), 1)
        self.link.down = False
        self.clock.advance(0.1)
        self.assertEqual(self.follower_log().end_offset, self.leader_log().end_offset)

    def test_not_follower_stops(self) -> None:
        """A leader that answers NotFollower (the replica was moved) stops the follower for good."""
        self.start_follower(broker_id=7).start()
        self.assertIsInstance(self.follower.ended, NotFollower)
        asked = len(self.link.requests)
        self.clock.advance(60)
        self.assertEqual(len(self.link.requests), asked)


class TruncationTests(FollowerTestMixin, SynchronousTestCase):
    """KIP-101: a follower truncates to where the leader's copy of its last epoch ends, not to its high
    watermark."""

    def test_divergent_tail_is_cut_to_the_leaders_epoch_end(self) -> None:
        """A follower that led epoch 3 and wrote a tail the new leader (epoch 4, which began at the end of
        epoch 3 on it) never got, cuts that tail and only that, then fetches the leader's messages."""
        self.start_leader(isr=(1, 2), epoch=4)
        self.start_follower()
        shared = encode_message_set([b"both"])
        leader, follower = self.leader_log(), self.follower_log()
        # The leader's history: epoch 3 wrote "both"; epoch 4 (this leader) began after it.
        self.leader.stop()
        leader.epochs._entries.clear()
        self.successResultOf(leader.epochs.assign(3, 0))
        leader.append(shared)
        self.successResultOf(leader.epochs.assign(4, leader.end_offset))
        leader.append(encode_message_set([b"new leader"]))
        leader.flush()
        self.manager.leaders[("t", 0)] = self.leader  # (its handlers read the log as it is now)
        self.leader._stopped = False
        # The follower's: epoch 3 wrote "both" and then "lost" (never replicated), its high watermark at 0.
        self.successResultOf(follower.epochs.assign(3, 0))
        follower.append(shared)
        follower.append(encode_message_set([b"lost!"]))
        follower.high_watermark = 0
        self.follower.start()
        self.assertEqual(self.follower.truncations, 1)
        self.assertEqual(self.link.requests[1].fetches[0].offset, len(shared), "cut to the epoch's end, not to 0")
        self.assertEqual(self.segment_bytes(follower), self.segment_bytes(leader))
        self.assertEqual(follower.epochs.entries, [(3, 0), (4, len(shared))])

    def test_no_common_epoch_truncates_entirely(self) -> None:
        """A follower whose epochs the leader does not know (UNDEFINED) starts again from the log start."""
        self.start_leader(isr=(1, 2), epoch=4)
        self.produce(b"leader's", ack=ACK_APPENDED)
        self.start_follower()
        follower = self.follower_log()
        self.successResultOf(follower.epochs.assign(9, 0))
        follower.append(encode_message_set([b"unknown history"]))
        self.follower.start()
        self.assertEqual(self.segment_bytes(follower), self.segment_bytes(self.leader_log()))

    def test_out_of_range_truncates_again(self) -> None:
        """A fetch past the leader's end (OffsetOutOfRange) makes the follower ask EPOCH_END_OFFSET again."""
        self.start_leader(isr=(1, 2), epoch=4)
        self.start_follower()
        self.follower.start()
        kinds = [type(r) for r in self.link.requests]
        self.assertEqual(kinds, [EpochEndOffsetRequest, ReplicaFetchRequest])
        self.follower_log().append(encode_message_set([b"ahead"]))  # as if written meanwhile
        self.clock.advance(0.5)  # the held fetch ends; the next one is out of range
        self.assertEqual([type(r) for r in self.link.requests][2:], [ReplicaFetchRequest, EpochEndOffsetRequest,
                                                                      ReplicaFetchRequest])
        self.assertEqual(self.follower_log().end_offset, 0)
