"""minPartitions: Spark's Kafka range rule, cut points on message boundaries, and the same rows for any count."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol.codec import MAX_BOUNDARY_POSITIONS
from twlog.spark.arrow import scan_fetch
from twlog.spark.split import divide, split_ranges
from twlog.storage.index import PositionIndex, find_boundary
from twlog.storage.message import CODEC_GZIP, CODEC_SNAPPY, encode_message_set, iter_messages

BOUND = 10**8


def log_bytes() -> bytes:
    """A partition's log: single messages, plain sets, gzip and snappy sets, of varied payload sizes."""
    sets = []
    for i in range(80):
        payloads = [b"v%d.%d:" % (i, j) * (1 + (i * j) % 13) for j in range((1, 7, 30)[i % 3])]
        sets.append(encode_message_set(payloads, (0, CODEC_GZIP, 0, CODEC_SNAPPY)[i % 4]))
    return b"".join(sets)


def broker_boundaries(log: bytes, base: int):
    """BOUNDARIES as the broker answers it, over C{log} at offset C{base}, from an index built by appends."""
    index = PositionIndex()
    index.add_set(0, log)

    def boundaries(key, positions: list[int]) -> list[int]:
        assert len(positions) <= MAX_BOUNDARY_POSITIONS
        pread = lambda pos, n: log[pos : pos + n]  # noqa: E731
        return [base + find_boundary(pread, index, p - base, len(log), BOUND) for p in positions]

    return boundaries


def read_rows(log: bytes, base: int, start: int, end: int, fetch_size: int) -> list[tuple[int, bytes]]:
    """The rows of C{[start, end)} read fetch by fetch, as a Spark task does (partial trailing messages)."""
    rows = []
    offset = start
    while offset < end:
        fetched = log[offset - base : offset - base + fetch_size]
        found = scan_fetch(fetched, offset, end, BOUND)
        data = bytes(found.data)
        bounds = found.value_offsets.tolist()
        rows += [(o, data[a:b]) for o, a, b in zip(found.offsets.tolist(), bounds, bounds[1:])]
        offset = found.next_offset
    return rows


class DivideTests(SynchronousTestCase):
    def test_unset_or_enough_partitions(self) -> None:
        """Without minPartitions, or with no more than the ranges, each range is one task; empty ones go."""
        ranges = [("a", 0, 100), ("b", 5, 5), ("c", 10, 30)]
        self.assertEqual(divide(ranges, None), [("a", 0, 100), ("c", 10, 30)])
        self.assertEqual(divide(ranges, 2), [("a", 0, 100), ("c", 10, 30)])

    def test_one_partition_in_equal_pieces(self) -> None:
        """One range and minPartitions 8: eight near-equal pieces, the last taking the rounding."""
        self.assertEqual(divide([("a", 0, 1003)], 8),
                         [("a", a, b) for a, b in [(0, 125), (125, 250), (250, 375), (375, 500), (500, 625),
                                                   (625, 751), (751, 877), (877, 1003)]])

    def test_proportional(self) -> None:
        """Large ranges get pieces in proportion to their size; a small one stays whole (Spark's rule)."""
        pieces = divide([("big", 0, 9000), ("small", 0, 100), ("mid", 0, 3000)], 8)
        counts = {key: sum(1 for k, _, _ in pieces if k == key) for key in ("big", "small", "mid")}
        self.assertEqual(counts, {"big": 5, "small": 1, "mid": 2})


class SplitRangesTests(SynchronousTestCase):
    def test_pieces_start_on_messages_and_cover_the_range(self) -> None:
        """Every piece starts on a message (whole and valid), and the pieces of a range cover it exactly."""
        log = log_bytes()
        base = 5000
        starts = {m.offset for m in iter_messages(log, base, deep=False, whole_buffer=True)}
        for parts in (1, 3, 8, 50):
            pieces = split_ranges([("t", base, base + len(log))], parts, broker_boundaries(log, base))
            self.assertEqual(pieces[0][1], base)
            self.assertEqual(pieces[-1][2], base + len(log))
            for (_, _, end), (_, start, _) in zip(pieces, pieces[1:]):
                self.assertEqual(end, start)
                self.assertIn(start, starts)
            self.assertLessEqual(len(pieces), parts)
            if parts <= 8:
                self.assertEqual(len(pieces), parts)

    def test_same_rows_whatever_min_partitions(self) -> None:
        """The rows of all pieces, read fetch by fetch with partial trailing messages, are the unsplit rows."""
        log = log_bytes()
        base = 5000
        everything = [(m.offset, m.payload) for m in iter_messages(log, base, whole_buffer=True)]
        boundaries = broker_boundaries(log, base)
        for start in (base, min(everything[len(everything) // 3][0], base + 1000)):
            start = next(o for o, _ in everything if o >= start)
            want = [r for r in everything if r[0] >= start]
            for parts in (1, 3, 8):
                for fetch_size in (700, 4096, 10**6):
                    pieces = split_ranges([("t", start, base + len(log))], parts, boundaries)
                    got = [r for _, a, b in pieces for r in read_rows(log, base, a, b, fetch_size)]
                    self.assertEqual(got, want, (parts, fetch_size))

    def test_many_cuts_are_asked_in_chunks(self) -> None:
        """More cut points than one request may carry are asked in several requests."""
        asked = []

        def boundaries(key, positions):
            asked.append(len(positions))
            return positions

        pieces = split_ranges([("t", 0, 10**6)], 3000, boundaries)
        self.assertEqual(len(pieces), 3000)
        self.assertEqual(asked, [MAX_BOUNDARY_POSITIONS, MAX_BOUNDARY_POSITIONS, 3000 - 1 - 2 * MAX_BOUNDARY_POSITIONS])

    def test_cuts_on_one_message_merge(self) -> None:
        """Cut points that move to the same message, or to the end, leave no empty piece."""
        pieces = split_ranges([("t", 0, 100)], 8, lambda key, positions: [60 if p < 60 else 100 for p in positions])
        self.assertEqual(pieces, [("t", 0, 60), ("t", 60, 100)])
