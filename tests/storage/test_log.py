"""Tests for twlog.storage.log: appends, rolls, reads and the flush policy of one partition."""

from __future__ import annotations

import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import LogConfig
from twlog.errors import (
    InvalidMessage,
    MessageSizeTooLarge,
    OutcomeUnknown,
    StorageFailed,
)
from twlog.storage.log import Log
from twlog.storage.message import encode_message, encode_message_set
from twlog.storage.segment import parse_segment_name, segment_name

from ..fakes import ManualRunner, run_now
from .support import payloads, read_all


class LogTestMixin:
    def open_log(self, runner=run_now, **overrides) -> Log:
        settings = dict(segment_bytes=1090, flush_messages=1_000_000, flush_interval_ms=1000, flush_policy="timer")
        settings.update(overrides)
        self.directory = self.mktemp()
        self.clock = Clock()
        log = Log.open(self.directory, LogConfig(self.directory, **settings), self.clock, runner)
        self.addCleanup(log.close)
        return log


class AppendTests(LogTestMixin, SynchronousTestCase):
    def test_new_log_starts_at_zero(self) -> None:
        """A new log has one empty segment named by base offset 0."""
        log = self.open_log()
        self.assertEqual((log.start_offset, log.end_offset, log.flushed_offset), (0, 0, 0))
        self.assertEqual(os.listdir(self.directory), [segment_name(0)])
        self.assertEqual(segment_name(0), "00000000000000000000.log")

    def test_append_returns_byte_offsets(self) -> None:
        """Offsets are byte positions: each append starts where the previous ended."""
        log = self.open_log()
        first = log.append(encode_message_set(payloads(2)))
        second = log.append(encode_message_set(payloads(1)))
        self.assertEqual(first, (0, 218, 2))
        self.assertEqual(second, (218, 327, 1))
        self.assertEqual(log.end_offset, 327)

    def test_invalid_set_writes_nothing(self) -> None:
        """A set with a bad CRC is rejected whole and the file is unchanged."""
        log = self.open_log()
        data = bytearray(encode_message_set(payloads(3)))
        data[-1] ^= 0xFF
        self.assertRaises(InvalidMessage, log.append, bytes(data))
        self.assertEqual(log.end_offset, 0)
        self.assertEqual(os.path.getsize(os.path.join(self.directory, segment_name(0))), 0)

    def test_partial_set_rejected(self) -> None:
        """A set ending in a partial message is rejected."""
        log = self.open_log()
        self.assertRaises(InvalidMessage, log.append, encode_message_set(payloads(2))[:-1])
        self.assertEqual(log.end_offset, 0)

    def test_message_above_max_rejected(self) -> None:
        """A message larger than max_message_bytes is rejected even if well formed: MessageSizeTooLarge."""
        log = self.open_log(max_message_bytes=50)
        e = self.assertRaises(MessageSizeTooLarge, log.append, encode_message(b"x" * 60))
        self.assertEqual((e.message_size, e.limit), (65, 50))

    def test_set_larger_than_segment_rejected(self) -> None:
        """A set that cannot fit in one segment is MessageSizeTooLarge."""
        log = self.open_log()
        self.assertRaises(MessageSizeTooLarge, log.append, encode_message_set(payloads(11)))

    def test_empty_set_is_a_no_op(self) -> None:
        """Appending nothing writes nothing and schedules no flush."""
        log = self.open_log()
        self.assertEqual(log.append(b""), (0, 0, 0))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_roll_at_segment_size(self) -> None:
        """A segment rolls when the next append would pass segment_bytes; files are named by base offset."""
        log = self.open_log()
        for i in range(25):
            log.append(encode_message(payloads(1, i)[0]))
        # 10 entries of 109 bytes fit in 1090 bytes.
        self.assertEqual([s.base_offset for s in log.segments], [0, 1090, 2180])
        self.assertEqual(sorted(parse_segment_name(n) for n in os.listdir(self.directory)), [0, 1090, 2180])
        self.assertTrue(all(s.size <= 1090 for s in log.segments))

    def test_sets_never_straddle_segments(self) -> None:
        """A set that would cross the segment size goes whole into the next segment."""
        log = self.open_log()
        log.append(encode_message_set(payloads(7)))
        result = log.append(encode_message_set(payloads(5)))
        self.assertEqual(result.offset, 763)
        self.assertEqual([s.base_offset for s in log.segments], [0, 763])

    def test_small_appends_are_gathered(self) -> None:
        """Small appends reach the file together at the next flush; a full write buffer is written at once."""
        log = self.open_log(segment_bytes=1024 * 1024)
        path = os.path.join(self.directory, segment_name(0))
        log.append(encode_message_set(payloads(3)))
        self.assertEqual(os.path.getsize(path), 0)
        self.successResultOf(log.flush())
        self.assertEqual(os.path.getsize(path), 327)
        for i in range(700):  # 76,300 bytes: more than the 64 KiB buffer
            log.append(encode_message(payloads(1, i)[0]))
        self.assertGreater(os.path.getsize(path), 327 + 64 * 1024 - 109)
        self.assertEqual(log.end_offset, 327 + 700 * 109)

    def test_closed_log_refuses_appends(self) -> None:
        """Appending to a closed log is an error, not a write to a closed descriptor."""
        log = self.open_log()
        log.close()
        self.assertRaises(RuntimeError, log.append, encode_message(b"x"))


