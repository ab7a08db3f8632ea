"""Tests for retention (by age and by size): twlog.storage.retention, driven through Log and LogManager."""

from __future__ import annotations

import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import HOUR_MS, LogConfig
from twlog.errors import OffsetOutOfRange
from twlog.storage.log import EARLIEST_TIME, LATEST_TIME, Log
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set, iter_messages
from twlog.storage.retention import Retention, segments_to_expire
from twlog.storage.segment import Segment, segment_name

from ..fakes import ManualRunner, run_now
from .support import ENTRY, payloads, read_all

SEGMENT = 1090  # ten entries per segment
#: The fake clock's "now", in ms.  Segment mtimes are set relative to it.
NOW_MS = 1_700_000_000_000
MINUTE_MS = 60 * 1000


def set_mtime(path: str, mtime_ms: int) -> None:
    """Make C{path} look last modified at C{mtime_ms}."""
    ns = mtime_ms * 1_000_000
    os.utime(path, ns=(ns, ns))


class RetentionMixin:
    def start_manager(self, runner=run_now, **overrides) -> LogManager:
        """A started manager with small segments, whose clock reads NOW_MS."""
        settings = dict(segment_bytes=SEGMENT, flush_messages=1_000_000, retention_ms=HOUR_MS)
        settings.update(overrides)
        self.log_dir = self.mktemp()
        self.clock = Clock()
        self.clock.advance(NOW_MS / 1000)
        manager = LogManager(LogConfig(self.log_dir, **settings), self.clock, runner)
        manager.start()
        self.addCleanup(manager.close)
        return manager

    def fill(self, log: Log, count: int, start: int = 0, flush: bool = True) -> None:
        """Append C{count} messages one per append (so segments fill to ten), then flush."""
        for i in range(start, start + count):
            log.append(encode_message_set(payloads(1, i)))
        if flush:
            self.successResultOf(log.flush())

    def age(self, log: Log, *ages_ms: int) -> None:
        """Set the mtime of each segment, oldest first, to C{NOW_MS - age}."""
        segments = log.segments
        self.assertEqual(len(segments), len(ages_ms))
        for segment, age in zip(segments, ages_ms):
            set_mtime(segment.path, NOW_MS - age)

    def files(self, log: Log) -> list[str]:
        return sorted(name for name in os.listdir(log.directory) if name.endswith(".log"))

    def bases(self, log: Log) -> list[int]:
        return [s.base_offset for s in log.segments]


