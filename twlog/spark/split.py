# -*- test-case-name: tests.spark.test_split -*-
"""C{minPartitions}: splitting large offset ranges into several Spark tasks at real message boundaries.

L{divide} is Spark's Kafka source rule (C{KafkaOffsetRangeCalculator}): with
C{minPartitions} unset, or at most as many as the ranges to read, each topic
partition's range is one task; otherwise ranges too small to split keep one
task, and the others are divided in proportion to their size (at least one
part each, C{round(size / total * parts)}) into near-equal pieces.  Offsets
here are byte positions, so the cut points are then moved to the first whole,
valid message at or after each of them by the broker that holds the
partition (BOUNDARIES, L{twlog.client.sync.SyncConnection.boundaries}, which
answers from its sparse position index): every task starts on a message, and
the tasks of one partition together read exactly the messages the unsplit
range would.  Cut points that land on the same message merge their tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from twlog.protocol.codec import MAX_BOUNDARY_POSITIONS

K = TypeVar("K")

__all__ = ["divide", "split_ranges"]


def _part_count(size: int, total: int, min_partitions: int) -> int:
    return max(round(size / total * min_partitions), 1)


def _pieces(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """C{[start, end)} in C{parts} near-equal pieces; the last takes the rounding."""
    pieces = []
    remaining = end - start
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        pieces.append((start, min(start + size, end)))
        start = pieces[-1][1]
    return [p for p in pieces if p[1] > p[0]]


def _plan(ranges: Sequence[tuple[K, int, int]], min_partitions: int | None) -> list[tuple[K, list[tuple[int, int]]]]:
    """Spark's Kafka rule: each range with something to read, and the byte pieces it is cut into."""
    ranges = [r for r in ranges if r[2] > r[1]]
    if min_partitions is None or len(ranges) >= min_partitions:
        return [(key, [(start, end)]) for key, start, end in ranges]
    total = sum(end - start for _, start, end in ranges)
    unsplit = {i for i, (_, start, end) in enumerate(ranges) if _part_count(end - start, total, min_partitions) == 1}
    split_total = total - sum(ranges[i][2] - ranges[i][1] for i in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    plan = []
    for i, (key, start, end) in enumerate(ranges):
        parts = 1 if i in unsplit else _part_count(end - start, split_total, split_min)
        plan.append((key, _pieces(start, end, parts)))
    return plan


def divide(ranges: Sequence[tuple[K, int, int]], min_partitions: int | None) -> list[tuple[K, int, int]]:
    """Spark's Kafka rule: the C{(key, start, end)} ranges, the large ones cut into byte pieces (not yet on
    message boundaries), in order; ranges with nothing to read are dropped."""
    return [(key, start, end) for key, pieces in _plan(ranges, min_partitions) for start, end in pieces]


def split_ranges(
    ranges: Sequence[tuple[K, int, int]],
    min_partitions: int | None,
    boundaries: Callable[[K, list[int]], list[int]],
) -> list[tuple[K, int, int]]:
    """L{divide}, with each cut point moved to the message boundary C{boundaries(key, positions)} answers.

    C{boundaries} gives, for positions inside a key's range, the offset of the first message at or after
    each (the broker's BOUNDARIES, at most L{MAX_BOUNDARY_POSITIONS} per call); pieces that become
    empty are dropped.
    """
    out = []
    for key, pieces in _plan(ranges, min_partitions):
        start, end = pieces[0][0], pieces[-1][1]
        cuts = [piece_start for piece_start, _ in pieces[1:]]
        moved: list[int] = []
        for first in range(0, len(cuts), MAX_BOUNDARY_POSITIONS):
            moved += boundaries(key, cuts[first : first + MAX_BOUNDARY_POSITIONS])
        edges = [start]
        for offset in moved:
            edges.append(min(max(offset, edges[-1]), end))
        edges.append(end)
        out += [(key, a, b) for a, b in zip(edges, edges[1:]) if b > a]
    return out
