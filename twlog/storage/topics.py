# -*- test-case-name: tests.storage.test_topics -*-
"""How many partitions each topic has on a broker (L{PartitionCounts}); the created ones kept in one file.

A topic made by a first write gets C{num_partitions} (or its C{topic_partitions}
entry), and a restart recounts it from its directories.  A topic made by
CREATE_TOPIC may have fewer partitions than that, so its count is recorded in
C{<log-dir>/.twlog-topics} (JSON: C{{"version": 1, "partitions": {"clicks": 2}}}),
which L{TopicsFile} replaces atomically (temporary file, fsync, rename, fsync of
the directory) on the thread pool, one save at a time.  L{PartitionCounts}
keeps every topic's count and tells its listeners (the broker's registration
in ZooKeeper) of each new topic.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable

from twisted.internet.defer import Deferred, DeferredLock, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.config import LogConfig
from twlog.errors import CorruptLog, InvalidRequest, StorageFailed, TopicExists
from twlog.storage.flush import ThreadRunner

TOPICS_FILE = ".twlog-topics"
#: The most partitions one topic may have on one broker (each keeps a segment file descriptor open).
MAX_PARTITIONS = 1024


def fsync_directory(path: str) -> None:
    """Make a directory's entries (a created, renamed or removed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_topics_file(log_dir: str, check_name: Callable[[str], object] = str) -> dict[str, int]:
    """The counts the L{TOPICS_FILE} of C{log_dir} records (none when it is missing); blocking.

    @param check_name: raises for a topic name that is not valid.
    @raise CorruptLog: the file cannot be read or is not what L{write_topics_file} writes.
    """
    path = os.path.join(log_dir, TOPICS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise CorruptLog(f"{path} cannot be read ({e}); restore it or move it away to start") from None
    counts = data.get("partitions") if isinstance(data, dict) else None
    try:
        if not isinstance(counts, dict):
            raise ValueError("no partitions object")
        for topic, count in counts.items():
            check_name(topic)
            if not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
                raise ValueError(f"bad count {count!r} for {topic!r}")
    except Exception as e:
        raise CorruptLog(f"{path} is not a twlog topics file ({e}); restore it or move it away to start") from None
    return counts


def write_topics_file(log_dir: str, counts: dict[str, int], new_directories: Iterable[str] = ()) -> None:
    """Make C{new_directories}' entries durable, then replace the L{TOPICS_FILE} with C{counts}; blocking.

    The file is written under a temporary name, fsynced and renamed into place, and the log
    directory fsynced: a crash leaves the old file or the new one, never a mix.
    """
    for directory in new_directories:
        fsync_directory(directory)
    path = os.path.join(log_dir, TOPICS_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "partitions": dict(sorted(counts.items()))}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_directory(log_dir)


class TopicsFile:
    """The L{TOPICS_FILE} of one log directory: read at start, saved on the thread pool, one save at a time."""

    def __init__(self, log_dir: str, run_in_thread: ThreadRunner) -> None:
        self.log_dir = log_dir
        self._run_in_thread = run_in_thread
        self._lock = DeferredLock()
        #: Every recorded count (those being saved included).
        self.counts: dict[str, int] = {}

    def load(self, check_name: Callable[[str], object] = str) -> dict[str, int]:
        """Read the file (blocking: at start); return its counts."""
        self.counts = read_topics_file(self.log_dir, check_name)
        return dict(self.counts)

    def saved(self) -> Deferred[None]:
        """Fire once the saves begun so far have ended (with no result: they report their own failures)."""
        return self._lock.run(succeed, None)

    def record(self, topic: str, count: int, new_directories: Iterable[str] = ()) -> Deferred[None]:
        """Record C{topic}'s C{count} and save the file (fsyncing C{new_directories} first).

        @return: fires when the file is durable; fails with L{StorageFailed} when it could not be written.
        """
        self.counts[topic] = count
        return self._lock.run(self._save, list(new_directories))

    def forget(self, topic: str) -> Deferred[None]:
        """Remove C{topic}'s count (a deleted topic) and save the file, if it recorded one.

        @return: fires when the file is durable; fails with L{StorageFailed} when it could not be written.
        """
        if self.counts.pop(topic, None) is None:
            return self.saved()
        return self._lock.run(self._save, [])

    def _save(self, directories: list[str]) -> Deferred[None]:
        d = self._run_in_thread(write_topics_file, self.log_dir, dict(self.counts), directories)

        def failed(failure: Failure) -> None:
            failure.trap(OSError)
            raise StorageFailed(f"cannot record the topics' partition counts in {self.log_dir}: {failure.value}")

        return d.addErrback(failed)


#: Told C{(topic, partition_count)} when a topic is created on this broker.
TopicListener = Callable[[str, int], object]


class PartitionCounts:
    """Every topic's partition count on one broker, and the listeners told of each new topic.

    A topic's count is the one CREATE_TOPIC recorded (in the L{TopicsFile}),
    else the configured default (C{LogConfig.partitions_for}), and at least
    enough to cover every partition directory found at start.  A topic no one
    wrote to yet would get the default (L{count}).
    """

    _log = Logger()

    def __init__(self, config: LogConfig, topics_file: TopicsFile) -> None:
        self._config = config
        self._file = topics_file
        self._counts: dict[str, int] = {}
        self._recorded: dict[str, int] = {}
        self._listeners: list[TopicListener] = []

    def load(self, check_name: Callable[[str], object] = str) -> None:
        """Read the recorded counts (blocking: at start).

        @raise CorruptLog: the file cannot be read.
        """
        self._recorded = self._file.load(check_name)
        self._counts.update(self._recorded)

    def found(self, topic: str, partition: int) -> None:
        """Count a partition directory found at start."""
        self._counts[topic] = max(
            self._counts.get(topic, 0), partition + 1, self._recorded.get(topic) or self._config.partitions_for(topic)
        )

    def topics(self) -> dict[str, int]:
        """Every topic on this broker and its partition count."""
        return dict(self._counts)

    def count(self, topic: str) -> int:
        """The partitions C{topic} has here, or would get on its first write."""
        return self._counts.get(topic) or self._config.partitions_for(topic)

    def first_written(self, topic: str, count: int) -> None:
        """A write created one of C{topic}'s partitions: a new topic gets C{count} and its listeners are told."""
        if topic in self._counts:
            return
        self._counts[topic] = count
        self._log.info("created topic {topic} with {count} partitions", topic=topic, count=count)
        for listener in list(self._listeners):
            listener(topic, count)

    def replicated(self, topic: str, partitions: int) -> None:
        """C{topic} is a replicated topic of C{partitions} partitions in all: its replicas here are made without
        telling the listeners (the controller's state, not a registration, says who leads each)."""
        self._counts[topic] = max(self._counts.get(topic, 0), partitions)

    def check_create(self, topic: str, partitions: int) -> int | None:
        """Whether CREATE_TOPIC may give C{topic} C{partitions} partitions: the count it has now, if any.

        @raise InvalidRequest: C{partitions} is outside 1 to L{MAX_PARTITIONS}.
        @raise TopicExists: the topic already has another number of partitions here.
        """
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidRequest(f"a topic has 1 to {MAX_PARTITIONS} partitions on a broker, not {partitions}")
        existing = self._counts.get(topic)
        if existing is not None and existing != partitions:
            raise TopicExists(f"topic {topic!r} already has {existing} partitions on this broker, not {partitions}")
        return existing

    def created(self, topic: str, partitions: int, new_directories: list[str], new: bool) -> Deferred[bool]:
        """Record a topic CREATE_TOPIC made (C{new}) or asked for again; fire with C{new} once the count is durable.

        A new topic's listeners are told once the save ends, saved or not (its logs exist either way).
        """
        if new:
            self._counts[topic] = partitions
            self._log.info("created topic {topic} with {count} partitions", topic=topic, count=partitions)
        if self._file.counts.get(topic) == partitions:  # recorded already (or being recorded)
            return self._file.saved().addCallback(lambda _: False)
        d = self._file.record(topic, partitions, new_directories)
        if new:
            d.addBoth(self._announce, list(self._listeners), topic, partitions)
        return d.addCallback(lambda _: new)

    def deleted(self, topic: str) -> Deferred[None]:
        """Forget C{topic} (deleted here): a write creates it again with the default count; fire once the
        L{TOPICS_FILE} no longer records it."""
        self._counts.pop(topic, None)
        self._recorded.pop(topic, None)
        return self._file.forget(topic)

    def add_listener(self, listener: TopicListener) -> None:
        """Call C{listener(topic, partition_count)} when a topic is created here (for registration)."""
        self._listeners.append(listener)

    def _announce(self, result: object, listeners: list[TopicListener], topic: str, count: int) -> object:
        for listener in listeners:
            try:
                listener(topic, count)
            except Exception:
                self._log.failure("topic listener failed")
        return result
