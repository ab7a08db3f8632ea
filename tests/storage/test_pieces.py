"""A large set appended a piece at a time (L{Log.append_in_pieces}, L{twlog.storage.pieces}): one piece per
reactor iteration, nothing of it counted until all of it is in, and nothing of it left when it fails."""

from __future__ import annotations

import errno
import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import NotLeader, StorageFailed
from twlog.storage import log as log_module
from twlog.storage.message import encode_message_set
from twlog.storage.segment import segment_name

from ..fakes import ManualRunner, iteration, run_now
from .faultydisk import FaultyDisk
from .support import ENTRY, payloads, read_all
from .test_log import LogTestMixin

#: Bytes per piece in these tests: a 50-entry set (5,450 bytes) takes 6 pieces.
PIECE = 1000
SET = encode_message_set(payloads(50))


class PiecesMixin(LogTestMixin):
    def open_pieced(self, runner=None, **overrides):
        self.patch(log_module, "PIECE_BYTES", PIECE)
        overrides.setdefault("segment_bytes", 1024 * 1024)
        return self.open_log(runner or run_now, **overrides)

    def file_size(self, base: int = 0) -> int:
        return os.path.getsize(os.path.join(self.directory, segment_name(base)))

    def finish(self, log) -> int:
        """Run the reactor iterations until the set is in; how many it took."""
        turns = 0
        while log.pieces.busy:
            iteration(self.clock)
            turns += 1
        return turns


class AppendInPiecesTests(PiecesMixin, SynchronousTestCase):
    def test_one_piece_per_iteration_counted_once_whole(self) -> None:
        """The first piece is written at once and one more per reactor iteration; the log's end, the
        offsets answered and what a flush covers move only once the last piece is in."""
        log = self.open_pieced()
        log.append(encode_message_set(payloads(2)))
        done = log.append_in_pieces(SET, 50)
        self.assertNoResult(done)
        self.assertEqual((log.end_offset, self.file_size()), (2 * ENTRY, 2 * ENTRY + PIECE))
        self.assertEqual(self.finish(log), 5)  # 6 pieces: one at once, five later
        self.assertEqual(self.successResultOf(done), (2 * ENTRY, 52 * ENTRY, 50))
        self.assertEqual(log.pieces.pieces, 6)
        self.assertEqual((log.end_offset, self.file_size()), (52 * ENTRY, 52 * ENTRY))
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(2) + payloads(50))
        self.assertEqual(self.successResultOf(log.boundaries([2 * ENTRY + 5000])), [48 * ENTRY])

    def test_a_flush_meanwhile_covers_none_of_it(self) -> None:
        """A flush that runs between two pieces stops where the log ended before the set: readers see none of
        it until it is whole and flushed."""
        runner = ManualRunner()
        log = self.open_pieced(runner)
        log.append(encode_message_set(payloads(2)))
        done = log.append_in_pieces(SET, 50)
        iteration(self.clock)
        flushed = log.flush()
        runner.run_all()
        self.assertEqual(self.successResultOf(flushed), 2 * ENTRY)
        self.assertEqual(read_all(log), payloads(2))
        self.finish(log)
        self.successResultOf(done)
        later = log.flush()
        runner.run_all()
        self.assertEqual(self.successResultOf(later), 52 * ENTRY)

    def test_appends_wait_their_turn_in_order(self) -> None:
        """Nothing else is appended while a set is written in pieces; those waiting for their turn are told
        in the order they asked, and what they append lands after the set."""
        log = self.open_pieced()
        done = log.append_in_pieces(SET, 50)
        self.assertRaises(RuntimeError, log.append, encode_message_set(payloads(1)))
        order: list[str] = []
        log.pieces.turn().addCallback(lambda _: order.append("first"))
        log.pieces.turn().addCallback(lambda _: order.append("second"))
        self.assertEqual(order, [])
        self.finish(log)
        self.successResultOf(done)
        self.assertEqual(order, ["first", "second"])
        self.assertEqual(log.append(encode_message_set(payloads(1, 50))), (50 * ENTRY, 51 * ENTRY, 1))
        self.successResultOf(log.pieces.turn())

    def test_rolls_before_the_first_piece(self) -> None:
        """A set that does not fit in the active segment goes whole into a new one."""
        log = self.open_pieced(segment_bytes=5600)
        log.append(encode_message_set(payloads(2)))
        done = log.append_in_pieces(SET, 50)
        self.finish(log)
        self.assertEqual(self.successResultOf(done), (2 * ENTRY, 52 * ENTRY, 50))
        self.assertEqual([s.base_offset for s in log.segments], [0, 2 * ENTRY])
        self.assertEqual(self.file_size(2 * ENTRY), 50 * ENTRY)


