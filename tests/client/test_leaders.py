"""Tests for the simple consumer following a replicated partition's leader (twlog.client.leaders): fakes and
task.Clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.client.test_consumer import SET, wait_frame
from tests.fakes import FakeConnection
from tests.producer.test_failover import BROKERS, cluster
from twlog.client.leaders import FOLLOW_REFRESHES, MAX_BACKOFF_S
from twlog.consumer import SimpleConsumer
from twlog.errors import ConnectionFailed, LeaderNotAvailable, NotLeader
from twlog.protocol import codec
from twlog.protocol.codec import OffsetsRequest, WaitFetchRequest
from twlog.protocol.replication_codec import NO_BROKER, ClusterMetadataV2Request
from twlog.storage.message import encode_message_set


class LeaderFollowingTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.main = FakeConnection("b1", 9092, 1, {})
        self.main.cluster_v2 = cluster({0: 2, 1: 1})
        self.consumer = SimpleConsumer("b1", 9092, reactor=self.clock, connection_factory=lambda: self.main)
        self.opened: list[FakeConnection] = []

        def connect(host: str, port: int) -> FakeConnection:
            broker_id = next(b for b, h in BROKERS.items() if h == host)
            self.opened.append(FakeConnection(host, port, broker_id, {}))
            return self.opened[-1]

        self.consumer.leaders.connect = connect

    def move(self, leaders: dict[int, int]) -> None:
        self.main.cluster_v2 = cluster(leaders)

    def fetches(self, connection: FakeConnection) -> list[int]:
        return [r.fetches[0].offset for r in connection.requests if isinstance(r, WaitFetchRequest)]

    def test_fetch_goes_to_the_leader_and_follows_it(self) -> None:
        """A fetch of "0" goes to its leader (broker 2, named by the consumer's broker); on NotLeader the
        consumer asks again after a backoff and fetches at the same offset from the new leader."""
        fetched = self.consumer.fetch("r", "0", 0)
        (b2,) = self.opened
        self.assertEqual(b2.host, "b2")
        b2.answer(wait_frame(SET))
        self.assertEqual([m.payload for m in self.successResultOf(fetched)], [b"a", b"bb", b"ccc"])
        fetched = self.consumer.fetch("r", "0", 33)
        b2.answer(wait_frame(b"", NotLeader.code))
        self.move({0: 1, 1: 1})
        self.assertNoResult(fetched)
        self.clock.advance(MAX_BACKOFF_S)
        self.main.answer(wait_frame(SET))
        self.assertEqual(len(self.successResultOf(fetched)), 3)
        self.assertEqual((self.fetches(b2), self.fetches(self.main)), ([0, 33], [33]))
        v2 = [r for r in self.main.requests if isinstance(r, ClusterMetadataV2Request)]
        self.assertEqual(len(v2), 2)

    def test_stream_moves_its_connection(self) -> None:
        """A stream has its own connection to the leader; when the leader moves it closes it and opens one to
        the new leader, reading on from the same offset."""
        stream = self.consumer.stream("r", "1", 0)
        first = stream.__anext__()
        (b1,) = self.opened  # broker 1 leads "1": the stream's own connection, not the consumer's
        self.assertIsNot(b1, self.main)
        b1.answer(wait_frame(SET))
        self.assertEqual(self.successResultOf(first).payload, b"a")
        self.successResultOf(stream.__anext__())
        self.successResultOf(stream.__anext__())
        fourth = stream.__anext__()
        self.move({0: 2, 1: NO_BROKER})
        b1.answer(wait_frame(b"", NotLeader.code))
        self.clock.advance(MAX_BACKOFF_S)  # no leader yet: asked again later, on the same connection
        b1.answer(wait_frame(b"", LeaderNotAvailable.code))
        self.move({0: 2, 1: 2})
        self.clock.advance(MAX_BACKOFF_S)
        b1_after, b2 = self.opened
        self.assertIs(b1_after, b1)
        self.assertTrue(b1.closed)
        b2.answer(wait_frame(encode_more()))
        self.assertEqual(self.successResultOf(fourth).payload, b"d")
        self.assertEqual(self.fetches(b2), [33])
        self.assertEqual(stream.next_offset, 43)

    def test_offsets_asked_of_the_leader(self) -> None:
        offsets = self.consumer.offsets("r", "0")
        (b2,) = self.opened
        self.move({0: 1, 1: 1})
        b2.answer(codec.encode_offsets_response(NotLeader.code, ()))
        self.clock.advance(MAX_BACKOFF_S)
        self.main.answer(codec.encode_offsets_response(0, (77,)))
        self.assertEqual(self.successResultOf(offsets), [77])
        self.assertTrue(any(isinstance(r, OffsetsRequest) for r in self.main.requests))

    def test_bounded(self) -> None:
        """A leader that never comes: the fetch fails after FOLLOW_REFRESHES refreshes in a row."""
        self.move({0: NO_BROKER, 1: 1})
        self.consumer.leaders._located.clear()
        fetched = self.consumer.fetch("r", "1", 0)
        self.assertEqual(self.opened, [])  # broker 1 is the consumer's own: its connection is used
        for _ in range(FOLLOW_REFRESHES + 1):
            self.main.answer(wait_frame(b"", NotLeader.code))
            self.clock.advance(MAX_BACKOFF_S)
        self.failureResultOf(fetched, NotLeader)

    def test_older_broker_reads_there(self) -> None:
        """A broker that does not know type 14 has no replicated topic: a partition named "0" is its own."""
        self.main.cluster_v2 = None
        fetched = self.consumer.fetch("t", "0", 0)
        self.main.answer(wait_frame(SET))
        self.assertEqual(len(self.successResultOf(fetched)), 3)
        self.assertEqual(self.opened, [])

    def test_unreachable_broker(self) -> None:
        self.main.down = True
        failure = self.failureResultOf(self.consumer.fetch("r", "0", 0), ConnectionFailed)
        self.assertIn("cannot learn where topic 'r''s leaders are: b1:9092", str(failure.value))

    def test_consumer_broker_down_asks_the_others(self) -> None:
        """The consumer's broker is gone (it led the partition): the other live brokers it named are asked."""
        fetched = self.consumer.fetch("r", "1", 0)
        self.main.answer(wait_frame(SET))
        self.successResultOf(fetched)
        self.main.down = True
        fetched = self.consumer.fetch("r", "1", 33)  # its connection to broker 1 fails: lost
        self.clock.advance(MAX_BACKOFF_S)
        (b2,) = self.opened
        b2.cluster_v2 = cluster({0: 2, 1: 2}, broker_id=2)
        self.clock.advance(MAX_BACKOFF_S)
        b2.answer(wait_frame(SET))
        self.assertEqual(len(self.successResultOf(fetched)), 3)
        self.assertEqual(self.fetches(b2), [33])


def encode_more() -> bytes:
    return encode_message_set([b"d"])
