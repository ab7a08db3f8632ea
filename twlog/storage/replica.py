# -*- test-case-name: tests.storage.test_replica -*-
"""The replica's side of a partition log: truncation, the follower's verbatim append, the high watermark.

L{ReplicaLog} is mixed into L{twlog.storage.log.Log}; it keeps what
replication needs of one partition's storage:

  - L{ReplicaLog.truncate_to}: cut the log back to a message boundary, as a
    follower does after asking the leader where its last epoch ends (KIP-101).
    Later segments are renamed to C{<name>.log.deleted} (newest first, so a
    crash at any point leaves a contiguous run of segments), the segment holding
    the offset is cut, and the flushed offset, the position index, the leader
    epochs and the high watermark follow; the cut is made durable by the next
    fsync, and the renamed files are unlinked on the thread pool after it.
    Leftover C{.deleted} files are removed when the directory is opened again.
  - L{ReplicaLog.start_at}: empty the log and start it again at a later offset,
    as a follower does when its end is below its leader's log start (the
    leader's retention deleted what it lacks): Kafka's C{truncateFullyAndStartAt}.
  - L{ReplicaLog.read_replica}: a leader's read for its followers, up to its written end.
  - L{ReplicaLog.whole_replica}: the whole entries a leader's bytes start with, checked once, for:
  - L{ReplicaLog.append_replica}: append bytes the leader already validated, at
    exactly the leader's offset of them (L{OffsetMismatch} otherwise), checking
    only that they are whole entries with good CRCs, in segments that start
    where the leader's do (L{ReplicaLog.align_segment}), never rolled by size.
  - L{ReplicaLog.high_watermark} and L{ReplicaLog.visible_end}: what readers of a
    replicated partition may see, min(high watermark, flushed end).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.logger import Logger

from twlog.config import LogConfig
from twlog.errors import (
    LogTruncated,
    NotLeader,
    OffsetMismatch,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    StorageFailed,
)
from twlog.storage.entry import MIN_MESSAGE_BYTES
from twlog.storage.epochs import LeaderEpochCache
from twlog.storage.failures import describe
from twlog.storage.flush import Flusher, ThreadRunner
from twlog.storage.kernel import whole_end
from twlog.storage.log_reader import LogReader
from twlog.storage.pieces import PiecedWrites
from twlog.storage.segment import FileRegion, Segment
from twlog.storage.segment_list import DELETED_SUFFIX, SegmentList
from twlog.storage.validation import check_entries, scan

__all__ = ["AppendResult", "ReplicaLog", "cut_back", "on_boundary"]

#: How far L{on_boundary} walks length fields from an index entry; past that it checks the message's CRC.
WALK_LIMIT_BYTES = 4 * 1024 * 1024


class AppendResult(NamedTuple):
    """Where an append landed: the offset of its first message, the offset after it, and how many messages."""

    offset: int
    next_offset: int
    count: int


def on_boundary(segment: Segment, position: int, max_entry_bytes: int) -> bool:
    """Whether a message starts at C{position} of C{segment} (or it is the segment's end).

    Exact when the nearest index entry is at most L{WALK_LIMIT_BYTES} before it
    (always, once the segment is indexed): the length fields from there lead to
    it.  Otherwise (a long segment found on disk, not indexed yet), a whole,
    CRC-valid message must start there, as reads check.
    """
    if position in (0, segment.size):
        return True
    if not 0 < position < segment.size:
        return False
    start = segment.index.floor(position)
    if position - start <= WALK_LIMIT_BYTES:
        buf = segment.peek(start, position - start + 4)
        return whole_end(buf, 0, position - start, max_entry_bytes) == position - start  # the kernel's walk
    head = segment.peek(position, 4)
    size = int.from_bytes(head, "big", signed=True) if len(head) == 4 else -1
    if size < MIN_MESSAGE_BYTES or size > max_entry_bytes:
        return False
    return scan(segment.peek(position, 4 + size), max_entry_bytes).count == 1


def cut_back(segments: SegmentList, offset: int, max_entry_bytes: int) -> tuple[Segment, list[str]]:
    """Cut C{segments} back to end at C{offset}: the segments that start after it are renamed to
    C{.deleted} (newest first) and leave the list, and the one holding it is cut; return that one and the
    renamed paths (for the caller to unlink once the cut is durable).

    @raise OffsetOutOfRange: C{offset} is before the start or past the end; nothing changed.
    @raise OffsetNotOnBoundary: C{offset} does not start a message; nothing changed.
    @raise OSError: a rename or the cut failed; what was done before it stays done (the list matches the files).
    """
    if not segments.start_offset <= offset <= segments.end_offset:
        raise OffsetOutOfRange(f"cannot truncate {segments.directory} to offset {offset}: the log holds "
                               f"{segments.start_offset} to {segments.end_offset}")
    kept = segments.holding(offset)
    if not on_boundary(kept, offset - kept.base_offset, max_entry_bytes):
        raise OffsetNotOnBoundary(f"cannot truncate {segments.directory} to offset {offset}: no message starts there")
    renamed = []
    while segments.active is not kept:
        segment = segments.active
        os.rename(segment.path, segment.path + DELETED_SUFFIX)
        renamed.append(segment.path + DELETED_SUFFIX)
        segments.pop_newest().discard_pending()  # its descriptor closes when nothing refers to it
    kept.cut(offset - kept.base_offset)
    return kept, renamed


def unlink_all(paths: list[str]) -> None:
    """Unlink C{paths} (blocking: on the thread pool); those already gone are skipped."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class ReplicaLog:
    """The replica's methods of L{twlog.storage.log.Log} (mixed into it; see the module's docstring)."""

    _log = Logger()

    # What the Log provides.
    directory: str
    closed: bool
    #: The partition's leader epochs (KIP-101), kept in its C{leader-epoch-checkpoint}.
    epochs: LeaderEpochCache
    _segments: SegmentList
    _config: LogConfig
    _flusher: Flusher
    _run_in_thread: ThreadRunner
    _high_watermark: int | None = None
    _write: Callable[..., AppendResult]
    _tell_flush_listeners: Callable[[], Any]
    _reader: LogReader
    pieces: PiecedWrites
    write_out: Callable[[], None]
    end_offset: int
    flushed_offset: int

    @property
    def high_watermark(self) -> int | None:
        """The high watermark of a replicated partition (the minimum end over the ISR), or None (the
        default): not replicated, readers see the flushed end.  Kept in memory only (its checkpoint is
        L{twlog.storage.checkpoints.OffsetCheckpoint}'s job); a truncation below it lowers it."""
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int | None) -> None:
        if offset is not None and not 0 <= offset <= self.end_offset:
            raise ValueError(f"{self.directory}: a high watermark of {offset} is past the end {self.end_offset}")
        before = self.visible_end
        self._high_watermark = offset
        if self.visible_end != before:
            self._tell_flush_listeners()  # waiting fetches see further (or less)

    @property
    def visible_end(self) -> int:
        """Where readers of this replica stop: min(L{high_watermark}, L{flushed_offset}), or the flushed offset
        when there is no high watermark."""
        if self._high_watermark is None:
            return self.flushed_offset
        return min(self._high_watermark, self.flushed_offset)

    def read_replica(self, offset: int, max_bytes: int) -> FileRegion:
        """As L{twlog.storage.log.Log.read}, but up to the written end, flushed or not: what a leader sends its
        followers (REPLICA_FETCH, docs/protocol.md), past the high watermark.  The write buffer is written to the
        file first, so that the region can be sent.

        @raise StorageFailed: writing the buffer out failed (as L{write_out}).
        """
        if offset < self.end_offset:
            self.write_out()
        return self._reader.read(offset, max_bytes, end=self.end_offset)

    def whole_replica(self, message_set: bytes | bytearray | memoryview) -> tuple[int, int | None]:
        """The whole, valid entries at the start of bytes a leader sent (its read may end in a partial entry):
        their length and count, for L{append_replica}, so that the follower walks and checks them once (in the
        kernel).  The count is None when one of them is larger than this log's C{segment_bytes}: then the
        length covers it, for L{append_replica} to refuse the set as it always has.
        """
        result = scan(message_set, self._config.segment_bytes)
        if result.oversize:
            return scan(message_set).valid_bytes, None
        return result.valid_bytes, result.count

    def append_replica(
        self, message_set: bytes | bytearray | memoryview, expected_offset: int, *, leader_segment_base: int,
        count: int | None = None,
    ) -> AppendResult:
        """Append bytes the leader appended at C{expected_offset}, verbatim, so that every byte offset means the
        same on both; flushed as any append is.

        The set must be whole entries with good CRCs (checked as L{check_entries} does, compressed wrappers not
        opened: the leader opened them), unless C{count} says the caller checked it already.  Entries may be
        as large as a segment (the leader's C{max_message_bytes} decides).

        The leader's segments decide where this log's segments start (L{align_segment}): C{leader_segment_base}
        is the base offset of the leader's segment holding these bytes (a leader's read never crosses its
        segments), or -1 when unknown.  A set starting the leader's segment starts one here; otherwise the set
        goes to the active segment, however large it grows: this log's own C{segment_bytes} never rolls it.  So
        the segment files are identical to the leader's byte for byte, from the first boundary both have.

        @raise OffsetMismatch: C{expected_offset} is not this log's end; nothing is written.
        @raise InvalidMessage: the set is partial or corrupt; nothing is written.
        @raise MessageSizeTooLarge: an entry is larger than this log's C{segment_bytes} (its recovery would cut it).
        @raise StorageFailed: as L{twlog.storage.log.Log.append}.
        """
        if self.closed:
            raise RuntimeError(f"{self.directory} is closed")
        self._stop_pieces()
        if expected_offset != self.end_offset:
            raise OffsetMismatch(f"{self.directory}: the leader's bytes start at offset {expected_offset}, but this "
                                 f"replica ends at {self.end_offset}", expected_offset, self.end_offset)
        if count is None:
            count = check_entries(message_set, self._config.segment_bytes).count
        if not count:
            return AppendResult(expected_offset, expected_offset, 0)
        self._flusher.check_writable()
        roll = self.align_segment(leader_segment_base)
        return self._write(message_set, count, roll=roll)

    def _stop_pieces(self) -> None:
        """The log follows its leader now (a truncation, the leader's bytes): a produced set still being written
        in pieces (L{twlog.storage.pieces}) stops, cut back, and its producer is told L{NotLeader}."""
        self.pieces.cancel(NotLeader(f"{self.directory} follows its leader now: the set was not written"))

    def align_segment(self, leader_segment_base: int) -> bool:
        """Whether the next append (at the end) must start a new segment to match the leader's, whose segment
        holding the end starts at C{leader_segment_base} (-1: unknown, nothing to do).

        It must when the leader's segment starts at the end and the active segment here holds bytes.  When
        the leader's segment starts before the end but the active segment here is empty and starts at the end
        (rolled by retention, or kept empty by a truncation to its base), that segment is dropped: its file
        is unlinked at once (it holds no byte; the directory is fsynced at the next flush) and the segment
        before it takes the appends again.  A crash before that fsync may bring the empty file back;
        L{SegmentList.open} removes it then, since its base lies inside the segment before it.

        @raise StorageFailed: the empty segment could not be unlinked (the log fails: a restart recovers it).
        """
        active = self._segments.active
        if leader_segment_base < 0:
            return False
        if leader_segment_base == self.end_offset:
            return active.size > 0
        if leader_segment_base < active.base_offset and active.size == 0 and len(self._segments) > 1:
            try:
                os.unlink(active.path)
            except OSError as e:
                message = f"removing the empty segment {active.path} failed: {describe(e)}"
                self._flusher.fail(e, message)
                raise StorageFailed(f"{message}; restart the broker to recover it") from None
            self._segments.pop_newest()
            self._flusher.sync_directory(self.directory)
            self._log.info("{directory}: dropped the empty segment at offset {offset}, which the leader's segment "
                           "from {base} goes on past", directory=self.directory, offset=active.base_offset,
                           base=leader_segment_base)
        return False

    def truncate_to(self, offset: int) -> Deferred[int]:
        """Cut the log back to C{offset}, a message boundary at or below the end (L{cut_back}).

        The flushed offset, the high watermark and the leader epochs (L{LeaderEpochCache.truncate_from_end})
        follow; flush listeners are told; those waiting for the flush of a set that was cut get
        L{LogTruncated}.  Nothing happens when C{offset} is the end.

        @return: fires with C{offset} once the cut (and the epochs' file) is durable.
        @raise OffsetOutOfRange: C{offset} is before the start or past the end; nothing changed.
        @raise OffsetNotOnBoundary: C{offset} does not start a message; nothing changed.
        @raise StorageFailed: the log has failed, or the cut failed (the log fails: a restart recovers it).
        """
        if self.closed:
            raise RuntimeError(f"{self.directory} is closed")
        self._stop_pieces()
        if self._flusher.failed is not None:
            raise StorageFailed(f"{self.directory} failed ({self._flusher.failed}); restart the broker to recover it")
        if offset == self.end_offset:
            return succeed(offset)
        end = self.end_offset
        try:
            kept, renamed = cut_back(self._segments, offset, self._config.segment_bytes)
        except OSError as e:
            message = f"truncating {self.directory} to offset {offset} failed: {describe(e)}"
            self._flusher.fail(e, message)
            raise StorageFailed(f"{message}; restart the broker to recover it") from None
        self._log.warn("{directory}: truncated to offset {offset}, {removed} bytes removed", directory=self.directory,
                       offset=offset, removed=end - offset)
        self._flusher.truncated(offset, kept, bool(renamed), LogTruncated(
            f"{self.directory} was truncated to offset {offset} (a replica following a new leader): the set is gone"))
        if self._high_watermark is not None and self._high_watermark > offset:
            self._high_watermark = offset
        epochs = self.epochs.truncate_from_end(offset)
        self._tell_flush_listeners()
        flushed = self._flusher.flush()
        if renamed:
            flushed.addCallback(self._unlink, renamed)
        return gatherResults([flushed, epochs], consumeErrors=True).addCallbacks(
            lambda _: offset, lambda failure: failure.value.subFailure)

    def start_at(self, offset: int) -> Deferred[int]:
        """Empty the log and start it again at C{offset}, at or past its end: a follower whose end is below its
        leader's log start takes the leader's log from there (Kafka's C{truncateFullyAndStartAt}).

        The log is first truncated to its start (L{truncate_to}: every later segment goes, the first is cut
        empty); then that empty segment's file is replaced by an empty one whose base is C{offset}, so the
        leader's first segment and this one start at the same offset.  The leader epochs are cleared (the
        follower records its leader's again), and the high watermark, if any, moves to C{offset}.

        @return: fires with C{offset} once the new segment and the epochs' file are durable.
        @raise ValueError: C{offset} is below the end.
        @raise StorageFailed: as L{truncate_to}, or the new segment could not be created (the log fails).
        """
        if offset < self.end_offset:
            raise ValueError(f"{self.directory}: cannot start again at {offset}, below the end {self.end_offset}")
        return Deferred.fromCoroutine(self._start_at(offset))

    async def _start_at(self, offset: int) -> int:
        await self.truncate_to(self._segments.start_offset)
        if offset > self._segments.end_offset:
            old = self._segments.active
            try:
                segment = Segment.open(self.directory, offset, create=True)
                os.rename(old.path, old.path + DELETED_SUFFIX)
            except OSError as e:
                message = f"starting {self.directory} again at offset {offset} failed: {describe(e)}"
                self._flusher.fail(e, message)
                raise StorageFailed(f"{message}; restart the broker to recover it") from None
            self._segments.start_again(segment)
            old.discard_pending()
            self._flusher.appended(segment, 0)  # the new file, and its directory, go with the next fsync
            self._flusher.sync_directory(self.directory)
            self._flusher.flushed_offset = max(self._flusher.flushed_offset, offset)  # nothing is before it
            if self._high_watermark is not None:
                self._high_watermark = offset
            self._log.warn("{directory}: emptied and started again at offset {offset}", directory=self.directory,
                           offset=offset)
            flushed = self._flusher.flush()
            flushed.addCallback(self._unlink, [old.path + DELETED_SUFFIX])
            await flushed
        await self.epochs.truncate_from_end(0)
        self._tell_flush_listeners()
        return offset

    def _unlink(self, result: object, paths: list[str]) -> object:
        """The cut is durable: unlink the renamed segments on the thread pool (a failure is logged; the files
        go at the next start)."""
        self._run_in_thread(unlink_all, paths).addErrback(
            lambda failure: self._log.warn("{directory}: cannot remove {paths}: {error}", directory=self.directory,
                                           paths=paths, error=describe(failure.value)))
        return result
