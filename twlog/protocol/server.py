# -*- test-case-name: tests.protocol.test_server -*-
"""The broker's request handling: L{Broker}.

L{Broker} turns decoded requests into responses using a L{LogManager}; it does
no I/O of its own.  The connections that frame, decode and answer requests
are L{twlog.protocol.connection}'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.config import BrokerConfig
from twlog.errors import (
    NO_ERROR,
    BrokerError,
    InvalidFetchSize,
    InvalidRequest,
    OffsetOutOfRange,
    RequestTimedOut,
    TooManyOpenFiles,
    WrongPartition,
    kafka07_code,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_FLUSHED,
    MAX_BOUNDARY_POSITIONS,
    AckProduceRequest,
    BoundariesRequest,
    ClusterMetadataRequest,
    CreateTopicRequest,
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
from twlog.protocol.responses import (
    VIEW_CURRENT,
    VIEW_STALE,
    VIEW_STANDALONE,
    VIEW_STARTING,
    BrokerAddress,
    ClusterMetadataResponse,
    TopicLayout,
)
from twlog.storage.log import AppendResult, log_boundaries
from twlog.storage.manager import LogManager, validate_topic
from twlog.storage.segment import FileRegion

#: Kafka 0.7's request types (0-4): their responses carry only codes a 0.7 client knows
#: (L{twlog.errors.kafka07_code}), and their fetches return partial messages as 0.7 did.
KAFKA07_REQUESTS = (ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest)

#: A response: a frame (error code and body, no size prefix), or parts of a
#: zero-copy response (size prefix included) mixing bytes and file regions.
Response = bytes | list[bytes | FileRegion]


class ClusterSource(Protocol):
    """What a broker knows of its cluster for CLUSTER_METADATA (L{twlog.coord.cluster.ClusterView} provides it)."""

    #: Live brokers: id -> (host, port).
    brokers: Mapping[int, tuple[str, int]]

    @property
    def ready(self) -> bool:
        """Whether the registry has been read once (before that the broker answers for itself alone)."""

    @property
    def connected(self) -> bool:
        """Whether the session is connected now (otherwise the layout is the last one read)."""

    def topics(self) -> list[str]:
        """Every topic registered in the cluster."""

    def holders(self, topic: str) -> dict[int, int]:
        """C{topic}'s partition count on each live broker that registered it."""


