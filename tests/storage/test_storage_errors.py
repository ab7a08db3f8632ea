"""A partition's storage errors are typed and true (issue 21, findings 4-6), through a fake filesystem layer:

  - a failed roll (ENOSPC for inodes, EDQUOT, EROFS, EIO) is StorageFailed, in one log line without a
    traceback, and the log is not failed for good;
  - a failed write drops what it was writing: nothing said "not written" ever reaches the file, not even
    at close, so nothing reappears after a restart;
  - a failed fsync answers OutcomeUnknown for what is in the file, StorageFailed for what was not;
  - after a failed write or roll the partition refuses appends for storage_retry_s without touching the
    disk, then tries again, and takes writes once the disk has room.
"""

from __future__ import annotations

import errno
import os

from twisted.internet.task import Clock
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.storage.test_log import LogTestMixin
from twlog.config import LogConfig
from twlog.errors import OutcomeUnknown, StorageFailed
from twlog.storage.log import Log
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set
from twlog.storage.segment import segment_name

from ..fakes import ManualRunner, run_now
from .faultydisk import ROLL_ERRORS, FaultyDisk
from .support import ENTRY, payloads, read_all


class StorageErrorMixin(LogTestMixin):
    def open_faulty(self, runner=None, **overrides):
        """A log (segments of 10 entries, storage_retry_s=10) on a FaultyDisk, and the disk."""
        overrides.setdefault("storage_retry_s", 10)
        log = self.open_log(runner or ManualRunner(), **overrides)
        return log, FaultyDisk(self, self.directory)

    def capture_log(self) -> list[dict]:
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        return events

    def reopened(self) -> list[bytes]:
        """Every payload of the log's directory, opened again (as after a restart) and flushed."""
        log = Log.open(self.directory, LogConfig(self.directory, segment_bytes=1090), Clock(), run_now)
        self.addCleanup(log.close)
        return read_all(log, max_bytes=1024 * 1024)

    def file_size(self, base: int = 0) -> int:
        return os.path.getsize(os.path.join(self.directory, segment_name(base)))


class FailedRollTests(StorageErrorMixin, SynchronousTestCase):
    def test_failed_roll_is_storage_failed(self) -> None:
        """A new segment that cannot be created, for each cause: StorageFailed naming it, one warning without a
        traceback, nothing written, the log not failed for good (suspended)."""
        for code in ROLL_ERRORS:
            events = self.capture_log()
            log, disk = self.open_faulty()
            log.append(encode_message_set(payloads(10)))  # 1090 bytes: the segment is full
            disk.create_error = code
            e = self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1, 10)))
            self.assertIn(os.strerror(code), str(e))
            self.assertIn("nothing of this set was written", str(e))
            self.assertIsNone(log.failed)
            self.assertIsNotNone(log.suspended)
            self.assertEqual((log.end_offset, len(log.segments)), (10 * ENTRY, 1))
            warnings = [ev for ev in events if ev.get("log_level") in (LogLevel.warn, LogLevel.error,
                                                                      LogLevel.critical)]
            self.assertEqual(len(warnings), 1, code)
            self.assertNotIn("log_failure", warnings[0])
            self.assertIn(os.strerror(code), formatEvent(warnings[0]))
            self.assertEqual(self.flushLoggedErrors(), [])
            globalLogPublisher.removeObserver(events.append)

    def test_write_of_the_buffered_tail_fails(self) -> None:
        """The roll's write of the old segment's buffered tail fails: StorageFailed (no OSError escapes); the
        tail is dropped, whoever waited to flush it is told it was not written, what was in the file is
        fsynced as usual, and the dropped tail never reaches the file, not at close, not after a reopen."""
        runner = ManualRunner()
        log, disk = self.open_faulty(runner)
        log.append(encode_message_set(payloads(5)))
        in_file = log.flush()  # written out now, fsync in flight
        log.append(encode_message_set(payloads(4, 5)))  # buffered
        buffered = log.flush()  # waits for the next fsync
        disk.write_error = errno.ENOSPC
        e = self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(2, 9)))  # needs a roll
        self.assertIn("No space left on device", str(e))
        self.assertIn("nothing of this set was written", str(self.failureResultOf(buffered, StorageFailed).value))
        runner.run_all()
        self.assertEqual(self.successResultOf(in_file), 5 * ENTRY)
        self.assertEqual((log.end_offset, self.file_size()), (5 * ENTRY, 5 * ENTRY))
        disk.heal()
        log.close()
        self.assertEqual(self.file_size(), 5 * ENTRY)
        self.assertEqual(self.reopened(), payloads(5))


