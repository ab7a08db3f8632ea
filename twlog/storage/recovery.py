# -*- test-case-name: tests.storage.test_recovery -*-
"""Recovery after an unclean shutdown: cut a log's last segment after its last whole, valid message.

A killed broker (or a power loss) can leave the active segment ending in a
short, partial or CRC-invalid entry.  L{recover_segment} scans the segment
in chunks of L{RECOVERY_CHUNK_BYTES} and truncates it at the first such entry,
so that every byte a reader can reach is a valid message again.

The scanned segment's position index (L{twlog.storage.index}) is rebuilt at
the same time, from the same chunks (the kernel's L{index_walk} over the
entries each scan kept), so the segment is read once.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from twlog.storage.index import INDEX_INTERVAL_BYTES
from twlog.storage.kernel import index_walk
from twlog.storage.segment import Segment
from twlog.storage.validation import scan

#: Bytes read at a time while scanning a segment.
RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024


class Truncation(NamedTuple):
    """What recovery cut from a segment: from which logical offset, how many bytes, and why."""

    path: str
    offset: int
    removed_bytes: int
    reason: str


def recover_segment(segment: Segment, max_entry_bytes: int) -> Truncation | None:
    """Truncate C{segment} after its last whole, valid message, and rebuild its position index; what was
    cut, or None if nothing was.

    @param max_entry_bytes: the largest entry a valid segment holds (the segment size).
    """
    file_size = segment.size
    valid = 0  # file position up to which entries are whole and valid
    pending = b""
    read_pos = 0
    problem = None
    positions = array("q")
    due = 0
    while valid < file_size:
        chunk = segment.pread(read_pos, RECOVERY_CHUNK_BYTES) if read_pos < file_size else b""
        read_pos += len(chunk)
        buf = pending + chunk if pending else chunk
        result = scan(buf, max_entry_bytes, origin=valid)
        _, found, due = index_walk(buf, 0, result.valid_bytes, max_entry_bytes, valid, due, INDEX_INTERVAL_BYTES)
        positions.extend(found)
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
    truncation = None
    if valid != file_size:
        if problem is None:
            problem = "partial message at the end of the file"
        segment.truncate(valid)
        truncation = Truncation(segment.path, segment.base_offset + valid, file_size - valid, problem)
    segment.index.load(positions)
    return truncation
