# -*- test-case-name: tests.protocol.test_authorization -*-
"""What each request needs of the ACLs, and the broker's check of it (L{RequestGuard}): docs/security.md's table.

L{REQUEST_ACLS} is the table, one row per request type: the operation, on which resource.  A request naming
several topics (MULTIPRODUCE, MULTIFETCH, WAIT_FETCH, ACK_PRODUCE) needs the operation on each, and is refused
whole if one is missing.  A produce to a topic the cluster does not have yet creates it, so it needs Create
on the cluster or the topic too (as Kafka's auto-creation does).  METADATA, CLUSTER_METADATA and
CLUSTER_METADATA_V2 are never refused: a topic the principal may not Describe is answered as a topic that
does not exist (names do not leak), and left out of a listing.

A refusal is L{TopicAuthorizationFailed} or L{ClusterAuthorizationFailed}, answered with its code (the
nearest 0.7 code to a 0.7 request type); a fire-and-forget produce refused is dropped, and logged at most once
a minute with the count.  Every refusal is counted by (operation, resource type) in L{RequestGuard.refusals}.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import attrs
from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.errors import (
    NO_ERROR,
    AuthorizationFailed,
    ClusterAuthorizationFailed,
    InvalidTopic,
    TopicAuthorizationFailed,
)
from twlog.protocol import codec
from twlog.protocol import replication_codec as replication
from twlog.protocol import sasl_codec as sasl
from twlog.protocol.admission import EventLog
from twlog.protocol.replica_status_codec import ReplicaStatusRequest
from twlog.protocol.responses import TopicLayout, TopicMetadata
from twlog.security.acls import CLUSTER_NAME, Authorizer, Operation, ResourceType

__all__ = ["REQUEST_ACLS", "REQUEST_KINDS", "AclSource", "RequestGuard", "request_topics"]

_TOPIC, _CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER

#: Request type -> (its name, the operation it needs, on which resource types: any one of them will do).  An
#: operation None: no ACL needed (SASL's, which the connection answers itself: twlog.protocol.authentication).
#: A type not here is refused to everyone.
REQUEST_ACLS: dict[int, tuple[str, Operation | None, tuple[ResourceType, ...]]] = {
    codec.PRODUCE: ("PRODUCE", Operation.WRITE, (_TOPIC,)),
    codec.FETCH: ("FETCH", Operation.READ, (_TOPIC,)),
    codec.MULTIFETCH: ("MULTIFETCH", Operation.READ, (_TOPIC,)),
    codec.MULTIPRODUCE: ("MULTIPRODUCE", Operation.WRITE, (_TOPIC,)),
    codec.OFFSETS: ("OFFSETS", Operation.DESCRIBE, (_TOPIC,)),
    codec.ACK_PRODUCE: ("ACK_PRODUCE", Operation.WRITE, (_TOPIC,)),
    codec.WAIT_FETCH: ("WAIT_FETCH", Operation.READ, (_TOPIC,)),
    codec.METADATA: ("METADATA", Operation.DESCRIBE, (_TOPIC,)),
    codec.CLUSTER_METADATA: ("CLUSTER_METADATA", Operation.DESCRIBE, (_TOPIC,)),
    codec.CREATE_TOPIC: ("CREATE_TOPIC", Operation.CREATE, (_CLUSTER, _TOPIC)),
    codec.BOUNDARIES: ("BOUNDARIES", Operation.DESCRIBE, (_TOPIC,)),
    codec.DELETE_TOPIC: ("DELETE_TOPIC", Operation.DELETE, (_TOPIC,)),
    replication.REPLICA_FETCH: ("REPLICA_FETCH", Operation.CLUSTER_ACTION, (_CLUSTER,)),
    replication.EPOCH_END_OFFSET: ("EPOCH_END_OFFSET", Operation.CLUSTER_ACTION, (_CLUSTER,)),
    replication.CLUSTER_METADATA_V2: ("CLUSTER_METADATA_V2", Operation.DESCRIBE, (_TOPIC,)),
    replication.REPLICA_STATUS: ("REPLICA_STATUS", Operation.CLUSTER_ACTION, (_CLUSTER,)),
    sasl.SASL_HANDSHAKE: ("SASL_HANDSHAKE", None, ()),
    sasl.SASL_AUTHENTICATE: ("SASL_AUTHENTICATE", None, ()),
}

#: The request types that are answered, never refused: topics not described are hidden in their answers.
HIDING = frozenset({codec.METADATA, codec.CLUSTER_METADATA, replication.CLUSTER_METADATA_V2})
PRODUCING = frozenset({codec.PRODUCE, codec.MULTIPRODUCE, codec.ACK_PRODUCE})

#: Request class -> request type.
REQUEST_KINDS: dict[type, int] = {
    codec.ProduceRequest: codec.PRODUCE, codec.FetchRequest: codec.FETCH, codec.MultiFetchRequest: codec.MULTIFETCH,
    codec.MultiProduceRequest: codec.MULTIPRODUCE, codec.OffsetsRequest: codec.OFFSETS,
    codec.AckProduceRequest: codec.ACK_PRODUCE, codec.WaitFetchRequest: codec.WAIT_FETCH,
    codec.MetadataRequest: codec.METADATA, codec.ClusterMetadataRequest: codec.CLUSTER_METADATA,
    codec.CreateTopicRequest: codec.CREATE_TOPIC, codec.BoundariesRequest: codec.BOUNDARIES,
    codec.DeleteTopicRequest: codec.DELETE_TOPIC, replication.ReplicaFetchRequest: replication.REPLICA_FETCH,
    replication.EpochEndOffsetRequest: replication.EPOCH_END_OFFSET,
    replication.ClusterMetadataV2Request: replication.CLUSTER_METADATA_V2,
    ReplicaStatusRequest: replication.REPLICA_STATUS,
    sasl.SaslHandshakeRequest: sasl.SASL_HANDSHAKE, sasl.SaslAuthenticateRequest: sasl.SASL_AUTHENTICATE,
}


class AclSource(Protocol):
    """What decides (L{twlog.coord.acls.AclCache}, or a L{twlog.security.acls.Authorizer} in tests)."""

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether C{principal} from C{host} may do C{operation} on the resource."""