class FailedPieceTests(PiecesMixin, SynchronousTestCase):
    def test_a_failed_piece_leaves_nothing_of_the_set(self) -> None:
        """The disk fills up after the first pieces: StorageFailed, the file cut back to where the set began,
        the partition suspended (storage_retry_s) as after any failed write, and those waiting are told."""
        log = self.open_pieced(storage_retry_s=10)
        disk = FaultyDisk(self, self.directory)
        log.append(encode_message_set(payloads(2)))
        done = log.append_in_pieces(SET, 50)
        waiting = log.pieces.turn()
        iteration(self.clock)
        self.assertEqual(self.file_size(), 2 * ENTRY + 2 * PIECE)
        disk.write_error = errno.ENOSPC
        iteration(self.clock)
        self.assertIn("No space left on device", str(self.failureResultOf(done, StorageFailed).value))
        self.successResultOf(waiting)
        self.assertFalse(log.pieces.busy)
        self.assertEqual((log.end_offset, self.file_size()), (2 * ENTRY, 2 * ENTRY))
        self.assertIsNotNone(log.suspended)
        disk.heal()
        self.clock.advance(10)
        self.assertEqual(log.append(encode_message_set(payloads(1, 2))), (2 * ENTRY, 3 * ENTRY, 1))
        self.successResultOf(log.flush())
        self.assertEqual(read_all(log), payloads(3))

    def test_closed_meanwhile(self) -> None:
        """The log closes (broker stopping, topic deleted) between pieces: StorageFailed, and the file holds
        nothing of the set."""
        log = self.open_pieced()
        log.append(encode_message_set(payloads(2)))
        self.successResultOf(log.flush())
        done = log.append_in_pieces(SET, 50)
        iteration(self.clock)
        log.close()
        self.assertIn("closed while a set was being written", str(self.failureResultOf(done, StorageFailed).value))
        self.assertEqual(self.file_size(), 2 * ENTRY)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_log_failed_meanwhile(self) -> None:
        """The log fails between pieces (a failed fsync): the set stops, cut back, with the log's error."""
        runner = ManualRunner()
        log = self.open_pieced(runner)
        log.append(encode_message_set(payloads(2)))
        flushed = log.flush()
        done = log.append_in_pieces(SET, 50)
        runner.fail_one(OSError(errno.EIO, "Input/output error"))
        self.failureResultOf(flushed)
        iteration(self.clock)
        self.failureResultOf(done, StorageFailed)
        self.assertEqual((log.end_offset, self.file_size()), (2 * ENTRY, 2 * ENTRY))


class FollowingMeanwhileTests(PiecesMixin, SynchronousTestCase):
    """The broker stops leading the partition while a produced set is written in pieces: the log follows its
    leader (a truncation, the leader's bytes), the set stops with NotLeader, nothing of it written."""

    def test_truncated_meanwhile(self) -> None:
        log = self.open_pieced()
        log.append(encode_message_set(payloads(3)))
        self.successResultOf(log.flush())
        done = log.append_in_pieces(SET, 50)
        iteration(self.clock)
        self.assertEqual(self.successResultOf(log.truncate_to(2 * ENTRY)), 2 * ENTRY)
        self.failureResultOf(done, NotLeader)
        self.assertFalse(log.pieces.busy)
        self.assertEqual((log.end_offset, self.file_size()), (2 * ENTRY, 2 * ENTRY))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_leaders_bytes_meanwhile(self) -> None:
        log = self.open_pieced()
        log.append(encode_message_set(payloads(2)))
        done = log.append_in_pieces(SET, 50)
        leaders = encode_message_set(payloads(1, 90))
        self.assertEqual(log.append_replica(leaders, 2 * ENTRY, leader_segment_base=0), (2 * ENTRY, 3 * ENTRY, 1))
        self.failureResultOf(done, NotLeader)
        self.successResultOf(log.flush())
        self.assertEqual(self.file_size(), 3 * ENTRY)
        self.assertEqual(read_all(log), payloads(2) + payloads(1, 90))

    def test_segment_cut_under_it_is_not_a_failing_disk(self) -> None:
        """A segment cut under the set by anything else stops it with StorageFailed, the log not suspended."""
        log = self.open_pieced(storage_retry_s=10)
        log.append(encode_message_set(payloads(2)))
        done = log.append_in_pieces(SET, 50)
        log.segments[-1].cut(ENTRY)
        iteration(self.clock)
        self.failureResultOf(done, StorageFailed)
        self.assertIsNone(log.suspended)
        self.assertEqual(self.file_size(), ENTRY)
