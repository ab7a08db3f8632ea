"""Tests for recovery after an unclean shutdown: torn writes, corruption, the clean-shutdown marker."""

from __future__ import annotations

import os
import struct
import tempfile
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import LogConfig
from twlog.errors import CorruptLog, OutcomeUnknown
from twlog.storage import recovery
from twlog.storage.log import Log
from twlog.storage.manager import CLEAN_SHUTDOWN_MARKER, LogDirectoryInUse, LogManager
from twlog.storage.message import (
    CODEC_GZIP,
    encode_message,
    encode_message_set,
)
from twlog.storage.segment import segment_name

from ..fakes import ManualRunner, run_now
from .support import ENTRY, payloads, read_all

payload_lists = st.lists(st.binary(max_size=300), min_size=1, max_size=30)
#: None keeps the module's 8 MiB recovery chunk; a small number makes entries straddle chunks.
chunk_sizes = st.one_of(st.none(), st.integers(min_value=1, max_value=97))
base_offsets = st.sampled_from([0, 1090, 10**12])


def boundaries(items: list[bytes]) -> list[int]:
    """The file positions where the entries of C{encode_message_set(items)} start, and the end."""
    positions = [0]
    for payload in items:
        positions.append(positions[-1] + 4 + 5 + len(payload))
    return positions


