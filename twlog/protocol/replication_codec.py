# -*- test-case-name: tests.protocol.test_replication_codec -*-
"""The replication requests on the wire, types 12 to 15 (pure: no I/O, no Twisted).

docs/protocol.md, "Replication requests", is the reference:

  - 12 REPLICA_FETCH: a follower fetches from the leader, naming its replica id and, per
    partition, the leader epoch it follows; each part carries the leader's high watermark,
    end and log start and the base offset of the leader segment the bytes come from, then the
    message-set bytes (sent with sendfile, so the headers are
    encoded apart from the bytes: L{replica_fetch_response_header}, L{replica_fetch_part_header}).
  - 13 EPOCH_END_OFFSET: KIP-101's OffsetsForLeaderEpoch: where a leader epoch ends on the leader.
  - 14 CLUSTER_METADATA_V2: CLUSTER_METADATA (type 8) that also describes replicated topics
    (leader, leader epoch, replicas, ISR per partition).  Type 8 keeps its layout, so the twlog
    clients that read it keep working; it does not list replicated topics.
  - 15 REPLICA_STATUS: what a partition's leader knows of its replicas (its values and coders are in
    L{twlog.protocol.replica_status_codec}; C{twlog topics describe} asks it).

L{twlog.protocol.codec} decodes, encodes and describes these requests with the others
(L{read_request}, L{encode_request}, L{describe_request} here); the values, the broker's
encoders and the clients' decoders are here.  Every malformed or truncated input raises
L{MalformedRequest} (requests) or L{ProtocolViolation} (responses), never C{struct.error}.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from twlog.errors import NO_ERROR, MalformedRequest
from twlog.protocol import replica_status_codec as status
from twlog.protocol.primitives import (
    I16,
    I32,
    done,
    need,
    read_int16,
    read_many,
    read_str,
    write_str,
)
from twlog.protocol.responses import (
    VIEW_STANDALONE,
    BrokerAddress,
    TopicLayout,
    peer_violation,
    read_broker,
    read_holder,
)

REPLICA_FETCH = 12
EPOCH_END_OFFSET = 13
CLUSTER_METADATA_V2 = 14

#: An epoch, or an offset, the leader does not know (EPOCH_END_OFFSET's UNDEFINED answer), as in Kafka.
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
#: A leader epoch of -1 in a request: do not check the epoch (tools, not followers).
ANY_EPOCH = -1
#: The leader, or the controller, of no broker (none is live, or none is elected yet).
NO_BROKER = -1

#: CLUSTER_METADATA_V2's topic kinds: a 0.7 topic (partitions per broker) or a replicated one.
KIND_07 = 0
KIND_REPLICATED = 1

_RF_HEAD = struct.Struct(">iiih")  # replica id, max wait ms, min bytes, count
_RF_TAIL = struct.Struct(">iiqi")  # partition, leader epoch, fetch offset, max bytes
_RF_PART = struct.Struct(">hqqqqi")  # error, high watermark, leader end, log start, segment base, message set size
_EPOCH_QUERY = struct.Struct(">iii")  # partition, current leader epoch, leader epoch
_EPOCH_ANSWER = struct.Struct(">hiq")  # error, leader epoch, end offset
_V2_HEAD = struct.Struct(">ibi")  # answering broker id, view, controller id
_PARTITION_HEAD = struct.Struct(">ihii")  # partition, error, leader, leader epoch


# -- requests ---------------------------------------------------------------------------


@attrs.frozen
class ReplicaFetch:
    """One partition of a REPLICA_FETCH: the follower's end (C{offset}) and the leader epoch it follows."""

    topic: str
    partition: int
    leader_epoch: int
    offset: int
    max_bytes: int


@attrs.frozen
class ReplicaFetchRequest:
    """Type 12: a follower (broker C{replica_id}) fetches its partitions from their leader, held as a
    WAIT_FETCH until C{min_bytes} are there past the offsets or C{max_wait_ms} passed."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    fetches: tuple[ReplicaFetch, ...]


@attrs.frozen
class EpochQuery:
    """One partition of an EPOCH_END_OFFSET: where does C{leader_epoch} end?  C{current_leader_epoch} is the
    epoch the asker believes the leader's (fencing, as KIP-320), or L{ANY_EPOCH}."""

    topic: str
    partition: int
    current_leader_epoch: int
    leader_epoch: int


