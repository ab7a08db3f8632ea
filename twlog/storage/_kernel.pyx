# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled message walk (see L{twlog.storage.kernel}, which chooses it or L{twlog.storage.walk_py}).

The same functions, arguments and results as L{twlog.storage.walk_py}, the
pure-Python fallback: the tests run both on the same data.  One pass over a
buffer with no Python object per message: big-endian length fields read from
the buffer's bytes, each CRC computed by C{_crc32.h}, positions written
into C{array('q')}s.
"""

from cpython cimport array
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_Check
from cpython.bytes cimport PyBytes_Check
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcmp, memcpy


cdef extern from "Python.h":
    bint PyMemoryView_Check(object o)

import array as _array


cdef extern from "_crc32.h":
    void twlog_crc32_init()
    uint32_t twlog_crc32(const uint8_t *p, size_t n) nogil
    int twlog_crc32_uses_simd()


twlog_crc32_init()

#: Flags of L{walk} (the same values as L{twlog.storage.walk_py}'s).
MAGIC1 = 1
WRAPPERS = 2
UNIFORM = 4

#: Which CRC-32 code runs: "pclmul" (carry-less multiplication) or "table" (slice-by-8).
CRC = "pclmul" if twlog_crc32_uses_simd() else "table"

cdef array.array _Q = _array.array("q")
cdef array.array _I = _array.array("i")


cdef inline uint32_t _u32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline void _push(array.array arr, Py_ssize_t *count, int64_t value):
    cdef Py_ssize_t cap = len(arr)
    if count[0] >= cap:
        array.resize(arr, cap * 2)
    arr.data.as_longlongs[count[0]] = value
    count[0] += 1


def crc32(data):
    """The standard CRC-32 of C{data} (a bytes-like object), as C{zlib.crc32(data)}."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return twlog_crc32(<const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


def walk(buf, Py_ssize_t pos=0, Py_ssize_t limit=-1, long long max_message_bytes=0x7FFFFFFF, int flags=0):
    """Take the whole, valid entries of C{buf} from C{pos}; see L{twlog.storage.walk_py.walk}."""
    cdef Py_buffer view
    cdef const uint8_t *b
    cdef Py_ssize_t n, end, count = 0, nwrap = 0
    cdef long long size
    cdef int width = 0, w, magic, attributes, first = 1
    cdef uint32_t crc
    cdef array.array positions, wrappers
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t *>view.buf
        n = view.len
        if limit < 0 or limit > n:
            limit = n
        positions = array.clone(_Q, 64, False)
        wrappers = array.clone(_Q, 4, False)
        while pos < limit and n - pos >= 9:
            size = <int32_t>_u32(b + pos)
            if size < 5 or size > max_message_bytes or size > n - pos - 4:
                break
            end = pos + 4 + size
            magic = b[pos + 4]
            if magic == 0:
                w = 9
                crc = _u32(b + pos + 5)
                attributes = 0
            elif magic == 1 and size >= 6 and flags & (MAGIC1 | WRAPPERS):
                attributes = b[pos + 5]
                if attributes > 2 or (attributes == 0 and not flags & MAGIC1) or (attributes and not flags & WRAPPERS):
                    break
                w = 10
                crc = _u32(b + pos + 6)
            else:
                break
            if flags & UNIFORM and w != width and not first:
                break
            if twlog_crc32(b + pos + w, <size_t>(end - pos - w)) != crc:
                break
            if first:
                width, first = w, 0
            elif w != width:
                width = 0
            if attributes:
                _push(wrappers, &nwrap, pos)
            _push(positions, &count, pos)
            pos = end
        _push(positions, &count, pos)
    finally:
        PyBuffer_Release(&view)
    array.resize(positions, count)
    array.resize(wrappers, nwrap)
    return pos, positions, width, wrappers


