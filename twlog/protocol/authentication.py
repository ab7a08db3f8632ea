# -*- test-case-name: tests.protocol.test_authentication -*-
"""Who a connection is: the broker's authentication gate (issue 23; docs/security.md, "Authentication").

L{Authentication} is what the broker's connections share (the mechanisms it serves, whether a connection
must authenticate, the users' credentials, the counts); when a broker has one, its factory builds an
L{AuthenticatingProtocol} per connection instead of a plain L{BrokerProtocol}.  That connection:

  - answers SASL_HANDSHAKE and SASL_AUTHENTICATE itself (L{twlog.security.sasl.SaslServerSession}), and sets
    its C{principal} to C{User:<name>} once the exchange succeeds; a failed one is answered and closed;
  - over mutual TLS, is C{User:<the client certificate's subject DN>} as soon as the TLS handshake completes
    (Twisted's C{IHandshakeListener}), which counts as authenticated;
  - with C{--require-auth}, closes the connection at any other request before it is authenticated (one log line,
    at most once a minute with the count), and closes a connection not authenticated within
    C{request_timeout_s} of its start (a stalled or dawdling handshake).

Its frames are bounded as every frame is (C{request_timeout_s}), and more tightly until it has authenticated
with C{--require-auth}: L{PRE_AUTH_MAX_BYTES} a frame (Kafka's C{sasl.server.max.receive.size}); a SASL token
is at most L{twlog.protocol.sasl_codec.MAX_TOKEN_BYTES}.
"""

from __future__ import annotations

import secrets

from twisted.internet.interfaces import IDelayedCall, IHandshakeListener
from twisted.logger import Logger
from typing_extensions import override
from zope.interface import implementer

from twlog.errors import InvalidRequest, MalformedRequest, SaslAuthenticationFailed
from twlog.protocol import codec
from twlog.protocol import sasl_codec as sasl
from twlog.protocol.admission import EventLog
from twlog.protocol.connection import BrokerProtocol, BrokerProtocolState, _request_type, _Slot, frame_code
from twlog.security import user_principal
from twlog.security.principals import certificate_principal
from twlog.security.sasl import SaslServerSession, UserLookup

__all__ = ["PRE_AUTH_MAX_BYTES", "Authentication", "AuthenticatingProtocol"]

#: The largest frame a connection that must authenticate may send before it has (Kafka's 512 KiB).
PRE_AUTH_MAX_BYTES = 512 * 1024

_B = BrokerProtocolState


class Authentication:
    """What a broker's connections share about authentication: its settings, the users, and the counts.

    @param mechanisms: the SASL mechanisms served (empty: none; a handshake is then answered
        UnsupportedSaslMechanism).
    @param require: every connection must authenticate before anything but SASL is answered.
    @param lookup: a user's stored credentials (L{UserLookup}; the broker's is a ZooKeeper-watched cache).
    @param timeout_s: how long a connection that must authenticate may take to.
    """

    _log = Logger()

    def __init__(self, clock, mechanisms: tuple[str, ...], require: bool, lookup: UserLookup,
                 timeout_s: float, log_interval_s: float = 60.0) -> None:
        self.clock = clock
        self.mechanisms = tuple(mechanisms)
        self.require = require
        self.lookup = lookup
        self.timeout_s = timeout_s
        #: Made-up salts of unknown users derive from it (the same each time, unguessable).
        self.secret = secrets.token_bytes(32)
        #: Authentications that succeeded and failed, by mechanism (C{TLS} for a client certificate): for metrics.
        self.successes: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.failed = EventLog(clock, self._log, "{count} authentication(s) failed, the last from {peer}: {reason}",
                               log_interval_s)
        self.refused = EventLog(
            clock, self._log, "closed {count} connection(s) that sent a request before authenticating "
            "(--require-auth), the last from {peer}: {request}", log_interval_s)
        self.late = EventLog(
            clock, self._log, "closed {count} connection(s) not authenticated within {timeout_s:g} s of connecting "
            "(--require-auth; --request-timeout-s), the last from {peer}", log_interval_s)

    def succeeded(self, mechanism: str) -> None:
        self.successes[mechanism] = self.successes.get(mechanism, 0) + 1

    def count_failure(self, mechanism: str, peer: str, reason: str) -> None:
        self.failures[mechanism] = self.failures.get(mechanism, 0) + 1
        self.failed.record(peer=peer, reason=reason)

    def stop(self) -> None:
        """Log what is not logged yet, and schedule nothing more."""
        for events in (self.failed, self.refused, self.late):
            events.stop()