@attrs.frozen
class EpochEndOffsetRequest:
    """Type 13 (KIP-101's OffsetsForLeaderEpoch): the end offset of a leader epoch, per partition."""

    queries: tuple[EpochQuery, ...]


@attrs.frozen
class ClusterMetadataV2Request:
    """Type 14: CLUSTER_METADATA for 0.7 and replicated topics alike (C{topics}: all when empty)."""

    topics: tuple[str, ...] = ()


REPLICA_STATUS = status.REPLICA_STATUS
ReplicationRequest = (ReplicaFetchRequest | EpochEndOffsetRequest | ClusterMetadataV2Request
                      | status.ReplicaStatusRequest)
REPLICATION_REQUESTS = (ReplicaFetchRequest, EpochEndOffsetRequest, ClusterMetadataV2Request,
                        status.ReplicaStatusRequest)
TYPES = frozenset((REPLICA_FETCH, EPOCH_END_OFFSET, CLUSTER_METADATA_V2, REPLICA_STATUS))


def _read_replica_fetch(buf: bytes, pos: int) -> tuple[ReplicaFetch, int]:
    topic, pos = read_str(buf, pos)
    need(buf, pos, _RF_TAIL.size, "replica fetch")
    return ReplicaFetch(topic, *_RF_TAIL.unpack_from(buf, pos)), pos + _RF_TAIL.size


def _read_epoch_query(buf: bytes, pos: int) -> tuple[EpochQuery, int]:
    topic, pos = read_str(buf, pos)
    need(buf, pos, _EPOCH_QUERY.size, "epoch query")
    return EpochQuery(topic, *_EPOCH_QUERY.unpack_from(buf, pos)), pos + _EPOCH_QUERY.size


def read_request(kind: int, frame: bytes, pos: int) -> tuple[ReplicationRequest, int]:
    """The body of a request of type C{kind} (one of L{TYPES}) at C{pos}; the caller checks for trailing bytes.

    @raise MalformedRequest: a truncated body or a negative count.
    """
    if kind == REPLICA_FETCH:
        need(frame, pos, _RF_HEAD.size, "replica fetch request")
        replica_id, max_wait_ms, min_bytes, count = _RF_HEAD.unpack_from(frame, pos)
        fetches, pos = read_many(frame, pos + _RF_HEAD.size, count, _read_replica_fetch)
        return ReplicaFetchRequest(replica_id, max_wait_ms, min_bytes, fetches), pos
    if kind == REPLICA_STATUS:
        return status.read_replica_status_request(frame, pos)
    count, pos = read_int16(frame, pos)
    if kind == EPOCH_END_OFFSET:
        queries, pos = read_many(frame, pos, count, _read_epoch_query)
        return EpochEndOffsetRequest(queries), pos
    if kind == CLUSTER_METADATA_V2:
        topics, pos = read_many(frame, pos, count, read_str)
        return ClusterMetadataV2Request(topics), pos
    raise MalformedRequest(f"unknown request type {kind}")


def encode_request(request: ReplicationRequest) -> bytes:
    """The frame (without size prefix) of C{request}."""
    if isinstance(request, ReplicaFetchRequest):
        head = _RF_HEAD.pack(request.replica_id, request.max_wait_ms, request.min_bytes, len(request.fetches))
        return b"".join([I16.pack(REPLICA_FETCH), head, *(
            write_str(f.topic) + _RF_TAIL.pack(f.partition, f.leader_epoch, f.offset, f.max_bytes)
            for f in request.fetches)])
    if isinstance(request, EpochEndOffsetRequest):
        return b"".join([I16.pack(EPOCH_END_OFFSET), I16.pack(len(request.queries)), *(
            write_str(q.topic) + _EPOCH_QUERY.pack(q.partition, q.current_leader_epoch, q.leader_epoch)
            for q in request.queries)])
    if isinstance(request, ClusterMetadataV2Request):
        return b"".join([I16.pack(CLUSTER_METADATA_V2), I16.pack(len(request.topics)), *map(write_str, request.topics)])
    if isinstance(request, status.ReplicaStatusRequest):
        return status.encode_replica_status_request(request)
    raise TypeError(f"not a replication request: {request!r}")


