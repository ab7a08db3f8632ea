"""Test doubles for the client tests: a scripted endpoint and an in-memory broker connection."""

from __future__ import annotations

import struct

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.testing import StringTransport, StringTransportWithDisconnection
from twisted.python.failure import Failure
from zope.interface import implementer

from twlog.errors import NO_ERROR, ConnectionFailed
from twlog.protocol import codec
from twlog.protocol.codec import (
    AckProduceRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceResult,
    TopicMetadata,
)
from twlog.storage.message import iter_messages

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


class FakeConnection:
    """A BrokerConnection stand-in: answers METADATA from a table, records produces, and can hold answers.

    C{partitions} maps topic to partition count on this broker.  With
    C{hold_sends} (or C{hold_requests}), Deferreds stay unfired until the test
    fires them from C{held}.
    """

    def __init__(self, host: str, port: int, broker_id: int = 0, partitions: dict[str, int] | None = None) -> None:
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.broker_id = broker_id
        self.partitions = partitions if partitions is not None else {"t": 1}
        self.down = False
        #: Topics this broker refuses in METADATA, with the error code.
        self.topic_errors: dict[str, int] = {}
        self.closed = False
        self.hold_sends = False
        self.hold_requests = False
        self.held: list[Deferred] = []
        self.sent: list[codec.Request] = []
        self.requests: list[codec.Request] = []
        self.ends: dict[tuple[str, int], int] = {}
        self.responses: list[Deferred | bytes | Exception] = []

    def ready(self) -> None:
        """No protocol to write to at once: sends through the fake take the Deferred path, which it records."""
        return None

    def request(self, request: codec.Request, *, timeout_s: float | None = None) -> Deferred[bytes]:
        self.requests.append(request)
        if self.down:
            return fail(ConnectionFailed(f"cannot connect to broker {self.address}: refused"))
        if isinstance(request, MetadataRequest):
            topics = tuple(
                TopicMetadata(t, self.topic_errors[t], 0) if t in self.topic_errors
                else TopicMetadata(t, NO_ERROR, self.partitions.get(t, 1))
                for t in request.topics
            )
            metadata = MetadataResponse(self.broker_id, self.host, self.port, topics)
            return succeed(codec.encode_metadata_response(NO_ERROR, metadata))
        if self.responses:
            answer = self.responses.pop(0)
            if isinstance(answer, Exception):
                return fail(answer)
            return answer if isinstance(answer, Deferred) else succeed(answer)
        if isinstance(request, AckProduceRequest):
            results = []
            for produce in request.produces:
                start = self.ends.get((produce.topic, produce.partition), 0)
                end = start + len(produce.messages)
                self.ends[(produce.topic, produce.partition)] = end
                results.append(ProduceResult(produce.topic, produce.partition, NO_ERROR, start, end))
            answer = codec.encode_ack_produce_response(NO_ERROR, results)
            if self.hold_requests:
                d: Deferred[bytes] = Deferred()
                self.held.append(d)
                d.addCallback(lambda _: answer)
                return d
            return succeed(answer)
        held: Deferred[bytes] = Deferred()  # unscripted (a fetch): the test answers it from held
        self.held.append(held)
        return held

    def send(self, request: codec.Request) -> Deferred[None]:
        if self.down:
            return fail(ConnectionFailed(f"cannot connect to broker {self.address}: refused"))
        self.sent.append(request)
        if self.hold_sends:
            d: Deferred[None] = Deferred()
            self.held.append(d)
            return d
        return succeed(None)

    def close(self) -> Deferred[None]:
        self.closed = True
        return succeed(None)

    def produced_payloads(self) -> list[list[bytes]]:
        """The payloads of each produce sent or requested, one list per request."""
        batches = []
        for request in self.sent + self.requests:
            produces = getattr(request, "produces", None) or ([request] if hasattr(request, "messages") else [])
            for produce in produces:
                batches.append([m.payload for m in iter_messages(produce.messages, 0, whole_buffer=True)])
        return batches
