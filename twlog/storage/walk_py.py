# -*- test-case-name: tests.storage.test_kernel -*-
"""The message walk in pure Python: the fallback of the compiled kernel (L{twlog.storage.kernel}).

L{walk} takes the whole, valid entries of a message set from a position and
says where it stopped, without judging what stopped it (a partial or short
entry, a bad CRC, an unknown magic or attributes, an entry it was told not to
take): the callers diagnose that one entry.  L{twlog.storage._kernel} is the
same in Cython; both give identical results (tests.storage.test_kernel).
"""

from __future__ import annotations

import struct
from array import array

from twlog.storage.crc import crc32

__all__ = ["FRAME_FIELDS", "MAGIC1", "RUN_FIELDS", "UNIFORM", "WRAPPERS", "crc32", "encode_set", "gather",
           "index_walk", "join_sets", "produce_frame", "produce_frames", "walk", "whole_end"]

#: Take magic-1 messages without a codec (10-byte headers), not only magic-0 ones (9 bytes).
MAGIC1 = 1
#: Take compressed wrappers (magic 1, codec gzip or snappy) as one entry each (CRC checked, not opened).
WRAPPERS = 2
#: Stop where the header width (9 or 10 bytes) changes: every entry taken has the first one's width.
UNIFORM = 4

_HEADER0 = struct.Struct(">iBI")
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")


def walk(buf, pos: int = 0, limit: int = -1, max_message_bytes: int = 0x7FFFFFFF,
         flags: int = 0) -> tuple[int, array, int, array]:
    """The whole, valid entries of C{buf} that start at C{pos} and on, before C{limit} (-1: the end).

    An entry is taken when its size is at least 5 and at most C{max_message_bytes}, it ends inside
    C{buf}, it is magic 0, or magic 1 as C{flags} allow (L{MAGIC1}, L{WRAPPERS}; attributes 0-2), and
    its CRC matches.

    @return: C{(stop, positions, width, wrappers)}: the position of the first entry not taken (or
        where the walk reached C{limit} or the end); each taken entry's position, then C{stop}
        (C{array('q')}); the header width shared by the taken entries (9 or 10; 0 when mixed or
        none); the positions of the compressed wrappers taken (C{array('q')}).
    """
    n = len(buf)
    if limit < 0 or limit > n:
        limit = n
    stop = min(limit, n - 8)  # an entry to take starts before the limit and has its 9-byte header
    unpack = _HEADER0.unpack_from
    check = crc32
    positions = array("q")
    wrappers = array("q")
    add = positions.append
    maximum = max_message_bytes
    magic1 = flags & MAGIC1
    wrapped = flags & WRAPPERS
    uniform = flags & UNIFORM
    seen0 = seen1 = False
    while True:
        if not (uniform and seen1):  # the common case, magic 0, in its own tight loop
            had = len(positions)
            while pos < stop:
                size, magic, crc = unpack(buf, pos)
                end = pos + 4 + size
                if magic or end > n or size < 5 or size > maximum or check(buf[pos + 9 : end]) != crc:
                    break
                add(pos)
                pos = end
            if len(positions) > had:
                seen0 = True
        if pos >= stop:
            break
        size, magic, crc = unpack(buf, pos)
        end = pos + 4 + size
        if magic != 1 or size < 6 or size > maximum or end > n or (uniform and seen0):
            break  # a magic-0 entry here failed the tight loop (or follows magic-1 ones in a uniform walk)
        attributes = buf[pos + 5]
        if attributes > 2 or (attributes == 0 and not magic1) or (attributes and not wrapped):
            break
        if check(buf[pos + 10 : end]) != _UINT32.unpack_from(buf, pos + 6)[0]:
            break
        if attributes:
            wrappers.append(pos)
        seen1 = True
        add(pos)
        pos = end
    add(pos)
    return pos, positions, (9 if not seen1 else 10 if not seen0 else 0) if seen0 or seen1 else 0, wrappers


def whole_end(buf, pos: int = 0, limit: int = -1, max_message_bytes: int = 0x7FFFFFFF) -> int:
    """The position after the last whole entry of C{buf} from C{pos} that starts before C{limit} (-1: the end),
    reading length fields only (no CRC, no magic); it stops early at a length field that is not sane (below
    5, above C{max_message_bytes}, or past the end of C{buf})."""
    n = len(buf)
    if limit < 0 or limit > n:
        limit = n
    unpack = _INT32.unpack_from
    while pos < limit and n - pos >= 4:
        size = unpack(buf, pos)[0]
        end = pos + 4 + size
        if size < 5 or size > max_message_bytes or end > n:
            break
        pos = end
    return pos


