# -*- test-case-name: tests.storage.test_batch -*-
"""A fetched message set as one batch: offsets and payload positions in arrays, no object per message.

L{decode_batch} walks a fetched buffer once: it checks every size, magic and
CRC, opens compressed wrappers (within the decompression bound, iteratively,
refusing nesting) and records where each valid message's payload lies, as
runs of entry positions in C{array('q')}s.  A L{MessageBatch} hands the
messages out as L{MessageAndOffset}s only when iterated; L{MessageBatch.views}
gives C{memoryview}s into the received (or decompressed) bytes, and
L{MessageBatch.columns} gives whole arrays (offsets, payload starts and ends
into one buffer) for columnar readers such as the Spark source.

The decoded result is exactly that of L{twlog.storage.message.scan_messages}
(the per-message path): same offsets, same payloads, the same partial last
entry dropped and the same L{CorruptMessage}s for bad entries.  A corrupt
message never hides the valid ones: with C{on_corrupt="fail"} the batch holds
the valid messages before it and names it in L{MessageBatch.corrupt} (or, when
it is the first, it is raised); with C{"skip"} it is recorded in
L{MessageBatch.skipped} and the walk goes on after it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import NamedTuple

try:  # optional: whole-array arithmetic for L{MessageBatch.columns}
    import numpy
except ImportError:  # pragma: no cover - numpy comes with pyarrow, the Spark extra
    numpy = None

from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import CODEC_NONE, DEFAULT_MAX_DECOMPRESSED_BYTES, codec_name, decompress
from twlog.storage.crc import crc32
from twlog.storage.kernel import MAGIC1, UNIFORM, walk, whole_end
from twlog.storage.message import (
    MIN_MESSAGE_BYTES,
    CorruptMessage,
    MessageAndOffset,
    entry_header,
    framing_problem,
    open_wrapper,
)

__all__ = ["BatchColumns", "MessageBatch", "decode_batch", "gather", "whole_entries_end"]

#: The kernel walk of L{_take_plain}: uncompressed messages (magic 0 or 1), one header width per run.
_RUN = MAGIC1 | UNIFORM
#: Payload start relative to the entry: after the length, magic and CRC (and attributes, for magic 1).
_WIDTH0 = 9
_WIDTH1 = 10


class _Run:
    """Consecutive messages in one buffer with the same header width.

    C{positions} holds each entry's position in C{buffer}, then the end of the
    last one.  For a run of the fetched buffer, C{base} is the log offset of
    C{buffer[0]}; for the inner messages of a wrapper, C{wrapper} is the
    wrapper's offset and the offset after it (every inner message carries the
    wrapper's offset; the last one, as next offset, the one after it).
    """

    __slots__ = ("buffer", "positions", "width", "base", "wrapper")

    def __init__(self, buffer: memoryview, positions: array, width: int, base: int,
                 wrapper: tuple[int, int] | None = None) -> None:
        self.buffer = buffer
        self.positions = positions
        self.width = width
        self.base = base
        self.wrapper = wrapper

    def __len__(self) -> int:
        return len(self.positions) - 1

    def offsets(self) -> Iterator[tuple[int, int]]:
        """Each message's offset and next offset."""
        if self.wrapper is None:
            base, p = self.base, self.positions
            for i in range(len(p) - 1):
                yield base + p[i], base + p[i + 1]
            return
        here, after = self.wrapper
        for _ in range(len(self.positions) - 2):
            yield here, here
        yield here, after


