# -*- test-case-name: tests.protocol.test_sendfile -*-
"""Writing responses that carry log bytes: sendfile(2) on plain TCP, read-and-write elsewhere.

Twisted has no sendfile API, so L{ResponseSender} registers itself on the
transport as a pull producer.  Twisted resumes a pull producer when it is
registered and each time the transport's write buffer has drained
(C{twisted.internet.abstract.FileDescriptor.doWrite}); the sender calls
sendfile only then, so log bytes never overtake bytes already buffered (the
response header, earlier responses).  When the socket is full, sendfile
raises C{EAGAIN}; the sender asks the transport to watch for writability
(C{startWriting}) and Twisted resumes it when the socket can take more.

The header of a response (and the part headers of a multi-part one) is the
one place where bytes and log bytes meet.  Handing it to C{transport.write}
would cost a reactor turn before the first sendfile call (the buffer must
drain first) and send it as a tiny segment of its own.  So while the
transport's buffer is empty, the sender writes such bytes straight to the
socket with C{MSG_MORE} (the kernel holds them to go out with the log bytes
that follow) and calls sendfile at once; only what the socket does not take
goes through the transport's buffer.  The broker's connections also set
C{TCP_NODELAY}: with Nagle's algorithm on, the last, partial segment of each
sendfile waited for the peer's (delayed) acknowledgement, which made one
consumer 1.3-2x slower through sendfile than through copying (issue 12).

This leans on Twisted internals: the transport's buffer and TLS flag, read
only in L{twlog.protocol.twisted_internals} (which names them and is pinned
by a real-socket test), and C{doWrite}'s producer call; so Twisted's version
is pinned in setup.cfg and the TCP path is covered by real-socket tests.
Over TLS, or on a transport that is not a plain TCP connection, log bytes are
read in chunks and written instead.
"""

from __future__ import annotations

import errno
import os
import socket
from collections import deque
from collections.abc import Callable, Iterable

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPullProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twlog.protocol.twisted_internals import buffered_bytes, is_plain_tcp
from twlog.storage.segment import FileRegion

#: buffered_bytes is re-exported for the client (twlog.client.protocol imports it from here).
__all__ = ["CHUNK_BYTES", "HIGH_WATER_BYTES", "ResponseSender", "buffered_bytes", "can_sendfile", "sendfile"]

#: Bytes read per chunk on the fallback path.
CHUNK_BYTES = 256 * 1024
#: A response counts as written once at most this much of it waits in the transport's buffer.
HIGH_WATER_BYTES = 256 * 1024

#: The system call: C{sendfile(out_fd, in_fd, position, count) -> bytes sent}.  A sender uses the one
#: given to it, else this module attribute (so tests can also count its use by patching it here).
sendfile: Callable[[int, int, int, int], int] | None = getattr(os, "sendfile", None)

_FALLBACK_ERRNOS = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK}
#: C{send(2)}'s "more is coming" flag (Linux): a header sent with it leaves with the log bytes after it.
_MSG_MORE = getattr(socket, "MSG_MORE", 0)


def can_sendfile(transport) -> bool:
    """Whether log bytes may go to C{transport} with sendfile: a plain, non-TLS TCP connection."""
    return sendfile is not None and is_plain_tcp(transport)


