"""Tests for twlog.storage.replica's segment alignment: a follower's segment files start where the leader's do
and are identical to them byte for byte (filecmp), after leader rolls, truncations and restarts."""

from __future__ import annotations

import filecmp
import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.storage import replica
from twlog.storage.log import Log
from twlog.storage.message import encode_message_set
from twlog.storage.segment import segment_name
from twlog.storage.segment_list import SegmentList

from .support import ENTRY, payloads, read_all
from .test_replica import SEGMENT, ReplicaTestMixin


class SegmentAlignmentTests(ReplicaTestMixin, SynchronousTestCase):
    def replicate(self, leader: Log, follower: Log, max_bytes: int = 3 * ENTRY) -> int:
        """Copy the leader's written bytes as a follower's fetches do (Log.read_replica: one leader segment at a
        time, cut at a message boundary, with that segment's base); how many fetches it took."""
        fetches = 0
        while follower.end_offset < leader.end_offset:
            offset = follower.end_offset
            region = leader.read_replica(offset, max_bytes)
            self.assertLessEqual(region.offset + region.length, region.segment.end_offset, "within one segment")
            data = region.read()
            whole = replica.scan(data).valid_bytes
            follower.append_replica(data[:whole], offset, leader_segment_base=region.segment.base_offset)
            fetches += 1
        self.successResultOf(leader.flush())
        self.successResultOf(follower.flush())
        return fetches

    def assert_identical(self, leader: Log, follower: Log) -> None:
        """The same segment files, byte for byte (and the logs say so too)."""
        names = self.files(leader)
        self.assertEqual(self.files(follower), names)
        match, mismatch, errors = filecmp.cmpfiles(leader.directory, follower.directory,
                                                   [n for n in names if n.endswith(".log")], shallow=False)
        self.assertEqual((mismatch, errors), ([], []))
        self.assertEqual([s.base_offset for s in follower.segments], [s.base_offset for s in leader.segments])

    def produce(self, leader: Log, sizes: list[int]) -> None:
        for n in sizes:
            leader.append(encode_message_set(payloads(n, leader.end_offset // ENTRY)))

    def test_identical_after_several_leader_rolls(self) -> None:
        """Sets of several sizes make the leader roll short of full; the follower rolls where the leader did,
        whatever the fetch size, though its own segment_bytes is smaller (it never rolls by size)."""
        leader = self.open_log()
        self.produce(leader, [1, 3, 2, 4, 1, 1, 5, 2, 3, 1, 4, 4, 3])
        self.assertGreater(len(leader.segments), 3)
        self.assertIn(9 * ENTRY, [s.size for s in leader.segments])  # a roll short of full
        for max_bytes in [ENTRY, 3 * ENTRY + 7, SEGMENT]:
            follower = self.open_log(segment_bytes=1024)  # under the leader's largest segment
            self.replicate(leader, follower, max_bytes)
            self.assert_identical(leader, follower)
            self.assertEqual(read_all(follower), read_all(leader))

    def test_a_leader_with_larger_segments_decides(self) -> None:
        """A follower configured with smaller segments still holds the leader's, over its own size."""
        leader = self.open_log(segment_bytes=3 * SEGMENT)
        self.produce(leader, [5] * 8)
        follower = self.open_log()
        self.replicate(leader, follower, SEGMENT)
        self.assert_identical(leader, follower)
        self.assertGreater(follower.segments[0].size, SEGMENT)

    def test_identical_after_a_truncation_below_a_boundary(self) -> None:
        """A follower that led for a while (its own rolls) truncates (KIP-101) below one of its boundaries; once
        caught up with the new leader, which rolled elsewhere, its segments are the leader's."""
        leader, follower = self.open_log(), self.open_log()
        self.produce(leader, [4, 3])
        self.replicate(leader, follower)
        follower.append(encode_message_set([b"x" * 100] * 3))  # the old leader's tail: rolls at 10 entries
        follower.append(encode_message_set([b"y" * 100] * 2))
        self.assertEqual([s.base_offset for s in follower.segments], [0, 10 * ENTRY])
        self.produce(leader, [1, 3, 2, 2, 5])  # the new leader's history: rolls at 8 entries, then at 15
        self.assertEqual([s.base_offset for s in leader.segments], [0, 8 * ENTRY, 15 * ENTRY])
        self.successResultOf(follower.truncate_to(7 * ENTRY))  # where the old leader's epoch ends on the new
        self.assertEqual([s.base_offset for s in follower.segments], [0])
        self.replicate(leader, follower, 2 * ENTRY)
        self.assert_identical(leader, follower)
        self.assertEqual(read_all(follower), read_all(leader))

    def test_an_empty_segment_the_leader_has_not_is_dropped(self) -> None:
        """A truncation to one of the follower's own segment bases keeps that segment, empty; the leader's
        segment goes on past it, so the follower drops it and appends to the one before, as the leader did."""
        leader, follower = self.open_log(), self.open_log()
        self.produce(leader, [3, 3])
        self.replicate(leader, follower)
        follower.append(encode_message_set(payloads(3, 6)))  # its own tail, in its own segment at 9 entries
        follower.append(encode_message_set(payloads(3, 9)))
        self.successResultOf(follower.flush())
        self.successResultOf(follower.truncate_to(9 * ENTRY))
        self.assertEqual([(s.base_offset, s.size) for s in follower.segments], [(0, 9 * ENTRY), (9 * ENTRY, 0)])
        self.produce(leader, [1, 3, 2, 2])  # the leader's segment at 0 goes on to 10 entries
        self.assertEqual([s.base_offset for s in leader.segments], [0, 10 * ENTRY])
        self.replicate(leader, follower)
        self.assertFalse(os.path.exists(os.path.join(follower.directory, segment_name(9 * ENTRY))))
        self.assert_identical(leader, follower)

    def test_a_roll_of_the_followers_own_is_undone(self) -> None:
        """A roll of the follower's own (retention rolls an expired active segment, by its own clock) leaves an
        empty segment; the leader's next bytes go on in its older segment, so the follower's empty one goes."""
        leader, follower = self.open_log(), self.open_log()
        self.produce(leader, [2, 2])
        self.replicate(leader, follower)
        follower._roll()
        self.assertEqual([s.base_offset for s in follower.segments], [0, 4 * ENTRY])
        self.produce(leader, [2, 3, 4])
        self.replicate(leader, follower)
        self.assert_identical(leader, follower)

    def test_an_empty_segment_at_the_leaders_base_is_kept(self) -> None:
        """The follower's empty active segment at the leader's base is used as is: no second roll."""
        leader, follower = self.open_log(), self.open_log()
        self.produce(leader, [5, 5, 2])
        self.assertEqual([s.base_offset for s in leader.segments], [0, 10 * ENTRY])
        self.replicate(leader, follower, SEGMENT)
        self.successResultOf(follower.truncate_to(10 * ENTRY))
        self.assertEqual([s.size for s in follower.segments], [10 * ENTRY, 0])
        self.replicate(leader, follower)
        self.assert_identical(leader, follower)

    def test_identical_after_a_restart(self) -> None:
        """A follower killed mid-way (a torn tail in its last segment, recovered when opened) catches up to the
        same segment files, with rolls before and after the restart."""
        leader = self.open_log()
        self.produce(leader, [3, 4, 2, 5, 1, 3])
        follower = self.open_log()
        offset = 0
        while offset < leader.segments[1].base_offset + 2 * ENTRY:  # into the leader's second segment
            region = leader.read_replica(offset, 2 * ENTRY)
            offset = follower.append_replica(region.read(), offset, leader_segment_base=region.segment.base_offset
                                             ).next_offset
        self.successResultOf(follower.flush())
        with open(follower.segments[-1].path, "ab") as f:
            f.write(b"\x00\x00\x01\x00torn")
        follower.close()
        again = self.open_log(directory=follower.directory)
        self.assertIsNotNone(again.last_truncation)
        self.assertEqual(again.end_offset, offset)
        self.produce(leader, [2, 4, 5])
        self.replicate(leader, again)
        self.assert_identical(leader, again)

    def test_a_dropped_empty_segment_that_comes_back_is_removed_at_open(self) -> None:
        """A crash before the directory is fsynced may bring a dropped empty segment's file back, inside the
        segment before it: opening the log removes it (it holds no byte) and recovers the one before."""
        leader, follower = self.open_log(), self.open_log()
        self.produce(leader, [3, 3])
        self.replicate(leader, follower)
        follower._roll()  # a roll of its own (retention's)
        empty = follower.segments[-1].path
        self.produce(leader, [2, 2, 4])  # the follower drops the empty segment, then rolls where the leader does
        self.replicate(leader, follower)
        self.assert_identical(leader, follower)
        follower.close()
        open(empty, "wb").close()  # back from the dead
        again = self.open_log(directory=follower.directory)
        self.assertFalse(os.path.exists(empty))
        self.assert_identical(leader, again)
        self.assertEqual(read_all(again), read_all(leader))

    def test_open_drops_only_empty_segments_inside_the_one_before(self) -> None:
        directory = self.mktemp()
        log = self.open_log(directory=directory)
        log.append(encode_message_set(payloads(3)))
        self.successResultOf(log.flush())
        log.close()
        inside, after = (os.path.join(directory, segment_name(n * ENTRY)) for n in (2, 3))
        open(inside, "wb").close()
        open(after, "wb").close()  # an empty segment at the end: an ordinary roll, kept
        segments, _ = SegmentList.open(directory)
        self.addCleanup(segments.close)
        self.assertEqual(segments.bases, [0, 3 * ENTRY])
        self.assertEqual(sorted(os.listdir(directory)), sorted([segment_name(0), segment_name(3 * ENTRY)]))
