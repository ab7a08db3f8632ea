"""Tests for twlog.mirror.copier: batching, the in-flight bound, retries until acknowledged, watermarks."""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.consumer.stream import GroupMessage
from twlog.errors import ConnectionFailed, MessageSizeTooLarge
from twlog.mirror.copier import Copier
from twlog.mirror.tracker import OffsetTracker
from twlog.partition import TopicPartition


class FakeFeed:
    def __init__(self) -> None:
        self.tracker = OffsetTracker()
        self.acknowledged: list[tuple[str, str, int]] = []  # (topic, partition name, next offset)

    def acknowledge(self, partition: TopicPartition, next_offset: int) -> None:
        self.acknowledged.append((partition.topic, partition.name, next_offset))


class FakeTarget:
    """C{send(topic, payloads)}: each call waits in C{calls} until the test answers it (or fails at once)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[bytes], Deferred]] = []
        self.failures: list[Exception] = []

    def send(self, topic: str, payloads: list[bytes]) -> Deferred:
        if self.failures:
            return fail(self.failures.pop(0))
        d: Deferred = Deferred()
        self.calls.append((topic, list(payloads), d))
        return d

    def ack(self, index: int = 0) -> None:
        self.calls.pop(index)[2].callback(None)


def copy(copier: Copier, m: GroupMessage, feed: FakeFeed) -> Deferred:
    return Deferred.fromCoroutine(copier.copy(m, feed))


def message(n: int, partition: str = "0-0", topic: str = "t") -> GroupMessage:
    return GroupMessage(topic, TopicPartition(topic, partition), n * 10, n * 10 + 10, b"m%d" % n)


class CopierTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.target = FakeTarget()
        self.said: list[str] = []
        self.fatal: list[Exception] = []
        self.feed = FakeFeed()

    def copier(self, **options) -> Copier:
        options.setdefault("batch_size", 2)
        options.setdefault("max_in_flight", 4)
        return Copier(self.target.send, clock=self.clock, say=self.said.append, fatal=self.fatal.append,
                      linger_s=0.05, **options)

    def test_batches_by_size_and_linger(self) -> None:
        copier = self.copier()
        for n in range(3):
            self.assertTrue(self.successResultOf(copy(copier, message(n), self.feed)))
        self.assertEqual([(t, p) for t, p, _ in self.target.calls], [("t", [b"m0", b"m1"])])
        self.clock.advance(0.05)
        self.assertEqual([p for _, p, _ in self.target.calls], [[b"m0", b"m1"], [b"m2"]])
        self.assertEqual(copier.in_flight, 3)

    def test_offsets_acknowledged_in_order(self) -> None:
        """The watermark moves only over batches acknowledged from the front, per source partition."""
        copier = self.copier(batch_size=1)
        for n in range(3):
            copy(copier, message(n), self.feed)
        self.target.ack(1)  # the second batch first: nothing may be committed yet
        self.assertEqual(self.feed.acknowledged, [])
        self.target.ack(0)
        self.assertEqual(self.feed.acknowledged, [("t", "0-0", 20)])
        self.target.ack(0)
        self.assertEqual(self.feed.acknowledged[-1], ("t", "0-0", 30))
        self.assertEqual(copier.stats.messages, {"t": 3})
        self.assertEqual(copier.in_flight, 0)

    def test_back_pressure_at_the_bound(self) -> None:
        """At max_in_flight copy waits (the source stops being read); it goes on once acknowledged.  A short pause
        is no line of its own: it is counted, with its time, for the status line."""
        copier = self.copier(long_pause_s=10.0)
        for n in range(4):
            copy(copier, message(n), self.feed)
        waiting = copy(copier, message(4), self.feed)
        more = copy(copier, message(5), self.feed)
        self.assertNoResult(waiting)
        self.assertTrue(copier.pauses.paused)
        self.clock.advance(0.3)
        self.target.ack()
        self.assertTrue(self.successResultOf(waiting))
        self.assertTrue(self.successResultOf(more))
        self.assertFalse(copier.pauses.paused)
        self.assertEqual(self.said, [])
        self.assertEqual(copier.pauses.summary(), "paused once, 0.3 s in all, at --max-in-flight (4)")
        self.assertEqual(copier.pauses.summary(), "")  # counted since the last summary

    def test_many_short_pauses_are_one_count(self) -> None:
        """A bulk copy pauses at the bound after every acknowledgement: no line each time, one count and total."""
        copier = self.copier(batch_size=2, max_in_flight=2, long_pause_s=10.0)
        copy(copier, message(0), self.feed)
        copy(copier, message(1), self.feed)
        for n in range(2, 42, 2):  # 20 rounds: the sources fill the room, wait 0.1 s, the target acknowledges
            first, second = copy(copier, message(n), self.feed), copy(copier, message(n + 1), self.feed)
            self.clock.advance(0.1)
            self.target.ack()
            self.successResultOf(first)
            self.successResultOf(second)
        self.assertEqual(self.said, [])
        self.assertEqual(copier.pauses.summary(), "paused 20 times, 2.0 s in all, at --max-in-flight (2)")

    def test_long_pause_is_one_line(self) -> None:
        """A pause that lasts long_pause_s is said once, when it does; the status line then counts it."""
        copier = self.copier(long_pause_s=10.0)
        for n in range(5):
            copy(copier, message(n), self.feed)
        self.clock.advance(9.9)
        self.assertEqual(self.said, [])
        self.clock.advance(0.1)
        self.assertEqual(self.said, ["mirror: fetching from the source paused for 10 s so far: the target has not "
                                     "acknowledged 4 messages (the --max-in-flight bound); it resumes by itself once "
                                     "it does"])
        self.clock.advance(5)
        self.assertEqual(copier.pauses.summary(), "paused once, 15.0 s in all, at --max-in-flight (4), paused now")
        self.clock.advance(20)
        self.assertEqual(len(self.said), 1)  # one line for the whole pause
        self.target.ack()
        self.assertEqual(copier.pauses.summary(), "paused once, 20.0 s in all, at --max-in-flight (4)")
        self.clock.advance(0.05)  # the fifth message's batch goes out; no timer of the pause is left
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pause_ended_by_stop(self) -> None:
        """Stopping ends a pause (its long-pause line is not said afterwards)."""
        copier = self.copier(long_pause_s=10.0)
        for n in range(5):
            copy(copier, message(n), self.feed)
        copier.stop()
        self.assertFalse(copier.pauses.paused)
        self.clock.advance(60)
        self.assertEqual(self.said, [])

    def test_target_down_retried_never_dropped(self) -> None:
        copier = self.copier()
        self.target.failures = [ConnectionFailed("refused"), ConnectionFailed("refused")]
        copy(copier, message(0), self.feed)
        copy(copier, message(1), self.feed)
        self.assertEqual(self.target.calls, [])
        self.assertEqual(len(self.said), 1)
        self.assertIn("cannot take t now", self.said[0])
        self.clock.advance(0.4)
        self.clock.advance(0.8)
        self.assertEqual(len(self.target.calls), 1)  # the third attempt waits for its answer
        self.assertEqual(len(self.said), 1)  # one line for the whole outage
        self.target.ack()
        self.assertEqual(self.feed.acknowledged, [("t", "0-0", 20)])
        self.assertIn("acknowledges again", self.said[-1])

    def test_message_too_large_is_fatal(self) -> None:
        copier = self.copier(batch_size=1)
        self.target.failures = [MessageSizeTooLarge("too large")]
        copy(copier, message(0), self.feed)
        self.assertEqual(len(self.fatal), 1)
        self.assertEqual(self.feed.acknowledged, [])

    def test_drain_and_stop(self) -> None:
        copier = self.copier()
        copy(copier, message(0), self.feed)
        drained = Deferred.fromCoroutine(copier.drain())  # sends the lingering batch at once
        self.assertEqual(len(self.target.calls), 1)
        self.assertNoResult(drained)
        self.target.ack()
        self.successResultOf(drained)
        for n in range(1, 5):
            copy(copier, message(n), self.feed)
        waiting = copy(copier, message(5), self.feed)
        copier.stop()
        self.assertFalse(self.successResultOf(waiting))  # not copied: it is fetched again by the next mirror
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_settings_checked(self) -> None:
        self.assertRaises(ValueError, self.copier, batch_size=10, max_in_flight=5)
