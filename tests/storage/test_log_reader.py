"""Tests for twlog.storage.log_reader: what a fetch, OFFSETS and BOUNDARIES read from a partition's log."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.config import HOUR_MS
from twlog.errors import (
    FetchSizeTooSmall,
    InvalidFetchSize,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
)
from twlog.storage.log import EARLIEST_TIME, LATEST_TIME, Log
from twlog.storage.log_reader import LogReader, offsets_newest_first
from twlog.storage.message import encode_message, encode_message_set, iter_messages
from twlog.storage.segment_list import SegmentList

from ..fakes import run_now
from .support import ENTRY, payloads, read_all
from .test_log import LogTestMixin
from .test_retention import MINUTE_MS, NOW_MS, RetentionMixin


class LogReaderTests(SynchronousTestCase):
    """A LogReader on its own: segments and a flushed offset are all it needs."""

    def setUp(self) -> None:
        segments, _ = SegmentList.open(self.mktemp())
        self.addCleanup(segments.close)
        self.data = encode_message_set([b"a", b"b"])
        segments.active.append(self.data)
        segments.active.write_out()
        self.flushed = 0
        self.reader = LogReader(segments, lambda: self.flushed, 1024, run_now)

    def test_reads_stop_at_the_flushed_offset(self) -> None:
        """Bytes past the flushed offset read as empty; once it moves they are read."""
        self.assertEqual(self.reader.read(0, 100).length, 0)
        self.flushed = len(self.data)
        region = self.reader.read(0, 100)
        self.assertEqual([m.payload for m in iter_messages(region.read(), region.offset)], [b"a", b"b"])

    def test_offsets_and_boundaries_stop_there_too(self) -> None:
        """OFFSETS' latest offset and BOUNDARIES' answers never pass the flushed offset."""
        self.assertEqual(self.reader.offsets_before(LATEST_TIME, 5, NOW_MS), [0])
        self.assertEqual(self.successResultOf(self.reader.boundaries([0, 3])), [0, 0])
        self.flushed = len(self.data)
        self.assertEqual(self.reader.offsets_before(LATEST_TIME, 5, NOW_MS), [len(self.data), 0])

    def test_out_of_range(self) -> None:
        """Offsets and positions past the written end are OffsetOutOfRange."""
        self.assertRaises(OffsetOutOfRange, self.reader.read, len(self.data) + 1, 100)
        self.assertRaises(OffsetOutOfRange, self.reader.boundaries, [len(self.data) + 1])


class OffsetsNewestFirstTests(SynchronousTestCase):
    def test_latest_earliest_and_times(self) -> None:
        """Entries (offset, mtime) oldest first give the newest offsets at or before a time, deduplicated."""
        entries = [(0, 10), (100, 20), (200, 30), (200, 40)]
        self.assertEqual(offsets_newest_first(entries, LATEST_TIME, 1), [200])
        self.assertEqual(offsets_newest_first(entries, LATEST_TIME, 10), [200, 100, 0])
        self.assertEqual(offsets_newest_first(entries, EARLIEST_TIME, 10), [0])
        self.assertEqual(offsets_newest_first(entries, 25, 10), [100, 0])
        self.assertEqual(offsets_newest_first(entries, 45, 2), [200, 100])
        self.assertEqual(offsets_newest_first(entries, 5, 10), [])


class ReadTests(LogTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.log = self.open_log()
        for i in range(25):
            self.log.append(encode_message(payloads(1, i)[0]))
        self.successResultOf(self.log.flush())
        self.offsets = [i * 109 for i in range(25)]

    def test_read_back_byte_identical(self) -> None:
        """Reading from 0 returns every message, across segment rolls."""
        self.assertEqual(read_all(self.log), payloads(25))

    def test_read_first_middle_and_segment_start(self) -> None:
        """A read at any message offset starts with that message."""
        for i in (0, 7, 10, 19, 24):
            region = self.log.read(self.offsets[i], 109)
            (m,) = iter_messages(region.read(), region.offset)
            self.assertEqual((m.offset, m.payload), (self.offsets[i], payloads(1, i)[0]))

    def test_read_never_crosses_a_segment(self) -> None:
        """A read stops at the end of its segment even with room to spare."""
        region = self.log.read(872, 100_000)
        self.assertEqual((region.position, region.length), (872, 1090 - 872))

    def test_read_at_exact_end_is_empty(self) -> None:
        """A read at the flushed end is an empty region, not an error."""
        region = self.log.read(self.log.end_offset, 1000)
        self.assertEqual(region.length, 0)
        self.assertEqual(region.read(), b"")

    def test_read_past_end(self) -> None:
        """A read past the end is OffsetOutOfRange naming the valid range."""
        e = self.assertRaises(OffsetOutOfRange, self.log.read, self.log.end_offset + 1, 1000)
        self.assertIn("[0, 2725]", str(e))

    def test_read_before_start(self) -> None:
        """A negative offset is OffsetOutOfRange."""
        self.assertRaises(OffsetOutOfRange, self.log.read, -1, 1000)

    def test_read_not_on_boundary(self) -> None:
        """An offset inside a message is OffsetNotOnBoundary, at every position of a message."""
        for offset in range(110, 218):
            self.assertRaises(OffsetNotOnBoundary, self.log.read, offset, 1000)

    def test_message_larger_than_max_bytes(self) -> None:
        """A fetch smaller than the next message is FetchSizeTooSmall, never an empty result."""
        e = self.assertRaises(FetchSizeTooSmall, self.log.read, 109, 50)
        self.assertIn("109 bytes, larger than the fetch size 50", str(e))

    def test_partial_first_message_as_kafka07(self) -> None:
        """With partial_ok (Kafka 0.7's FETCH), a message larger than max_bytes gives its first max_bytes bytes,
        as a file region (zero-copy); a larger max_bytes still stops at the flushed end and the segment end."""
        whole = self.log.read(109, 109).read()
        for max_bytes in (1, 4, 50, 108):
            region = self.log.read(109, max_bytes, partial_ok=True)
            self.assertEqual((region.offset, region.length, region.read()), (109, max_bytes, whole[:max_bytes]))
        end = self.log.end_offset
        self.log.append(encode_message_set(payloads(1)))  # not flushed: not visible
        self.assertEqual(self.log.read(end - 109, 10_000, partial_ok=True).length, 109)
        segment_end = self.log.segments[0].end_offset
        self.assertLessEqual(self.log.read(0, 10**9, partial_ok=True).length, segment_end)

    def test_partial_ok_still_checks_the_boundary(self) -> None:
        """partial_ok does not lift the boundary check: an offset inside a message is OffsetNotOnBoundary."""
        for offset in (110, 150, 217):
            self.assertRaises(OffsetNotOnBoundary, self.log.read, offset, 50, partial_ok=True)
        self.assertRaises(InvalidFetchSize, self.log.read, 0, 0, partial_ok=True)

    def test_partial_last_message(self) -> None:
        """A read may end inside a message; the reader drops the partial entry."""
        region = self.log.read(0, 300)
        self.assertEqual(region.length, 300)
        self.assertEqual(len(list(iter_messages(region.read(), 0))), 2)

    def test_invalid_fetch_size(self) -> None:
        """A zero or negative fetch size is InvalidFetchSize."""
        self.assertRaises(InvalidFetchSize, self.log.read, 0, 0)

    def test_unflushed_tail_reads_empty(self) -> None:
        """An offset in the written but unflushed tail reads as empty, not out of range."""
        end = self.log.end_offset
        self.log.append(encode_message_set(payloads(2)))
        self.assertEqual(self.log.read(end, 1000).length, 0)
        self.assertEqual(self.log.read(end + 109, 1000).length, 0)

    def test_region_names_file_and_position(self) -> None:
        """A region is a (file descriptor, position, length) view for sendfile."""
        region = self.log.read(1090, 500)
        self.assertEqual(os.pread(region.fileno(), region.length, region.position), region.read())
        self.assertEqual(region.offset, 1090)


class OffsetsBeforeTests(RetentionMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.manager = self.start_manager()
        self.log = self.manager.get_or_create_log("t", 0)

    def aged_log(self) -> Log:
        """Segments at 0, 1090, 2180, 3270 last modified 40, 30, 20 and 10 minutes ago, all flushed."""
        self.fill(self.log, 35)
        self.age(self.log, 40 * MINUTE_MS, 30 * MINUTE_MS, 20 * MINUTE_MS, 10 * MINUTE_MS)
        return self.log

    def test_empty_log(self) -> None:
        """A new, empty log answers 0 for both the latest and the earliest offset."""
        self.assertEqual(self.log.offsets_before(LATEST_TIME, 10, NOW_MS), [0])
        self.assertEqual(self.log.offsets_before(EARLIEST_TIME, 10, NOW_MS), [0])

    def test_latest_is_the_flushed_end(self) -> None:
        """LATEST_TIME answers the flushed end; unflushed appends do not move it until the flush."""
        self.fill(self.log, 3)
        flushed = self.log.end_offset
        self.fill(self.log, 2, 3, flush=False)
        self.assertEqual(self.log.offsets_before(LATEST_TIME, 1, NOW_MS), [flushed])
        self.successResultOf(self.log.flush())
        self.assertEqual(self.log.offsets_before(LATEST_TIME, 1, NOW_MS), [5 * ENTRY])

    def test_latest_ignores_unflushed_rolled_segment(self) -> None:
        """LATEST_TIME is the flushed end even when unflushed appends have rolled a new segment."""
        self.fill(self.log, 5)
        self.fill(self.log, 10, 5, flush=False)  # rolls to 1090 with nothing flushed past 545
        self.assertEqual(self.bases(self.log), [0, 1090])
        self.assertEqual(self.log.flushed_offset, 5 * ENTRY)
        self.assertEqual(self.log.offsets_before(LATEST_TIME, 1, NOW_MS), [5 * ENTRY])

    def test_no_offset_past_the_flushed_end(self) -> None:
        """No OFFSETS answer names an offset past the flushed end, whatever the time asked."""
        self.fill(self.log, 5)
        self.fill(self.log, 10, 5, flush=False)  # rolls to 1090 with nothing flushed past 545
        self.age(self.log, 10 * MINUTE_MS, 5 * MINUTE_MS)
        beyond = [
            (time_ms, offset)
            for time_ms in (NOW_MS - 5 * MINUTE_MS, NOW_MS, NOW_MS + HOUR_MS, LATEST_TIME, EARLIEST_TIME)
            for offset in self.log.offsets_before(time_ms, 10, NOW_MS)
            if offset > self.log.flushed_offset
        ]
        self.assertEqual(beyond, [])

    def test_latest_after_a_timed_flush(self) -> None:
        """Once the clock passes flush_interval_ms the appended data counts for LATEST_TIME."""
        self.fill(self.log, 3, flush=False)
        self.assertEqual(self.log.offsets_before(LATEST_TIME, 1, NOW_MS), [0])
        self.clock.advance(self.manager.config.flush_interval_ms / 1000)
        self.assertEqual(self.log.offsets_before(LATEST_TIME, 1, NOW_MS), [3 * ENTRY])

    def test_earliest_is_the_first_offset(self) -> None:
        """EARLIEST_TIME answers the first offset still on disk."""
        self.aged_log()
        self.assertEqual(self.log.offsets_before(EARLIEST_TIME, 10, NOW_MS), [0])

    def test_earliest_after_retention(self) -> None:
        """After retention EARLIEST_TIME answers the new start, and reading there works."""
        self.aged_log()
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 20 * MINUTE_MS, 10 * MINUTE_MS)
        self.successResultOf(self.manager.run_retention())
        [earliest] = self.log.offsets_before(EARLIEST_TIME, 10, NOW_MS)
        self.assertEqual(earliest, 2180)
        self.assertEqual(read_all(self.log, earliest), payloads(15, 20))
        self.assertRaises(OffsetOutOfRange, self.log.read, earliest - ENTRY, 4096)

    def test_time_between_segments(self) -> None:
        """A time answers the base offsets of the segments last modified at or before it, newest first."""
        self.aged_log()
        self.assertEqual(self.log.offsets_before(NOW_MS - 25 * MINUTE_MS, 10, NOW_MS), [1090, 0])
        self.assertEqual(self.log.offsets_before(NOW_MS - 15 * MINUTE_MS, 10, NOW_MS), [2180, 1090, 0])

    def test_time_equal_to_mtime_is_included(self) -> None:
        """A segment last modified exactly at the time asked is included."""
        self.aged_log()
        self.assertEqual(self.log.offsets_before(NOW_MS - 30 * MINUTE_MS, 10, NOW_MS), [1090, 0])
        self.assertEqual(self.log.offsets_before(NOW_MS - 30 * MINUTE_MS - 1, 10, NOW_MS), [0])

    def test_max_offsets_bounds_the_answer(self) -> None:
        """At most max_offsets offsets come back, the newest ones."""
        self.aged_log()
        self.assertEqual(self.log.offsets_before(NOW_MS - 15 * MINUTE_MS, 2, NOW_MS), [2180, 1090])
        self.assertEqual(self.log.offsets_before(NOW_MS - 15 * MINUTE_MS, 1, NOW_MS), [2180])
        self.assertEqual(self.log.offsets_before(NOW_MS - 15 * MINUTE_MS, 0, NOW_MS), [])

    def test_time_before_every_segment(self) -> None:
        """A time before every segment's modification answers nothing."""
        self.aged_log()
        self.assertEqual(self.log.offsets_before(NOW_MS - 41 * MINUTE_MS, 10, NOW_MS), [])

    def test_now_includes_the_flushed_end(self) -> None:
        """A time at or after now answers the flushed end first, then every segment's base offset."""
        log = self.aged_log()
        self.assertEqual(log.offsets_before(NOW_MS, 10, NOW_MS), [log.flushed_offset, 3270, 2180, 1090, 0])
        self.assertEqual(log.offsets_before(NOW_MS, 2, NOW_MS), [log.flushed_offset, 3270])

    def test_after_time_retention_times_still_map(self) -> None:
        """After retention, a time before the remaining segments answers nothing and later times the survivors."""
        self.aged_log()
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 20 * MINUTE_MS, 10 * MINUTE_MS)
        self.successResultOf(self.manager.run_retention())
        self.assertEqual(self.log.offsets_before(NOW_MS - 2 * HOUR_MS, 10, NOW_MS), [])
        self.assertEqual(self.log.offsets_before(NOW_MS - 15 * MINUTE_MS, 10, NOW_MS), [2180])
