# -*- test-case-name: tests.protocol.test_server,tests.protocol.test_budget -*-
"""The broker's connections: L{BrokerProtocol}, one client (L{twlog.protocol.factory.BrokerFactory}: all of them).

L{BrokerProtocol} frames requests (L{FrameReceiver}, linear time), decodes
them, dispatches them to the L{Broker}'s handlers, and writes the responses
strictly in request order with L{ResponseSender} (zero-copy for log bytes).
L{BrokerFactory} holds what the connections share: the budget of buffered
request bytes (L{RequestBudget}, C{max_buffered_request_bytes}), the turns
connections take at having their frames handled (L{Turns}) and the
connection limits (C{max_connections}, C{max_connections_per_ip},
C{idle_timeout_s}; L{twlog.protocol.admission}).

No connection holds up the others: a frame must arrive whole in time
(L{FrameDeadline}), at most C{max_inflight_per_connection} requests await
their answers, connections take turns (L{twlog.protocol.turns}), and large
produces are checked in slices (L{twlog.protocol.slicing}), nothing else of
the connection being read or handled meanwhile, so that its requests still
take effect in order.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Callable

from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from typing_extensions import override

from twlog.errors import (
    UNKNOWN,
    BrokerError,
    InvalidRequest,
    MalformedRequest,
    RequestTooLarge,
    kafka07_code,
)
from twlog.protocol import codec
from twlog.protocol.budget import READ_BYTES
from twlog.protocol.deadline import FrameDeadline
from twlog.protocol.framing import IN_PLACE_FRAME_BYTES, FrameReceiver
from twlog.protocol.handling import Peer
from twlog.protocol.runs import ProduceRuns
from twlog.protocol.sendfile import ResponseSender, can_sendfile
from twlog.protocol.server import KAFKA07_REQUESTS, Broker, Response
from twlog.protocol.slicing import PRODUCES, SLICED_FRAME_BYTES, SlicedCheck, check_produce
from twlog.protocol.turns import TURN
from twlog.security import ANONYMOUS
from twlog.statemachine import StateMachine

_SIZE = struct.Struct(">i")

#: Why a connection's transport is held while a large produce of it is checked in slices.
CHECKING = "checking a large produce"


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

        READING         --max_inflight_per_connection unanswered: stop reading------> PAUSED
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
        self._max_inflight = broker.config.max_inflight_per_connection
        self._resume_at = self._max_inflight // 2
        self.take_run = ProduceRuns(self, broker).take  # runs of produce frames, in bulk (twlog.protocol.runs)
        #: What is left of this connection's turn (L{twlog.protocol.turns}): frames, and bytes of them.
        self._turn_frames = 0
        self._turn_bytes = 0
        self._turn_round = -1  # the round (Turns.rounds) of its last turn from the queue
        self._turn_ends = 0.0  # the reactor's time at which the turn ends
        #: Runs while a frame is part-way in and the connection is read (request_timeout_s).
        self._deadline = FrameDeadline(broker.clock, broker.config.request_timeout_s, self._frame_late)
        #: A large produce being checked in slices, and its frame's size (still counted against the budget).
        self._check: SlicedCheck | None = None
        self._checking_bytes = 0
        self._use_sendfile = False
        self.peer = "?"
        #: The client's host (the per-address cap's key; set by the factory) and when the connection last
        #: received a whole request or finished a response (the factory's idle bookkeeping).
        self.host = "?"
        self.principal = ANONYMOUS  # who the client is (twlog.security), until it authenticates
        self.last_active = 0.0
        #: Bytes of log data sent zero-copy and copied, over the connection's life.
        self.sendfile_bytes = self.copied_bytes = 0

    @property
    def state(self) -> BrokerProtocolState:
        """Where the connection is (L{BrokerProtocolState})."""
        return self._machine.state

    writing = property(lambda self: self._sender is not None, doc="Whether a response is being written now.")

    @property
    def in_progress(self) -> bool:
        """Whether a request of this connection is being handled or answered (so it is not idle)."""
        return bool(self._slots) or self._sender is not None

    @override
    def connectionMade(self) -> None:
        self.factory.connection_made(self)
        peer = self.transport.getPeer()
        self.peer = Peer(f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}", self.transport)
        self._machine.name = f"connection from {self.peer}"
        self._use_sendfile = self._broker.config.sendfile and can_sendfile(self.transport)
        if hasattr(self.transport, "setTcpNoDelay"):  # responses are written whole: Nagle only delays their tails
            self.transport.setTcpNoDelay(True)
            self.transport.bufferSize = READ_BYTES  # (its recv size: more produce frames per read, taken in bulk)

    @override
    def dataReceived(self, data: bytes) -> None:
        self.factory.received_bytes += len(data)
        turns = self.factory.turns
        if data and not turns.is_waiting(self):
            if turns.round_due and self._turn_round == turns.rounds:  # it had a turn in the last round, and
                self._turn_frames = 0  # others wait for the next one: it waits with them
            else:  # each read is a turn: the reactor reads the ready sockets in turns
                self._new_turn()
        super().dataReceived(data)

    def _new_turn(self) -> None:
        turns = self.factory.turns
        self._turn_frames, self._turn_bytes = turns.frames_per_turn, turns.bytes_per_turn
        self._turn_ends = self._broker.clock.seconds() + turns.seconds_per_turn

    @override
    def may_deliver(self) -> bool:
        if self._checking_bytes:
            return False
        if self._turn_frames > 0 and self._turn_bytes > 0 and (
            self._turn_frames == self.factory.turns.frames_per_turn or self._broker.clock.seconds() < self._turn_ends
        ):
            return True
        turns = self.factory.turns
        if self.frame_ready and not turns.is_waiting(self):  # more to do: after the others' turns
            self.hold_reading(TURN)
            turns.wait(self)
        return False

    def take_turn(self) -> None:
        """Handle up to a turn's worth of the buffered frames (L{Turns} calls it); read again once none is left."""
        if self.state is _B.CLOSED:
            return
        self._new_turn()
        self._turn_round = self.factory.turns.rounds
        self._deliver()
        if not self.factory.turns.is_waiting(self):
            self.release_reading(TURN)
        self.buffer_changed()

    @override
    def hold_reading(self, reason: str) -> None:
        super().hold_reading(reason)
        self._watch_deadline()

    @override
    def release_reading(self, reason: str) -> None:
        super().release_reading(reason)
        self._watch_deadline()

    def _watch_deadline(self) -> None:
        reading = self.state is _B.READING and not self.reading_held()
        self._deadline.watch(reading and self.frame_started, self.frames_taken)

    def _frame_late(self) -> None:
        """The frame coming did not arrive whole in time: free what it holds and drop the connection."""
        got, needed = self.buffered_bytes, self.needed_bytes
        self.factory.late_frames.record(timeout=self._broker.config.request_timeout_s, peer=self.peer, got=got,
                                        needed=needed)
        self.discard_buffer()  # its bytes go back to the budget now, not when the close completes
        self.pauseProducing()
        self.transport.abortConnection()

    @override
    def stringReceived(self, frame: bytes) -> None:
        self._turn_frames -= 1
        self._turn_bytes -= len(frame)
        if self.state in (_B.CLOSING, _B.CLOSED):
            return
        self.factory.active(self)
        try:
            request = codec.decode_request(frame)
            if type(request) not in self._broker.handlers:  # decoded but not served here (yet): an unknown type
                raise MalformedRequest(f"request type {_request_type(frame)} is not served by this broker")
        except MalformedRequest as e:
            self._log.warn("closing the connection from {peer}: malformed request: {error}", peer=self.peer, error=e)
            self._close_with(frame_code(InvalidRequest.code, _request_type(frame)), _request_type(frame))
            return
        kind = frame[1] if frame[0] == 0 else _request_type(frame)  # a decoded request's type, cheaply
        requests = self.factory.requests
        requests[kind] = requests.get(kind, 0) + 1
        observer = self.factory.request_observer
        started = self._broker.clock.seconds() if observer is not None else 0.0
        if len(frame) >= SLICED_FRAME_BYTES and isinstance(request, PRODUCES):
            self._check_in_slices(request, kind, started, len(frame))
            return
        self._handle(request, kind, started)

    @property
    @override
    def buffered_bytes(self) -> int:
        """Bytes received and not handled yet: those buffered, and a large produce's while it is checked."""
        return super().buffered_bytes + self._checking_bytes

    def _check_in_slices(self, request, kind: int, started: float, size: int) -> None:
        """Check C{request}'s sets a slice at a time, reading and handling nothing else meanwhile; then handle it."""
        self._checking_bytes = size
        self.hold_reading(CHECKING)
        log = self._broker.config.log
        steps = check_produce(request, log.max_message_bytes, log.max_decompressed_bytes)
        self._check = SlicedCheck(self._broker.clock, steps, lambda checked: self._checked(checked, kind, started),
                                  self._check_failed)
        self._check.start()

    def _checked(self, request, kind: int, started: float) -> None:
        self._check, self._checking_bytes = None, 0
        self._handle(request, kind, started)
        self.release_reading(CHECKING)
        self._deliver()  # the frames behind it (or a wait for the next turn)
        self.buffer_changed()

    def _check_failed(self, failure: Failure) -> None:
        self._check, self._checking_bytes = None, 0
        self._log.failure("checking a request from {peer} failed", failure, peer=self.peer)
        self.transport.abortConnection()

    def _handle(self, request, kind: int, started: float) -> None:
        """Dispatch a decoded request to its handler; queue the place of its response, if it gets one."""
        observer = self.factory.request_observer
        handler = self._broker.handler_for(request, self)
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
        if len(self._slots) >= self._max_inflight and self.state is _B.READING:
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
            "closing the connection from {peer}: a {length}-byte request exceeds the {limit}-byte limit{tls}",
            peer=self.peer, length=length, limit=self.MAX_LENGTH, tls=tls_hello_hint(length),
        )
        # The request type follows the size, when it has arrived with it.
        kind = _request_type(self.peek(2))
        self._close_with(frame_code(RequestTooLarge.code, kind), kind)

    @override
    def buffer_changed(self) -> None:
        self.factory.budget.update(self)
        self._watch_deadline()

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
        self.factory.connection_lost(self, reason)
        self.factory.budget.forget(self)
        self.factory.turns.forget(self)
        self._deadline.cancel()
        if self._check is not None:
            self._check.cancel()
            self._check, self._checking_bytes = None, 0
        slots, self._slots = self._slots, deque()
        for slot in slots:
            if not slot.ready and slot.deferred is not None:
                slot.deferred.cancel()


def tls_hello_hint(length: int) -> str:
    """For a frame length that is a TLS record's first bytes (a handshake record, version 3.x): what it means."""
    return " (it is a TLS handshake: TLS goes to the broker's --tls-port)" if length >> 16 == 0x1603 else ""


def _request_type(frame: bytes) -> int | None:
    """The request type a frame starts with, if it has one."""
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else None
