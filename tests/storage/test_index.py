"""The sparse position index and log_boundaries: the first whole, valid message at or after a position."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import LogConfig
from twlog.errors import OffsetOutOfRange
from twlog.storage.index import INDEX_INTERVAL_BYTES, WALK_SET_BYTES, PositionIndex, index_positions
from twlog.storage.log import Log, log_boundaries
from twlog.storage.message import CODEC_GZIP, CODEC_SNAPPY, encode_message_set, iter_messages

from ..fakes import ManualRunner, run_now


def sets() -> list[bytes]:
    """Message sets of every shape: single messages, small and large sets, gzip and snappy wrappers."""
    out = []
    for i in range(60):
        n = (1, 5, 40, 300)[i % 4]
        payloads = [b"p%d-%d-" % (i, j) * (1 + (i + j) % 30) for j in range(n)]
        codec = (0, 0, CODEC_GZIP, 0, CODEC_SNAPPY)[i % 5]
        out.append(encode_message_set(payloads, codec))
    return out


def starts(data: bytes, base: int = 0) -> list[int]:
    """The offsets of the (outer) messages of C{data}, which starts at C{base}."""
    return [m.offset for m in iter_messages(data, base, deep=False, whole_buffer=True)]


def expected(all_starts: list[int], position: int, flushed: int) -> int:
    """The first message start at or after C{position} before C{flushed}, else C{flushed}."""
    return next((s for s in all_starts if s >= position and s < flushed), flushed)


class LogBoundariesTests(SynchronousTestCase):
    def open_log(self, directory: str, runner=run_now, recover: bool = True, segment_bytes: int = 64 * 1024) -> Log:
        config = LogConfig(directory, segment_bytes=segment_bytes, flush_messages=10**9, flush_policy="timer")
        log = Log.open(directory, config, Clock(), runner, recover=recover)
        self.addCleanup(log.close)
        return log

    def fill(self, log: Log) -> list[int]:
        """Append every set of L{sets}, flush, and return every message start."""
        for data in sets():
            log.append(data)
        self.successResultOf(log.flush())
        found = []
        for segment in log.segments:
            with open(segment.path, "rb") as f:
                found += starts(f.read(), segment.base_offset)
        return found

    def check_every_position(self, log: Log, all_starts: list[int], runner: ManualRunner | None = None) -> None:
        positions = list(range(log.start_offset, log.end_offset + 1, 97)) + all_starts + [log.end_offset]
        d = log_boundaries(log, positions)
        while runner is not None and runner.pending:
            runner.run_one()
        got = self.successResultOf(d)
        want = [expected(all_starts, p, log.flushed_offset) for p in positions]
        self.assertEqual(got, want)

    def test_boundaries_while_appending(self) -> None:
        """Every position maps to the first message at or after it, across segments, compressed sets included."""
        log = self.open_log(self.mktemp())
        all_starts = self.fill(log)
        self.assertGreater(len(log.segments), 2)
        self.check_every_position(log, all_starts)

    def test_unflushed_data_is_not_answered(self) -> None:
        """A position at or past the flushed end gets the flushed end, and so does one whose message is not
        flushed yet."""
        log = self.open_log(self.mktemp())
        all_starts = self.fill(log)
        flushed = log.flushed_offset
        log.append(encode_message_set([b"late"] * 10))
        self.assertEqual(self.successResultOf(log_boundaries(log, [flushed, flushed + 3, all_starts[-1] + 1])),
                         [flushed, flushed, flushed])

    def test_reopened_segments_are_indexed_on_the_pool(self) -> None:
        """After a clean restart, the first request indexes the segments it touches on the thread pool, then
        answers as before the restart."""
        directory = self.mktemp()
        log = self.open_log(directory)
        all_starts = self.fill(log)
        log.close()
        runner = ManualRunner()
        log = self.open_log(directory, runner=runner, recover=False)
        self.assertFalse(log.segments[0].index.ready)
        d = log_boundaries(log, [1, all_starts[-1] - 1])
        self.assertNoResult(d)
        while runner.pending:
            runner.run_one()
        self.assertEqual(self.successResultOf(d), [expected(all_starts, 1, log.flushed_offset),
                                                   expected(all_starts, all_starts[-1] - 1, log.flushed_offset)])
        self.check_every_position(log, all_starts, runner)

    def test_recovery_rebuilds_the_last_segment(self) -> None:
        """After an unclean stop with a torn last message, recovery cuts it and rebuilds the last segment's index
        from what is kept."""
        directory = self.mktemp()
        log = self.open_log(directory)
        all_starts = self.fill(log)
        last = log.segments[-1].path
        log.close()
        with open(last, "ab") as f:
            f.write(encode_message_set([b"torn" * 50])[:30])
        log = self.open_log(directory, recover=True)
        self.assertIsNotNone(log.last_truncation)
        self.assertTrue(log.segments[-1].index.ready)
        self.successResultOf(log.flush())
        self.check_every_position(log, all_starts)

    def test_corrupt_message_is_not_a_split_point(self) -> None:
        """A message that fails its CRC is hopped over: the answer is the valid message after it."""
        directory = self.mktemp()
        log = self.open_log(directory)
        data = encode_message_set([b"a" * 100, b"b" * 100, b"c" * 100])
        log.append(data)
        self.successResultOf(log.flush())
        path = log.segments[0].path
        log.close()
        with open(path, "r+b") as f:
            f.seek(109 + 20)
            f.write(b"X")
        log = self.open_log(directory, recover=False)
        self.assertEqual(self.successResultOf(log_boundaries(log, [1, 109, 110])), [218, 218, 218])

    def test_positions_outside_the_log(self) -> None:
        """A position past the written end fails with OffsetOutOfRange."""
        log = self.open_log(self.mktemp())
        self.fill(log)
        self.assertRaises(OffsetOutOfRange, log_boundaries, log, [0, log.end_offset + 1])


class PositionIndexTests(SynchronousTestCase):
    def test_entries_are_message_starts_a_few_kb_apart(self) -> None:
        """Appended sets are indexed by message starts, no two further apart than a walked set allows."""
        index = PositionIndex()
        position = 0
        log = b""
        for data in sets():
            index.add_set(position, data)
            position += len(data)
            log += data
        truth = set(starts(log))
        self.assertTrue(set(index.positions) <= truth)
        gaps = [b - a for a, b in zip(index.positions, index.positions[1:])]
        biggest_message = max(b - a for a, b in zip(sorted(truth), sorted(truth)[1:]))
        self.assertLessEqual(max(gaps), max(WALK_SET_BYTES, biggest_message) + INDEX_INTERVAL_BYTES)
        self.assertGreaterEqual(min(gaps), INDEX_INTERVAL_BYTES)

    def test_index_positions_matches_appends(self) -> None:
        """Indexing a file by its length fields finds message starts at least as dense as appends do."""
        log = b"".join(sets())
        found = index_positions(lambda pos, n: log[pos : pos + n], len(log), 10**9)
        truth = starts(log)
        self.assertTrue(set(found) <= set(truth))
        biggest_message = max(b - a for a, b in zip(truth, truth[1:]))
        self.assertLessEqual(max(b - a for a, b in zip(found, found[1:])), INDEX_INTERVAL_BYTES + biggest_message)

    def test_index_stops_at_a_bad_length(self) -> None:
        """A length field below the minimum ends the pass: nothing after it is indexed."""
        good = encode_message_set([b"x" * 5000] * 3)
        found = index_positions(lambda pos, n: (good + b"\0\0\0\0" + good)[pos : pos + n], 2 * len(good) + 4, 10**9)
        self.assertEqual(list(found), [0, 5009, 10018])

    def test_truncate(self) -> None:
        """Truncating forgets the positions at or past the cut."""
        index = PositionIndex()
        index.add_set(0, encode_message_set([b"y" * 3000] * 20))
        index.truncate(9000)
        self.assertTrue(all(p < 9000 for p in index.positions))