def _take_plain(view: memoryview, pos: int, runs: list[_Run], base: int, wrapper: tuple[int, int] | None,
                raw: bytes | memoryview | None = None) -> int:
    """Record the valid, uncompressed messages from C{pos} on as runs; the position of the first entry that is not one.

    The hot loop is the kernel's (L{twlog.storage.kernel.walk}: each size, magic and CRC, no object per
    message), one call per run of one header width.  It stops, without judging, at anything else (a short
    or partial entry, a bad CRC, a wrapper, an unknown magic): the caller looks at that entry.  C{raw},
    when given, is C{view}'s bytes object: the walk reads that (the pure-Python kernel slices C{bytes}
    faster than a C{memoryview}), and the runs keep C{view}.
    """
    data = view if raw is None else raw
    while True:
        stop, positions, width, _ = walk(data, pos, -1, 0x7FFFFFFF, _RUN)
        if stop == pos:
            return pos
        runs.append(_Run(view, positions, width, base, wrapper))
        pos = stop


class BatchColumns(NamedTuple):
    """A batch as arrays: message C{i}'s payload is C{buffer[starts[i]:ends[i]]}."""

    offsets: array
    next_offsets: array
    starts: array
    ends: array
    #: One buffer holding every payload: the fetched bytes themselves when nothing was compressed.
    buffer: bytes | memoryview


class MessageBatch:
    """The valid messages of one fetch, every CRC checked, held as arrays of positions (see the module)."""

    def __init__(self, offset: int, runs: list[_Run], next_offset: int, corrupt: CorruptMessage | None,
                 skipped: tuple[CorruptMessage, ...]) -> None:
        #: The offset the fetch started at.
        self.offset = offset
        self._runs = runs
        #: Where the next fetch starts: after the last whole message (or skipped one), else C{offset}.
        self.next_offset = next_offset
        #: The corrupt message at C{next_offset} that ended the batch: a fetch from there raises it.
        self.corrupt = corrupt
        #: The corrupt messages skipped (with C{on_corrupt="skip"}).
        self.skipped = skipped
        self._count = sum(len(r) for r in runs)

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"<MessageBatch {self._count} messages [{self.offset}, {self.next_offset})>"

    @property
    def messages(self) -> tuple[MessageAndOffset, ...]:
        """Every message as a L{MessageAndOffset} (payloads copied to C{bytes}): the per-message view."""
        return tuple(self)

    def __iter__(self) -> Iterator[MessageAndOffset]:
        """Each message as a L{MessageAndOffset} with a C{bytes} payload, in log order."""
        for run in self._runs:
            buf, p, width = run.buffer, run.positions, run.width
            for i, (offset, after) in enumerate(run.offsets()):
                yield MessageAndOffset(offset, after, bytes(buf[p[i] + width : p[i + 1]]))

    def views(self) -> Iterator[memoryview]:
        """Each payload as a C{memoryview} into the fetched (or decompressed) bytes: no copy."""
        for run in self._runs:
            buf, p, width = run.buffer, run.positions, run.width
            for i in range(len(p) - 1):
                yield buf[p[i] + width : p[i + 1]]

    @property
    def last_boundary(self) -> tuple[int, int] | None:
        """The last message's offset and the offset after it, or None for an empty batch."""
        if not self._runs:
            return None
        run = self._runs[-1]
        if run.wrapper is not None:
            return run.wrapper
        return run.base + run.positions[-2], run.base + run.positions[-1]

    @property
    def payload_bytes(self) -> int:
        """The payload bytes of all messages."""
        return sum(r.positions[-1] - r.positions[0] - len(r) * r.width for r in self._runs)

    def columns(self) -> BatchColumns:
        """The batch as arrays of offsets, next offsets and payload positions into one buffer.

        Without compressed messages the buffer is the fetched bytes (no copy);
        with them, the decompressed inner sets are joined into one buffer
        (preceded by the fetched bytes when uncompressed messages are there too).
        """
        offsets, nexts, starts, ends = array("q"), array("q"), array("q"), array("q")
        buffers: list[memoryview] = []
        shift: dict[int, int] = {}
        total = 0
        for run in self._runs:
            key = id(run.buffer)  # the runs of one buffer share its memoryview
            if key not in shift:
                shift[key] = total
                buffers.append(run.buffer)
                total += len(run.buffer)
            _extend_columns(run, shift[key], offsets, nexts, starts, ends)
        if not buffers:
            buffer: bytes | memoryview = b""
        elif len(buffers) == 1:
            buffer = buffers[0]
        else:
            buffer = b"".join(buffers)
        return BatchColumns(offsets, nexts, starts, ends, buffer)

    def gathered(self) -> tuple[bytes, array]:
        """The payloads end to end and their C{n + 1} value offsets (L{gather} of L{columns}): Arrow's layout."""
        return gather(self.columns())


