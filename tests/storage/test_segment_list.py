"""Tests for twlog.storage.segment_list: a partition's segments, their base offsets, rolls and retention's pops."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import CorruptLog
from twlog.storage.message import encode_message_set
from twlog.storage.segment import segment_name
from twlog.storage.segment_list import SegmentList


class SegmentListTests(SynchronousTestCase):
    def open(self) -> SegmentList:
        segments, self.created = SegmentList.open(self.directory)
        self.addCleanup(segments.close)
        return segments

    def setUp(self) -> None:
        self.directory = self.mktemp()
        self.data = encode_message_set([b"x" * 20])

    def test_new_directory_gets_a_first_segment(self) -> None:
        """A missing directory is created with an empty segment at 0, and says so; reopening does not."""
        segments = self.open()
        self.assertTrue(self.created)
        self.assertEqual((segments.start_offset, segments.end_offset, len(segments)), (0, 0, 1))
        self.assertEqual(os.listdir(self.directory), [segment_name(0)])
        segments.close()
        self.open()
        self.assertFalse(self.created)

    def test_roll_and_find(self) -> None:
        """A roll starts a segment at the end; holding() finds the segment of any offset by its base."""
        segments = self.open()
        segments.active.append(self.data)
        first = segments.active
        second = segments.roll()
        self.assertEqual(second.base_offset, len(self.data))
        self.assertEqual(segments.bases, [0, len(self.data)])
        self.assertIs(segments.active, second)
        self.assertIs(segments.holding(0), first)
        self.assertIs(segments.holding(len(self.data) - 1), first)
        self.assertIs(segments.holding(len(self.data)), second)
        self.assertEqual(os.path.getsize(first.path), len(self.data))  # the roll wrote the first one out

    def test_pop_oldest(self) -> None:
        """Retention's pop takes the oldest off the front and moves the start; the file stays."""
        segments = self.open()
        segments.active.append(self.data)
        segments.roll()
        oldest = segments.pop_oldest()
        self.assertEqual(oldest.base_offset, 0)
        self.assertEqual(segments.start_offset, len(self.data))
        self.assertEqual(segments.size_bytes(), 0)
        self.assertTrue(os.path.exists(oldest.path))
        oldest.close()

    def test_gap_is_corrupt(self) -> None:
        """Segments that leave a gap raise CorruptLog naming the offsets, and nothing stays open."""
        segments = self.open()
        segments.active.append(self.data)
        segments.close()
        with open(os.path.join(self.directory, segment_name(len(self.data) + 5)), "wb"):
            pass
        e = self.assertRaises(CorruptLog, SegmentList.open, self.directory)
        self.assertIn(f"ends at offset {len(self.data)}", str(e))
        self.assertIn(f"starts at {len(self.data) + 5}", str(e))
