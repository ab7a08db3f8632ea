# -*- test-case-name: tests.spark.test_arrow -*-
"""Arrow record batches built straight from fetched message-set bytes: the Spark source's fast path.

L{scan_fetch} walks a fetched buffer once, with the message walk's kernel
(L{twlog.storage.kernel.walk}: compiled when built, no per-message object), and L{record_batch} turns what it
found into Arrow columns without per-row Python work:

  - C{value}: one buffer of the payloads and an int32 offsets array, both made by the compiled
    kernel's C{gather} (one C{memcpy} per payload; with the pure-Python kernel, numpy gathers them,
    the headers masked out, and computes the offsets from the message positions), wrapped as they are
    (C{pyarrow.BinaryArray.from_buffers});
  - C{offset}: an int64 array; C{topic}, C{partition}, C{broker}: constant
    columns made from one value (C{StringArray.from_buffers}, C{numpy.full}).

Every CRC is checked, compressed wrappers included (their inner sets are
walked by the same loop).  Anything but whole, valid messages (a corrupt
message, a nested wrapper, a first message larger than the buffer) makes
L{scan_fetch} return None: the caller then decodes that fetch message by
message (L{twlog.storage.message.scan_messages}), which reports each bad
message exactly, so the fast path never changes what a read returns.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import CODEC_NONE, decompress
from twlog.storage.kernel import KERNEL, MAGIC1, WRAPPERS, gather, walk
from twlog.storage.message import MIN_MESSAGE_BYTES

__all__ = ["ARROW_SCHEMA", "Rows", "constant_strings", "record_batch", "rows_from_lists", "scan_fetch"]

ARROW_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.string()), ("offset", pa.int64()), ("value", pa.binary()),
     ("broker", pa.int32())]
)

_LENGTH = struct.Struct(">i")
_MAGIC_PLAIN = 0
_MAGIC_ATTRIBUTES = 1
#: The byte positions of a message header after its start (a magic-1 header has one more).
_HEADER_BYTES = np.arange(9, dtype=np.int64)


class Rows(NamedTuple):
    """The messages of one fetch before the range's end, as columns (not yet Arrow), and where to go on."""

    #: Each row's log offset (messages of a compressed set share their wrapper's).
    offsets: np.ndarray
    #: The payloads, gathered into one buffer (bytes or a numpy uint8 array).
    data: bytes | np.ndarray
    #: int32, one more than the rows: row i's value is C{data[value_offsets[i]:value_offsets[i + 1]]}.
    value_offsets: np.ndarray
    #: Where reading goes on.
    next_offset: int
    #: The offset of the last message read when it ends at C{next_offset}, else None.
    last: int | None

    @property
    def last_boundary(self) -> tuple[int, int] | None:
        """The last message's offset and the offset after it, when it ends where reading goes on (as
        L{twlog.client.reader.FetchedMessages.last_boundary}, for the partition reader)."""
        return None if self.last is None else (self.last, self.next_offset)


class _Walk(NamedTuple):
    """What L{_walk} found: entry positions, whether all are magic 0 (9-byte headers), bytes consumed, and the
    positions of the compressed wrappers among the entries."""

    positions: array
    plain: bool
    consumed: int
    wrappers: array = array("q")


def _walk(buf: bytes, limit: int) -> _Walk | None:
    """Walk the whole entries of C{buf} that start before C{limit}; None at the first bad one.

    Checks each entry's size, magic, attributes and CRC.  A compressed wrapper
    is one entry here (its CRC checked, not opened); a partial last entry ends
    the walk.  The loop is the kernel's (L{twlog.storage.kernel.walk}, compiled
    when built); only the entry it stopped at is looked at here, to tell a
    partial last entry (the end of the walk) from a bad one.
    """
    n = len(buf)
    limit = max(limit, 0)  # the kernel reads a negative limit as "to the end"
    pos, positions, width, wrappers = walk(buf, 0, limit, 0x7FFFFFFF, MAGIC1 | WRAPPERS)
    if pos < min(limit, n - 8):  # stopped at an entry with a whole header: only one running past the end is not bad
        size = _LENGTH.unpack_from(buf, pos)[0]
        if size < MIN_MESSAGE_BYTES or pos + 4 + size <= n:
            return None
    del positions[-1]
    return _Walk(positions, width == 9, pos, wrappers)


def _gather(buf: bytes, walk: _Walk) -> tuple[np.ndarray, np.ndarray]:
    """The payloads of the walked (uncompressed) entries, gathered into one array, and their lengths.

    Entries are contiguous, so entry i ends where entry i + 1 starts; the
    headers (9 bytes, 10 for magic 1) are masked out of the consumed bytes by numpy.
    """
    starts = np.frombuffer(walk.positions, dtype=np.int64)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = walk.consumed
    raw = np.frombuffer(buf, dtype=np.uint8, count=walk.consumed)
    keep = np.ones(walk.consumed, dtype=bool)
    keep[(starts[:, None] + _HEADER_BYTES).ravel()] = False
    lengths = ends - starts - 9
    if not walk.plain:
        magic1 = starts[raw[starts + 4] == _MAGIC_ATTRIBUTES]
        keep[magic1 + 9] = False
        lengths -= raw[starts + 4].astype(np.int64)
    return raw[keep], lengths


