# -*- test-case-name: tests.protocol.test_frames,tests.protocol.test_framing -*-
"""L{FrameBuffer}: C{[int32 size][frame]} frames out of the bytes received, in time linear in them (no I/O).

The one parser of the length-prefixed framing, under both the Twisted
L{twlog.protocol.framing.FrameReceiver} and the blocking
L{twlog.client.sync.SyncConnection}.  It keeps the reads it was given in a list
and joins a frame's pieces once, when the frame is complete: every byte is
copied once into the frame it belongs to (L{FrameBuffer.frame_copied_bytes}
counts them).  Twisted's C{Int32StringReceiver} instead concatenates its whole
pending buffer with every read, which made a 98 MB request cost a broker 40 s
of CPU.

Large frames (L{FrameBuffer.in_place_bytes}) are assembled in place: once the
size prefix announces one, a buffer of the frame's size is mapped (anonymous
C{mmap}, huge pages where the kernel offers them) and every read is copied
into it as it arrives; such a frame comes out as a C{memoryview}.
"""

from __future__ import annotations

import mmap
import struct
from collections import deque

_SIZE = struct.Struct("!I")  # as Int32StringReceiver: an unsigned size
PREFIX_BYTES = _SIZE.size

__all__ = ["PREFIX_BYTES", "FrameBuffer", "FrameTooLarge", "frame"]


def frame(data: bytes) -> bytes:
    """C{data} with its size prefix, as it is written."""
    return _SIZE.pack(len(data)) + data


class FrameTooLarge(Exception):
    """A size prefix announced a frame larger than the buffer's C{max_length}."""

    def __init__(self, length: int) -> None:
        super().__init__(f"a {length}-byte frame")
        self.length = length


