# -*- test-case-name: tests.protocol.test_framing -*-
"""L{FrameReceiver}: C{[int32 size][frame]} framing in time linear in the bytes received.

Twisted's C{Int32StringReceiver} concatenates its whole pending buffer with
every read (C{self._unprocessed + data}), so assembling one frame of I{n}
bytes from reads of I{k} bytes copies about I{n}^2/2k bytes: a 98 MB request
cost a broker 40 s of CPU.  This receiver keeps the reads it was given in a
list and joins a frame's pieces once, when the frame is complete: every byte
is copied once into the frame it belongs to (L{FrameReceiver.frame_copied_bytes}
counts them, so tests can assert on the work done instead of on time).

The hooks are C{Int32StringReceiver}'s: L{stringReceived}, L{lengthLimitExceeded}
(called as soon as the size prefix says too much, before the body is buffered),
C{MAX_LENGTH}, L{sendString}, and the pause/resume producer behaviour of its
C{_PauseableMixin}: while L{paused}, frames stay buffered and the transport
stops reading; L{resumeProducing} delivers them.  On top of that, several
independent reasons may stop the transport reading (L{hold_reading}), and
L{buffer_changed} reports what the receiver holds after each read, for a
budget shared by many connections (L{twlog.protocol.budget}).

Large frames (L{FrameReceiver.IN_PLACE_BYTES}, set by the broker) are
assembled in place instead: once the size prefix announces one, a buffer of
the frame's size is mapped (anonymous C{mmap}, huge pages where the kernel
offers them) and every read is copied into it as it arrives, so the reads'
own memory is reused at once.  Joining a list of reads instead faulted in
fresh memory twice per frame (the heap the reads piled up in, and the joined
frame): about 490 page faults per MB, which made a 100 MB frame cost 2-3.5x
the kernel time per MB of a 1 MB one.  Such a frame is handed to
L{stringReceived} as a C{memoryview}.
"""

from __future__ import annotations

import mmap
import struct
from abc import ABC, abstractmethod
from collections import deque

from twisted.internet.protocol import Protocol

_SIZE = struct.Struct("!I")  # as Int32StringReceiver: an unsigned size
PREFIX_BYTES = _SIZE.size
#: The broker's L{FrameReceiver.IN_PLACE_BYTES}: smaller frames reuse the heap the reads came in, so
#: joining their reads faults in no new memory; larger ones (beyond what glibc keeps on its heap) would.
IN_PLACE_FRAME_BYTES = 8 * 1024 * 1024


class FrameReceiver(Protocol, ABC):
    """A protocol receiving and sending int32-size-prefixed frames, in linear time."""

    #: The largest frame accepted; a larger size prefix calls L{lengthLimitExceeded}.
    MAX_LENGTH = 99999
    #: Set by L{pauseProducing}: frames stay buffered (and the transport does not read) until resumed.
    paused = False
    #: Frames at least this large are assembled in place and delivered as a C{memoryview} (None: never).
    IN_PLACE_BYTES: int | None = None

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # into _chunks[0]: the bytes before it are consumed
        self._pending = 0  # bytes in _chunks past _offset
        self._length: int | None = None  # the size of the frame being assembled, once its prefix is read
        self._holds: set[str] = set()
        self._discarding = False
        self._frame: memoryview | None = None  # the in-place frame being filled
        self._filled = 0  # bytes of it filled
        #: Bytes copied into frames (and size prefixes) over the connection's life: at most the bytes received.
        self.frame_copied_bytes = 0

    # -- receiving -----------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._discarding:
            return
        if data:
            if self._frame is not None and self._filled < len(self._frame):
                taken = self._fill(data)
                if taken < len(data):
                    rest = data[taken:]
                    self._chunks.append(rest)
                    self._pending += len(rest)
            else:
                self._chunks.append(bytes(data))
                self._pending += len(data)
        self._deliver()
        self.buffer_changed()

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

    def _deliver(self) -> None:
        while not self.paused and not self._discarding:
            if self._frame is not None:
                if self._filled < len(self._frame):
                    return
                frame, self._frame, self._filled, self._length = self._frame, None, 0, None
                self.stringReceived(frame)
                continue
            if self._length is None:
                if self._pending < PREFIX_BYTES:
                    return
                (length,) = _SIZE.unpack(self._take(PREFIX_BYTES))
                if length > self.MAX_LENGTH:
                    self._discarding = True
                    self.lengthLimitExceeded(length)
                    return
                self._length = length
            if self._pending < self._length:
                if self.IN_PLACE_BYTES is not None and self._length >= self.IN_PLACE_BYTES:
                    self._start_in_place()
                return
            frame = self._take(self._length)
            self._length = None
            self.stringReceived(frame)

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

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet delivered as frames (size prefixes already read excluded)."""
        return self._pending + self._filled

    @property
    def needed_bytes(self) -> int:
        """Bytes still to arrive before the frame being assembled is complete (0 if one is complete)."""
        if self._length is None:
            return max(0, PREFIX_BYTES - self._pending)
        return max(0, self._length - self._pending - self._filled)

    def peek(self, n: int) -> bytes:
        """Up to C{n} buffered bytes, without consuming them (after a size prefix L{lengthLimitExceeded} saw)."""
        out = bytearray()
        offset = self._offset
        for chunk in self._chunks:
            out += chunk[offset : offset + n - len(out)]
            offset = 0
            if len(out) >= n:
                break
        return bytes(out)

    def discard_buffer(self) -> None:
        """Drop what is buffered and ignore whatever arrives from now on (the connection is being closed)."""
        self._discarding = True
        self._chunks.clear()
        self._offset = self._pending = self._filled = 0
        self._length = self._frame = None
        self.buffer_changed()

    # -- hooks ---------------------------------------------------------------

    @abstractmethod
    def stringReceived(self, frame: bytes | memoryview) -> None:
        """One whole frame (its size prefix removed) arrived: bytes, or a C{memoryview} when assembled in place."""

    def lengthLimitExceeded(self, length: int) -> None:
        """A size prefix over C{MAX_LENGTH} arrived; nothing more is delivered.  Default: drop the connection."""
        self.transport.loseConnection()

    def buffer_changed(self) -> None:
        """Called after each read with the new L{buffered_bytes} and L{needed_bytes} (default: nothing)."""

    # -- sending -------------------------------------------------------------

    def sendString(self, frame: bytes) -> None:
        """Write C{frame} with its size prefix."""
        self.transport.write(_SIZE.pack(len(frame)) + frame)

    # -- flow control --------------------------------------------------------

    def hold_reading(self, reason: str) -> None:
        """Stop the transport reading for C{reason} (the first reason pauses it)."""
        if not self._holds:
            self.transport.pauseProducing()
        self._holds.add(reason)

    def release_reading(self, reason: str) -> None:
        """Drop C{reason} to stop reading (the last one resumes the transport)."""
        if reason in self._holds:
            self._holds.discard(reason)
            if not self._holds:
                self.transport.resumeProducing()

    def reading_held(self, reason: str | None = None) -> bool:
        """Whether the transport is held (for C{reason}, or for any reason)."""
        return reason in self._holds if reason is not None else bool(self._holds)

    def pauseProducing(self) -> None:
        """Deliver no more frames and stop reading, until L{resumeProducing}."""
        self.paused = True
        self.hold_reading("paused")

    def resumeProducing(self) -> None:
        """Deliver the buffered frames and read again (unless another hold remains)."""
        self.paused = False
        self.release_reading("paused")
        self.dataReceived(b"")

    def stopProducing(self) -> None:
        self.paused = True
        self.transport.stopProducing()