def describe_request(request: ReplicationRequest) -> str:
    """A short human description of C{request}, for error messages and logs."""
    if isinstance(request, ReplicaFetchRequest):
        parts = ", ".join(f"{f.topic}-{f.partition}@{f.offset} (epoch {f.leader_epoch})" for f in request.fetches)
        return f"REPLICA_FETCH by replica {request.replica_id} {parts}"
    if isinstance(request, EpochEndOffsetRequest):
        parts = ", ".join(f"{q.topic}-{q.partition} epoch {q.leader_epoch}" for q in request.queries)
        return f"EPOCH_END_OFFSET {parts}"
    if isinstance(request, status.ReplicaStatusRequest):
        return status.describe_replica_status(request)
    return "CLUSTER_METADATA_V2 " + (", ".join(request.topics) or "(all topics)")


# -- responses: values ------------------------------------------------------------------


@attrs.frozen
class ReplicaFetchPart:
    """One partition's part of a REPLICA_FETCH response: the leader's offsets and the message-set bytes.

    The three offsets are -1 when the leader cannot give them (an error other than 1, 7 or 8).
    C{segment_base} is the base offset of the leader's segment holding the fetch offset, the one the bytes
    come from (they never cross into the next), or -1 on any error."""

    error: int
    high_watermark: int
    leader_end: int
    log_start: int
    segment_base: int = -1
    messages: bytes = b""


@attrs.frozen
class ReplicaFetchResponse:
    """REPLICA_FETCH's response: the outer error and one part per fetch, in request order."""

    error: int
    parts: tuple[ReplicaFetchPart, ...] = ()


@attrs.frozen
class EpochEndOffset:
    """One answer of EPOCH_END_OFFSET: the largest epoch the leader knows at or below the one asked about,
    and where it ends (the next epoch's first offset, or the leader's end for its current epoch);
    L{UNDEFINED_EPOCH} and L{UNDEFINED_OFFSET} when it knows none (or on an error)."""

    error: int
    leader_epoch: int
    end_offset: int


@attrs.frozen
class EpochEndOffsetResponse:
    """EPOCH_END_OFFSET's response: the outer error and one answer per query, in request order."""

    error: int
    answers: tuple[EpochEndOffset, ...] = ()


@attrs.frozen
class PartitionState:
    """A replicated partition as the controller last wrote it (its state znode): C{leader} is L{NO_BROKER}
    (and C{error} LeaderNotAvailable) when it has no live leader; C{replicas} in preference order."""

    partition: int
    error: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@attrs.frozen
class ReplicatedLayout:
    """A replicated topic's partitions, by number (C{0} to C{P-1})."""

    topic: str
    error: int
    partitions: tuple[PartitionState, ...] = ()


@attrs.frozen
class ClusterMetadataV2Response:
    """CLUSTER_METADATA_V2's response: as L{twlog.protocol.responses.ClusterMetadataResponse}, plus the
    controller, with each topic a L{TopicLayout} (0.7: holders) or a L{ReplicatedLayout}."""

    broker_id: int
    view: int
    controller_id: int
    brokers: tuple[BrokerAddress, ...]
    topics: tuple[TopicLayout | ReplicatedLayout, ...]
    error: int = NO_ERROR

    @property
    def addresses(self) -> dict[int, tuple[str, int]]:
        """The live brokers, id -> (host, port)."""
        return {b.broker_id: (b.host, b.port) for b in self.brokers}

    def layout(self, topic: str) -> TopicLayout | ReplicatedLayout | None:
        """C{topic}'s entry, if the response has one."""
        return next((t for t in self.topics if t.topic == topic), None)


# -- responses: encoding (broker side) ----------------------------------------------------


def replica_fetch_response_header(error: int, lengths: Sequence[int]) -> bytes:
    """REPLICA_FETCH's outer header, size prefix included: C{[int32 size][int16 error][int16 count]}.

    The parts follow, each L{replica_fetch_part_header} and then its C{lengths[i]} bytes of message set.
    """
    return I32.pack(4 + sum(_RF_PART.size + n for n in lengths)) + I16.pack(error) + I16.pack(len(lengths))


