"""Tests for twlog.mirror.mirror (topic selection, same-cluster refusal, re-handed messages) and the consumer
options it runs on (manual offsets, envelope stripping)."""

from __future__ import annotations

import re
from unittest.mock import patch

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.consumer.admin import NOT_REGISTERED, BrokerProblem, GroupDescription, PartitionStatus
from twlog.consumer.rebalancer import Consumption
from twlog.consumer.stream import GroupStream, OwnedPartition
from twlog.envelope import wrap
from twlog.mirror.mirror import (
    Mirror,
    MirrorRefused,
    MirrorSettings,
    TopicFeed,
    default_group,
    same_zookeeper,
    selected,
)
from twlog.partition import TopicPartition
from twlog.storage.message import MessageAndOffset


class SelectionTests(SynchronousTestCase):
    def test_whitelist_and_blacklist_match_whole_names(self) -> None:
        self.assertTrue(selected("clicks", None, None))
        self.assertTrue(selected("twlog-audit", None, None))
        white = re.compile("clicks|views")
        self.assertTrue(selected("views", white, None))
        self.assertFalse(selected("clicks2", white, None))
        black = re.compile("secret.*")
        self.assertFalse(selected("secret-1", None, black))
        self.assertTrue(selected("public", None, black))

    def test_same_zookeeper(self) -> None:
        self.assertTrue(same_zookeeper("localhost:2181", "127.0.0.1:2181"))
        self.assertTrue(same_zookeeper("a:1,b:2/x", "b:2,a:1/x/"))
        self.assertFalse(same_zookeeper("a:1/x", "a:1/y"))
        self.assertFalse(same_zookeeper("a:1", "a:2"))

    def test_default_group_is_a_group_name(self) -> None:
        self.assertEqual(default_group("127.0.0.1:2182/dc2"), "twlog-mirror-127.0.0.1_2182_dc2")
        self.assertEqual(MirrorSettings(("a:1",), "b:2", group="g").group_name, "g")

    def test_refuses_a_source_that_is_the_target(self) -> None:
        mirror = Mirror(MirrorSettings(("localhost:2181",), "127.0.0.1:2181"), reactor=Clock(), say=print)
        failure = self.failureResultOf(Deferred.fromCoroutine(mirror.start()), MirrorRefused)
        self.assertIn("--from localhost:2181 and --to 127.0.0.1:2181 name the same cluster", str(failure.value))


class _Consumer:
    """A group consumer's acknowledgement, recorded as (topic, partition name, next offset)."""

    def __init__(self) -> None:
        self.acknowledged: list[tuple[str, str, int]] = []

    def acknowledge_offset(self, partition: TopicPartition, next_offset: int) -> None:
        self.acknowledged.append((partition.topic, partition.name, next_offset))


class FeedTests(SynchronousTestCase):
    def test_messages_handed_out_again_are_not_sent_twice(self) -> None:
        """After a rebalance the stream hands out again what was in flight: those are not copied again, and
        their offset is committed as soon as their first copy is acknowledged."""
        consumer = _Consumer()
        feed = TopicFeed(None, "t", consumer)
        p00 = TopicPartition("t", "0-0")
        self.assertFalse(feed.already_sent(p00, 10))
        feed.sent[p00] = 30
        self.assertTrue(feed.already_sent(p00, 20))  # in flight: its acknowledgement will commit it
        self.assertEqual(consumer.acknowledged, [])
        feed.acknowledge(p00, 30)
        self.assertTrue(feed.already_sent(p00, 30))
        self.assertEqual(consumer.acknowledged, [("t", "0-0", 30), ("t", "0-0", 30)])
        self.assertFalse(feed.already_sent(p00, 40))


