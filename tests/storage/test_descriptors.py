"""Running out of file descriptors (EMFILE/ENFILE) in storage: a retriable TooManyOpenFiles, never a failed
partition; once descriptors free up, appends and flushes work without a restart."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.storage.test_log import LogTestMixin
from twlog.config import LogConfig
from twlog.errors import OutcomeUnknown, StorageFailed, TooManyOpenFiles
from twlog.storage import flush as flush_module
from twlog.storage.log import Log
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set
from twlog.storage.segment import Segment, out_of_descriptors

from ..fakes import ManualRunner, run_now
from .support import ENTRY, payloads, read_all


class OpenFails:
    """Replaces an open function: the next C{times} calls fail with C{code}, the rest open."""

    def __init__(self, real, times: int, code: int = errno.EMFILE) -> None:
        self.real = real
        self.times = times
        self.code = code
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.times > 0:
            self.times -= 1
            raise OSError(self.code, os.strerror(self.code))
        return self.real(*args, **kwargs)


class DescriptorTests(LogTestMixin, SynchronousTestCase):

    def fail_segment_opens(self, times: int, code: int = errno.EMFILE) -> None:
        real = Segment.open.__func__
        failing = OpenFails(lambda cls, *a, **k: real(cls, *a, **k), times, code)
        self.patch(Segment, "open", classmethod(failing))

    def test_classification(self) -> None:
        self.assertTrue(out_of_descriptors(OSError(errno.EMFILE, "x")))
        self.assertTrue(out_of_descriptors(OSError(errno.ENFILE, "x")))
        self.assertFalse(out_of_descriptors(OSError(errno.ENOSPC, "x")))
        self.assertFalse(out_of_descriptors(ValueError()))
        self.assertTrue(TooManyOpenFiles.retriable)
        self.assertEqual(TooManyOpenFiles.code, 14)

    def test_roll_without_descriptors(self) -> None:
        """A roll that cannot open its segment refuses the append with TooManyOpenFiles; the log is not
        failed, and the same append succeeds once a descriptor is free."""
        log = self.open_log()
        log.append(encode_message_set(payloads(10)))  # 1090 bytes: the segment is full
        for code in (errno.EMFILE, errno.ENFILE):
            self.fail_segment_opens(1, code)
            e = self.assertRaises(TooManyOpenFiles, log.append, encode_message_set(payloads(1, 10)))
            self.assertIn("cannot roll", str(e))
            self.assertIsNone(log.failed)
            self.assertEqual((log.end_offset, len(log.segments)), (10 * ENTRY, 1))
        self.fail_segment_opens(0)
        self.assertEqual(log.append(encode_message_set(payloads(1, 10))), (10 * ENTRY, 11 * ENTRY, 1))
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(11))

    def test_other_open_errors_are_storage_failed(self) -> None:
        """A roll refused for any other reason is StorageFailed, typed (retriable: nothing was written)."""
        log = self.open_log()
        log.append(encode_message_set(payloads(10)))
        self.fail_segment_opens(1, errno.EACCES)
        e = self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1, 10)))
        self.assertIn("Permission denied", str(e))
        self.assertTrue(StorageFailed.retriable)

    def test_opening_a_partition_without_descriptors(self) -> None:
        """A new partition whose first segment cannot be opened: TooManyOpenFiles, and it opens next time."""
        log_dir = self.mktemp()
        logs = LogManager(LogConfig(log_dir), Clock(), run_now)
        logs.start()
        self.addCleanup(logs.close)
        self.fail_segment_opens(1)
        self.assertRaises(TooManyOpenFiles, logs.get_or_create_log, "t", 0)
        self.assertIsNone(logs.get_log("t", 0))
        self.assertEqual(logs.topics(), {})
        self.fail_segment_opens(0)
        log = logs.get_or_create_log("t", 0)
        self.assertEqual(log.append(encode_message_set(payloads(1))).count, 1)

    def test_opening_closes_what_it_opened(self) -> None:
        """Out of descriptors half way through a partition's segments: the ones opened are closed again."""
        log = self.open_log()
        for start in (0, 10, 20):  # three segments
            log.append(encode_message_set(payloads(10, start)))
        log.close()
        opened: list[Segment] = []
        real = Segment.open.__func__

        def open_two(cls, *args, **kwargs):
            if len(opened) == 2:
                raise OSError(errno.EMFILE, "Too many open files")
            opened.append(real(cls, *args, **kwargs))
            return opened[-1]

        self.patch(Segment, "open", classmethod(open_two))
        self.assertRaises(TooManyOpenFiles, Log.open, self.directory, LogConfig(self.directory, segment_bytes=1090),
                          Clock(), run_now)
        self.assertEqual([s.fd for s in opened], [-1, -1])

    def test_directory_fsync_without_descriptors(self) -> None:
        """No descriptor to open the directory for its fsync: nothing was fsynced, the partition is not
        failed, and a later flush makes it all visible.  Whoever waits for the flush keeps waiting (its set
        is appended: TooManyOpenFiles, "nothing written, retry", would be false) and gets the later flush."""
        runner = ManualRunner()
        log = self.open_log(runner)
        log.append(encode_message_set(payloads(10)))
        log.append(encode_message_set(payloads(2, 10)))  # rolled: the directory must be fsynced
        failing = OpenFails(os.open, 1)
        self.patch(flush_module, "os", SimpleNamespace(**{**vars(os), "open": failing}))
        d = log.flush()
        runner.run_one()
        self.assertNoResult(d)
        self.assertIsNone(log.failed)
        self.assertEqual(log.flushed_offset, 0)
        self.clock.advance(1)  # the flush is tried again
        runner.run_all()
        self.assertEqual(log.flushed_offset, 12 * ENTRY)
        self.assertEqual(self.successResultOf(d), 12 * ENTRY)
        self.assertGreater(failing.calls, 1)
        self.assertEqual(read_all(log), payloads(12))

    def test_fsync_errors_still_fail_the_partition(self) -> None:
        runner = ManualRunner()
        log = self.open_log(runner)
        log.append(encode_message_set(payloads(1)))
        d = log.flush()
        runner.fail_one(OSError(errno.EIO, "Input/output error"))
        self.failureResultOf(d, OutcomeUnknown)  # the set is in the file: maybe on disk, maybe not
        self.assertIsNotNone(log.failed)
        self.assertRaises(StorageFailed, log.append, encode_message_set(payloads(1)))

    def test_stop_reports_a_failed_flush(self) -> None:
        """LogManager.stop fires True after a clean stop, False (never failing) when a flush failed."""
        runner = ManualRunner()
        log_dir = self.mktemp()
        logs = LogManager(LogConfig(log_dir), Clock(), runner)
        logs.start()
        logs.get_or_create_log("t", 0).append(encode_message_set(payloads(1)))
        d = logs.stop()
        runner.fail_one(OSError(errno.EIO, "Input/output error"))
        self.assertIs(self.successResultOf(d), False)
        self.assertFalse(logs.running)
        self.assertEqual(len(self.flushLoggedErrors(OutcomeUnknown)), 1)
        self.assertFalse(os.path.exists(os.path.join(log_dir, ".twlog-clean-shutdown")))
        again = LogManager(LogConfig(log_dir), Clock(), run_now)
        again.start()
        self.assertIs(self.successResultOf(again.stop()), True)


