# -*- test-case-name: tests.client.test_protocol -*-
"""L{ClientProtocol}: the client's side of one connection to a broker.

The 0.7 framing has no correlation id: responses come back in request order, so
the protocol keeps the Deferreds of outstanding requests in a FIFO and gives
each response to the oldest one.  Requests without a response (fire-and-forget
PRODUCE) never enter the FIFO.  Anything that could break the pairing (a
timeout, a response nobody asked for, an oversized frame) aborts the connection
and fails every waiter, because a late answer would otherwise be given to the
wrong request; a broker's response nobody asked for or an oversized one is a
L{ProtocolViolation}.  A broker that refused the connection at a cap answers
with a bare refusal code (19 or 20): every waiter fails with its typed,
retriable error (L{twlog.errors.TooManyConnections}).  L{twlog.client.connection.BrokerConnection} reconnects it.
"""

from __future__ import annotations

import enum
from collections import deque

from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IPushProducer, IReactorTime, ISSLTransport
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure
from typing_extensions import override
from zope.interface import implementer

from twlog.client.options import DEFAULT_MAX_RESPONSE_BYTES
from twlog.client.tls import describe_tls_failure
from twlog.client.writes import DIRECT_SEND_BYTES, FrameWriter
from twlog.errors import (
    CONNECTION_REFUSALS,
    BrokerTimeout,
    ConnectionFailed,
    ConnectionLost,
    ProtocolViolation,
    TwlogError,
    error_for,
)
from twlog.protocol import codec
from twlog.protocol.codec import Request, describe_request
from twlog.protocol.framing import PREFIX_BYTES, FrameReceiver
from twlog.statemachine import StateMachine

__all__ = ["DIRECT_SEND_BYTES", "ClientProtocol", "ClientProtocolState"]


class ClientProtocolState(enum.Enum):
    """Where a L{ClientProtocol}'s connection is.  Transitions::

        CONNECTING        --connectionMade-------------------------------------> CONNECTED
        CONNECTED         --the transport's buffer is full (pauseProducing)----> PAUSED
        PAUSED            --it drained (resumeProducing)------------------------> CONNECTED
        CONNECTED, PAUSED --a timeout, a cancel, a response nobody asked for,
                            an oversized one, abort(), prepare_close()---------> BROKEN
        CONNECTED, PAUSED, BROKEN --connectionLost------------------------------> LOST

    Requests are taken in CONNECTED and PAUSED (L{ClientProtocol.usable}); the
    table is L{CLIENT_MOVES}.
    """

    CONNECTING = "connecting"
    CONNECTED = "connected"
    PAUSED = "paused"
    BROKEN = "broken"
    LOST = "lost"


_C = ClientProtocolState

#: Where each L{ClientProtocolState} may move; any other move raises L{twlog.statemachine.IllegalTransition}.
CLIENT_MOVES: dict[ClientProtocolState, set[ClientProtocolState]] = {
    _C.CONNECTING: {_C.CONNECTED},
    _C.CONNECTED: {_C.PAUSED, _C.BROKEN, _C.LOST},
    _C.PAUSED: {_C.CONNECTED, _C.BROKEN, _C.LOST},
    _C.BROKEN: {_C.LOST},
}


#: The most one read of a response takes (Twisted's default is 64 KiB): fetch answers are up to a few MiB.
READ_BYTES = 1024 * 1024


def _read_more(transport) -> None:
    """Have a TCP transport read up to L{READ_BYTES} at a time: a 1 MiB fetch answer in a few reads, not 17."""
    if hasattr(transport, "bufferSize"):  # (Twisted's TCP connection's recv size; others have none)
        transport.bufferSize = READ_BYTES


class _Waiter:
    """One request waiting for its response."""

    __slots__ = ("deferred", "hold_s", "what")

    def __init__(self, deferred: Deferred[bytes], hold_s: float, what: str) -> None:
        self.deferred = deferred
        self.hold_s = hold_s
        self.what = what


@implementer(IPushProducer)
def lost_reason(reason: Failure | None) -> str:
    """Why a connection was lost, in words (a TLS failure's: what it most likely means)."""
    if reason is None:
        return "closed"
    why = reason.getErrorMessage().rstrip(".")
    if reason.check(VerificationError):
        return describe_tls_failure(f"VerificationError: {why}")
    return describe_tls_failure(why) if reason.check(SSL.Error) else why