def replica_fetch_part_header(error: int, high_watermark: int, leader_end: int, log_start: int, segment_base: int,
                              length: int) -> bytes:
    """One part's header: C{[int16 error][int64 high watermark][int64 leader end][int64 log start]
    [int64 segment base][int32 n]}."""
    return _RF_PART.pack(error, high_watermark, leader_end, log_start, segment_base, length)


def encode_replica_fetch_response(error: int, parts: Sequence[ReplicaFetchPart]) -> bytes:
    """REPLICA_FETCH's whole response frame (without size prefix), the bytes copied: for tests and tools."""
    out = [replica_fetch_response_header(error, [len(p.messages) for p in parts])[4:]]
    for p in parts:
        out += [replica_fetch_part_header(p.error, p.high_watermark, p.leader_end, p.log_start, p.segment_base,
                                          len(p.messages)), p.messages]
    return b"".join(out)


def encode_epoch_end_offset_response(error: int, answers: Sequence[EpochEndOffset]) -> bytes:
    """EPOCH_END_OFFSET's response frame: C{[int16 error][int16 n]} and per query C{[int16][int32][int64]}."""
    return b"".join([I16.pack(error), I16.pack(len(answers)),
                     *(_EPOCH_ANSWER.pack(a.error, a.leader_epoch, a.end_offset) for a in answers)])


def _write_ids(ids: Sequence[int]) -> bytes:
    return I16.pack(len(ids)) + struct.pack(f">{len(ids)}i", *ids)


def encode_cluster_metadata_v2_response(error: int, cluster: ClusterMetadataV2Response) -> bytes:
    """CLUSTER_METADATA_V2's response frame (C{error} is written, not C{cluster.error}); docs/protocol.md, type 14."""
    parts = [I16.pack(error), _V2_HEAD.pack(cluster.broker_id, cluster.view, cluster.controller_id),
             I16.pack(len(cluster.brokers))]
    for b in cluster.brokers:
        parts += [I32.pack(b.broker_id), write_str(b.host), I32.pack(b.port)]
    parts.append(I16.pack(len(cluster.topics)))
    for t in cluster.topics:
        parts += [write_str(t.topic), I16.pack(t.error)]
        if isinstance(t, ReplicatedLayout):
            parts += [bytes([KIND_REPLICATED]), I16.pack(len(t.partitions))]
            for p in t.partitions:
                parts += [_PARTITION_HEAD.pack(p.partition, p.error, p.leader, p.leader_epoch),
                          _write_ids(p.replicas), _write_ids(p.isr)]
        else:
            parts += [bytes([KIND_07]), I16.pack(len(t.holders))]
            parts += [struct.pack(">ii", broker_id, count) for broker_id, count in t.holders]
    return b"".join(parts)


# -- responses: decoding (client side) ----------------------------------------------------


def _read_part(frame: bytes, pos: int) -> tuple[ReplicaFetchPart, int]:
    need(frame, pos, _RF_PART.size, "replica fetch part")
    error, high_watermark, leader_end, log_start, segment_base, size = _RF_PART.unpack_from(frame, pos)
    pos += _RF_PART.size
    need(frame, pos, size, "replica fetch message set")
    return (ReplicaFetchPart(error, high_watermark, leader_end, log_start, segment_base, frame[pos : pos + size]),
            pos + size)


@peer_violation
def decode_replica_fetch_response(frame: bytes) -> ReplicaFetchResponse:
    """REPLICA_FETCH's response: the outer error and its parts (none in an error-only frame)."""
    error, pos = read_int16(frame, 0)
    if pos == len(frame):
        return ReplicaFetchResponse(error)
    count, pos = read_int16(frame, pos)
    parts, pos = read_many(frame, pos, count, _read_part)
    done(frame, pos, "replica fetch response")
    return ReplicaFetchResponse(error, parts)


def _read_answer(frame: bytes, pos: int) -> tuple[EpochEndOffset, int]:
    need(frame, pos, _EPOCH_ANSWER.size, "epoch end offset")
    return EpochEndOffset(*_EPOCH_ANSWER.unpack_from(frame, pos)), pos + _EPOCH_ANSWER.size


