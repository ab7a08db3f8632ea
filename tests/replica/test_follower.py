"""Tests for twlog.replica.follower: a follower truncating (KIP-101) and fetching from a real leader Broker in
memory (its handlers' answers encoded and decoded as on the wire), on task.Clock and the fake ZooKeeper."""

from __future__ import annotations

import filecmp
import os

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
    def start_follower(self, broker_id=2, epoch=4, log_dir=None, segment_bytes=4096, **options) -> Follower:
        config = LogConfig(log_dir or self.mktemp(), flush_messages=1, segment_bytes=segment_bytes, num_partitions=2)
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

    def assert_same_segment_files(self, leader, follower) -> None:
        """The two logs' directories hold the same segment files, byte for byte."""
        leader.write_out()
        follower.write_out()
        names = sorted(n for n in os.listdir(leader.directory) if n.endswith(".log"))
        self.assertEqual(sorted(n for n in os.listdir(follower.directory) if n.endswith(".log")), names)
        match, mismatch, errors = filecmp.cmpfiles(leader.directory, follower.directory, names, shallow=False)
        self.assertEqual((mismatch, errors), ([], []))
        self.assertEqual(len(match), len(names))


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


class SegmentFilesTests(FollowerTestMixin, SynchronousTestCase):
    """Once caught up, the follower's segment files are the leader's, byte for byte: it rolls where the leader
    did (the segment base in each REPLICA_FETCH part), never by its own size."""

    def produce_sets(self, sizes, size=300, tag=b"m") -> None:
        for n, count in enumerate(sizes):
            self.produce(*[tag + b"%d-%d" % (n, i) + b"." * size for i in range(count)], ack=ACK_APPENDED)

    def test_identical_after_several_leader_rolls(self) -> None:
        """Sets of several sizes roll the leader short of full; the follower, with smaller segments of its own
        and a fetch size that cuts the sets, rolls where the leader did, before and after catching up."""
        self.start_leader(isr=(1, 2), min_isr=1)
        self.addCleanup(lambda: self.follower.stop())
        self.produce_sets([3, 5, 2, 4, 6, 1, 3, 5, 2])
        leader = self.leader_log()
        self.assertGreaterEqual(len(leader.segments), 3)
        self.start_follower(segment_bytes=2048, max_bytes=700).start()
        self.assertEqual(self.follower_log().end_offset, leader.end_offset)
        self.assert_same_segment_files(leader, self.follower_log())
        self.produce_sets([4, 6, 2, 5], tag=b"n")  # caught up: the fetches held at the end carry the rest
        self.assertEqual(self.follower_log().end_offset, leader.end_offset)
        self.assertGreaterEqual(len(leader.segments), 5)
        self.assertGreater(max(s.size for s in self.follower_log().segments), 2048)  # the leader's sizes
        self.assert_same_segment_files(leader, self.follower_log())

    def diverge(self, tail: list[bytes]):
        """Leader and follower share epoch 3's sets; the follower (which led epoch 3) then wrote C{tail}, which
        the new leader (epoch 4, from the end of the shared sets) never got; the leader then writes its own."""
        self.start_leader(isr=(1, 2), epoch=4, min_isr=1)
        self.start_follower()
        self.addCleanup(lambda: self.follower.stop())
        leader, follower = self.leader_log(), self.follower_log()
        self.leader.stop()
        leader.epochs._entries.clear()
        for log in (leader, follower):
            self.successResultOf(log.epochs.assign(3, 0))
            for n in range(6):  # 6 sets of 2 * 317 bytes: 3804 bytes, one segment
                log.append(encode_message_set([b"shared %d" % n + b"." * 300] * 2))
        shared = leader.end_offset
        self.successResultOf(leader.epochs.assign(4, shared))
        for n in range(10):  # small sets: the leader's segment goes on past `shared`, then rolls
            leader.append(encode_message_set([b"new %d" % n + b"." * 200]))
        leader.flush()
        self.manager.leaders[("t", 0)] = self.leader
        self.leader._stopped = False
        for payload in tail:
            follower.append(encode_message_set([payload]))
        follower.high_watermark = 0
        return leader, follower, shared

    def test_identical_after_truncating_below_a_boundary(self) -> None:
        """The follower's own tail rolled it past the shared sets; it truncates below that boundary (to the end
        of epoch 3 on the leader) and catches up to the leader's segments."""
        leader, follower, shared = self.diverge([b"lost" + b"." * 100, b"lost too" + b"." * 700])
        self.assertEqual([s.base_offset for s in follower.segments], [0, shared + 113])
        self.follower.start()
        self.assertEqual(self.follower.truncations, 1)
        self.assertEqual(follower.end_offset, leader.end_offset)
        self.assertEqual([s.base_offset for s in follower.segments], [s.base_offset for s in leader.segments])
        self.assertNotEqual(leader.segments[1].base_offset, shared + 113)
        self.assert_same_segment_files(leader, follower)

    def test_identical_after_truncating_to_a_boundary_of_its_own(self) -> None:
        """The follower's tail rolled it exactly at the end of the shared sets; truncated there, it keeps an empty
        segment the leader has not got, drops it at the first fetch and catches up to the leader's segments."""
        leader, follower, shared = self.diverge([b"lost" + b"." * 1000])
        self.assertEqual([s.base_offset for s in follower.segments], [0, shared])
        self.follower.start()
        self.assertEqual(follower.end_offset, leader.end_offset)
        self.assertNotIn(shared, [s.base_offset for s in follower.segments])
        self.assert_same_segment_files(leader, follower)

    def test_identical_after_a_follower_restart(self) -> None:
        """A follower stopped uncleanly (a torn tail in its last segment) recovers when its logs open again,
        follows again and catches up to the same segment files."""
        self.start_leader(isr=(1, 2), min_isr=1)
        self.produce_sets([3, 5, 2, 4, 6])
        follower = self.start_follower(max_bytes=900)
        follower.start()
        self.successResultOf(follower.stop())
        log_dir = self.follower_logs.config.log_dir
        self.follower_logs.close()  # unclean: no marker, the next start recovers
        leader = self.leader_log()
        last = max(s for s in os.listdir(os.path.join(log_dir, "t-0")) if s.endswith(".log"))
        with open(os.path.join(log_dir, "t-0", last), "ab") as f:
            f.write(b"\x00\x00\x01\x00torn")
        self.produce_sets([4, 1, 6, 3], tag=b"n")
        self.start_follower(log_dir=log_dir, max_bytes=900).start()
        self.addCleanup(lambda: self.follower.stop())
        self.assertTrue(self.follower_logs.recovered)
        self.assertEqual(self.follower_log().end_offset, leader.end_offset)
        self.assertGreaterEqual(len(leader.segments), 4)
        self.assert_same_segment_files(leader, self.follower_log())

    def test_below_the_leaders_log_start_it_starts_there(self) -> None:
        """A follower that was away while the leader's retention deleted what it lacks (its end is below the
        leader's log start) empties its log, starts it at the leader's start and catches up, with the leader's
        segment files; nothing below that start is kept, and it records the leader's epoch."""
        self.start_leader(isr=(1, 2), min_isr=1, retention_bytes=6000)
        self.produce_sets([3, 5])
        follower = self.start_follower(max_bytes=900)
        follower.start()
        self.successResultOf(follower.stop())
        away_end = self.follower_log().end_offset
        self.produce_sets([4, 6, 2, 5, 3, 6], tag=b"n")
        leader = self.leader_log()
        self.successResultOf(leader.flush())
        expired = leader.expire_segments(int(self.clock.seconds() * 1000))
        for segment in expired:
            os.unlink(segment.path)
        self.assertGreater(leader.start_offset, away_end)
        self.follower = Follower(2, "t", 0, self.follower_log(), leader_id=1, leader_epoch=4, connection=self.link,
                                 clock=self.clock, max_bytes=900)
        self.follower.start()
        self.addCleanup(lambda: self.follower.stop())
        follower_log = self.follower_log()
        self.assertEqual(self.follower.truncations, 1)
        self.assertEqual((follower_log.start_offset, follower_log.end_offset), (leader.start_offset, leader.end_offset))
        self.assert_same_segment_files(leader, follower_log)
        self.assertEqual(follower_log.epochs.entries, [(4, leader.start_offset)])
