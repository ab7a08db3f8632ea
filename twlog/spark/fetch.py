# -*- test-case-name: tests.spark.test_fetch,tests.integration.test_spark_source -*-
"""The Spark workers' broker connection: fetched log bytes received straight into one reused buffer.

L{twlog.client.sync.SyncConnection} receives a response as the socket's chunks,
joins them into one C{bytes} (a copy of every fetched byte) and the response
decoder slices the message set out of it (a second copy).  At a Spark worker's
rate (hundreds of MB/s per task) those two copies cost as much as the CRC walk.
L{FetchConnection} is the same connection (every request, error and TLS/SASL
setting alike), except that the frame of a fetch is received with C{recv_into}
into a buffer it keeps from fetch to fetch, and handed on as a C{memoryview}:
the message set reaches L{twlog.spark.arrow.scan_fetch} with no copy at all
(the only copies left are the kernel's into the socket buffer and the payloads'
into the Arrow column, L{twlog.storage.kernel.gather}).

It can also send a fetch ahead (L{FetchConnection.send_ahead}): the Spark
reader sends the next fetch as soon as its walk over the last one's bytes has
found where their whole messages end, so the broker sends the next bytes (into
the socket's buffer) while the worker gathers the payloads, builds Arrow
batches and hands them to Spark.  A fetch
sent ahead is answered by the next L{FetchConnection.fetch_part} of the same
part; any other request first receives and drops its answer, so a reader that
goes on elsewhere (a corrupt message skipped, a re-read, a refresh) reads what
it would have read without it.

The view is valid until the next fetch on the same connection, which overwrites
the buffer: its reader (L{twlog.spark.source.read_range}) copies what it keeps
(the Arrow columns are built from copies) before it fetches again.
"""

from __future__ import annotations

import socket
import struct

import numpy as np

from twlog.client.sync import SyncConnection
from twlog.errors import (
    BrokerError,
    ConnectionLost,
    ProtocolViolation,
    check,
)
from twlog.protocol.codec import (
    FetchRequest,
    Request,
    Response,
    WaitFetchRequest,
    describe_request,
    encode_request,
)
from twlog.protocol.frames import FrameTooLarge, frame

__all__ = ["FetchConnection"]

_SIZE = struct.Struct(">i")
#: The most one C{recv_into} asks the socket for.
_MAX_READ = 4 * 1024 * 1024


class FetchConnection(SyncConnection):
    """A L{SyncConnection} whose fetches return a C{memoryview} of a buffer reused by the next fetch, and which
    can send the next fetch ahead (L{send_ahead}) while the last one's bytes are being turned into rows."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._buffer = np.empty(0, dtype=np.uint8)
        #: The fetch sent ahead, whose answer is still to be received.
        self._ahead: WaitFetchRequest | None = None

    def close(self) -> None:
        self._ahead = None
        super().close()

    def send_ahead(self, part: FetchRequest) -> None:
        """Send the fetch C{part} now; the next L{fetch_part} of the same part takes its answer (any other request
        first receives and drops it).  A failure to send closes the connection, and the next request says it."""
        if self._ahead is not None:
            return
        request = WaitFetchRequest(0, 0, (part,))
        try:
            self._connect().sendall(frame(encode_request(request)))
        except (OSError, BrokerError):
            self.close()
            return
        self._ahead = request

    def call(self, request: Request) -> Response:
        self._drop_ahead()
        return super().call(request)

    def fetch_part(self, part: FetchRequest) -> bytes | memoryview:
        """As L{SyncConnection.fetch_part} (the answer sent ahead when it was), the message set a C{memoryview}
        valid until the next fetch."""
        request = WaitFetchRequest(0, 0, (part,))
        if self._ahead != request:
            self._drop_ahead()
        sent, self._ahead = self._ahead is not None, None
        parts = self._exchange(request, self._receive_into, sent=sent).parts
        if len(parts) != 1:
            self.close()
            raise ProtocolViolation(f"broker {self.address} answered a one-part WAIT_FETCH with {len(parts)} parts")
        return check(parts[0], f"broker {self.address} refused {describe_request(request)}").messages

    def _drop_ahead(self) -> None:
        """Receive and drop the answer to the fetch sent ahead, if any (on any failure, close: reconnect later)."""
        if self._ahead is None:
            return
        self._ahead = None
        try:
            self._receive_into(self._connect())
        except (OSError, FrameTooLarge, BrokerError):
            self.close()

    def _receive_into(self, sock: socket.socket) -> memoryview:
        """The next frame, received into the reused buffer."""
        if self._frames.buffered_bytes:  # (never after a whole answer: nothing is sent past a response)
            return memoryview(bytes(self._receive_frame(sock)))
        (length,) = _SIZE.unpack(self._receive(sock, 4))
        if length < 0 or length > self._frames.max_length:
            raise FrameTooLarge(length)
        if len(self._buffer) < length:
            self._buffer = np.empty(max(length, 2 * len(self._buffer)), dtype=np.uint8)
        view = memoryview(self._buffer)[:length]
        got = 0
        while got < length:
            n = sock.recv_into(view[got:], min(length - got, _MAX_READ))
            if not n:
                raise self._closed()
            got += n
        self._answered = True
        return view

    def _receive(self, sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            more = sock.recv(n - len(data))
            if not more:
                raise self._closed()
            data += more
        return data

    def _closed(self) -> ConnectionLost:
        return ConnectionLost(f"broker {self.address} closed the connection before answering{self._tls_hint()}")