@peer_violation
def decode_epoch_end_offset_response(frame: bytes) -> EpochEndOffsetResponse:
    """EPOCH_END_OFFSET's response: the outer error and one answer per query (none in an error-only frame)."""
    error, pos = read_int16(frame, 0)
    if pos == len(frame):
        return EpochEndOffsetResponse(error)
    count, pos = read_int16(frame, pos)
    answers, pos = read_many(frame, pos, count, _read_answer)
    done(frame, pos, "epoch end offset response")
    return EpochEndOffsetResponse(error, answers)


def _read_ids(frame: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    count, pos = read_int16(frame, pos)
    need(frame, pos, 4 * count, "broker ids")
    return struct.unpack_from(f">{count}i", frame, pos), pos + 4 * count


def _read_partition(frame: bytes, pos: int) -> tuple[PartitionState, int]:
    need(frame, pos, _PARTITION_HEAD.size, "partition state")
    partition, error, leader, leader_epoch = _PARTITION_HEAD.unpack_from(frame, pos)
    replicas, pos = _read_ids(frame, pos + _PARTITION_HEAD.size)
    isr, pos = _read_ids(frame, pos)
    return PartitionState(partition, error, leader, leader_epoch, replicas, isr), pos


def _read_topic(frame: bytes, pos: int) -> tuple[TopicLayout | ReplicatedLayout, int]:
    topic, pos = read_str(frame, pos)
    error, pos = read_int16(frame, pos)
    need(frame, pos, 1, "topic kind")
    kind = frame[pos]
    count, pos = read_int16(frame, pos + 1)
    if kind == KIND_07:
        holders, pos = read_many(frame, pos, count, read_holder)
        return TopicLayout(topic, error, holders), pos
    if kind == KIND_REPLICATED:
        partitions, pos = read_many(frame, pos, count, _read_partition)
        return ReplicatedLayout(topic, error, partitions), pos
    raise MalformedRequest(f"unknown topic kind {kind} of {topic!r}")


@peer_violation
def decode_cluster_metadata_v2_response(frame: bytes) -> ClusterMetadataV2Response:
    """CLUSTER_METADATA_V2's response: the answering broker, its view, the controller, the live brokers
    and the topics, 0.7 and replicated."""
    error, pos = read_int16(frame, 0)
    if error != NO_ERROR and pos == len(frame):
        return ClusterMetadataV2Response(-1, VIEW_STANDALONE, NO_BROKER, (), (), error)
    need(frame, pos, _V2_HEAD.size, "cluster metadata v2 response")
    broker_id, view, controller_id = _V2_HEAD.unpack_from(frame, pos)
    count, pos = read_int16(frame, pos + _V2_HEAD.size)
    brokers, pos = read_many(frame, pos, count, read_broker)
    count, pos = read_int16(frame, pos)
    topics, pos = read_many(frame, pos, count, _read_topic)
    done(frame, pos, "cluster metadata v2 response")
    return ClusterMetadataV2Response(broker_id, view, controller_id, brokers, topics, error)


RESPONSE_DECODERS = {
    ReplicaFetchRequest: decode_replica_fetch_response,
    EpochEndOffsetRequest: decode_epoch_end_offset_response,
    ClusterMetadataV2Request: decode_cluster_metadata_v2_response,
    **status.RESPONSE_DECODERS,
}

__all__ = [
    "ANY_EPOCH", "CLUSTER_METADATA_V2", "EPOCH_END_OFFSET", "KIND_07", "KIND_REPLICATED", "NO_BROKER",
    "REPLICATION_REQUESTS", "REPLICA_FETCH", "REPLICA_STATUS", "RESPONSE_DECODERS", "TYPES", "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "ClusterMetadataV2Request", "ClusterMetadataV2Response", "EpochEndOffset", "EpochEndOffsetRequest",
    "EpochEndOffsetResponse", "EpochQuery", "PartitionState", "ReplicaFetch", "ReplicaFetchPart",
    "ReplicaFetchRequest", "ReplicaFetchResponse", "ReplicatedLayout", "ReplicationRequest",
    "decode_cluster_metadata_v2_response", "decode_epoch_end_offset_response", "decode_replica_fetch_response",
    "describe_request", "encode_cluster_metadata_v2_response", "encode_epoch_end_offset_response",
    "encode_replica_fetch_response", "encode_request", "read_request", "replica_fetch_part_header",
    "replica_fetch_response_header",
]
