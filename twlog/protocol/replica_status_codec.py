# -*- test-case-name: tests.protocol.test_replica_status_codec -*-
"""Type 15 REPLICA_STATUS on the wire (pure: no I/O, no Twisted).

docs/protocol.md, "15 REPLICA_STATUS", is the reference.  A tool (C{twlog topics describe}) asks a
partition's leader what it knows of its replicas: its leader epoch, the high watermark, its own end,
and each follower's end and time since it was last caught up.  L{twlog.protocol.replication_codec}
reads, encodes and describes the request with the other replication types; its values, the broker's
encoder and the client's decoder are here.  Every malformed or truncated input raises
L{MalformedRequest} (requests) or L{ProtocolViolation} (responses), never C{struct.error}.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from twlog.protocol.primitives import I16, I32, done, need, read_int16, read_many, read_str, write_str
from twlog.protocol.responses import peer_violation

__all__ = [
    "REPLICA_STATUS", "UNKNOWN", "FollowerStatus", "ReplicaStatus", "ReplicaStatusRequest", "ReplicaStatusResponse",
    "decode_replica_status_response", "describe_replica_status", "encode_replica_status_request",
    "encode_replica_status_response", "read_replica_status_request",
]

REPLICA_STATUS = 15
#: An end, offset or time the leader does not know (or cannot give: an error).
UNKNOWN = -1

_STATUS_HEAD = struct.Struct(">ihiqqh")  # partition, error, leader epoch, high watermark, leader end, follower count
_FOLLOWER = struct.Struct(">iqq")  # replica id, end, milliseconds since caught up


@attrs.frozen
class ReplicaStatusRequest:
    """Type 15: what the leader of each of C{topic}'s C{partitions} knows of their replicas."""

    topic: str
    partitions: tuple[int, ...]


@attrs.frozen
class FollowerStatus:
    """One follower as its leader knows it: its end (its latest REPLICA_FETCH's offset) and the milliseconds
    since it was last caught up (fetched at or past the leader's end); L{UNKNOWN} when the leader does not know."""

    replica: int
    end: int
    lag_ms: int


@attrs.frozen
class ReplicaStatus:
    """One partition's answer: the leader's epoch, high watermark and written end, and its followers in replica
    order; on an error (NotLeader: the broker does not lead it) the offsets are L{UNKNOWN} and there are none."""

    partition: int
    error: int
    leader_epoch: int = UNKNOWN
    high_watermark: int = UNKNOWN
    leader_end: int = UNKNOWN
    followers: tuple[FollowerStatus, ...] = ()


@attrs.frozen
class ReplicaStatusResponse:
    """REPLICA_STATUS's response: the outer error and one answer per partition, in request order."""

    error: int
    partitions: tuple[ReplicaStatus, ...] = ()


# -- the request ---------------------------------------------------------------------------


def _read_partition_number(buf: bytes, pos: int) -> tuple[int, int]:
    need(buf, pos, 4, "partition")
    return I32.unpack_from(buf, pos)[0], pos + 4


def read_replica_status_request(frame: bytes, pos: int) -> tuple[ReplicaStatusRequest, int]:
    """The body of a REPLICA_STATUS request at C{pos}: C{[string topic][int16 n][n × int32 partition]}."""
    topic, pos = read_str(frame, pos)
    count, pos = read_int16(frame, pos)
    partitions, pos = read_many(frame, pos, count, _read_partition_number)
    return ReplicaStatusRequest(topic, partitions), pos


def encode_replica_status_request(request: ReplicaStatusRequest) -> bytes:
    """The frame (without size prefix) of C{request}."""
    return b"".join([I16.pack(REPLICA_STATUS), write_str(request.topic), I16.pack(len(request.partitions)),
                     struct.pack(f">{len(request.partitions)}i", *request.partitions)])


def describe_replica_status(request: ReplicaStatusRequest) -> str:
    """A short human description of C{request}, for error messages and logs."""
    return f"REPLICA_STATUS {request.topic} partitions {', '.join(map(str, request.partitions)) or '(none)'}"


# -- the response --------------------------------------------------------------------------


def encode_replica_status_response(error: int, partitions: Sequence[ReplicaStatus]) -> bytes:
    """REPLICA_STATUS's response frame (without size prefix): C{[int16 error][int16 count]}, then per partition
    C{[int32][int16][int32][int64][int64][int16 n]} and n × C{[int32 replica][int64 end][int64 lag ms]}."""
    out = [I16.pack(error), I16.pack(len(partitions))]
    for p in partitions:
        out.append(_STATUS_HEAD.pack(p.partition, p.error, p.leader_epoch, p.high_watermark, p.leader_end,
                                     len(p.followers)))
        out += [_FOLLOWER.pack(f.replica, f.end, f.lag_ms) for f in p.followers]
    return b"".join(out)


def _read_follower(frame: bytes, pos: int) -> tuple[FollowerStatus, int]:
    need(frame, pos, _FOLLOWER.size, "follower status")
    return FollowerStatus(*_FOLLOWER.unpack_from(frame, pos)), pos + _FOLLOWER.size


def _read_status(frame: bytes, pos: int) -> tuple[ReplicaStatus, int]:
    need(frame, pos, _STATUS_HEAD.size, "partition status")
    *head, count = _STATUS_HEAD.unpack_from(frame, pos)
    followers, pos = read_many(frame, pos + _STATUS_HEAD.size, count, _read_follower)
    return ReplicaStatus(*head, followers), pos


@peer_violation
def decode_replica_status_response(frame: bytes) -> ReplicaStatusResponse:
    """REPLICA_STATUS's response: the outer error and one answer per partition (none in an error-only frame)."""
    error, pos = read_int16(frame, 0)
    if pos == len(frame):
        return ReplicaStatusResponse(error)
    count, pos = read_int16(frame, pos)
    partitions, pos = read_many(frame, pos, count, _read_status)
    done(frame, pos, "replica status response")
    return ReplicaStatusResponse(error, partitions)


#: (for L{twlog.protocol.replication_codec}'s table of decoders)
RESPONSE_DECODERS = {ReplicaStatusRequest: decode_replica_status_response}
