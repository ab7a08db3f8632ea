"""Tests for twlog.storage.replica: truncation, the follower's verbatim append and the high watermark of a Log."""

from __future__ import annotations

import gc
import os

from twisted.internet.defer import fail
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import LogConfig
from twlog.errors import (
    InvalidMessage,
    LogTruncated,
    MessageSizeTooLarge,
    OffsetMismatch,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    StorageFailed,
    TooManyOpenFiles,
)
from twlog.storage import checkpoints, replica
from twlog.storage.epochs import LEADER_EPOCH_CHECKPOINT
from twlog.storage.log import Log
from twlog.storage.message import encode_message, encode_message_set
from twlog.storage.segment import segment_name

from ..fakes import ManualRunner, run_now
from .support import ENTRY, payloads, read_all

#: Ten 109-byte entries fill a segment.
SEGMENT = 10 * ENTRY


class ReplicaTestMixin:
    def open_log(self, runner=run_now, directory: str | None = None, recover: bool = True, **overrides) -> Log:
        settings = dict(segment_bytes=SEGMENT, flush_messages=1_000_000, flush_interval_ms=1000,
                        flush_policy="timer")
        settings.update(overrides)
        directory = directory or self.mktemp()
        log = Log.open(directory, LogConfig(directory, **settings), Clock(), runner, recover=recover)
        self.addCleanup(log.close)
        return log

    def files(self, log: Log) -> list[str]:
        return sorted(os.listdir(log.directory))

    def contents(self, log: Log) -> dict[str, bytes]:
        """Every segment file's bytes, by name."""
        out = {}
        for name in self.files(log):
            if name.endswith(".log"):
                with open(os.path.join(log.directory, name), "rb") as f:
                    out[name] = f.read()
        return out