class ConsumerOptionTests(SynchronousTestCase):
    def test_manual_offsets(self) -> None:
        """With manual_offsets a message handed out is not consumed; acknowledge moves the offset, forward only."""
        stream = GroupStream("t", "c-0", 10, manual_offsets=True)
        consumption = Consumption(None, "g", {"t": [stream]}, None)
        owned = OwnedPartition(TopicPartition("t", "0-0"), 0, stream, 0)
        consumption.owned[TopicPartition("t", "0-0")] = owned
        stream.deliver(owned, (MessageAndOffset(0, 12, b"a"), MessageAndOffset(12, 24, b"b")))
        self.successResultOf(stream.__anext__())
        self.successResultOf(stream.__anext__())
        self.assertEqual(owned.consumed, 0)
        consumption.acknowledge(TopicPartition("t", "0-0"), 12)
        self.assertEqual(owned.consumed, 12)
        consumption.acknowledge(TopicPartition("t", "0-0"), 6)
        consumption.acknowledge(TopicPartition("t", "0-1"), 99)
        self.assertEqual(owned.consumed, 12)
        consumption.owned = {}  # released: a later generation, or another member, owns it now
        consumption.acknowledge(TopicPartition("t", "0-0"), 24)
        self.assertEqual(owned.consumed, 12)

    def test_envelope_stripped(self) -> None:
        stream = GroupStream("t", "c-0", 10, envelope=True)
        owned = OwnedPartition(TopicPartition("t", "0-0"), 0, stream, 0)
        stream.deliver(owned, (MessageAndOffset(0, 40, wrap(b"original", "o", 1, 2, 3)),
                               MessageAndOffset(40, 50, b"plain")))
        self.assertEqual(self.successResultOf(stream.__anext__()).payload, b"original")
        self.assertEqual(self.successResultOf(stream.__anext__()).payload, b"plain")
        self.assertEqual(owned.consumed, 50)


class StatusLineTests(SynchronousTestCase):
    def test_pauses_are_part_of_the_status_line(self) -> None:
        """The pauses at --max-in-flight since the last status line are counted in it, not lines of their own;
        a pause longer than --status-interval is one line when it gets that long."""
        clock, said = Clock(), []
        mirror = Mirror(MirrorSettings(("127.0.0.1:1",), "127.0.0.1:2", status_s=5.0), reactor=clock, say=said.append)
        self.assertEqual(mirror.copier.pauses.long_s, 5.0)

        async def lag() -> tuple[int, str]:
            return 0, ""

        mirror.sources[0].lag = lag
        report = mirror.copier.pauses
        for _ in range(12):
            report.begin(10_000)
            clock.advance(0.1)
            report.end()
        self.successResultOf(Deferred.fromCoroutine(mirror._report()))
        self.assertEqual(said, ["mirror status: copied 0 messages (0 B); 0 in flight, paused 12 times, 1.2 s in all, "
                                "at --max-in-flight (10,000); lag 0 B behind 127.0.0.1:1"])
        self.successResultOf(Deferred.fromCoroutine(mirror._report()))
        self.assertEqual(said[-1], "mirror status: copied 0 messages (0 B); 0 in flight; lag 0 B behind 127.0.0.1:1")

    def test_lag_says_what_it_leaves_out(self) -> None:
        """A source whose group has partitions on a down broker: the status line's lag says it leaves them out."""
        clock, said = Clock(), []
        mirror = Mirror(MirrorSettings(("127.0.0.1:1",), "127.0.0.1:2", status_s=5.0), reactor=clock, say=said.append)
        group = GroupDescription("g", [], [
            PartitionStatus("clicks", "0-0", None, 10, 30),
            PartitionStatus("clicks", "1-0", None, 5, None, BrokerProblem(1, NOT_REGISTERED)),
        ])
        mirror.sources[0].zk = None
        with patch("twlog.mirror.mirror.describe_groups", lambda *a, **k: succeed([group])):
            self.successResultOf(Deferred.fromCoroutine(mirror._report()))
        self.assertEqual(said[-1], "mirror status: copied 0 messages (0 B); 0 in flight; lag 20 B behind 127.0.0.1:1 "
                         "(leaves out clicks:1-0: broker 1, which holds clicks:1-0, is not registered: down?)")

    def test_long_pause_without_status_lines(self) -> None:
        """With --status-interval 0 (no status lines) a pause is said once it lasts 10 s."""
        settings = MirrorSettings(("127.0.0.1:1",), "127.0.0.1:2", status_s=0)
        self.assertEqual(Mirror(settings, reactor=Clock(), say=print).copier.pauses.long_s, 10.0)
