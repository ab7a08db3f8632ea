# -*- test-case-name: tests.protocol.test_server,tests.protocol.test_budget -*-
"""The broker's connections: L{BrokerProtocol} (one client) and L{BrokerFactory} (all of them).

L{BrokerProtocol} frames requests (L{FrameReceiver}, linear time), decodes
them, dispatches them to the L{Broker}'s handlers, and writes the responses
strictly in request order with L{ResponseSender} (zero-copy for log bytes).
L{BrokerFactory} holds what the connections share: the budget of buffered
request bytes (L{RequestBudget}, C{max_buffered_request_bytes}) and the
connection limits (C{max_connections}, C{max_connections_per_ip},
C{idle_timeout_s}; L{twlog.protocol.admission}).
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Callable

from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import ServerFactory
from twisted.logger import Logger
from twisted.python.failure import Failure
from typing_extensions import override

from twlog.errors import (
    UNKNOWN,
    BrokerError,
    InvalidRequest,
    MalformedRequest,
    RequestTooLarge,
    TooManyConnections,
    TooManyConnectionsFromAddress,
    kafka07_code,
)
from twlog.protocol import codec
from twlog.protocol.admission import ConnectionTable, EventLog, Refusal
from twlog.protocol.budget import RequestBudget
from twlog.protocol.framing import IN_PLACE_FRAME_BYTES, FrameReceiver
from twlog.protocol.sendfile import ResponseSender, can_sendfile
from twlog.protocol.server import KAFKA07_REQUESTS, Broker, Response
from twlog.statemachine import StateMachine

_SIZE = struct.Struct(">i")


def error_code(failure: Failure, request: object = None) -> int:
    """The wire code for a handler's failure (for C{request}: a 0.7 type gets a 0.7 code)."""
    code = failure.value.code if isinstance(failure.value, BrokerError) else UNKNOWN
    return kafka07_code(code) if isinstance(request, KAFKA07_REQUESTS) else code


def frame_code(code: int, request_type: int | None) -> int:
    """The code answering a frame of C{request_type} that was not decoded (malformed or too large).

    A 0.7 request type, or one the broker has not read yet (None), gets the nearest 0.7 code.
    """
    return kafka07_code(code) if request_type is None or codec.PRODUCE <= request_type <= codec.OFFSETS else code


#: Told of each request a broker answered: C{observer(request type, seconds from its arrival until
#: its response was written)}, or (fire-and-forget produces) until it was handled.
RequestObserver = Callable[[int, float], object]


class BrokerProtocolState(enum.Enum):
    """Where a L{BrokerProtocol}'s connection is.  Transitions::

        READING         --max_pending_requests unanswered: stop reading-------------> PAUSED
        PAUSED          --answered down to half of them: read again-----------------> READING
        READING         --a malformed or oversized request: answer it after the
                          earlier ones, read nothing more, close once all are sent---> CLOSING
        any but CLOSED  --connectionLost-------------------------------------------> CLOSED

    The table is L{BROKER_MOVES}.  (No frame is read while PAUSED, so no bad one
    moves it to CLOSING.)
    """

    READING = "reading"
    PAUSED = "paused"
    CLOSING = "closing"
    CLOSED = "closed"


_B = BrokerProtocolState

#: Where each L{BrokerProtocolState} may move; any other move raises L{twlog.statemachine.IllegalTransition}.
BROKER_MOVES: dict[BrokerProtocolState, set[BrokerProtocolState]] = {
    _B.READING: {_B.PAUSED, _B.CLOSING, _B.CLOSED},
    _B.PAUSED: {_B.READING, _B.CLOSED},
    _B.CLOSING: {_B.CLOSED},
}


class _Slot:
    """A response place in a connection's queue, filled when its handler finishes."""

    __slots__ = ("ready", "value", "deferred", "kind", "started")

    def __init__(self, kind: int | None = None, started: float = 0.0) -> None:
        self.ready = False
        self.value: Response | None = None
        self.deferred: Deferred | None = None
        self.kind = kind  # the request type (None: an error answering a frame that was not decoded)
        self.started = started

    def fill(self, value: Response) -> None:
        self.ready = True
        self.value = value