class TimeRetentionTests(RetentionMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.manager = self.start_manager()
        self.log = self.manager.get_or_create_log("t", 0)
        self.fill(self.log, 25)  # segments at 0, 1090, 2180 (the active one, 5 messages)
        self.assertEqual(self.bases(self.log), [0, 1090, 2180])

    def test_expired_segments_are_deleted(self) -> None:
        """Segments last modified longer ago than retention_ms go from disk and from the index."""
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 10 * MINUTE_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 2)
        self.assertEqual(self.files(self.log), [segment_name(2180)])
        self.assertEqual(self.bases(self.log), [2180])
        self.assertEqual(self.log.start_offset, 2180)
        self.assertEqual(self.log.end_offset, 2180 + 5 * ENTRY)
        self.assertEqual(read_all(self.log, 2180), payloads(5, 20))

    def test_young_segments_are_kept(self) -> None:
        """Nothing younger than retention_ms is deleted."""
        self.age(self.log, HOUR_MS - 1, 30 * MINUTE_MS, MINUTE_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 0)
        self.assertEqual(self.files(self.log), [segment_name(b) for b in (0, 1090, 2180)])
        self.assertEqual(self.log.start_offset, 0)

    def test_exactly_retention_ms_old_is_kept(self) -> None:
        """A segment exactly retention_ms old is not yet expired."""
        self.age(self.log, HOUR_MS, HOUR_MS, MINUTE_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 0)

    def test_deletes_only_a_prefix(self) -> None:
        """Retention deletes the oldest segments in order and stops at the first young one, leaving no gap."""
        self.fill(self.log, 10, 25)  # rolls: 2180 is no longer active
        self.age(self.log, 3 * HOUR_MS, 10 * MINUTE_MS, 2 * HOUR_MS, MINUTE_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 1)
        self.assertEqual(self.bases(self.log), [1090, 2180, 3270])

    def test_looping_call_runs_retention(self) -> None:
        """Retention runs every retention_check_interval_ms of clock time, not before."""
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 10 * MINUTE_MS)
        interval = self.manager.config.retention_check_interval_ms / 1000
        self.clock.advance(interval - 0.001)
        self.assertEqual(self.bases(self.log), [0, 1090, 2180])
        # The clock moved, so the segments are a little older; they stay past the cutoff.
        self.clock.advance(0.001)
        self.assertEqual(self.bases(self.log), [2180])
        self.assertEqual(self.files(self.log), [segment_name(2180)])

    def test_clock_moving_expires_segments(self) -> None:
        """A segment young at one periodic check is deleted by a later one, once the clock passes its expiry."""
        self.age(self.log, 50 * MINUTE_MS, 20 * MINUTE_MS, MINUTE_MS)
        self.clock.advance(5 * 60)  # a check: the first segment is 55 minutes old
        self.assertEqual(self.bases(self.log), [0, 1090, 2180])
        self.clock.advance(5 * 60)  # a check: exactly 60 minutes old, not older
        self.assertEqual(self.bases(self.log), [0, 1090, 2180])
        self.clock.advance(5 * 60)  # a check: 65 minutes old
        self.assertEqual(self.bases(self.log), [1090, 2180])
        self.assertEqual(self.files(self.log), [segment_name(1090), segment_name(2180)])

    def test_expired_active_segment_with_unflushed_data_is_kept(self) -> None:
        """The active segment is never deleted: with unflushed data it stays, whatever its age."""
        self.fill(self.log, 2, 25, flush=False)
        self.age(self.log, 3 * HOUR_MS, 3 * HOUR_MS, 3 * HOUR_MS)
        end = self.log.end_offset
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 2)
        self.assertEqual(self.bases(self.log), [2180])
        self.assertEqual(self.files(self.log), [segment_name(2180)])
        self.assertEqual(self.log.end_offset, end)
        self.successResultOf(self.log.flush())
        self.assertEqual(read_all(self.log, 2180), payloads(7, 20))

    def test_expired_active_segment_rolls_first(self) -> None:
        """A fully flushed, expired active segment is replaced by an empty one at the end, so offsets never go back."""
        end = self.log.end_offset
        self.age(self.log, 3 * HOUR_MS, 3 * HOUR_MS, 2 * HOUR_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 3)
        self.assertEqual(self.files(self.log), [segment_name(end)])
        self.assertEqual(self.bases(self.log), [end])
        self.assertEqual((self.log.start_offset, self.log.end_offset, self.log.flushed_offset), (end, end, end))
        self.assertEqual(self.log.read(end, 4096).length, 0)
        result = self.log.append(encode_message_set(payloads(2, 100)))
        self.assertEqual(result.offset, end)
        self.successResultOf(self.log.flush())
        self.assertEqual(read_all(self.log, end), payloads(2, 100))

    def test_empty_active_segment_is_not_rolled_again(self) -> None:
        """Once an empty segment is active, later checks neither roll nor delete anything."""
        self.age(self.log, 3 * HOUR_MS, 3 * HOUR_MS, 2 * HOUR_MS)
        self.successResultOf(self.manager.run_retention())
        end = self.log.end_offset
        self.age(self.log, 5 * HOUR_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 0)
        self.assertEqual(self.bases(self.log), [end])
        self.assertEqual(self.files(self.log), [segment_name(end)])

    def test_offsets_survive_restart_after_everything_expired(self) -> None:
        """After all data expired and the manager stopped cleanly, the log reopens at the same end offset."""
        end = self.log.end_offset
        self.age(self.log, 3 * HOUR_MS, 3 * HOUR_MS, 2 * HOUR_MS)
        self.successResultOf(self.manager.run_retention())
        self.successResultOf(self.manager.stop())
        manager = LogManager(self.manager.config, self.clock, run_now)
        manager.start()
        self.addCleanup(manager.close)
        log = manager.get_log("t", 0)
        self.assertEqual((log.start_offset, log.end_offset), (end, end))
        self.assertEqual(log.append(encode_message_set(payloads(1))).offset, end)

    def test_reads_before_the_new_start(self) -> None:
        """Reads before the new start get OffsetOutOfRange; a read at the new start works."""
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 10 * MINUTE_MS)
        self.successResultOf(self.manager.run_retention())
        for offset in (0, ENTRY, 1090, 2180 - ENTRY):
            self.assertRaises(OffsetOutOfRange, self.log.read, offset, 4096)
        region = self.log.read(2180, 4096)
        self.assertEqual(region.offset, 2180)
        self.assertEqual([m.payload for m in iter_messages(region.read(), 2180)], payloads(5, 20))

    def test_region_outlives_deletion(self) -> None:
        """A region handed out before its segment was deleted can still be read (the descriptor stays open)."""
        region = self.log.read(0, 4096)
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 10 * MINUTE_MS)
        self.successResultOf(self.manager.run_retention())
        self.assertNotIn(segment_name(0), self.files(self.log))
        self.assertEqual([m.payload for m in iter_messages(region.read(), 0)], payloads(10))

    def test_every_partition(self) -> None:
        """One retention run covers every partition and reports the total deleted."""
        other = self.manager.get_or_create_log("u", 0)
        self.fill(other, 15)
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 10 * MINUTE_MS)
        self.age(other, 3 * HOUR_MS, 10 * MINUTE_MS)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 3)
        self.assertEqual(self.bases(self.log), [2180])
        self.assertEqual(self.bases(other), [1090])


