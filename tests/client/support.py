"""Test doubles for the client tests: a scripted endpoint, and wire framing helpers.

The in-memory broker connection is C{tests.fakes.FakeConnection}."""

from __future__ import annotations

import struct

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.testing import StringTransport, StringTransportWithDisconnection
from twisted.python.failure import Failure
from zope.interface import implementer

from twlog.protocol import codec

_SIZE = struct.Struct(">i")


def framed(frame: bytes) -> bytes:
    """C{frame} with its int32 size prefix, as it travels on the wire."""
    return _SIZE.pack(len(frame)) + frame


def unframe_all(data: bytes) -> list[bytes]:
    """Split the bytes a client wrote into frames (size prefixes removed)."""
    frames = []
    pos = 0
    while pos < len(data):
        size = _SIZE.unpack_from(data, pos)[0]
        frames.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames


def written_requests(transport: StringTransport) -> list[codec.Request]:
    """The requests written to C{transport} so far, decoded."""
    return [codec.decode_request(f) for f in unframe_all(transport.value())]


@implementer(IStreamClientEndpoint)
class FakeEndpoint:
    """An endpoint whose connection attempts the test completes or fails by hand (then runs C{clock}'s next turn)."""

    def __init__(self, disconnect_on_close: bool = True, clock=None) -> None:
        self._clock = clock
        self.attempts: list[tuple[object, Deferred]] = []
        self.transports: list[StringTransport] = []
        self.protocols: list[object] = []
        self._disconnect_on_close = disconnect_on_close

    def connect(self, factory) -> Deferred:
        d: Deferred = Deferred()
        self.attempts.append((factory, d))
        return d

    def succeed(self) -> StringTransport:
        """Complete the latest attempt with a new StringTransport; return it."""
        factory, d = self.attempts[-1]
        protocol = factory.buildProtocol(None)
        if self._disconnect_on_close:
            transport = StringTransportWithDisconnection()
            transport.protocol = protocol
        else:
            transport = StringTransport()
        protocol.makeConnection(transport)
        self.transports.append(transport)
        self.protocols.append(protocol)
        d.callback(protocol)
        self._next_turn()
        return transport

    def _next_turn(self) -> None:
        if self._clock is not None:
            self._clock.advance(0)  # what the reactor does right after an attempt completes

    def lose(self, reason: Exception | None = None) -> None:
        """The latest connection is lost (seen through ClientService's wrapper, as a real one would be)."""
        self.transports[-1].connected = False
        self.protocols[-1].connectionLost(Failure(reason or ConnectionDone("closed by the broker")))

    def fail(self, exception: Exception) -> None:
        """Fail the latest attempt."""
        self.attempts[-1][1].errback(exception)
        self._next_turn()
