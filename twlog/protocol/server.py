# -*- test-case-name: tests.protocol.test_server -*-
"""The broker's side of the wire: request handling (L{Broker}) and the connection protocol.

L{Broker} turns decoded requests into responses using a L{LogManager}; it does
no I/O of its own.  L{BrokerProtocol} frames (Twisted's Int32StringReceiver),
decodes, dispatches through a dict of handlers, and writes responses strictly
in request order with L{ResponseSender} (zero-copy for log bytes).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import ServerFactory
from twisted.logger import Logger
from twisted.protocols.basic import Int32StringReceiver
from twisted.python.failure import Failure
from typing_extensions import override

from twlog.config import BrokerConfig
from twlog.errors import (
    NO_ERROR,
    UNKNOWN,
    BrokerError,
    InvalidFetchSize,
    InvalidRequest,
    MalformedRequest,
    OffsetOutOfRange,
    RequestTimedOut,
    RequestTooLarge,
    WrongPartition,
    kafka07_code,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_FLUSHED,
    AckProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    ProduceResult,
    TopicMetadata,
    WaitFetchRequest,
)
from twlog.protocol.sendfile import ResponseSender, can_sendfile
from twlog.storage.log import AppendResult
from twlog.storage.manager import LogManager, validate_topic
from twlog.storage.segment import FileRegion

_SIZE = struct.Struct(">i")

#: Kafka 0.7's request types (0-4): their responses carry only codes a 0.7 client knows
#: (L{twlog.errors.kafka07_code}), and their fetches return partial messages as 0.7 did.
KAFKA07_REQUESTS = (ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest)

#: A response: a frame (error code and body, no size prefix), or parts of a
#: zero-copy response (size prefix included) mixing bytes and file regions.
Response = bytes | list[bytes | FileRegion]


def error_code(failure: Failure, request: object = None) -> int:
    """The wire code for a handler's failure (for C{request}: a 0.7 type gets a 0.7 code)."""
    code = failure.value.code if isinstance(failure.value, BrokerError) else UNKNOWN
    return kafka07_code(code) if isinstance(request, KAFKA07_REQUESTS) else code


def frame_code(code: int, request_type: int | None) -> int:
    """The code answering a frame of C{request_type} that was not decoded (malformed or too large).

    A 0.7 request type, or one the broker has not read yet (None), gets the nearest 0.7 code.
    """
    return kafka07_code(code) if request_type is None or codec.PRODUCE <= request_type <= codec.OFFSETS else code


@attrs.define(eq=False)
class _WaitingFetch:
    request: WaitFetchRequest
    deferred: Deferred
    keys: set[tuple[str, int]]
    timer: Any = None


