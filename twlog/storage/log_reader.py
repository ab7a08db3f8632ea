# -*- test-case-name: tests.storage.test_log_reader,tests.storage.test_index -*-
"""What readers get from one partition's log: L{LogReader}.

Three questions are answered from the flushed segments, never past the
flushed offset: the bytes from an offset (a fetch: a L{FileRegion} to send
zero-copy), the offsets before a time (Kafka 0.7's OFFSETS), and the first
message at or after each of some positions (BOUNDARIES, through the sparse
position index of L{twlog.storage.index}).  Appends, flushes and retention
change what it sees; it changes nothing but the position indexes it loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import attrs
from twisted.internet.defer import Deferred, succeed

from twlog.errors import FetchSizeTooSmall, InvalidFetchSize, OffsetNotOnBoundary, OffsetOutOfRange
from twlog.storage.entry import MIN_MESSAGE_BYTES
from twlog.storage.flush import ThreadRunner
from twlog.storage.index import boundaries, index_segments, unindexed
from twlog.storage.segment import FileRegion, Segment
from twlog.storage.segment_list import SegmentList
from twlog.storage.validation import scan

__all__ = ["EARLIEST_TIME", "LATEST_TIME", "LogReader", "check_message_start", "offsets_newest_first"]

#: OFFSETS' special times, as in Kafka 0.7.
LATEST_TIME = -1
EARLIEST_TIME = -2


@attrs.define(eq=False)
class LogReader:
    """Reads one partition's segments up to its flushed offset: fetches, OFFSETS and BOUNDARIES.

    C{flushed_offset} is asked on every read, since flushes move it; C{run_in_thread} indexes
    segments found on disk (for BOUNDARIES) off the reactor thread.
    """

    _segments: SegmentList
    _flushed_offset: Callable[[], int]
    _segment_bytes: int
    _run_in_thread: ThreadRunner

    def read(self, offset: int, max_bytes: int, *, partial_ok: bool = False, end: int | None = None) -> FileRegion:
        """The flushed bytes from C{offset}, at most C{max_bytes}, within one segment (L{twlog.storage.log.Log.read});
        with C{end}, the bytes up to C{end} instead (a leader's written end, for its followers: L{Log.read_replica}).

        @raise InvalidFetchSize: C{max_bytes} is not positive.
        @raise OffsetOutOfRange: C{offset} is before the start or past the end.
        @raise OffsetNotOnBoundary: C{offset} is inside the log but inside a message.
        @raise FetchSizeTooSmall: the message at C{offset} is larger than C{max_bytes} (unless C{partial_ok}).
        """
        if max_bytes <= 0:
            raise InvalidFetchSize(f"fetch size {max_bytes} must be positive")
        self._check_in_range(offset, "offset")
        visible = self._flushed_offset() if end is None else end
        segment = self._segments.holding(offset)
        position = offset - segment.base_offset
        if offset >= visible:
            return FileRegion(segment, position, 0, offset)
        available = min(segment.size, visible - segment.base_offset) - position
        check_message_start(segment, position, available, None if partial_ok else max_bytes, offset,
                            self._segment_bytes)
        return FileRegion(segment, position, min(max_bytes, available), offset)

    def offsets_before(self, time_ms: int, max_offsets: int, now_ms: int) -> list[int]:
        """Kafka 0.7's OFFSETS: up to C{max_offsets} offsets, newest first (see L{offsets_newest_first}).

        Offsets past the flushed end are never answered, not even the base of a
        rolled but unflushed segment.
        """
        visible = self._flushed_offset()
        entries = [(s.base_offset, s.mtime_ms()) for s in self._segments.segments if s.base_offset <= visible]
        if not entries or visible > entries[-1][0]:
            entries.append((visible, now_ms))
        return offsets_newest_first(entries, time_ms, max_offsets)

    def boundaries(self, positions: Sequence[int]) -> Deferred[list[int]]:
        """For each position, the offset of the first whole, CRC-valid message at or after it (the flushed end
        when there is none); segments found on disk are indexed first, on the thread pool.

        @raise OffsetOutOfRange: a position before the first offset or past the written end.
        """
        for position in positions:
            self._check_in_range(position, "position")
        pending = unindexed(self._segments.segments, self._segments.bases, positions, self._flushed_offset())
        if not pending:
            return succeed(self._boundaries_now(positions))
        d = self._run_in_thread(index_segments, pending, self._segment_bytes)
        return d.addCallback(lambda found: [s.index.load(p) for s, p in zip(pending, found)]).addCallback(
            lambda _: self._boundaries_now(positions))

    def _boundaries_now(self, positions: Sequence[int]) -> list[int]:
        for position in positions:  # again: retention may have run while segments were indexed
            self._check_in_range(position, "position")
        return boundaries(self._segments.segments, self._segments.bases, positions, self._flushed_offset(),
                          self._segment_bytes)

    def _check_in_range(self, offset: int, what: str) -> None:
        start, end = self._segments.start_offset, self._segments.end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(f"{what} {offset} is outside {os.path.basename(self._segments.directory)}"
                                   f" [{start}, {end}]")


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
    """OFFSETS' answer from C{(start offset, last modified ms)} entries, oldest first.

    C{time_ms} is L{LATEST_TIME} (the last entry), L{EARLIEST_TIME} (the
    first), or a time: the entries last modified at or before it.
    """
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
