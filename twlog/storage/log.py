# -*- test-case-name: tests.storage.test_log -*-
"""One partition's log: a directory of segments addressed by byte offsets.

L{Log} is what the broker holds per partition.  Its own job is appending:
validate a set, write it to the active segment, roll to a new segment at the
configured size.  The other jobs are units of their own that it puts
together: the segments and their base offsets (L{SegmentList}), when appends
become durable and visible (L{Flusher}: an fsync on a pool thread, never on
the reactor, moving the flushed mark that bounds what readers see), reading
(L{LogReader}: fetches, OFFSETS, BOUNDARIES), which segments retention takes
(L{twlog.storage.retention}), and cutting a torn tail after an unclean
shutdown (L{twlog.storage.recovery}).  There is no message cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.config import LogConfig
from twlog.errors import MessageSizeTooLarge, StorageFailed, TooManyOpenFiles
from twlog.storage.epochs import LeaderEpochCache
from twlog.storage.flush import Flusher, ThreadRunner
from twlog.storage.log_reader import EARLIEST_TIME, LATEST_TIME, LogReader
from twlog.storage.pieces import PIECE_BYTES, PiecedWrites
from twlog.storage.recovery import Truncation, recover_segment
from twlog.storage.replica import AppendResult, ReplicaLog
from twlog.storage.retention import segments_to_expire
from twlog.storage.segment import FileRegion, Segment
from twlog.storage.segment_list import SegmentList
from twlog.storage.validation import validate_message_set

__all__ = ["EARLIEST_TIME", "LATEST_TIME", "AppendResult", "Log", "ThreadRunner", "Truncation", "log_boundaries"]


class Log(ReplicaLog):
    """The append-only log of one partition: C{<log_dir>/<topic>-<partition>/}; a replica's methods are L{ReplicaLog}'s.
    Readers see up to L{visible_end}; L{end_offset} is where the next append lands.  Create one with L{Log.open}."""

    _log = Logger()

    def __init__(self, segments: SegmentList, config: LogConfig, clock: IReactorTime, run_in_thread: ThreadRunner,
                 epochs: LeaderEpochCache | None = None) -> None:
        self.directory = segments.directory
        self._run_in_thread = run_in_thread
        self.epochs = epochs or LeaderEpochCache(self.directory, run_in_thread)
        self._segments = segments
        self._config = config
        self._max_message_bytes = min(config.max_message_bytes, config.segment_bytes)
        self._flush_listeners: list[Callable[[Log], Any]] = []
        self._flusher = Flusher(self.directory, config, clock, run_in_thread, lambda: self.end_offset,
                                self._tell_flush_listeners)
        self._reader = LogReader(segments, lambda: self.visible_end, config.segment_bytes,
                                 run_in_thread)
        #: The set being written in pieces, if any (L{append_in_pieces}).
        self.pieces = PiecedWrites(clock)
        self.closed = False

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
        return _open(cls, directory, config, clock, run_in_thread, recover)

    #: What recovery cut from the last segment when the log was opened, if anything.
    last_truncation: Truncation | None = None

    # -- positions ---------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The offset of the first byte still on disk.

        Retention moves it forward, a whole segment at a time.
        """
        return self._segments.start_offset

    @property
    def end_offset(self) -> int:
        """The offset the next append gets (flushed or not).

        Readers see only up to L{flushed_offset}.
        """
        return self._segments.end_offset

    @property
    def segments(self) -> list[Segment]:
        """The segments, oldest first (a copy)."""
        return self._segments.segments

    #: Bytes an append may have and still go to the active segment without rolling it (L{append}).
    room = property(lambda self: self._config.segment_bytes - self._segments.active.size)

    def size_bytes(self) -> int:
        """Bytes on disk over all segments."""
        return self._segments.size_bytes()

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
        @raise StorageFailed: nothing of the set is written: the log failed (until a restart), or a write or a
            roll failed (disk full, no inodes, quota, read-only, I/O error), or did a short while ago
            (appends are refused for C{storage_retry_s} after one, then tried again).
        @raise OutcomeUnknown: the write failed and the file could not be cut back (the log fails).
        """
        if self.closed:
            raise RuntimeError(f"{self.directory} is closed")
        if count is None and len(message_set) <= self._config.segment_bytes:
            count = validate_message_set(message_set, self._max_message_bytes, self._config.max_decompressed_bytes)
        return self._write(message_set, count)

    def append_in_pieces(self, message_set: bytes | bytearray | memoryview, count: int) -> Deferred[AppendResult]:
        """L{append} of C{count} checked messages, a piece at a time with the reactor running in between
        (L{twlog.storage.pieces}); raises (or fails with) what L{append} raises.  Wait for C{pieces.turn()} first."""
        active = self._prepare(message_set, count)
        if active is None:
            return succeed(AppendResult(self.end_offset, self.end_offset, 0))
        offset = active.end_offset
        return self.pieces.run(active.append_in_pieces(message_set, PIECE_BYTES), self._flusher.check_writable,
                               lambda: self._appended(active, offset, count),
                               lambda e: self._flusher.write_failed(active, e, f"writing to {active.path}"))

    def _prepare(self, message_set: bytes | bytearray | memoryview, count: int | None, roll: bool | None = None):
        """The segment C{count} messages go to, rolled if due (L{_write}); None if there are none."""
        if self.pieces.busy:
            raise RuntimeError(f"{self.directory}: an append while a set is being written in pieces")
        self._flusher.check_writable()
        size = len(message_set)
        if roll is None and size > self._config.segment_bytes:
            raise set_too_large(size, self._config.segment_bytes)
        if not count:
            return None
        active = self._segments.active
        if active.size and (active.size + size > self._config.segment_bytes if roll is None else roll):
            active = self._roll()
        return active

    def _write(self, message_set: bytes | bytearray | memoryview, count: int | None, roll: bool | None = None):
        """Append C{count} checked messages: in a new segment if C{roll}, or (None) if they do not fit."""
        active = self._prepare(message_set, count, roll)
        if active is None:
            return AppendResult(self.end_offset, self.end_offset, 0)
        offset = active.end_offset
        try:
            active.append(message_set)
        except OSError as e:
            raise self._flusher.write_failed(active, e, f"writing to {active.path}") from None
        return self._appended(active, offset, count)

    def _appended(self, active: Segment, offset: int, count: int) -> AppendResult:
        if active.size == active.written:  # in the file already
            self._flusher.suspension.wrote()
        next_offset = active.end_offset
        self._flusher.appended(active, count)  # may start a flush, whose write may fail and drop the buffer
        if active.end_offset < next_offset:
            assert self._flusher.last_write_error is not None
            raise self._flusher.last_write_error
        return AppendResult(offset, next_offset, count)

    def _roll(self) -> Segment:
        """Start a new active segment at the current end.

        @raise TooManyOpenFiles: no descriptor for the new file; nothing changed.
        @raise StorageFailed: the buffered tail could not be written, or the new file created (see
            L{Flusher.write_failed}): the buffer is dropped, and the log refuses appends for a while.
        """
        try:
            segment = self._segments.roll()
        except TooManyOpenFiles:
            raise
        except OSError as e:
            raise self._flusher.write_failed(self._segments.active, e, f"rolling {self.directory} to a new segment") \
                from None
        self._flusher.sync_directory(self.directory)
        self._log.info("rolled {path}", path=segment.path)
        return segment

    # -- flushing (the policy and its state are the Flusher's) ------------

    @property
    def flushed_offset(self) -> int:
        """The offset up to which everything is fsynced: readers and OFFSETS see no further."""
        return self._flusher.flushed_offset

    @property
    def failed(self) -> Exception | None:
        """Set when an fsync failed (or a write that could not be cut back): the log takes no more appends
        until a restart, and its flushed offset stays."""
        return self._flusher.failed

    @property
    def suspended(self) -> Exception | None:
        """Set for a while after a write or a roll failed (disk full, ...): appends are refused until
        C{storage_retry_s} after it, then the next one tries the disk again."""
        return self._flusher.suspension.error

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

    # -- reading (the LogReader's job) ------------------------------------

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
        return self._reader.read(offset, max_bytes, partial_ok=partial_ok)

    def offsets_before(self, time_ms: int, max_offsets: int, now_ms: int) -> list[int]:
        """Kafka 0.7's OFFSETS: up to C{max_offsets} offsets, newest first.

        C{time_ms} is L{LATEST_TIME} (the flushed end), L{EARLIEST_TIME} (the
        first offset), or a time: the start offsets of the segments last
        modified at or before it.  Offsets past the flushed end are never
        answered, not even the base of a rolled but unflushed segment.
        """
        return self._reader.offsets_before(time_ms, max_offsets, now_ms)

    def boundaries(self, positions: Sequence[int]) -> Deferred[list[int]]:
        """For each logical position, the offset of the first whole, CRC-valid message at or after it
        (L{twlog.storage.index.boundaries}: the flushed end when there is none); segments found on disk are
        indexed first, on the thread pool.

        @raise OffsetOutOfRange: a position before the first offset or past the written end.
        """
        return self._reader.boundaries(positions)

    # -- retention ---------------------------------------------------------

    def expire_segments(self, now_ms: int) -> list[Segment]:
        """Take off the index the segments retention wants gone (L{segments_to_expire}); the caller deletes
        their files.

        Neither the active segment nor one holding unflushed data is deleted:
        when the active one too has expired, and holds only flushed data, a new
        empty segment is rolled at the end first, so offsets never go back.
        """
        cutoff_ms = now_ms - self._config.retention_ms
        active = self._segments.active
        if active.size and self.flushed_offset == self.end_offset and active.mtime_ms() < cutoff_ms:
            self._roll()
        count = segments_to_expire(self._segments.segments, self.flushed_offset, cutoff_ms,
                                   self._config.retention_bytes)
        expired = [self._segments.pop_oldest() for _ in range(count)]
        if expired:
            self.epochs.truncate_from_start(self.start_offset).addErrback(logged)
        return expired

    # -- shutdown ----------------------------------------------------------

    def abandon(self, error: Exception) -> None:
        """The log is being deleted: stop its timers and fail the flushes waited for with C{error}.

        Its segments stay open until nothing refers to them (as retention leaves a deleted
        segment): a fetch response being sent from them still sends its bytes.
        """
        self.closed = True
        self.pieces.cancel(error)
        self._flusher.abandon(error)

    def close(self) -> None:
        """Stop timers and close every segment.  Flush first to keep unflushed data."""
        self.closed = True
        self.pieces.cancel(StorageFailed(f"{self.directory} closed while a set was being written: not written"))
        self._flusher.close()
        self._segments.close()


def _open(cls: type[Log], directory: str, config: LogConfig, clock: IReactorTime, run_in_thread: ThreadRunner,
          recover: bool) -> Log:
    """L{Log.open}."""
    parent_created = not os.path.isdir(directory)
    segments, created = SegmentList.open(directory)
    try:
        truncation = recover_segment(segments.active, config.segment_bytes) if recover else None
        log = cls(segments, config, clock, run_in_thread, LeaderEpochCache.open(directory, run_in_thread))
    except BaseException:
        segments.close()
        raise
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
    log.epochs.truncate_from_end(log.end_offset + 1).addErrback(logged)  # epochs begun in a cut tail
    log.epochs.truncate_from_start(log.start_offset).addErrback(logged)
    return log


def logged(failure: object) -> None:
    """An errback for a checkpoint write nobody waits for: L{CheckpointWriter} has logged its failure."""


def set_too_large(size: int, segment_bytes: int) -> MessageSizeTooLarge:
    """The error for a message set of C{size} bytes, larger than a segment: it carries the size and the limit."""
    error = MessageSizeTooLarge(f"a message set of {size} bytes does not fit in a segment of {segment_bytes} bytes")
    error.message_size, error.limit = size, segment_bytes
    return error


def log_boundaries(log: Log, positions: Sequence[int]) -> Deferred[list[int]]:
    """L{Log.boundaries} of C{log}: the broker's answer to BOUNDARIES (a function, as callers have used it).

    @raise OffsetOutOfRange: a position before the first offset or past the written end.
    """
    return log.boundaries(positions)