class DeletionTests(RetentionMixin, SynchronousTestCase):
    """Deleting expired files happens on pool threads; whatever becomes of it, the partition must reopen."""

    def setUp(self) -> None:
        self.runner = ManualRunner()
        self.manager = self.start_manager(self.runner)
        self.log = self.manager.get_or_create_log("t", 0)
        for i in range(25):
            self.log.append(encode_message_set(payloads(1, i)))
        d = self.log.flush()
        self.runner.run_all()
        self.successResultOf(d)
        self.end = self.log.end_offset
        self.age(self.log, 3 * HOUR_MS, 2 * HOUR_MS, 10 * MINUTE_MS)

    def restart(self) -> Log:
        """Start a new manager on the directory and return the partition's log."""
        manager = LogManager(self.manager.config, self.clock, run_now)
        manager.start()
        self.addCleanup(manager.close)
        return manager.get_log("t", 0)

    def test_files_go_only_when_the_pool_runs(self) -> None:
        """run_retention takes segments off the index at once and fires once the pool has unlinked them."""
        d = self.manager.run_retention()
        self.assertEqual(self.bases(self.log), [2180])
        self.assertNoResult(d)
        self.runner.run_all()
        self.assertEqual(self.successResultOf(d), 2)
        self.assertEqual(self.files(self.log), [segment_name(2180)])

    def test_last_descriptor_closed_on_the_pool(self) -> None:
        """A deleted segment's last descriptor is closed on the pool, where the filesystem frees the file's blocks
        (15-20 ms for 64 MB on ext4, which held the reactor when it was closed there); a region handed out before
        keeps its segment open until it goes."""
        first, second = (s.fd for s in self.log.segments[:2])
        region = self.log.read(1090, 4096)
        d = self.manager.run_retention()
        self.runner.run_one()  # the unlinks; the segments are dropped, their descriptors' closes queued
        self.successResultOf(d)
        os.fstat(first)
        self.runner.run_all()
        self.assertRaises(OSError, os.fstat, first)
        self.assertEqual([m.payload for m in iter_messages(region.read(), 1090)], payloads(10, 10))
        del region
        os.fstat(second)
        self.runner.run_all()
        self.assertRaises(OSError, os.fstat, second)

    def test_failed_deletion_leaves_no_gap(self) -> None:
        """When unlinking the oldest expired segment fails, the partition still opens on the next start."""
        d = self.manager.run_retention()
        self.runner.fail_one(PermissionError("unlink refused"))
        self.runner.run_all()
        self.successResultOf(d)
        self.assertTrue(self.flushLoggedErrors(PermissionError))
        self.successResultOf(self.manager.stop())
        log = self.restart()
        self.assertEqual(log.end_offset, self.end)
        self.assertEqual(read_all(log, 2180), payloads(5, 20))

    def test_crash_between_deletions_leaves_no_gap(self) -> None:
        """A crash after unlinking a younger expired segment but not an older one leaves a partition that opens."""
        self.manager.run_retention()
        self.runner.pending.reverse()  # pool threads may run the unlinks in any order
        self.runner.run_one()
        self.manager.close()  # crash: no marker, the older unlink never ran
        log = self.restart()
        self.assertEqual(log.end_offset, self.end)
        self.assertEqual(read_all(log, 2180), payloads(5, 20))