class Broker:
    """What a broker does with each request, over the logs of one L{LogManager}.

    Handlers return a L{Response}, a Deferred of one, or None (no response).
    """

    _log = Logger()

    def __init__(self, logs: LogManager, config: BrokerConfig, clock: IReactorTime) -> None:
        self.logs = logs
        self.config = config
        self._clock = clock
        self._waiting: dict[tuple[str, int], set[_WaitingFetch]] = {}
        logs.add_flush_listener(self._flushed)
        self.handlers: dict[type, Callable[..., Any]] = {
            ProduceRequest: self.produce,
            MultiProduceRequest: self.multiproduce,
            AckProduceRequest: self.ack_produce,
            FetchRequest: self.fetch,
            MultiFetchRequest: self.multifetch,
            WaitFetchRequest: self.wait_fetch,
            OffsetsRequest: self.offsets,
            MetadataRequest: self.metadata,
        }

    # -- produce -----------------------------------------------------------

    def _append(self, request: ProduceRequest) -> AppendResult:
        return self.logs.get_or_create_log(request.topic, request.partition).append(request.messages)

    def produce(self, request: ProduceRequest, peer: str = "?") -> None:
        """PRODUCE: append, answer nothing; a rejected set is logged (the producer does not wait)."""
        try:
            self._append(request)
        except BrokerError as e:
            self._log.warn(
                "rejected a produce from {peer} to {topic}-{partition}: {error}",
                peer=peer, topic=request.topic, partition=request.partition, error=e,
            )

    def multiproduce(self, request: MultiProduceRequest, peer: str = "?") -> None:
        """MULTIPRODUCE: each set as a PRODUCE."""
        for produce in request.produces:
            self.produce(produce, peer)

    def ack_produce(self, request: AckProduceRequest, peer: str = "?") -> Response | Deferred[Response] | None:
        """ACK_PRODUCE: append every set, then answer with the offsets (after the fsync when asked)."""
        results: list[ProduceResult] = []
        flushes: list[tuple[int, Deferred[int]]] = []
        for produce in request.produces:
            try:
                appended = self._append(produce)
            except BrokerError as e:
                self._log.warn(
                    "rejected a produce from {peer} to {topic}-{partition}: {error}",
                    peer=peer, topic=produce.topic, partition=produce.partition, error=e,
                )
                results.append(ProduceResult(produce.topic, produce.partition, e.code, -1, -1))
                continue
            results.append(ProduceResult(produce.topic, produce.partition, NO_ERROR, *appended[:2]))
            log = self.logs.get_log(produce.topic, produce.partition)
            if request.ack == ACK_FLUSHED:
                flushes.append((len(results) - 1, log.flush()))
            else:
                try:
                    log.write_out()  # "appended" means in the file: a process crash cannot lose it
                except BrokerError as e:
                    results[-1] = attrs.evolve(results[-1], error=e.code)
        if request.ack != ACK_FLUSHED or not flushes:
            return codec.encode_ack_produce_response(NO_ERROR, results)
        return Deferred.fromCoroutine(self._await_flushes(request, results, flushes))

    async def _await_flushes(
        self, request: AckProduceRequest, results: list[ProduceResult], flushes: list[tuple[int, Deferred[int]]]
    ) -> bytes:
        timeout_s = max(request.timeout_ms, 0) / 1000
        for index, flushed in flushes:
            flushed.addTimeout(timeout_s, self._clock)
            try:
                offset = await flushed
            except Exception as e:  # a timeout, or a failed fsync
                code = RequestTimedOut.code
                self._log.warn("acknowledged produce to {topic}: not flushed: {error}",
                               topic=results[index].topic, error=e)
                results[index] = attrs.evolve(results[index], error=code)
                continue
            if offset < results[index].next_offset:  # pragma: no cover - flush() covers all appended data
                results[index] = attrs.evolve(results[index], error=RequestTimedOut.code)
        return codec.encode_ack_produce_response(NO_ERROR, results)

    # -- fetch -------------------------------------------------------------

    def _read(self, fetch: FetchRequest, kafka07: bool = False) -> tuple[int, FileRegion | None]:
        """One fetch: its error code and region.

        With C{kafka07} (FETCH, MULTIFETCH), as a 0.7 broker: a first message
        larger than the max size is sent partial with error 0, and a twlog-only
        error becomes the nearest 0.7 code; otherwise (WAIT_FETCH) the precise
        code.
        """
        try:
            validate_topic(fetch.topic)
            count = self.logs.partition_count(fetch.topic)
            if not 0 <= fetch.partition < count:
                raise WrongPartition(f"partition {fetch.partition} of {fetch.topic!r} is outside [0, {count - 1}]")
            log = self.logs.get_log(fetch.topic, fetch.partition)
            if log is None:  # nothing written yet: an empty log at offset 0
                if fetch.max_bytes <= 0:
                    raise InvalidFetchSize(f"fetch size {fetch.max_bytes} must be positive")
                if fetch.offset != 0:
                    raise OffsetOutOfRange(f"offset {fetch.offset} is outside the empty log [0, 0]")
                return NO_ERROR, None
            return NO_ERROR, log.read(fetch.offset, fetch.max_bytes, partial_ok=kafka07)
        except BrokerError as e:
            return (kafka07_code(e.code) if kafka07 else e.code), None

    def fetch(self, request: FetchRequest, peer: str = "?") -> Response:
        """FETCH: a header and the log bytes, zero-copy (as Kafka 0.7: partial first message, 0.7 codes)."""
        error, region = self._read(request, kafka07=True)
        length = region.length if region is not None else 0
        return [codec.fetch_response_header(error, length), *([region] if length else [])]

    def _multifetch_parts(self, fetches: tuple[FetchRequest, ...], kafka07: bool = False) -> list[bytes | FileRegion]:
        reads = [self._read(f, kafka07) for f in fetches]
        lengths = [r.length if r is not None else 0 for _, r in reads]
        parts: list[bytes | FileRegion] = [codec.multifetch_response_header(NO_ERROR, lengths)]
        for (error, region), length in zip(reads, lengths):
            parts.append(codec.multifetch_part_header(error, length))
            if length:
                parts.append(region)
        return parts

    def multifetch(self, request: MultiFetchRequest, peer: str = "?") -> Response:
        """MULTIFETCH: one part per fetch, in order (each as a FETCH)."""
        return self._multifetch_parts(request.fetches, kafka07=True)

    def wait_fetch(self, request: WaitFetchRequest, peer: str = "?") -> Response | Deferred[Response]:
        """WAIT_FETCH: answer once min_bytes are readable over all fetches, or when max_wait_ms has passed."""
        if self._ready(request):
            return self._multifetch_parts(request.fetches)
        waiter = _WaitingFetch(request, Deferred(canceller=lambda d: self._forget(waiter)),
                               {(f.topic, f.partition) for f in request.fetches})
        wait_s = min(request.max_wait_ms, self.config.max_fetch_wait_ms) / 1000
        waiter.timer = self._clock.callLater(wait_s, self._wake, waiter)
        for key in waiter.keys:
            self._waiting.setdefault(key, set()).add(waiter)
        return waiter.deferred

    def _ready(self, request: WaitFetchRequest) -> bool:
        if request.max_wait_ms <= 0:
            return True
        available = 0
        for fetch in request.fetches:
            error, region = self._read(fetch)
            if error != NO_ERROR:
                return True  # errors are answered at once
            available += region.length if region is not None else 0
        return available >= request.min_bytes

    def _flushed(self, topic: str, partition: int, log: object) -> None:
        for waiter in list(self._waiting.get((topic, partition), ())):
            if self._ready(waiter.request):
                self._wake(waiter)

    def _wake(self, waiter: _WaitingFetch) -> None:
        self._forget(waiter)
        waiter.deferred.callback(self._multifetch_parts(waiter.request.fetches))

    def _forget(self, waiter: _WaitingFetch) -> None:
        if waiter.timer is not None and waiter.timer.active():
            waiter.timer.cancel()
        for key in waiter.keys:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[key]

    def waiting_fetches(self) -> int:
        """How many waiting fetches are held (for tests and stats)."""
        return len({id(w) for ws in self._waiting.values() for w in ws})

    # -- offsets and metadata ------------------------------------------------

    def offsets(self, request: OffsetsRequest, peer: str = "?") -> Response:
        """OFFSETS: offsets before a time, newest first (errors as Kafka 0.7 codes)."""
        try:
            validate_topic(request.topic)
            count = self.logs.partition_count(request.topic)
            if not 0 <= request.partition < count:
                raise WrongPartition(f"partition {request.partition} of {request.topic!r} is outside [0, {count - 1}]")
        except BrokerError as e:
            return codec.encode_offsets_response(kafka07_code(e.code), ())
        log = self.logs.get_log(request.topic, request.partition)
        if log is None:
            offsets = [0] if request.time < 0 and request.max_offsets > 0 else []
        else:
            now_ms = int(self._clock.seconds() * 1000)
            offsets = log.offsets_before(request.time, max(request.max_offsets, 0), now_ms)
        return codec.encode_offsets_response(NO_ERROR, offsets)

    def metadata(self, request: MetadataRequest, peer: str = "?") -> Response:
        """METADATA: this broker and the partition counts of the topics asked for (all when none)."""
        if request.topics:
            topics = []
            for topic in request.topics:
                try:
                    validate_topic(topic)
                    topics.append(TopicMetadata(topic, NO_ERROR, self.logs.partition_count(topic)))
                except BrokerError as e:
                    topics.append(TopicMetadata(topic, e.code, 0))
        else:
            topics = [TopicMetadata(t, NO_ERROR, n) for t, n in sorted(self.logs.topics().items())]
        metadata = codec.MetadataResponse(
            self.config.broker_id, self.config.advertised_host, self.port, tuple(topics)
        )
        return codec.encode_metadata_response(NO_ERROR, metadata)

    #: The port actually listened on (set by the service once listening; config.port may be 0).
    port: int = 0


