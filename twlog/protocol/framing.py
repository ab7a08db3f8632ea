# -*- test-case-name: tests.protocol.test_framing -*-
"""L{FrameReceiver}: C{[int32 size][frame]} framing in time linear in the bytes received.

The frames are parsed by the pure L{twlog.protocol.frames.FrameBuffer}, which
the blocking client uses too; this protocol delivers them.  Twisted's
C{Int32StringReceiver} concatenates its whole pending buffer with every read
(C{self._unprocessed + data}), so assembling one frame of I{n}
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

from abc import ABC, abstractmethod
from collections.abc import Callable

from twisted.internet.protocol import Protocol

from twlog.protocol.frames import PREFIX_BYTES, FrameBuffer, FrameTooLarge
from twlog.protocol.frames import frame as framed

__all__ = ["IN_PLACE_FRAME_BYTES", "PREFIX_BYTES", "FrameReceiver"]
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
    #: Takes whole frames from the head of the buffer at once (the broker's L{twlog.protocol.runs}), asked before
    #: each frame would be delivered; it says whether it took any (False: the next frame is delivered as usual).
    take_run: Callable[[FrameBuffer], bool] | None = None

    def __init__(self) -> None:
        self._buffer = FrameBuffer(self.MAX_LENGTH, self.IN_PLACE_BYTES)
        self._holds: set[str] = set()
        self._discarding = False

    # -- receiving -----------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._discarding:
            return
        buffer = self._buffer
        buffer.max_length, buffer.in_place_bytes = self.MAX_LENGTH, self.IN_PLACE_BYTES
        buffer.append(data)
        self._deliver()
        self.buffer_changed()

    def _deliver(self) -> None:
        take_run = self.take_run
        while not self.paused and not self._discarding and self.may_deliver():
            if take_run is not None and take_run(self._buffer):
                continue
            try:
                frame = self._buffer.next_frame()
            except FrameTooLarge as e:
                self._discarding = True
                self.lengthLimitExceeded(e.length)
                return
            if frame is None:
                return
            self.stringReceived(frame)

    @property
    def discarding(self) -> bool:
        """Whether what arrives is dropped (L{discard_buffer}: the connection is being closed)."""
        return self._discarding

    @property
    def frame_ready(self) -> bool:
        """Whether a whole frame (or a size prefix over C{MAX_LENGTH}) is buffered, not yet delivered."""
        return self._buffer.frame_ready

    @property
    def frame_started(self) -> bool:
        """Whether part of a frame has arrived and the frame is not whole yet."""
        return self._buffer.frame_started

    @property
    def frames_taken(self) -> int:
        """Frames delivered (or being delivered) over the connection's life."""
        return self._buffer.frames_taken

    @property
    def frame_copied_bytes(self) -> int:
        """Bytes copied into frames (and size prefixes) over the connection's life: at most the bytes received."""
        return self._buffer.frame_copied_bytes

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet delivered as frames (size prefixes already read excluded)."""
        return self._buffer.buffered_bytes

    @property
    def needed_bytes(self) -> int:
        """Bytes still to arrive before the frame being assembled is complete (0 if one is complete)."""
        return self._buffer.needed_bytes

    def peek(self, n: int) -> bytes:
        """Up to C{n} buffered bytes, without consuming them (after a size prefix L{lengthLimitExceeded} saw)."""
        return self._buffer.peek(n)

    def discard_buffer(self) -> None:
        """Drop what is buffered and ignore whatever arrives from now on (the connection is being closed)."""
        self._discarding = True
        self._buffer.clear()
        self.buffer_changed()

    # -- hooks ---------------------------------------------------------------

    @abstractmethod
    def stringReceived(self, frame: bytes | memoryview) -> None:
        """One whole frame (its size prefix removed) arrived: bytes, or a C{memoryview} when assembled in place."""

    def may_deliver(self) -> bool:
        """Asked before each frame is delivered: False keeps the frames buffered for now (default: True).

        Whoever says False delivers them later (L{resumeProducing}, or a call to C{dataReceived(b"")}).
        """
        return True

    def lengthLimitExceeded(self, length: int) -> None:
        """A size prefix over C{MAX_LENGTH} arrived; nothing more is delivered.  Default: drop the connection."""
        self.transport.loseConnection()

    def buffer_changed(self) -> None:
        """Called after each read with the new L{buffered_bytes} and L{needed_bytes} (default: nothing)."""

    # -- sending -------------------------------------------------------------

    def sendString(self, frame: bytes) -> None:
        """Write C{frame} with its size prefix."""
        self.transport.write(framed(frame))

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
