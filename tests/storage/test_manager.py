"""Tests for twlog.storage.manager: the log directory, topics, and clean shutdown."""

from __future__ import annotations

import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import LogConfig
from twlog.errors import InvalidTopic, WrongPartition
from twlog.storage.manager import (
    CLEAN_SHUTDOWN_MARKER,
    LogManager,
)
from twlog.storage.message import encode_message_set, iter_messages

from ..fakes import run_now
from .test_directory import HOSTILE_TOPICS


class LogManagerTests(SynchronousTestCase):
    def make_manager(self, log_dir: str | None = None, **overrides) -> LogManager:
        self.log_dir = log_dir or self.mktemp()
        self.clock = Clock()
        manager = LogManager(LogConfig(self.log_dir, **overrides), self.clock, run_now)
        manager.start()
        self.addCleanup(manager.close)
        return manager

    def test_topic_created_on_first_write(self) -> None:
        """A partition's directory appears on its first write, named <topic>-<partition>."""
        manager = self.make_manager(num_partitions=3)
        self.assertIsNone(manager.get_log("clicks", 1))
        log = manager.get_or_create_log("clicks", 1)
        self.assertIs(manager.get_or_create_log("clicks", 1), log)
        self.assertTrue(os.path.isdir(os.path.join(self.log_dir, "clicks-1")))
        self.assertEqual(manager.topics(), {"clicks": 3})

    def test_per_topic_partition_counts(self) -> None:
        """A topic named in topic_partitions gets its own count; others the default."""
        manager = self.make_manager(num_partitions=2, topic_partitions={"big": 8})
        self.assertEqual(manager.partition_count("big"), 8)
        self.assertEqual(manager.partition_count("small"), 2)
        manager.get_or_create_log("big", 7)
        self.assertRaises(WrongPartition, manager.get_or_create_log, "small", 2)

    def test_partition_out_of_range(self) -> None:
        """Negative or too-large partitions are WrongPartition and create nothing."""
        manager = self.make_manager(num_partitions=2)
        for partition in (-1, 2, 99):
            self.assertRaises(WrongPartition, manager.get_or_create_log, "t", partition)
        self.assertEqual(manager.topics(), {})

    def test_hostile_topic_creates_nothing(self) -> None:
        """No hostile name creates a file or directory anywhere, inside the log directory or out."""
        outside = self.mktemp()
        os.makedirs(outside)
        manager = self.make_manager(log_dir=os.path.join(outside, "logs"))
        before = sorted(os.listdir(outside)), sorted(os.listdir(self.log_dir))
        for name in HOSTILE_TOPICS:
            self.assertRaises(InvalidTopic, manager.get_or_create_log, name, 0)
        self.assertEqual((sorted(os.listdir(outside)), sorted(os.listdir(self.log_dir))), before)

    def test_topic_listener(self) -> None:
        """Creating a topic tells the listeners once, with its partition count."""
        manager = self.make_manager(num_partitions=2)
        heard = []
        manager.add_topic_listener(lambda topic, count: heard.append((topic, count)))
        manager.get_or_create_log("t", 0)
        manager.get_or_create_log("t", 1)
        self.assertEqual(heard, [("t", 2)])

    def test_restart_continues_at_the_right_offsets(self) -> None:
        """After a clean stop and a new start, logs reopen at their ends and keep their data."""
        manager = self.make_manager(num_partitions=2)
        for partition in (0, 1):
            manager.get_or_create_log("t", partition).append(encode_message_set([b"p%d" % partition] * 3))
        self.successResultOf(manager.stop())
        self.assertTrue(os.path.exists(os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER)))
        manager = self.make_manager(log_dir=self.log_dir, num_partitions=1)
        self.assertFalse(manager.recovered)
        self.assertFalse(os.path.exists(os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER)))
        self.assertEqual(manager.topics(), {"t": 2})
        log = manager.get_log("t", 1)
        self.assertEqual((log.end_offset, log.flushed_offset), (33, 33))
        region = log.read(0, 1000)
        self.assertEqual([m.payload for m in iter_messages(region.read(), 0)], [b"p1"] * 3)
        self.assertEqual(log.append(encode_message_set([b"next"])).offset, 33)

    def test_stop_flushes_everything(self) -> None:
        """stop() fsyncs unflushed data before it leaves the marker."""
        manager = self.make_manager()
        log = manager.get_or_create_log("t", 0)
        log.append(encode_message_set([b"a"]))
        self.assertEqual(log.flushed_offset, 0)
        self.successResultOf(manager.stop())
        self.assertEqual(log.flushed_offset, 10)
        self.assertTrue(log.closed)

    def test_ignores_foreign_entries(self) -> None:
        """Files and directories that are not partitions are left alone."""
        log_dir = self.mktemp()
        os.makedirs(os.path.join(log_dir, "not a partition"))
        with open(os.path.join(log_dir, "README"), "w") as f:
            f.write("hi")
        manager = self.make_manager(log_dir=log_dir)
        self.assertEqual(manager.topics(), {})
        self.assertTrue(os.path.exists(os.path.join(log_dir, "README")))


class CloseTests(SynchronousTestCase):
    """LogManager.close: a crash (no flush, no marker) or, after a flush, a clean close."""

    def start(self, log_dir: str) -> LogManager:
        manager = LogManager(LogConfig(log_dir, flush_messages=1_000_000), Clock(), run_now)
        manager.start()
        self.addCleanup(manager.close)
        return manager

    def test_crash(self) -> None:
        """close() flushes nothing and leaves no marker: the next start recovers, and sees what was written."""
        log_dir = self.mktemp()
        manager = self.start(log_dir)
        log = manager.get_or_create_log("t", 0)
        log.append(encode_message_set([b"unflushed"]))
        log.write_out()
        manager.close()
        self.assertTrue(log.closed)
        self.assertFalse(manager.running)
        self.assertEqual(manager.logs(), {})
        self.assertFalse(os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)))
        again = self.start(log_dir)  # the lock was released
        self.assertTrue(again.recovered)
        self.assertEqual(again.get_log("t", 0).flushed_offset, log.end_offset)

    def test_clean(self) -> None:
        """close(clean=True) leaves the marker: the next start skips recovery."""
        log_dir = self.mktemp()
        manager = self.start(log_dir)
        log = manager.get_or_create_log("t", 0)
        log.append(encode_message_set([b"flushed"]))
        self.successResultOf(log.flush())
        manager.close(clean=True)
        self.assertTrue(os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)))
        self.assertFalse(self.start(log_dir).recovered)

    def test_close_twice(self) -> None:
        """Closing a closed (or never started) manager does nothing."""
        manager = self.start(self.mktemp())
        manager.close()
        manager.close()
        LogManager(LogConfig(self.mktemp()), Clock(), run_now).close()
