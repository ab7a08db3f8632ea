# -*- test-case-name: tests.protocol.test_metadata,tests.protocol.test_cluster_metadata,tests.protocol.test_create_topic,tests.protocol.test_boundaries -*-  # noqa: E501
"""The broker's metadata and admin handlers: OFFSETS, METADATA, CLUSTER_METADATA (and _V2), CREATE_TOPIC,
DELETE_TOPIC and BOUNDARIES (L{MetadataHandlers}).

These answer questions about the logs rather than carry their messages:
where a partition's offsets are (by time, or the message boundaries at
positions), which topics and partitions this broker and its cluster hold,
and the creation and deletion of a topic.  CLUSTER_METADATA reads the cluster from a
L{ClusterSource} (the broker's L{twlog.coord.cluster.ClusterView}), or
describes this broker alone without one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.config import BrokerConfig
from twlog.errors import (
    NO_ERROR,
    BrokerError,
    InvalidRequest,
    NotLeader,
    OffsetOutOfRange,
    ReplicatedTopic,
    kafka07_code,
)
from twlog.protocol import codec
from twlog.protocol import replication_codec as replication
from twlog.protocol.codec import (
    MAX_BOUNDARY_POSITIONS,
    BoundariesRequest,
    ClusterMetadataRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    MetadataRequest,
    OffsetsRequest,
    TopicMetadata,
)
from twlog.protocol.handling import ErrorCounts, Response, check_partition
from twlog.protocol.replication_codec import ClusterMetadataV2Request
from twlog.protocol.responses import (
    VIEW_CURRENT,
    VIEW_STALE,
    VIEW_STANDALONE,
    VIEW_STARTING,
    BrokerAddress,
    ClusterMetadataResponse,
    TopicLayout,
)
from twlog.storage.manager import LogManager, validate_topic

__all__ = ["ClusterSource", "MetadataHandlers"]


class ClusterSource(Protocol):
    """What a broker knows of its cluster for CLUSTER_METADATA (L{twlog.coord.cluster.ClusterView} provides it)."""

    #: Live brokers: id -> (host, port).
    brokers: Mapping[int, tuple[str, int]]
    # Optional (read with getattr): tls_brokers, the live brokers with a TLS listener, id -> (host, TLS port).

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

    def offline_holders(self, topic: str) -> dict[int, int]:
        """C{topic}'s partition count on each broker known to hold it that is not live."""

    # Optional (read with getattr, so a source without replicated topics need not have it):
    # def replicated(self, topic: str) -> ReplicatedLayout | None: C{topic}'s partitions, leaders, epochs,
    # replicas and ISRs if it is a replicated topic, else None.


def _held_by_none(topic: str) -> dict[int, int]:
    return {}


def _not_replicated(topic: str) -> None:
    return None