class FailedWriteTests(StorageErrorMixin, SynchronousTestCase):
    def test_enospc_during_a_flush_is_storage_failed_and_never_reappears(self) -> None:
        """A flush whose write fails (disk full) fails its waiter with StorageFailed: the set is dropped, and
        is neither in the file at close nor back after a restart."""
        log, disk = self.open_faulty(segment_bytes=1024 * 1024)
        log.append(encode_message_set(payloads(3)))
        disk.write_error = errno.ENOSPC
        self.failureResultOf(log.flush(), StorageFailed)
        disk.heal()
        log.close()
        self.assertEqual(self.file_size(), 0)
        self.assertEqual(self.reopened(), [])

    def test_a_flush_started_by_the_append_cannot_write_it(self) -> None:
        """An append whose own flush (flush_messages reached) cannot write it is refused, not answered with
        offsets of a set that was dropped."""
        log, disk = self.open_faulty(flush_messages=1, segment_bytes=1024 * 1024)
        disk.write_error = errno.ENOSPC
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.assertEqual(log.end_offset, 0)

    def test_a_write_that_cannot_be_cut_back_is_unknown(self) -> None:
        """A short write whose cut-back fails too leaves part of the set in the file: OutcomeUnknown, and the
        log is failed until a restart (recovery cuts the partial message)."""
        log, disk = self.open_faulty(segment_bytes=1024 * 1024)
        disk.write_error, disk.truncate_error, disk.partial_bytes = errno.ENOSPC, errno.EIO, 100
        self.assertRaises(OutcomeUnknown, log.append, encode_message_set([b"x" * 70_000]))
        self.assertIsNotNone(log.failed)
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))

    def test_failed_fsync_unknown_for_what_is_in_the_file(self) -> None:
        """A failed fsync: whoever waited for sets in the file gets OutcomeUnknown (they may survive a
        restart), whoever waited for sets still in the buffer gets StorageFailed, and the buffer is dropped."""
        runner = ManualRunner()
        log, _ = self.open_faulty(runner, segment_bytes=1024 * 1024)
        log.append(encode_message_set(payloads(2)))
        in_file = log.flush()
        log.append(encode_message_set(payloads(1, 2)))
        buffered = log.flush()
        runner.fail_one(OSError(errno.EIO, "Input/output error"))
        self.failureResultOf(in_file, OutcomeUnknown)
        self.failureResultOf(buffered, StorageFailed)
        log.close()
        self.assertEqual(self.file_size(), 2 * ENTRY)


class RetryTests(StorageErrorMixin, SynchronousTestCase):
    def test_refused_without_touching_the_disk_until_the_retry(self) -> None:
        """After a failed roll, appends are refused for storage_retry_s without trying the disk; then the next
        one tries it again (still full: refused, and another wait)."""
        log, disk = self.open_faulty()
        log.append(encode_message_set(payloads(10)))
        disk.create_error = errno.ENOSPC
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.clock.advance(9.9)
        e = self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.assertIn("refused for 0.1 s more", str(e))
        self.assertEqual(disk.creates_refused, 1)
        self.clock.advance(0.1)
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.assertEqual(disk.creates_refused, 2)
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.assertEqual(disk.creates_refused, 2)

    def test_writes_accepted_once_space_is_back(self) -> None:
        """Once the disk has room again, the partition takes writes after storage_retry_s, without a
        restart, and says so once."""
        events = self.capture_log()
        log, disk = self.open_faulty(segment_bytes=1024 * 1024)
        disk.write_error = errno.ENOSPC
        self.assertRaises(StorageFailed, log.append, encode_message_set([b"x" * 70_000]))
        disk.heal()
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.clock.advance(10)
        log.append(encode_message_set(payloads(2)))
        log.write_out()
        self.assertEqual(self.file_size(), 2 * ENTRY)
        flushed = log.flush()
        log._flusher._run_in_thread.run_all()
        self.assertEqual(self.successResultOf(flushed), 2 * ENTRY)
        self.assertEqual(read_all(log), payloads(2))
        self.assertEqual([ev["log_format"] for ev in events if "succeed again" in ev.get("log_format", "")],
                         ["{directory}: writes succeed again"])

    def test_retry_zero_tries_every_append(self) -> None:
        """storage_retry_s=0: every append tries the disk."""
        log, disk = self.open_faulty(storage_retry_s=0)
        log.append(encode_message_set(payloads(10)))
        disk.create_error = errno.EDQUOT
        for _ in range(3):
            self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))
        self.assertEqual(disk.creates_refused, 3)
        disk.heal()
        self.assertEqual(log.append(encode_message_set(payloads(1, 10))).offset, 10 * ENTRY)


class NewPartitionTests(SynchronousTestCase):
    def test_partition_that_cannot_be_created(self) -> None:
        """A first write to a partition whose first segment cannot be created (no inodes left): StorageFailed
        in one line, not an OSError (Unknown, with a traceback); the disk is not tried again for that
        partition before storage_retry_s, and the partition is created once it can be."""
        clock = Clock()
        log_dir = self.mktemp()
        logs = LogManager(LogConfig(log_dir, storage_retry_s=5), clock, run_now)
        logs.start()
        self.addCleanup(logs.close)
        disk = FaultyDisk(self, os.path.join(log_dir, "t-0"))
        disk.create_error = errno.ENOSPC
        e = self.assertRaises(StorageFailed, logs.get_or_create_log, "t", 0)
        self.assertIn("No space left on device", str(e))
        self.assertRaises(StorageFailed, logs.get_or_create_log, "t", 0)
        self.assertEqual(disk.creates_refused, 1)
        self.assertIsNone(logs.get_log("t", 0))
        disk.heal()
        clock.advance(5)
        self.assertEqual(logs.get_or_create_log("t", 0).append(encode_message_set(payloads(1))).offset, 0)
        self.assertEqual(self.flushLoggedErrors(), [])
