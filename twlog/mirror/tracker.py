# -*- test-case-name: tests.mirror.test_tracker -*-
"""Which source offsets a mirror may commit: the end of the longest acknowledged prefix, per partition.

A mirror hands a partition's messages to the target in order, in batches that
the target acknowledges in any order.  A source offset may be committed only
when the target acknowledged everything before it, so each partition keeps
its batches in hand-out order, and an acknowledgement moves the partition's
watermark to the end of the longest run of acknowledged batches at the front.
Pure: no I/O.
"""

from __future__ import annotations

from collections import deque

from twlog.partition import TopicPartition


class Mark:
    """One batch's last message of one partition: its next offset, and whether the target acknowledged it."""

    __slots__ = ("done", "key", "next_offset")

    def __init__(self, key: TopicPartition, next_offset: int) -> None:
        self.key = key
        self.next_offset = next_offset
        self.done = False


class OffsetTracker:
    """Per partition: the marks handed out and not yet under the watermark."""

    def __init__(self) -> None:
        self._marks: dict[TopicPartition, deque[Mark]] = {}

    def add(self, partition: TopicPartition, next_offset: int) -> Mark:
        """A batch holding messages of C{partition} up to C{next_offset} goes to the target."""
        mark = Mark(partition, next_offset)
        self._marks.setdefault(mark.key, deque()).append(mark)
        return mark

    def done(self, mark: Mark) -> int | None:
        """The target acknowledged C{mark}'s batch: the partition's new watermark, or None if it did not move."""
        mark.done = True
        marks = self._marks.get(mark.key)
        watermark = None
        while marks and marks[0].done:
            watermark = marks.popleft().next_offset
        if marks is not None and not marks:
            del self._marks[mark.key]
        return watermark

    @property
    def pending(self) -> int:
        """Marks not under a watermark yet."""
        return sum(len(marks) for marks in self._marks.values())


__all__ = ["Mark", "OffsetTracker"]
