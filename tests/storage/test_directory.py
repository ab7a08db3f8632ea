"""Tests for twlog.storage.directory: partition directory names, the directory lock, the clean-shutdown marker."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import InvalidTopic
from twlog.storage.directory import (
    CLEAN_SHUTDOWN_MARKER,
    CleanShutdownMarker,
    DirectoryLock,
    LogDirectoryInUse,
    parse_partition_directory,
    partition_directory,
    validate_topic,
)

HOSTILE_TOPICS = [
    "",
    ".",
    "..",
    "../etc",
    "a/b",
    "/abs",
    "..\\x",
    "a\x00b",
    "tab\there",
    "new\nline",
    "x" * 250,
    "spa ce",
    "ünïcode",
    "a$b",
    "~root",
]


class TopicNameTests(SynchronousTestCase):
    def test_valid_names(self) -> None:
        """Letters, digits, '.', '_' and '-' up to 249 characters are accepted."""
        for name in ["clicks", "page.views", "a_b-c", "x" * 249, "..a", "0"]:
            self.assertEqual(validate_topic(name), name)

    def test_hostile_names(self) -> None:
        """Names that could escape the directory, or are not plain file names, are InvalidTopic."""
        for name in HOSTILE_TOPICS:
            self.assertRaises(InvalidTopic, validate_topic, name)

    def test_non_string(self) -> None:
        """A non-string topic is InvalidTopic, not a TypeError."""
        self.assertRaises(InvalidTopic, validate_topic, None)

    def test_parse_partition_directory(self) -> None:
        """Directory names split at the last '-'; anything else is not a partition."""
        self.assertEqual(parse_partition_directory("my-topic-12"), ("my-topic", 12))
        for name in ["topic", "topic-", "topic-x", "topic-01", "-3", "a b-1"]:
            self.assertIsNone(parse_partition_directory(name))

    def test_partition_directory_round_trip(self) -> None:
        """A partition's directory name parses back to its topic and number."""
        self.assertEqual(parse_partition_directory(partition_directory("a-b", 7)), ("a-b", 7))


class DirectoryLockTests(SynchronousTestCase):
    def test_one_holder_at_a_time(self) -> None:
        """A second lock on the same directory is refused until the first is released."""
        log_dir = self.mktemp()
        first, second = DirectoryLock(log_dir), DirectoryLock(log_dir)
        first.acquire()
        self.addCleanup(first.release)
        self.assertTrue(first.held)
        e = self.assertRaises(LogDirectoryInUse, second.acquire)
        self.assertIn("in use by another twlog broker", str(e))
        self.assertFalse(second.held)
        first.release()
        second.acquire()
        self.addCleanup(second.release)
        self.assertTrue(second.held)

    def test_acquire_twice(self) -> None:
        """The holder asking again is refused too, and still holds the lock."""
        lock = DirectoryLock(self.mktemp())
        lock.acquire()
        self.addCleanup(lock.release)
        self.assertRaises(LogDirectoryInUse, lock.acquire)
        self.assertTrue(lock.held)

    def test_release_when_not_held(self) -> None:
        """Releasing a lock not held does nothing."""
        lock = DirectoryLock(self.mktemp())
        lock.release()
        self.assertFalse(lock.held)


class CleanShutdownMarkerTests(SynchronousTestCase):
    def test_leave_and_remove(self) -> None:
        """The marker is a file in the log directory: left by a clean stop, removed by the next start."""
        log_dir = self.mktemp()
        os.makedirs(log_dir)
        marker = CleanShutdownMarker(log_dir)
        self.assertFalse(marker.present())
        marker.leave()
        self.assertTrue(os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)))
        self.assertTrue(marker.present())
        marker.remove()
        self.assertFalse(marker.present())