class _Slot:
    """A response place in a connection's queue, filled when its handler finishes."""

    __slots__ = ("ready", "value", "deferred")

    def __init__(self) -> None:
        self.ready = False
        self.value: Response | None = None
        self.deferred: Deferred | None = None

    def fill(self, value: Response) -> None:
        self.ready = True
        self.value = value


class BrokerProtocol(Int32StringReceiver):
    """One client connection: frame, decode, dispatch, and answer in request order."""

    _log = Logger()

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.MAX_LENGTH = broker.config.max_request_bytes
        self._slots: deque[_Slot] = deque()
        self._writing = False
        self._pumping = False
        self._closing = False
        self._read_paused = False
        self._resume_at = broker.config.max_pending_requests // 2
        self._use_sendfile = False
        self.peer = "?"
        #: Bytes of log data sent zero-copy and copied, over the connection's life.
        self.sendfile_bytes = 0
        self.copied_bytes = 0

    @override
    def connectionMade(self) -> None:
        self.factory.connections.add(self)
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self._use_sendfile = self._broker.config.sendfile and can_sendfile(self.transport)

    @override
    def stringReceived(self, frame: bytes) -> None:
        if self._closing:
            return
        try:
            request = codec.decode_request(frame)
        except MalformedRequest as e:
            self._log.warn("closing the connection from {peer}: malformed request: {error}", peer=self.peer, error=e)
            self._close_with(frame_code(InvalidRequest.code, _request_type(frame)))
            return
        handler = self._broker.handlers[type(request)]
        if not codec.expects_response(request):
            try:
                handler(request, self.peer)
            except Exception:
                self._log.failure("handling a request from {peer} failed", peer=self.peer)
            return
        slot = _Slot()
        self._slots.append(slot)
        d = maybeDeferred(handler, request, self.peer)
        slot.deferred = d
        d.addErrback(self._failed, request)
        d.addCallback(slot.fill)
        d.addBoth(lambda _: self._pump())
        if len(self._slots) >= self._broker.config.max_pending_requests and not self._read_paused:
            self._read_paused = True
            self.pauseProducing()

    def _failed(self, failure: Failure, request: object) -> bytes:
        if failure.check(CancelledError):  # the connection went away while the answer was pending
            return b""
        code = error_code(failure, request)
        if error_code(failure) == UNKNOWN:
            self._log.failure("request from {peer} failed", failure, peer=self.peer)
        return codec.encode_error_response(code)

    @override
    def lengthLimitExceeded(self, length: int) -> None:
        self._log.warn(
            "closing the connection from {peer}: a {length}-byte request exceeds the {limit}-byte limit",
            peer=self.peer, length=length, limit=self.MAX_LENGTH,
        )
        # The request type follows the size, when it has arrived with it (Int32StringReceiver keeps the
        # unread bytes, size first, in its "recvd" attribute).
        self._close_with(frame_code(RequestTooLarge.code, _request_type(self.recvd[4:])))

    def _close_with(self, code: int) -> None:
        """Answer the offending request with C{code} after the earlier ones, then close."""
        self._closing = True
        if not self._read_paused:
            self._read_paused = True
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
            while not self._writing and self._slots and self._slots[0].ready:
                value = self._slots.popleft().value
                parts = [_SIZE.pack(len(value)) + value] if isinstance(value, bytes) else value
                sender = ResponseSender(self.transport, parts, self._use_sendfile)
                self._writing = True
                d = sender.start()
                d.addCallbacks(self._sent, self._send_failed, callbackArgs=(sender,))
        finally:
            self._pumping = False
        if self._writing:
            return
        if self._closing and not self._slots:
            self.transport.loseConnection()
        elif self._read_paused and not self._closing and len(self._slots) <= self._resume_at:
            self._read_paused = False
            self.resumeProducing()

    def _sent(self, _: None, sender: ResponseSender) -> None:
        self.sendfile_bytes += sender.sendfile_bytes
        self.copied_bytes += sender.copied_bytes
        self._writing = False
        if not self._pumping:
            self._pump()

    def _send_failed(self, failure: Failure) -> None:
        self._writing = False
        self._log.info("stopped answering {peer}: {error}", peer=self.peer, error=failure.getErrorMessage())
        self.transport.abortConnection()

    @override
    def connectionLost(self, reason: Failure = None) -> None:
        self.factory.connections.discard(self)
        slots, self._slots = self._slots, deque()
        for slot in slots:
            if not slot.ready and slot.deferred is not None:
                slot.deferred.cancel()


def _request_type(frame: bytes) -> int | None:
    """The request type a frame starts with, if it has one."""
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else None


class BrokerFactory(ServerFactory):
    """Builds a L{BrokerProtocol} per connection, all sharing one L{Broker}."""

    noisy = False

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        #: The open client connections.
        self.connections: set[BrokerProtocol] = set()

    def disconnect_all(self) -> None:
        """Drop every client connection now (at shutdown, before the logs close)."""
        for protocol in list(self.connections):
            protocol.transport.abortConnection()

    @override
    def buildProtocol(self, addr) -> BrokerProtocol:
        protocol = BrokerProtocol(self.broker)
        protocol.factory = self
        return protocol
