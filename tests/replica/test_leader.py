"""Tests for the leader's side: REPLICA_FETCH and EPOCH_END_OFFSET handlers, the ISR written by compare-and-set,
fencing, and ack=all in the produce handler; on a real Broker and log, the fake ZooKeeper and task.Clock."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper
from tests.protocol.test_server import BrokerTestMixin
from twlog.coord.replication import store
from twlog.coord.replication.values import PartitionState
from twlog.errors import (
    FencedLeaderEpoch,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotFollower,
    NotLeader,
    OffsetOutOfRange,
    RequestTimedOut,
    UnknownLeaderEpoch,
)
from twlog.protocol import codec
from twlog.protocol.codec import ACK_ALL, ACK_APPENDED, AckProduceRequest, FetchRequest, ProduceRequest
from twlog.protocol.replication_codec import (
    EpochEndOffset,
    EpochEndOffsetRequest,
    EpochQuery,
    ReplicaFetch,
    ReplicaFetchRequest,
    decode_epoch_end_offset_response,
    decode_replica_fetch_response,
)
from twlog.replica.manager import ReplicaManager
from twlog.storage.message import encode_message_set, iter_messages


def frame(response) -> bytes:
    """A handler's response as the frame a client decodes (no size prefix)."""
    if isinstance(response, bytes):
        return response
    return b"".join(p if isinstance(p, bytes) else p.read() for p in response)[4:]


class LeaderTestMixin(BrokerTestMixin):
    """Broker 1 leads topic t, partition 0, replicas (1, 2, 3), at leader epoch 4."""

    def start_leader(self, isr=(1, 2, 3), min_isr=2, epoch=4, lag_time_ms=10_000, **overrides):
        self.make_broker(**overrides)
        self.zk = FakeZooKeeper()
        self.zk.start()
        self.successResultOf(store.create_replicated_topic(self.zk, "t", {0: (1, 2, 3)},
                                                           {"min.insync.replicas": str(min_isr)}))
        state = PartitionState(1, epoch, 1, isr)
        version = self.successResultOf(store.create_state(self.zk, "t", 0, state))
        self.manager = ReplicaManager(1, self.logs, self.zk, self.clock, connect=lambda broker: None,
                                      lag_time_ms=lag_time_ms)
        self.manager.install(self.broker)
        self.leader = self.manager.become_leader("t", 0, (1, 2, 3), state, version, min_isr=min_isr)
        self.addCleanup(self.manager.stop_partition, "t", 0)
        return self.leader

    def produce(self, *payloads: bytes, ack=ACK_ALL, timeout_ms=5000):
        return self.broker.handlers[AckProduceRequest](
            AckProduceRequest(ack, timeout_ms, (ProduceRequest("t", 0, encode_message_set(list(payloads))),)))

    def replica_fetch(self, replica, offset, epoch=4, max_wait_ms=0, max_bytes=10_000):
        return self.broker.handlers[ReplicaFetchRequest](ReplicaFetchRequest(
            replica, max_wait_ms, 1, (ReplicaFetch("t", 0, epoch, offset, max_bytes),)))

    def zk_state(self) -> PartitionState:
        return self.successResultOf(store.read_state(self.zk, "t", 0))[0]


