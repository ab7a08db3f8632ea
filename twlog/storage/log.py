# -*- test-case-name: tests.storage.test_log -*-
"""One partition's log: a directory of segments addressed by byte offsets.

Appends go to the last (active) segment and roll to a new one at the
configured size.  A flush fsyncs on a pool thread, never on the reactor, and
only then moves the flushed mark that bounds what readers and OFFSETS see
(L{twlog.storage.flush}).  Opening after an unclean shutdown recovers the
last segment (L{twlog.storage.recovery}).
The in-memory index is the sorted list of segment base offsets, searched by
bisection, and each segment keeps a sparse position index of its message
starts (L{twlog.storage.index}, for L{log_boundaries}); there is no message cache.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

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
from twlog.storage.flush import Flusher, ThreadRunner
from twlog.storage.index import boundaries, index_segments, unindexed
from twlog.storage.message import MIN_MESSAGE_BYTES, scan, validate_message_set
from twlog.storage.recovery import Truncation, recover_segment
from twlog.storage.segment import FileRegion, Segment, descriptors_error, out_of_descriptors, parse_segment_name

__all__ = ["EARLIEST_TIME", "LATEST_TIME", "AppendResult", "Log", "ThreadRunner", "Truncation", "log_boundaries"]

#: OFFSETS' special times, as in Kafka 0.7.
LATEST_TIME = -1
EARLIEST_TIME = -2


class AppendResult(NamedTuple):
    """Where an append landed: the offset of its first message, the offset after it, and how many messages."""

    offset: int
    next_offset: int
    count: int


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
        self._flush_listeners: list[Callable[[Log], Any]] = []
        self._run_in_thread = run_in_thread
        self._flusher = Flusher(directory, config, clock, run_in_thread, lambda: self.end_offset,
                                self._tell_flush_listeners)
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
        @raise TooManyOpenFiles: out of descriptors; nothing is left open (opening again later works).
        """
        parent_created = not os.path.isdir(directory)
        segments, created = open_segments(directory)
        try:
            for before, after in zip(segments, segments[1:]):
                if before.end_offset != after.base_offset:
                    raise CorruptLog(
                        f"{directory}: segment {os.path.basename(before.path)} ends at offset {before.end_offset}"
                        f" but the next segment starts at {after.base_offset}; move the damaged segments"
                        " away to open this partition"
                    )
            truncation = recover_segment(segments[-1], config.segment_bytes) if recover else None
            log = cls(directory, segments, config, clock, run_in_thread)
            if created:  # a new segment file (and maybe a new directory) to make durable
                log._flusher.sync_directory(directory)
                if parent_created:
                    log._flusher.sync_directory(os.path.dirname(os.path.abspath(directory)))
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

    #: What recovery cut from the last segment when the log was opened, if anything.
    last_truncation: Truncation | None = None

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
        @raise TooManyOpenFiles: a new segment was due and no descriptor was free; nothing is written,
            and the log takes appends again once descriptors free up.
        """
        if self.closed:
            raise RuntimeError(f"{self.directory} is closed")
        if self.failed is not None:
            raise StorageFailed(f"{self.directory} failed ({self.failed}); restart the broker to recover it")
        size = len(message_set)
        if size > self._config.segment_bytes:
            raise set_too_large(size, self._config.segment_bytes)
        if count is None:
            count = validate_message_set(message_set, self._max_message_bytes, self._config.max_decompressed_bytes)
        if count == 0:
            return AppendResult(self.end_offset, self.end_offset, 0)
        active = self._segments[-1]
        if active.size and active.size + size > self._config.segment_bytes:
            active = self._roll()
        offset = active.end_offset
        try:
            active.append(message_set)
        except OSError as e:
            self._flusher.fail(e)
            raise StorageFailed(f"writing to {active.path} failed: {e.strerror or e}") from None
        self._flusher.appended(active, count)
        return AppendResult(offset, active.end_offset, count)

    def _roll(self) -> Segment:
        """Start a new active segment at the current end (TooManyOpenFiles without a descriptor: nothing changed)."""
        self._segments[-1].write_out()
        try:
            segment = Segment.open(self.directory, self.end_offset, create=True)
        except OSError as e:
            if out_of_descriptors(e):
                raise descriptors_error(e, f"cannot roll {self.directory}") from None
            raise
        self._flusher.sync_directory(self.directory)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._log.info("rolled {path}", path=segment.path)
        return segment

    # -- flushing (the policy and its state are the Flusher's) ------------

    @property
    def flushed_offset(self) -> int:
        """The offset up to which everything is fsynced: readers and OFFSETS see no further."""
        return self._flusher.flushed_offset

    @property
    def failed(self) -> Exception | None:
        """Set when a write or fsync failed: the log takes no more appends and its flushed offset stays."""
        return self._flusher.failed

    @property
    def unflushed_messages(self) -> int:
        """Messages appended since the last flush started."""
        return self._flusher.unflushed_messages

    def flush(self) -> Deferred[int]:
        """fsync everything appended so far (on a pool thread); fire with the new flushed offset.

        Only one fsync runs per log at a time; a flush asked for while one
        runs starts when it ends and covers everything appended until then.
        """
        return self._flusher.flush()

    def write_out(self) -> None:
        """Put everything appended into the file (page cache), not yet fsynced: what an
        acknowledged "appended" produce promises, so a process crash cannot lose it.

        @raise StorageFailed: the write failed.
        """
        self._flusher.write_out()

    def _tell_flush_listeners(self) -> None:
        for listener in list(self._flush_listeners):
            try:
                listener(self)
            except Exception:
                self._log.failure("flush listener failed")

    def add_flush_listener(self, listener: Callable[["Log"], Any]) -> None:
        """Call C{listener(log)} each time the flushed offset moves (to wake waiting fetches)."""
        self._flush_listeners.append(listener)

    def remove_flush_listener(self, listener: Callable[["Log"], Any]) -> None:
        """Stop calling C{listener}."""
        self._flush_listeners.remove(listener)

    # -- reading -----------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, partial_ok: bool = False) -> FileRegion:
        """The flushed bytes from C{offset}, at most C{max_bytes}, within one segment.

        C{offset} must start a message: the first entry is checked (size,
        magic, CRC).  An offset at or past the flushed end but not past the
        written end reads as empty.  The region may end in a partial message.

        @param partial_ok: read as Kafka 0.7 did: a first message larger than
            C{max_bytes} gives its first C{max_bytes} bytes (a partial message,
            which 0.7 clients detect and fetch again with a larger size) instead
            of L{FetchSizeTooSmall}.
        @raise InvalidFetchSize: C{max_bytes} is not positive.
        @raise OffsetOutOfRange: C{offset} is before the start or past the end.
        @raise OffsetNotOnBoundary: C{offset} is inside the log but inside a message.
        @raise FetchSizeTooSmall: the message at C{offset} is larger than C{max_bytes} (unless C{partial_ok}).
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
        check_message_start(segment, position, available, None if partial_ok else max_bytes, offset,
                            self._config.segment_bytes)
        return FileRegion(segment, position, min(max_bytes, available), offset)

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
        return offsets_newest_first(entries, time_ms, max_offsets)

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
        self._flusher.close()
        for segment in self._segments:
            segment.close()