class TruncateTests(ReplicaTestMixin, SynchronousTestCase):
    def test_truncate_inside_the_active_segment(self) -> None:
        """The log ends at the offset: later appends land there, the file is cut, readers see the rest."""
        log = self.open_log()
        for i in range(5):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.flush())
        d = log.truncate_to(3 * ENTRY)
        self.assertEqual(self.successResultOf(d), 3 * ENTRY)
        self.assertEqual((log.end_offset, log.flushed_offset), (3 * ENTRY, 3 * ENTRY))
        self.assertEqual(os.path.getsize(os.path.join(log.directory, segment_name(0))), 3 * ENTRY)
        self.assertEqual(read_all(log), payloads(3))
        self.assertEqual(log.append(encode_message_set(payloads(1, 7))).offset, 3 * ENTRY)
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(3) + payloads(1, 7))

    def test_truncate_across_segments(self) -> None:
        """Later segments go whole; the one holding the offset is cut and becomes the active one again."""
        log = self.open_log()
        for i in range(25):  # segments at 0, 1090 and 2180 (5 entries)
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.flush())
        self.assertEqual(len(log.segments), 3)
        self.successResultOf(log.truncate_to(13 * ENTRY))
        self.assertEqual(self.files(log), [segment_name(0), segment_name(SEGMENT)])
        self.assertEqual([s.base_offset for s in log.segments], [0, SEGMENT])
        self.assertEqual(log.end_offset, 13 * ENTRY)
        self.assertEqual(read_all(log), payloads(13))
        for i in range(10):  # the cut segment fills up again and rolls where it did before
            log.append(encode_message_set(payloads(1, 100 + i)))
        self.successResultOf(log.flush())
        self.assertEqual([s.base_offset for s in log.segments], [0, SEGMENT, 2 * SEGMENT])
        self.assertEqual(read_all(log), payloads(13) + payloads(10, 100))

    def test_truncate_to_a_segment_base_keeps_it_empty(self) -> None:
        log = self.open_log()
        for i in range(15):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.truncate_to(SEGMENT))
        self.assertEqual([(s.base_offset, s.size) for s in log.segments], [(0, SEGMENT), (SEGMENT, 0)])
        self.successResultOf(log.truncate_to(0))
        self.assertEqual([(s.base_offset, s.size) for s in log.segments], [(0, 0)])
        self.assertEqual((log.end_offset, log.flushed_offset), (0, 0))

    def test_truncate_unflushed_data_in_the_write_buffer(self) -> None:
        """Sets still in the write buffer are cut from it; nothing of them reaches the file later."""
        log = self.open_log()
        log.append(encode_message_set(payloads(2)))
        self.successResultOf(log.flush())
        log.append(encode_message_set(payloads(3, 2)))  # buffered
        self.successResultOf(log.truncate_to(3 * ENTRY))
        self.assertEqual(log.end_offset, 3 * ENTRY)
        log.close()
        self.assertEqual(os.path.getsize(os.path.join(log.directory, segment_name(0))), 3 * ENTRY)

    def test_refused_offsets_change_nothing(self) -> None:
        """Past the end or before the start: OffsetOutOfRange; inside a message: OffsetNotOnBoundary."""
        log = self.open_log()
        for i in range(12):
            log.append(encode_message_set(payloads(1, i)))
        before = self.contents(log)
        self.assertRaises(OffsetOutOfRange, log.truncate_to, 12 * ENTRY + 1)
        self.assertRaises(OffsetOutOfRange, log.truncate_to, -1)
        for offset in [1, ENTRY - 1, ENTRY + 4, SEGMENT + 50]:
            self.assertRaises(OffsetNotOnBoundary, log.truncate_to, offset)
        self.assertEqual(log.end_offset, 12 * ENTRY)
        self.assertEqual(self.contents(log), before)

    def test_boundary_inside_a_large_set(self) -> None:
        """A boundary between the messages of one appended set is found by walking its length fields."""
        log = self.open_log()
        log.append(encode_message_set(payloads(8)))
        self.assertRaises(OffsetNotOnBoundary, log.truncate_to, 5 * ENTRY + 9)
        self.successResultOf(log.truncate_to(5 * ENTRY))
        self.assertEqual(read_all(log), payloads(5))

    def test_truncate_to_the_end_is_nothing(self) -> None:
        log = self.open_log(runner=ManualRunner())
        log.append(encode_message_set(payloads(2)))
        self.assertEqual(self.successResultOf(log.truncate_to(2 * ENTRY)), 2 * ENTRY)
        self.assertEqual(log.end_offset, 2 * ENTRY)

    def test_done_when_the_cut_is_durable(self) -> None:
        """The Deferred fires once the pool has fsynced the cut (and the renamed segments go after that)."""
        runner = ManualRunner()
        log = self.open_log(runner=runner)
        for i in range(15):
            log.append(encode_message_set(payloads(1, i)))
        runner.run_all()
        d = log.truncate_to(3 * ENTRY)
        self.assertNoResult(d)
        self.assertEqual(self.files(log), [segment_name(0), segment_name(SEGMENT) + ".deleted"])
        runner.run_one()  # the fsync of the cut segment and the directory
        self.assertEqual(self.successResultOf(d), 3 * ENTRY)
        runner.run_all()  # the unlink
        self.assertEqual(self.files(log), [segment_name(0)])

    def test_fsync_in_flight_never_shows_past_the_end(self) -> None:
        """An fsync started before a truncation covers no more than the cut when it returns: data appended
        after the cut is not called flushed, and those waiting for a cut set get LogTruncated."""
        runner = ManualRunner()
        log = self.open_log(runner=runner)
        log.append(encode_message_set(payloads(2)))
        log.flush()
        runner.run_all()
        log.append(encode_message_set(payloads(3, 2)))
        waiting = log.flush()  # fsync in flight, covering 5 entries
        self.assertEqual(len(runner.pending), 1)
        truncated = log.truncate_to(3 * ENTRY)
        self.assertEqual(log.flushed_offset, 2 * ENTRY)
        log.append(encode_message_set(payloads(3, 50)))  # end 6 entries, past the old fsync's 5
        runner.run_one()  # the old fsync returns
        self.failureResultOf(waiting, LogTruncated)
        self.assertLessEqual(log.flushed_offset, 3 * ENTRY)
        runner.run_all()
        self.successResultOf(truncated)
        self.successResultOf(log.flush())
        self.assertEqual(log.flushed_offset, 6 * ENTRY)
        self.assertEqual(read_all(log), payloads(3) + payloads(3, 50))

    def test_fsync_in_flight_put_off_after_a_cut(self) -> None:
        """An fsync in flight that is put off (out of descriptors) after a truncation tells those whose sets
        were cut, instead of keeping them waiting for a later flush that would cover other bytes there."""
        runner = ManualRunner()
        log = self.open_log(runner=runner)
        log.append(encode_message_set(payloads(1)))
        log.flush()
        runner.run_one()
        log.append(encode_message_set(payloads(1, 1)))
        in_flight = log.flush()
        log.truncate_to(ENTRY)
        runner.fail_one(TooManyOpenFiles("out of descriptors"))
        self.failureResultOf(in_flight, LogTruncated)
        log.append(encode_message_set(payloads(3, 9)))  # bytes past the cut again
        self.assertEqual(log.flushed_offset, ENTRY)

    def test_waiting_flush_of_a_cut_set_fails(self) -> None:
        """A flush waited for (queued behind the one in flight) whose set is cut gets LogTruncated."""
        runner = ManualRunner()
        log = self.open_log(runner=runner)
        log.append(encode_message_set(payloads(1)))
        first = log.flush()
        log.append(encode_message_set(payloads(1, 1)))
        second = log.flush()  # queued: the first fsync is in flight
        log.truncate_to(ENTRY)
        self.failureResultOf(second, LogTruncated)
        runner.run_all()
        self.assertEqual(self.successResultOf(first), ENTRY)

    def test_listeners_high_watermark_and_epochs_follow(self) -> None:
        """Flush listeners hear the new end, the high watermark comes down to it, and the leader epochs that
        began at or after it go (file too)."""
        log = self.open_log()
        self.successResultOf(log.epochs.assign(1, 0))
        log.append(encode_message_set(payloads(4)))
        self.successResultOf(log.epochs.assign(2, 4 * ENTRY))
        log.append(encode_message_set(payloads(4, 4)))
        self.successResultOf(log.flush())
        log.high_watermark = 6 * ENTRY
        seen = []
        log.add_flush_listener(lambda log_: seen.append((log_.end_offset, log_.visible_end)))
        self.successResultOf(log.truncate_to(2 * ENTRY))
        self.assertEqual(seen, [(2 * ENTRY, 2 * ENTRY)])
        self.assertEqual(log.high_watermark, 2 * ENTRY)
        self.assertEqual(log.epochs.entries, [(1, 0)])
        with open(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)) as f:
            self.assertEqual(f.read(), "0\n1\n1 0\n")

    def test_failed_log_refuses(self) -> None:
        log = self.open_log()
        log.append(encode_message_set(payloads(2)))
        log._flusher.fail(OSError(5, "Input/output error"))
        self.assertRaises(StorageFailed, log.truncate_to, 0)

    def test_failed_cut_fails_the_log(self) -> None:
        """A rename that fails leaves the files and the list matching, and fails the log (a restart recovers)."""
        log = self.open_log()
        for i in range(12):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.flush())

        def rename(src: str, dst: str) -> None:
            raise OSError(30, "Read-only file system")

        self.patch(replica.os, "rename", rename)
        e = self.assertRaises(StorageFailed, log.truncate_to, 0)
        self.assertIn("[Errno 30] Read-only file system", str(e))
        self.assertIn("truncating", str(e))
        self.assertIsNotNone(log.failed)
        self.assertEqual(log.end_offset, 12 * ENTRY)

    def test_leftover_deleted_files_go_at_open(self) -> None:
        """A crash after the renames leaves `.deleted` files: the next open removes them and opens the rest."""
        runner = ManualRunner()
        log = self.open_log(runner=runner)
        for i in range(15):
            log.append(encode_message_set(payloads(1, i)))
        runner.run_all()
        log.truncate_to(2 * ENTRY)  # renamed, not yet unlinked
        log.close()
        self.assertIn(segment_name(SEGMENT) + ".deleted", self.files(log))
        again = self.open_log(directory=log.directory)
        self.assertEqual(self.files(again), [segment_name(0)])
        self.assertEqual(again.end_offset, 2 * ENTRY)
        self.assertEqual(read_all(again), payloads(2))

    def test_crash_before_the_cut_keeps_a_contiguous_log(self) -> None:
        """The later segments are renamed newest first: a crash between renames leaves a contiguous log."""
        log = self.open_log()
        for i in range(35):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.flush())
        renamed = []
        real_rename = os.rename

        def rename_once(src: str, dst: str) -> None:
            if renamed:
                raise OSError(5, "Input/output error")  # the "crash" after the first rename
            renamed.append(src)
            real_rename(src, dst)

        self.patch(replica.os, "rename", rename_once)
        self.assertRaises(StorageFailed, log.truncate_to, 0)
        self.assertEqual(renamed, [os.path.join(log.directory, segment_name(3 * SEGMENT))])
        log.close()
        again = self.open_log(directory=log.directory)
        self.assertEqual(again.end_offset, 3 * SEGMENT)
        self.assertEqual(read_all(again), payloads(30))

    def test_boundary_in_a_segment_not_indexed_yet(self) -> None:
        """In a segment found on disk (not indexed), far from any index entry, the message's CRC decides."""
        log = self.open_log(segment_bytes=100 * ENTRY)
        log.append(encode_message_set(payloads(60)))
        log.close()
        self.patch(replica, "WALK_LIMIT_BYTES", 10 * ENTRY)
        again = self.open_log(directory=log.directory, segment_bytes=100 * ENTRY, recover=False)  # a clean stop
        self.assertFalse(again.segments[0].index.ready)
        self.assertRaises(OffsetNotOnBoundary, again.truncate_to, 40 * ENTRY + 3)
        self.successResultOf(again.truncate_to(40 * ENTRY))
        self.assertEqual(read_all(again), payloads(40))
        self.assertRaises(OffsetNotOnBoundary, again.truncate_to, 5 * ENTRY + 3)  # near the start: walked
        self.successResultOf(again.truncate_to(5 * ENTRY))
        self.assertEqual(read_all(again), payloads(5))


