# -*- test-case-name: tests.storage.test_index -*-
"""A sparse position index per segment: a message boundary about every L{INDEX_INTERVAL_BYTES}.

Offsets are byte positions, so a reader that wants to start in the middle of
a partition (the Spark source splitting one partition's range into several
tasks) cannot tell where a message starts without reading up to it.  The
index answers that cheaply: L{PositionIndex} keeps sorted file positions of
message starts, one at least every L{INDEX_INTERVAL_BYTES} (a set of at most
L{WALK_SET_BYTES} is indexed by its start alone, so entries are at most that
far apart, or one message apart when a message is larger), and
L{find_boundary} hops from the nearest entry at or before a position over
length fields (one C{pread} of a few KB) to the first whole, CRC-valid
message at or after it.

The index lives in memory.  Appends add to it as they happen (the set is
already validated, so its entries are boundaries).  A segment found on disk
at start is indexed by one pass over its length fields (L{index_positions}):
at once for a segment that recovery scans (the last one after an unclean
shutdown: the index is rebuilt with it), and for the others the first time a
boundary is asked in them, on the thread pool, since a 1 GiB segment takes a
while to read.  Everything here except that pass is pure and quick.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Sequence

from twlog.storage.entry import MIN_MESSAGE_BYTES
from twlog.storage.kernel import index_walk, whole_end
from twlog.storage.validation import scan

#: About how far apart index entries are.
INDEX_INTERVAL_BYTES = 4096
#: Sets larger than this are walked (one length field per message) to index inside them.
WALK_SET_BYTES = 4 * INDEX_INTERVAL_BYTES
#: Bytes read at a time by L{index_positions} and L{find_boundary}.
_CHUNK_BYTES = 8 * 1024 * 1024
#: How far past the asked position L{find_boundary} looks for a valid message before giving up.
_SEARCH_BYTES = 4 * 1024 * 1024

_LENGTH = struct.Struct(">i")


class PositionIndex:
    """Sorted file positions of message starts in one segment, about one per L{INDEX_INTERVAL_BYTES}.

    Positions below L{unindexed} are not known until L{load} gives them (a segment found on disk):
    L{ready} says whether lookups can be answered.
    """

    def __init__(self, unindexed: int = 0) -> None:
        self.positions = array("q")
        #: The file size when the segment was opened: what L{index_positions} must cover before lookups.
        self.unindexed = unindexed
        self._next_due = unindexed

    @property
    def ready(self) -> bool:
        return self.unindexed == 0

    def load(self, positions: array) -> None:
        """Take the positions found by L{index_positions} below L{unindexed}, ahead of those appended since."""
        self.positions = array("q", [p for p in positions if p < self.unindexed]) + self.positions
        self.unindexed = 0

    def add_set(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Index the validated message set C{data} appended at file C{position}."""
        if position >= self._next_due:
            self.positions.append(position)
            self._next_due = position + INDEX_INTERVAL_BYTES
        if len(data) <= WALK_SET_BYTES:
            return
        # The set is validated: the kernel's walk over its length fields stops only at its end (or at bytes that
        # are not a message set, which only tests append).
        _, found, self._next_due = index_walk(data, 0, -1, 0x7FFFFFFF, position, self._next_due,
                                              INDEX_INTERVAL_BYTES)
        self.positions.extend(found)

    def truncate(self, size: int) -> None:
        """Forget positions at or past C{size} (the file was cut there)."""
        keep = bisect_right(self.positions, size - 1)
        del self.positions[keep:]
        self.unindexed = min(self.unindexed, size)
        self._next_due = min(self._next_due, size)

    def floor(self, position: int) -> int:
        """The greatest indexed position at or before C{position} (0, the segment's start, if none)."""
        i = bisect_right(self.positions, position)
        return self.positions[i - 1] if i else 0