def whole_end(buf, Py_ssize_t pos=0, Py_ssize_t limit=-1, long long max_message_bytes=0x7FFFFFFF):
    """The position after the last whole entry from C{pos} before C{limit}, reading length fields only; see
    L{twlog.storage.walk_py.whole_end}."""
    cdef Py_buffer view
    cdef const uint8_t *b
    cdef Py_ssize_t n
    cdef long long size
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t *>view.buf
        n = view.len
        if limit < 0 or limit > n:
            limit = n
        while pos < limit and n - pos >= 4:
            size = <int32_t>_u32(b + pos)
            if size < 5 or size > max_message_bytes or size > n - pos - 4:
                break
            pos += 4 + size
    finally:
        PyBuffer_Release(&view)
    return pos


def gather(buf, positions, Py_ssize_t end):
    """The payloads of the contiguous entries at C{positions} (the last ending at C{end}) end to end, and
    their value offsets; see L{twlog.storage.walk_py.gather}."""
    cdef Py_buffer view
    cdef const uint8_t *b
    cdef const int64_t *p
    cdef array.array starts = positions
    cdef Py_ssize_t count = len(starts), i, total = 0, start, stop
    cdef array.array offsets = array.clone(_I, count + 1, False)
    cdef int *out = offsets.data.as_ints
    cdef bytes data
    cdef char *dst
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t *>view.buf
        p = <const int64_t *>starts.data.as_longlongs
        if count and (p[0] < 0 or end > view.len):
            raise ValueError("the entries are not inside the buffer")
        out[0] = 0
        for i in range(count):
            stop = p[i + 1] if i + 1 < count else end
            start = p[i] + (10 if b[p[i] + 4] == 1 else 9)
            if start > stop or stop > view.len:
                raise ValueError(f"entry {i} at byte {p[i]} is not whole")
            total += stop - start
            if total > 0x7FFFFFFF:
                raise ValueError("the payloads exceed 2 GiB")
            out[i + 1] = <int>total
        data = PyBytes_FromStringAndSize(NULL, total)
        dst = PyBytes_AS_STRING(data)
        for i in range(count):
            stop = p[i + 1] if i + 1 < count else end
            start = stop - (out[i + 1] - out[i])
            memcpy(dst + out[i], b + start, <size_t>(stop - start))
    finally:
        PyBuffer_Release(&view)
    return data, offsets


# -- produce frames (the broker's bulk produce path, twlog.protocol.runs) ----------------------------------------

#: Fields per frame in L{produce_frames}' C{fields} and per run in its C{runs} (as walk_py's).
FRAME_FIELDS = 8
RUN_FIELDS = 4


cdef inline int _set_count(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, long long max_message_bytes) noexcept nogil:
    """How many whole, valid, uncompressed entries fill C{b[pos:end]} exactly; -1 if they do not."""
    cdef long long size
    cdef int count = 0, w
    cdef uint32_t crc
    while pos < end:
        if end - pos < 9:
            return -1
        size = <int32_t>_u32(b + pos)
        if size < 5 or size > max_message_bytes or size > end - pos - 4:
            return -1
        if b[pos + 4] == 0:
            w = 9
            crc = _u32(b + pos + 5)
        elif b[pos + 4] == 1 and size >= 6 and b[pos + 5] == 0:
            w = 10
            crc = _u32(b + pos + 6)
        else:
            return -1
        if twlog_crc32(b + pos + w, <size_t>(size + 4 - w)) != crc:
            return -1
        count += 1
        pos += 4 + size
    return count


