# -*- test-case-name: tests.protocol.test_server -*-
"""The broker's request handling: L{Broker}, the table from request type to handler.

L{Broker} turns decoded requests into responses using a L{LogManager}; it does
no I/O of its own.  The handlers come in families, each a unit of its own:
produce (L{ProduceHandlers}), fetch (L{FetchHandlers}, which also holds the
waiting fetches) and metadata and admin (L{MetadataHandlers}).  The
connections that frame, decode and answer requests are
L{twlog.protocol.connection}'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IReactorTime

from twlog.config import BrokerConfig
from twlog.protocol.authorization import RequestGuard
from twlog.protocol.codec import (
    AckProduceRequest,
    BoundariesRequest,
    ClusterMetadataRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.fetch import FetchHandlers
from twlog.protocol.handling import ErrorCounts, Response
from twlog.protocol.metadata import ClusterSource, MetadataHandlers
from twlog.protocol.produce import ProduceHandlers, ReplicationGate
from twlog.protocol.replication_codec import ClusterMetadataV2Request
from twlog.storage.manager import LogManager

__all__ = ["KAFKA07_REQUESTS", "Broker", "ClusterSource", "Response"]

#: Kafka 0.7's request types (0-4): their responses carry only codes a 0.7 client knows
#: (L{twlog.errors.kafka07_code}), and their fetches return partial messages as 0.7 did.
KAFKA07_REQUESTS = (ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest)


class Broker:
    """What a broker does with each request, over the logs of one L{LogManager}.

    L{handlers} maps each request type to its handler; each handler is also an
    attribute (C{broker.fetch(request)}).  Handlers return a L{Response}, a
    Deferred of one, or None (no response).
    """

    def __init__(self, logs: LogManager, config: BrokerConfig, clock: IReactorTime) -> None:
        self.logs = logs
        self.config = config
        self.clock = clock
        errors = ErrorCounts()
        #: Error codes answered (or, for a fire-and-forget produce, meant), by (request type, code): for metrics.
        self.error_counts = errors.counts
        self.count_error = errors.count
        #: The produce handlers (the bulk path of L{twlog.protocol.runs} appends runs of sets through them).
        self.producing = self._producing = producing = ProduceHandlers(logs, clock, errors)
        self.messages_in, self.bytes_in = producing.messages_in, producing.bytes_in
        self._fetching = fetching = FetchHandlers(logs, config, clock, errors)
        self._metadata = metadata = MetadataHandlers(logs, config, clock, errors)
        logs.add_flush_listener(fetching.flushed)
        self.produce, self.multiproduce, self.ack_produce = (
            producing.produce, producing.multiproduce, producing.ack_produce)
        self.fetch, self.multifetch, self.wait_fetch = fetching.fetch, fetching.multifetch, fetching.wait_fetch
        self.waiting_fetches = fetching.waiting_fetches
        self.offsets, self.metadata, self.cluster_metadata = (
            metadata.offsets, metadata.metadata, metadata.cluster_metadata)
        self.create_topic, self.boundaries = metadata.create_topic, metadata.boundaries
        self.delete_topic = metadata.delete_topic
        self.cluster_metadata_v2 = metadata.cluster_metadata_v2
        logs.add_delete_listener(fetching.topic_deleted)
        #: With C{--acls}: the ACL check of each request (L{twlog.protocol.authorization}); it allows only the super
        #: users until it is given the ACLs (L{twlog.broker.authorization.follow_acls}).
        self.guard: RequestGuard | None = RequestGuard.of_broker(self) if config.acls else None
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
            DeleteTopicRequest: self.delete_topic,
            ClusterMetadataV2Request: self.cluster_metadata_v2,
        }

    def handler_for(self, request: object, connection: Any) -> Callable[..., Any]:
        """The handler of C{request} from C{connection}: its type's, or, with L{guard} (C{--acls}), one answering
        the refusal when the connection's principal lacks an ACL the request needs."""
        handler = self.handlers[type(request)]
        return handler if self.guard is None else self.guard.handler(request, handler, connection)

    @property
    def port(self) -> int:
        """The port actually listened on (set by the service once listening; config.port may be 0)."""
        return self._metadata.port

    @port.setter
    def port(self, port: int) -> None:
        self._metadata.port = port

    @property
    def tls_port(self) -> int | None:
        """The TLS port listened on (set by the service once listening), if any: METADATA answers a TLS client
        with it."""
        return self._metadata.tls_port

    @tls_port.setter
    def tls_port(self, port: int | None) -> None:
        self._metadata.tls_port = port

    @property
    def replication(self) -> ReplicationGate | None:
        """The replica side that produce asks about replicated partitions (L{twlog.replica}); None: no partition
        has followers.  Its REPLICA_FETCH, EPOCH_END_OFFSET and REPLICA_STATUS handlers are added to L{handlers}
        with it."""
        return self._producing.replication

    @replication.setter
    def replication(self, gate: ReplicationGate | None) -> None:
        self._producing.replication = gate
        self._fetching.replication = gate  # (it is a ReadGate too: fetches and offsets of followed partitions)
        self._metadata.replication = gate

    def roles_changed(self, topic: str, partition: int) -> None:
        """This broker's role in C{topic}-C{partition} changed: held WAIT_FETCHes on it are answered if they can
        be now (NotLeader, on a follower)."""
        self._fetching.roles_changed(topic, partition)

    @property
    def cluster(self) -> ClusterSource | None:
        """The cluster this broker describes in CLUSTER_METADATA: None (no ZooKeeper) for itself alone."""
        return self._metadata.cluster

    @cluster.setter
    def cluster(self, cluster: ClusterSource | None) -> None:
        self._metadata.cluster = cluster

    @property
    def controller_id(self) -> Callable[[], int] | None:
        """Who the controller is, as this broker knows (CLUSTER_METADATA_V2); None: no controller runs here."""
        return self._metadata.controller_id

    @controller_id.setter
    def controller_id(self, controller_id: Callable[[], int] | None) -> None:
        self._metadata.controller_id = controller_id