def set_too_large(size: int, segment_bytes: int) -> MessageSizeTooLarge:
    """The error for a message set of C{size} bytes, larger than a segment: it carries the size and the limit."""
    error = MessageSizeTooLarge(f"a message set of {size} bytes does not fit in a segment of {segment_bytes} bytes")
    error.message_size, error.limit = size, segment_bytes
    return error


def open_segments(directory: str) -> tuple[list[Segment], bool]:
    """Open every segment of C{directory} (created if missing), or create its first; and whether it was created.

    @raise TooManyOpenFiles: out of descriptors; the segments opened so far are closed again.
    """
    segments: list[Segment] = []
    try:
        os.makedirs(directory, exist_ok=True)
        bases = sorted(base for base in map(parse_segment_name, os.listdir(directory)) if base is not None)
        for base in bases:
            segments.append(Segment.open(directory, base))
        if not segments:
            segments.append(Segment.open(directory, 0, create=True))
    except OSError as e:
        for segment in segments:
            segment.close()
        if out_of_descriptors(e):
            raise descriptors_error(e, f"cannot open {directory}") from None
        raise
    return segments, not bases


def check_message_start(
    segment: Segment, position: int, available: int, max_bytes: int | None, offset: int, segment_bytes: int
) -> None:
    """Raise unless a whole, CRC-valid message (of at most C{max_bytes}, unless None) starts at C{position}."""
    head = segment.pread(position, min(available, 4096))
    size = int.from_bytes(head[:4], "big", signed=True) if len(head) >= 4 else -1
    if size < MIN_MESSAGE_BYTES or size + 4 > available or size > segment_bytes:
        raise OffsetNotOnBoundary(f"offset {offset} does not start a message")
    if max_bytes is not None and size + 4 > max_bytes:
        raise FetchSizeTooSmall(
            f"the message at offset {offset} is {size + 4} bytes, larger than the fetch size {max_bytes}"
        )
    if size + 4 > len(head):
        head = segment.pread(position, size + 4)
    if scan(head[: size + 4], segment_bytes).count != 1:
        raise OffsetNotOnBoundary(f"offset {offset} does not start a valid message")


def offsets_newest_first(entries: list[tuple[int, int]], time_ms: int, max_offsets: int) -> list[int]:
    """OFFSETS' answer from C{(start offset, last modified ms)} entries, oldest first (see L{Log.offsets_before})."""
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


def log_boundaries(log: Log, positions: Sequence[int]) -> Deferred[list[int]]:
    """For each logical position of C{log}, the offset of the first whole, CRC-valid message at or after it
    (L{twlog.storage.index.boundaries}: the flushed end when there is none); segments found on disk are
    indexed first, on the thread pool.  (A function beside L{Log}, which is at its size limit.)

    @raise OffsetOutOfRange: a position before the first offset or past the written end.
    """
    _check_positions(log, positions)
    pending = unindexed(log._segments, log._bases, positions, log.flushed_offset)
    if not pending:
        return succeed(_boundaries_now(log, positions))
    d = log._run_in_thread(index_segments, pending, log._config.segment_bytes)
    return d.addCallback(lambda found: [s.index.load(p) for s, p in zip(pending, found)]).addCallback(
        lambda _: _boundaries_now(log, positions))


def _check_positions(log: Log, positions: Sequence[int]) -> None:
    for position in positions:
        if position < log.start_offset or position > log.end_offset:
            raise OffsetOutOfRange(f"position {position} is outside {os.path.basename(log.directory)}"
                                   f" [{log.start_offset}, {log.end_offset}]")


def _boundaries_now(log: Log, positions: Sequence[int]) -> list[int]:
    _check_positions(log, positions)  # again: retention may have run while segments were indexed
    return boundaries(log._segments, log._bases, positions, log.flushed_offset, log._config.segment_bytes)