def write_segment(directory: str, base_offset: int, data: bytes) -> str:
    """Write a segment file holding C{data}; return its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, segment_name(base_offset))
    with open(path, "wb") as f:
        f.write(data)
    return path


def open_log(directory: str, recover: bool = True, **overrides) -> Log:
    """Open the log in C{directory} with a fake clock and synchronous fsyncs."""
    settings_ = dict(segment_bytes=64 * 1024, flush_messages=1_000_000)
    settings_.update(overrides)
    return Log.open(directory, LogConfig(directory, **settings_), Clock(), run_now, recover=recover)


def file_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def recovery_chunk(chunk: int | None):
    """Run recovery with reads of C{chunk} bytes (None: the default)."""
    if chunk is None:
        return mock.patch.object(recovery, "RECOVERY_CHUNK_BYTES", recovery.RECOVERY_CHUNK_BYTES)
    return mock.patch.object(recovery, "RECOVERY_CHUNK_BYTES", chunk)


class RecoveryMixin:
    def recovered_log(self, data: bytes, base_offset: int = 0, **overrides) -> tuple[Log, str]:
        """Write C{data} as the only segment of a fresh partition and open it with recovery."""
        directory = self.mktemp()
        path = write_segment(directory, base_offset, data)
        log = open_log(directory, **overrides)
        self.addCleanup(log.close)
        return log, path

    def capture_log(self) -> list[dict]:
        """Collect every twisted.logger event emitted until the test ends."""
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        return events


class TornWriteTests(RecoveryMixin, SynchronousTestCase):
    @settings(max_examples=80, deadline=None)
    @given(items=payload_lists, base_offset=base_offsets, chunk=chunk_sizes, data=st.data())
    def test_cut_anywhere_keeps_whole_messages(self, items, base_offset, chunk, data) -> None:
        """A last segment cut at any byte keeps exactly the whole messages before the cut and drops the rest."""
        full = encode_message_set(items)
        cut = data.draw(st.integers(min_value=0, max_value=len(full)), label="cut")
        ends = boundaries(items)
        keep = max(i for i, end in enumerate(ends) if end <= cut)
        kept_bytes = ends[keep]
        with tempfile.TemporaryDirectory() as directory:
            path = write_segment(directory, base_offset, full[:cut])
            with recovery_chunk(chunk):
                log = open_log(directory)
            try:
                self.assertEqual(file_bytes(path), full[:kept_bytes])
                self.assertEqual(log.end_offset, base_offset + kept_bytes)
                self.assertEqual(log.flushed_offset, base_offset + kept_bytes)
                self.assertEqual(read_all(log), items[:keep])
                if cut == kept_bytes:
                    self.assertIsNone(log.last_truncation)
                else:
                    truncation = log.last_truncation
                    self.assertEqual(truncation.path, path)
                    self.assertEqual(truncation.offset, base_offset + kept_bytes)
                    self.assertEqual(truncation.removed_bytes, cut - kept_bytes)
                    self.assertTrue(truncation.reason)
            finally:
                log.close()

    @settings(max_examples=60, deadline=None)
    @given(items=payload_lists, chunk=chunk_sizes, data=st.data())
    def test_flipped_byte_truncates_at_its_message(self, items, chunk, data) -> None:
        """A flipped byte truncates the segment where its message starts; earlier messages stay byte-identical."""
        full = encode_message_set(items)
        position = data.draw(st.integers(min_value=0, max_value=len(full) - 1), label="position")
        flip = data.draw(st.integers(min_value=1, max_value=255), label="xor")
        corrupt = bytearray(full)
        corrupt[position] ^= flip
        ends = boundaries(items)
        index = max(i for i, start in enumerate(ends[:-1]) if start <= position)
        valid = ends[index]
        with tempfile.TemporaryDirectory() as directory:
            path = write_segment(directory, 0, bytes(corrupt))
            with recovery_chunk(chunk):
                log = open_log(directory)
            try:
                self.assertEqual(file_bytes(path), full[:valid])
                self.assertEqual(log.end_offset, valid)
                self.assertEqual(read_all(log), items[:index])
                truncation = log.last_truncation
                self.assertIsNotNone(truncation)
                self.assertEqual((truncation.offset, truncation.removed_bytes), (valid, len(full) - valid))
            finally:
                log.close()

    @settings(max_examples=40, deadline=None)
    @given(items=payload_lists, garbage=st.binary(min_size=1, max_size=200), chunk=chunk_sizes)
    def test_garbage_after_valid_data(self, items, garbage, chunk) -> None:
        """Bytes after the last message that do not form a valid message are cut off, the messages are kept."""
        full = encode_message_set(items)
        # Garbage that happens to start with a whole valid message is data, not garbage.
        with tempfile.TemporaryDirectory() as directory:
            path = write_segment(directory, 0, full + garbage)
            with recovery_chunk(chunk):
                log = open_log(directory)
            try:
                extra = log.end_offset - len(full)
                self.assertGreaterEqual(extra, 0)
                self.assertLess(extra, len(garbage))
                self.assertEqual(file_bytes(path), (full + garbage)[: log.end_offset])
                self.assertEqual(read_all(log)[: len(items)], items)
                self.assertEqual(log.last_truncation.removed_bytes, len(garbage) - extra)
            finally:
                log.close()

    def test_zero_filled_tail(self) -> None:
        """A tail of zero bytes (blocks allocated but never written before the crash) is truncated."""
        full = encode_message_set(payloads(3))
        log, path = self.recovered_log(full + b"\x00" * 4096)
        self.assertEqual(os.path.getsize(path), len(full))
        self.assertEqual(log.last_truncation.offset, len(full))
        self.assertEqual(log.last_truncation.removed_bytes, 4096)
        self.assertIn("below the minimum", log.last_truncation.reason)
        self.assertEqual(read_all(log), payloads(3))

    def test_partial_length_field(self) -> None:
        """One to three bytes of a length field after the last message are truncated as a partial header."""
        full = encode_message_set(payloads(2))
        following = encode_message(b"next")
        for left in (1, 2, 3):
            log, path = self.recovered_log(full + following[:left])
            self.assertEqual(os.path.getsize(path), len(full))
            self.assertEqual(log.last_truncation.offset, len(full))
            self.assertEqual(log.last_truncation.removed_bytes, left)
            self.assertIn("partial", log.last_truncation.reason)
            self.assertEqual(read_all(log), payloads(2))

    def test_partial_header_after_length(self) -> None:
        """A whole length field followed by part of the magic and CRC is truncated."""
        full = encode_message_set(payloads(2))
        following = encode_message(b"next")
        for left in range(4, 9):
            log, path = self.recovered_log(full + following[:left])
            self.assertEqual(os.path.getsize(path), len(full))
            self.assertEqual(log.last_truncation.removed_bytes, left)

    def test_size_beyond_end_of_file(self) -> None:
        """A message whose declared size runs past the end of the file is truncated as partial."""
        full = encode_message_set(payloads(2))
        last = encode_message(b"x" * 50)
        log, path = self.recovered_log(full + last[:-1], base_offset=1090)
        self.assertEqual(os.path.getsize(path), len(full))
        self.assertEqual(log.last_truncation.offset, 1090 + len(full))
        self.assertEqual(log.last_truncation.removed_bytes, len(last) - 1)
        self.assertIn("partial message", log.last_truncation.reason)

    def test_size_larger_than_a_segment(self) -> None:
        """A declared size larger than a segment can hold is truncated, not waited for."""
        full = encode_message_set(payloads(2))
        bogus = struct.pack(">iBI", 10**9, 0, 0) + b"y" * 100
        log, path = self.recovered_log(full + bogus, segment_bytes=4096)
        self.assertEqual(os.path.getsize(path), len(full))
        self.assertEqual(log.last_truncation.removed_bytes, len(bogus))
        self.assertIn("exceeds the maximum", log.last_truncation.reason)

    def test_size_below_minimum(self) -> None:
        """A declared size below 5 (or negative) ends the valid data."""
        full = encode_message_set(payloads(2))
        for size in (-1, 0, 1, 4, -(2**31)):
            bogus = struct.pack(">i", size) + encode_message(b"z" * 20)
            log, path = self.recovered_log(full + bogus)
            self.assertEqual(os.path.getsize(path), len(full))
            self.assertEqual(log.last_truncation.removed_bytes, len(bogus))
            self.assertIn("below the minimum", log.last_truncation.reason)

    def test_unknown_magic(self) -> None:
        """A message with an unknown magic byte ends the valid data."""
        full = encode_message_set(payloads(2))
        bogus = bytearray(encode_message(b"payload"))
        bogus[4] = 7
        log, path = self.recovered_log(full + bytes(bogus) + encode_message(b"after"))
        self.assertEqual(os.path.getsize(path), len(full))
        self.assertIn("unknown magic", log.last_truncation.reason)

    def test_crc_mismatch_in_the_middle(self) -> None:
        """A CRC mismatch in a middle message drops it and every message after it, even valid ones."""
        items = payloads(5)
        data = bytearray(encode_message_set(items))
        data[2 * ENTRY + 20] ^= 0x01
        log, path = self.recovered_log(bytes(data))
        self.assertEqual(os.path.getsize(path), 2 * ENTRY)
        self.assertEqual(log.last_truncation.offset, 2 * ENTRY)
        self.assertEqual(log.last_truncation.removed_bytes, 3 * ENTRY)
        self.assertIn("CRC mismatch", log.last_truncation.reason)
        self.assertEqual(read_all(log), items[:2])

    def test_compressed_wrapper_survives(self) -> None:
        """A valid compressed wrapper is kept whole, and a torn one is cut."""
        wrapper = encode_message_set(payloads(5), CODEC_GZIP)
        log, path = self.recovered_log(wrapper + wrapper[:-3])
        self.assertEqual(os.path.getsize(path), len(wrapper))
        self.assertEqual(read_all(log), payloads(5))

    def test_reason_names_file_position_across_chunks(self) -> None:
        """The truncation reason names the bad message's file position, even past the first read chunk."""
        items = payloads(20)
        data = bytearray(encode_message_set(items))
        data[13 * ENTRY + 30] ^= 0xFF
        directory = self.mktemp()
        write_segment(directory, 0, bytes(data))
        with recovery_chunk(500):
            log = open_log(directory)
        self.addCleanup(log.close)
        self.assertEqual(log.last_truncation.offset, 13 * ENTRY)
        self.assertIn(f"at byte {13 * ENTRY}", log.last_truncation.reason)

    def test_whole_segment_invalid(self) -> None:
        """A last segment with no valid message at all is emptied, and the log ends at its base offset."""
        log, path = self.recovered_log(b"\xff" * 300, base_offset=2180)
        self.assertEqual(os.path.getsize(path), 0)
        self.assertEqual((log.start_offset, log.end_offset, log.flushed_offset), (2180, 2180, 2180))
        self.assertEqual(log.last_truncation.removed_bytes, 300)
        self.assertEqual(read_all(log), [])

    def test_valid_segment_is_untouched(self) -> None:
        """A last segment of whole, valid messages is left as it is and no truncation is reported."""
        full = encode_message_set(payloads(4))
        log, path = self.recovered_log(full)
        self.assertIsNone(log.last_truncation)
        self.assertEqual(file_bytes(path), full)
        self.assertEqual(log.flushed_offset, len(full))

    def test_empty_segment(self) -> None:
        """An empty last segment recovers to itself."""
        log, path = self.recovered_log(b"", base_offset=1090)
        self.assertIsNone(log.last_truncation)
        self.assertEqual((log.start_offset, log.end_offset), (1090, 1090))

    def test_only_the_last_segment_is_cut(self) -> None:
        """Contiguous older segments are kept whole; the torn tail of the last one is cut."""
        directory = self.mktemp()
        first = encode_message_set(payloads(10))
        second = encode_message_set(payloads(10, 10))
        third = encode_message_set(payloads(3, 20))
        write_segment(directory, 0, first)
        write_segment(directory, len(first), second)
        last = write_segment(directory, len(first) + len(second), third[:-50])
        log = open_log(directory, segment_bytes=1090)
        self.addCleanup(log.close)
        self.assertEqual([s.base_offset for s in log.segments], [0, 1090, 2180])
        self.assertEqual(log.last_truncation.path, last)
        self.assertEqual(log.last_truncation.offset, 2180 + 2 * ENTRY)
        self.assertEqual(log.end_offset, 2180 + 2 * ENTRY)
        self.assertEqual(read_all(log), payloads(22))

    def test_without_recovery_nothing_is_cut(self) -> None:
        """Opening with recover=False leaves a torn tail on disk and reports nothing."""
        full = encode_message_set(payloads(2))
        directory = self.mktemp()
        path = write_segment(directory, 0, full + b"\x00\x00")
        log = open_log(directory, recover=False)
        self.addCleanup(log.close)
        self.assertIsNone(log.last_truncation)
        self.assertEqual(os.path.getsize(path), len(full) + 2)


class TruncationReportTests(RecoveryMixin, SynchronousTestCase):
    def test_truncation_record(self) -> None:
        """last_truncation names the file, the logical offset of the cut, the bytes removed and why."""
        full = encode_message_set(payloads(3))
        log, path = self.recovered_log(full + encode_message(b"torn" * 10)[:-7], base_offset=5000)
        self.assertEqual(log.last_truncation.path, path)
        self.assertEqual(log.last_truncation.offset, 5000 + len(full))
        self.assertEqual(log.last_truncation.removed_bytes, 4 + 5 + 40 - 7)
        self.assertIsInstance(log.last_truncation.reason, str)
        self.assertIn("partial", log.last_truncation.reason)

    def test_truncation_is_logged(self) -> None:
        """Recovery logs a warning naming the file, offset, removed bytes and reason."""
        events = self.capture_log()
        full = encode_message_set(payloads(3))
        log, path = self.recovered_log(full + b"\x00\x00\x00", base_offset=1090)
        warnings = [e for e in events if e.get("log_level") == LogLevel.warn and "recovery" in formatEvent(e)]
        self.assertEqual(len(warnings), 1)
        text = formatEvent(warnings[0])
        self.assertIn(path, text)
        self.assertIn(str(1090 + len(full)), text)
        self.assertIn("3 bytes", text)
        self.assertIn(log.last_truncation.reason, text)

    def test_nothing_logged_when_intact(self) -> None:
        """Recovering an intact segment logs no truncation warning."""
        events = self.capture_log()
        self.recovered_log(encode_message_set(payloads(3)))
        self.assertEqual([e for e in events if e.get("log_level") == LogLevel.warn], [])