def gather(columns: BatchColumns) -> tuple[bytes, array]:
    """The payloads of C{columns} laid end to end, and C{n + 1} value offsets: Arrow's binary layout.

    Message C{i}'s payload is C{data[value_offsets[i]:value_offsets[i + 1]]}.  With numpy the gathering
    is one fancy-indexing copy (no per-message work); without it, one join of payload views.
    """
    starts, ends = columns.starts, columns.ends
    value_offsets = array("q", [0])
    if not starts:
        return b"", value_offsets
    if numpy is not None:
        first = numpy.frombuffer(starts, dtype=numpy.int64)
        lengths = numpy.frombuffer(ends, dtype=numpy.int64) - first
        bounds = numpy.cumsum(lengths)
        value_offsets.frombytes(bounds.tobytes())
        total = int(bounds[-1])
        index = numpy.arange(total, dtype=numpy.int64) + numpy.repeat(first - (bounds - lengths), lengths)
        return numpy.frombuffer(columns.buffer, dtype=numpy.uint8)[index].tobytes(), value_offsets
    view = memoryview(columns.buffer)
    total = 0
    for start, end in zip(starts, ends):
        total += end - start
        value_offsets.append(total)
    return b"".join(view[a:b] for a, b in zip(starts, ends)), value_offsets


def _extend_columns(run: _Run, delta: int, offsets: array, nexts: array, starts: array, ends: array) -> None:
    """Append C{run}'s messages to the column arrays, payload positions shifted by C{delta}."""
    p, width, k = run.positions, run.width, len(run)
    if numpy is not None:
        positions = numpy.frombuffer(p, dtype=numpy.int64)
        starts.frombytes((positions[:-1] + (width + delta)).tobytes())
        ends.frombytes((positions[1:] + delta).tobytes())
        if run.wrapper is None:
            offsets.frombytes((positions[:-1] + run.base).tobytes())
            nexts.frombytes((positions[1:] + run.base).tobytes())
            return
    else:
        starts.extend(p[i] + width + delta for i in range(k))
        ends.extend(p[i] + delta for i in range(1, k + 1))
    if run.wrapper is None:
        offsets.extend(p[i] + run.base for i in range(k))
        nexts.extend(p[i] + run.base for i in range(1, k + 1))
        return
    here, after = run.wrapper
    offsets.extend(array("q", [here]) * k)
    nexts.extend(array("q", [here]) * (k - 1))
    nexts.append(after)


def whole_entries_end(buf: bytes | bytearray | memoryview) -> int:
    """The position after the last whole entry of C{buf}, reading length fields only (no CRC, no magic).

    Where the fetch after this buffer starts, known before the buffer is
    decoded: a pipelining reader asks for it at once.  It stops early at a
    length field that is not sane, as decoding does.
    """
    return whole_end(buf)


