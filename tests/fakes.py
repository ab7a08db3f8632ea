"""Test doubles shared by the suite: thread runners that make fsync deterministic, and the one
in-memory broker connection (L{FakeConnection})."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from zope.interface import implementer

from twlog.client.connection import IBrokerConnection
from twlog.errors import NO_ERROR, ClientClosed, ConnectionFailed, InvalidRequest, check
from twlog.protocol import codec, replication_codec
from twlog.protocol.codec import (
    AckProduceRequest,
    AckProduceResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceResult,
    TopicMetadata,
)
from twlog.protocol.responses import VIEW_STANDALONE, BrokerAddress, TopicLayout
from twlog.storage.message import iter_messages


def run_now(function, *args, **kwargs) -> Deferred:
    """A ThreadRunner that runs the blocking call at once, on the calling thread."""
    return maybeDeferred(function, *args, **kwargs)


class ManualRunner:
    """A ThreadRunner that queues calls until the test runs them, to hold an fsync "in flight"."""

    def __init__(self) -> None:
        self.pending: list[tuple[Deferred, object, tuple, dict]] = []

    def __call__(self, function, *args, **kwargs) -> Deferred:
        d: Deferred = Deferred()
        self.pending.append((d, function, args, kwargs))
        return d

    def run_one(self) -> None:
        """Run the oldest queued call and fire its Deferred."""
        d, function, args, kwargs = self.pending.pop(0)
        maybeDeferred(function, *args, **kwargs).chainDeferred(d)

    def run_all(self) -> None:
        """Run queued calls (including ones queued while running) until none is left."""
        while self.pending:
            self.run_one()

    def fail_one(self, exception: Exception) -> None:
        """Fail the oldest queued call without running it."""
        d, _, _, _ = self.pending.pop(0)
        d.errback(exception)


@implementer(IBrokerConnection)
class FakeConnection:
    """An L{IBrokerConnection} in memory: answers METADATA from a table and acknowledged produces by
    counting bytes, records what was sent, and lets the test script or hold every other answer.

    Answers are given as the broker's bytes (a response frame without its size prefix) and decoded
    and checked as L{BrokerConnection} does, so a frame with an error code fails with its exception.

      - C{responses}: scripted answers, used in order: a frame, a Deferred of one, or an exception.
      - unscripted requests (a fetch) wait in C{waiting} (and their Deferreds in C{held}) until the
        test fires them: L{answer} gives the oldest one a frame.
      - C{hold_sends} / C{hold_requests}: sends and acknowledged produces wait in C{held} too.
      - C{down}: every call fails with L{ConnectionFailed}.

    C{partitions} maps topic to partition count on this broker.
    """

    def __init__(
        self, host: str = "h", port: int = 1, broker_id: int = 0, partitions: dict[str, int] | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.broker_id = broker_id
        self.partitions = partitions if partitions is not None else {"t": 1}
        self.down = False
        #: Topics this broker refuses in METADATA, with the error code.
        self.topic_errors: dict[str, int] = {}
        #: CLUSTER_METADATA's answer: None for a broker without ZooKeeper (itself, from C{partitions}).
        self.cluster: codec.ClusterMetadataResponse | None = None
        #: CLUSTER_METADATA_V2's answer: None for an older broker, which refuses type 14 (InvalidRequest).
        self.cluster_v2: replication_codec.ClusterMetadataV2Response | None = None
        self.closed = False
        self.hold_sends = False
        self.hold_requests = False
        #: Deferreds the test fires by hand (held sends and requests, unscripted requests).
        self.held: list[Deferred] = []
        #: Unscripted requests not answered yet, with their Deferreds, oldest first.
        self.waiting: list[tuple[codec.Request, Deferred]] = []
        #: Every request made (with a response) and sent (without), in order.
        self.requests: list[codec.Request] = []
        self.sent: list[codec.Request] = []
        self.ends: dict[tuple[str, int], int] = {}
        self.responses: list[Deferred | bytes | Exception] = []

    def ready(self) -> None:
        """No protocol to write to at once: sends through the fake take the Deferred path, which it records."""
        return None

    def request(self, request: codec.Request, *, timeout_s: float | None = None) -> Deferred:
        self.requests.append(request)
        if self.closed:
            return fail(ClientClosed(f"connection to broker {self.address} is closed"))
        if self.down:
            return fail(ConnectionFailed(f"cannot connect to broker {self.address}: refused"))
        if isinstance(request, MetadataRequest):
            return succeed(self._decode(codec.encode_metadata_response(NO_ERROR, self._metadata(request)), request))
        if isinstance(request, replication_codec.ClusterMetadataV2Request):
            if self.cluster_v2 is None:
                return fail(InvalidRequest(f"broker {self.address} does not know request type 14"))
            frame = replication_codec.encode_cluster_metadata_v2_response(NO_ERROR, self.cluster_v2)
            return succeed(self._decode(frame, request))
        if isinstance(request, codec.ClusterMetadataRequest):
            cluster = self.cluster or self._cluster(request)
            return succeed(self._decode(codec.encode_cluster_metadata_response(NO_ERROR, cluster), request))
        if self.responses:
            answer = self.responses.pop(0)
            if isinstance(answer, Exception):
                return fail(answer)
            d = answer if isinstance(answer, Deferred) else succeed(answer)
            return d.addCallback(self._decode, request)
        if isinstance(request, AckProduceRequest):
            response = self._append(request)
            if not self.hold_requests:
                return succeed(response)
            d: Deferred = Deferred()
            self.held.append(d)
            return d.addCallback(lambda _: response)
        held: Deferred = Deferred()
        self.held.append(held)
        self.waiting.append((request, held))
        return held.addCallback(self._decode, request)

    def answer(self, frame: bytes) -> codec.Request:
        """Answer the oldest unscripted request still waiting with C{frame}; return that request."""
        while True:
            request, d = self.waiting.pop(0)
            if not d.called:
                break
        d.callback(frame)
        return request

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
        """Closed: requests still waiting fail with L{ClientClosed}, as on a real connection."""
        self.closed = True
        waiting, self.waiting = self.waiting, []
        for _, d in waiting:
            if not d.called:
                d.errback(ClientClosed(f"connection to broker {self.address} was closed"))
        return succeed(None)

    def produced_payloads(self) -> list[list[bytes]]:
        """The payloads of each produce sent or requested, one list per request."""
        batches = []
        for request in self.sent + self.requests:
            produces = getattr(request, "produces", None) or ([request] if hasattr(request, "messages") else [])
            for produce in produces:
                batches.append([m.payload for m in iter_messages(produce.messages, 0, whole_buffer=True)])
        return batches

    def _decode(self, answer: bytes | object, request: codec.Request) -> object:
        if not isinstance(answer, bytes):
            return answer  # already a response (or the test fired a held Deferred with one)
        return check(codec.decode_response(request, answer), f"broker {self.address} refused {request!r}")

    def _metadata(self, request: MetadataRequest) -> MetadataResponse:
        topics = tuple(
            TopicMetadata(t, self.topic_errors[t], 0) if t in self.topic_errors
            else TopicMetadata(t, NO_ERROR, self.partitions.get(t, 1))
            for t in request.topics
        )
        return MetadataResponse(self.broker_id, self.host, self.port, topics)

    def _cluster(self, request: codec.ClusterMetadataRequest) -> codec.ClusterMetadataResponse:
        """A broker without ZooKeeper: itself, and its partitions of the topics asked (all when none)."""
        topics = tuple(
            TopicLayout(t, self.topic_errors[t]) if t in self.topic_errors
            else TopicLayout(t, NO_ERROR, ((self.broker_id, self.partitions.get(t, 1)),))
            for t in (request.topics or sorted(self.partitions))
        )
        me = (BrokerAddress(self.broker_id, self.host, self.port),)
        return codec.ClusterMetadataResponse(self.broker_id, VIEW_STANDALONE, me, topics)

    def _append(self, request: AckProduceRequest) -> AckProduceResponse:
        results = []
        for produce in request.produces:
            start = self.ends.get((produce.topic, produce.partition), 0)
            end = start + len(produce.messages)
            self.ends[(produce.topic, produce.partition)] = end
            results.append(ProduceResult(produce.topic, produce.partition, NO_ERROR, start, end))
        return AckProduceResponse(NO_ERROR, tuple(results))


class FakeLogs:
    """The part of LogManager a registration uses: topics() and topic-creation and deletion listeners."""

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self._topics = dict(topics or {})
        self._listeners: list[Callable[[str, int], object]] = []
        self._delete_listeners: list[Callable[[str], object]] = []

    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    def add_topic_listener(self, listener) -> None:
        self._listeners.append(listener)

    def create(self, topic: str, count: int) -> None:
        """A first write created C{topic} with C{count} partitions."""
        self._topics[topic] = count
        for listener in self._listeners:
            listener(topic, count)

    def add_delete_listener(self, listener) -> None:
        self._delete_listeners.append(listener)

    def delete(self, topic: str) -> None:
        """DELETE_TOPIC deleted C{topic} here."""
        del self._topics[topic]
        for listener in self._delete_listeners:
            listener(topic)


def iteration(clock) -> None:
    """Run the calls due now but not the ones they schedule, as one reactor iteration does (runUntilCurrent
    leaves calls added while it runs to the next iteration; Clock.advance would run them too)."""
    due = [c for c in clock.getDelayedCalls() if c.getTime() <= clock.seconds()]
    for call in sorted(due, key=lambda c: c.getTime()):
        if call.active():
            clock.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)