class SizeRetentionTests(RetentionMixin, SynchronousTestCase):
    def make_log(self, retention_bytes: int, count: int = 35) -> Log:
        """A partition of C{count} young messages (segments at 0, 1090, 2180, 3270) under a size cap."""
        self.manager = self.start_manager(retention_bytes=retention_bytes)
        log = self.manager.get_or_create_log("t", 0)
        self.fill(log, count)
        self.age(log, *[MINUTE_MS] * len(log.segments))
        return log

    def test_under_the_cap_nothing_goes(self) -> None:
        """A partition at or under retention_bytes keeps every segment."""
        log = self.make_log(retention_bytes=3 * SEGMENT + 5 * ENTRY)
        self.assertEqual(log.size_bytes(), 3 * SEGMENT + 5 * ENTRY)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 0)
        self.assertEqual(self.bases(log), [0, 1090, 2180, 3270])

    def test_oldest_go_until_under_the_cap(self) -> None:
        """The oldest segments are deleted until the partition fits under retention_bytes."""
        log = self.make_log(retention_bytes=2 * SEGMENT)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 2)
        self.assertEqual(self.bases(log), [2180, 3270])
        self.assertEqual(self.files(log), [segment_name(2180), segment_name(3270)])
        self.assertLessEqual(log.size_bytes(), 2 * SEGMENT)
        self.assertEqual(read_all(log, 2180), payloads(15, 20))

    def test_one_byte_over(self) -> None:
        """A partition one byte over the cap loses its oldest segment."""
        log = self.make_log(retention_bytes=3 * SEGMENT + 5 * ENTRY - 1)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 1)
        self.assertEqual(self.bases(log), [1090, 2180, 3270])

    def test_active_segment_is_never_deleted(self) -> None:
        """A cap of zero deletes every segment but the active one, and the end offset stays."""
        log = self.make_log(retention_bytes=0)
        end = log.end_offset
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 3)
        self.assertEqual(self.bases(log), [3270])
        self.assertEqual(log.end_offset, end)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 0)
        self.assertEqual(log.append(encode_message_set(payloads(1))).offset, end)

    def test_reads_before_the_new_start(self) -> None:
        """After the size cap deletes segments, reads before the new start are out of range."""
        log = self.make_log(retention_bytes=2 * SEGMENT)
        self.successResultOf(self.manager.run_retention())
        self.assertRaises(OffsetOutOfRange, log.read, 1090, 4096)
        self.assertEqual(read_all(log, log.start_offset)[:1], payloads(1, 20))

    def test_unflushed_data_and_the_cap(self) -> None:
        """Size retention over data not yet flushed leaves OFFSETS answering, with EARLIEST never past LATEST."""
        self.manager = self.start_manager(retention_bytes=0)
        log = self.manager.get_or_create_log("t", 0)
        self.fill(log, 25, flush=False)  # segments at 0, 1090, 2180, nothing flushed
        self.age(log, MINUTE_MS, MINUTE_MS, MINUTE_MS)
        self.successResultOf(self.manager.run_retention())
        [earliest] = log.offsets_before(EARLIEST_TIME, 1, NOW_MS)
        [latest] = log.offsets_before(LATEST_TIME, 1, NOW_MS)
        self.assertLessEqual(earliest, latest)
        self.successResultOf(log.flush())
        [earliest] = log.offsets_before(EARLIEST_TIME, 1, NOW_MS)
        self.assertEqual(log.offsets_before(LATEST_TIME, 1, NOW_MS), [log.end_offset])
        self.assertEqual(read_all(log, earliest)[-1:], payloads(1, 24))

    def test_no_cap_by_default(self) -> None:
        """With the default retention_bytes (-1) size never deletes anything."""
        self.manager = self.start_manager()
        log = self.manager.get_or_create_log("t", 0)
        self.fill(log, 35)
        self.age(log, *[MINUTE_MS] * 4)
        self.assertEqual(self.successResultOf(self.manager.run_retention()), 0)


