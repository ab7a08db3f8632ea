"""Start a real broker in the test's reactor, on a free loopback port, with its own log directory."""

from __future__ import annotations

import struct

import attrs
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from typing_extensions import override

from twlog.broker.service import BrokerService
from twlog.config import BrokerConfig, LogConfig
from twlog.protocol import codec

_LOG_FIELDS = {f.name for f in attrs.fields(LogConfig)}


async def start_broker(testcase, log_dir: str | None = None, **overrides) -> BrokerService:
    """A started L{BrokerService} on 127.0.0.1 port 0, stopped (cleanly) when the test ends.

    Keyword arguments name LogConfig or BrokerConfig fields.
    """
    log_settings = {k: v for k, v in overrides.items() if k in _LOG_FIELDS}
    broker_settings = {k: v for k, v in overrides.items() if k not in _LOG_FIELDS}
    config = BrokerConfig(
        log=LogConfig(log_dir or testcase.mktemp(), **log_settings),
        port=0,
        interface="127.0.0.1",
        **broker_settings,
    )
    service = BrokerService(config, reactor)
    service.startService()
    await service.listening
    testcase.addCleanup(lambda: service.stopService() if service.running else None)
    return service


class RawClient(Protocol):
    """A bare TCP client for wire-level tests: send raw bytes, await whole response frames or the close."""

    def __init__(self) -> None:
        self.buffer = b""
        self.frames: list[bytes] = []
        self.closed: Deferred = Deferred()
        self._waiting: list[tuple[int, Deferred]] = []

    @override
    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (size,) = struct.unpack_from(">i", self.buffer)
            if len(self.buffer) < 4 + size:
                break
            self.frames.append(self.buffer[4 : 4 + size])
            self.buffer = self.buffer[4 + size :]
        for count, d in list(self._waiting):
            if len(self.frames) >= count:
                self._waiting.remove((count, d))
                d.callback(self.frames[:count])

    @override
    def connectionLost(self, reason=None) -> None:
        for _, d in self._waiting:
            d.errback(reason)
        self._waiting = []
        self.closed.callback(None)

    def send(self, *requests) -> None:
        """Send requests (codec values) or raw bytes, in one write."""
        data = []
        for request in requests:
            if isinstance(request, bytes):
                data.append(request)
            else:
                frame = codec.encode_request(request)
                data.append(struct.pack(">i", len(frame)) + frame)
        self.transport.write(b"".join(data))

    def responses(self, count: int) -> Deferred:
        """Fire with the first C{count} response frames (sizes stripped), once they have arrived."""
        d: Deferred = Deferred()
        self._waiting.append((count, d))
        self.dataReceived(b"")
        return d


async def raw_connect(testcase, service: BrokerService) -> RawClient:
    """A L{RawClient} connected to C{service}, disconnected when the test ends."""
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", service.broker.port)
    client = await connectProtocol(endpoint, RawClient())

    def close():
        if client.transport.connected:
            client.transport.loseConnection()
            return client.closed

    testcase.addCleanup(close)
    return client


async def wait_until(predicate, timeout_s: float = 10.0, step_s: float = 0.005) -> None:
    """Let the reactor run until C{predicate()} holds (for states no event announces); bounded."""
    from twisted.internet.task import deferLater

    waited = 0.0
    while not predicate():
        if waited >= timeout_s:
            raise AssertionError(f"condition not reached within {timeout_s} s")
        await deferLater(reactor, step_s, lambda: None)
        waited += step_s
