# -*- test-case-name: tests.bench.test_replica_logs -*-
"""What each broker's log directory holds of a partition, read off disk after a fault run, and whether replicas'
files agree byte for byte.

L{read_replica} reads C{<log-dir>/<topic>-<p>} without opening it as a log:
nothing is created, recovered, truncated or locked, so it reads the
directory of a broker that was killed, or of one still running (what was
written so far).  It lists the segment files (L{parse_segment_name}), checks
that they follow each other, and decodes their messages with the readers'
own L{scan_messages}; a compressed wrapper's messages share its offset and are
told apart by their index inside it.  Where a message cannot be read (a
crash's torn last entry, which recovery would cut, or a bad CRC) reading
stops and L{ReplicaContents.problem} says where and why.  The high watermark
is the one the directory's C{replication-offset-checkpoint} holds (written
now and then, so it may lag).

L{compare_segment_files} compares replicas' bytes up to an offset (the high
watermark): the bytes at each offset, and the segment files themselves
(their names, and so where each file starts).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import attrs

from twlog.errors import CorruptLog
from twlog.storage.checkpoints import read_replication_offsets
from twlog.storage.directory import parse_partition_directory, partition_directory
from twlog.storage.fetched import CorruptMessage, scan_messages
from twlog.storage.segment import parse_segment_name

__all__ = ["ByteComparison", "Position", "ReplicaContents", "compare_segment_files", "read_all_replicas",
           "read_replica", "segment_files"]

#: Where a message is: its offset, and its index inside a compressed wrapper (0 for a plain message).
Position = tuple[int, int]


@attrs.frozen
class ReplicaContents:
    """One replica of one partition, as its broker's log directory holds it."""

    broker: str
    topic: str
    partition: str
    #: The offset of the first byte on disk, and of the byte after the last one read.
    start: int
    end: int
    #: Each message's payload, by position, in log order.
    messages: dict[Position, bytes]
    #: From the directory's replication-offset-checkpoint; None when it names no such partition.
    high_watermark: int | None = None
    #: Why reading stopped before the end of the files, or None.
    problem: str | None = None

    def value_at(self, position: Position) -> bytes | None:
        return self.messages.get(position)


def segment_files(partition_dir: str) -> list[tuple[int, str]]:
    """(base offset, path) of each segment file of a partition directory, oldest first (none if it is missing)."""
    try:
        names = os.listdir(partition_dir)
    except FileNotFoundError:
        return []
    found = sorted((base, name) for base, name in ((parse_segment_name(n), n) for n in names) if base is not None)
    return [(base, os.path.join(partition_dir, name)) for base, name in found]


def read_replica(log_dir: str, topic: str, partition: int | str, broker: object = None) -> ReplicaContents:
    """The messages of partition C{partition} of C{topic} in C{log_dir} (see the module's description)."""
    label = str(broker if broker is not None else log_dir)
    files = segment_files(os.path.join(log_dir, partition_directory(topic, int(partition))))
    messages: dict[Position, bytes] = {}
    problem = None
    start = end = files[0][0] if files else 0
    for base, path in files:
        if base != end:
            problem = f"{path}: the segment starts at offset {base}, but the one before ends at {end}"
            break
        with open(path, "rb") as f:
            data = f.read()
        end, problem = _scan_into(messages, data, base, path)
        if problem is not None:
            break
    return ReplicaContents(label, topic, str(partition), start, end, messages,
                           _high_watermark(log_dir, topic, int(partition)), problem)


def _scan_into(messages: dict[Position, bytes], data: bytes, base: int, path: str) -> tuple[int, str | None]:
    """Add a segment's messages; the offset after the last one read, and why reading stopped before the end."""
    last_offset, index, end = -1, 0, base
    for item in scan_messages(data, base, whole_buffer=True):
        if isinstance(item, CorruptMessage):
            return end, f"{path}: {item}"
        index = index + 1 if item.offset == last_offset else 0
        last_offset, end = item.offset, max(end, item.next_offset)
        messages[(item.offset, index)] = item.payload
    return end, None


def _high_watermark(log_dir: str, topic: str, partition: int) -> int | None:
    try:
        return read_replication_offsets(log_dir).get((topic, partition))
    except CorruptLog:
        return None


