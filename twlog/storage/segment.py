# -*- test-case-name: tests.storage.test_log -*-
"""One segment file of a partition log, and the file regions handed out for zero-copy reads.

A segment is named by the logical offset of its first byte, zero-padded to 20
digits: C{00000000000000000000.log}.  It is only ever appended to (by the
reactor thread, through a small write buffer) and fsynced (by a pool thread,
after the reactor thread wrote the buffer out); readers get L{FileRegion}s,
which a sendfile producer can write without the bytes entering Python.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Generator

import attrs

from twlog.errors import TooManyOpenFiles
from twlog.storage.index import PositionIndex

SEGMENT_SUFFIX = ".log"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")

#: The most one write(2) hands the kernel: a 100 MB set written in one call copied into the page
#: cache several times slower per byte than the same bytes in 1 MiB writes.
_WRITE_PIECE_BYTES = 1024 * 1024


def segment_name(base_offset: int) -> str:
    """The file name of the segment whose first byte is at C{base_offset}."""
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def out_of_descriptors(error: BaseException) -> bool:
    """Whether C{error} says the process (EMFILE) or the system (ENFILE) has no file descriptor to spare."""
    return isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE)


def descriptors_error(error: OSError, what: str) -> TooManyOpenFiles:
    """The retriable error for C{what} (e.g. "cannot roll <dir>") failing for want of a descriptor."""
    return TooManyOpenFiles(f"{what}: {error.strerror or error} (out of file descriptors; retry)")


def parse_segment_name(name: str) -> int | None:
    """The base offset a segment file name encodes, or None if C{name} is not a segment."""
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


class Segment:
    """An open segment file: its base offset, its size, and the descriptor used to write and read it.

    The descriptor stays open for as long as anything (the log, or a
    L{FileRegion} being sent) refers to the segment, so retention can unlink a
    segment while a fetch from it is still being written to a socket.
    """

    #: Appends smaller than this are gathered in memory and written together:
    #: one write(2) per 209-byte message would cost more than the rest of an append.
    WRITE_BUFFER_BYTES = 64 * 1024

    def __init__(self, path: str, base_offset: int, fd: int, size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.fd = fd
        #: Bytes in the file; the write buffer holds the rest of L{size}.
        self.written = size
        self._pending = bytearray()
        #: A failed write could not be cut back (ftruncate failed too): the file may end in part of a set.
        self.damaged = False
        #: Message starts about every few KB (L{twlog.storage.index}); what was on disk at open is indexed later.
        self.index = PositionIndex(size)

    @property
    def size(self) -> int:
        """Bytes appended: in the file, and in the write buffer."""
        return self.written + len(self._pending)

    @classmethod
    def open(cls, directory: str, base_offset: int, create: bool = False) -> "Segment":
        """Open (or create) the segment of C{directory} that starts at C{base_offset}."""
        path = os.path.join(directory, segment_name(base_offset))
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        return cls(path, base_offset, fd, size)

    @property
    def end_offset(self) -> int:
        """The logical offset just past this segment's last written byte."""
        return self.base_offset + self.size

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Add C{data} at the end: gathered in the write buffer, written once it fills.

        Durability is L{fsync}'s job, and readers only see flushed data, so
        a flush (which calls L{write_out} first) is what makes it visible.

        @raise OSError: the write failed (disk full, I/O error); C{data} is not
            appended, and what was appended before is kept.
        """
        position = self.size
        if len(data) >= self.WRITE_BUFFER_BYTES:  # large: written from where it is, never copied
            self.write_out()
            self._write(data)
        else:
            before = len(self._pending)
            self._pending += data
            if len(self._pending) >= self.WRITE_BUFFER_BYTES:
                try:
                    self.write_out()
                except OSError:
                    del self._pending[before:]
                    raise
        self.index.add_set(position, data)

    def append_in_pieces(self, data: bytes | bytearray | memoryview, piece_bytes: int) -> Generator[None, None, None]:
        """L{append} C{data} C{piece_bytes} at a time, yielding between pieces (the caller runs the next piece
        later: L{twlog.storage.pieces}).  Until the last piece is in, L{size} and the index do not count any of
        it; nothing else may be appended meanwhile.

        @raise OSError: a write failed (disk full, I/O error), or the file changed under it (cut, closed):
            the file is cut back to where C{data} began, so nothing of it is appended.
        """
        self.write_out()
        start = self.written
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                if self.written != start or self.fd < 0:
                    raise OSError(errno.ESTALE, "the segment was cut or closed during a write in pieces")
                self._write_all(view[done : done + piece_bytes])
                done += piece_bytes
                if done < len(view):
                    yield
        except BaseException:  # a failed write, or the caller stopped it (GeneratorExit): take back what is in
            self._cut_back(min(start, self.written))
            raise
        self.written = start + len(view)
        self.index.add_set(start, data)

    def write_out(self) -> None:
        """Write the write buffer to the file (to the page cache).

        @raise OSError: the write failed; the buffer is kept and the file is
            cut back to where it was, so offsets keep matching file positions.
        """
        if self._pending:
            self._write(bytes(self._pending))  # a copy: the buffer stays resizable if the write fails
            self._pending = bytearray()

    def discard_pending(self) -> int:
        """Drop the write buffer (after a failed write: what was never in the file never gets there, not even
        at close); return how many bytes were dropped.  The segment ends at L{written} again."""
        dropped = len(self._pending)
        if dropped:
            self._pending = bytearray()
            self.index.truncate(self.written)
        return dropped

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        start = self.written
        try:
            self._write_all(memoryview(data))
        except OSError:
            self._cut_back(start)  # drop a partial write: never leave half a message
            raise
        self.written = start + len(data)

    def _write_all(self, view: memoryview) -> None:
        while view:
            view = view[os.write(self.fd, view[:_WRITE_PIECE_BYTES]) :]

    def _cut_back(self, size: int) -> None:
        """Cut the file back to C{size} after a failed write; mark the segment L{damaged} if that fails too."""
        if self.fd < 0:
            return
        try:
            os.ftruncate(self.fd, size)
        except OSError:
            self.damaged = True

    def pread(self, position: int, length: int) -> bytes:
        """Read up to C{length} bytes at file C{position}."""
        return os.pread(self.fd, length, position)

    def peek(self, position: int, length: int) -> bytes:
        """Up to C{length} bytes appended at C{position}: from the file, and from the write buffer past it."""
        head = self.pread(position, min(length, self.written - position)) if position < self.written else b""
        start = max(position - self.written, 0)
        return head + bytes(self._pending[start : start + length - len(head)])

    def cut(self, size: int) -> None:
        """Cut what was appended back to C{size} bytes: in the write buffer, or the file (not fsynced: the
        caller's next flush does it).

        @raise OSError: the file could not be cut (the write buffer is dropped then too).
        """
        if size >= self.written:
            del self._pending[size - self.written :]
        else:
            self._pending = bytearray()
            os.ftruncate(self.fd, size)
            self.written = size
        self.index.truncate(size)

    def fsync(self) -> None:
        """Force the file's data to disk.  Blocking: call it from a pool thread."""
        if self.fd >= 0:
            os.fsync(self.fd)

    def truncate(self, size: int) -> None:
        """Cut the file to C{size} bytes and make that durable."""
        self.write_out()
        os.ftruncate(self.fd, size)
        os.fsync(self.fd)
        self.written = size
        self.index.truncate(size)

    def mtime_ms(self) -> int:
        """The file's last modification time, in milliseconds since the epoch."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def close(self) -> None:
        """Write out the write buffer and close the descriptor (idempotent)."""
        if self.fd >= 0:
            self.write_out()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    #: Set by retention once the file is unlinked: closes the last descriptor of the deleted file on the thread
    #: pool, where the filesystem frees its blocks (15-20 ms for 64 MB on ext4; a reactor stall otherwise).
    close_later: Callable[[int], object] | None = None

    def __del__(self) -> None:
        fd, self.fd = self.fd, -1  # after close(), or when retention dropped it: nothing to write
        if fd >= 0:
            (self.close_later or os.close)(fd)

    def __repr__(self) -> str:
        return f"<Segment {self.path} size={self.size}>"


@attrs.frozen
class FileRegion:
    """C{length} bytes of C{segment}'s file from C{position}: what a fetch sends, zero-copy.

    C{offset} is the logical log offset of the region's first byte.
    """

    segment: Segment | None
    position: int
    length: int
    offset: int

    def fileno(self) -> int:
        """The descriptor to sendfile from."""
        assert self.segment is not None
        return self.segment.fd

    def read(self) -> bytes:
        """The region's bytes, copied into memory (for tests, tools and non-sendfile paths)."""
        if self.segment is None or self.length == 0:
            return b""
        return self.segment.pread(self.position, self.length)