class AppendReplicaTests(ReplicaTestMixin, SynchronousTestCase):
    def replicate(self, leader: Log, follower: Log, max_bytes: int = 3 * ENTRY) -> None:
        """Copy the leader's flushed bytes to the follower as a follower's fetches would: one segment at a
        time, cut at a message boundary, with the leader's segment base."""
        offset = follower.end_offset
        while offset < leader.flushed_offset:
            region = leader.read(offset, max_bytes)
            data = region.read()
            whole = replica.scan(data).valid_bytes
            result = follower.append_replica(data[:whole], offset, leader_segment_base=region.segment.base_offset)
            self.assertEqual(result.offset, offset)
            offset = result.next_offset

    def test_replicas_are_byte_identical(self) -> None:
        """Appending the leader's bytes at the leader's offsets gives the same offsets and, with the leader's
        segment bases, the same segment files, though the fetches group the sets differently."""
        leader = self.open_log()
        for n in [1, 3, 2, 4, 1, 1, 5, 2, 3, 1]:  # sets of several sizes: rolls fall between sets, short of full
            leader.append(encode_message_set(payloads(n, leader.end_offset)))
        self.successResultOf(leader.flush())
        self.assertIn(9 * ENTRY, [s.size for s in leader.segments])
        for max_bytes in [ENTRY, 3 * ENTRY, SEGMENT]:
            follower = self.open_log()
            self.replicate(leader, follower, max_bytes)
            self.successResultOf(follower.flush())
            self.assertEqual(follower.end_offset, leader.end_offset)
            self.assertEqual(self.contents(follower), self.contents(leader))
        self.assertGreater(len(self.contents(leader)), 2)

    def test_an_unknown_leader_segment_base_never_rolls(self) -> None:
        """Without the leader's segment base (-1) the set goes to the active segment: this log's own
        segment_bytes never rolls a follower; the offsets still match the leader's."""
        leader, follower = self.open_log(), self.open_log()
        for n in [3, 4, 2, 5]:
            leader.append(encode_message_set(payloads(n)))
        self.successResultOf(leader.flush())
        data = b"".join(leader.read(s.base_offset, SEGMENT).read() for s in leader.segments)
        result = follower.append_replica(data[: 7 * ENTRY], 0, leader_segment_base=-1)
        self.assertEqual(result, (0, 7 * ENTRY, 7))
        result = follower.append_replica(data[7 * ENTRY :], 7 * ENTRY, leader_segment_base=-1)
        self.assertEqual(result.next_offset, leader.end_offset)
        self.successResultOf(follower.flush())
        self.assertEqual(read_all(follower), read_all(leader))
        self.assertEqual([s.size for s in follower.segments], [14 * ENTRY])  # over SEGMENT, not rolled
        self.assertEqual(len(leader.segments), 2)

    def test_offset_mismatch_is_refused(self) -> None:
        follower = self.open_log()
        follower.append_replica(encode_message_set(payloads(2)), 0, leader_segment_base=0)
        e = self.assertRaises(OffsetMismatch, follower.append_replica, encode_message_set(payloads(1)), ENTRY,
                              leader_segment_base=0)
        self.assertEqual((e.expected_offset, e.end_offset), (ENTRY, 2 * ENTRY))
        self.assertIn(str(2 * ENTRY), str(e))
        self.assertEqual(follower.end_offset, 2 * ENTRY)

    def test_partial_or_corrupt_sets_are_refused(self) -> None:
        follower = self.open_log()
        good = encode_message_set(payloads(3))
        bad_crc = bytearray(good)
        bad_crc[-1] ^= 1
        for data in [good[:-1], bytes(bad_crc), good[:5]]:
            self.assertRaises(InvalidMessage, follower.append_replica, data, 0, leader_segment_base=0)
        self.assertEqual(follower.end_offset, 0)
        self.assertEqual(follower.segments[0].size, 0)

    def test_the_leaders_message_size_decides(self) -> None:
        """An entry over this broker's max_message_bytes is taken (the leader took it); over a segment is not."""
        follower = self.open_log(max_message_bytes=50)
        big = encode_message(b"x" * 200)
        self.assertRaises(MessageSizeTooLarge, follower.append, big)
        self.assertEqual(follower.append_replica(big, 0, leader_segment_base=0), (0, len(big), 1))
        self.assertRaises(MessageSizeTooLarge, follower.append_replica, encode_message(b"y" * SEGMENT), len(big),
                          leader_segment_base=0)

    def test_count_given_skips_the_check(self) -> None:
        """A caller that scanned the bytes already (to cut a fetch's partial tail) passes the count."""
        follower = self.open_log()
        result = follower.append_replica(encode_message_set(payloads(2)), 0, count=2, leader_segment_base=0)
        self.assertEqual(result, (0, 2 * ENTRY, 2))

    def test_follower_appends_are_flushed_as_any(self) -> None:
        follower = self.open_log()
        follower.append_replica(encode_message_set(payloads(2)), 0, leader_segment_base=0)
        self.assertEqual(follower.flushed_offset, 0)
        self.successResultOf(follower.flush())
        self.assertEqual(read_all(follower), payloads(2))


