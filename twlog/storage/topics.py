# -*- test-case-name: tests.storage.test_topics -*-
"""The partition counts of created topics, kept in one file of the log directory.

A topic made by a first write gets C{num_partitions} (or its C{topic_partitions}
entry), and a restart recounts it from its directories.  A topic made by
CREATE_TOPIC may have fewer partitions than that, so its count is recorded in
C{<log-dir>/.twlog-topics} (JSON: C{{"version": 1, "partitions": {"clicks": 2}}}),
which L{TopicsFile} replaces atomically (temporary file, fsync, rename, fsync of
the directory) on the thread pool, one save at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable

from twisted.internet.defer import Deferred, DeferredLock, succeed
from twisted.python.failure import Failure

from twlog.errors import CorruptLog, StorageFailed
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

    def _save(self, directories: list[str]) -> Deferred[None]:
        d = self._run_in_thread(write_topics_file, self.log_dir, dict(self.counts), directories)

        def failed(failure: Failure) -> None:
            failure.trap(OSError)
            raise StorageFailed(f"cannot record the topics' partition counts in {self.log_dir}: {failure.value}")

        return d.addErrback(failed)