@implementer(IPullProducer)
class ResponseSender:
    """Write one response, made of bytes and L{FileRegion}s, to a transport in order.

    L{start} returns a Deferred that fires once the whole response is handed to
    the kernel (sendfile) or to the transport with at most L{HIGH_WATER_BYTES}
    still buffered, so a connection whose peer does not read holds a bounded
    amount of memory.  It errbacks if the connection goes away first.

    @param use_sendfile: whether to try sendfile (default: L{can_sendfile}).
    @param send_file: the sendfile call to use (default: the module's L{sendfile}, i.e. C{os.sendfile}).
    """

    _log = Logger()

    def __init__(
        self,
        transport,
        parts: Iterable[bytes | FileRegion],
        use_sendfile: bool | None = None,
        send_file: Callable[[int, int, int, int], int] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self._transport = transport
        #: How much one read of the copy path (no sendfile) reads and writes.
        self._chunk_bytes = chunk_bytes
        self._sendfile = send_file if send_file is not None else sendfile
        self._parts: deque[bytes | FileRegion] = deque(
            p for p in parts if (p.length if isinstance(p, FileRegion) else len(p))
        )
        self._use_sendfile = can_sendfile(transport) if use_sendfile is None else use_sendfile
        self._region_done = 0  # bytes of the head region already sent
        self._done: Deferred[None] = Deferred()
        self._finished = False
        self._resumed = False
        #: Bytes this sender wrote with sendfile, and with write (for tests and measurements).
        self.sendfile_bytes = 0
        self.copied_bytes = 0

    def start(self) -> Deferred[None]:
        """Start writing; the Deferred fires when the response is out (see the class docstring)."""
        self._transport.registerProducer(self, False)
        if not self._resumed and not self._finished:
            # Twisted's TCP transports resume a pull producer on registration;
            # others (test transports) may not.
            self.resumeProducing()
        return self._done

    # IPullProducer

    def resumeProducing(self) -> None:
        """Write as much as the transport takes now."""
        self._resumed = True
        try:
            self._produce()
        except Exception:
            self._fail(Failure())

    def stopProducing(self) -> None:
        """The connection is gone: give up."""
        self._fail(Failure(ConnectionDone("the connection closed before the response was written")))

    # internals

    def _produce(self) -> None:
        transport = self._transport
        while self._parts and not self._finished:
            part = self._parts[0]
            if isinstance(part, bytes):
                if self._use_sendfile and len(self._parts) > 1 and not buffered_bytes(transport):
                    self._send_header()
                    continue
                transport.write(part)
                self._parts.popleft()
                continue
            if self._use_sendfile and buffered_bytes(transport):
                return  # sendfile must not overtake buffered bytes: resumed once they have drained
            if not self._send_region(part):
                return
        if self._finished:
            return
        if buffered_bytes(transport) > HIGH_WATER_BYTES:
            return  # resumed once the buffer has drained
        self._finish()

    def _send_header(self) -> None:
        """Write the leading byte parts straight to the socket, flagged as followed by more (a region).

        Whatever the socket does not take now goes to the transport's buffer,
        ahead of the region, which then waits for it to drain.
        """
        parts = self._parts
        data = parts.popleft()
        while parts and isinstance(parts[0], bytes):
            data += parts.popleft()
        flags = _MSG_MORE if parts else 0
        try:
            sent = self._transport.getHandle().send(data, flags)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self._transport.write(data[sent:])

    def _send_region(self, region: FileRegion) -> bool:
        """Send (some of) the head region; True when it is done and the next part may go."""
        remaining = region.length - self._region_done
        position = region.position + self._region_done
        if remaining <= 0:
            self._next_region()
            return True
        if self._use_sendfile:
            try:
                sent = self._sendfile(self._transport.getHandle().fileno(), region.fileno(), position, remaining)
            except BlockingIOError:
                self._transport.startWriting()  # resumed when the socket is writable again
                return False
            except OSError as e:
                if e.errno not in _FALLBACK_ERRNOS:
                    raise
                self._log.info("sendfile unavailable ({error}); copying log bytes instead", error=e.strerror)
                self._use_sendfile = False
                return True
            if sent == 0:  # the file is shorter than the region: never send made-up bytes
                raise OSError(errno.EIO, f"log segment ended early at position {position}")
            self.sendfile_bytes += sent
            self._region_done += sent
            if sent < remaining:
                self._transport.startWriting()
                return False
            self._next_region()
            return True
        data = os.pread(region.fileno(), min(remaining, self._chunk_bytes), position)
        if not data:
            raise OSError(errno.EIO, f"log segment ended early at position {position}")
        self._transport.write(data)
        self.copied_bytes += len(data)
        self._region_done += len(data)
        if self._region_done >= region.length:
            self._next_region()
        # Carry on while the transport's buffer stays small; a Twisted TCP
        # transport that reports a larger one resumes us once it has drained.
        return buffered_bytes(self._transport) <= HIGH_WATER_BYTES

    def _next_region(self) -> None:
        self._parts.popleft()
        self._region_done = 0

    def _finish(self) -> None:
        self._finished = True
        self._transport.unregisterProducer()
        self._done.callback(None)

    def _fail(self, failure: Failure) -> None:
        if self._finished:
            return
        self._finished = True
        self._parts.clear()
        try:
            self._transport.unregisterProducer()
        except Exception:
            pass
        self._done.errback(failure)
