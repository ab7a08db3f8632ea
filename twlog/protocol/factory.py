# -*- test-case-name: tests.protocol.test_admission,tests.protocol.test_server,tests.protocol.test_budget -*-
"""L{BrokerFactory}: what the broker's connections (L{BrokerProtocol}) share.

The budget of buffered request bytes (L{RequestBudget}), the turns connections take at having their
frames handled (L{Turns}), the connection limits (L{twlog.protocol.admission}), the counts the metrics
read, and the events logged at most once a minute.
"""

from __future__ import annotations

from OpenSSL import SSL
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import ServerFactory
from twisted.logger import Logger
from twisted.python.failure import Failure
from typing_extensions import override

from twlog.errors import (
    TooManyConnections,
    TooManyConnectionsFromAddress,
)
from twlog.protocol.admission import ConnectionTable, EventLog, Refusal
from twlog.protocol.authentication import AuthenticatingProtocol, Authentication
from twlog.protocol.budget import RequestBudget
from twlog.protocol.connection import BrokerProtocol, RequestObserver
from twlog.protocol.server import Broker
from twlog.protocol.turns import Turns

__all__ = ["BrokerFactory"]


def tls_reason(reason: Failure) -> str:
    """An OpenSSL failure's reasons, in one line (C{[('SSL routines', '', 'wrong version number')]} as
    C{wrong version number})."""
    args = reason.value.args
    if args and isinstance(args[0], list) and all(isinstance(part, tuple) and part for part in args[0]):
        return "; ".join(str(part[-1]) for part in args[0]) or "no reason given"
    return reason.getErrorMessage() or reason.type.__name__