class MetadataHandlers:
    """Answers questions about the logs of one L{LogManager}, this broker and its cluster; creates topics."""

    _log = Logger()

    def __init__(self, logs: LogManager, config: BrokerConfig, clock: IReactorTime, errors: ErrorCounts) -> None:
        self._logs = logs
        self._config = config
        self._clock = clock
        self._errors = errors
        #: The port actually listened on (set once listening; config.port may be 0).
        self.port = 0
        #: The TLS port listened on (--tls-port), if any: a client asking over TLS is told this one.
        self.tls_port: int | None = None
        #: The cluster described in CLUSTER_METADATA: None (no ZooKeeper) for this broker alone.
        self.cluster: ClusterSource | None = None
        #: The controller this broker knows of, for CLUSTER_METADATA_V2 (NO_BROKER: none known), once set by
        #: the broker service (which runs the controller with ZooKeeper).
        self.controller_id: Callable[[], int] | None = None
        #: The replica side (L{twlog.protocol.fetch.ReadGate}): OFFSETS and BOUNDARIES of a partition this broker
        #: follows are answered NotLeader.  None: every partition here is read.
        self.replication = None

    def offsets(self, request: OffsetsRequest, peer: str = "?") -> Response:
        """OFFSETS: offsets before a time, newest first (errors as Kafka 0.7 codes)."""
        try:
            if self.replication is not None:
                self.replication.check_read(request.topic, request.partition)
        except NotLeader as e:  # (a replicated topic: no 0.7 client asks about one, so its precise code)
            self._errors.count(codec.OFFSETS, e.code)
            return codec.encode_offsets_response(e.code, ())
        try:
            check_partition(self._logs, request.topic, request.partition)
        except BrokerError as e:
            self._errors.count(codec.OFFSETS, kafka07_code(e.code))
            return codec.encode_offsets_response(kafka07_code(e.code), ())
        log = self._logs.get_log(request.topic, request.partition)
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
                    topics.append(TopicMetadata(topic, NO_ERROR, self._logs.partition_count(topic)))
                except BrokerError as e:
                    topics.append(TopicMetadata(topic, e.code, 0))
        else:
            topics = [TopicMetadata(t, NO_ERROR, n) for t, n in sorted(self._logs.topics().items())]
        me = self._me(peer)
        metadata = codec.MetadataResponse(me.broker_id, me.host, me.port, tuple(topics))
        return codec.encode_metadata_response(NO_ERROR, metadata)

    @property
    def advertised_port(self) -> int:
        """The port clients are told to use: C{--advertised-port}, else the one listened on."""
        return self._config.advertised_port or self.port

    def _me(self, peer: str) -> BrokerAddress:
        """This broker as a client asking from C{peer} should reach it: on the TLS port when it asked over TLS
        (L{Peer.tls}), else on the plaintext one."""
        tls = getattr(peer, "tls", False) and self.tls_port is not None
        return BrokerAddress(self._config.broker_id, self._config.advertised_host,
                             self.tls_port if tls else self.advertised_port)

    def cluster_metadata(self, request: ClusterMetadataRequest, peer: str = "?") -> Response:
        """CLUSTER_METADATA: every live broker and where the topics asked for (all when none) are held.

        Without ZooKeeper, or before the registry is read, the broker describes itself alone and
        says so (the view).  Only partitions that exist are reported: a topic no broker holds yet
        has no holders.  A broker known to hold a topic (C{/twlog/held}) that is not live is a holder
        with no address: its partitions exist, and are offline.  This broker's own counts come from its
        logs, ahead of its registration.  Replicated topics are not listed (their partitions are not
        C{<broker id>-<n>}): one named gets ReplicatedTopic (30); CLUSTER_METADATA_V2 describes them.
        """
        me, view, brokers, layouts = self._cluster(request.topics, peer, replicated=False)
        answer = ClusterMetadataResponse(me.broker_id, view, brokers, layouts)
        return codec.encode_cluster_metadata_response(NO_ERROR, answer)

    def cluster_metadata_v2(self, request: ClusterMetadataV2Request, peer: str = "?") -> Response:
        """CLUSTER_METADATA_V2: as CLUSTER_METADATA, with replicated topics described by partition (leader,
        leader epoch, replicas, ISR, from the partitions' states in ZooKeeper) and the controller.

        The controller is the one this broker knows of (L{controller_id}), or NO_BROKER.
        """
        me, view, brokers, layouts = self._cluster(request.topics, peer, replicated=True)
        controller = self.controller_id() if self.controller_id is not None else replication.NO_BROKER
        answer = replication.ClusterMetadataV2Response(me.broker_id, view, controller, brokers, layouts)
        return replication.encode_cluster_metadata_v2_response(NO_ERROR, answer)

    def _cluster(self, asked: tuple[str, ...], peer: str, *, replicated: bool
                 ) -> tuple[BrokerAddress, int, tuple[BrokerAddress, ...], list]:
        """This broker, the view, the live brokers and the topics' layouts for CLUSTER_METADATA (V2 with
        C{replicated}: replicated topics as L{replication.ReplicatedLayout})."""
        me = self._me(peer)
        local = self._logs.topics()
        cluster = self.cluster
        replicated_of: Callable[[str], replication.ReplicatedLayout | None] = _not_replicated
        if cluster is None or not cluster.ready:
            view = VIEW_STANDALONE if cluster is None else VIEW_STARTING
            brokers: dict[int, tuple[str, int]] = {}
            registered: Callable[[str], dict[int, int]] = _held_by_none
            offline: Callable[[str], dict[int, int]] = _held_by_none
            known = set(local)
        else:
            view = VIEW_CURRENT if cluster.connected else VIEW_STALE
            # (a client asking over TLS is told the TLS listeners; brokers without one are not live to it)
            tls = getattr(peer, "tls", False)
            brokers = dict(getattr(cluster, "tls_brokers", {}) if tls else cluster.brokers)
            registered = cluster.holders
            offline = cluster.offline_holders
            replicated_of = getattr(cluster, "replicated", _not_replicated)
            known = set(local) | set(cluster.topics())
        brokers[me.broker_id] = (me.host, me.port)  # it is answering, so it is live, at this address
        layouts: list[TopicLayout | replication.ReplicatedLayout] = []
        for topic in asked or sorted(known):
            try:
                validate_topic(topic)
            except BrokerError as e:
                layouts.append(TopicLayout(topic, e.code))
                continue
            # (A replicated topic's own replicas are local logs too: the view says what the topic is.)
            if (found := replicated_of(topic)) is not None:
                if replicated:
                    layouts.append(found)
                elif asked:  # an older client fails naming it, rather than read it as a 0.7 topic
                    layouts.append(TopicLayout(topic, ReplicatedTopic.code))
                continue
            holders = {b: n for b, n in registered(topic).items() if n > 0 and b != me.broker_id}
            if local.get(topic):
                holders[me.broker_id] = local[topic]
            # Brokers known to hold it that are down: listed with no address (readers say so, never drop them).
            holders.update((b, n) for b, n in offline(topic).items() if n > 0 and b not in brokers)
            if holders or asked:
                layouts.append(TopicLayout(topic, NO_ERROR, tuple(sorted(holders.items()))))
        return me, view, tuple(BrokerAddress(b, *a) for b, a in sorted(brokers.items())), layouts

    def create_topic(self, request: CreateTopicRequest, peer: str = "?") -> Deferred[Response]:
        """CREATE_TOPIC: create the topic's partitions here and record their count; answer once that is durable.

        An error-only response: 0 (created, or already there with this count), InvalidTopic,
        InvalidRequest (a count outside 1 to MAX_PARTITIONS) or TopicExists (another count).
        """
        d = self._logs.create_topic(request.topic, request.partitions)

        def created(new: bool) -> bytes:
            self._log.info("{peer} {what} topic {topic} with {count} partitions", peer=peer,
                           what="created" if new else "asked again for", topic=request.topic,
                           count=request.partitions)
            return codec.encode_error_response(NO_ERROR)

        return d.addCallback(created)

    def delete_topic(self, request: DeleteTopicRequest, peer: str = "?") -> Deferred[Response]:
        """DELETE_TOPIC: delete the topic's logs and recorded count here; answer once the count is durably gone.

        An error-only response: 0 (deleted, or not held here), InvalidTopic, StorageFailed (a partition's
        directory could not be moved away), BrokerShuttingDown.  The registration in ZooKeeper is dropped
        by the broker's registration, a delete listener of the logs.
        """
        d = self._logs.delete_topic(request.topic)

        def deleted(count: int) -> bytes:
            if count:
                self._log.info("{peer} deleted topic {topic} ({count} partition logs)", peer=peer,
                               topic=request.topic, count=count)
            return codec.encode_error_response(NO_ERROR)

        return d.addCallback(deleted)

    def boundaries(self, request: BoundariesRequest, peer: str = "?") -> Response | Deferred[Response]:
        """BOUNDARIES: the first message at or after each position (where a reader may start: split points).

        Errors raise (InvalidTopic, WrongPartition, InvalidRequest for more than
        L{MAX_BOUNDARY_POSITIONS} positions, OffsetOutOfRange) and are sent as an error-only response.
        """
        if self.replication is not None:
            self.replication.check_read(request.topic, request.partition)
        check_partition(self._logs, request.topic, request.partition)
        if len(request.positions) > MAX_BOUNDARY_POSITIONS:
            raise InvalidRequest(f"{len(request.positions)} positions; at most {MAX_BOUNDARY_POSITIONS}")
        log = self._logs.get_log(request.topic, request.partition)
        if log is None:  # nothing written yet: an empty log at offset 0
            if any(request.positions):
                raise OffsetOutOfRange("positions past the end of the empty log [0, 0]")
            return codec.encode_boundaries_response(NO_ERROR, request.positions)
        found = log.boundaries(request.positions)
        return found.addCallback(lambda offsets: codec.encode_boundaries_response(NO_ERROR, offsets))
