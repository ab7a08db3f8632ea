# -*- test-case-name: tests.client.test_protocol,tests.client.test_options -*-
"""The client's side of the wire for one broker: L{BrokerConnection} and its interface L{IBrokerConnection}.

Each connection is a L{ClientProtocol} (L{twlog.client.protocol}: framing and
the FIFO of waiting requests).  L{BrokerConnection} keeps one reconnecting connection to one broker with
Twisted's L{ClientService} and C{backoffPolicy}, decodes each response into
its typed value (L{twlog.protocol.responses}), and turns connection problems
and broker error codes into the typed exceptions of L{twlog.errors}
(L{twlog.errors.check}); a peer that breaks the protocol raises
L{ProtocolViolation}.
"""

from __future__ import annotations

from typing import Any

from twisted.application.internet import ClientService
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure
from typing_extensions import override
from zope.interface import Attribute, Interface, implementer

from twlog.client.options import ClientOptions
from twlog.client.protocol import ClientProtocol
from twlog.client.sasl_twisted import Authenticator
from twlog.client.tls import TLSSettings
from twlog.errors import (
    ClientClosed,
    ConnectionFailed,
    ProtocolViolation,
    check,
)
from twlog.partition import address_text
from twlog.protocol import codec
from twlog.protocol.codec import (
    Request,
    Response,
    WaitFetchRequest,
    describe_request,
)


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


class _ClientFactory(Factory):
    """Builds a L{ClientProtocol} per connection attempt of a L{BrokerConnection}."""

    noisy = False

    def __init__(self, owner: BrokerConnection) -> None:
        self._owner = owner

    @override
    def buildProtocol(self, addr) -> ClientProtocol:
        owner = self._owner
        protocol = ClientProtocol(
            owner._reactor, timeout_s=owner.options.timeout_s, max_response_bytes=owner.options.max_response_bytes,
            peer=owner.address,
        )
        protocol.factory = self
        owner.current = protocol
        return protocol


def client_endpoint(reactor, host: str, port: int, timeout_s: float,
                    tls: TLSSettings | None = None) -> IStreamClientEndpoint:
    """A TCP endpoint for C{host}: an IP address directly, a name through the reactor's resolver; with C{tls},
    wrapped in TLS (the broker's certificate checked against C{host} unless C{tls} says not to).

    @raise twlog.client.tls.TLSSetupError: a file of C{tls} cannot be used.
    """
    if isIPAddress(host):
        endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=timeout_s)
    elif isIPv6Address(host):
        endpoint = TCP6ClientEndpoint(reactor, host, port, timeout=timeout_s)
    else:
        endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout_s)
    if tls is None:
        return endpoint
    return wrapClientTLS(tls.twisted_options(host), endpoint)


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
        options: ClientOptions | None = None,
        endpoint: IStreamClientEndpoint | None = None,
        **overrides: Any,
    ) -> None:
        """@param overrides: fields of L{ClientOptions} replacing those of C{options} (C{timeout_s=5}...)."""
        if reactor is None:
            from twisted.internet import reactor
        self.options = options = ClientOptions.build(options, **overrides)
        self.host = host
        self.port = port
        self.address = address_text(host, port)
        self._reactor = reactor
        #: The protocol of the latest connection (or attempt), if any.
        self.current: ClientProtocol | None = None
        if endpoint is None:
            endpoint = client_endpoint(reactor, host, port, options.connect_timeout_s, options.tls)
        self._service = ClientService(endpoint, _ClientFactory(self), retryPolicy=options.backoff(), clock=reactor)
        self._closed = False
        #: Callers waiting for a connection (through ClientService).
        self._connecting = 0
        #: Each connection's SASL exchange (with C{options.sasl}).
        self._authentication = Authenticator(self.options, self.address)

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
            self.current.prepare_close(ClientClosed(f"connection to broker {self.address} was closed", written=True))
        stopped = self._service.stopService()

        def abort(result: object, after: float) -> None:
            current = self.current
            if current is not None and current.transport is not None:
                current.abort(ClientClosed(f"connection to broker {self.address} closed", written=True))
                current.transport.abortConnection()

        stopped.addTimeout(self.options.timeout_s, self._reactor, onTimeoutCancel=abort)
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
        if current is None or not current.writable or self._closed or self._connecting:
            return None
        if self.options.sasl is not None and not self._authentication.done(current):
            return None
        return current

    async def connected(self) -> ClientProtocol:
        """The connected protocol, connecting (with backoff) and authenticating (C{options.sasl}) first if need be.

        @raise ConnectionFailed: no connection within the connect timeout or attempts.
        @raise SaslAuthenticationFailed: the broker refused the client's credentials (the connection is dropped).
        @raise ClientClosed: L{close} was called.
        """
        for _ in range(3):
            if self._closed:
                raise ClientClosed(f"connection to broker {self.address} is closed")
            current = self.current
            if current is not None and current.usable and not self._connecting:
                if self.options.sasl is not None:
                    await self._authentication.of(current)
                return current  # (when others wait for the connection, queue behind them: keeps write order)
            if not self._service.running:
                self._service.startService()
            attempts = self.options.connect_attempts
            waiting = self._service.whenConnected(failAfterFailures=attempts)

            def timed_out(result: object, after: float) -> Failure:
                return Failure(ConnectionFailed(f"cannot connect to broker {self.address} within {after:g} s"))

            waiting.addTimeout(self.options.connect_timeout_s, self._reactor, onTimeoutCancel=timed_out)
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
                    f"(after {attempts} attempt{'s' if attempts != 1 else ''})"
                ) from None
            finally:
                self._connecting -= 1
            if protocol.usable:
                if self.options.sasl is not None:  # (docs/security.md, "Authentication")
                    await self._authentication.of(protocol)
                return protocol
            await protocol.when_lost()  # aborted, not yet disconnected: ClientService will make a new one
        raise ConnectionFailed(f"the connection to broker {self.address} keeps breaking")


    def _next_turn(self, result: object) -> Deferred:
        later: Deferred = Deferred()
        self._reactor.callLater(0, later.callback, result)
        return later


def _reason(e: BaseException) -> str:
    """A one-line reason for a connection failure."""
    text = str(e).strip().rstrip(".") or type(e).__name__
    return " ".join(text.split())
