"""Tests for twlog.storage.topics: partition counts, LogManager.create_topic and the topics file that keeps them."""

from __future__ import annotations

import json
import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import LogConfig
from twlog.errors import (
    BrokerShuttingDown,
    CorruptLog,
    InvalidRequest,
    InvalidTopic,
    StorageFailed,
    TopicExists,
    WrongPartition,
)
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set
from twlog.storage.topics import TOPICS_FILE, PartitionCounts, TopicsFile, read_topics_file

from ..fakes import ManualRunner, run_now


class CreateTopicTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.log_dir = self.mktemp()
        self.created: list[tuple[str, int]] = []

    def start(self, runner=run_now, **overrides) -> LogManager:
        manager = LogManager(LogConfig(self.log_dir, **overrides), Clock(), runner)
        manager.start()
        self.addCleanup(manager.close)
        manager.add_topic_listener(lambda topic, count: self.created.append((topic, count)))
        return manager

    def test_creates_directories_and_first_segments(self) -> None:
        """Each partition gets its directory and an empty first segment, as a first write gives it; True: created."""
        manager = self.start(num_partitions=8)
        self.assertIs(self.successResultOf(manager.create_topic("clicks", 2)), True)
        self.assertEqual(manager.topics(), {"clicks": 2})
        self.assertEqual(sorted(d for d in os.listdir(self.log_dir) if not d.startswith(".")), ["clicks-0", "clicks-1"])
        for p in (0, 1):
            self.assertEqual(os.listdir(os.path.join(self.log_dir, f"clicks-{p}")), ["00000000000000000000.log"])
            self.assertEqual(manager.get_log("clicks", p).end_offset, 0)

    def test_restart_keeps_count_below_num_partitions(self) -> None:
        """A restart keeps the created count (2), not max(directories, num_partitions) (8); a write to 2 is refused."""
        manager = self.start(num_partitions=8)
        self.successResultOf(manager.create_topic("clicks", 2))
        manager.get_or_create_log("clicks", 1).append(encode_message_set([b"x"]))
        self.successResultOf(manager.stop())
        again = self.start(num_partitions=8)
        self.assertEqual(again.topics(), {"clicks": 2})
        self.assertEqual(again.partition_count("clicks"), 2)
        self.assertRaises(WrongPartition, again.get_or_create_log, "clicks", 2)
        self.assertIs(self.successResultOf(again.create_topic("clicks", 2)), False)

    def test_restart_after_crash_keeps_count(self) -> None:
        """The count is durable when create_topic fires: an unclean stop right after keeps it too."""
        manager = self.start(num_partitions=8)
        self.successResultOf(manager.create_topic("clicks", 3))
        manager.close()  # a crash: no clean-shutdown marker
        self.assertEqual(self.start(num_partitions=8).topics(), {"clicks": 3})

    def test_topics_file_format(self) -> None:
        """The file is JSON: a version and the counts by topic."""
        manager = self.start()
        self.successResultOf(manager.create_topic("b", 2))
        self.successResultOf(manager.create_topic("a", 1))
        with open(os.path.join(self.log_dir, TOPICS_FILE)) as f:
            self.assertEqual(json.load(f), {"version": 1, "partitions": {"a": 1, "b": 2}})
        self.assertFalse(os.path.exists(os.path.join(self.log_dir, TOPICS_FILE + ".tmp")))

    def test_listener_fires_once_when_durable(self) -> None:
        """The topic listeners hear of the topic once its count is saved (on the pool), and not again for a repeat."""
        runner = ManualRunner()
        manager = self.start(runner, num_partitions=8)
        d = manager.create_topic("clicks", 2)
        self.assertEqual(manager.topics(), {"clicks": 2})  # usable at once ...
        self.assertNoResult(d)  # ... answered once durable
        self.assertEqual(self.created, [])
        self.assertFalse(os.path.exists(os.path.join(self.log_dir, TOPICS_FILE)))  # the write runs on the pool
        repeat = manager.create_topic("clicks", 2)
        self.assertNoResult(repeat)  # a repeat waits for the save in flight
        runner.run_all()
        self.assertIs(self.successResultOf(d), True)
        self.assertIs(self.successResultOf(repeat), False)
        self.assertEqual(self.created, [("clicks", 2)])

    def test_first_write_path_unchanged(self) -> None:
        """A first write still creates a topic with num_partitions and tells the listeners; no topics file."""
        manager = self.start(num_partitions=3)
        manager.get_or_create_log("views", 0)
        self.assertEqual(manager.topics(), {"views": 3})
        self.assertEqual(self.created, [("views", 3)])
        self.assertFalse(os.path.exists(os.path.join(self.log_dir, TOPICS_FILE)))

    def test_same_count_records_first_write_topic(self) -> None:
        """create_topic with the count a first write gave records it (False: not created), so it survives a
        change of num_partitions; the listeners are not told twice."""
        manager = self.start(num_partitions=3)
        manager.get_or_create_log("views", 0)
        self.assertIs(self.successResultOf(manager.create_topic("views", 3)), False)
        self.assertEqual(self.created, [("views", 3)])
        self.successResultOf(manager.stop())
        self.assertEqual(self.start(num_partitions=1).topics(), {"views": 3})

    def test_other_count_refused(self) -> None:
        """Another count for an existing topic raises TopicExists naming both counts; nothing changes."""
        manager = self.start(num_partitions=4)
        self.successResultOf(manager.create_topic("clicks", 2))
        e = self.assertRaises(TopicExists, manager.create_topic, "clicks", 4)
        self.assertIn("already has 2 partitions", str(e))
        self.assertEqual(manager.topics(), {"clicks": 2})

    def test_bad_names_and_counts(self) -> None:
        """An unsafe name is InvalidTopic; a count outside 1 to 1024 is InvalidRequest; nothing is created."""
        manager = self.start()
        self.assertRaises(InvalidTopic, manager.create_topic, "../x", 1)
        for count in (0, -3, 1025):
            self.assertRaises(InvalidRequest, manager.create_topic, "clicks", count)
        self.assertEqual(manager.topics(), {})
        self.assertEqual(os.listdir(self.log_dir), [".lock"])

    def test_closed_directory(self) -> None:
        """A manager that is not running refuses with BrokerShuttingDown."""
        manager = self.start()
        manager.close()
        self.assertRaises(BrokerShuttingDown, manager.create_topic, "clicks", 1)

    def test_save_failure_is_storage_failed(self) -> None:
        """A topics file that cannot be written fails the Deferred with StorageFailed; the topic stays usable."""
        runner = ManualRunner()
        manager = self.start(runner)
        d = manager.create_topic("clicks", 2)
        runner.fail_one(OSError(28, "No space left on device"))
        self.failureResultOf(d, StorageFailed)
        self.assertEqual(manager.topics(), {"clicks": 2})
        self.assertEqual(self.created, [("clicks", 2)])  # the logs exist, so the broker still registers them

    def test_corrupt_topics_file_refuses_start(self) -> None:
        """A topics file that is not what twlog writes stops the start with CorruptLog naming it."""
        os.makedirs(self.log_dir)
        for content in ("{", '{"partitions": {"a b": 1}}', '{"partitions": {"a": 0}}', "[]"):
            with open(os.path.join(self.log_dir, TOPICS_FILE), "w") as f:
                f.write(content)
            manager = LogManager(LogConfig(self.log_dir), Clock(), run_now)
            e = self.assertRaises(CorruptLog, manager.start)
            self.assertIn(TOPICS_FILE, str(e))
            self.assertFalse(manager.running)

    def test_missing_file_is_no_topics(self) -> None:
        """A directory without a topics file records no counts."""
        self.assertEqual(read_topics_file(self.mktemp()), {})