class FlushTests(LogTestMixin, SynchronousTestCase):
    def test_unflushed_data_is_invisible(self) -> None:
        """Appended but unflushed messages are neither readable nor the latest offset."""
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        self.assertEqual(log.flushed_offset, 0)
        self.assertEqual(log.read(0, 4096).length, 0)
        self.assertEqual(log.offsets_before(-1, 1, 0), [0])
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(3))
        self.assertEqual(log.offsets_before(-1, 1, 0), [327])

    def test_flush_by_count(self) -> None:
        """Reaching flush_messages flushes at once."""
        log = self.open_log(flush_messages=5)
        log.append(encode_message_set(payloads(4)))
        self.assertEqual(log.flushed_offset, 0)
        log.append(encode_message_set(payloads(1)))
        self.assertEqual(log.flushed_offset, 545)
        self.assertEqual(log.unflushed_messages, 0)

    def test_flush_by_time(self) -> None:
        """Data is flushed flush_interval_ms after the first unflushed append."""
        log = self.open_log(flush_interval_ms=500)
        log.append(encode_message(b"a"))
        self.clock.advance(0.3)
        log.append(encode_message(b"b"))
        self.clock.advance(0.19)
        self.assertEqual(log.flushed_offset, 0)
        self.clock.advance(0.01)
        self.assertEqual(log.flushed_offset, 20)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_append_does_not_wait_for_fsync(self) -> None:
        """While an fsync is in flight, appends continue and data stays invisible until it completes."""
        runner = ManualRunner()
        log = self.open_log(runner)
        log.append(encode_message_set(payloads(2)))
        d = log.flush()
        self.assertNoResult(d)
        log.append(encode_message_set(payloads(1)))  # does not block
        self.assertEqual(log.end_offset, 327)
        self.assertEqual(log.flushed_offset, 0)
        runner.run_one()
        self.assertEqual(self.successResultOf(d), 218)
        self.assertEqual(log.flushed_offset, 218)

    def test_flushes_coalesce(self) -> None:
        """Flushes asked for during an fsync become one more fsync that covers everything."""
        runner = ManualRunner()
        log = self.open_log(runner)
        log.append(encode_message(b"a"))
        first = log.flush()
        log.append(encode_message(b"b"))
        second, third = log.flush(), log.flush()
        self.assertEqual(len(runner.pending), 1)
        runner.run_one()
        self.assertEqual(self.successResultOf(first), 10)
        self.assertEqual(len(runner.pending), 1)
        runner.run_one()
        self.assertEqual((self.successResultOf(second), self.successResultOf(third)), (20, 20))

    def test_flush_with_nothing_new(self) -> None:
        """Flushing a clean log fires at once with the flushed offset."""
        log = self.open_log()
        self.assertEqual(self.successResultOf(log.flush()), 0)

    def test_fsync_failure_fails_the_partition(self) -> None:
        """A failed fsync keeps the data invisible for good: no retry (it could report lost data as safe),
        no more appends, and a StorageFailed that tells the operator to restart (recovery).  The set it
        covered is in the file: whoever waited for it is told OutcomeUnknown, not "not written"."""
        runner = ManualRunner()
        log = self.open_log(runner)
        log.append(encode_message(b"a"))
        d = log.flush()
        runner.fail_one(OSError(5, "Input/output error"))
        self.assertIn("Input/output error", str(self.failureResultOf(d, OutcomeUnknown).value))
        self.assertEqual(log.flushed_offset, 0)
        self.assertIsInstance(log.failed, OSError)
        e = self.assertRaises(StorageFailed, log.append, encode_message(b"b"))
        self.assertIn("restart the broker", str(e))
        self.failureResultOf(log.flush(), StorageFailed)
        self.clock.advance(60)
        self.assertEqual((runner.pending, log.flushed_offset), ([], 0))

    def test_failed_write_keeps_offsets_true(self) -> None:
        """A write that fails (disk full) appends nothing: the file is cut back, and the buffered sets it
        was writing are dropped (never answered as written, never written later), so offsets still match file
        positions; appends are refused for a while after."""
        log = self.open_log(segment_bytes=1024 * 1024)
        log.append(encode_message_set(payloads(3)))  # buffered
        real_write = os.write
        calls = []

        def full_disk(fd, data):
            calls.append(len(data))
            if len(calls) == 1:
                real_write(fd, bytes(data[:100]))  # a partial write, then the error
                raise OSError(28, "No space left on device")
            return real_write(fd, data)

        self.patch(os, "write", full_disk)
        self.assertRaises(StorageFailed, log.append, encode_message(b"x" * 70_000))
        self.assertEqual(log.end_offset, 0)
        self.assertEqual(os.path.getsize(os.path.join(self.directory, segment_name(0))), 0)
        self.assertRaises(StorageFailed, log.append, encode_message(b"y"))
        log.close()
        self.assertEqual(os.path.getsize(os.path.join(self.directory, segment_name(0))), 0)

    def test_append_acknowledged_is_in_the_file(self) -> None:
        """write_out puts buffered appends in the file, so an appended-ack survives a process crash."""
        log = self.open_log(segment_bytes=1024 * 1024)
        log.append(encode_message_set(payloads(2)))
        log.write_out()
        self.assertEqual(os.path.getsize(os.path.join(self.directory, segment_name(0))), 218)
        self.assertEqual(log.flushed_offset, 0)  # written, not yet fsynced: still invisible

    def test_no_waiters_pile_up_during_a_slow_fsync(self) -> None:
        """Appends past flush_messages during a slow fsync ask for one more flush, not one each."""
        runner = ManualRunner()
        log = self.open_log(runner, flush_messages=1, segment_bytes=1024 * 1024)
        for i in range(1000):
            log.append(encode_message(payloads(1, i)[0]))
        self.assertEqual(len(runner.pending), 1)
        runner.run_one()
        self.clock.advance(0.002)  # the gap after the first fsync's start (flush_min_gap_ms)
        self.assertEqual(len(runner.pending), 1)  # one more fsync covers the 999 appends made meanwhile
        runner.run_one()
        self.assertEqual(runner.pending, [])
        self.assertEqual(log.flushed_offset, 1000 * 109)

    def test_new_segments_make_their_directory_durable(self) -> None:
        """The flush after a segment is created fsyncs its directory too (a file's name is directory data)."""
        synced = []
        log = self.open_log(segment_bytes=1090)
        real_fsync = os.fsync

        def spy(fd):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            return real_fsync(fd)

        self.patch(os, "fsync", spy)
        for i in range(12):
            log.append(encode_message(payloads(1, i)[0]))
        self.successResultOf(log.flush())
        self.assertIn(os.path.abspath(self.directory), synced)
        synced.clear()
        log.append(encode_message(b"z"))
        self.successResultOf(log.flush())
        self.assertNotIn(os.path.abspath(self.directory), synced)  # no new segment: no directory fsync

    def test_roll_flushes_both_segments(self) -> None:
        """A flush after a roll fsyncs the old segment too, and makes data in both visible."""
        log = self.open_log()
        for i in range(15):
            log.append(encode_message(payloads(1, i)[0]))
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(15))

    def test_flush_listener(self) -> None:
        """Flush listeners hear each move of the flushed offset."""
        log = self.open_log()
        seen = []
        listener = lambda log_: seen.append(log_.flushed_offset)  # noqa: E731
        log.add_flush_listener(listener)
        log.append(encode_message(b"a"))
        log.flush()
        log.flush()
        self.assertEqual(seen, [10])
        log.remove_flush_listener(listener)
        log.append(encode_message(b"b"))
        log.flush()
        self.assertEqual(seen, [10])
