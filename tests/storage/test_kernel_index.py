"""Tests for the kernel's index walk (L{twlog.storage.kernel.index_walk}) and its callers: the compiled and the
pure-Python kernels give identical results.

Both kernels run on the same data (valid sets, torn tails, corrupt CRCs, every kind of bad entry, random sets
from hypothesis), through the function itself, then through its callers with each kernel patched in: the
position index of an append (L{PositionIndex.add_set}), the index pass over a segment found on disk
(L{index_positions}), recovery's index built during its scan (L{recover_segment}), and the follower's check
that a truncation point is a message boundary (L{on_boundary}, the kernel's L{whole_end}).
"""

from __future__ import annotations

import os
import struct
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from twlog.storage import index as index_module
from twlog.storage import kernel
from twlog.storage import recovery as recovery_module
from twlog.storage import replica as replica_module
from twlog.storage.index import INDEX_INTERVAL_BYTES, PositionIndex, index_positions
from twlog.storage.message import encode_message_set
from twlog.storage.recovery import recover_segment
from twlog.storage.replica import on_boundary
from twlog.storage.segment import Segment, segment_name

from .test_kernel import PAYLOADS, compiled, corrupt_sets, message_sets, plain_set, with_bad_crc

#: A set of a few hundred KB (big enough for many index entries), with messages of varied sizes.
BIG = encode_message_set([b"m%d " % i + b"z" * (i * 37 % 900) for i in range(700)])


def entry_starts(buf: bytes) -> list[int]:
    """The positions of the entries of C{buf} whose length fields are sane, read one by one (the reference)."""
    starts, pos = [], 0
    while pos + 4 <= len(buf):
        size = struct.unpack_from(">i", buf, pos)[0]
        if size < 5:
            break
        starts.append(pos)
        pos += 4 + size
    return starts


#: Where the "corrupt CRC" segment's first bad message starts: the last entry of C{BIG} starting before 200,000.
CUT = max(p for p in entry_starts(BIG) if p <= 200_000)


def every_interval(starts: list[int], interval: int, base: int = 0, due: int = 0) -> list[int]:
    """The reference's choice of C{starts} to index: the first at or past C{due}, then one C{interval} on."""
    chosen = []
    for start in starts:
        if base + start >= due:
            chosen.append(base + start)
            due = base + start + interval
    return chosen


def as_lists(result):
    stop, positions, due = result
    return stop, tuple(positions), due


class IndexWalkTests(SynchronousTestCase):
    """The function itself, on both kernels."""

    def kernels(self):
        return compiled(), kernel.pure

    def test_valid_set(self) -> None:
        """Every interval, base and due: the reference's positions, the end as the stop, the same on both."""
        starts = entry_starts(BIG)
        for k in self.kernels():
            for interval, base, due in [(1, 0, 0), (4096, 0, 0), (4096, 10**9, 10**9 + 300), (50_000, 7, 0)]:
                stop, positions, next_due = k.index_walk(BIG, 0, -1, 0x7FFFFFFF, base, due, interval)
                expected = every_interval(starts, interval, base, due)
                self.assertEqual((stop, list(positions)), (len(BIG), expected))
                self.assertEqual(next_due, expected[-1] + interval)
        self.assertGreater(len(every_interval(starts, 4096)), 50)

    def test_stops(self) -> None:
        """A torn tail is hopped by its length field; a length that is not sane stops the walk at its entry."""
        good = len(encode_message_set(PAYLOADS[:2]))
        sets = corrupt_sets()
        for k in self.kernels():
            self.assertEqual(k.index_walk(sets["length below minimum"], 0, -1, 100, 0, 0, 1)[0], good)
            self.assertEqual(k.index_walk(sets["negative length"], 0, -1, 100, 0, 0, 1)[0], good)
            self.assertEqual(k.index_walk(sets["huge length"], 0, -1, 100, 0, 0, 1)[0], good)
            self.assertEqual(k.index_walk(sets["partial length"], 0, -1, 100, 0, 0, 1)[0], good)
            torn = sets["partial message"]
            stop, positions, _ = k.index_walk(torn, 0, -1, 100, 0, 0, 1)
            self.assertEqual((stop, list(positions)[-1]), (len(torn) + 3, good))
            self.assertEqual(k.index_walk(plain_set(), 0, -1, 10, 0, 0, 1)[0], 0)  # its first entry is larger

    def test_corrupt_sets_and_bounds(self) -> None:
        """Every corrupt set, whole and cut, from several positions and limits: the same on both kernels."""
        c = compiled()
        for buf in corrupt_sets().values():
            for data in (buf, buf[: len(buf) * 2 // 3], with_bad_crc(BIG, 0) + buf):
                for pos, limit, maximum, interval in [(0, -1, 0x7FFFFFFF, 1), (3, 40, 200, 30), (0, 10**6, 60, 100)]:
                    args = (data, pos, limit, maximum, 5, 11, interval)
                    self.assertEqual(as_lists(c.index_walk(*args)), as_lists(kernel.pure.index_walk(*args)))

    def test_buffers(self) -> None:
        """bytes, bytearray and memoryview give the same walk."""
        for k in self.kernels():
            results = {as_lists(k.index_walk(b, 0, -1, 0x7FFFFFFF, 0, 0, 4096))
                       for b in (BIG, bytearray(BIG), memoryview(BIG))}
            self.assertEqual(len(results), 1)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(message_sets(), st.integers(0, 60), st.integers(-1, 3000), st.integers(0, 400), st.integers(1, 600),
           st.integers(0, 10**12), st.integers(0, 500))
    def test_random_sets(self, buf: bytes, pos: int, limit: int, maximum: int, interval: int, base: int,
                         due: int) -> None:
        """Random sets, valid and damaged, with random bounds: identical results from both kernels."""
        args = (buf, pos, limit, maximum, base, base + due, interval)
        self.assertEqual(as_lists(compiled().index_walk(*args)), as_lists(kernel.pure.index_walk(*args)))


def write_segment(directory: str, data: bytes) -> Segment:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, segment_name(0)), "wb") as f:
        f.write(data)
    return Segment.open(directory, 0)


