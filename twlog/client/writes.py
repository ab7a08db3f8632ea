# -*- test-case-name: tests.client.test_writes -*-
"""L{FrameWriter}: how a client connection's frames reach the socket, in order.

Frames that get no response (fire-and-forget PRODUCE) are gathered and written
in one call: when C{GATHER_BYTES} have gathered, else at the start of the next
reactor turn, so a producer sending many small frames makes one write (and one
system call) per 64 KiB, not one per frame.  A request's frame (one that waits
for an answer: a fetch, OFFSETS, an acknowledged produce) goes out at once,
after whatever was gathered before it, so frames keep the order they were
sent in.  On a plain TCP connection, a write goes straight to the socket when
nothing waits in the transport's buffer (a pipelined fetch asked for inside a
callback leaves now, not after the callback's work); what the socket does not
take, and anything larger, goes through the transport, whose buffer is the
producers' flow control (C{pauseProducing}).
"""

from __future__ import annotations

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from twlog.protocol.sendfile import buffered_bytes, can_sendfile

#: Frames up to this size may be written straight to the socket.
DIRECT_SEND_BYTES = 64 * 1024

#: Gathered no-response frames are written once this many bytes are waiting (else next reactor turn).
GATHER_BYTES = 64 * 1024


class FrameWriter:
    """Writes one connection's frames (each with its size prefix) to its transport, gathering the small
    no-response ones."""

    __slots__ = ("_call", "_choice", "_clock", "_gathered", "_parts", "direct", "transport")

    def __init__(self, clock: IReactorTime, direct: bool | None = None) -> None:
        """@param direct: whether writes may go straight to the socket (None: where the transport is plain
            TCP, L{can_sendfile}; tests of a fake transport say so)."""
        self._clock = clock
        self._choice = direct
        self.transport = None
        #: Whether writes may go straight to the socket (a plain TCP transport), once attached.
        self.direct = False
        self._parts: list[bytes] = []
        self._gathered = 0
        self._call: IDelayedCall | None = None

    def attach(self, transport) -> None:
        """Write to C{transport} (the connection is made)."""
        self.transport = transport
        self.direct = can_sendfile(transport) if self._choice is None else self._choice

    @property
    def gathered(self) -> int:
        """Bytes gathered and not written yet."""
        return self._gathered

    def gather(self, data: bytes) -> None:
        """Write C{data} (a no-response frame) with the next ones: now if C{GATHER_BYTES} have gathered,
        else at the start of the next reactor turn."""
        self._parts.append(data)
        self._gathered += len(data)
        if self._gathered >= GATHER_BYTES:
            self.flush()
        elif self._call is None:
            self._call = self._clock.callLater(0, self._turn)

    def write(self, data: bytes) -> None:
        """Write C{data} (a request's frame) now, after the frames gathered before it."""
        if self._parts:
            self._parts.append(data)
            self.flush()
        else:
            self._emit(data)

    def flush(self) -> None:
        """Write what is gathered now (nothing if nothing is)."""
        if self._call is not None:
            if self._call.active():
                self._call.cancel()
            self._call = None
        parts = self._parts
        if not parts:
            return
        self._parts = []
        self._gathered = 0
        self._emit(parts[0] if len(parts) == 1 else b"".join(parts))

    def drop(self) -> None:
        """Forget what is gathered (the connection is gone): no write later."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._parts = []
        self._gathered = 0

    def _turn(self) -> None:
        self._call = None
        if self.transport is not None:
            self.flush()

    def _emit(self, data: bytes) -> None:
        transport = self.transport
        if self.direct and len(data) <= DIRECT_SEND_BYTES + GATHER_BYTES and not buffered_bytes(transport):
            try:
                sent = transport.getHandle().send(data)
            except OSError:  # EAGAIN, or a broken connection the transport will notice
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        transport.write(data)
