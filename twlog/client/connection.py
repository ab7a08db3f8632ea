# -*- test-case-name: tests.client.test_protocol -*-
"""The client's side of the wire: L{ClientProtocol} (one connection) and L{BrokerConnection} (one broker).

The 0.7 framing has no correlation id: responses come back in request order, so
L{ClientProtocol} keeps the Deferreds of outstanding requests in a FIFO and
gives each response to the oldest one.  Requests without a response
(fire-and-forget PRODUCE) never enter the FIFO.  Anything that could break the
pairing (a timeout, a response nobody asked for, an oversized frame) aborts the
connection and fails every waiter, because a late answer would otherwise be
given to the wrong request.

L{BrokerConnection} keeps one reconnecting connection to one broker with
Twisted's L{ClientService} and C{backoffPolicy}, decodes each response into
its typed value (L{twlog.protocol.responses}), and turns connection problems
and broker error codes into the typed exceptions of L{twlog.errors}
(L{twlog.errors.check}); a peer that breaks the protocol raises
L{ProtocolViolation}.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.interfaces import IPushProducer, IReactorTime, IStreamClientEndpoint
from twisted.internet.protocol import Factory
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.protocols.basic import Int32StringReceiver
from twisted.python.failure import Failure
from typing_extensions import override
from zope.interface import Attribute, Interface, implementer

from twlog.errors import (
    BrokerTimeout,
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    ProtocolViolation,
    TwlogError,
    check,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    Request,
    Response,
    WaitFetchRequest,
    describe_request,
)

#: The largest response frame a client accepts by default: room for big fetches.
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class IBrokerConnection(Interface):
    """One broker, as the producer and consumers use it: typed requests in, typed responses (or errors) out.

    L{BrokerConnection} is the real one; tests use C{tests.fakes.FakeConnection}.
    """

    host = Attribute("The broker's host name or address.")
    port = Attribute("The broker's port.")
    address = Attribute("C{host:port} (IPv6 hosts in brackets), for messages.")
    closed = Attribute("Whether L{close} was called.")

    def request(request, *, timeout_s=None):
        """Send C{request} (it gets a response); a Deferred firing with the typed response, its error 0.

        Fails with L{BrokerError} (the code's subclass), L{ConnectionFailed}, L{ProtocolViolation},
        L{BrokerTimeout} or L{ClientClosed}.
        """

    def send(request):
        """Send C{request} (it gets no response); a Deferred firing once it is written."""

    def ready():
        """The protocol to write a fire-and-forget request to at once, or None (then use L{send})."""

    def close():
        """Stop reconnecting and close; a Deferred firing once closed."""


class _Waiter:
    """One request waiting for its response."""

    __slots__ = ("deferred", "hold_s", "what")

    def __init__(self, deferred: Deferred[bytes], hold_s: float, what: str) -> None:
        self.deferred = deferred
        self.hold_s = hold_s
        self.what = what


@implementer(IPushProducer)
class ClientProtocol(Int32StringReceiver):
    """One connection to a broker: frames requests and pairs responses with them in FIFO order.

    The protocol registers itself as a streaming producer on its transport, so
    the transport tells it when its write buffer is full (L{pauseProducing})
    and drained (L{resumeProducing}).  While paused, frames are held in order
    and the Deferreds of fire-and-forget L{send}s stay unfired, so a producer
    that waits for them has bounded memory.  (The mixin's read pausing is not
    used: a client always reads its responses.)
    """

    _log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        *,
        timeout_s: float = 30.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        peer: str = "?",
    ) -> None:
        self.MAX_LENGTH = max_response_bytes
        self.timeout_s = timeout_s
        self.peer = peer
        self._clock = clock
        self._waiting: deque[_Waiter] = deque()
        #: Frames held while the transport is paused, with the Deferred of a fire-and-forget send.
        self._held: deque[tuple[bytes, Deferred[None] | None]] = deque()
        self._paused = False
        self._connected = False
        #: Why the connection cannot be used any more, once it cannot.
        self._broken: TwlogError | None = None
        self._lost_waiters: list[Deferred[None]] = []

    # -- state ---------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """Whether requests can be sent: connected, and neither aborted nor lost."""
        return self._connected and self._broken is None

    @property
    def paused(self) -> bool:
        """Whether the transport asked us to stop writing (its buffer is full)."""
        return self._paused

    def pending(self) -> int:
        """How many requests wait for a response."""
        return len(self._waiting)

    def when_lost(self) -> Deferred[None]:
        """A Deferred that fires once the connection is lost (in the next turn if it already is).

        It fires in the reactor turn after C{connectionLost}, so that a
        reconnecting service, told of the loss after this protocol, has
        noticed it by then.
        """
        if not self._connected and self.transport is not None:
            return deferLater(self._clock, 0, lambda: None)
        d: Deferred[None] = Deferred()
        self._lost_waiters.append(d)
        return d

    # -- Twisted callbacks ---------------------------------------------------

    @override
    def connectionMade(self) -> None:
        self._connected = True
        self.transport.registerProducer(self, True)

    @override
    def stringReceived(self, frame: bytes) -> None:
        if self._broken is not None:
            return  # aborted: whatever still arrives belongs to requests already failed
        if not self._waiting:
            self._log.error(
                "broker {peer} sent a {size}-byte response while no request was waiting; dropping the connection",
                peer=self.peer, size=len(frame),
            )
            self._abort(ProtocolViolation(f"broker {self.peer} sent a response nobody asked for; connection dropped"))
            return
        self._waiting.popleft().deferred.callback(frame)

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
        self._connected = False
        if self._broken is None:
            why = reason.getErrorMessage() if reason is not None else "closed"
            self._broken = ConnectionLost(f"connection to broker {self.peer} lost: {why}")
        self._fail_all(self._broken)
        waiters, self._lost_waiters = self._lost_waiters, []
        if waiters:
            # Next turn: ClientService hears of the loss after us, and must have by then.
            self._clock.callLater(0, lambda: [d.callback(None) for d in waiters])

    @override
    def pauseProducing(self) -> None:
        self._paused = True

    @override
    def resumeProducing(self) -> None:
        self._paused = False
        while self._held and not self._paused and self._broken is None:
            frame, d = self._held.popleft()
            self.sendString(frame)
            if d is not None:
                d.callback(None)

    @override
    def stopProducing(self) -> None:
        self._paused = True  # the connection is going away; connectionLost fails what is held

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
        if not self.usable:
            return fail(self._unusable())
        frame = codec.encode_request(request)
        if not self._paused and not self._held:
            self.sendString(frame)
            return succeed(None)
        d: Deferred[None] = Deferred(canceller=self._unhold)
        self._held.append((frame, d))
        return d

    def prepare_close(self, error: TwlogError) -> None:
        """Before a clean close: write every held frame, fail the waiting requests with C{error}, and
        unregister as the transport's producer.

        A transport does not finish C{loseConnection} while a paused producer
        is registered, so closing must come after this.  The waiting requests
        would get no answer: a closing transport stops reading.
        """
        held, self._held = self._held, deque()
        for frame, d in held:
            self.sendString(frame)
            if d is not None:
                d.callback(None)
        if self._broken is None:
            self._broken = error
        self._fail_all(error)
        if self._connected and self.transport is not None and self.transport.producer is self:
            self.transport.unregisterProducer()

    def abort(self, error: TwlogError) -> None:
        """Drop the connection now and fail every waiting request with C{error} (for closing)."""
        self._abort(error)

    # -- internals -----------------------------------------------------------

    def _unusable(self) -> TwlogError:
        if self._broken is not None:
            return type(self._broken)(str(self._broken))
        return ConnectionFailed(f"not connected to broker {self.peer}")

    def _write(self, frame: bytes, d: Deferred[None] | None) -> None:
        if self._paused or self._held:
            self._held.append((frame, d))
        else:
            self.sendString(frame)

    def _unhold(self, d: Deferred[None]) -> None:
        """A held send was cancelled: it was never written, so it can simply be forgotten."""
        self._held = deque(item for item in self._held if item[1] is not d)

    def _cancelled(self, d: Deferred[bytes]) -> None:
        """A waiting request was cancelled (or timed out): its response would go to the next one, so abort."""
        self._waiting = deque(w for w in self._waiting if w.deferred is not d)
        self._abort(
            ConnectionFailed(
                f"connection to broker {self.peer} dropped: an earlier request on it timed out or was cancelled"
            )
        )

    def _abort(self, error: TwlogError) -> None:
        if self._broken is None:
            self._broken = error
        self._fail_all(error)
        if self.transport is not None and self._connected:
            self.transport.abortConnection()

    def _fail_all(self, error: TwlogError) -> None:
        waiting, self._waiting = self._waiting, deque()
        held, self._held = self._held, deque()
        for waiter in waiting:
            waiter.deferred.errback(type(error)(str(error)))
        for _, d in held:
            if d is not None:
                d.errback(type(error)(str(error)))


class _ClientFactory(Factory):
    """Builds a L{ClientProtocol} per connection attempt of a L{BrokerConnection}."""

    noisy = False

    def __init__(self, owner: BrokerConnection) -> None:
        self._owner = owner

    @override
    def buildProtocol(self, addr) -> ClientProtocol:
        owner = self._owner
        protocol = ClientProtocol(
            owner.clock, timeout_s=owner.timeout_s, max_response_bytes=owner.max_response_bytes, peer=owner.address
        )
        protocol.factory = self
        owner.current = protocol
        return protocol


def default_retry_policy() -> Callable[[int], float]:
    """Reconnect backoff: 0.1 s doubling up to 5 s, plus up to 0.1 s of jitter."""
    return backoffPolicy(initialDelay=0.1, maxDelay=5.0, factor=2.0, jitter=lambda: random.random() * 0.1)


def client_endpoint(reactor, host: str, port: int, timeout_s: float) -> IStreamClientEndpoint:
    """A TCP endpoint for C{host}: an IP address directly, a name through the reactor's resolver."""
    if isIPAddress(host):
        return TCP4ClientEndpoint(reactor, host, port, timeout=timeout_s)
    if isIPv6Address(host):
        return TCP6ClientEndpoint(reactor, host, port, timeout=timeout_s)
    return HostnameEndpoint(reactor, host, port, timeout=timeout_s)


def parse_brokers(brokers: str | list[tuple[str, int]] | tuple) -> list[tuple[str, int]]:
    """C{"host:port,host:port"} (or a list of pairs) as a list of C{(host, port)}; IPv6 hosts in brackets."""
    if isinstance(brokers, str):
        pairs = []
        for item in filter(None, (part.strip() for part in brokers.split(","))):
            host, sep, port = item.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"broker address {item!r} is not host:port")
            pairs.append((host.strip("[]") or "127.0.0.1", int(port)))
    else:
        pairs = [(str(host), int(port)) for host, port in brokers]
    if not pairs:
        raise ValueError("no broker address given")
    return pairs


