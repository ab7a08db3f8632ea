# -*- test-case-name: tests.storage.test_directory -*-
"""What a log directory holds and who may use it: partition directory names, the lock, the clean-shutdown marker.

A log directory holds one C{<topic>-<partition>} directory per partition
(L{partition_directory}; L{validate_topic} keeps every name inside the log
directory), a lock file that one broker at a time holds (L{DirectoryLock}),
and, between a clean stop and the next start, a marker saying every log was
flushed, so that the start skips recovery (L{CleanShutdownMarker}).
"""

from __future__ import annotations

import fcntl
import os
import re

from twlog.errors import InvalidTopic, TwlogError
from twlog.storage.topics import fsync_directory

__all__ = [
    "CLEAN_SHUTDOWN_MARKER", "LOCK_FILE", "MAX_TOPIC_LENGTH", "CleanShutdownMarker", "DirectoryLock",
    "LogDirectoryInUse", "parse_partition_directory", "partition_directory", "validate_topic",
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


class DirectoryLock:
    """The exclusive lock on C{<log_dir>/.lock} (C{flock}) that keeps a second broker off a log directory.

    The kernel drops the lock when the process dies, so a crash never leaves a stale lock behind.
    """

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self._fd = -1

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd >= 0

    def acquire(self) -> None:
        """Take the lock, creating the directory and the lock file if missing.

        @raise LogDirectoryInUse: this object or another process holds it already.
        """
        if self.held:
            raise LogDirectoryInUse(f"{self.log_dir} is already open in this log manager")
        os.makedirs(self.log_dir, exist_ok=True)
        fd = os.open(os.path.join(self.log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirectoryInUse(f"{self.log_dir} is in use by another twlog broker") from None
        self._fd = fd

    def release(self) -> None:
        """Let the lock go (nothing when it is not held)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class CleanShutdownMarker:
    """The file a clean stop leaves in a log directory (every log flushed), so the next start skips recovery.

    A start removes it before taking writes: a crash after that start must be recovered.
    """

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)

    def present(self) -> bool:
        """Whether the last stop was clean."""
        return os.path.exists(self.path)

    def remove(self) -> None:
        """Remove the marker, durably: it must not come back after a power loss."""
        os.unlink(self.path)
        fsync_directory(self.log_dir)

    def leave(self) -> None:
        """Write the marker, durably (only right after every log was flushed)."""
        with open(self.path, "w"):
            pass
        fsync_directory(self.log_dir)
