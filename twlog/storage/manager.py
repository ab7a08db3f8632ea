# -*- test-case-name: tests.storage.test_manager -*-
"""The broker's log directory: every partition log in it, opened and created here.

L{LogManager} owns one log directory.  Its own job is the partition logs:
opening (and, after an unclean shutdown, recovering) every
C{<topic>-<partition>} log at start, creating logs on a partition's first
write or when CREATE_TOPIC asks, and closing them, flushed, at a clean stop.
It puts together the units that do the rest: the directory's lock and
clean-shutdown marker (L{twlog.storage.directory}), every topic's partition
count (L{PartitionCounts}, with the L{TOPICS_FILE}), the periodic retention
run (L{Retention}) and the timing of fsyncs for metrics (L{TimedRunner}).
It does no network or ZooKeeper work.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from functools import partial

from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from twlog.config import LogConfig
from twlog.errors import BrokerShuttingDown, InvalidTopic, StorageFailed, TopicDeleted, WrongPartition
from twlog.storage.directory import (
    CLEAN_SHUTDOWN_MARKER,
    LOCK_FILE,
    MAX_TOPIC_LENGTH,
    CleanShutdownMarker,
    DirectoryLock,
    LogDirectoryInUse,
    parse_partition_directory,
    partition_directory,
    validate_topic,
)
from twlog.storage.failures import describe
from twlog.storage.flush import TimedRunner
from twlog.storage.log import Log, ThreadRunner
from twlog.storage.retention import Retention
from twlog.storage.topics import MAX_PARTITIONS, TOPICS_FILE, PartitionCounts, TopicsFile

__all__ = [
    "CLEAN_SHUTDOWN_MARKER", "LOCK_FILE", "MAX_PARTITIONS", "MAX_TOPIC_LENGTH", "TOPICS_FILE", "LogDirectoryInUse",
    "LogManager", "parse_partition_directory", "partition_directory", "thread_pool_runner", "validate_topic",
]


class LogManager:
    """All partition logs under C{config.log_dir}: opened at L{start}, created on demand, closed at L{stop}."""

    _log = Logger()

    def __init__(self, config: LogConfig, clock: IReactorTime, run_in_thread: ThreadRunner) -> None:
        self.config = config
        self._clock = clock
        self._logs: dict[tuple[str, int], Log] = {}
        #: Partitions whose log could not be created (disk full, ...): not tried again before this clock time.
        self._create_retry_at: dict[tuple[str, int], float] = {}
        self._lock = DirectoryLock(config.log_dir)
        self._marker = CleanShutdownMarker(config.log_dir)
        self._counts = PartitionCounts(config, TopicsFile(config.log_dir, run_in_thread))
        self._retention = Retention(self._logs.values, clock, run_in_thread,
                                    config.retention_check_interval_ms / 1000)
        self._fsyncs = TimedRunner(run_in_thread, clock)
        self._flush_listeners: list = []
        self._delete_listeners: list[Callable[[str], object]] = []
        self._run_in_thread = run_in_thread
        #: Topics deleted since the start and not made again since (a fetch of them gets TopicDeleted).
        self.deleted: set[str] = set()
        self.recovered = False

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Lock the directory, open every log in it (recovering them after an unclean stop), start retention.

        @raise LogDirectoryInUse: another broker runs on this directory.
        @raise CorruptLog: a partition cannot be opened safely.
        """
        self._lock.acquire()
        clean = self._marker.present()
        self.recovered = not clean
        try:
            self._open_all(recover=not clean)
        except BaseException:
            self.close()
            raise
        if clean:
            self._marker.remove()
        elif self._logs:
            self._log.info("{log_dir}: no clean-shutdown marker; recovered {count} logs",
                           log_dir=self.config.log_dir, count=len(self._logs))
        self._retention.start()

    def _open_all(self, recover: bool) -> None:
        """Read the partition counts and open every C{<topic>-<partition>} directory of the log directory."""
        log_dir = self.config.log_dir
        self._counts.load(validate_topic)
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if name.startswith(DELETED_PREFIX) and os.path.isdir(path):  # a delete the last run did not finish
                _remove_trees([path])
                continue
            parsed = parse_partition_directory(name)
            if parsed is None or not os.path.isdir(path):
                if not name.startswith(".") and os.path.isdir(path):
                    self._log.warn("ignoring {path}: not a <topic>-<partition> directory", path=path)
                continue
            self._logs[parsed] = self._open_log(path, parsed, recover=recover)
            self._counts.found(*parsed)

    @property
    def running(self) -> bool:
        """Whether the directory is open (started and not yet stopped)."""
        return self._lock.held

    def stop(self) -> Deferred[bool]:
        """Flush every log, close them, and leave the clean-shutdown marker; fire with whether that worked.

        Fires with False (never fails) when a flush or the marker failed: the
        logs are closed without the marker, so the next start recovers them.
        """
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
        self._retention.stop()
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        if clean:
            self._marker.leave()
        self._lock.release()

    # -- the logs ----------------------------------------------------------

    def _open_log(self, path: str, key: tuple[str, int], recover: bool) -> Log:
        log = Log.open(path, self.config, self._clock, self._fsyncs, recover=recover)
        log.add_flush_listener(lambda log: self._flushed(key, log))
        return log

    def _flushed(self, key: tuple[str, int], log: Log) -> None:
        for listener in list(self._flush_listeners):
            try:
                listener(key[0], key[1], log)
            except Exception:
                self._log.failure("flush listener failed")

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log of a partition, or None if nothing was written to it yet."""
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The log of a partition, created on the first write to it.

        @raise InvalidTopic: the name is unsafe as a directory name.
        @raise WrongPartition: C{partition} is outside the topic's partitions.
        @raise TooManyOpenFiles: no descriptor for its first segment (nothing created; retry).
        @raise StorageFailed: it could not be created (disk full, ...), now or in the last C{storage_retry_s}.
        """
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        self._check_running()
        validate_topic(topic)
        count = self.partition_count(topic)
        if not 0 <= partition < count:
            raise WrongPartition(f"partition {partition} of {topic!r} is outside [0, {count - 1}]")
        path = os.path.join(self.config.log_dir, partition_directory(topic, partition))
        root = os.path.realpath(self.config.log_dir)
        if os.path.dirname(os.path.realpath(path)) != root:  # defence in depth; validate_topic forbids this
            raise InvalidTopic(f"the topic name {topic!r} would leave the log directory")
        log = self._logs[(topic, partition)] = self._create_log(path, (topic, partition))
        self.deleted.discard(topic)
        self._counts.first_written(topic, count)
        return log

    def open_replica(self, topic: str, partition: int, partitions: int) -> Log:
        """A replicated topic's log (C{partitions} in all), made unannounced; raises as L{get_or_create_log}."""
        self._counts.replicated(topic, partitions)
        return self.get_or_create_log(topic, partition)

    def _create_log(self, path: str, key: tuple[str, int]) -> Log:
        """Open a new partition's log; an OS error is StorageFailed in one line, not retried for a while."""
        wait = self._create_retry_at.get(key, 0.0) - self._clock.seconds()
        if wait > 0:
            raise StorageFailed(f"{path} could not be created; not trying again for {wait:.1f} s")
        try:
            log = self._open_log(path, key, recover=False)
        except OSError as e:
            self._create_retry_at[key] = self._clock.seconds() + self.config.storage_retry_s
            message = f"creating {path} failed: {describe(e)}"
            self._log.warn("{cause}; trying again in {retry} s", cause=message, retry=self.config.storage_retry_s)
            raise StorageFailed(f"{message}; nothing was written") from None
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
        self._check_running()
        validate_topic(topic)
        existing = self._counts.check_create(topic, partitions)
        directories = self._open_partitions(topic, partitions) if existing is None else []
        self.deleted.discard(topic)
        return self._counts.created(topic, partitions, directories, new=existing is None)

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

    def delete_topic(self, topic: str) -> Deferred[int]:
        """Delete C{topic} here: its logs, its recorded count; fire with how many partition logs went.

        At once (on the reactor): the logs leave the directory's table, so no request finds them any
        more; each is abandoned (L{Log.abandon}: an acknowledged produce still waiting for its flush
        gets L{TopicDeleted}); each directory is renamed out of the way (C{.deleted-<topic>-<n>-<ms>},
        which a start skips and removes); the topic is remembered as deleted (L{deleted}: a fetch of
        it gets L{TopicDeleted} until a write or CREATE_TOPIC makes it again); the delete listeners
        are told (waiting fetches, the ZooKeeper registration).  Then, on the thread pool, the
        renamed directories are removed, and the count is taken out of the L{TOPICS_FILE}; the
        Deferred fires once that is durable.  A topic this broker does not hold fires with 0.

        @raise InvalidTopic: the name is not a valid topic name.
        @raise StorageFailed: a directory could not be renamed (the topic's other logs are deleted).
        @raise BrokerShuttingDown: the directory is not open.
        """
        self._check_running()
        validate_topic(topic)
        keys = sorted(key for key in self._logs if key[0] == topic)
        if not keys and topic not in self._counts.topics():
            return succeed(0)
        error = TopicDeleted(f"topic {topic!r} was deleted on this broker")
        now_ms = int(self._clock.seconds() * 1000)
        moved, failed = [], []
        for key in keys:
            log = self._logs.pop(key)
            log.abandon(error)
            trash = os.path.join(self.config.log_dir, f"{DELETED_PREFIX}{partition_directory(*key)}-{now_ms}")
            try:
                os.rename(log.directory, trash)
                moved.append(trash)
            except OSError as e:
                failed.append(f"{log.directory} ({e.strerror or e})")
        self.deleted.add(topic)
        self._log.info("deleting topic {topic}: {count} partition logs", topic=topic, count=len(keys))
        for listener in list(self._delete_listeners):
            try:
                listener(topic)
            except Exception:
                self._log.failure("topic delete listener failed")
        d = self._run_in_thread(_remove_trees, moved)
        d.addErrback(lambda f: self._log.failure("removing the logs of deleted topic {topic} failed", f,
                                                 topic=topic))
        d.addCallback(lambda _: self._counts.deleted(topic))

        def done(_: object) -> int:
            if failed:
                raise StorageFailed(f"topic {topic!r}: could not move away {', '.join(failed)}")
            return len(keys)

        return d.addCallback(done)

    def _check_running(self) -> None:
        if not self.running:
            raise BrokerShuttingDown(f"{self.config.log_dir} is not open (the broker is starting or stopping)")

    def logs(self) -> dict[tuple[str, int], Log]:
        """Every open log, by (topic, partition)."""
        return dict(self._logs)

    def flush_all(self) -> Deferred[list]:
        return gatherResults([log.flush() for log in self._logs.values()], consumeErrors=True)  # (all fsyncs done)

    def run_retention(self) -> Deferred[int]:
        return self._retention.run()  # (in a pool thread: fires with how many segments went, L{Retention})

    # -- topics, and who hears of changes ------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic on this broker and its partition count."""
        return self._counts.topics()

    def partition_count(self, topic: str) -> int:
        """The partitions C{topic} has here, or would get on its first write."""
        return self._counts.count(topic)

    def add_topic_listener(self, listener) -> None:
        """Call C{listener(topic, partition_count)} when a topic is created here (for registration)."""
        self._counts.add_listener(listener)

    def add_delete_listener(self, listener: Callable[[str], object]) -> None:
        """Call C{listener(topic)} when a topic is deleted here (its logs are gone from the table already)."""
        self._delete_listeners.append(listener)

    def add_flush_listener(self, listener) -> None:
        """Call C{listener(topic, partition, log)} whenever a log's flushed offset moves (wakes waiting fetches)."""
        self._flush_listeners.append(listener)

    def observe_flushes(self, observer: Callable[[float, bool], object] | None) -> None:
        """Call C{observer(seconds, ok)} as each flush's fsync ends, in every log (for the broker's metrics):
        C{seconds} from handing it to a pool thread to its end; C{ok} False if it failed or was put off."""
        self._fsyncs.observer = observer


#: How a deleted topic's partition directories are renamed before they are removed.
DELETED_PREFIX = ".deleted-"


def _remove_trees(paths: list[str]) -> None:
    """Remove the renamed directories of a deleted topic (blocking: on the thread pool, or at start)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def thread_pool_runner(reactor) -> ThreadRunner:
    """The default L{ThreadRunner}: the reactor's thread pool."""
    return partial(deferToThreadPool, reactor, reactor.getThreadPool())