def produce_frames(buf, Py_ssize_t pos, Py_ssize_t limit, long long max_frame_bytes, Py_ssize_t max_frames,
                   long long max_bytes, long long max_set_bytes, long long max_message_bytes):
    """The whole, well-formed PRODUCE frames with valid uncompressed sets from C{pos}, grouped in runs for one
    partition; see L{twlog.storage.walk_py.produce_frames}."""
    cdef Py_buffer view
    cdef const uint8_t *b
    cdef Py_ssize_t n, nf = 0, nr = 0, nfields = 0, run_first = 0, body, tstart, sstart, send
    cdef long long size, tlen, ssize, total = 0, run_messages = 0, run_bytes = 0
    cdef long long prev_tstart = -1, prev_tlen = -1
    cdef int32_t partition, prev_partition = 0
    cdef int count
    cdef array.array fields, runs
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t *>view.buf
        n = view.len
        if limit < 0 or limit > n:
            limit = n
        fields = array.clone(_Q, 64, False)
        runs = array.clone(_Q, 16, False)
        while nf < max_frames and total < max_bytes and limit - pos >= 4:
            size = <long long>_u32(b + pos)
            body = pos + 4
            if size > max_frame_bytes or size > limit - body or size < 12:
                break
            if b[body] != 0 or b[body + 1] != 0:
                break
            tlen = <int16_t>((b[body + 2] << 8) | b[body + 3])
            tstart = body + 4
            if tlen < 0 or tlen + 12 > size:
                break
            partition = <int32_t>_u32(b + tstart + tlen)
            ssize = <int32_t>_u32(b + tstart + tlen + 4)
            sstart = tstart + tlen + 8
            send = sstart + ssize
            if ssize < 0 or ssize > max_set_bytes or send != body + size:
                break
            count = _set_count(b, sstart, send, max_message_bytes)
            if count < 0:
                break
            if nf and (partition != prev_partition or tlen != prev_tlen
                       or memcmp(b + tstart, b + prev_tstart, <size_t>tlen) != 0):
                _push(runs, &nr, run_first)
                _push(runs, &nr, nf - run_first)
                _push(runs, &nr, run_messages)
                _push(runs, &nr, run_bytes)
                run_first, run_messages, run_bytes = nf, 0, 0
            prev_partition, prev_tlen, prev_tstart = partition, tlen, tstart
            _push(fields, &nfields, pos)
            _push(fields, &nfields, body + size)
            _push(fields, &nfields, tstart)
            _push(fields, &nfields, tlen)
            _push(fields, &nfields, partition)
            _push(fields, &nfields, sstart)
            _push(fields, &nfields, send)
            _push(fields, &nfields, count)
            nf += 1
            run_messages += count
            run_bytes += ssize
            total += size
            pos = body + size
        if nf:
            _push(runs, &nr, run_first)
            _push(runs, &nr, nf - run_first)
            _push(runs, &nr, run_messages)
            _push(runs, &nr, run_bytes)
    finally:
        PyBuffer_Release(&view)
    array.resize(fields, nf * FRAME_FIELDS)
    array.resize(runs, nr)
    return pos, fields, runs


def join_sets(buf, fields, Py_ssize_t first, Py_ssize_t last):
    """The message sets of frames C{first} to C{last - 1} of L{produce_frames}' C{fields}, end to end; see
    L{twlog.storage.walk_py.join_sets}."""
    cdef Py_buffer view
    cdef array.array f = fields
    cdef const int64_t *p = <const int64_t *>f.data.as_longlongs
    cdef Py_ssize_t i, total = 0, at = 0, start, stop
    cdef bytes data
    cdef char *dst
    if first < 0 or last < first or last * FRAME_FIELDS > len(f):
        raise ValueError("the frames are not in the fields")
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        for i in range(first, last):
            start, stop = p[i * FRAME_FIELDS + 5], p[i * FRAME_FIELDS + 6]
            if start < 0 or stop < start or stop > view.len:
                raise ValueError(f"frame {i}'s set is not inside the buffer")
            total += stop - start
        data = PyBytes_FromStringAndSize(NULL, total)
        dst = PyBytes_AS_STRING(data)
        for i in range(first, last):
            start, stop = p[i * FRAME_FIELDS + 5], p[i * FRAME_FIELDS + 6]
            memcpy(dst + at, <const char *>view.buf + start, <size_t>(stop - start))
            at += stop - start
    finally:
        PyBuffer_Release(&view)
    return data


# -- The index walk (the position index's pass over length fields: twlog.storage.index, recovery) --------------

