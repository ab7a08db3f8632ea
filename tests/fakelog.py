"""Fake brokers answering OFFSETS, BOUNDARIES and FETCH from in-memory logs, for deterministic tests of what walks
a partition's messages (counts, shifts, resets) and what asks a broker for its latest offsets.

A L{FakeBrokers} holds logs by C{(host, port)} and partition; its L{FakeBrokers.connect} is a
C{connect(host, port)} as L{twlog.consumer.admin.connector} makes: each connection's C{request} answers at once
(a Deferred already fired) as a broker would, or fails with L{ConnectionFailed} when that broker is down.
"""

from __future__ import annotations

import bisect

from twisted.internet.defer import fail, succeed

from twlog.errors import ConnectionFailed, OffsetOutOfRange, WrongPartition
from twlog.protocol.codec import EARLIEST, LATEST, BoundariesRequest, FetchRequest, OffsetsRequest
from twlog.protocol.responses import BoundariesResponse, FetchResult, OffsetsResponse
from twlog.storage.message import encode_message_set


class FakeLog:
    """One partition's log: C{payloads} as uncompressed messages from C{base} (retention deleted what was before)."""

    def __init__(self, payloads: list[bytes], base: int = 0) -> None:
        self.base = base
        self.data = b""
        self.starts: list[int] = []
        self.append(payloads)

    def append(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.starts.append(self.end)
            self.data += encode_message_set([payload])

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def answer(self, request):
        if isinstance(request, OffsetsRequest):
            offset = {LATEST: self.end, EARLIEST: self.base}.get(request.time, self.base)
            return OffsetsResponse(0, (offset,))
        if isinstance(request, BoundariesRequest):
            assert all(self.base <= p for p in request.positions), request
            return BoundariesResponse(0, tuple(self._boundary(p) for p in request.positions))
        assert isinstance(request, FetchRequest), request
        if not self.base <= request.offset <= self.end:
            raise OffsetOutOfRange(f"offset {request.offset} is out of range")
        at = request.offset - self.base
        return FetchResult(0, self.data[at:at + request.max_bytes])

    def _boundary(self, position: int) -> int:
        i = bisect.bisect_left(self.starts, position)
        return self.starts[i] if i < len(self.starts) else self.end


class FakeConnection:
    def __init__(self, brokers: FakeBrokers, address: tuple[str, int]) -> None:
        self.brokers = brokers
        self.address = address
        self.closed = False

    def request(self, request, **_):
        self.brokers.requests.append((self.address, request))
        if self.address in self.brokers.down:
            return fail(ConnectionFailed(f"broker at {self.address[0]}:{self.address[1]} is unreachable"))
        log = self.brokers.logs.get((self.address, request.topic, request.partition))
        if log is None:
            return fail(WrongPartition(f"no partition {request.topic}/{request.partition} here"))
        try:
            return succeed(log.answer(request))
        except OffsetOutOfRange as e:
            return fail(e)

    def close(self):
        self.closed = True
        return succeed(None)


class FakeBrokers:
    """Logs by broker address and partition; L{connect} gives connections to them."""

    def __init__(self) -> None:
        self.logs: dict[tuple[tuple[str, int], str, int], FakeLog] = {}
        self.down: set[tuple[str, int]] = set()
        self.requests: list[tuple[tuple[str, int], object]] = []
        self.connections: list[FakeConnection] = []

    def add(self, address: tuple[str, int], topic: str, number: int, log: FakeLog) -> FakeLog:
        self.logs[(address, topic, number)] = log
        return log

    def connect(self, host: str, port: int) -> FakeConnection:
        connection = FakeConnection(self, (host, port))
        self.connections.append(connection)
        return connection