class PartitionCountsTests(SynchronousTestCase):
    """The counts alone, over a topics file on a manual thread pool."""

    def setUp(self) -> None:
        self.log_dir = self.mktemp()
        os.makedirs(self.log_dir)
        self.runner = ManualRunner()
        config = LogConfig(self.log_dir, num_partitions=3, topic_partitions={"wide": 8})
        self.counts = PartitionCounts(config, TopicsFile(self.log_dir, self.runner))
        self.counts.load()
        self.told: list[tuple[str, int]] = []
        self.counts.add_listener(lambda topic, count: self.told.append((topic, count)))

    def test_defaults_and_found_directories(self) -> None:
        """A topic no one wrote to would get its default; directories found raise the count to cover them."""
        self.assertEqual((self.counts.count("t"), self.counts.count("wide")), (3, 8))
        self.counts.found("t", 4)
        self.assertEqual(self.counts.topics(), {"t": 5})

    def test_first_write_tells_listeners_once(self) -> None:
        """A topic's first write records its count and tells the listeners; later writes do not."""
        self.counts.first_written("t", 3)
        self.counts.first_written("t", 3)
        self.assertEqual(self.told, [("t", 3)])

    def test_create_is_told_once_durable(self) -> None:
        """CREATE_TOPIC's count is checked, recorded in the file, and told once the save ends."""
        self.assertIsNone(self.counts.check_create("t", 2))
        d = self.counts.created("t", 2, [], new=True)
        self.assertEqual((self.counts.count("t"), self.told), (2, []))
        self.runner.run_one()
        self.assertIs(self.successResultOf(d), True)
        self.assertEqual(self.told, [("t", 2)])
        self.assertEqual(read_topics_file(self.log_dir), {"t": 2})
        self.assertEqual(self.counts.check_create("t", 2), 2)
        self.assertRaises(TopicExists, self.counts.check_create, "t", 3)
        self.assertRaises(InvalidRequest, self.counts.check_create, "u", 0)
