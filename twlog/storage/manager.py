# -*- test-case-name: tests.storage.test_manager -*-
"""The broker's log directory: every partition log in it, and the work that spans them.

L{LogManager} owns one log directory.  It opens (and, after an unclean
shutdown, recovers) every C{<topic>-<partition>} log in it, creates topics on
their first write or when asked (L{LogManager.create_topic}, whose partition
counts it keeps in L{twlog.storage.topics.TOPICS_FILE}), validates topic names so that no path escapes the
directory, runs retention periodically, and on a clean stop flushes every log
and leaves the clean-shutdown marker that lets the next start skip recovery.
It does no network or ZooKeeper work.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable
from functools import partial

from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.config import LogConfig
from twlog.errors import (
    BrokerShuttingDown,
    InvalidRequest,
    InvalidTopic,
    TopicExists,
    TwlogError,
    WrongPartition,
)
from twlog.storage.log import Log, ThreadRunner
from twlog.storage.segment import Segment
from twlog.storage.topics import MAX_PARTITIONS, TOPICS_FILE, TopicsFile, fsync_directory

__all__ = [
    "CLEAN_SHUTDOWN_MARKER", "LOCK_FILE", "MAX_PARTITIONS", "MAX_TOPIC_LENGTH", "TOPICS_FILE", "LogDirectoryInUse",
    "LogManager", "parse_partition_directory", "partition_directory", "thread_pool_runner", "validate_topic",
]

CLEAN_SHUTDOWN_MARKER = ".twlog-clean-shutdown"
LOCK_FILE = ".lock"
MAX_TOPIC_LENGTH = 249
_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")


def validate_topic(topic: str) -> str:
    """Return C{topic} if it is a safe directory name; raise L{InvalidTopic} naming what is wrong.

    Allowed: 1 to 249 of C{A-Z a-z 0-9 . _ -}, and not C{.} or C{..}.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopic("the topic name is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopic(f"the topic name is {len(topic)} characters long; the limit is {MAX_TOPIC_LENGTH}")
    if topic in (".", ".."):
        raise InvalidTopic(f"{topic!r} is not a valid topic name")
    if not _TOPIC.match(topic):
        raise InvalidTopic(f"the topic name {topic!r} may only contain letters, digits, '.', '_' and '-'")
    return topic


def partition_directory(topic: str, partition: int) -> str:
    """The directory name of a partition: C{<topic>-<partition>}."""
    return f"{topic}-{partition}"


def parse_partition_directory(name: str) -> tuple[str, int] | None:
    """The (topic, partition) a directory name encodes, or None if it is not a partition directory."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or number != str(int(number)):
        return None
    try:
        return validate_topic(topic), int(number)
    except InvalidTopic:
        return None


class LogDirectoryInUse(TwlogError):
    """Another process holds the log directory's lock."""


class LogManager:
    """All partition logs under C{config.log_dir}, and their recovery, retention and shutdown."""

    _log = Logger()

    def __init__(self, config: LogConfig, clock: IReactorTime, run_in_thread: ThreadRunner) -> None:
        self.config = config
        self._clock = clock
        self._run_in_thread = run_in_thread
        self._logs: dict[tuple[str, int], Log] = {}
        self._partition_counts: dict[str, int] = {}
        #: The counts of topics created with create_topic.
        self._topics_file = TopicsFile(config.log_dir, run_in_thread)
        self._lock_fd = -1
        self._retention = LoopingCall(self.run_retention)
        self._retention.clock = clock
        self.recovered = False
        self._topic_listeners: list = []
        self._flush_listeners: list = []
        self._flush_observer: Callable[[float, bool], object] | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Lock the directory, open every log in it (recovering them after an unclean stop), start retention.

        @raise LogDirectoryInUse: another broker runs on this directory.
        @raise CorruptLog: a partition cannot be opened safely.
        """
        log_dir = self.config.log_dir
        if self._lock_fd >= 0:
            raise LogDirectoryInUse(f"{log_dir} is already open in this log manager")
        os.makedirs(log_dir, exist_ok=True)
        lock_fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise LogDirectoryInUse(f"{log_dir} is in use by another twlog broker") from None
        self._lock_fd = lock_fd
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)
        clean = os.path.exists(marker)
        self.recovered = not clean
        try:
            created = self._topics_file.load(validate_topic)
            self._partition_counts.update(created)
            for name in sorted(os.listdir(log_dir)):
                path = os.path.join(log_dir, name)
                parsed = parse_partition_directory(name)
                if parsed is None or not os.path.isdir(path):
                    if not name.startswith(".") and os.path.isdir(path):
                        self._log.warn("ignoring {path}: not a <topic>-<partition> directory", path=path)
                    continue
                topic, partition = parsed
                self._logs[parsed] = self._open_log(path, parsed, recover=not clean)
                self._partition_counts[topic] = max(
                    self._partition_counts.get(topic, 0),
                    partition + 1,
                    created.get(topic) or self.config.partitions_for(topic),
                )
        except BaseException:
            self.close()
            raise
        if clean:
            os.unlink(marker)
            fsync_directory(log_dir)  # the marker must not come back after a power loss
        elif self._logs:
            self._log.info("{log_dir}: no clean-shutdown marker; recovered {count} logs",
                           log_dir=log_dir, count=len(self._logs))
        self._retention.start(self.config.retention_check_interval_ms / 1000, now=False)

    @property
    def running(self) -> bool:
        """Whether the directory is open (started and not yet stopped)."""
        return self._lock_fd >= 0

    def stop(self) -> Deferred[bool]:
        """Flush every log, close them, and leave the clean-shutdown marker; fire with whether that worked.

        Fires with False (never fails) when a flush or the marker failed: the
        logs are closed without the marker, so the next start recovers them.
        """
        if self._retention.running:
            self._retention.stop()
        d = self.flush_all()

        def flushed(_: object) -> bool:
            try:
                self.close(clean=True)
            except OSError:
                self._log.failure("leaving the clean-shutdown marker failed")
                self.close()
                return False
            return True

        def failed(failure) -> bool:
            if failure.check(FirstError):
                failure = failure.value.subFailure
            self._log.failure("flush at shutdown failed; leaving no clean-shutdown marker", failure)
            self.close()
            return False

        return d.addCallbacks(flushed, failed)

    def close(self, clean: bool = False) -> None:
        """Close every log and unlock the directory, at once, without flushing.

        With C{clean}, leave the clean-shutdown marker, so the next start skips
        recovery: only right after every log was flushed (as L{stop} does).
        Without it, the directory is left as a killed broker leaves it (what
        tests use to simulate a crash): unflushed appends stay in the files,
        and the next start recovers every log.
        """
        if self._retention.running:
            self._retention.stop()
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        if clean:
            with open(os.path.join(self.config.log_dir, CLEAN_SHUTDOWN_MARKER), "w"):
                pass
            fsync_directory(self.config.log_dir)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _open_log(self, path: str, key: tuple[str, int], recover: bool) -> Log:
        log = Log.open(path, self.config, self._clock, self._run_fsync, recover=recover)
        log.add_flush_listener(lambda log: self._flushed(key, log))
        return log

    def _flushed(self, key: tuple[str, int], log: Log) -> None:
        for listener in list(self._flush_listeners):
            try:
                listener(key[0], key[1], log)
            except Exception:
                self._log.failure("flush listener failed")

    # -- topics and partitions ---------------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic on this broker and its partition count."""
        return dict(self._partition_counts)

    def partition_count(self, topic: str) -> int:
        """The partitions C{topic} has here, or would get on its first write."""
        return self._partition_counts.get(topic) or self.config.partitions_for(topic)

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log of a partition, or None if nothing was written to it yet."""
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The log of a partition, created on the first write to it.

        @raise InvalidTopic: the name is unsafe as a directory name.
        @raise WrongPartition: C{partition} is outside the topic's partitions.
        """
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        if not self.running:
            raise BrokerShuttingDown(f"{self.config.log_dir} is not open (the broker is starting or stopping)")
        validate_topic(topic)
        count = self.partition_count(topic)
        if not 0 <= partition < count:
            raise WrongPartition(f"partition {partition} of {topic!r} is outside [0, {count - 1}]")
        path = os.path.join(self.config.log_dir, partition_directory(topic, partition))
        root = os.path.realpath(self.config.log_dir)
        if os.path.dirname(os.path.realpath(path)) != root:  # defence in depth; validate_topic forbids this
            raise InvalidTopic(f"the topic name {topic!r} would leave the log directory")
        new_topic = topic not in self._partition_counts
        log = self._logs[(topic, partition)] = self._open_log(path, (topic, partition), recover=False)
        self._partition_counts[topic] = count
        if new_topic:
            self._log.info("created topic {topic} with {count} partitions", topic=topic, count=count)
            for listener in list(self._topic_listeners):
                listener(topic, count)
        return log

    def create_topic(self, topic: str, partitions: int) -> Deferred[bool]:
        """Create C{topic} here with C{partitions} partitions, even below C{num_partitions}; fire once it is durable.

        Each partition gets its directory and empty first segment, as on a first write; the count is
        recorded in the L{TOPICS_FILE} (L{TopicsFile}), so a restart keeps it; then the topic
        listeners are told (registration in ZooKeeper).  The same count again changes nothing (fires
        with False, True when created), but records the count of a topic a first write made.

        @raise InvalidTopic: the name is unsafe as a directory name.
        @raise InvalidRequest: C{partitions} is outside 1 to L{MAX_PARTITIONS}.
        @raise TopicExists: the topic already has another number of partitions here.
        @raise BrokerShuttingDown: the directory is not open.
        """
        if not self.running:
            raise BrokerShuttingDown(f"{self.config.log_dir} is not open (the broker is starting or stopping)")
        validate_topic(topic)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidRequest(f"a topic has 1 to {MAX_PARTITIONS} partitions on a broker, not {partitions}")
        existing = self._partition_counts.get(topic)
        if existing is not None and existing != partitions:
            raise TopicExists(f"topic {topic!r} already has {existing} partitions on this broker, not {partitions}")
        directories = []
        if existing is None:
            directories = self._open_partitions(topic, partitions)
            self._partition_counts[topic] = partitions
            self._log.info("created topic {topic} with {count} partitions", topic=topic, count=partitions)
        if self._topics_file.counts.get(topic) == partitions:  # recorded already (or being recorded)
            return self._topics_file.saved().addCallback(lambda _: False)
        d = self._topics_file.record(topic, partitions, directories)
        if existing is None:
            d.addBoth(_announce, list(self._topic_listeners), topic, partitions)
        return d.addCallback(lambda _: existing is None)

    def _open_partitions(self, topic: str, partitions: int) -> list[str]:
        """Create the logs of a new topic's partitions; return their directories (none stay open on an error)."""
        keys = [(topic, partition) for partition in range(partitions)]
        try:
            for key in keys:
                path = os.path.join(self.config.log_dir, partition_directory(*key))
                self._logs[key] = self._open_log(path, key, recover=False)
        except BaseException:
            for log in filter(None, (self._logs.pop(key, None) for key in keys)):
                log.close()
            raise
        return [self._logs[key].directory for key in keys]

    def add_topic_listener(self, listener) -> None:
        """Call C{listener(topic, partition_count)} when a topic is created here (for registration)."""
        self._topic_listeners.append(listener)

    def add_flush_listener(self, listener) -> None:
        """Call C{listener(topic, partition, log)} whenever a log's flushed offset moves (wakes waiting fetches)."""
        self._flush_listeners.append(listener)

    def observe_flushes(self, observer: Callable[[float, bool], object] | None) -> None:
        """Call C{observer(seconds, ok)} as each flush's fsync ends, in every log (for the broker's metrics).

        C{seconds} is the time from handing the fsync to a pool thread to its end; C{ok} is
        False when it failed, or was put off for lack of descriptors.
        """
        self._flush_observer = observer

    def _run_fsync(self, f: Callable[..., object], *args: object) -> Deferred:
        """The logs' thread runner: a log runs only its fsyncs on the pool, so this is where they are timed."""
        d = self._run_in_thread(f, *args)
        if self._flush_observer is not None:
            d.addBoth(self._fsync_ended, self._clock.seconds())
        return d

    def _fsync_ended(self, result: object, started: float) -> object:
        observer = self._flush_observer
        try:
            if observer is not None:
                observer(max(self._clock.seconds() - started, 0.0), not isinstance(result, Failure))
        except Exception:
            self._log.failure("flush observer failed")
        return result

    def logs(self) -> dict[tuple[str, int], Log]:
        """Every open log, by (topic, partition)."""
        return dict(self._logs)

    # -- flushing and retention --------------------------------------------

    def flush_all(self) -> Deferred[list]:
        """Flush every log; fire when all their fsyncs are done."""
        return gatherResults([log.flush() for log in self._logs.values()], consumeErrors=True)

    def run_retention(self) -> Deferred[int]:
        """Delete, in a pool thread, the segments that retention expires; fire with how many went."""
        now_ms = int(self._clock.seconds() * 1000)
        runs: list[Deferred[int]] = []
        for log in self._logs.values():
            try:
                expired = log.expire_segments(now_ms)
            except Exception:  # one bad partition must not stop retention for the others
                self._log.failure("retention failed in {directory}", directory=log.directory)
                continue
            if expired:
                for segment in expired:
                    self._log.info("retention deletes {path}", path=segment.path)
                d = self._run_in_thread(_delete_segments, expired)
                runs.append(d.addCallbacks(self._deleted, self._deletion_failed, callbackArgs=(expired,)))
        if not runs:
            return succeed(0)
        return gatherResults(runs).addCallback(sum)

    def _deleted(self, deleted: int, expired: list[Segment]) -> int:
        if deleted < len(expired):
            self._log.warn(
                "retention could not delete {path}; it and {left} newer expired segments stay on disk"
                " until the next start",
                path=expired[deleted].path, left=len(expired) - deleted - 1,
            )
        return deleted

    def _deletion_failed(self, failure) -> int:
        self._log.failure("retention failed to delete segments", failure)
        return 0


def _announce(result: object, listeners: list, topic: str, count: int) -> object:
    """Tell the topic listeners of a topic L{LogManager.create_topic} made (its logs exist, saved or not)."""
    for listener in listeners:
        try:
            listener(topic, count)
        except Exception:
            LogManager._log.failure("topic listener failed")
    return result


def _delete_segments(segments: list[Segment]) -> int:
    """Unlink expired segments oldest first, stopping at the first failure; return how many went.

    Deleting in order, one at a time, means a crash or an error leaves a
    contiguous log behind: never a gap that a restart would refuse to open.
    A segment's descriptor stays open until nothing refers to it.
    """
    for deleted, segment in enumerate(segments):
        try:
            os.unlink(segment.path)
        except FileNotFoundError:
            pass
        except OSError:
            return deleted
    return len(segments)


def thread_pool_runner(reactor) -> ThreadRunner:
    """The default L{ThreadRunner}: the reactor's thread pool."""
    return partial(deferToThreadPool, reactor, reactor.getThreadPool())