def index_positions(pread, size: int, max_entry_bytes: int) -> array:
    """Message starts in the first C{size} bytes of a segment, about one per L{INDEX_INTERVAL_BYTES}.

    One pass over the length fields in the kernel (L{twlog.storage.kernel.index_walk};
    C{pread(position, length)} reads the file), no CRC: the bytes were validated when appended, or by recovery.
    Stops at a length field that is not sane (a damaged older segment): the
    index then ends there, and lookups past it find no boundary.
    """
    positions = array("q")
    due = 0
    base = 0
    while base < size:
        chunk = pread(base, min(_CHUNK_BYTES, size - base))
        n = len(chunk)
        pos, found, due = index_walk(chunk, 0, n, max_entry_bytes, base, due, INDEX_INTERVAL_BYTES)
        positions.extend(found)
        if pos + 4 <= n:  # stopped at a length field that is not sane
            return positions
        if pos == 0 or not n:
            break
        base += pos
    return positions


def find_boundary(pread, index: PositionIndex, position: int, limit: int, max_entry_bytes: int) -> int:
    """The file position of the first whole, CRC-valid message at or after C{position} and before C{limit}.

    C{limit} (the visible end of the segment's data) when there is none: no
    such message within L{_SEARCH_BYTES} of C{position}, or a length field
    that is not sane on the way (the position cannot be placed).  Hops from
    the nearest index entry at or before C{position} over length fields (in the kernel);
    messages that fail their CRC are hopped over as well (a reader starting
    at the answer is never refused).
    """
    if position >= limit:
        return limit
    pos = index.floor(position)
    buf = b""
    buf_start = pos
    while pos < limit and pos - position < _SEARCH_BYTES:
        if pos + 4 > buf_start + len(buf):
            buf_start, buf = pos, pread(pos, min(limit - pos, max(position - pos, 0) + 65536))
        if pos < position:  # hop the whole, sane entries before the position in the kernel (length fields only)
            hopped = buf_start + whole_end(buf, pos - buf_start, min(position, limit) - buf_start, max_entry_bytes)
            if hopped > pos:
                pos = hopped
                continue
        length = _LENGTH.unpack_from(buf, pos - buf_start)[0] if pos + 4 <= buf_start + len(buf) else -1
        if length < MIN_MESSAGE_BYTES or length > max_entry_bytes or pos + 4 + length > limit:
            return limit
        if pos >= position:
            end = pos + 4 + length
            if end > buf_start + len(buf):
                buf_start, buf = pos, pread(pos, 4 + length)
            entry = buf[pos - buf_start : end - buf_start]
            if scan(entry, max_entry_bytes).count == 1:
                return pos
        pos += 4 + length
    return limit


def unindexed(segments: Sequence, bases: Sequence[int], positions: Sequence[int], visible: int) -> list:
    """The segments (of a log, whose base offsets are C{bases}) holding C{positions} with visible data below
    C{visible} and no index yet: those L{index_segments} must index before L{boundaries} can answer."""
    found = {}
    for position in positions:
        segment = segments[bisect_right(bases, position) - 1]
        if not segment.index.ready and segment.base_offset < visible:
            found[id(segment)] = segment
    return list(found.values())


def index_segments(segments: Sequence, max_entry_bytes: int) -> list[array]:
    """L{index_positions} of each segment's part found on disk (blocking: run it on a pool thread)."""
    return [index_positions(s.pread, s.index.unindexed, max_entry_bytes) for s in segments]


def boundaries(segments: Sequence, bases: Sequence[int], positions: Sequence[int], visible: int,
               max_entry_bytes: int) -> list[int]:
    """For each logical position of a log, the offset of the first whole, CRC-valid message at or after it.

    A position at or past C{visible} (the flushed end), or with no such message before it in its
    segment, gets C{visible} (or the end of its segment, where the next one starts).
    """
    found = []
    for position in positions:
        segment = segments[bisect_right(bases, position) - 1]
        if position >= visible or not segment.index.ready:
            found.append(visible)
            continue
        base = segment.base_offset
        limit = min(segment.size, visible - base)
        found.append(base + find_boundary(segment.pread, segment.index, position - base, limit, max_entry_bytes))
    return found