def decode_batch(
    buf: bytes | bytearray | memoryview,
    offset: int,
    *,
    topic: str | None = None,
    partition: int | str | None = None,
    on_corrupt: str = "fail",
    deep: bool = True,
    whole_buffer: bool = False,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> MessageBatch:
    """The messages of a fetched buffer that starts at log C{offset}, as a L{MessageBatch}.

    Decodes what L{twlog.storage.message.scan_messages} does (the same
    arguments, C{deep}, C{whole_buffer}, C{max_decompressed_bytes}), in one
    pass and without an object per message.  Corrupt messages are named with
    C{topic} and C{partition}; C{on_corrupt} is C{"fail"} or C{"skip"} (see the module).

    @raise CorruptMessage: the first message is corrupt (and not skipped).
    @raise FetchSizeTooSmall: the buffer holds only part of its first message.
    """
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    raw = buf if isinstance(buf, bytes) else None
    n = len(view)
    runs: list[_Run] = []
    skipped: list[CorruptMessage] = []
    next_offset = offset
    pos = 0
    while True:
        had = len(runs)
        pos = _take_plain(view, pos, runs, offset, None, raw)
        if len(runs) > had:
            next_offset = offset + pos
        if pos >= n:
            break
        outcome = _odd_entry(view, pos, offset, runs, deep, whole_buffer, max_decompressed_bytes)
        if outcome is None:
            break  # a partial last entry: dropped
        if isinstance(outcome, int):
            pos = outcome  # a wrapper opened, or a message the fast loop leaves (not deep)
            next_offset = offset + pos
            continue
        error = outcome.named(topic, partition) if topic is not None else outcome
        if on_corrupt == "skip" and error.next_offset is not None:
            skipped.append(error)
            next_offset = error.next_offset
            pos = error.next_offset - offset
            continue
        if runs or skipped:
            return MessageBatch(offset, runs, next_offset, error, tuple(skipped))
        raise error
    return MessageBatch(offset, runs, next_offset, None, tuple(skipped))


def _odd_entry(view: memoryview, pos: int, offset: int, runs: list[_Run], deep: bool, whole_buffer: bool,
               max_decompressed_bytes: int) -> int | CorruptMessage | None:
    """Judge the entry at C{pos}, which the fast loop stopped at, as L{scan_messages} does.

    Returns the position after it when it holds messages (a wrapper, opened,
    its inner runs added; a message kept whole when not C{deep}), a
    L{CorruptMessage}, or None for a partial last entry (dropped).

    @raise FetchSizeTooSmall: the entry is the first and runs past the buffer.
    """
    n = len(view)
    size = int.from_bytes(view[pos : pos + 4], "big", signed=True) if n - pos >= 4 else -1
    end = pos + 4 + size
    if size < MIN_MESSAGE_BYTES or end > n:
        return framing_problem(view, pos, offset, whole_buffer)
    header = entry_header(view, pos, end)
    if isinstance(header, str):
        return CorruptMessage(header, offset + pos, offset + end)
    codec, start, crc = header
    payload = view[start:end]
    if crc32(payload) != crc:
        return CorruptMessage("CRC mismatch", offset + pos, offset + end)
    if codec == CODEC_NONE:  # pragma: no cover - the fast loop takes every valid uncompressed message
        raise AssertionError(f"a valid message at byte {pos} was left by the fast loop")
    if not deep:
        runs.append(_Run(view, array("q", [pos, end]), _WIDTH1, offset))
        return end
    here = offset + pos
    try:
        inner = decompress(codec, payload, max_decompressed_bytes)
        if not inner:
            raise InvalidMessage("it holds no message")
        inner_view = memoryview(inner)
        inner_runs: list[_Run] = []
        raw = inner if isinstance(inner, bytes) else None
        if _take_plain(inner_view, 0, inner_runs, here, (here, offset + end), raw) != len(inner_view):
            open_wrapper(codec, payload, max_decompressed_bytes)  # raises the per-message path's exact reason
            raise InvalidMessage("inside it, an unreadable message")  # pragma: no cover - open_wrapper raised
    except (InvalidMessage, MessageSizeTooLarge) as e:
        return CorruptMessage(f"{codec_name(codec)} message: {e}", here, offset + end)
    # Only the last inner run ends the wrapper: earlier ones' last messages carry the wrapper's offset.
    for run in inner_runs[:-1]:
        run.wrapper = (here, here)
    runs.extend(inner_runs)
    return end