class HighWatermarkTests(ReplicaTestMixin, SynchronousTestCase):
    def test_no_high_watermark_shows_the_flushed_end(self) -> None:
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        self.assertEqual((log.high_watermark, log.visible_end), (None, 0))
        self.successResultOf(log.flush())
        self.assertEqual(log.visible_end, 3 * ENTRY)

    def test_visible_end_is_the_lower_of_high_watermark_and_flushed(self) -> None:
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        log.high_watermark = 2 * ENTRY
        self.assertEqual(log.visible_end, 0)  # nothing flushed yet
        self.successResultOf(log.flush())
        self.assertEqual(log.visible_end, 2 * ENTRY)
        log.high_watermark = 3 * ENTRY
        self.assertEqual(log.visible_end, 3 * ENTRY)
        log.append(encode_message_set(payloads(1)))
        log.high_watermark = 4 * ENTRY
        self.assertEqual(log.visible_end, 3 * ENTRY)  # flushed end below it
        log.high_watermark = None
        self.assertEqual(log.visible_end, 3 * ENTRY)

    def test_past_the_end_is_refused(self) -> None:
        log = self.open_log()
        log.append(encode_message_set(payloads(1)))
        self.assertRaises(ValueError, setattr, log, "high_watermark", ENTRY + 1)
        self.assertRaises(ValueError, setattr, log, "high_watermark", -1)
        self.assertIsNone(log.high_watermark)

    def test_listeners_hear_the_visible_end_move(self) -> None:
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        self.successResultOf(log.flush())
        seen = []
        log.add_flush_listener(lambda log_: seen.append(log_.visible_end))
        log.high_watermark = ENTRY
        log.high_watermark = ENTRY  # no move: nothing told
        log.high_watermark = 3 * ENTRY
        self.assertEqual(seen, [ENTRY, 3 * ENTRY])


    def test_reads_stop_at_the_visible_end(self) -> None:
        """Readers (Log.read, OFFSETS' latest) see up to the high watermark, not the whole flushed end."""
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        self.successResultOf(log.flush())
        log.high_watermark = ENTRY
        self.assertEqual(log.read(0, 10 * ENTRY).length, ENTRY)
        self.assertEqual(log.read(ENTRY, 10 * ENTRY).length, 0)
        self.assertEqual(log.offsets_before(-1, 1, 0), [ENTRY])

    def test_read_replica_reads_to_the_written_end(self) -> None:
        """A leader's read for its followers goes past the high watermark and the flushed end, to the written
        end, and puts the buffered bytes in the file so that the region can be sent."""
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        log.high_watermark = 0
        region = log.read_replica(0, 10 * ENTRY)
        self.assertEqual((log.flushed_offset, region.length), (0, 3 * ENTRY))
        self.assertEqual(region.read(), encode_message_set(payloads(3)))
        self.assertEqual(log.read_replica(3 * ENTRY, 100).length, 0)
        self.assertRaises(OffsetOutOfRange, log.read_replica, 4 * ENTRY, 100)