def gather(buf, positions: array, end: int) -> tuple[bytes, array]:
    """The payloads of the contiguous entries that start at C{positions} (the last one ending at C{end}) laid
    end to end, and their C{n + 1} value offsets (C{array('i')}): Arrow's binary layout.

    Entry C{i}'s payload follows its 9-byte header (10 bytes for magic 1).  The entries are taken as
    L{walk} found them (whole): only their bounds are checked.

    @raise ValueError: an entry is not inside the buffer, or the payloads exceed 2 GiB.
    """
    view = memoryview(buf)
    offsets = array("i", [0])
    parts = []
    total = 0
    count = len(positions)
    if count and (positions[0] < 0 or end > len(view)):
        raise ValueError("the entries are not inside the buffer")
    for i in range(count):
        at = positions[i]
        stop = positions[i + 1] if i + 1 < count else end
        start = at + (10 if view[at + 4] == 1 else 9)
        if start > stop:
            raise ValueError(f"entry {i} at byte {at} is not whole")
        parts.append(view[start:stop])
        total += stop - start
        if total > 0x7FFFFFFF:
            raise ValueError("the payloads exceed 2 GiB")
        offsets.append(total)
    return b"".join(parts), offsets


# -- produce frames (the broker's bulk produce path, twlog.protocol.runs) ----------------------------------------

#: Fields per frame in L{produce_frames}' C{fields}: the frame's position (its size prefix), its end, its topic's
#: start and length, its partition, its set's start and end, and the set's message count ...
FRAME_FIELDS = 8
#: ... and per run in its C{runs}: the run's first frame, its frame count, its messages and its set bytes.
RUN_FIELDS = 4

_FRAME_HEAD = struct.Struct(">Ihh")  # size, request type, topic length
_PRODUCE_TAIL = struct.Struct(">ii")  # partition, set size


def _set_count(buf, pos: int, end: int, max_message_bytes: int) -> int:
    """How many whole, valid, uncompressed entries fill C{buf[pos:end]} exactly; -1 if they do not."""
    count = 0
    while pos < end:
        if end - pos < 9:
            return -1
        size, magic, crc = _HEADER0.unpack_from(buf, pos)
        stop = pos + 4 + size
        if size < 5 or size > max_message_bytes or stop > end:
            return -1
        if magic == 0:
            body = pos + 9
        elif magic == 1 and size >= 6 and buf[pos + 5] == 0:
            body, crc = pos + 10, _UINT32.unpack_from(buf, pos + 6)[0]
        else:
            return -1
        if crc32(buf[body:stop]) != crc:
            return -1
        count += 1
        pos = stop
    return count


def produce_frames(buf, pos: int, limit: int, max_frame_bytes: int, max_frames: int, max_bytes: int,
                   max_set_bytes: int, max_message_bytes: int) -> tuple[int, array, array]:
    """The whole PRODUCE frames (C{[uint32 size][int16 0][int16 n][topic][int32 partition][int32 s][set]}, nothing
    after the set) of C{buf} from C{pos} up to C{limit} (-1: the end), grouped in runs of consecutive frames for
    one topic (the same bytes) and partition.

    A frame is taken when it is whole before C{limit}, at most C{max_frame_bytes} (without its prefix), a
    PRODUCE of exactly that layout, and its set is at most C{max_set_bytes} of whole, CRC-valid, uncompressed
    entries (magic 0, or magic 1 with no codec) of at most C{max_message_bytes}; at most C{max_frames} frames are
    taken, and none once C{max_bytes} of frames are.  The first frame not taken is not judged: the caller
    handles it as it handles any frame.

    @return: C{(stop, fields, runs)}: the position of the first frame not taken; L{FRAME_FIELDS} per frame and
        L{RUN_FIELDS} per run (C{array('q')}s).
    """
    n = len(buf)
    if limit < 0 or limit > n:
        limit = n
    fields = array("q")
    runs = array("q")
    nf = run_first = run_messages = run_bytes = total = 0
    previous = None
    while nf < max_frames and total < max_bytes and limit - pos >= 4:
        body = pos + 4
        if limit - pos >= 8:
            size, kind, tlen = _FRAME_HEAD.unpack_from(buf, pos)
        else:
            size, kind, tlen = _UINT32.unpack_from(buf, pos)[0], -1, -1
        if size > max_frame_bytes or size > limit - body or size < 12 or kind != 0:
            break
        tstart = body + 4
        if tlen < 0 or tlen + 12 > size:
            break
        partition, ssize = _PRODUCE_TAIL.unpack_from(buf, tstart + tlen)
        sstart = tstart + tlen + 8
        send = sstart + ssize
        if ssize < 0 or ssize > max_set_bytes or send != body + size:
            break
        count = _set_count(buf, sstart, send, max_message_bytes)
        if count < 0:
            break
        key = (bytes(buf[tstart : tstart + tlen]), partition)
        if nf and key != previous:
            runs.extend((run_first, nf - run_first, run_messages, run_bytes))
            run_first = run_messages = run_bytes = 0
            run_first = nf
        previous = key
        fields.extend((pos, body + size, tstart, tlen, partition, sstart, send, count))
        nf += 1
        run_messages += count
        run_bytes += ssize
        total += size
        pos = body + size
    if nf:
        runs.extend((run_first, nf - run_first, run_messages, run_bytes))
    return pos, fields, runs