def read_all_replicas(log_dirs: Mapping[object, str], topic: str | None = None) -> list[ReplicaContents]:
    """Every partition directory (of C{topic}, or of every topic) in each broker's log directory, read."""
    found = []
    for broker, log_dir in sorted(log_dirs.items(), key=lambda item: str(item[0])):
        for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
            parsed = parse_partition_directory(name)
            if parsed is not None and os.path.isdir(os.path.join(log_dir, name)) and topic in (None, parsed[0]):
                found.append(read_replica(log_dir, parsed[0], parsed[1], broker))
    return found


@attrs.frozen
class ByteComparison:
    """How replicas' files of one partition compare up to C{up_to}, against the first replica named."""

    topic: str
    partition: str
    up_to: int
    #: Each difference in the bytes at some offset (or a replica that ends before C{up_to}), one line each.
    differences: tuple[str, ...]
    #: The base offsets of each replica's segment files that start before C{up_to}.
    layouts: Mapping[str, tuple[int, ...]]

    @property
    def same_bytes(self) -> bool:
        return not self.differences

    @property
    def same_files(self) -> bool:
        """The same bytes, in segment files of the same names: the files are identical up to C{up_to}."""
        return self.same_bytes and len(set(self.layouts.values())) <= 1

    def layout_lines(self) -> list[str]:
        return [f"{label}: segments at {list(bases)}" for label, bases in self.layouts.items()]


def compare_segment_files(log_dirs: Mapping[object, str], topic: str, partition: int | str,
                          up_to: int) -> ByteComparison:
    """Compare the replicas in C{log_dirs} (broker -> log directory) of a partition from their latest start to
    C{up_to}, in chunks of the files.  The first difference between the first replica and each other is named."""
    labels = [str(b) for b in log_dirs]
    files = {str(b): segment_files(os.path.join(d, partition_directory(topic, int(partition))))
             for b, d in log_dirs.items()}
    layouts = {label: tuple(base for base, _ in files[label] if base < up_to) for label in labels}
    differences = []
    ends = {label: _end(files[label]) for label in labels}
    for label in labels:
        if ends[label] < up_to:
            differences.append(f"broker {label} ends at offset {ends[label]}, before {up_to}")
    start = max((fs[0][0] for fs in files.values() if fs), default=0)
    if labels and not differences:
        reference = labels[0]
        for label in labels[1:]:
            first = _first_difference(files[reference], files[label], start, up_to)
            if first is not None:
                differences.append(f"brokers {reference} and {label} differ first at offset {first}")
    return ByteComparison(topic, str(partition), up_to, tuple(differences), layouts)


def _end(files: list[tuple[int, str]]) -> int:
    return files[-1][0] + os.path.getsize(files[-1][1]) if files else 0


def _first_difference(a: list[tuple[int, str]], b: list[tuple[int, str]], start: int, up_to: int) -> int | None:
    offset = start
    for chunk_a, chunk_b in zip(_chunks(a, start, up_to), _chunks(b, start, up_to)):
        if chunk_a != chunk_b:
            same = next((i for i, (x, y) in enumerate(zip(chunk_a, chunk_b)) if x != y), None)
            return offset + (same if same is not None else min(len(chunk_a), len(chunk_b)))
        offset += len(chunk_a)
    return None


_CHUNK = 1024 * 1024


def _chunks(files: list[tuple[int, str]], start: int, up_to: int) -> Iterator[bytes]:
    """The bytes at offsets [start, up_to), in chunks that end at multiples of 1 MiB from C{start} (so two
    replicas' chunks line up whatever their segment boundaries)."""
    pending = b""
    for base, path in files:
        size = os.path.getsize(path)
        lo, hi = max(start, base), min(up_to, base + size)
        if lo >= hi:
            continue
        with open(path, "rb") as f:
            f.seek(lo - base)
            remaining = hi - lo
            while remaining:
                piece = f.read(min(remaining, _CHUNK))
                if not piece:
                    break
                remaining -= len(piece)
                pending += piece
                while len(pending) >= _CHUNK:
                    yield pending[:_CHUNK]
                    pending = pending[_CHUNK:]
    if pending:
        yield pending
