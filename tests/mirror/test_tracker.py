"""Tests for twlog.mirror.tracker: a source offset is committed only when everything before it was acknowledged."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.mirror.tracker import OffsetTracker
from twlog.partition import TopicPartition


class TrackerTests(SynchronousTestCase):
    def test_in_order(self) -> None:
        tracker = OffsetTracker()
        first, second = tracker.add(TopicPartition("t", "0-0"), 100), tracker.add(TopicPartition("t", "0-0"), 250)
        self.assertEqual(tracker.done(first), 100)
        self.assertEqual(tracker.done(second), 250)
        self.assertEqual(tracker.pending, 0)

    def test_out_of_order_waits_for_the_prefix(self) -> None:
        """A later batch acknowledged first does not move the watermark past an earlier one still in flight."""
        tracker = OffsetTracker()
        marks = [tracker.add(TopicPartition("t", "0-0"), n) for n in (10, 20, 30)]
        self.assertIsNone(tracker.done(marks[2]))
        self.assertIsNone(tracker.done(marks[1]))
        self.assertEqual(tracker.pending, 3)
        self.assertEqual(tracker.done(marks[0]), 30)
        self.assertEqual(tracker.pending, 0)

    def test_partitions_are_independent(self) -> None:
        tracker = OffsetTracker()
        a, b = tracker.add(TopicPartition("t", "0-0"), 10), tracker.add(TopicPartition("t", "0-1"), 5)
        other_topic = tracker.add(TopicPartition("u", "0-0"), 7)
        self.assertEqual(tracker.done(b), 5)
        self.assertEqual(tracker.done(other_topic), 7)
        self.assertEqual(tracker.pending, 1)
        self.assertEqual(tracker.done(a), 10)
