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
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

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
