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

The view is valid until the next fetch on the same connection, which overwrites
the buffer: its reader (L{twlog.spark.source.read_range}) copies what it keeps
(the Arrow columns are built from copies) before it fetches again.
"""

from __future__ import annotations

import socket
import struct

import numpy as np

from twlog.client.sync import SyncConnection
from twlog.errors import ConnectionLost
from twlog.protocol.codec import FetchRequest
from twlog.protocol.frames import FrameTooLarge

__all__ = ["FetchConnection"]

_SIZE = struct.Struct(">i")
#: The most one C{recv_into} asks the socket for.
_MAX_READ = 4 * 1024 * 1024


class FetchConnection(SyncConnection):
    """A L{SyncConnection} whose fetches return a C{memoryview} of a buffer reused by the next fetch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._buffer = np.empty(0, dtype=np.uint8)
        self._into = False

    def fetch_part(self, part: FetchRequest) -> bytes | memoryview:
        """As L{SyncConnection.fetch_part}, the message set a C{memoryview} valid until the next fetch."""
        self._into = True
        try:
            return super().fetch_part(part)
        finally:
            self._into = False

    def _receive_frame(self, sock: socket.socket) -> bytes | memoryview:
        """A fetch's frame received into the reused buffer (any other frame as the base class receives it)."""
        if not self._into or self._frames.buffered_bytes:
            return super()._receive_frame(sock)
        head = self._receive(sock, 4)
        (length,) = _SIZE.unpack(head)
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