class BrokerProtocol(FrameReceiver):
    """One client connection: frame, decode, dispatch, and answer in request order.

    Its L{state} (L{BrokerProtocolState}) says whether it reads requests; apart
    from it, at most one response is being written at a time (L{writing}).
    """

    _log = Logger()
    #: Large requests are assembled in place (L{FrameReceiver}): their message sets are views of that buffer.
    IN_PLACE_BYTES = IN_PLACE_FRAME_BYTES

    def __init__(self, broker: Broker) -> None:
        super().__init__()
        self._broker = broker
        self.MAX_LENGTH = broker.config.max_request_bytes
        self._slots: deque[_Slot] = deque()
        self._machine = StateMachine("connection from ?", _B.READING, BROKER_MOVES)
        #: The response being written, if any.
        self._sender: ResponseSender | None = None
        self._pumping = False  # _pump is running (a sender that finishes at once must not start another)
        self._resume_at = broker.config.max_pending_requests // 2
        self._use_sendfile = False
        self.peer = "?"
        #: The client's host (the per-address cap's key; set by the factory) and when the connection last
        #: received a whole request or finished a response (the factory's idle bookkeeping).
        self.host = "?"
        self.last_active = 0.0
        #: Bytes of log data sent zero-copy and copied, over the connection's life.
        self.sendfile_bytes = 0
        self.copied_bytes = 0

    @property
    def state(self) -> BrokerProtocolState:
        """Where the connection is (L{BrokerProtocolState})."""
        return self._machine.state

    @property
    def writing(self) -> bool:
        """Whether a response is being written now."""
        return self._sender is not None

    @property
    def in_progress(self) -> bool:
        """Whether a request of this connection is being handled or answered (so it is not idle)."""
        return bool(self._slots) or self._sender is not None

    @override
    def connectionMade(self) -> None:
        self.factory.connection_made(self)
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self._machine.name = f"connection from {self.peer}"
        self._use_sendfile = self._broker.config.sendfile and can_sendfile(self.transport)
        if hasattr(self.transport, "setTcpNoDelay"):  # responses are written whole: Nagle only delays their tails
            self.transport.setTcpNoDelay(True)

    @override
    def dataReceived(self, data: bytes) -> None:
        self.factory.received_bytes += len(data)
        super().dataReceived(data)

    @override
    def stringReceived(self, frame: bytes) -> None:
        if self.state in (_B.CLOSING, _B.CLOSED):
            return
        self.factory.active(self)
        try:
            request = codec.decode_request(frame)
        except MalformedRequest as e:
            self._log.warn("closing the connection from {peer}: malformed request: {error}", peer=self.peer, error=e)
            self._close_with(frame_code(InvalidRequest.code, _request_type(frame)), _request_type(frame))
            return
        kind = frame[1] if frame[0] == 0 else _request_type(frame)  # a decoded request's type, cheaply
        requests = self.factory.requests
        requests[kind] = requests.get(kind, 0) + 1
        observer = self.factory.request_observer
        started = self._broker.clock.seconds() if observer is not None else 0.0
        handler = self._broker.handlers[type(request)]
        if not codec.expects_response(request):
            try:
                handler(request, self.peer)
            except Exception:
                self._log.failure("handling a request from {peer} failed", peer=self.peer)
            if observer is not None:
                observer(kind, self._broker.clock.seconds() - started)
            return
        slot = _Slot(kind, started)
        self._slots.append(slot)
        d = maybeDeferred(handler, request, self.peer)
        slot.deferred = d
        d.addErrback(self._failed, request, kind)
        d.addCallback(slot.fill)
        d.addBoth(lambda _: self._pump())
        if len(self._slots) >= self._broker.config.max_pending_requests and self.state is _B.READING:
            self._machine.move(_B.PAUSED)
            self.pauseProducing()

    def _failed(self, failure: Failure, request: object, kind: int) -> bytes:
        if failure.check(CancelledError):  # the connection went away while the answer was pending
            return b""
        code = error_code(failure, request)
        self._broker.count_error(kind, code)
        if error_code(failure) == UNKNOWN:
            self._log.failure("request from {peer} failed", failure, peer=self.peer)
        return codec.encode_error_response(code)

    @override
    def lengthLimitExceeded(self, length: int) -> None:
        self._log.warn(
            "closing the connection from {peer}: a {length}-byte request exceeds the {limit}-byte limit",
            peer=self.peer, length=length, limit=self.MAX_LENGTH,
        )
        # The request type follows the size, when it has arrived with it.
        kind = _request_type(self.peek(2))
        self._close_with(frame_code(RequestTooLarge.code, kind), kind)

    @override
    def buffer_changed(self) -> None:
        self.factory.budget.update(self)

    def _close_with(self, code: int, kind: int | None) -> None:
        """Answer the offending request (of type C{kind}, if known) with C{code} after the earlier ones, then close."""
        self._broker.count_error(-1 if kind is None else kind, code)
        self._machine.move(_B.CLOSING)
        self.discard_buffer()  # nothing after it is read: its bytes need no room
        self.pauseProducing()
        slot = _Slot()
        slot.fill(codec.encode_error_response(code))
        self._slots.append(slot)
        self._pump()

    def _pump(self) -> None:
        """Write ready responses in order, one at a time."""
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._sender is None and self._slots and self._slots[0].ready:
                slot = self._slots.popleft()
                value = slot.value
                if isinstance(value, bytes):
                    parts, size = [_SIZE.pack(len(value)) + value], 4 + len(value)
                else:  # the first part starts with the size prefix
                    parts, size = value, 4 + _SIZE.unpack_from(value[0])[0]
                sender = self._sender = ResponseSender(self.transport, parts, self._use_sendfile)
                d = sender.start()
                d.addCallbacks(self._sent, self._send_failed, callbackArgs=(sender, slot, size))
        finally:
            self._pumping = False
        if self._sender is not None:
            return
        if self.state is _B.CLOSING and not self._slots:
            self.transport.loseConnection()
        elif self.state is _B.PAUSED and len(self._slots) <= self._resume_at:
            self._machine.move(_B.READING)
            self.resumeProducing()

    def _sent(self, _: None, sender: ResponseSender, slot: _Slot, size: int) -> None:
        self.sendfile_bytes += sender.sendfile_bytes
        self.copied_bytes += sender.copied_bytes
        factory = self.factory
        factory.sent_bytes += size
        factory.sendfile_bytes += sender.sendfile_bytes
        if factory.request_observer is not None and slot.kind is not None:
            factory.request_observer(slot.kind, self._broker.clock.seconds() - slot.started)
        self._sender = None
        factory.active(self)
        if not self._pumping:
            self._pump()

    def _send_failed(self, failure: Failure) -> None:
        self._sender = None
        self._log.info("stopped answering {peer}: {error}", peer=self.peer, error=failure.getErrorMessage())
        self.transport.abortConnection()

    @override
    def connectionLost(self, reason: Failure = None) -> None:
        self._machine.move(_B.CLOSED)
        self.factory.connection_lost(self)
        self.factory.budget.forget(self)
        slots, self._slots = self._slots, deque()
        for slot in slots:
            if not slot.ready and slot.deferred is not None:
                slot.deferred.cancel()


def _request_type(frame: bytes) -> int | None:
    """The request type a frame starts with, if it has one."""
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else None


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
        self._refusals: set[Refusal] = set()
        self._sweep: IDelayedCall | None = None

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
        protocol = BrokerProtocol(self.broker)
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

    def connection_lost(self, protocol: BrokerProtocol) -> None:
        """C{protocol}'s connection is gone."""
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
        for events in (self._refused, self._refused_per_ip, self._reaped, self._reaped_per_ip, self._idle_closed):
            events.stop()


def _peer(addr) -> str:
    return f"{getattr(addr, 'host', '?')}:{getattr(addr, 'port', '?')}"