def _held_by_none(topic: str) -> dict[int, int]:
    return {}


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
        self._clock = self.clock = clock
        self._waiting: dict[tuple[str, int], set[_WaitingFetch]] = {}
        #: Error codes answered (or, for a fire-and-forget produce, meant), by (request type, code): for metrics.
        self.error_counts: dict[tuple[int, int], int] = {}
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
            ClusterMetadataRequest: self.cluster_metadata,
            CreateTopicRequest: self.create_topic,
            BoundariesRequest: self.boundaries,
        }
        #: The cluster this broker describes in CLUSTER_METADATA: None (no ZooKeeper) for itself alone.
        self.cluster: ClusterSource | None = None

    # -- produce -----------------------------------------------------------

    def _append(self, request: ProduceRequest) -> AppendResult:
        return self.logs.get_or_create_log(request.topic, request.partition).append(request.messages)

    def count_error(self, kind: int, code: int) -> None:
        """Count one error C{code} in the answer to a request of type C{kind} (one per failed part)."""
        self.error_counts[kind, code] = self.error_counts.get((kind, code), 0) + 1

    def produce(self, request: ProduceRequest, peer: str = "?", kind: int = codec.PRODUCE) -> None:
        """PRODUCE: append, answer nothing; a rejected set is logged (the producer does not wait)."""
        try:
            self._append(request)
        except BrokerError as e:
            self.count_error(kind, e.code)
            self._log.warn(
                "rejected a produce from {peer} to {topic}-{partition}: {error}",
                peer=peer, topic=request.topic, partition=request.partition, error=e,
            )

    def multiproduce(self, request: MultiProduceRequest, peer: str = "?") -> None:
        """MULTIPRODUCE: each set as a PRODUCE."""
        for produce in request.produces:
            self.produce(produce, peer, codec.MULTIPRODUCE)

    def ack_produce(self, request: AckProduceRequest, peer: str = "?") -> Response | Deferred[Response] | None:
        """ACK_PRODUCE: append every set, then answer with the offsets (after the fsync when asked)."""
        results: list[ProduceResult] = []
        flushes: list[tuple[int, Deferred[int]]] = []
        for produce in request.produces:
            try:
                appended = self._append(produce)
            except BrokerError as e:
                self.count_error(codec.ACK_PRODUCE, e.code)
                self._log.warn(
                    "rejected a produce from {peer} to {topic}-{partition}: {error}",
                    peer=peer, topic=produce.topic, partition=produce.partition, error=e,
                )
                results.append(ProduceResult.refused(produce.topic, produce.partition, e))
                continue
            results.append(ProduceResult(produce.topic, produce.partition, NO_ERROR, *appended[:2]))
            log = self.logs.get_log(produce.topic, produce.partition)
            if request.ack == ACK_FLUSHED:
                flushes.append((len(results) - 1, log.flush()))
            else:
                try:
                    log.write_out()  # "appended" means in the file: a process crash cannot lose it
                except BrokerError as e:
                    self.count_error(codec.ACK_PRODUCE, e.code)
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
            except Exception as e:  # a timeout, a failed fsync, or no descriptor to open a directory for one
                code = TooManyOpenFiles.code if isinstance(e, TooManyOpenFiles) else RequestTimedOut.code
                self.count_error(codec.ACK_PRODUCE, code)
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
        if error:
            self.count_error(codec.FETCH, error)
        length = region.length if region is not None else 0
        return [codec.fetch_response_header(error, length), *([region] if length else [])]

    def _multifetch_parts(self, fetches: tuple[FetchRequest, ...], kafka07: bool = False) -> list[bytes | FileRegion]:
        reads = [self._read(f, kafka07) for f in fetches]
        lengths = [r.length if r is not None else 0 for _, r in reads]
        parts: list[bytes | FileRegion] = [codec.multifetch_response_header(NO_ERROR, lengths)]
        kind = codec.MULTIFETCH if kafka07 else codec.WAIT_FETCH
        for (error, region), length in zip(reads, lengths):
            if error:
                self.count_error(kind, error)
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
            self.count_error(codec.OFFSETS, kafka07_code(e.code))
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

    def cluster_metadata(self, request: ClusterMetadataRequest, peer: str = "?") -> Response:
        """CLUSTER_METADATA: every live broker and where the topics asked for (all when none) are held.

        Without ZooKeeper, or before the registry is read, the broker describes itself alone and
        says so (the view).  Only partitions that exist are reported: a topic no broker holds yet
        has no holders.  This broker's own counts come from its logs, ahead of its registration.
        """
        me = BrokerAddress(self.config.broker_id, self.config.advertised_host, self.port)
        local = self.logs.topics()
        cluster = self.cluster
        if cluster is None or not cluster.ready:
            view = VIEW_STANDALONE if cluster is None else VIEW_STARTING
            brokers: dict[int, tuple[str, int]] = {}
            registered: Callable[[str], dict[int, int]] = _held_by_none
            known = set(local)
        else:
            view = VIEW_CURRENT if cluster.connected else VIEW_STALE
            brokers = dict(cluster.brokers)
            registered = cluster.holders
            known = set(local) | set(cluster.topics())
        brokers[me.broker_id] = (me.host, me.port)  # it is answering, so it is live, at this address
        layouts = []
        for topic in request.topics or sorted(known):
            try:
                validate_topic(topic)
            except BrokerError as e:
                layouts.append(TopicLayout(topic, e.code))
                continue
            holders = {b: n for b, n in registered(topic).items() if n > 0 and b != me.broker_id}
            if local.get(topic):
                holders[me.broker_id] = local[topic]
            if holders or request.topics:
                layouts.append(TopicLayout(topic, NO_ERROR, tuple(sorted(holders.items()))))
        answer = ClusterMetadataResponse(
            me.broker_id, view, tuple(BrokerAddress(b, *a) for b, a in sorted(brokers.items())), tuple(layouts)
        )
        return codec.encode_cluster_metadata_response(NO_ERROR, answer)

    def create_topic(self, request: CreateTopicRequest, peer: str = "?") -> Deferred[Response]:
        """CREATE_TOPIC: create the topic's partitions here and record their count; answer once that is durable.

        An error-only response: 0 (created, or already there with this count), InvalidTopic,
        InvalidRequest (a count outside 1 to MAX_PARTITIONS) or TopicExists (another count).
        """
        d = self.logs.create_topic(request.topic, request.partitions)

        def created(new: bool) -> bytes:
            self._log.info("{peer} {what} topic {topic} with {count} partitions", peer=peer,
                           what="created" if new else "asked again for", topic=request.topic,
                           count=request.partitions)
            return codec.encode_error_response(NO_ERROR)

        return d.addCallback(created)

    def boundaries(self, request: BoundariesRequest, peer: str = "?") -> Response | Deferred[Response]:
        """BOUNDARIES: the first message at or after each position (where a reader may start: split points)."""
        return answer_boundaries(self.logs, request)

    #: The port actually listened on (set by the service once listening; config.port may be 0).
    port: int = 0


def answer_boundaries(logs: LogManager, request: BoundariesRequest) -> Response | Deferred[Response]:
    """BOUNDARIES' answer from C{logs}; errors raise (InvalidTopic, WrongPartition, InvalidRequest for more than
    L{MAX_BOUNDARY_POSITIONS} positions, OffsetOutOfRange) and are sent as an error-only response."""
    validate_topic(request.topic)
    count = logs.partition_count(request.topic)
    if not 0 <= request.partition < count:
        raise WrongPartition(f"partition {request.partition} of {request.topic!r} is outside [0, {count - 1}]")
    if len(request.positions) > MAX_BOUNDARY_POSITIONS:
        raise InvalidRequest(f"{len(request.positions)} positions; at most {MAX_BOUNDARY_POSITIONS}")
    log = logs.get_log(request.topic, request.partition)
    if log is None:  # nothing written yet: an empty log at offset 0
        if any(request.positions):
            raise OffsetOutOfRange("positions past the end of the empty log [0, 0]")
        return codec.encode_boundaries_response(NO_ERROR, request.positions)
    found = log_boundaries(log, request.positions)
    return found.addCallback(lambda offsets: codec.encode_boundaries_response(NO_ERROR, offsets))