@implementer(IHandshakeListener)
class AuthenticatingProtocol(BrokerProtocol):
    """A L{BrokerProtocol} that answers SASL and, with C{require}, nothing else until the client is authenticated."""

    def __init__(self, broker, authentication: Authentication) -> None:
        super().__init__(broker)
        self.authentication = authentication
        #: Whether the client has authenticated (SASL, or a verified client certificate).
        self.authenticated = False
        self._session: SaslServerSession | None = None
        self._auth_deadline: IDelayedCall | None = None
        self._take_run = self.take_run
        if authentication.require:
            self.MAX_LENGTH = min(self.MAX_LENGTH, PRE_AUTH_MAX_BYTES)
            self.take_run = None  # every frame is one by one (stringReceived) until the client authenticates

    @override
    def connectionMade(self) -> None:
        super().connectionMade()
        auth = self.authentication
        if auth.require and not self.authenticated:
            self._auth_deadline = auth.clock.callLater(auth.timeout_s, self._auth_late)

    def handshakeCompleted(self) -> None:
        """The TLS handshake is done: a client certificate (verified against C{--tls-client-ca}, or the handshake
        would have failed) makes the client C{User:<its subject DN>}, authenticated."""
        certificate = self.transport.getPeerCertificate() if hasattr(self.transport, "getPeerCertificate") else None
        if certificate is not None and self.authentication_pending:
            self.principal = certificate_principal(certificate)
            self._authenticated("TLS")

    @property
    def authentication_pending(self) -> bool:
        """Whether the client has neither authenticated nor failed to."""
        return not self.authenticated and self.state in (_B.READING, _B.PAUSED)

    @override
    def stringReceived(self, frame: bytes) -> None:
        kind = _request_type(frame)
        if kind not in sasl.TYPES and (self.authenticated or not self.authentication.require):
            super().stringReceived(frame)
            return
        self._turn_frames -= 1  # (the turn's accounting, as BrokerProtocol's)
        self._turn_bytes -= len(frame)
        if self.state in (_B.CLOSING, _B.CLOSED):
            return
        self.factory.active(self)
        requests = self.factory.requests
        if kind is not None:  # (a frame too short for a type is counted as an error only, as BrokerProtocol does)
            requests[kind] = requests.get(kind, 0) + 1
        if kind not in sasl.TYPES:
            try:
                what = codec.describe_request(codec.decode_request(frame))
            except MalformedRequest:
                what = f"a malformed request of type {kind}"
            self.authentication.refused.record(peer=self.peer, request=what)
            self._close_with(frame_code(SaslAuthenticationFailed.code, kind), kind)
            return
        try:
            request = codec.decode_request(frame)
        except MalformedRequest as e:
            self._log.warn("closing the connection from {peer}: malformed request: {error}", peer=self.peer, error=e)
            self._close_with(InvalidRequest.code, kind)
            return
        self._sasl(request, kind)

    def _sasl(self, request, kind: int) -> None:
        auth = self.authentication
        if self._session is None:
            self._session = SaslServerSession(auth.mechanisms, auth.lookup, self.peer.tls, auth.secret)
        session = self._session
        if isinstance(request, sasl.SaslHandshakeRequest):
            outcome = session.handshake(request.mechanism)
            response = sasl.encode_handshake_response(outcome.error, session.offered)
        else:
            outcome = session.authenticate(request.auth_bytes)
            response = sasl.encode_authenticate_response(outcome.error, outcome.message, outcome.token)
        if outcome.failed:
            auth.count_failure(session.mechanism or "-", self.peer, session.reason)
            self._broker.count_error(kind, outcome.error)
        elif outcome.user is not None:
            self.principal = user_principal(outcome.user)
            self._authenticated(session.mechanism or "-")
        self._answer(kind, response, close=outcome.failed)

    def _answer(self, kind: int, response: bytes, close: bool) -> None:
        """Queue C{response} after the answers before it; with C{close}, read nothing more and close once sent."""
        if close:
            self._machine.move(_B.CLOSING)
            self.discard_buffer()
            self.pauseProducing()
        slot = _Slot(kind)
        slot.fill(response)
        self._slots.append(slot)
        self._pump()

    def _authenticated(self, mechanism: str) -> None:
        self.authenticated = True
        self.MAX_LENGTH = self._buffer.max_length = self._broker.config.max_request_bytes
        self.take_run = self._take_run
        self.authentication.succeeded(mechanism)
        self._cancel_deadline()

    def _auth_late(self) -> None:
        self._auth_deadline = None
        if self.authentication_pending:
            self.authentication.late.record(peer=self.peer, timeout_s=self.authentication.timeout_s)
            self.discard_buffer()
            self.transport.abortConnection()

    def _cancel_deadline(self) -> None:
        if self._auth_deadline is not None:
            if self._auth_deadline.active():
                self._auth_deadline.cancel()
            self._auth_deadline = None

    @override
    def connectionLost(self, reason=None) -> None:
        self._cancel_deadline()
        super().connectionLost(reason)