class Connection(Protocol):
    """What the guard reads of a connection (L{twlog.protocol.connection.BrokerProtocol})."""

    principal: str
    host: str
    peer: str


def request_topics(request: object) -> tuple[str, ...]:
    """The topics a request names (none for the cluster's requests)."""
    if isinstance(request, (codec.MultiProduceRequest, codec.AckProduceRequest)):
        return tuple(dict.fromkeys(p.topic for p in request.produces))
    if isinstance(request, (codec.MultiFetchRequest, codec.WaitFetchRequest)):
        return tuple(dict.fromkeys(f.topic for f in request.fetches))
    if isinstance(request, (codec.MetadataRequest, codec.ClusterMetadataRequest, replication.ClusterMetadataV2Request)):
        return tuple(request.topics)
    topic = getattr(request, "topic", None)
    return () if topic is None or isinstance(request, replication.REPLICATION_REQUESTS) else (topic,)


class RequestGuard:
    """Checks each request against L{REQUEST_ACLS} before its handler runs (the broker's C{--acls})."""

    _log = Logger()

    def __init__(self, acls: AclSource, clock: IReactorTime, count_error: Callable[[int, int], object],
                 existing: Callable[[str], bool], partitions_for: Callable[[str], int]) -> None:
        """@param existing: whether the cluster has a topic (a produce to one it has not creates it).
        @param partitions_for: the partition count METADATA gives a topic that does not exist."""
        self.acls = acls
        self._count_error = count_error
        self._existing = existing
        self._partitions_for = partitions_for
        #: Refusals, by (operation, resource type) names: for the metrics.
        self.refusals: dict[tuple[str, str], int] = {}
        self.dropped = EventLog(clock, self._log, "dropped {count} fire-and-forget produce(s) the ACLs refuse, the "
                                "last from {principal} at {peer}: {error}")

    @classmethod
    def of_broker(cls, broker) -> RequestGuard:
        """The guard of a L{twlog.protocol.server.Broker} started with C{--acls}: it allows only the super users
        until its L{acls} are set to the ACLs read from ZooKeeper (fail closed)."""
        config, logs = broker.config, broker.logs
        known: set[str] = set()  # topics seen to exist (a topic deleted here is forgotten)
        logs.add_delete_listener(known.discard)

        def existing(topic: str) -> bool:
            if topic not in known:
                cluster = broker.cluster
                if topic in logs.topics() or (cluster is not None and topic in cluster.topics()):
                    known.add(topic)
            return topic in known

        return cls(Authorizer((), config.super_users), broker.clock, broker.count_error, existing,
                   config.log.partitions_for)

    def handler(self, request: object, handler: Callable[..., Any], connection: Connection) -> Callable[..., Any]:
        """The handler to run for C{request} on C{connection}: C{handler}, or one answering its refusal."""
        kind = REQUEST_KINDS.get(type(request))
        if kind is None:  # a request type the table does not name (yet): refused, whoever asks (fail closed)
            refusal = self._refused(ClusterAuthorizationFailed, Operation.ALL, _CLUSTER, CLUSTER_NAME, connection)
            return lambda request, peer: _raise(refusal)
        if REQUEST_ACLS[kind][1] is None:  # needs no ACL
            return handler
        if kind in HIDING:
            return lambda request, peer: maybeDeferred(handler, request, peer).addCallback(
                self._hide, kind, bool(request.topics), connection)
        refusal = self._check(request, kind, connection)
        if refusal is None:
            return handler
        if not codec.expects_response(request):
            return lambda request, peer: self._drop(kind, refusal, connection)
        return lambda request, peer: _raise(refusal)

    def allows_produce(self, topic: str, connection: Connection) -> bool:
        """Whether the ACLs let C{connection} PRODUCE to C{topic}, counting nothing (the bulk path asks once per
        run of frames, and hands a refused run to the per-frame path, which refuses and counts each frame)."""
        _, operation, resource_types = REQUEST_ACLS[codec.PRODUCE]
        return any(self._allowed(connection, operation, t, CLUSTER_NAME if t is _CLUSTER else topic)
                   for t in resource_types) and (self._existing(topic) or self._may_create(connection, topic))

    def _allowed(self, connection: Connection, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self.acls.authorize(connection.principal, connection.host, operation, resource_type, name)

    def _check(self, request: object, kind: int, connection: Connection) -> AuthorizationFailed | None:
        _, operation, resource_types = REQUEST_ACLS[kind]
        if resource_types == (_CLUSTER,):
            if self._allowed(connection, operation, _CLUSTER, CLUSTER_NAME):
                return None
            return self._refused(ClusterAuthorizationFailed, operation, _CLUSTER, CLUSTER_NAME, connection)
        for topic in request_topics(request):
            if not any(self._allowed(connection, operation, t, CLUSTER_NAME if t is _CLUSTER else topic)
                       for t in resource_types):
                return self._refused(TopicAuthorizationFailed, operation, _TOPIC, topic, connection)
            if kind in PRODUCING and not self._existing(topic) and not self._may_create(connection, topic):
                return self._refused(TopicAuthorizationFailed, Operation.CREATE, _TOPIC, topic, connection)
        return None

    def _may_create(self, connection: Connection, topic: str) -> bool:
        return (self._allowed(connection, Operation.CREATE, _CLUSTER, CLUSTER_NAME)
                or self._allowed(connection, Operation.CREATE, _TOPIC, topic))

    def _refused(self, error: type[AuthorizationFailed], operation: Operation, resource_type: ResourceType,
                 name: str, connection: Connection) -> AuthorizationFailed:
        key = (operation.value, resource_type.value)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        return error(f"{connection.principal} (from {connection.host}) may not {operation.value} "
                     f"{resource_type.value} {name}")

    def _drop(self, kind: int, refusal: AuthorizationFailed, connection: Connection) -> None:
        self._count_error(kind, refusal.code)
        self.dropped.record(principal=connection.principal, peer=connection.peer, error=refusal)

    def _described(self, connection: Connection) -> Callable[[str], bool]:
        return lambda topic: self._allowed(connection, Operation.DESCRIBE, _TOPIC, topic)

    def _hide(self, frame: bytes, kind: int, asked: bool, connection: Connection) -> bytes:
        """C{frame} (a METADATA, CLUSTER_METADATA or _V2 answer) with the topics not described hidden (C{asked}:
        the request named its topics; else it listed them all)."""
        if not isinstance(frame, bytes) or int.from_bytes(frame[:2], "big", signed=True) != NO_ERROR:
            return frame
        if kind == codec.METADATA:
            answer = codec.decode_metadata_response(frame)
            topics = self._keep(answer.topics, asked, connection,
                                lambda t: TopicMetadata(t.topic, NO_ERROR, self._partitions_for(t.topic)))
            return codec.encode_metadata_response(NO_ERROR, _replace(answer, topics))
        if kind == codec.CLUSTER_METADATA:
            answer = codec.decode_cluster_metadata_response(frame)
            topics = self._keep(answer.topics, asked, connection, lambda t: TopicLayout(t.topic, NO_ERROR))
            return codec.encode_cluster_metadata_response(NO_ERROR, _replace(answer, topics))
        answer = replication.decode_cluster_metadata_v2_response(frame)
        topics = self._keep(answer.topics, asked, connection, lambda t: TopicLayout(t.topic, NO_ERROR))
        return replication.encode_cluster_metadata_v2_response(NO_ERROR, _replace(answer, topics))

    def _keep(self, topics: Iterable, asked: bool, connection: Connection, unknown: Callable[[Any], Any]) -> tuple:
        """C{topics}: those described kept (and invalid names, which say nothing of the cluster); the others
        answered as C{unknown(topic)} (a topic that does not exist) when C{asked} by name, else left out."""
        described = self._described(connection)
        kept = []
        for topic in topics:
            if topic.error == InvalidTopic.code or described(topic.topic):
                kept.append(topic)
            elif asked:
                kept.append(unknown(topic))
        return tuple(kept)


def _replace(answer, topics: tuple):
    return attrs.evolve(answer, topics=topics)


def _raise(error: Exception) -> None:
    raise error