class FrameBuffer:
    """The frames in the bytes fed to it, in order (see the module)."""

    def __init__(self, max_length: int, in_place_bytes: int | None = None) -> None:
        #: The largest frame accepted; a larger size prefix raises L{FrameTooLarge}.
        self.max_length = max_length
        #: Frames at least this large are assembled in place and come out as a C{memoryview} (None: never).
        self.in_place_bytes = in_place_bytes
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # into _chunks[0]: the bytes before it are consumed
        self._pending = 0  # bytes in _chunks past _offset
        self._length: int | None = None  # the size of the frame being assembled, once its prefix is read
        self._frame: memoryview | None = None  # the in-place frame being filled
        self._filled = 0  # bytes of it filled
        #: Bytes copied into frames (and size prefixes) so far: at most the bytes received.
        self.frame_copied_bytes = 0
        #: Frames taken out so far (L{next_frame}): tells one frame in progress from the next.
        self.frames_taken = 0

    def feed(self, data: bytes) -> list[bytes | memoryview]:
        """Add C{data}; return the frames now complete.

        @raise FrameTooLarge: a size prefix over C{max_length} (the frames before it are lost with it: a
            caller that must have them uses L{append} and L{next_frame}).
        """
        self.append(data)
        frames = []
        while (got := self.next_frame()) is not None:
            frames.append(got)
        return frames

    def append(self, data: bytes) -> None:
        """Add C{data} to what is buffered."""
        if not data:
            return
        if self._frame is not None and self._filled < len(self._frame):
            taken = self._fill(data)
            if taken < len(data):
                rest = data[taken:]
                self._chunks.append(rest)
                self._pending += len(rest)
        else:
            self._chunks.append(bytes(data))
            self._pending += len(data)

    def next_frame(self) -> bytes | memoryview | None:
        """The next complete frame (its size prefix removed), or None until more bytes come.

        @raise FrameTooLarge: its size prefix is over C{max_length} (the prefix is consumed).
        """
        if self._frame is not None:
            if self._filled < len(self._frame):
                return None
            done, self._frame, self._filled, self._length = self._frame, None, 0, None
            self.frames_taken += 1
            return done
        if self._length is None:
            if self._pending < PREFIX_BYTES:
                return None
            (length,) = _SIZE.unpack(self._take(PREFIX_BYTES))
            if length > self.max_length:
                raise FrameTooLarge(length)
            self._length = length
        if self._pending < self._length:
            if self.in_place_bytes is not None and self._length >= self.in_place_bytes:
                self._start_in_place()
            return None
        done = self._take(self._length)
        self._length = None
        self.frames_taken += 1
        return done

    def head(self) -> tuple[bytes, int] | None:
        """The first buffered read and where the next frame (its size prefix) starts in it, when no frame is being
        assembled and something is buffered; else None.  With L{skip}, frames are taken where they lie."""
        if self._length is not None or self._frame is not None or not self._chunks:
            return None
        return self._chunks[0], self._offset

    def skip(self, n: int, frames: int) -> None:
        """Consume the next C{n} bytes of L{head}'s read: C{frames} whole frames, size prefixes included."""
        self._offset += n
        self._pending -= n
        self.frames_taken += frames
        if self._offset >= len(self._chunks[0]):
            self._chunks.popleft()
            self._offset = 0

    def clear(self) -> None:
        """Drop everything buffered."""
        self._chunks.clear()
        self._offset = self._pending = self._filled = 0
        self._length = self._frame = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet taken as frames (size prefixes already read excluded)."""
        return self._pending + self._filled

    @property
    def needed_bytes(self) -> int:
        """Bytes still to arrive before the frame being assembled is complete (0 if one is complete)."""
        if self._length is None:
            return max(0, PREFIX_BYTES - self._pending)
        return max(0, self._length - self._pending - self._filled)

    @property
    def frame_ready(self) -> bool:
        """Whether L{next_frame} has something to say: a whole frame, or a size prefix over C{max_length}."""
        if self._frame is not None:
            return self._filled >= len(self._frame)
        if self._length is None:
            if self._pending < PREFIX_BYTES:
                return False
            (length,) = _SIZE.unpack(self.peek(PREFIX_BYTES))
            return length > self.max_length or self._pending - PREFIX_BYTES >= length
        return self._pending >= self._length

    @property
    def frame_started(self) -> bool:
        """Whether part of a frame (its size prefix, or a part of one) has arrived and the frame is not whole."""
        return (self._length is not None or self._pending > 0) and not self.frame_ready

    def peek(self, n: int) -> bytes:
        """Up to C{n} buffered bytes, without consuming them (after a size prefix L{FrameTooLarge} named)."""
        out = bytearray()
        offset = self._offset
        for chunk in self._chunks:
            out += chunk[offset : offset + n - len(out)]
            offset = 0
            if len(out) >= n:
                break
        return bytes(out)

    def _fill(self, data: bytes | memoryview) -> int:
        """Copy the start of C{data} into the in-place frame; how many bytes it took."""
        frame = self._frame
        taken = min(len(data), len(frame) - self._filled)
        frame[self._filled : self._filled + taken] = data if taken == len(data) else memoryview(data)[:taken]
        self._filled += taken
        self.frame_copied_bytes += taken
        return taken

    def _start_in_place(self) -> None:
        """Map a buffer for the frame being assembled and move what has arrived of it there."""
        area = mmap.mmap(-1, self._length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            area.madvise(mmap.MADV_HUGEPAGE)  # a fault per 2 MB rather than per 4 KB, where the kernel allows
        except (AttributeError, OSError):  # pragma: no cover - depends on the platform
            pass
        self._frame = memoryview(area)
        self._filled = 0
        chunks, self._chunks = self._chunks, deque()
        offset, self._offset, self._pending = self._offset, 0, 0
        for chunk in chunks:  # all of them belong to this frame: fewer bytes than it needs have arrived
            self._fill(memoryview(chunk)[offset:] if offset else chunk)
            offset = 0

    def _take(self, n: int) -> bytes:
        """The next C{n} bytes (all buffered), each copied once; a read that is exactly one frame is not copied."""
        if n == 0:
            return b""
        chunks = self._chunks
        self._pending -= n
        first = chunks[0]
        if self._offset == 0 and len(first) == n:
            chunks.popleft()
            return first
        if len(first) - self._offset >= n:
            piece = first[self._offset : self._offset + n]
            self._offset += n
            if self._offset == len(first):
                chunks.popleft()
                self._offset = 0
            self.frame_copied_bytes += n
            return piece
        parts: list[bytes | memoryview] = []
        need = n
        while need:
            first = chunks[0]
            available = len(first) - self._offset
            if available <= need:
                parts.append(memoryview(first)[self._offset :] if self._offset else first)
                chunks.popleft()
                self._offset = 0
                need -= available
            else:
                parts.append(memoryview(first)[self._offset : self._offset + need])
                self._offset += need
                need = 0
        self.frame_copied_bytes += n
        return b"".join(parts)