class ReplicaFetchTests(LeaderTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.start_leader()

    def test_fetch_sends_the_leaders_bytes_and_offsets(self) -> None:
        """A follower gets the leader's bytes verbatim, its high watermark, end and log start."""
        self.produce(b"a", b"b")
        end = self.logs.get_log("t", 0).end_offset
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, 0))).parts[0]
        self.assertEqual((part.error, part.high_watermark, part.leader_end, part.log_start), (0, 0, end, 0))
        self.assertEqual(part.messages, encode_message_set([b"a"]) + encode_message_set([b"b"]))

    def test_fetch_reads_past_the_flushed_end(self) -> None:
        """Followers read the leader's written bytes, flushed or not (consumers never do)."""
        self.start_leader(flush_messages=1000, flush_interval_ms=60_000)
        self.produce(b"unflushed", ack=ACK_APPENDED)
        log = self.logs.get_log("t", 0)
        self.assertEqual(log.flushed_offset, 0)
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, 0))).parts[0]
        self.assertEqual([m.payload for m in iter_messages(part.messages, 0)], [b"unflushed"])

    def test_fetch_offsets_move_the_high_watermark(self) -> None:
        """Each follower's fetch offset is its end; the high watermark is the minimum over the ISR, and readers
        see up to it."""
        self.produce(b"a")
        end = self.logs.get_log("t", 0).end_offset
        self.replica_fetch(2, end)
        self.assertEqual(self.leader.state.high_watermark, 0)
        self.assertEqual(codec.decode_fetch_response(frame(self.broker.fetch(FetchRequest("t", 0, 0, 1000)))).messages,
                         b"")
        part = decode_replica_fetch_response(frame(self.replica_fetch(3, end))).parts[0]
        self.assertEqual(part.high_watermark, end)
        self.assertEqual(self.logs.get_log("t", 0).visible_end, end)

    def test_epoch_and_replica_checks(self) -> None:
        """An older epoch is FencedLeaderEpoch, a newer UnknownLeaderEpoch, a broker not assigned NotFollower,
        a partition not led here NotLeader; offsets are -1 on those."""
        cases = [(2, 3, FencedLeaderEpoch), (2, 5, UnknownLeaderEpoch), (7, 4, NotFollower)]
        for replica, epoch, error in cases:
            part = decode_replica_fetch_response(frame(self.replica_fetch(replica, 0, epoch=epoch))).parts[0]
            self.assertEqual((part.error, part.high_watermark, part.messages), (error.code, -1, b""))
        response = self.broker.handlers[ReplicaFetchRequest](ReplicaFetchRequest(
            2, 0, 1, (ReplicaFetch("t", 1, 4, 0, 100),)))
        self.assertEqual(decode_replica_fetch_response(frame(response)).parts[0].error, NotLeader.code)
        self.assertEqual(self.leader.state.ends, {2: 0, 3: 0}, "refused fetches record nothing")

    def test_a_part_stays_in_one_segment_and_gives_its_base(self) -> None:
        """A part's bytes come from the leader's segment holding the fetch offset, whose base it gives, and stop
        at that segment's end; the next fetch, from there, gets the next segment's base: the follower rolls."""
        for n in range(30):
            self.produce(b"m%d" % n + b"." * 300, ack=ACK_APPENDED)
        log = self.logs.get_log("t", 0)
        first, second = log.segments[:2]
        offset = first.end_offset - 100  # not a boundary: find the last message start before the end
        offset = max(m.offset for m in iter_messages(log.read_replica(0, first.size).read(), 0) if m.offset < offset)
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, offset, max_bytes=100_000))).parts[0]
        self.assertEqual((part.error, part.segment_base, offset + len(part.messages)), (0, 0, first.end_offset))
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, first.end_offset, max_bytes=100_000))
                                             ).parts[0]
        self.assertEqual((part.error, part.segment_base, len(part.messages)), (0, second.base_offset, second.size))
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, 0, epoch=3))).parts[0]
        self.assertEqual((part.error, part.segment_base), (FencedLeaderEpoch.code, -1))
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, log.end_offset + 1))).parts[0]
        self.assertEqual((part.error, part.segment_base), (OffsetOutOfRange.code, -1))

    def test_out_of_range_gives_the_leaders_offsets(self) -> None:
        """A fetch past the leader's end gets OffsetOutOfRange with the leader's offsets, so it can truncate."""
        self.produce(b"a")
        end = self.logs.get_log("t", 0).end_offset
        part = decode_replica_fetch_response(frame(self.replica_fetch(2, end + 100))).parts[0]
        self.assertEqual((part.error, part.leader_end, part.log_start), (OffsetOutOfRange.code, end, 0))

    def test_a_fetch_with_nothing_new_is_held_until_an_append(self) -> None:
        """A fetch at the leader's end waits (as WAIT_FETCH) and is answered by the next append."""
        d = self.replica_fetch(2, 0, max_wait_ms=1000)
        self.assertNoResult(d)
        self.produce(b"late", ack=ACK_APPENDED)
        part = decode_replica_fetch_response(frame(self.successResultOf(d))).parts[0]
        self.assertEqual([m.payload for m in iter_messages(part.messages, 0)], [b"late"])
        self.assertEqual(self.manager.handlers.held_fetches(), 0)

    def test_a_held_fetch_ends_with_its_wait(self) -> None:
        """With nothing appended, a held fetch is answered empty when max_wait_ms passes."""
        d = self.replica_fetch(2, 0, max_wait_ms=1000)
        self.clock.advance(0.999)
        self.assertNoResult(d)
        self.clock.advance(0.001)
        self.assertEqual(decode_replica_fetch_response(frame(self.successResultOf(d))).parts[0].messages, b"")

    def test_follower_produce_refused(self) -> None:
        """A produce to a partition this broker does not lead (a follower's log) is NotLeader, and writes
        nothing."""
        self.manager.stop_partition("t", 0)
        self.manager.followers[("t", 0)] = type("F", (), {"leader_id": 2, "stop": lambda self: None})()
        result = codec.decode_ack_produce_response(self.produce(b"x", ack=ACK_APPENDED)).results[0]
        self.assertEqual(result.error, NotLeader.code)
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 0)


