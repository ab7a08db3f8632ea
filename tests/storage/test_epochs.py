"""Tests for twlog.storage.epochs: the leader-epoch checkpoint of a partition (KIP-101)."""

from __future__ import annotations

import os

from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from twlog.storage.epochs import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

from ..fakes import ManualRunner, run_now

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class EpochCacheTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.path = os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT)

    def cache(self, *entries: tuple[int, int]) -> LeaderEpochCache:
        cache = LeaderEpochCache.open(self.directory, run_now)
        for epoch, offset in entries:
            self.successResultOf(cache.assign(epoch, offset))
        return cache

    def file_text(self) -> str:
        with open(self.path) as f:
            return f.read()

    def test_new_cache_is_empty_and_writes_nothing(self) -> None:
        cache = self.cache()
        self.assertEqual((cache.entries, cache.latest_epoch, cache.latest_entry), ([], UNDEFINED_EPOCH, None))
        self.assertFalse(os.path.exists(self.path))

    def test_assign_writes_kafkas_format(self) -> None:
        """Each assignment is in the file at once (version 0, count, `epoch start_offset` lines)."""
        cache = self.cache((3, 0), (5, 1090))
        self.assertEqual(self.file_text(), "0\n2\n3 0\n5 1090\n")
        self.assertEqual(cache.latest_epoch, 5)
        self.assertEqual(cache.latest_entry, EpochEntry(5, 1090))
        self.assertEqual(os.listdir(self.directory), [LEADER_EPOCH_CHECKPOINT])  # no temporary left

    def test_assign_ignores_what_is_not_newer(self) -> None:
        """An epoch not above the latest, or a start offset below the latest's, changes nothing (and warns);
        the same epoch at the same offset is ignored quietly; the same start offset for a newer epoch is kept."""
        cache = self.cache((3, 100))
        for epoch, offset in [(2, 200), (3, 200), (4, 99)]:
            self.successResultOf(cache.assign(epoch, offset))
        self.successResultOf(cache.assign(3, 100))
        self.assertEqual(cache.entries, [(3, 100)])
        self.successResultOf(cache.assign(4, 100))
        self.assertEqual(cache.entries, [(3, 100), (4, 100)])
        self.assertEqual(self.file_text(), "0\n2\n3 100\n4 100\n")
        self.assertRaises(ValueError, cache.assign, -1, 0)

    def test_end_offset_for(self) -> None:
        """Kafka's endOffsetFor: the latest epoch ends at the log end; an older one where the first greater
        epoch starts, answered with the greatest epoch at or below it; below the first, above the latest,
        UNDEFINED, or an empty cache: (-1, -1)."""
        cache = self.cache((2, 0), (4, 500), (7, 900))
        log_end = 1200
        cases = {
            7: (7, 1200),
            4: (4, 900),
            5: (4, 900),  # an epoch this replica never led: the last before it ends where 7 starts
            6: (4, 900),
            2: (2, 500),
            3: (2, 500),
            1: UNDEFINED,
            0: UNDEFINED,
            8: UNDEFINED,
            UNDEFINED_EPOCH: UNDEFINED,
        }
        for epoch, expected in cases.items():
            self.assertEqual(cache.end_offset_for(epoch, log_end), expected, epoch)
        self.assertEqual(self.cache().end_offset_for(0, 10), UNDEFINED)

    def test_truncate_from_end(self) -> None:
        """Entries starting at or after the offset go; the file follows."""
        cache = self.cache((1, 0), (2, 300), (3, 600))
        self.successResultOf(cache.truncate_from_end(601))
        self.assertEqual(cache.entries, [(1, 0), (2, 300), (3, 600)])
        self.successResultOf(cache.truncate_from_end(300))
        self.assertEqual(cache.entries, [(1, 0)])
        self.assertEqual(self.file_text(), "0\n1\n1 0\n")
        self.successResultOf(cache.truncate_from_end(0))
        self.assertEqual((cache.entries, self.file_text()), ([], "0\n0\n"))

    def test_truncate_from_start(self) -> None:
        """Kafka's truncateFromStart: entries wholly before the offset go, and the one it falls in starts there."""
        cache = self.cache((1, 0), (2, 300), (3, 600))
        self.successResultOf(cache.truncate_from_start(0))
        self.assertEqual(cache.entries, [(1, 0), (2, 300), (3, 600)])
        self.successResultOf(cache.truncate_from_start(400))
        self.assertEqual(cache.entries, [(2, 400), (3, 600)])
        self.successResultOf(cache.truncate_from_start(600))
        self.assertEqual(cache.entries, [(3, 600)])
        self.assertEqual(self.file_text(), "0\n1\n3 600\n")
        self.successResultOf(cache.truncate_from_start(700))
        self.assertEqual(cache.entries, [(3, 700)])

    def test_recovered_on_open(self) -> None:
        self.cache((3, 0), (5, 1090))
        self.assertEqual(LeaderEpochCache.open(self.directory, run_now).entries, [(3, 0), (5, 1090)])

    def test_corrupt_file_warns_once_and_starts_empty(self) -> None:
        """A file that is not the format (or breaks the order) is one warning, and the cache is rebuilt empty:
        the file is replaced by an empty one, so the next open is quiet."""
        for text in ["garbage", "0\n2\n3 0\n", "0\n2\n5 0\n3 10\n", "0\n2\n3 10\n4 5\n", "0\n1\n3 -1\n",
                     "\xff\xfe"]:
            with open(self.path, "w", encoding="latin-1") as f:
                f.write(text)
            events: list[dict] = []
            globalLogPublisher.addObserver(events.append)
            try:
                cache = LeaderEpochCache.open(self.directory, run_now)
                self.assertEqual(cache.entries, [], text)
                self.assertEqual(cache.assign(1, 0).result, None)  # goes on working
                warnings = [e for e in events if e["log_level"] >= LogLevel.warn]
                self.assertEqual(len(warnings), 1, text)
                self.assertIn(self.path, formatEvent(warnings[0]))
                self.assertEqual(self.file_text(), "0\n1\n1 0\n")
                LeaderEpochCache.open(self.directory, run_now)
                self.assertEqual(len([e for e in events if e["log_level"] >= LogLevel.warn]), 1)
            finally:
                globalLogPublisher.removeObserver(events.append)

    def test_writes_go_through_the_runner_one_at_a_time(self) -> None:
        """Changes are written on the runner (the thread pool), one write at a time, the last covering all."""
        runner = ManualRunner()
        cache = LeaderEpochCache.open(self.directory, runner)
        first = cache.assign(1, 0)
        second = cache.assign(2, 100)
        third = cache.truncate_from_end(100)
        self.assertEqual(len(runner.pending), 1)
        self.assertFalse(os.path.exists(self.path))
        runner.run_all()
        for d in (first, second, third):
            self.successResultOf(d)
        self.assertEqual(self.file_text(), "0\n1\n1 0\n")