def scan_fetch(buf: bytes | memoryview, offset: int, end: int, max_decompressed_bytes: int,
               walked: Callable[[int], object] | None = None) -> Rows | None:
    """The rows of the fetched C{buf} (log bytes from C{offset}) before offset C{end}; None to decode it slowly.

    None when C{buf} holds a bad message (size, magic, attributes, CRC; a
    wrapper that does not open, or holds a bad or compressed message), or not
    one whole message: the per-message decoder then says exactly what and
    where, as the source's semantics require.

    @param walked: called with the offset after the last whole, valid message as soon as the walk found it
        (before the payloads are gathered), when there are rows to build: where the next fetch starts.
    """
    walk = _walk(buf, min(len(buf), end - offset))
    if walk is None or not walk.positions:
        return None
    if walked is not None:
        walked(offset + walk.consumed)
    positions = walk.positions
    if not walk.wrappers and KERNEL == "compiled":  # the payloads copied out in C, with their value offsets
        data, gathered = gather(buf, positions, walk.consumed)
        value_offsets = np.frombuffer(gathered, dtype=np.int32)
        row_offsets = np.frombuffer(positions, dtype=np.int64) + offset
        lengths = None
    elif not walk.wrappers:
        data, lengths = _gather(buf, walk)
        row_offsets = np.frombuffer(positions, dtype=np.int64) + offset
    else:
        pieces = _open_wrappers(buf, walk, offset, max_decompressed_bytes)
        if pieces is None:
            return None
        row_offsets = np.concatenate([p[0] for p in pieces])
        lengths = np.concatenate([p[1] for p in pieces])
        data = np.concatenate([p[2] for p in pieces])
    if lengths is not None:
        value_offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=value_offsets[1:])
    next_offset = offset + walk.consumed
    if next_offset > end:  # the last message read starts before the end and runs past it (a mis-set end)
        next_offset = end
    last = offset + positions[-1]
    return Rows(row_offsets, data, value_offsets, next_offset, last if next_offset > last else None)


def _open_wrappers(buf: bytes, walk: _Walk, offset: int, max_decompressed_bytes: int):
    """Per run of entries, its rows: (offsets, lengths, gathered payloads); a wrapper's from its inner set.

    None when a wrapper does not open or its inner set is not whole, valid, uncompressed messages.
    """
    pieces = []
    ends = walk.positions[1:] + array("q", [walk.consumed])
    for pos, end in zip(walk.positions, ends):
        sub = buf[pos:end]
        codec = sub[5] if sub[4] == _MAGIC_ATTRIBUTES else CODEC_NONE
        if codec == CODEC_NONE:
            data, lengths = _gather(sub, _Walk(array("q", [0]), sub[4] == _MAGIC_PLAIN, len(sub)))
            pieces.append((np.array([offset + pos], dtype=np.int64), lengths, data))
            continue
        try:
            inner = decompress(codec, memoryview(sub)[10:], max_decompressed_bytes)
        except (InvalidMessage, MessageSizeTooLarge):
            return None
        inner = bytes(inner) if not isinstance(inner, bytes) else inner
        inner_walk = _walk(inner, len(inner))
        if inner_walk is None or not inner_walk.positions or inner_walk.consumed != len(inner):
            return None
        if inner_walk.wrappers:
            return None  # nesting is refused
        data, lengths = _gather(inner, inner_walk)
        pieces.append((np.full(len(inner_walk.positions), offset + pos, dtype=np.int64), lengths, data))
    return pieces


def rows_from_lists(offsets: list[int], values: list[bytes], next_offset: int, last: int | None) -> Rows:
    """L{Rows} from per-message lists (the slow path's), so both paths build batches alike."""
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    value_offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=value_offsets[1:])
    return Rows(np.array(offsets, dtype=np.int64), b"".join(values), value_offsets, next_offset, last)


def constant_strings(value: str, n: int) -> pa.Array:
    """A string column of C{n} copies of C{value}, built from two buffers (no per-row Python)."""
    encoded = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(encoded)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(encoded * n))


def record_batch(rows: Rows, topic: str, partition: str, broker_id: int) -> pa.RecordBatch:
    """C{rows} as one record batch of L{ARROW_SCHEMA}."""
    n = len(rows.offsets)
    values = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(rows.value_offsets),
                                                          pa.py_buffer(rows.data)])
    return pa.RecordBatch.from_arrays(
        [
            constant_strings(topic, n),
            constant_strings(partition, n),
            pa.array(rows.offsets, pa.int64()),
            values,
            pa.array(np.full(n, broker_id, dtype=np.int32), pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )
