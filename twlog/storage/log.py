# -*- test-case-name: tests.storage.test_log -*-
"""One partition's log: a directory of segments addressed by byte offsets.

Appends go to the last (active) segment and roll to a new one at the
configured size.  A flush fsyncs on a pool thread, never on the reactor, and
only then moves the flushed mark that bounds what readers and OFFSETS see.
The in-memory index is the sorted list of segment base offsets, searched by
bisection; there is no other index and no message cache.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable
from typing import Any, NamedTuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.config import LogConfig
from twlog.errors import (
    CorruptLog,
    FetchSizeTooSmall,
    InvalidFetchSize,
    MessageSizeTooLarge,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    StorageFailed,
)
from twlog.storage.message import MIN_MESSAGE_BYTES, scan, validate_message_set
from twlog.storage.segment import FileRegion, Segment, parse_segment_name

#: Runs a blocking callable on a pool thread and returns a Deferred of its result.
ThreadRunner = Callable[..., Deferred]

#: OFFSETS' special times, as in Kafka 0.7.
LATEST_TIME = -1
EARLIEST_TIME = -2

_RECOVERY_CHUNK = 8 * 1024 * 1024


class AppendResult(NamedTuple):
    """Where an append landed: the offset of its first message, the offset after it, and how many messages."""

    offset: int
    next_offset: int
    count: int


class Truncation(NamedTuple):
    """What recovery cut from a segment: from which logical offset, how many bytes, and why."""

    path: str
    offset: int
    removed_bytes: int
    reason: str


def _fsync_all(segments: list[Segment], directories: list[str]) -> None:
    for segment in segments:
        segment.fsync()
    for directory in directories:  # new segment files' names must survive a power loss too
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Log:
    """The append-only log of one partition: C{<log_dir>/<topic>-<partition>/}.

    Offsets visible to readers stop at L{flushed_offset}; L{end_offset} is
    where the next append lands.  Create one with L{Log.open}.
    """

    _log = Logger()

    def __init__(
        self,
        directory: str,
        segments: list[Segment],
        config: LogConfig,
        clock: IReactorTime,
        run_in_thread: ThreadRunner,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._config = config
        self._max_message_bytes = min(config.max_message_bytes, config.segment_bytes)
        self._clock = clock
        self._run_in_thread = run_in_thread
        self.flushed_offset = segments[-1].end_offset
        self._unflushed_messages = 0
        self._dirty: list[Segment] = []
        self._flush_timer: IDelayedCall | None = None
        self._flush_in_flight = False
        self._flush_again = False
        self._flush_waiters: list[Deferred[int]] = []
        self._flush_listeners: list[Callable[[Log], Any]] = []
        #: Directories to fsync at the next flush (after a segment was created in them).
        self._sync_directories: set[str] = set()
        #: Set when a write or fsync failed: the log takes no more appends and its flushed
        #: offset no longer moves (a retried fsync can succeed for data the kernel dropped).
        self.failed: Exception | None = None
        self.closed = False

    # -- opening and recovery ----------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        config: LogConfig,
        clock: IReactorTime,
        run_in_thread: ThreadRunner,
        recover: bool = True,
    ) -> "Log":
        """Open the log in C{directory} (created if missing), recovering its last segment if asked.

        Recovery scans the last segment and truncates it at the first short,
        partial or CRC-invalid entry; segments must be contiguous.

        @raise CorruptLog: segments leave a gap or overlap.
        """
        parent_created = not os.path.isdir(directory)
        os.makedirs(directory, exist_ok=True)
        bases = sorted(
            base for base in (parse_segment_name(name) for name in os.listdir(directory)) if base is not None
        )
        segments = [Segment.open(directory, base) for base in bases] or [Segment.open(directory, 0, create=True)]
        try:
            for before, after in zip(segments, segments[1:]):
                if before.end_offset != after.base_offset:
                    raise CorruptLog(
                        f"{directory}: segment {os.path.basename(before.path)} ends at offset {before.end_offset}"
                        f" but the next segment starts at {after.base_offset}; move the damaged segments"
                        " away to open this partition"
                    )
            log = cls(directory, segments, config, clock, run_in_thread)
            if not bases:  # a new segment file (and maybe a new directory) to make durable
                log._sync_directories.add(directory)
                if parent_created:
                    log._sync_directories.add(os.path.dirname(os.path.abspath(directory)))
            if recover:
                truncation = log._recover_last_segment()
                if truncation is not None:
                    cls._log.warn(
                        "recovery truncated {removed_bytes} bytes from {path} at offset {offset}: {reason}",
                        removed_bytes=truncation.removed_bytes,
                        path=truncation.path,
                        offset=truncation.offset,
                        reason=truncation.reason,
                    )
                log.last_truncation = truncation
            return log
        except BaseException:
            for segment in segments:
                segment.close()
            raise

    last_truncation: Truncation | None = None

    def _recover_last_segment(self) -> Truncation | None:
        """Truncate the active segment after its last whole, valid message."""
        segment = self._segments[-1]
        file_size = segment.size
        limit = self._config.segment_bytes
        valid = 0  # file position up to which entries are whole and valid
        pending = b""
        read_pos = 0
        problem = None
        while valid < file_size:
            chunk = segment.pread(read_pos, _RECOVERY_CHUNK) if read_pos < file_size else b""
            read_pos += len(chunk)
            buf = pending + chunk if pending else chunk
            result = scan(buf, limit, origin=valid)
            valid += result.valid_bytes
            if result.problem is None:
                pending = b""
                if not chunk:
                    break
                continue
            if result.needed and valid + result.needed <= file_size and read_pos < file_size:
                pending = buf[result.valid_bytes :]  # the entry continues in the next chunk
                continue
            problem = result.problem
            break
        if valid == file_size:
            return None
        if problem is None:
            problem = "partial message at the end of the file"
        removed = file_size - valid
        segment.truncate(valid)
        self.flushed_offset = segment.end_offset
        return Truncation(segment.path, segment.base_offset + valid, removed, problem)

    # -- positions ---------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The offset of the first byte still on disk."""
        return self._bases[0]

    @property
    def end_offset(self) -> int:
        """The offset the next append gets (flushed or not)."""
        return self._segments[-1].end_offset

    @property
    def segments(self) -> list[Segment]:
        """The segments, oldest first (a copy)."""
        return list(self._segments)

    def size_bytes(self) -> int:
        """Bytes on disk over all segments."""
        return sum(s.size for s in self._segments)

    # -- appending ---------------------------------------------------------

    def append(self, message_set: bytes | bytearray | memoryview, count: int | None = None) -> AppendResult:
        """Validate C{message_set} (whole entries, sizes, CRCs) and append it to the active segment.

        The write goes to the page cache at once; the fsync that makes it
        visible to readers is scheduled by the flush policy, and this call
        never waits for it.  C{count} skips validation, for sets the caller
        has already validated.

        @raise InvalidMessage: the set is malformed; nothing is written.
        @raise MessageSizeTooLarge: the set cannot fit in one segment.
        """
        if self.closed:
            raise RuntimeError(f"{self.directory} is closed")
        if self.failed is not None:
            raise StorageFailed(f"{self.directory} failed ({self.failed}); restart the broker to recover it")
        size = len(message_set)
        if size > self._config.segment_bytes:
            raise MessageSizeTooLarge(
                f"a message set of {size} bytes does not fit in a segment of {self._config.segment_bytes} bytes"
            )
        if count is None:
            count = validate_message_set(message_set, self._max_message_bytes)
        if count == 0:
            return AppendResult(self.end_offset, self.end_offset, 0)
        active = self._segments[-1]
        if active.size and active.size + size > self._config.segment_bytes:
            active = self._roll()
        offset = active.end_offset
        try:
            active.append(message_set)
        except OSError as e:
            self._fail(e)
            raise StorageFailed(f"writing to {active.path} failed: {e.strerror or e}") from None
        if not self._dirty or self._dirty[-1] is not active:
            self._dirty.append(active)
        self._unflushed_messages += count
        if self._unflushed_messages >= self._config.flush_messages:
            self._flush_in_background()
        elif self._flush_timer is None:
            self._flush_timer = self._clock.callLater(self._config.flush_interval_ms / 1000, self._timed_flush)
        return AppendResult(offset, active.end_offset, count)

    def _roll(self) -> Segment:
        """Start a new active segment at the current end."""
        self._segments[-1].write_out()
        segment = Segment.open(self.directory, self.end_offset, create=True)
        self._sync_directories.add(self.directory)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._log.info("rolled {path}", path=segment.path)
        return segment

    # -- flushing ----------------------------------------------------------

    @property
    def unflushed_messages(self) -> int:
        """Messages appended since the last flush started."""
        return self._unflushed_messages

    def flush(self) -> Deferred[int]:
        """fsync everything appended so far (on a pool thread); fire with the new flushed offset.

        Only one fsync runs per log at a time; a flush asked for while one
        runs starts when it ends and covers everything appended until then.
        """
        if self.failed is not None:
            return fail(StorageFailed(f"{self.directory} failed ({self.failed})"))
        if not self._dirty and not self._flush_in_flight:
            return succeed(self.flushed_offset)
        d: Deferred[int] = Deferred()
        self._flush_waiters.append(d)
        if self._flush_in_flight:
            self._flush_again = True
        else:
            self._start_flush()
        return d

    def _flush_in_background(self) -> None:
        """Start a flush nobody waits for (count or time reached); no Deferred piles up meanwhile."""
        if self.failed is not None or self.closed:
            return
        if self._flush_in_flight:
            self._flush_again = True
        elif self._dirty:
            self._start_flush()

    def _timed_flush(self) -> None:
        self._flush_timer = None
        self._flush_in_background()

    def _start_flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        waiters, self._flush_waiters = self._flush_waiters, []
        try:
            for segment in self._dirty:
                segment.write_out()  # on the reactor thread: the pool thread only fsyncs
        except OSError as e:
            self._fail(e)
            for waiter in waiters:
                waiter.errback(StorageFailed(f"writing to {self.directory} failed: {e.strerror or e}"))
            return
        target = self.end_offset
        dirty, self._dirty = self._dirty, []
        directories, self._sync_directories = sorted(self._sync_directories), set()
        self._unflushed_messages = 0
        self._flush_in_flight = True
        d = self._run_in_thread(_fsync_all, dirty, directories)
        d.addCallbacks(self._flushed, self._flush_failed, callbackArgs=(target, waiters), errbackArgs=(waiters,))

    def _flushed(self, _: object, target: int, waiters: list[Deferred[int]]) -> None:
        self._flush_in_flight = False
        if target > self.flushed_offset:
            self.flushed_offset = target
            for listener in list(self._flush_listeners):
                try:
                    listener(self)
                except Exception:
                    self._log.failure("flush listener failed")
        for waiter in waiters:
            waiter.callback(self.flushed_offset)
        self._after_flush()

    def _flush_failed(self, failure: Failure, waiters: list[Deferred[int]]) -> None:
        self._flush_in_flight = False
        self._fail(failure.value)
        for waiter in waiters + self._flush_waiters:
            waiter.errback(StorageFailed(f"fsync failed in {self.directory}: {failure.getErrorMessage()}"))
        self._flush_waiters = []

    def _fail(self, error: Exception) -> None:
        """Stop taking appends and stop moving the flushed offset: only a restart (recovery) is safe now."""
        if self.failed is None:
            self.failed = error
            self._log.critical(
                "{directory}: a write or fsync failed ({error}); the partition takes no more messages and "
                "its unflushed data stays invisible; restart the broker to recover it",
                directory=self.directory, error=error,
            )
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None

    def _after_flush(self) -> None:
        if self._flush_again and not self.closed and self.failed is None:
            self._flush_again = False
            if self._dirty:
                self._start_flush()
            elif self._flush_waiters:
                waiters, self._flush_waiters = self._flush_waiters, []
                for waiter in waiters:
                    waiter.callback(self.flushed_offset)

    def write_out(self) -> None:
        """Put everything appended into the file (page cache), not yet fsynced: what an
        acknowledged "appended" produce promises, so a process crash cannot lose it.

        @raise StorageFailed: the write failed.
        """
        try:
            for segment in self._dirty:
                segment.write_out()
        except OSError as e:
            self._fail(e)
            raise StorageFailed(f"writing to {self.directory} failed: {e.strerror or e}") from None

    def add_flush_listener(self, listener: Callable[["Log"], Any]) -> None:
        """Call C{listener(log)} each time the flushed offset moves (to wake waiting fetches)."""
        self._flush_listeners.append(listener)

    def remove_flush_listener(self, listener: Callable[["Log"], Any]) -> None:
        """Stop calling C{listener}."""
        self._flush_listeners.remove(listener)

    # -- reading -----------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> FileRegion:
        """The flushed bytes from C{offset}, at most C{max_bytes}, within one segment.

        C{offset} must start a message: the first entry is checked (size,
        magic, CRC).  An offset at or past the flushed end but not past the
        written end reads as empty.  The region may end in a partial message.

        @raise InvalidFetchSize: C{max_bytes} is not positive.
        @raise OffsetOutOfRange: C{offset} is before the start or past the end.
        @raise OffsetNotOnBoundary: C{offset} is inside the log but inside a message.
        @raise FetchSizeTooSmall: the message at C{offset} is larger than C{max_bytes}.
        """
        if max_bytes <= 0:
            raise InvalidFetchSize(f"fetch size {max_bytes} must be positive")
        if offset < self.start_offset or offset > self.end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside {os.path.basename(self.directory)}"
                f" [{self.start_offset}, {self.end_offset}]"
            )
        visible = self.flushed_offset
        index = bisect_right(self._bases, offset) - 1
        segment = self._segments[index]
        position = offset - segment.base_offset
        if offset >= visible:
            return FileRegion(segment, position, 0, offset)
        available = min(segment.size, visible - segment.base_offset) - position
        self._check_boundary(segment, position, available, max_bytes, offset)
        return FileRegion(segment, position, min(max_bytes, available), offset)

    def _check_boundary(self, segment: Segment, position: int, available: int, max_bytes: int, offset: int) -> None:
        """Raise unless a whole, CRC-valid message starts at C{position}."""
        head = segment.pread(position, min(available, 4096))
        size = int.from_bytes(head[:4], "big", signed=True) if len(head) >= 4 else -1
        if size < MIN_MESSAGE_BYTES or size + 4 > available or size > self._config.segment_bytes:
            raise OffsetNotOnBoundary(f"offset {offset} does not start a message")
        if size + 4 > max_bytes:
            raise FetchSizeTooSmall(
                f"the message at offset {offset} is {size + 4} bytes, larger than the fetch size {max_bytes}"
            )
        if size + 4 > len(head):
            head = segment.pread(position, size + 4)
        if scan(head[: size + 4], self._config.segment_bytes).count != 1:
            raise OffsetNotOnBoundary(f"offset {offset} does not start a valid message")

    # -- offsets by time ---------------------------------------------------

    def offsets_before(self, time_ms: int, max_offsets: int, now_ms: int) -> list[int]:
        """Kafka 0.7's OFFSETS: up to C{max_offsets} offsets, newest first.

        C{time_ms} is L{LATEST_TIME} (the flushed end), L{EARLIEST_TIME} (the
        first offset), or a time: the start offsets of the segments last
        modified at or before it.  Offsets past the flushed end are never
        answered, not even the base of a rolled but unflushed segment.
        """
        visible = self.flushed_offset
        entries = [(s.base_offset, s.mtime_ms()) for s in self._segments if s.base_offset <= visible]
        if not entries or visible > entries[-1][0]:
            entries.append((visible, now_ms))
        if time_ms == LATEST_TIME:
            start = len(entries) - 1
        elif time_ms == EARLIEST_TIME:
            start = 0
        else:
            start = -1
            for i, (_, mtime) in enumerate(entries):
                if mtime <= time_ms:
                    start = i
        offsets: list[int] = []
        for i in range(start, -1, -1):
            if len(offsets) >= max_offsets:
                break
            if not offsets or offsets[-1] != entries[i][0]:
                offsets.append(entries[i][0])
        return offsets

    # -- retention ---------------------------------------------------------

    def expire_segments(self, now_ms: int) -> list[Segment]:
        """Take off the index the segments retention wants gone; the caller deletes their files.

        Old segments go when last modified more than C{retention_ms} ago, then
        the oldest while the log exceeds C{retention_bytes}.  Neither the
        active segment nor one holding unflushed data is deleted: when it too has expired, and holds only
        flushed data, a new empty segment is rolled at the end first, so
        offsets never go back.
        """
        config = self._config
        cutoff = now_ms - config.retention_ms
        active = self._segments[-1]
        if active.size and self.flushed_offset == self.end_offset and active.mtime_ms() < cutoff:
            self._roll()
        removed: list[Segment] = []
        while self._deletable() and self._segments[0].mtime_ms() < cutoff:
            removed.append(self._pop_oldest())
        if config.retention_bytes >= 0:
            total = self.size_bytes()
            while self._deletable() and total > config.retention_bytes:
                segment = self._pop_oldest()
                total -= segment.size
                removed.append(segment)
        return removed

    def _deletable(self) -> bool:
        """Whether the oldest segment may go: not the active one, and holding only flushed data."""
        return len(self._segments) > 1 and self._segments[0].end_offset <= self.flushed_offset

    def _pop_oldest(self) -> Segment:
        self._bases.pop(0)
        return self._segments.pop(0)

    # -- shutdown ----------------------------------------------------------

    def close(self) -> None:
        """Stop timers and close every segment.  Flush first to keep unflushed data."""
        self.closed = True
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        for segment in self._segments:
            segment.close()