class EpochsOfALogTests(ReplicaTestMixin, SynchronousTestCase):
    def test_epochs_recovered_with_the_log(self) -> None:
        log = self.open_log()
        self.successResultOf(log.epochs.assign(1, 0))
        log.append(encode_message_set(payloads(3)))
        self.successResultOf(log.epochs.assign(2, 3 * ENTRY))
        self.successResultOf(log.flush())
        log.close()
        self.assertEqual(self.open_log(directory=log.directory).epochs.entries, [(1, 0), (2, 3 * ENTRY)])

    def test_epochs_past_a_recovered_end_go(self) -> None:
        """Recovery cut the tail where an epoch began: the entry goes (one starting at the end stays)."""
        log = self.open_log()
        log.append(encode_message_set(payloads(3)))
        self.successResultOf(log.flush())
        self.successResultOf(log.epochs.assign(1, 3 * ENTRY))
        log.append(encode_message_set(payloads(2, 3)))
        self.successResultOf(log.epochs.assign(2, 5 * ENTRY))
        self.successResultOf(log.flush())
        log.close()
        path = os.path.join(log.directory, segment_name(0))
        os.truncate(path, 4 * ENTRY + 10)  # a torn tail: recovery cuts it back to 4 entries
        again = self.open_log(directory=log.directory)
        self.assertEqual(again.end_offset, 4 * ENTRY)
        self.assertEqual(again.epochs.entries, [(1, 3 * ENTRY)])

    def test_epoch_file_that_cannot_be_written_at_open(self) -> None:
        """A write of the epochs' file at open that fails is logged by the writer; the open goes on, and no
        unhandled failure is left behind."""
        directory = self.mktemp()
        os.makedirs(directory)
        with open(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), "w") as f:
            f.write("0\n1\n4 500\n")  # past the (empty) log's end

        def runner(function, *args):
            if function is checkpoints.write_atomically:
                return fail(OSError(28, "No space left on device"))
            return run_now(function, *args)

        log = self.open_log(runner=runner, directory=directory)
        self.assertEqual(log.epochs.entries, [])
        gc.collect()  # an unhandled failure would be logged (and fail the test) here

    def test_retention_moves_the_first_epoch(self) -> None:
        log = self.open_log(retention_bytes=2 * SEGMENT)
        self.successResultOf(log.epochs.assign(1, 0))
        for i in range(25):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.flush())
        expired = log.expire_segments(now_ms=0)
        self.assertEqual(len(expired), 1)
        self.assertEqual(log.epochs.entries, [(1, SEGMENT)])