class AfterRecoveryTests(RecoveryMixin, SynchronousTestCase):
    def test_appends_continue_at_the_cut(self) -> None:
        """After a truncation the next append lands at the cut, and old and new messages read back."""
        full = encode_message_set(payloads(3))
        log, path = self.recovered_log(full + b"\x00\x00\x00\x2a\x00", base_offset=1090)
        result = log.append(encode_message_set(payloads(2, 3)))
        self.assertEqual(result.offset, 1090 + len(full))
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(5))
        self.assertEqual(file_bytes(path), full + encode_message_set(payloads(2, 3)))

    @settings(max_examples=30, deadline=None)
    @given(items=payload_lists, data=st.data())
    def test_appends_after_any_cut(self, items, data) -> None:
        """Whatever the cut, appends after recovery read back after the surviving messages."""
        full = encode_message_set(items)
        cut = data.draw(st.integers(min_value=0, max_value=len(full)), label="cut")
        ends = boundaries(items)
        keep = max(i for i, end in enumerate(ends) if end <= cut)
        with tempfile.TemporaryDirectory() as directory:
            write_segment(directory, 0, full[:cut])
            log = open_log(directory)
            try:
                result = log.append(encode_message_set([b"after-1", b"after-2"]))
                self.assertEqual(result.offset, ends[keep])
                self.successResultOf(log.flush())
                self.assertEqual(read_all(log), items[:keep] + [b"after-1", b"after-2"])
            finally:
                log.close()

    def test_reopen_after_recovery_is_stable(self) -> None:
        """A recovered segment recovers to itself the next time, with nothing more cut."""
        full = encode_message_set(payloads(3))
        directory = self.mktemp()
        write_segment(directory, 0, full + b"\x01\x02")
        open_log(directory).close()
        log = open_log(directory)
        self.addCleanup(log.close)
        self.assertIsNone(log.last_truncation)
        self.assertEqual(log.end_offset, len(full))


