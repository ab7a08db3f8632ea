# -*- test-case-name: tests.storage.test_segment_list -*-
"""The segments of one partition, oldest first: L{SegmentList} (Kafka 0.7's C{SegmentList}).

A partition's log is a run of contiguous segment files, each named for the
offset of its first byte.  L{SegmentList} opens them, checks that they leave
no gap, finds the one holding an offset by bisecting their base offsets, adds
a segment at the end (a roll) and takes the oldest off the front (retention).
It knows nothing of flushing, validation or the clock.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Sequence

from twlog.errors import CorruptLog
from twlog.storage.segment import SEGMENT_SUFFIX, Segment, descriptors_error, out_of_descriptors, parse_segment_name

__all__ = ["DELETED_SUFFIX", "SegmentList", "drop_overlapped_empty", "open_segments"]

#: Added to a segment file's name when a truncation drops it; such files are unlinked, at the latest at the
#: next open.
DELETED_SUFFIX = ".deleted"


class SegmentList:
    """A partition's segments, oldest first; the last is the active one, where appends go."""

    def __init__(self, directory: str, segments: Sequence[Segment]) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self._segments = list(segments)
        self._bases = [s.base_offset for s in segments]

    @classmethod
    def open(cls, directory: str) -> tuple["SegmentList", bool]:
        """Open the segments of C{directory} (created if missing, with a first empty segment); and whether
        that segment was created.

        @raise CorruptLog: the segments leave a gap or overlap; nothing is left open.
        @raise TooManyOpenFiles: out of descriptors; nothing is left open.
        """
        segments, created = open_segments(directory)
        segments = drop_overlapped_empty(segments)
        for before, after in zip(segments, segments[1:]):
            if before.end_offset != after.base_offset:
                for segment in segments:
                    segment.close()
                raise CorruptLog(
                    f"{directory}: segment {os.path.basename(before.path)} ends at offset {before.end_offset}"
                    f" but the next segment starts at {after.base_offset}; move the damaged segments"
                    " away to open this partition"
                )
        return cls(directory, segments), created

    @property
    def start_offset(self) -> int:
        """The offset of the first byte still on disk."""
        return self._bases[0]

    @property
    def end_offset(self) -> int:
        """The offset after the last byte written (to the active segment)."""
        return self._segments[-1].end_offset

    @property
    def active(self) -> Segment:
        """The last segment: the one appends go to."""
        return self._segments[-1]

    @property
    def segments(self) -> list[Segment]:
        """The segments, oldest first (a copy)."""
        return list(self._segments)

    @property
    def bases(self) -> list[int]:
        """Each segment's base offset, oldest first (a copy)."""
        return list(self._bases)

    def __len__(self) -> int:
        return len(self._segments)

    def holding(self, offset: int) -> Segment:
        """The segment whose range holds C{offset} (the active one for its end); the caller checks the range."""
        return self._segments[max(bisect_right(self._bases, offset) - 1, 0)]

    def size_bytes(self) -> int:
        """Bytes on disk over all segments."""
        return sum(s.size for s in self._segments)

    def roll(self) -> Segment:
        """Put the active segment's buffered writes into its file and start a new, empty one at the end.

        @raise TooManyOpenFiles: no descriptor for the new file; nothing changed.
        """
        self._segments[-1].write_out()
        try:
            segment = Segment.open(self.directory, self.end_offset, create=True)
        except OSError as e:
            if out_of_descriptors(e):
                raise descriptors_error(e, f"cannot roll {self.directory}") from None
            raise
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    def pop_oldest(self) -> Segment:
        """Take the oldest segment off the list (its file stays; retention deletes it).  Never the active one."""
        assert len(self._segments) > 1, "the active segment stays"
        self._bases.pop(0)
        return self._segments.pop(0)

    def pop_newest(self) -> Segment:
        """Take the active segment off the list (a truncation); the one before it becomes the active one."""
        assert len(self._segments) > 1, "a log always has an active segment"
        self._bases.pop()
        return self._segments.pop()

    def start_again(self, segment: Segment) -> list[Segment]:
        """Make C{segment} the only segment (the log starts again at its base, past the end: a follower below
        its leader's log start); return the segments taken off the list (their files stay: the caller's)."""
        assert segment.base_offset >= self.end_offset, "a log never goes back"
        old, self._segments, self._bases = self._segments, [segment], [segment.base_offset]
        return old

    def close(self) -> None:
        """Close every segment's descriptor."""
        for segment in self._segments:
            segment.close()


def drop_overlapped_empty(segments: list[Segment]) -> list[Segment]:
    """C{segments} without the empty ones whose base lies inside the segment before them, whose files are
    unlinked: a follower dropped such a segment to append to the one before it, as its leader's segments go
    (L{twlog.storage.replica.ReplicaLog.align_segment}), and a crash brought the file back.  They hold no byte.

    @raise OSError: an unlink failed; nothing is left open.
    """
    kept: list[Segment] = []
    for segment in segments:
        if kept and segment.size == 0 and segment.base_offset < kept[-1].end_offset:
            try:
                segment.close()
                os.unlink(segment.path)
            except OSError:
                for other in segments:
                    other.close()
                raise
            continue
        kept.append(segment)
    return kept


def open_segments(directory: str) -> tuple[list[Segment], bool]:
    """Open every segment of C{directory} (created if missing), or create its first; and whether it was created.

    @raise TooManyOpenFiles: out of descriptors; the segments opened so far are closed again.
    """
    segments: list[Segment] = []
    try:
        os.makedirs(directory, exist_ok=True)
        names = os.listdir(directory)
        for name in names:
            if name.endswith(SEGMENT_SUFFIX + DELETED_SUFFIX):  # dropped by a truncation that was not finished
                os.unlink(os.path.join(directory, name))
        bases = sorted(base for base in map(parse_segment_name, names) if base is not None)
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