class BrokerFactory(ServerFactory):
    """Builds a L{BrokerProtocol} per connection, all sharing one L{Broker}, one L{RequestBudget}
    (C{max_buffered_request_bytes}) and the connection limits.

    The limits (Kafka's C{max.connections}, C{max.connections.per.ip} and
    C{connections.max.idle.ms}):

      - A connection that has received no whole request frame and written no
        response for L{idle_timeout_s} is closed.
      - A new connection from an address holding L{max_connections_per_ip}
        replaces that address's longest-idle connection, one with nothing in
        progress and idle for at least L{reap_idle_s}; without one it is refused
        with L{TooManyConnectionsFromAddress}.
      - Likewise at L{max_connections}, over all addresses, with
        L{TooManyConnections}.

    A refused connection is answered by a L{Refusal} (at most L{MAX_REFUSALS}
    at once; past that it is closed at once).  Each kind of event is counted
    and logged at most once per L{EVENT_LOG_INTERVAL_S}, with its count.
    """

    noisy = False
    _log = Logger()
    #: The least time between two log lines about one kind of connection event (each says how many).
    EVENT_LOG_INTERVAL_S = 60.0
    #: Refused connections answered at once (L{Refusal}); past this many, one is closed without an answer.
    MAX_REFUSALS = 64

    def __init__(self, broker: Broker, max_connections: int | None = None) -> None:
        config = broker.config
        self.broker = broker
        #: The open client connections, longest-idle first (closing ones leave it at once).
        self.connections = ConnectionTable()
        #: The bytes of requests all connections buffer, against C{max_buffered_request_bytes}.
        self.budget = RequestBudget(config.max_buffered_request_bytes)
        #: The most connections held (None: no cap; the service sets the default).
        self.max_connections = max_connections if max_connections is not None else config.max_connections
        #: The most connections one address may hold (None: no cap but L{max_connections}).
        self.max_connections_per_ip = config.max_connections_per_ip
        #: Seconds without a whole request or a response written after which a connection is closed (0: never).
        self.idle_timeout_s = config.idle_timeout_s
        #: The least idle time of a connection replaced by a new one at a cap.
        self.reap_idle_s = config.reap_idle_s
        #: Connections accepted over the factory's life.
        self.accepted = 0
        #: Requests decoded, by request type; bytes received, bytes of responses written (and of
        #: those, log bytes sent with sendfile), over the factory's life: for metrics.
        self.requests: dict[int, int] = {}
        self.received_bytes = 0
        self.sent_bytes = 0
        self.sendfile_bytes = 0
        #: Told of each request answered (L{RequestObserver}), if set: the broker's metrics.
        self.request_observer: RequestObserver | None = None
        #: Who the connections are (SASL, mutual TLS, --require-auth), if the broker checks: set by the service.
        self.authentication: Authentication | None = None
        clock = broker.clock
        interval = self.EVENT_LOG_INTERVAL_S
        self._refused = EventLog(
            clock, self._log, "refused {count} connection(s), the last from {peer}: {open} are open, the cap "
            "(--max-connections) is {cap}, and none has been idle for {reap_s:g} s (--reap-idle-s)", interval)
        self._refused_per_ip = EventLog(
            clock, self._log, "refused {count} connection(s) from an address at its cap, the last from {peer}: "
            "it holds {open}, the cap per address (--max-connections-per-ip) is {cap}, and none has been idle "
            "for {reap_s:g} s (--reap-idle-s)", interval)
        self._reaped = EventLog(
            clock, self._log, "closed {count} idle connection(s) to make room at the cap (--max-connections) of "
            "{cap}, the last from {peer}, idle for {idle_s:.0f} s", interval)
        self._reaped_per_ip = EventLog(
            clock, self._log, "closed {count} idle connection(s) to make room for a new one from the same address "
            "(--max-connections-per-ip {cap}), the last from {peer}, idle for {idle_s:.0f} s", interval)
        self._idle_closed = EventLog(
            clock, self._log, "closed {count} connection(s) that sent no whole request for {timeout_s:g} s "
            "(--idle-timeout-s), the last from {peer}", interval)
        #: TLS connections that failed (a handshake refused, a plaintext client on the TLS port): counted, logged
        #: at most once a minute.
        self.tls_failures = EventLog(
            clock, self._log, "{count} TLS connection(s) failed, the last from {peer}: {error}", interval)
        self._refusals: set[Refusal] = set()
        self._sweep: IDelayedCall | None = None
        #: The turns connections take at having their frames handled.
        self.turns = Turns(broker.clock)
        #: Connections closed because a frame did not arrive whole within request_timeout_s (counted, logged
        #: at most once a minute).
        self.late_frames = EventLog(
            broker.clock, self._log, "closed {count} connection(s) whose request frame did not arrive whole within "
            "--request-timeout-s ({timeout} s) of its first byte; the last from {peer}, {got} bytes in and "
            "{needed} still to come", interval)

    # -- the counts, for metrics ------------------------------------------------------------

    @property
    def refused(self) -> int:
        """Connections refused at L{max_connections}."""
        return self._refused.total

    @property
    def refused_per_ip(self) -> int:
        """Connections refused at L{max_connections_per_ip}."""
        return self._refused_per_ip.total

    @property
    def reaped(self) -> int:
        """Idle connections closed to make room at L{max_connections}."""
        return self._reaped.total

    @property
    def reaped_per_ip(self) -> int:
        """Idle connections closed to make room at L{max_connections_per_ip}."""
        return self._reaped_per_ip.total

    @property
    def idle_closed(self) -> int:
        """Connections closed after L{idle_timeout_s} without a whole request."""
        return self._idle_closed.total

    # -- accepting ----------------------------------------------------------------------------

    @override
    def buildProtocol(self, addr) -> BrokerProtocol | Refusal | None:
        host = str(getattr(addr, "host", None) or "?")
        now = self.broker.clock.seconds()
        per_ip = self.max_connections_per_ip
        if per_ip is not None and self.connections.count(host) >= per_ip:
            victim = self.connections.idle_since(now - self.reap_idle_s, host)
            if victim is None:
                self._refused_per_ip.record(peer=_peer(addr), open=self.connections.count(host), cap=per_ip,
                                            reap_s=self.reap_idle_s)
                return self._refusal(TooManyConnectionsFromAddress.code)
            self._reap(victim, now, self._reaped_per_ip, per_ip)
        cap = self.max_connections
        if cap is not None and len(self.connections) >= cap:
            victim = self.connections.idle_since(now - self.reap_idle_s)
            if victim is None:
                self._refused.record(peer=_peer(addr), open=len(self.connections), cap=cap, reap_s=self.reap_idle_s)
                return self._refusal(TooManyConnections.code)
            self._reap(victim, now, self._reaped, cap)
        auth = self.authentication  # (docs/security.md, "Authentication")
        protocol = BrokerProtocol(self.broker) if auth is None else AuthenticatingProtocol(self.broker, auth)
        protocol.factory = self
        protocol.host = host
        self.accepted += 1
        return protocol

    def _refusal(self, code: int) -> Refusal | None:
        if len(self._refusals) >= self.MAX_REFUSALS:
            return None  # the listening port closes the accepted socket at once
        refusal = Refusal(code, self.broker.clock, self._refusals.discard)
        refusal.factory = self
        self._refusals.add(refusal)
        return refusal

    def _reap(self, victim: BrokerProtocol, now: float, events: EventLog, cap: int) -> None:
        self.connections.remove(victim)
        events.record(peer=victim.peer, idle_s=now - victim.last_active, cap=cap)
        victim.transport.loseConnection()

    # -- the connections' bookkeeping ---------------------------------------------------------

    def connection_made(self, protocol: BrokerProtocol) -> None:
        """C{protocol}'s connection is open: count it, and watch its idle time."""
        self.connections.add(protocol, self.broker.clock.seconds())
        self._schedule_sweep()

    def active(self, protocol: BrokerProtocol) -> None:
        """C{protocol} received a whole request frame or finished writing a response: it is not idle."""
        self.connections.touch(protocol, self.broker.clock.seconds())

    def connection_lost(self, protocol: BrokerProtocol, reason: Failure | None = None) -> None:
        """C{protocol}'s connection is gone (a TLS failure, a client that did not speak TLS to the TLS port among
        them, is logged in one line)."""
        if reason is not None and reason.check(SSL.Error):
            self.tls_failures.record(peer=protocol.peer, error=tls_reason(reason))
        self.connections.remove(protocol)
        if not self.connections and self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def _schedule_sweep(self) -> None:
        """Wake up when the longest-idle connection reaches the idle timeout (once a sweep is due)."""
        if self.idle_timeout_s <= 0 or self._sweep is not None or not self.connections:
            return
        clock = self.broker.clock
        oldest = self.connections.oldest()
        delay = max(0.0, oldest.last_active + self.idle_timeout_s - clock.seconds())
        self._sweep = clock.callLater(delay, self._close_idle)

    def _close_idle(self) -> None:
        self._sweep = None
        timeout = self.idle_timeout_s
        if timeout <= 0:
            return
        for protocol in self.connections.expired(self.broker.clock.seconds() - timeout):
            self.connections.remove(protocol)
            self._idle_closed.record(peer=protocol.peer, timeout_s=timeout)
            if protocol.in_progress:  # a response it does not read: loseConnection would wait for it for ever
                protocol.transport.abortConnection()
            else:
                protocol.transport.loseConnection()
        self._schedule_sweep()

    # -- stopping -----------------------------------------------------------------------------

    def disconnect_all(self) -> None:
        """Drop every client connection now (at shutdown, before the logs close), and schedule nothing more."""
        for protocol in list(self.connections):
            protocol.transport.abortConnection()
        for refusal in list(self._refusals):
            refusal.stop()
        self._stop_timers()

    @override
    def stopFactory(self) -> None:
        self._stop_timers()

    def _stop_timers(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        guard = self.broker.guard  # (with --acls: its log of dropped produces)
        for events in (self._refused, self._refused_per_ip, self._reaped, self._reaped_per_ip, self._idle_closed,
                       self.late_frames, self.tls_failures, *((guard.dropped,) if guard is not None else ())):
            events.stop()
        if self.authentication is not None:
            self.authentication.stop()


def _peer(addr) -> str:
    return f"{getattr(addr, 'host', '?')}:{getattr(addr, 'port', '?')}"