def index_walk(buf, Py_ssize_t pos=0, Py_ssize_t limit=-1, long long max_message_bytes=0x7FFFFFFF,
               long long base=0, long long due=0, long long interval=4096):
    """Walk the length fields from C{pos}, noting an entry's start every C{interval} bytes or more; see
    L{twlog.storage.walk_py.index_walk}."""
    cdef Py_buffer view
    cdef const uint8_t *b
    cdef Py_ssize_t n, count = 0
    cdef long long size
    cdef array.array positions = array.clone(_Q, 64, False)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t *>view.buf
        n = view.len
        if limit < 0 or limit > n:
            limit = n
        while pos < limit and n - pos >= 4:
            size = <int32_t>_u32(b + pos)
            if size < 5 or size > max_message_bytes:
                break
            if base + pos >= due:
                _push(positions, &count, base + pos)
                due = base + pos + interval
            pos += 4 + <Py_ssize_t>size
    finally:
        PyBuffer_Release(&view)
    array.resize(positions, count)
    return pos, positions, due


# -- Encoding (the producer's side): message sets and PRODUCE frames ----------------------------------------------

cdef inline void _put32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef bytes _encode(head, payloads, bint framed):
    """C{[size][head][set size]}(framed) and the magic-0 message set of C{payloads}, in one allocation."""
    cdef list items = payloads if type(payloads) is list else list(payloads)
    cdef Py_ssize_t count = len(items), i, total = 0, head_len = 0, lead, at
    cdef Py_buffer view
    cdef Py_buffer *views
    cdef bytes out
    cdef uint8_t *dst
    cdef Py_ssize_t got = 0
    cdef Py_buffer head_view
    if framed:
        PyObject_GetBuffer(head, &head_view, PyBUF_SIMPLE)
        head_len = head_view.len
    views = <Py_buffer *>PyMem_Malloc(sizeof(Py_buffer) * (count if count else 1))
    if views == NULL:
        if framed:
            PyBuffer_Release(&head_view)
        raise MemoryError()
    try:
        for i in range(count):
            item = items[i]
            if not (PyBytes_Check(item) or PyByteArray_Check(item) or PyMemoryView_Check(item)):
                raise TypeError(f"messages must be bytes, not {type(item).__name__}; encode text first")
            PyObject_GetBuffer(item, &views[i], PyBUF_SIMPLE)
            got += 1
            if views[i].len > 0x7FFFFFFF - 5:
                raise ValueError(f"message {i} is {views[i].len} bytes: over the 2 GiB of a message's size field")
            total += 9 + views[i].len
        lead = 8 + head_len if framed else 0
        if total + lead > 0x7FFFFFFF:
            raise ValueError(f"the message set is {total} bytes: over 2 GiB")
        out = PyBytes_FromStringAndSize(NULL, total + lead)
        dst = <uint8_t *>PyBytes_AS_STRING(out)
        if framed:
            _put32(dst, <uint32_t>(total + head_len + 4))
            memcpy(dst + 4, head_view.buf, <size_t>head_len)
            _put32(dst + 4 + head_len, <uint32_t>total)
        at = lead
        for i in range(count):
            _put32(dst + at, <uint32_t>(views[i].len + 5))
            dst[at + 4] = 0
            _put32(dst + at + 5, twlog_crc32(<const uint8_t *>views[i].buf, <size_t>views[i].len))
            memcpy(dst + at + 9, views[i].buf, <size_t>views[i].len)
            at += 9 + views[i].len
    finally:
        for i in range(got):
            PyBuffer_Release(&views[i])
        PyMem_Free(views)
        if framed:
            PyBuffer_Release(&head_view)
    return out


def encode_set(payloads):
    """The message set of C{payloads} (bytes, bytearray or memoryview values), magic 0 without a codec; see
    L{twlog.storage.walk_py.encode_set}."""
    return _encode(None, payloads, False)


def produce_frame(head, payloads):
    """A request frame with its size prefix: C{head}, then the message set of C{payloads} with its size; see
    L{twlog.storage.walk_py.produce_frame}."""
    return _encode(head, payloads, True)