class EpochEndOffsetTests(LeaderTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.start_leader()

    def ask(self, *queries):
        return decode_epoch_end_offset_response(
            self.broker.handlers[EpochEndOffsetRequest](EpochEndOffsetRequest(tuple(queries)))).answers

    def test_the_current_epoch_ends_at_the_leaders_end(self) -> None:
        """The leader recorded its epoch at its end on becoming leader; that epoch ends at its written end."""
        self.produce(b"a")
        end = self.logs.get_log("t", 0).end_offset
        self.assertEqual(self.logs.get_log("t", 0).epochs.entries, [(4, 0)])
        self.assertEqual(self.ask(EpochQuery("t", 0, 4, 4), EpochQuery("t", 0, -1, 2)),
                         (EpochEndOffset(0, 4, end), EpochEndOffset(0, -1, -1)))

    def test_fencing_and_not_leader(self) -> None:
        """The asker's current epoch is checked (KIP-320): older 27, newer 28; a partition not led here 16."""
        self.assertEqual([a.error for a in self.ask(EpochQuery("t", 0, 3, 3), EpochQuery("t", 0, 5, 3),
                                                    EpochQuery("t", 9, 4, 4))],
                         [FencedLeaderEpoch.code, UnknownLeaderEpoch.code, NotLeader.code])


class IsrTests(LeaderTestMixin, SynchronousTestCase):
    def test_a_lagging_follower_is_written_out_by_compare_and_set(self) -> None:
        """A follower not caught up for replica_lag_time_ms leaves the ISR, in ZooKeeper, and the high
        watermark moves to the others' minimum."""
        self.start_leader(lag_time_ms=1000)
        self.produce(b"a", ack=ACK_APPENDED)
        end = self.logs.get_log("t", 0).end_offset
        self.clock.advance(0.5)
        self.replica_fetch(2, end)
        self.clock.advance(0.6)  # 3: 1.1 s since it was caught up (the start); 2: 0.6 s
        self.assertEqual(self.zk_state().isr, (1, 2))
        self.assertEqual((self.leader.state.isr, self.leader.state.high_watermark), ((1, 2), end))

    def test_a_follower_rejoins_once_caught_up(self) -> None:
        """A follower out of the ISR is written back once its end reaches the high watermark."""
        self.start_leader(isr=(1, 2))
        self.produce(b"a", ack=ACK_APPENDED)
        end = self.logs.get_log("t", 0).end_offset
        self.replica_fetch(2, end)
        self.replica_fetch(3, 0)
        self.assertEqual(self.zk_state().isr, (1, 2))
        self.replica_fetch(3, end)
        self.assertEqual((self.zk_state().isr, self.leader.state.isr), ((1, 2, 3), (1, 2, 3)))

    def test_a_failed_compare_and_set_fences_then_rereads(self) -> None:
        """Someone else wrote the state: the leader's compare-and-set fails, it stops acknowledging at once, reads
        the state again and, still the leader at its epoch, goes on with the ISR it read."""
        self.start_leader(lag_time_ms=1000)
        state, version = self.successResultOf(store.read_state(self.zk, "t", 0))
        self.successResultOf(store.write_state_cas(self.zk, "t", 0, PartitionState(1, 4, 2, (1, 2, 3)), version))
        self.zk.hold()
        self.clock.advance(1.1)  # both followers lag: the leader asks for (1,)
        self.zk.flush_one()  # the compare-and-set fails
        self.assertTrue(self.leader.state.fenced)
        d = self.produce(b"refused")
        self.assertEqual(codec.decode_ack_produce_response(d).results[0].error, NotEnoughReplicas.code)
        self.zk.flush()  # the state read again
        self.assertFalse(self.leader.state.fenced)
        self.assertEqual(self.leader.version, version + 1)

    def test_a_deposed_leader_stays_fenced(self) -> None:
        """After a failed compare-and-set, a state naming another leader (or epoch) keeps the leader fenced."""
        self.start_leader(lag_time_ms=1000)
        _, version = self.successResultOf(store.read_state(self.zk, "t", 0))
        self.successResultOf(store.write_state_cas(self.zk, "t", 0, PartitionState(2, 5, 2, (2, 3)), version))
        self.clock.advance(1.1)
        self.assertTrue(self.leader.state.fenced)
        self.assertEqual(self.zk_state().leader, 2, "nothing written over the new leader's state")

    def test_session_suspended_fences_at_once(self) -> None:
        """A suspended session fences the leader before anything else happens; reconnecting reads the state
        and goes on."""
        self.start_leader(isr=(1,), min_isr=1)
        self.zk.suspend()
        self.assertTrue(self.leader.state.fenced)
        d = self.produce(b"x")
        self.assertEqual(codec.decode_ack_produce_response(d).results[0].error, NotEnoughReplicas.code)
        self.zk.reconnect()
        self.assertFalse(self.leader.state.fenced)
        result = codec.decode_ack_produce_response(self.successResultOf(self.produce(b"y"))).results[0]
        self.assertEqual(result.error, 0)


class AckAllTests(LeaderTestMixin, SynchronousTestCase):
    def result(self, d):
        return codec.decode_ack_produce_response(self.successResultOf(d)).results[0]

    def test_refused_before_appending_below_min_isr(self) -> None:
        """With an ISR smaller than min.insync.replicas, ack=all is NotEnoughReplicas and nothing is appended;
        ack=appended is still taken."""
        self.start_leader(isr=(1,), min_isr=2)
        self.assertEqual(codec.decode_ack_produce_response(self.produce(b"x")).results[0].error,
                         NotEnoughReplicas.code)
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 0)
        self.assertEqual(codec.decode_ack_produce_response(self.produce(b"y", ack=ACK_APPENDED)).results[0].error, 0)

    def test_answered_once_the_isr_holds_it(self) -> None:
        """ack=all waits until every ISR member fetched past the set (and the leader flushed it)."""
        self.start_leader()
        d = self.produce(b"x")
        self.assertNoResult(d)
        end = self.logs.get_log("t", 0).end_offset
        self.replica_fetch(2, end)
        self.assertNoResult(d)
        self.assertEqual(self.manager.waiting_acks(), 1)
        self.replica_fetch(3, end)
        result = self.result(d)
        self.assertEqual((result.error, result.next_offset), (0, end))
        self.assertEqual(self.manager.waiting_acks(), 0)

    def test_lone_leader_answers_on_flush(self) -> None:
        """An ISR of the leader alone (min.insync.replicas 1) answers as soon as the set is flushed."""
        self.start_leader(isr=(1,), min_isr=1)
        self.assertEqual(self.result(self.produce(b"x")).error, 0)

    def test_times_out_with_9(self) -> None:
        """Not covered within the request's timeout: RequestTimedOut, and the wait is forgotten."""
        self.start_leader()
        d = self.produce(b"x", timeout_ms=2000)
        self.clock.advance(1.9)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.assertEqual(self.result(d).error, RequestTimedOut.code)
        self.assertEqual(self.manager.waiting_acks(), 0)

    def test_isr_shrinking_below_min_meanwhile(self) -> None:
        """The ISR falls below min.insync.replicas before it holds the set: NotEnoughReplicasAfterAppend."""
        self.start_leader(lag_time_ms=1000, min_isr=3)
        d = self.produce(b"x", timeout_ms=60_000)
        self.clock.advance(1.1)
        self.assertEqual(self.result(d).error, NotEnoughReplicasAfterAppend.code)

    def test_leadership_lost_meanwhile(self) -> None:
        """The broker stops leading the partition while a set waits: NotLeader."""
        self.start_leader()
        d = self.produce(b"x")
        self.manager.stop_partition("t", 0)
        self.assertEqual(self.result(d).error, NotLeader.code)