@implementer(IBrokerConnection)
class BrokerConnection:
    """One reconnecting connection to one broker, with typed errors and no hangs.

    The connection is made on the first request, and remade with backoff
    whenever it is lost (Twisted's L{ClientService}).  A request waits at most
    C{connect_timeout_s}, or C{connect_attempts} failed attempts, for a
    connection, then fails with L{ConnectionFailed}; once sent, it waits at
    most C{timeout_s} for its answer, then fails with L{BrokerTimeout}.  A
    response whose error code is not 0 raises the code's exception.
    """

    _log = Logger()

    def __init__(
        self,
        host: str,
        port: int,
        *,
        reactor=None,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        connect_attempts: int = 3,
        retry_policy: Callable[[int], float] | None = None,
        endpoint: IStreamClientEndpoint | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.host = host
        self.port = port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.clock = reactor
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.connect_attempts = connect_attempts
        self.max_response_bytes = max_response_bytes
        #: The protocol of the latest connection (or attempt), if any.
        self.current: ClientProtocol | None = None
        if endpoint is None:
            endpoint = client_endpoint(reactor, host, port, connect_timeout_s)
        self._service = ClientService(
            endpoint, _ClientFactory(self), retryPolicy=retry_policy or default_retry_policy(), clock=reactor
        )
        self._closed = False
        #: Callers waiting for a connection (through ClientService).
        self._connecting = 0

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.address}>"

    @property
    def closed(self) -> bool:
        """Whether L{close} was called."""
        return self._closed

    def request(self, request: Request, *, timeout_s: float | None = None) -> Deferred[Response]:
        """Send C{request} and fire with its decoded response (error 0), or fail with a typed error.

        Per-partition errors stay in the response's parts, for the caller to check.

        @raise ConnectionFailed: the broker cannot be reached, or the connection was lost.
        @raise ProtocolViolation: the response does not parse (the connection is dropped).
        @raise BrokerTimeout: no answer within the timeout.
        @raise BrokerError: the response's error code (a subclass per code).
        """
        return Deferred.fromCoroutine(self._request(request, timeout_s))

    def send(self, request: Request) -> Deferred[None]:
        """Send a request that gets no response; fire once it is written to the transport."""
        return Deferred.fromCoroutine(self._send(request))

    def close(self) -> Deferred[None]:
        """Stop reconnecting and close the connection (buffered writes are sent first, within the timeout)."""
        self._closed = True
        if not self._service.running:
            return succeed(None)
        if self.current is not None and self.current.usable:
            self.current.prepare_close(ClientClosed(f"connection to broker {self.address} was closed"))
        stopped = self._service.stopService()

        def abort(result: object, after: float) -> None:
            current = self.current
            if current is not None and current.transport is not None:
                current.abort(ClientClosed(f"connection to broker {self.address} closed"))
                current.transport.abortConnection()

        stopped.addTimeout(self.timeout_s, self.clock, onTimeoutCancel=abort)
        return stopped

    async def _request(self, request: Request, timeout_s: float | None) -> Response:
        protocol = await self.connected()
        hold_s = request.max_wait_ms / 1000 if isinstance(request, WaitFetchRequest) else 0.0
        frame = await protocol.request(request, timeout_s=timeout_s, hold_s=hold_s)
        try:
            response = codec.decode_response(request, frame)
        except ProtocolViolation as e:
            error = ProtocolViolation(f"broker {self.address} answered {describe_request(request)} with garbage: {e}")
            protocol.abort(error)  # the pairing of later answers cannot be trusted
            raise error from None
        return check(response, f"broker {self.address} refused {describe_request(request)}")

    async def _send(self, request: Request) -> None:
        protocol = await self.connected()
        await protocol.send(request)

    def ready(self) -> ClientProtocol | None:
        """The connected protocol if it can take a write right now (connected, not paused, nobody
        queued ahead), else None: the fast path of fire-and-forget sends."""
        current = self.current
        if self._closed or self._connecting or current is None or not current.usable or current.paused:
            return None
        return current

    async def connected(self) -> ClientProtocol:
        """The connected protocol, connecting (with backoff) first if need be.

        @raise ConnectionFailed: no connection within the connect timeout or attempts.
        @raise ClientClosed: L{close} was called.
        """
        for _ in range(3):
            if self._closed:
                raise ClientClosed(f"connection to broker {self.address} is closed")
            current = self.current
            if current is not None and current.usable and not self._connecting:
                return current  # (when others wait for the connection, queue behind them: keeps write order)
            if not self._service.running:
                self._service.startService()
            waiting = self._service.whenConnected(failAfterFailures=self.connect_attempts)

            def timed_out(result: object, after: float) -> Failure:
                return Failure(ConnectionFailed(f"cannot connect to broker {self.address} within {after:g} s"))

            waiting.addTimeout(self.connect_timeout_s, self.clock, onTimeoutCancel=timed_out)
            # ClientService fires this inside a state transition, where calling it again
            # (another request, close()) is refused: carry on in the next reactor turn.
            waiting.addBoth(self._next_turn)
            self._connecting += 1
            try:
                protocol = await waiting
            except ConnectionFailed:
                raise
            except CancelledError:
                raise ClientClosed(f"connection to broker {self.address} was closed") from None
            except Exception as e:
                raise ConnectionFailed(
                    f"cannot connect to broker {self.address}: {_reason(e)} "
                    f"(after {self.connect_attempts} attempt{'s' if self.connect_attempts != 1 else ''})"
                ) from None
            finally:
                self._connecting -= 1
            if protocol.usable:
                return protocol
            await protocol.when_lost()  # aborted, not yet disconnected: ClientService will make a new one
        raise ConnectionFailed(f"the connection to broker {self.address} keeps breaking")


    def _next_turn(self, result: object) -> Deferred:
        later: Deferred = Deferred()
        self.clock.callLater(0, later.callback, result)
        return later


def _reason(e: BaseException) -> str:
    """A one-line reason for a connection failure."""
    text = str(e).strip().rstrip(".") or type(e).__name__
    return " ".join(text.split())