class StartAtTests(ReplicaTestMixin, SynchronousTestCase):
    """start_at: a follower below its leader's log start empties its log and starts again there."""

    def test_empties_the_log_and_starts_at_the_offset(self) -> None:
        log = self.open_log()
        for i in range(25):  # segments at 0, SEGMENT and 2 * SEGMENT
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.flush())
        self.successResultOf(log.epochs.assign(3, 0))
        log.high_watermark = 20 * ENTRY
        start = 7 * SEGMENT
        self.assertEqual(self.successResultOf(log.start_at(start)), start)
        self.assertEqual((log.start_offset, log.end_offset, log.flushed_offset), (start, start, start))
        self.assertEqual(log.high_watermark, start)
        self.assertEqual(log.epochs.entries, [])
        self.assertEqual([f for f in self.files(log) if f.endswith(".log")], [segment_name(start)])
        self.assertFalse([f for f in self.files(log) if f.endswith(replica.DELETED_SUFFIX)])
        with self.assertRaises(OffsetOutOfRange):
            log.read(0, 1000)
        self.assertEqual(log.append(encode_message_set(payloads(1, 50))).offset, start)
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log, start), [])  # the high watermark: until the leader says more
        log.high_watermark = log.end_offset
        self.assertEqual(read_all(log, start), payloads(1, 50))

    def test_reopened_it_starts_there(self) -> None:
        directory = self.mktemp()
        log = self.open_log(directory=directory)
        for i in range(12):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.start_at(5 * SEGMENT))
        log.append(encode_message_set(payloads(2, 60)))
        self.successResultOf(log.flush())
        log.close()
        again = self.open_log(directory=directory)
        self.assertEqual((again.start_offset, again.end_offset), (5 * SEGMENT, 5 * SEGMENT + 2 * ENTRY))
        self.assertEqual(read_all(again, 5 * SEGMENT), payloads(2, 60))

    def test_at_its_own_end_it_only_empties(self) -> None:
        log = self.open_log()
        for i in range(3):
            log.append(encode_message_set(payloads(1, i)))
        self.successResultOf(log.start_at(log.end_offset))
        self.assertEqual((log.start_offset, log.end_offset), (3 * ENTRY, 3 * ENTRY))

    def test_below_the_end_is_refused(self) -> None:
        log = self.open_log()
        log.append(encode_message_set(payloads(2)))
        with self.assertRaises(ValueError):
            log.start_at(ENTRY)
        self.assertEqual(log.end_offset, 2 * ENTRY)