#: Run in a child process with a real, lowered RLIMIT_NOFILE: fill the descriptor table, append past a
#: segment's end (a roll), free descriptors, append again.
_REAL_LIMIT = textwrap.dedent("""
    import os, resource, sys
    from twisted.internet.task import Clock
    from twlog.config import LogConfig
    from twlog.errors import TooManyOpenFiles
    from twlog.storage.log import Log
    from twlog.storage.message import encode_message_set
    from twisted.internet.defer import maybeDeferred

    directory = sys.argv[1]
    log = Log.open(directory, LogConfig(directory, segment_bytes=1090), Clock(), maybeDeferred)
    payload = [b"x" * 100] * 10
    log.append(encode_message_set(payload))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    hogs = []
    try:
        while True:
            hogs.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    try:
        log.append(encode_message_set(payload[:1]))
        print("appended without descriptors?")
    except TooManyOpenFiles as e:
        print("refused:", type(e).__name__, e.code, e.retriable, log.failed)
    for fd in hogs[:8]:
        os.close(fd)
    print("appended:", log.append(encode_message_set(payload[:1])))
""")


class RealLimitTests(SynchronousTestCase):
    def test_real_rlimit(self) -> None:
        """With a real RLIMIT_NOFILE and every descriptor taken, a roll is refused retriably; freeing
        descriptors lets the same log append again (no restart)."""
        result = subprocess.run([sys.executable, "-c", _REAL_LIMIT, self.mktemp()], capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines(), [
            "refused: TooManyOpenFiles 14 True None",
            "appended: AppendResult(offset=1090, next_offset=1199, count=1)",
        ], result.stderr)
