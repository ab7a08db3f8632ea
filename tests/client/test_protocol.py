"""Tests for twlog.client.connection: the FIFO client protocol and the reconnecting broker connection."""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.client.support import FakeEndpoint, framed, written_requests
from twlog.client.connection import BrokerConnection, client_endpoint
from twlog.client.options import default_retry_policy
from twlog.client.protocol import CLIENT_MOVES, READ_BYTES, ClientProtocol, ClientProtocolState
from twlog.client.writes import GATHER_BYTES
from twlog.errors import (
    NO_ERROR,
    BrokerTimeout,
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    OffsetOutOfRange,
    ProtocolViolation,
    TooManyConnections,
    TooManyConnectionsFromAddress,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    FetchRequest,
    MetadataRequest,
    OffsetsRequest,
    OffsetsResponse,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.statemachine import IllegalTransition, StateMachine

FETCH = FetchRequest("t", 0, 0, 1024)
OFFSETS = OffsetsRequest("t", 0, -1, 1)
PRODUCE = ProduceRequest("t", 0, b"")


def connected(timeout_s: float = 30.0, transport: StringTransport | None = None, **kwargs):
    """A ClientProtocol connected to a StringTransport, with its clock."""
    clock = Clock()
    protocol = ClientProtocol(clock, timeout_s=timeout_s, peer="h:1", **kwargs)
    transport = transport or StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport, clock


def offsets_frame(*offsets: int) -> bytes:
    return codec.encode_offsets_response(NO_ERROR, offsets)


class PausingTransport(StringTransport):
    """A transport whose buffer "fills" (it pauses its producer) after every write."""

    def write(self, data: bytes) -> None:
        super().write(data)
        self.producer.pauseProducing()


class ClientProtocolTests(SynchronousTestCase):
    def test_registers_as_streaming_producer(self) -> None:
        """On connection the protocol registers itself as a push producer, to learn of a full write buffer."""
        protocol, transport, _ = connected()
        self.assertIs(transport.producer, protocol)
        self.assertTrue(transport.streaming)

    def test_fifo_matching(self) -> None:
        """Responses go to the waiting requests in the order the requests were sent."""
        protocol, transport, _ = connected()
        first = protocol.request(OFFSETS)
        second = protocol.request(FETCH)
        self.assertEqual(written_requests(transport), [OFFSETS, FETCH])
        protocol.dataReceived(framed(offsets_frame(7)) + framed(b"\x00\x00abc"))
        self.assertEqual(self.successResultOf(first), offsets_frame(7))
        self.assertEqual(self.successResultOf(second), b"\x00\x00abc")
        self.assertEqual(protocol.pending(), 0)

    def test_fire_and_forget_never_waits(self) -> None:
        """A request without a response is written at once and never enters the FIFO."""
        protocol, transport, _ = connected()
        self.assertIsNone(self.successResultOf(protocol.send(PRODUCE)))
        answered = protocol.request(OFFSETS)
        self.assertEqual(protocol.pending(), 1)
        protocol.dataReceived(framed(offsets_frame(3)))
        self.assertEqual(self.successResultOf(answered), offsets_frame(3))
        self.assertEqual(written_requests(transport), [PRODUCE, OFFSETS])

    def test_wrong_method_for_request_kind(self) -> None:
        """request() refuses a fire-and-forget request and send() one that has a response."""
        protocol, _, _ = connected()
        self.assertRaises(ValueError, protocol.request, PRODUCE)
        self.assertRaises(ValueError, protocol.send, OFFSETS)

    def test_timeout_aborts_connection(self) -> None:
        """A request unanswered within the timeout fails with BrokerTimeout, aborts, and fails the others."""
        protocol, transport, clock = connected(timeout_s=5)
        first = protocol.request(FETCH)
        clock.advance(1)
        second = protocol.request(OFFSETS)
        clock.advance(4)
        failure = self.failureResultOf(first, BrokerTimeout)
        self.assertIn("h:1", str(failure.value))
        self.assertIn("FETCH t-0", str(failure.value))
        self.failureResultOf(second, ConnectionFailed)
        self.assertTrue(transport.disconnecting)
        self.assertFalse(protocol.usable)
        protocol.dataReceived(framed(b"\x00\x00late"))  # a late answer goes nowhere
        self.failureResultOf(protocol.request(OFFSETS), ConnectionFailed)

    def test_refused_connection_fails_every_request_typed(self) -> None:
        """A broker that refused the connection at a cap answers the first request with a bare code 19 or 20:
        every request on the connection fails with the typed, retriable error naming the cap, and the
        connection is dropped (not a ProtocolViolation, and not a ConnectionLost that might have been acted
        on)."""
        for error_type, option in ((TooManyConnections, "--max-connections)"),
                                   (TooManyConnectionsFromAddress, "--max-connections-per-ip)")):
            protocol, transport, _ = connected()
            first = protocol.request(WaitFetchRequest(0, 1, (FETCH,)))
            second = protocol.request(MetadataRequest())
            protocol.dataReceived(framed(codec.encode_error_response(error_type.code)))
            for d in (first, second):
                error = self.failureResultOf(d, error_type).value
                self.assertTrue(error.retriable)
                self.assertIn("broker h:1 refused the connection", str(error))
                self.assertIn(option, str(error))
            self.assertTrue(transport.disconnecting)
            self.failureResultOf(protocol.request(OFFSETS), error_type)

    def test_refusal_before_any_request(self) -> None:
        """A refusal code arriving while no request waits is the typed error too, not a ProtocolViolation."""
        protocol, _, _ = connected()
        protocol.dataReceived(framed(codec.encode_error_response(TooManyConnections.code)))
        self.failureResultOf(protocol.request(OFFSETS), TooManyConnections)

    def test_waiting_fetch_timeout_includes_max_wait(self) -> None:
        """A waiting fetch, and a request queued behind it, may take the broker's hold time on top of the timeout."""
        protocol, _, clock = connected(timeout_s=2)
        held = protocol.request(WaitFetchRequest(5000, 1, (FETCH,)), hold_s=5)
        behind = protocol.request(OFFSETS)
        clock.advance(6.9)
        self.assertNoResult(held)
        self.assertNoResult(behind)
        clock.advance(0.2)
        self.failureResultOf(held, BrokerTimeout)
        self.failureResultOf(behind, ConnectionFailed)

    def test_answer_cancels_timeout(self) -> None:
        """An answered request leaves no timer behind."""
        protocol, _, clock = connected(timeout_s=5)
        d = protocol.request(OFFSETS)
        protocol.dataReceived(framed(offsets_frame(1)))
        self.successResultOf(d)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_cancel_aborts_connection(self) -> None:
        """Cancelling a waiting request aborts the connection, since its answer would go to the next request."""
        protocol, transport, _ = connected()
        first = protocol.request(OFFSETS)
        second = protocol.request(OFFSETS)
        first.cancel()
        self.failureResultOf(first, CancelledError)
        self.failureResultOf(second, ConnectionFailed)
        self.assertTrue(transport.disconnecting)

    def test_connection_lost_fails_waiters(self) -> None:
        """Losing the connection fails every waiting request with ConnectionLost naming the broker."""
        protocol, _, clock = connected()
        waiting = [protocol.request(OFFSETS), protocol.request(FETCH)]
        protocol.connectionLost(Failure(ConnectionDone("bye")))
        for d in waiting:
            failure = self.failureResultOf(d, ConnectionLost)
            self.assertIn("connection to broker h:1 lost", str(failure.value))
        self.failureResultOf(protocol.request(OFFSETS), ConnectionFailed)
        lost = protocol.when_lost()
        clock.advance(0)
        self.successResultOf(lost)

    def test_unexpected_response_drops_connection(self) -> None:
        """A response while nothing waits is a protocol error: the connection is dropped."""
        protocol, transport, _ = connected()
        protocol.dataReceived(framed(offsets_frame(1)))
        self.assertTrue(transport.disconnecting)
        failure = self.failureResultOf(protocol.request(OFFSETS), ProtocolViolation)
        self.assertIn("nobody asked for", str(failure.value))

    def test_response_too_large(self) -> None:
        """A response over max_response_bytes fails the waiters with a message naming the limit and drops."""
        protocol, transport, _ = connected(max_response_bytes=10)
        d = protocol.request(FETCH)
        protocol.dataReceived(framed(b"\x00\x00" + b"x" * 20))
        failure = self.failureResultOf(d, ProtocolViolation)
        self.assertIn("max_response_bytes 10", str(failure.value))
        self.assertTrue(transport.disconnecting)

    def test_back_pressure_holds_sends(self) -> None:
        """While the transport is paused, sends stay unfired and unwritten; on resume they go out in order."""
        protocol, transport, _ = connected()
        protocol.pauseProducing()
        first = protocol.send(PRODUCE)
        answered = protocol.request(OFFSETS)
        second = protocol.send(ProduceRequest("t", 1, b""))
        self.assertNoResult(first)
        self.assertNoResult(second)
        self.assertEqual(transport.value(), b"")
        protocol.resumeProducing()
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual(written_requests(transport), [PRODUCE, OFFSETS, ProduceRequest("t", 1, b"")])
        protocol.dataReceived(framed(offsets_frame(4)))
        self.successResultOf(answered)

    def test_responses_delivered_while_writes_are_paused(self) -> None:
        """A connection whose writes are paused (the transport's buffer is full) still hands out the responses
        that arrive: pausing writes never holds back reading."""
        protocol, transport, _ = connected(transport=PausingTransport())
        answered = protocol.request(OFFSETS)  # its write fills the buffer: writes pause
        self.assertTrue(protocol.writes_paused)
        protocol.dataReceived(framed(offsets_frame(4)))
        self.successResultOf(answered)

    def test_resume_stops_when_paused_again(self) -> None:
        """Resuming writes held frames only until the transport pauses again (each 64 KiB gathered is written at
        once), so memory stays bounded."""
        protocol, transport, clock = connected(transport=PausingTransport())
        self.successResultOf(protocol.send(PRODUCE))
        clock.advance(0)  # the gathered frame is written at the next turn: it fills the buffer
        big = b"m" * GATHER_BYTES
        held = [protocol.send(ProduceRequest("t", i, big)) for i in range(3)]
        self.assertTrue(protocol.writes_paused)
        protocol.resumeProducing()
        self.successResultOf(held[0])
        self.assertNoResult(held[1])
        protocol.resumeProducing()
        protocol.resumeProducing()
        for d in held:
            self.successResultOf(d)
        self.assertEqual(len(written_requests(transport)), 4)

    def test_cancel_held_send(self) -> None:
        """Cancelling a send held by back-pressure forgets its frame."""
        protocol, transport, _ = connected()
        protocol.pauseProducing()
        d = protocol.send(PRODUCE)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        protocol.resumeProducing()
        self.assertEqual(transport.value(), b"")

    def test_lost_while_paused_fails_held_sends(self) -> None:
        """Sends held by back-pressure fail with ConnectionFailed when the connection is lost."""
        protocol, _, _ = connected()
        protocol.pauseProducing()
        d = protocol.send(PRODUCE)
        protocol.stopProducing()
        protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(d, ConnectionFailed)


C = ClientProtocolState


class ClientTransitionTableTests(SynchronousTestCase):
    """Every move of L{CLIENT_MOVES}, made by the transport, the clock, the broker's bytes and the owner."""

    def setUp(self) -> None:
        self.moves: set[tuple[ClientProtocolState, ClientProtocolState]] = set()

    def step(self, protocol: ClientProtocol, action, *args) -> None:
        """Do C{action}, recording the move it made."""
        before = protocol.state
        action(*args)
        if protocol.state is not before:
            self.moves.add((before, protocol.state))

    def lose(self, protocol: ClientProtocol) -> None:
        self.step(protocol, protocol.connectionLost, Failure(ConnectionDone()))
        self.assertIs(protocol.state, C.LOST)
        self.assertFalse(protocol.usable)

    def test_every_transition(self) -> None:
        """Each move of the table happens, and the flags follow the state."""
        clock = Clock()
        # CONNECTING -> CONNECTED -> PAUSED -> CONNECTED -> LOST
        protocol = ClientProtocol(clock, timeout_s=1, peer="h:1")
        self.assertIs(protocol.state, C.CONNECTING)
        self.assertFalse(protocol.usable)
        self.step(protocol, protocol.makeConnection, StringTransport())
        self.assertTrue(protocol.usable)
        self.step(protocol, protocol.pauseProducing)
        self.assertTrue(protocol.writes_paused and protocol.usable)
        self.step(protocol, protocol.resumeProducing)
        self.assertFalse(protocol.writes_paused)
        self.lose(protocol)
        # CONNECTED -> BROKEN (a request timed out) -> LOST
        protocol, transport, clock = connected(timeout_s=1)
        d = protocol.request(OFFSETS)
        self.step(protocol, clock.advance, 1)
        self.failureResultOf(d, BrokerTimeout)
        self.assertIs(protocol.state, C.BROKEN)
        self.assertTrue(transport.disconnecting)
        self.lose(protocol)
        # PAUSED -> BROKEN (closing while the buffer is full) -> LOST
        protocol, transport, _ = connected()
        self.step(protocol, protocol.pauseProducing)
        self.step(protocol, protocol.prepare_close, ClientClosed("closing"))
        self.assertIs(protocol.state, C.BROKEN)
        self.assertIsNone(transport.producer)
        self.lose(protocol)
        # PAUSED -> LOST (the transport stops its producer, then loses the connection)
        protocol, _, _ = connected()
        self.step(protocol, protocol.stopProducing)
        self.assertIs(protocol.state, C.PAUSED)
        self.lose(protocol)
        self.assertEqual(self.moves, set(StateMachine("c", C.CONNECTING, CLIENT_MOVES).transitions()))

    def test_other_ways_to_break(self) -> None:
        """A response nobody asked for, an oversized one, a cancel and abort() each break the connection."""
        for breaking in ("unasked", "oversized", "cancel", "abort"):
            protocol, transport, _ = connected(max_response_bytes=100)
            if breaking == "unasked":
                protocol.dataReceived(framed(offsets_frame(1)))
            elif breaking == "oversized":
                protocol.request(OFFSETS).addErrback(lambda f: None)
                protocol.dataReceived(framed(b"x" * 200))
            elif breaking == "cancel":
                d = protocol.request(OFFSETS)
                d.cancel()
                self.failureResultOf(d, CancelledError)
            else:
                protocol.abort(ClientClosed("closed"))
            self.assertIs(protocol.state, C.BROKEN, breaking)
            self.assertTrue(transport.disconnecting, breaking)

    def test_illegal_moves_raise(self) -> None:
        """Moves outside the table raise IllegalTransition: aborting before connecting, connecting twice,
        anything after LOST; a later reason to break does not replace the first."""
        protocol = ClientProtocol(Clock(), peer="h:1")
        self.assertRaises(IllegalTransition, protocol.abort, ClientClosed("early"))
        self.assertIs(protocol.state, C.CONNECTING)
        protocol, transport, _ = connected()
        self.assertRaises(IllegalTransition, protocol.makeConnection, StringTransport())
        protocol.abort(ConnectionFailed("first"))
        protocol.abort(ClientClosed("second"))  # BROKEN already: no move
        self.failureResultOf(protocol.request(OFFSETS), ConnectionFailed)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.assertRaises(IllegalTransition, protocol.connectionLost, Failure(ConnectionDone()))
        protocol.pauseProducing()
        protocol.resumeProducing()
        self.assertIs(protocol.state, C.LOST)
        with self.assertRaises(AttributeError):
            protocol.state = C.CONNECTED


def broker_connection(disconnect_on_close: bool = True, **kwargs):
    """A BrokerConnection over a FakeEndpoint and a Clock."""
    clock = Clock()
    endpoint = FakeEndpoint(disconnect_on_close, clock)
    connection = BrokerConnection(
        "h", 1, reactor=clock, endpoint=endpoint, retry_policy=lambda attempt: 1.0, **kwargs
    )
    return connection, endpoint, clock


class BrokerConnectionTests(SynchronousTestCase):
    def test_connects_on_first_request(self) -> None:
        """The first request connects, is sent, and fires with the decoded response."""
        connection, endpoint, _ = broker_connection()
        d = connection.request(OFFSETS)
        self.assertEqual(len(endpoint.attempts), 1)
        transport = endpoint.succeed()
        self.assertEqual(written_requests(transport), [OFFSETS])
        connection.current.dataReceived(framed(offsets_frame(9)))
        self.assertEqual(self.successResultOf(d), OffsetsResponse(NO_ERROR, (9,)))

    def test_error_code_becomes_exception(self) -> None:
        """A response with a broker error code fails with that code's exception, naming broker and request."""
        connection, endpoint, _ = broker_connection()
        d = connection.request(FETCH)
        endpoint.succeed()
        connection.current.dataReceived(framed(codec.encode_error_response(OffsetOutOfRange.code)))
        failure = self.failureResultOf(d, OffsetOutOfRange)
        self.assertIn("broker h:1 refused FETCH t-0 at offset 0", str(failure.value))

    def test_garbage_response_drops_connection(self) -> None:
        """A response that does not parse as the request's fails with ProtocolViolation (a ConnectionFailed)
        and drops the connection, since the answers after it cannot be paired any more."""
        connection, endpoint, _ = broker_connection()
        d = connection.request(OFFSETS)
        behind = connection.request(OFFSETS)
        transport = endpoint.succeed()
        connection.current.dataReceived(framed(codec.encode_error_response(NO_ERROR) + b"\x00\x00\x00\x05"))
        failure = self.failureResultOf(d, ProtocolViolation)
        self.assertIsInstance(failure.value, ConnectionFailed)
        self.assertIn("broker h:1 answered OFFSETS t-0", str(failure.value))
        self.assertFalse(transport.connected)
        self.failureResultOf(behind, ProtocolViolation)

    def test_send_fires_when_written(self) -> None:
        """send() fires once the fire-and-forget request is written."""
        connection, endpoint, _ = broker_connection()
        d = connection.send(PRODUCE)
        self.assertNoResult(d)
        transport = endpoint.succeed()
        self.successResultOf(d)
        self.assertEqual(written_requests(transport), [PRODUCE])

    def test_write_order_kept_while_connecting(self) -> None:
        """A send made right after the connection is up still goes after the sends that waited for it."""
        connection, endpoint, clock = broker_connection()
        endpoint._clock = None  # complete the attempt without running the next turn yet
        first = connection.send(ProduceRequest("t", 0, b""))
        transport = endpoint.succeed()
        second = connection.send(ProduceRequest("t", 1, b""))
        clock.advance(0)
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual([r.partition for r in written_requests(transport)], [0, 1])

    def test_unreachable_after_attempts(self) -> None:
        """After connect_attempts refused attempts the request fails with a one-line ConnectionFailed."""
        connection, endpoint, clock = broker_connection(connect_attempts=2)
        d = connection.request(OFFSETS)
        endpoint.fail(ConnectionRefusedError())
        self.assertNoResult(d)
        clock.advance(1.0)  # backoff, then the second attempt
        endpoint.fail(ConnectionRefusedError())
        failure = self.failureResultOf(d, ConnectionFailed)
        message = str(failure.value)
        self.assertIn("cannot connect to broker h:1", message)
        self.assertIn("refused", message)
        self.assertIn("after 2 attempts", message)
        self.assertNotIn("\n", message)

    def test_connect_timeout(self) -> None:
        """An attempt that never completes fails the request after connect_timeout_s."""
        connection, endpoint, clock = broker_connection(connect_timeout_s=3)
        d = connection.request(OFFSETS)
        clock.advance(3)
        failure = self.failureResultOf(d, ConnectionFailed)
        self.assertIn("within 3 s", str(failure.value))

    def test_reconnects_after_loss(self) -> None:
        """A lost connection fails its waiters; the next request reconnects (after backoff) and succeeds."""
        connection, endpoint, clock = broker_connection()
        d = connection.request(OFFSETS)
        endpoint.succeed()
        endpoint.lose()
        self.failureResultOf(d, ConnectionFailed)
        again = connection.request(OFFSETS)
        clock.advance(1.0)
        self.assertEqual(len(endpoint.attempts), 2)
        endpoint.succeed()
        connection.current.dataReceived(framed(offsets_frame(5)))
        self.successResultOf(again)

    def test_aborted_protocol_is_not_reused(self) -> None:
        """After a timeout abort, the next request waits for a fresh connection instead of failing."""
        connection, endpoint, clock = broker_connection(disconnect_on_close=False, timeout_s=2)
        d = connection.request(OFFSETS)
        first = endpoint.succeed()
        clock.advance(2)
        self.failureResultOf(d, BrokerTimeout)
        self.assertTrue(first.disconnecting)
        again = connection.request(OFFSETS)
        self.assertNoResult(again)
        endpoint.lose()  # the abort completes
        clock.advance(1.0)
        endpoint.succeed()
        connection.current.dataReceived(framed(offsets_frame(1)))
        self.successResultOf(again)

    def test_close(self) -> None:
        """close() drops the connection; waiting and later requests fail with ClientClosed."""
        connection, endpoint, _ = broker_connection()
        waiting = connection.request(MetadataRequest())
        transport = endpoint.succeed()
        closing = connection.close()
        self.failureResultOf(waiting, ClientClosed)
        self.assertFalse(transport.connected)
        self.successResultOf(closing)
        self.failureResultOf(connection.request(OFFSETS), ClientClosed)

    def test_close_writes_held_frames_first(self) -> None:
        """close() writes frames held by back-pressure and unregisters the producer, so the close can finish."""
        connection, endpoint, _ = broker_connection(disconnect_on_close=False)
        first = connection.send(PRODUCE)
        transport = endpoint.succeed()
        self.successResultOf(first)
        connection.current.pauseProducing()
        held = connection.send(ProduceRequest("t", 1, b""))
        self.assertNoResult(held)
        connection.close()
        self.successResultOf(held)
        self.assertIsNone(transport.producer)
        self.assertEqual(written_requests(transport), [PRODUCE, ProduceRequest("t", 1, b"")])
        self.assertTrue(transport.disconnecting)

    def test_close_before_connecting(self) -> None:
        """close() on a connection never used fires at once."""
        connection, _, _ = broker_connection()
        self.successResultOf(connection.close())


class HelperTests(SynchronousTestCase):
    def test_client_endpoint(self) -> None:
        """An IP address connects directly; a host name goes through the resolver."""
        reactor = MemoryReactorClock()
        self.assertIsInstance(client_endpoint(reactor, "127.0.0.1", 1, 5), TCP4ClientEndpoint)
        self.assertIsInstance(client_endpoint(reactor, "localhost", 1, 5), HostnameEndpoint)

    def test_default_retry_policy_backs_off(self) -> None:
        """The default reconnect delay grows with the attempts and stays bounded."""
        policy = default_retry_policy()
        self.assertLess(policy(1), policy(4))
        self.assertLessEqual(policy(100), 5.1)


class SocketTransport(StringTransport):
    """A StringTransport with a socket handle whose send(2) takes what it is scripted to (all, by default)."""

    def __init__(self, takes: list[int | OSError] | None = None) -> None:
        super().__init__()
        self.takes = list(takes or [])
        self.direct: list[bytes] = []
        self.dataBuffer = b""

    def getHandle(self):
        return self

    def send(self, data: bytes) -> int:
        take = self.takes.pop(0) if self.takes else len(data)
        if isinstance(take, OSError):
            raise take
        self.direct.append(data[:take])
        return take

    def write(self, data: bytes) -> None:
        super().write(data)
        self.dataBuffer += data


class DirectSendTests(SynchronousTestCase):
    def connect(self, transport: SocketTransport):
        return connected(transport=transport, direct=True)[0]

    def test_request_goes_straight_to_the_socket(self) -> None:
        """On a plain TCP connection with nothing buffered, a request is one send(2) at once, not a
        transport write left for the reactor's next turn."""
        transport = SocketTransport()
        protocol = self.connect(transport)
        protocol.request(OFFSETS)
        self.assertEqual(b"".join(transport.direct), framed(codec.encode_request(OFFSETS)))
        self.assertEqual(transport.value(), b"")

    def test_what_the_socket_does_not_take_is_written_after(self) -> None:
        """A short send or EAGAIN: the rest goes through the transport, and later requests queue behind it."""
        for takes in ([5], [BlockingIOError(11, "again")]):
            transport = SocketTransport(takes)
            protocol = self.connect(transport)
            protocol.request(OFFSETS)
            protocol.request(FETCH)
            sent = b"".join(transport.direct)
            self.assertEqual(sent + transport.value(),
                             framed(codec.encode_request(OFFSETS)) + framed(codec.encode_request(FETCH)))
            self.assertEqual(len(sent), 5 if takes == [5] else 0)

    def test_not_on_other_transports(self) -> None:
        """Elsewhere (TLS, test transports) requests are transport writes."""
        transport = SocketTransport()
        protocol, _, _ = connected(transport=transport)
        protocol.request(OFFSETS)
        self.assertEqual((transport.direct, transport.value()), ([], framed(codec.encode_request(OFFSETS))))


class ReadSizeTests(SynchronousTestCase):
    """A connection reads up to L{READ_BYTES} at a time: a 1 MiB fetch answer in a few reads, not Twisted's 16."""

    def test_a_tcp_transport_reads_a_mebibyte(self) -> None:
        transport = StringTransport()
        transport.bufferSize = 65536  # as twisted.internet.tcp.Connection's
        protocol, _, _ = connected(transport=transport)
        self.assertEqual(transport.bufferSize, READ_BYTES)
        self.assertGreaterEqual(READ_BYTES, 1024 * 1024)
        self.assertTrue(protocol.usable)

    def test_a_transport_without_a_read_size_is_left_alone(self) -> None:
        transport = StringTransport()
        connected(transport=transport)
        self.assertFalse(hasattr(transport, "bufferSize"))