def join_sets(buf, fields: array, first: int, last: int) -> bytes:
    """The message sets of frames C{first} to C{last - 1} of L{produce_frames}' C{fields}, end to end.

    @raise ValueError: a frame is not in C{fields}, or its set not inside C{buf}.
    """
    if first < 0 or last < first or last * FRAME_FIELDS > len(fields):
        raise ValueError("the frames are not in the fields")
    view = memoryview(buf)
    parts = []
    for i in range(first, last):
        start, stop = fields[i * FRAME_FIELDS + 5], fields[i * FRAME_FIELDS + 6]
        if start < 0 or stop < start or stop > len(view):
            raise ValueError(f"frame {i}'s set is not inside the buffer")
        parts.append(view[start:stop])
    return b"".join(parts)


# -- The index walk (the position index's pass over length fields: twlog.storage.index, recovery) --------------

def index_walk(buf, pos: int = 0, limit: int = -1, max_message_bytes: int = 0x7FFFFFFF, base: int = 0,
               due: int = 0, interval: int = 4096) -> tuple[int, array, int]:
    """Walk the length fields of C{buf} from C{pos} (no CRC, no magic) over the entries that start before C{limit}
    (-1: the end) and have their 4-byte length field in C{buf}, noting an entry's start every C{interval} bytes
    or more: the position index's pass (L{twlog.storage.index}).

    An entry's start is noted (as C{base} plus its position, C{base} being C{buf}'s position in the file) when
    that is at or past C{due}, which then moves to it plus C{interval}.  An entry may run past the end of C{buf}:
    the walk hops over it by its length field.  It stops at a length field that is not sane (below 5 or above
    C{max_message_bytes}), leaving C{stop} at that entry.

    @return: C{(stop, positions, due)}: where the walk stopped (at or past C{limit}, in the last 3 bytes of
        C{buf}, or at the entry whose length is not sane), the noted positions (C{array('q')}), and the next due.
    """
    n = len(buf)
    if limit < 0 or limit > n:
        limit = n
    positions = array("q")
    add = positions.append
    unpack = _INT32.unpack_from
    while pos < limit and n - pos >= 4:
        size = unpack(buf, pos)[0]
        if size < 5 or size > max_message_bytes:
            break
        if base + pos >= due:
            add(base + pos)
            due = base + pos + interval
        pos += 4 + size
    return pos, positions, due


# -- Encoding (the producer's side): message sets and PRODUCE frames ----------------------------------------------

_SIZE = struct.Struct(">I")
_BYTES = (bytes, bytearray, memoryview)


def encode_set(payloads) -> bytes:
    """The message set of C{payloads} (bytes, bytearray or memoryview values): each a magic-0 message (size,
    magic, CRC, payload), no codec; the same bytes as L{twlog.storage.message.encode_message_set} without one.

    @raise TypeError: a payload is of another type.
    """
    pack = _HEADER0.pack
    check = crc32
    parts: list = []
    append = parts.append
    for payload in payloads:
        if not isinstance(payload, _BYTES):
            raise TypeError(f"messages must be bytes, not {type(payload).__name__}; encode text first")
        append(pack(len(payload) + 5, 0, check(payload)))
        append(payload)
    return b"".join(parts)


def produce_frame(head, payloads) -> bytes:
    """A request frame with its 4-byte size prefix: C{head} (the frame's bytes before the message set: a
    PRODUCE's type, topic and partition), the set's 4-byte size, then the message set of C{payloads}
    (L{encode_set}), in one buffer.

    @raise TypeError: a payload is not bytes, bytearray or memoryview.
    """
    pack = _HEADER0.pack
    check = crc32
    parts: list = [b"", head, b""]
    append = parts.append
    total = 0
    for payload in payloads:
        if not isinstance(payload, _BYTES):
            raise TypeError(f"messages must be bytes, not {type(payload).__name__}; encode text first")
        size = len(payload)
        append(pack(size + 5, 0, check(payload)))
        append(payload)
        total += size + 9
    parts[0] = _SIZE.pack(len(head) + 4 + total)
    parts[2] = _SIZE.pack(total)
    return b"".join(parts)