class CallerTests(SynchronousTestCase):
    """The index walk's callers answer the same with either kernel, and as the reference does."""

    def use(self, k) -> None:
        self.patch(index_module, "index_walk", k.index_walk)
        self.patch(recovery_module, "index_walk", k.index_walk)
        self.patch(replica_module, "whole_end", k.whole_end)

    def datasets(self) -> dict[str, bytes]:
        sets = {"valid": BIG, "torn tail": BIG + encode_message_set([b"x" * 500])[:-7],
                "corrupt CRC": BIG[:CUT] + with_bad_crc(BIG, 0)[:-9]}
        sets.update(corrupt_sets())
        return sets

    def recovered(self, k, data: bytes, chunk: int) -> tuple:
        """Recover a segment holding C{data} (read C{chunk} bytes at a time): what was cut, and its index."""
        self.use(k)
        segment = write_segment(self.mktemp(), data)
        self.addCleanup(segment.close)
        segment.index = PositionIndex(segment.size)
        with mock.patch.object(recovery_module, "RECOVERY_CHUNK_BYTES", chunk):
            truncation = recover_segment(segment, 1 << 20)
        # The index built during the scan is the one the separate pass over the kept bytes builds.
        self.assertEqual(list(segment.index.positions), list(index_positions(segment.pread, segment.size, 1 << 20)))
        return truncation and truncation[1:], segment.size, list(segment.index.positions)

    def test_recovery(self) -> None:
        """Valid, torn and corrupt segments, in one chunk and in chunks entries straddle: both kernels agree."""
        for name, data in self.datasets().items():
            for chunk in (8 << 20, 997):
                found = [self.recovered(k, data, chunk) for k in (compiled(), kernel.pure)]
                self.assertEqual(found[0], found[1], name)
        truncation, size, positions = self.recovered(kernel.pure, self.datasets()["corrupt CRC"], 997)
        self.assertEqual((truncation[2], size), (f"CRC mismatch in message at byte {CUT}", CUT))
        self.assertEqual(positions, [p for p in every_interval(entry_starts(BIG), INDEX_INTERVAL_BYTES) if p < size])
        self.assertEqual(self.recovered(compiled(), BIG, 997)[:2], (None, len(BIG)))

    def test_index_positions(self) -> None:
        """The pass over a segment found on disk, in chunks, stopping at a length that is not sane."""
        for name, data in self.datasets().items():
            found = []
            for k in (compiled(), kernel.pure):
                self.use(k)
                for chunk in (8 << 20, 1000):
                    with mock.patch.object(index_module, "_CHUNK_BYTES", chunk):
                        found.append(list(index_positions(lambda p, n: data[p : p + n], len(data), 1 << 20)))
            self.assertEqual(found, [found[0]] * 4, name)
        self.assertEqual(found[0], every_interval(entry_starts(data), INDEX_INTERVAL_BYTES))

    def test_add_set(self) -> None:
        """The index of appended sets, small and large, at any position."""
        sets = (plain_set(), BIG, plain_set(), BIG[:20_000] + BIG[:20_000], BIG)
        found = []
        for k in (compiled(), kernel.pure):
            self.use(k)
            index = PositionIndex()
            position = 0
            for data in sets:
                index.add_set(position, data)
                position += len(data)
            found.append(list(index.positions))
        self.assertEqual(found[0], found[1])
        starts, position = [], 0  # a small set is indexed by its start alone, a large one inside too
        for data in sets:
            starts += [position + p for p in (entry_starts(data) if len(data) > index_module.WALK_SET_BYTES else [0])]
            position += len(data)
        self.assertEqual(found[0], every_interval(starts, INDEX_INTERVAL_BYTES))

    def test_on_boundary(self) -> None:
        """Every position of a segment (valid, torn, corrupt): the same answer with either kernel, true exactly
        at the entries' starts for a valid one."""
        for name, data in self.datasets().items():
            segment = write_segment(self.mktemp(), data)
            self.addCleanup(segment.close)
            segment.index.load(index_positions(segment.pread, segment.size, 1 << 20))
            starts = entry_starts(data)[::5]  # some starts, the bytes around them, and a stride through the rest
            asked = sorted({p + d for p in starts for d in (-1, 0, 1)} | set(range(0, len(data) + 2, 97)))
            found = []
            for k in (compiled(), kernel.pure):
                self.use(k)
                found.append([p for p in asked if on_boundary(segment, p, 1 << 20)])
            self.assertEqual(found[0], found[1], name)
            if name == "valid":
                boundaries = set(entry_starts(BIG) + [len(BIG)])
                self.assertEqual(found[0], [p for p in asked if p in boundaries])
                self.assertGreater(len(found[0]), 100)