class _Aged:
    """A segment as segments_to_expire sees it: a range, a size and a modification time."""

    def __init__(self, base_offset: int, size: int, mtime_ms: int) -> None:
        self.base_offset, self.size, self._mtime_ms = base_offset, size, mtime_ms
        self.end_offset = base_offset + size

    def mtime_ms(self) -> int:
        return self._mtime_ms


class SegmentsToExpireTests(SynchronousTestCase):
    """The rule alone, on segments in memory: a prefix, never the active one, never unflushed data."""

    def segments(self, *mtimes_ms: int) -> list[_Aged]:
        return [_Aged(i * 100, 100, mtime) for i, mtime in enumerate(mtimes_ms)]

    def test_by_age_a_prefix(self) -> None:
        """Only the oldest run older than the cutoff goes, stopping at the first young segment."""
        segments = self.segments(10, 50, 20, 10)
        self.assertEqual(segments_to_expire(segments, 400, 30, -1), 1)

    def test_never_the_active_one(self) -> None:
        """The last segment stays however old."""
        self.assertEqual(segments_to_expire(self.segments(1, 1, 1), 300, 100, -1), 2)

    def test_never_unflushed_data(self) -> None:
        """A segment ending past the flushed offset stays, and so do the ones after it."""
        self.assertEqual(segments_to_expire(self.segments(1, 1, 1, 1), 150, 100, -1), 1)

    def test_by_size_after_age(self) -> None:
        """Then the oldest go while the rest exceed retention_bytes."""
        segments = self.segments(10, 50, 50, 50)
        self.assertEqual(segments_to_expire(segments, 400, 30, 200), 2)
        self.assertEqual(segments_to_expire(segments, 400, 0, 200), 2)
        self.assertEqual(segments_to_expire(segments, 400, 0, 199), 3)


class _FakeLog:
    def __init__(self, directory: str, expired: list[Segment] | Exception) -> None:
        self.directory = directory
        self.expired = expired
        self.asked: list[int] = []

    def expire_segments(self, now_ms: int) -> list[Segment]:
        self.asked.append(now_ms)
        if isinstance(self.expired, Exception):
            raise self.expired
        return self.expired


class RetentionRunTests(SynchronousTestCase):
    """The periodic run alone, over logs in memory."""

    def test_runs_every_interval_and_deletes_on_the_pool(self) -> None:
        """Each interval every log is asked with the clock's time in ms; what it gives up is unlinked on the pool."""
        directory = self.mktemp()
        os.makedirs(directory)
        path = os.path.join(directory, segment_name(0))
        with open(path, "w"):
            pass
        segment = Segment(path, 0, -1, 0)
        logs = [_FakeLog("bad", RuntimeError("boom")), _FakeLog(directory, [segment])]
        clock, runner = Clock(), ManualRunner()
        retention = Retention(lambda: logs, clock, runner, 10)
        retention.start()
        self.addCleanup(retention.stop)
        clock.advance(10)
        self.assertEqual([log.asked for log in logs], [[10_000], [10_000]])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertTrue(os.path.exists(path))
        runner.run_one()
        self.assertFalse(os.path.exists(path))

    def test_run_counts_what_went(self) -> None:
        """run() fires with how many segments were deleted; 0 when none expired."""
        retention = Retention(lambda: [_FakeLog("d", [])], Clock(), run_now, 10)
        self.assertEqual(self.successResultOf(retention.run()), 0)
        self.assertFalse(retention.running)