def tls_hint(peer: str, transport, answered: bool) -> str:
    """For a plaintext connection closed before its first answer while a request waited: the port may be a
    broker's TLS port, which closes on bytes that are not TLS without a word."""
    if answered or ISSLTransport.providedBy(transport):
        return ""
    return f" before any answer (if {peer} is a TLS port, this client needs TLS: --tls-ca)"


class ClientProtocol(FrameReceiver):
    """One connection to a broker: frames requests and pairs responses with them in FIFO order.

    The protocol registers itself as a streaming producer on its transport, so
    the transport tells it when its write buffer is full (L{pauseProducing})
    and drained (L{resumeProducing}).  While paused, frames are held in order
    and the Deferreds of fire-and-forget L{send}s stay unfired, so a producer
    that waits for them has bounded memory.  (L{FrameReceiver}'s read pausing
    is not used: a client always reads its responses.)  Responses are framed in
    time linear in their size: a large fetch response is joined once.
    """

    _log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        *,
        timeout_s: float = 30.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        peer: str = "?",
        direct: bool | None = None,
    ) -> None:
        """@param direct: whether requests may go straight to the socket (L{FrameWriter}; None: if plain TCP)."""
        super().__init__()
        self.MAX_LENGTH = max_response_bytes
        self.timeout_s = timeout_s
        self.peer = peer
        self._clock = clock
        self._waiting: deque[_Waiter] = deque()
        #: Frames (size prefix included) held while writes are paused, with a fire-and-forget send's Deferred.
        self._held: deque[tuple[bytes, Deferred[None] | None]] = deque()
        self._machine = StateMachine(f"connection to broker {peer}", _C.CONNECTING, CLIENT_MOVES)
        #: Writes the frames, gathering the fire-and-forget ones (L{FrameWriter}).
        self.writer = FrameWriter(clock, direct)
        #: Whether a write goes out now (CONNECTED, nothing held): the fast path's test (L{send_frame}).
        self.writable = False
        #: Whether any answer came (a plaintext connection closed before one may have met a TLS port), and whether
        #: this protocol is its transport's producer (from connectionMade to prepare_close).
        self._answered = self._registered = False
        #: Why the connection cannot be used any more (BROKEN or LOST).
        self._error: TwlogError | None = None
        self._lost_waiters: list[Deferred[None]] = []

    # -- state ---------------------------------------------------------------

    @property
    def state(self) -> ClientProtocolState:
        """Where the connection is (L{ClientProtocolState})."""
        return self._machine.state

    @property
    def usable(self) -> bool:
        """Whether requests can be sent: connected, and neither aborted nor lost."""
        return self.state in (_C.CONNECTED, _C.PAUSED)

    @property
    def writes_paused(self) -> bool:
        """Whether the transport asked us to stop writing (its buffer is full); responses are still taken
        (unlike L{FrameReceiver.paused}, which holds back their delivery)."""
        return self.state is _C.PAUSED

    def _move(self, target: ClientProtocolState) -> None:
        self._machine.move(target)
        self.writable = target is _C.CONNECTED and not self._held

    def pending(self) -> int:
        """How many requests wait for a response."""
        return len(self._waiting)

    def when_lost(self) -> Deferred[None]:
        """A Deferred that fires once the connection is lost (in the next turn if it already is).

        It fires in the reactor turn after C{connectionLost}, so that a
        reconnecting service, told of the loss after this protocol, has
        noticed it by then.
        """
        if self.state is _C.LOST:
            return deferLater(self._clock, 0, lambda: None)
        d: Deferred[None] = Deferred()
        self._lost_waiters.append(d)
        return d

    # -- Twisted callbacks ---------------------------------------------------

    @override
    def connectionMade(self) -> None:
        self._move(_C.CONNECTED)
        if hasattr(self.transport, "setTcpNoDelay"):  # requests are small and whole: never hold one back
            self.transport.setTcpNoDelay(True)
        _read_more(self.transport)
        self.writer.attach(self.transport)
        self.transport.registerProducer(self, True)
        self._registered = True

    @override
    def stringReceived(self, frame: bytes) -> None:
        self._answered = True
        if not self.usable:
            return  # aborted: whatever still arrives belongs to requests already failed
        if len(frame) == 2 and int.from_bytes(frame, "big", signed=True) in CONNECTION_REFUSALS:
            # The broker refused the connection at a cap (docs/protocol.md, "Connection limits"): it read
            # no request, so every one sent on it fails with the typed, retriable error.
            code = int.from_bytes(frame, "big", signed=True)
            self._abort(error_for(code, f"broker {self.peer} refused the connection"))
            return
        if not self._waiting:
            self._log.error(
                "broker {peer} sent a {size}-byte response while no request was waiting; dropping the connection",
                peer=self.peer, size=len(frame),
            )
            self._abort(ProtocolViolation(f"broker {self.peer} sent a response nobody asked for; connection dropped"))
            return
        self._waiting.popleft().deferred.callback(frame)

    @override
    def sendString(self, frame: bytes) -> None:
        """Write C{frame} with its size prefix now, after the gathered frames (L{FrameWriter.write})."""
        self.writer.write(len(frame).to_bytes(PREFIX_BYTES, "big") + frame)

    @override
    def lengthLimitExceeded(self, length: int) -> None:
        self._log.error(
            "broker {peer} sent a {length}-byte response, over the {limit}-byte limit; dropping the connection",
            peer=self.peer, length=length, limit=self.MAX_LENGTH,
        )
        self._abort(
            ProtocolViolation(
                f"broker {self.peer} sent a {length}-byte response, larger than max_response_bytes "
                f"{self.MAX_LENGTH}; connection dropped"
            )
        )

    @override
    def connectionLost(self, reason: Failure = None) -> None:
        self._move(_C.LOST)
        self.writer.drop()
        if self._error is None:
            why = lost_reason(reason) + tls_hint(self.peer, self.transport, self._answered or not self._waiting)
            self._error = ConnectionLost(f"connection to broker {self.peer} lost: {why}")
        self._fail_all(self._error)
        waiters, self._lost_waiters = self._lost_waiters, []
        if waiters:
            # Next turn: ClientService hears of the loss after us, and must have by then.
            self._clock.callLater(0, lambda: [d.callback(None) for d in waiters])

    @override
    def pauseProducing(self) -> None:
        if self.state is _C.CONNECTED:
            self._move(_C.PAUSED)

    @override
    def resumeProducing(self) -> None:
        if self.state is _C.PAUSED:
            self._move(_C.CONNECTED)
        writer = self.writer
        while self._held and self.state is _C.CONNECTED:
            data, d = self._held.popleft()
            writer.gather(data)  # (a full gather is written at once, and may pause us again)
            if d is not None:
                self.writable = self.state is _C.CONNECTED and not self._held  # (before d's callbacks send)
                d.callback(None)
        self.writable = self.state is _C.CONNECTED and not self._held
        writer.flush()

    @override
    def stopProducing(self) -> None:
        self.pauseProducing()  # the connection is going away; connectionLost fails what is held

    # -- requests ------------------------------------------------------------

    def request(self, request: Request, *, timeout_s: float | None = None, hold_s: float = 0.0) -> Deferred[bytes]:
        """Send C{request} and fire with its response frame (error code first, no size prefix).

        The response must come within C{timeout_s} (default: the protocol's),
        plus C{hold_s} (how long the broker may hold this request, as a waiting
        fetch) plus the hold times of the requests ahead of it.  Otherwise the
        Deferred fails with L{BrokerTimeout}, the connection is aborted, and
        every other waiter fails with L{ConnectionFailed}.  Cancelling the
        Deferred also aborts the connection, for the same reason.
        """
        if not codec.expects_response(request):
            raise ValueError(f"{describe_request(request)} gets no response: use send()")
        if not self.usable:
            return fail(self._unusable())
        frame = codec.encode_request(request)
        what = describe_request(request)
        ahead_s = sum(w.hold_s for w in self._waiting)
        waiter = _Waiter(Deferred(canceller=self._cancelled), hold_s, what)
        self._waiting.append(waiter)
        self._write(frame, None)
        timeout = (self.timeout_s if timeout_s is None else timeout_s) + hold_s + ahead_s

        def timed_out(result: object, after: float) -> Failure:
            return Failure(
                BrokerTimeout(f"no answer from broker {self.peer} within {after:g} s to {what}; connection dropped")
            )

        waiter.deferred.addTimeout(timeout, self._clock, onTimeoutCancel=timed_out)
        return waiter.deferred

    def send(self, request: Request) -> Deferred[None]:
        """Send a request that gets no response; fire once it is written to the transport.

        While the transport is paused the Deferred stays unfired: callers that
        wait for it before sending more are held back by TCP's flow control.
        """
        if codec.expects_response(request):
            raise ValueError(f"{describe_request(request)} gets a response: use request()")
        frame = codec.encode_request(request)
        return self.send_frame(len(frame).to_bytes(PREFIX_BYTES, "big") + frame)

    def send_frame(self, data: bytes) -> Deferred[None]:
        """L{send} of a frame with its size prefix (L{twlog.storage.kernel.produce_frame}), gathered with the
        other fire-and-forget frames (L{FrameWriter}); held, its Deferred unfired, while writes are paused."""
        if self.writable:
            self.writer.gather(data)
            return succeed(None)
        if not self.usable:
            return fail(self._unusable())
        d: Deferred[None] = Deferred(canceller=self._unhold)
        self._held.append((data, d))
        return d

    def prepare_close(self, error: TwlogError) -> None:
        """Before a clean close: write every held frame, fail the waiting requests with C{error}, and
        unregister as the transport's producer.

        A transport does not finish C{loseConnection} while a paused producer
        is registered, so closing must come after this.  The waiting requests
        would get no answer: a closing transport stops reading.
        """
        held, self._held = self._held, deque()
        for data, d in held:
            self.writer.gather(data)
            if d is not None:
                d.callback(None)
        if self.state is not _C.LOST:
            self.writer.flush()
        self._break(error)
        self._fail_all(error)
        if self.state is _C.BROKEN and self._registered:
            self._registered = False
            self.transport.unregisterProducer()

    def abort(self, error: TwlogError) -> None:
        """Drop the connection now and fail every waiting request with C{error} (for closing)."""
        self._abort(error)

    # -- internals -----------------------------------------------------------

    def _unusable(self) -> TwlogError:
        if self._error is not None:
            return type(self._error)(str(self._error))
        return ConnectionFailed(f"not connected to broker {self.peer}")

    def _write(self, frame: bytes, d: Deferred[None] | None) -> None:
        if self.state is _C.PAUSED or self._held:
            self._held.append((len(frame).to_bytes(PREFIX_BYTES, "big") + frame, d))
        else:
            self.sendString(frame)

    def _unhold(self, d: Deferred[None]) -> None:
        """A held send was cancelled: it was never written, so it can simply be forgotten."""
        self._held = deque(item for item in self._held if item[1] is not d)
        self.writable = self.state is _C.CONNECTED and not self._held

    def _cancelled(self, d: Deferred[bytes]) -> None:
        """A waiting request was cancelled (or timed out): its response would go to the next one, so abort."""
        self._waiting = deque(w for w in self._waiting if w.deferred is not d)
        self._abort(
            ConnectionFailed(
                f"connection to broker {self.peer} dropped: an earlier request on it timed out or was cancelled"
            )
        )

    def _break(self, error: TwlogError) -> None:
        """-> BROKEN because of C{error}, unless it is BROKEN or LOST already (for an earlier reason).

        @raise IllegalTransition: not connected yet.
        """
        if self.state not in (_C.BROKEN, _C.LOST):
            self._move(_C.BROKEN)
            self._error = error

    def _abort(self, error: TwlogError) -> None:
        self._break(error)
        self._fail_all(error)
        if self.state is _C.BROKEN:
            self.writer.drop()
            self.transport.abortConnection()

    def _fail_all(self, error: TwlogError) -> None:
        waiting, self._waiting = self._waiting, deque()
        held, self._held = self._held, deque()
        for waiter in waiting:
            waiter.deferred.errback(type(error)(str(error)))
        for _, d in held:
            if d is not None:
                d.errback(type(error)(str(error)))