class ContiguityTests(RecoveryMixin, SynchronousTestCase):
    def test_gap_between_segments(self) -> None:
        """An older segment that ends before the next one starts raises CorruptLog naming both offsets."""
        directory = self.mktemp()
        write_segment(directory, 0, encode_message_set(payloads(5)))
        write_segment(directory, 1090, encode_message_set(payloads(2)))
        exc = self.assertRaises(CorruptLog, open_log, directory)
        message = str(exc)
        self.assertIn(directory, message)
        self.assertIn(segment_name(0), message)
        self.assertIn(str(5 * ENTRY), message)
        self.assertIn("1090", message)

    def test_overlapping_segments(self) -> None:
        """An older segment that runs past the start of the next one raises CorruptLog."""
        directory = self.mktemp()
        write_segment(directory, 0, encode_message_set(payloads(10)))
        write_segment(directory, 500, encode_message_set(payloads(2)))
        exc = self.assertRaises(CorruptLog, open_log, directory)
        self.assertIn(str(10 * ENTRY), str(exc))
        self.assertIn("500", str(exc))

    def test_torn_older_segment(self) -> None:
        """A torn segment that is not the last is not silently cut: opening raises CorruptLog."""
        directory = self.mktemp()
        first = encode_message_set(payloads(10))
        write_segment(directory, 0, first[:-20])
        write_segment(directory, len(first), encode_message_set(payloads(2)))
        self.assertRaises(CorruptLog, open_log, directory)
        self.assertEqual(os.path.getsize(os.path.join(directory, segment_name(0))), len(first) - 20)

    def test_gap_also_fails_without_recovery(self) -> None:
        """Contiguity is checked on every open, clean or not."""
        directory = self.mktemp()
        write_segment(directory, 0, encode_message_set(payloads(1)))
        write_segment(directory, 1000, encode_message_set(payloads(1)))
        self.assertRaises(CorruptLog, open_log, directory, recover=False)


def crash(manager: LogManager) -> None:
    """Drop a running manager as a killed process would: descriptors close, no marker is written."""
    manager.close()


class ShutdownMarkerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.log_dir = self.mktemp()
        self.marker = os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER)

    def manager(self, runner=run_now, **overrides) -> LogManager:
        """A started manager on the test's directory, closed at the end of the test."""
        manager = LogManager(LogConfig(self.log_dir, **overrides), Clock(), runner)
        manager.start()
        self.addCleanup(manager.close)
        return manager

    def write(self, manager: LogManager, items: list[bytes], topic: str = "t", partition: int = 0) -> str:
        """Append and flush C{items}; return the partition's first segment path."""
        log = manager.get_or_create_log(topic, partition)
        log.append(encode_message_set(items))
        self.successResultOf(log.flush())
        return log.segments[0].path

    def test_first_start_recovers(self) -> None:
        """A directory without the marker (a new one included) counts as an unclean shutdown."""
        self.assertTrue(self.manager().recovered)

    def test_clean_stop_leaves_marker(self) -> None:
        """stop() flushes, closes and writes the clean-shutdown marker."""
        manager = self.manager()
        self.write(manager, payloads(3))
        self.assertIs(self.successResultOf(manager.stop()), True)
        self.assertTrue(os.path.exists(self.marker))

    def test_clean_restart_skips_recovery_and_removes_marker(self) -> None:
        """After a clean stop the next start does not recover, and takes the marker away."""
        first = self.manager()
        path = self.write(first, payloads(3))
        self.successResultOf(first.stop())
        # Bytes that recovery would cut are left alone after a clean stop.
        with open(path, "ab") as f:
            f.write(b"\x00\x00")
        second = self.manager()
        self.assertFalse(second.recovered)
        self.assertFalse(os.path.exists(self.marker))
        log = second.get_log("t", 0)
        self.assertIsNone(log.last_truncation)
        self.assertEqual(os.path.getsize(path), 3 * ENTRY + 2)

    def test_unclean_restart_recovers_torn_write(self) -> None:
        """Without a stop, the next start recovers: a torn tail is cut and reported, the rest reads back."""
        first = self.manager()
        path = self.write(first, payloads(4))
        crash(first)
        os.truncate(path, 3 * ENTRY + 40)
        second = self.manager()
        self.assertTrue(second.recovered)
        log = second.get_log("t", 0)
        self.assertEqual(log.last_truncation.offset, 3 * ENTRY)
        self.assertEqual(log.last_truncation.removed_bytes, 40)
        self.assertEqual(read_all(log), payloads(3))
        self.assertEqual(log.append(encode_message_set(payloads(1, 9))).offset, 3 * ENTRY)

    def test_crash_after_clean_start_recovers(self) -> None:
        """The marker is consumed on start, so a crash after a clean start still recovers next time."""
        self.successResultOf(self.manager().stop())
        second = self.manager()
        self.assertFalse(second.recovered)
        crash(second)
        self.assertTrue(self.manager().recovered)

    def test_every_partition_is_recovered(self) -> None:
        """An unclean start recovers every partition of every topic."""
        first = self.manager(num_partitions=2)
        paths = [self.write(first, payloads(2), topic, p) for topic in ("a", "b") for p in (0, 1)]
        crash(first)
        for path in paths:
            with open(path, "ab") as f:
                f.write(b"\x00")
        second = self.manager(num_partitions=2)
        for topic in ("a", "b"):
            for p in (0, 1):
                self.assertEqual(second.get_log(topic, p).last_truncation.removed_bytes, 1)
        self.assertEqual([os.path.getsize(path) for path in paths], [2 * ENTRY] * 4)

    def test_failed_flush_at_stop_leaves_no_marker(self) -> None:
        """When the flush at shutdown fails, no marker is written, so the next start recovers."""
        runner = ManualRunner()
        manager = self.manager(runner)
        manager.get_or_create_log("t", 0).append(encode_message_set(payloads(2)))
        d = manager.stop()
        runner.fail_one(OSError("disk gone"))
        self.assertIs(self.successResultOf(d), False)
        self.assertFalse(os.path.exists(self.marker))
        self.assertTrue(self.flushLoggedErrors(OutcomeUnknown))  # the sets are in the file, maybe on disk
        self.assertTrue(self.manager().recovered)


class DirectoryLockTests(SynchronousTestCase):
    def manager(self, log_dir: str) -> LogManager:
        return LogManager(LogConfig(log_dir), Clock(), run_now)

    def test_second_manager_is_refused(self) -> None:
        """A second manager on a directory in use raises LogDirectoryInUse and leaves the first working."""
        log_dir = self.mktemp()
        first = self.manager(log_dir)
        first.start()
        self.addCleanup(first.close)
        second = self.manager(log_dir)
        exc = self.assertRaises(LogDirectoryInUse, second.start)
        self.assertIn(log_dir, str(exc))
        log = first.get_or_create_log("t", 0)
        self.assertEqual(log.append(encode_message_set(payloads(1))).offset, 0)

    def test_lock_released_by_stop(self) -> None:
        """Once the first manager stops, another can start on the directory."""
        log_dir = self.mktemp()
        first = self.manager(log_dir)
        first.start()
        self.successResultOf(first.stop())
        second = self.manager(log_dir)
        second.start()
        self.addCleanup(second.close)
        self.assertFalse(second.recovered)

    def test_same_manager_started_twice(self) -> None:
        """Starting a running manager again raises LogDirectoryInUse, and its stop still releases the lock."""
        log_dir = self.mktemp()
        first = self.manager(log_dir)
        first.start()
        self.addCleanup(first.close)
        self.assertRaises(LogDirectoryInUse, first.start)
        self.successResultOf(first.stop())
        second = self.manager(log_dir)
        second.start()
        self.addCleanup(second.close)

    def test_corrupt_partition_fails_start_and_releases_lock(self) -> None:
        """A partition with a gap fails start() with CorruptLog; the lock is released for a retry."""
        log_dir = self.mktemp()
        partition = os.path.join(log_dir, "t-0")
        write_segment(partition, 0, encode_message_set(payloads(1)))
        write_segment(partition, 1000, encode_message_set(payloads(1)))
        broken = self.manager(log_dir)
        self.assertRaises(CorruptLog, broken.start)
        os.unlink(os.path.join(partition, segment_name(1000)))
        fixed = self.manager(log_dir)
        fixed.start()
        self.addCleanup(fixed.close)
        self.assertEqual(read_all(fixed.get_log("t", 0)), payloads(1))
