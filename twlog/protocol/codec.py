# -*- test-case-name: tests.protocol.test_codec -*-
"""The wire protocol as pure functions: frames in, typed requests and responses out.

No I/O and no Twisted here, so the broker, the Twisted client and the blocking
tools share one codec.  A frame is what follows the C{int32} size prefix
(L{twisted.protocols.basic.Int32StringReceiver} strips and adds it):

  - request:  C{[int16 type][body]}
  - response: C{[int16 error][body]}

Types 0-4 keep Kafka 0.7's layouts byte for byte; 5-11 are twlog's; 12-15 are
replication's, whose values and responses are in L{twlog.protocol.replication_codec}; 16-17 SASL's
(L{twlog.protocol.sasl_codec}).  Strings
are C{[int16 length][utf-8]}.  docs/protocol.md is the reference.  Readers take
C{(buf, pos)} and return C{(value, next_pos)} (L{twlog.protocol.primitives});
every malformed or truncated input raises L{MalformedRequest}, never
C{struct.error}.

Responses (typed values, the broker's encoders, the client's decoders) live in
L{twlog.protocol.responses} and are re-exported here, so this module is the one
import for the whole protocol; L{decode_response} picks the decoder for a request.
"""

from __future__ import annotations

import struct

import attrs

from twlog.errors import MalformedRequest
from twlog.protocol import replication_codec as replication
from twlog.protocol import sasl_codec as sasl
from twlog.protocol.primitives import (
    I16,
    done,
    need,
    read_int16,
    read_int32,
    read_int64,
    read_many,
    read_str,
    write_str,
)
from twlog.protocol.responses import (
    AckProduceResponse,
    BoundariesResponse,
    ClusterMetadataResponse,
    ErrorResponse,
    FetchResult,
    MetadataResponse,
    MultiFetchResponse,
    OffsetsResponse,
    ProduceResult,
    Response,
    TopicMetadata,
    decode_ack_produce_response,
    decode_boundaries_response,
    decode_cluster_metadata_response,
    decode_error,
    decode_error_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
    encode_ack_produce_response,
    encode_boundaries_response,
    encode_cluster_metadata_response,
    encode_error_response,
    encode_metadata_response,
    encode_offsets_response,
    fetch_response_header,
    multifetch_part_header,
    multifetch_response_header,
)

PRODUCE = 0
FETCH = 1
MULTIFETCH = 2
MULTIPRODUCE = 3
OFFSETS = 4
ACK_PRODUCE = 5
WAIT_FETCH = 6
METADATA = 7
CLUSTER_METADATA = 8
CREATE_TOPIC = 9
BOUNDARIES = 10
DELETE_TOPIC = 11

#: The most positions one BOUNDARIES request may ask about.
MAX_BOUNDARY_POSITIONS = 1024

#: OFFSETS times (L{OffsetsRequest.time}): the (flushed) end of the log, and its start.
LATEST = -1
EARLIEST = -2

#: What an acknowledged produce waits for before it answers.
ACK_NONE = 0  # no response at all, as PRODUCE (fire-and-forget)
ACK_APPENDED = 1  # the messages are in the log (page cache)
ACK_FLUSHED = 2  # the messages are fsynced, and so visible to consumers
ACK_ALL = 3  # every in-sync replica holds the messages and the leader flushed them (implies ACK_FLUSHED)

_FETCH_TAIL = struct.Struct(">iqi")  # partition, offset, max bytes
_OFFSETS_TAIL = struct.Struct(">iqi")  # partition, time, max offsets
_PRODUCE_HEAD = struct.Struct(">ii")  # partition, message set size
#: Decoded message sets this large or larger are views of their frame, smaller ones copies: validating
#: a set walks it message by message, and slices of bytes are cheaper than slices of a memoryview.
VIEW_BYTES = 64 * 1024
_ACK_HEAD = struct.Struct(">bih")  # ack, timeout ms, count
_WAIT_HEAD = struct.Struct(">iih")  # max wait ms, min bytes, count
_PARTITIONS = struct.Struct(">i")  # CREATE_TOPIC's partition count
_BOUNDARIES_HEAD = struct.Struct(">ih")  # partition, count of positions


# -- values -------------------------------------------------------------------


@attrs.frozen
class ProduceRequest:
    """Type 0: append C{messages} (a message set) to a partition; no response.

    Decoded from a frame, a set of L{VIEW_BYTES} or more is a read-only
    C{memoryview} of the frame (not a copy: a 100 MB set is copied once, when
    the frame is assembled, and validated and written from there), a smaller
    one C{bytes}; built by a client, any bytes-like value.
    """

    topic: str
    partition: int
    messages: bytes | memoryview
    #: Not on the wire: set by the broker once it has validated C{messages} ahead of the handler (a large
    #: frame, checked a slice at a time): their message count, or the error the check raised.
    checked: int | Exception | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)


@attrs.frozen
class FetchRequest:
    """Type 1: up to C{max_bytes} of log from C{offset}."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@attrs.frozen
class MultiFetchRequest:
    """Type 2: several fetches answered in one response, in order."""

    fetches: tuple[FetchRequest, ...]


@attrs.frozen
class MultiProduceRequest:
    """Type 3: several produces in one request; no response."""

    produces: tuple[ProduceRequest, ...]


@attrs.frozen
class OffsetsRequest:
    """Type 4: offsets before C{time} (L{LATEST}, L{EARLIEST}, or ms since the epoch), newest first."""

    topic: str
    partition: int
    time: int
    max_offsets: int


@attrs.frozen
class AckProduceRequest:
    """Type 5: produce, then answer once every set is appended (flushed; in every in-sync replica) with its offsets."""

    ack: int
    timeout_ms: int
    produces: tuple[ProduceRequest, ...]


@attrs.frozen
class WaitFetchRequest:
    """Type 6: a multi-fetch the broker holds until C{min_bytes} are readable or C{max_wait_ms} passed."""

    max_wait_ms: int
    min_bytes: int
    fetches: tuple[FetchRequest, ...]


@attrs.frozen
class MetadataRequest:
    """Type 7: this broker's id and address, and the partition counts of C{topics} (all when empty)."""

    topics: tuple[str, ...] = ()


@attrs.frozen
class ClusterMetadataRequest:
    """Type 8: every live broker of the cluster and, for C{topics} (all when empty), which brokers hold them."""

    topics: tuple[str, ...] = ()


@attrs.frozen
class CreateTopicRequest:
    """Type 9: create C{topic} on this broker with C{partitions} partitions (its own, as in Kafka 0.7).

    Answered with an error code alone: 0 when the topic now has that many partitions here (also
    when it already had them), TopicExists when it has another count, InvalidTopic, InvalidRequest
    for a count outside 1 to L{twlog.storage.manager.MAX_PARTITIONS}.
    """

    topic: str
    partitions: int


@attrs.frozen
class BoundariesRequest:
    """Type 10: for each of C{positions} (logical byte positions), the offset of the first message at or after it.

    Answered with the offsets in the same order (L{BoundariesResponse}); a position at or past the
    flushed end gets the flushed end.  docs/protocol.md, type 10.
    """

    topic: str
    partition: int
    positions: tuple[int, ...]


@attrs.frozen
class DeleteTopicRequest:
    """Type 11: delete C{topic} on this broker: its logs, its recorded count and its ZooKeeper registration.

    Answered with an error code alone: 0 once the topic is deleted here (also when the broker did not
    hold it), InvalidTopic, StorageFailed.  docs/protocol.md, type 11.
    """

    topic: str


Request = (
    ProduceRequest
    | FetchRequest
    | MultiFetchRequest
    | MultiProduceRequest
    | OffsetsRequest
    | AckProduceRequest
    | WaitFetchRequest
    | MetadataRequest
    | ClusterMetadataRequest
    | CreateTopicRequest
    | BoundariesRequest
    | DeleteTopicRequest
    | replication.ReplicationRequest
    | sasl.SaslRequest
)


# -- requests -------------------------------------------------------------------


def _read_produce(buf: bytes | memoryview, pos: int) -> tuple[ProduceRequest, int]:
    # The usual, well-formed request in a few steps (this runs once per produced set); anything
    # short or odd goes the checked way below, which names what is wrong.
    n = len(buf)
    if pos + 2 <= n:
        length = I16.unpack_from(buf, pos)[0]
        head = pos + 2 + length
        if length >= 0 and head + 8 <= n:
            partition, size = _PRODUCE_HEAD.unpack_from(buf, head)
            end = head + 8 + size
            if 0 <= size < VIEW_BYTES and end <= n:
                try:
                    topic = str(buf[pos + 2 : head], "utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    return ProduceRequest(topic, partition, bytes(buf[head + 8 : end])), end
    topic, pos = read_str(buf, pos)
    need(buf, pos, 8, "produce request")
    partition, size = _PRODUCE_HEAD.unpack_from(buf, pos)
    pos += 8
    need(buf, pos, size, "message set")
    if size < VIEW_BYTES:  # copying a small set costs less than validating it through a view
        return ProduceRequest(topic, partition, bytes(buf[pos : pos + size])), pos + size
    return ProduceRequest(topic, partition, _view(buf)[pos : pos + size]), pos + size


def _view(buf: bytes | memoryview) -> memoryview:
    """A read-only view of C{buf}, so that slicing it copies nothing."""
    return buf.toreadonly() if isinstance(buf, memoryview) else memoryview(buf).toreadonly()


def _write_produce(p: ProduceRequest) -> bytes:
    return write_str(p.topic) + _PRODUCE_HEAD.pack(p.partition, len(p.messages)) + p.messages


def _read_fetch(buf: bytes, pos: int) -> tuple[FetchRequest, int]:
    topic, pos = read_str(buf, pos)
    need(buf, pos, 16, "fetch request")
    partition, offset, max_bytes = _FETCH_TAIL.unpack_from(buf, pos)
    return FetchRequest(topic, partition, offset, max_bytes), pos + 16


def _write_fetch(f: FetchRequest) -> bytes:
    return write_str(f.topic) + _FETCH_TAIL.pack(f.partition, f.offset, f.max_bytes)


def _read_boundaries(buf: bytes, pos: int) -> tuple[BoundariesRequest, int]:
    topic, pos = read_str(buf, pos)
    need(buf, pos, _BOUNDARIES_HEAD.size, "boundaries request")
    partition, count = _BOUNDARIES_HEAD.unpack_from(buf, pos)
    pos += _BOUNDARIES_HEAD.size
    if count < 0:
        raise MalformedRequest(f"negative count {count}")
    need(buf, pos, 8 * count, "positions")
    return BoundariesRequest(topic, partition, struct.unpack_from(f">{count}q", buf, pos)), pos + 8 * count


def decode_request(frame: bytes | memoryview) -> Request:
    """The request in C{frame} (without its size prefix).

    The message sets of produce requests are views of C{frame} (L{ProduceRequest}).

    @raise MalformedRequest: unknown type, truncated body, or trailing bytes.
    """
    kind, pos = read_int16(frame, 0)
    if kind == PRODUCE:
        request, pos = _read_produce(frame, pos)
    elif kind == FETCH:
        request, pos = _read_fetch(frame, pos)
    elif kind in (MULTIFETCH, MULTIPRODUCE):
        count, pos = read_int16(frame, pos)
        if kind == MULTIFETCH:
            fetches, pos = read_many(frame, pos, count, _read_fetch)
            request = MultiFetchRequest(fetches)
        else:
            produces, pos = read_many(frame, pos, count, _read_produce)
            request = MultiProduceRequest(produces)
    elif kind == OFFSETS:
        topic, pos = read_str(frame, pos)
        need(frame, pos, 16, "offsets request")
        partition, time, max_offsets = _OFFSETS_TAIL.unpack_from(frame, pos)
        request, pos = OffsetsRequest(topic, partition, time, max_offsets), pos + 16
    elif kind == ACK_PRODUCE:
        need(frame, pos, 7, "acknowledged produce request")
        ack, timeout_ms, count = _ACK_HEAD.unpack_from(frame, pos)
        if not ACK_NONE <= ack <= ACK_ALL:
            raise MalformedRequest(f"unknown acknowledgement mode {ack}")
        produces, pos = read_many(frame, pos + 7, count, _read_produce)
        request = AckProduceRequest(ack, timeout_ms, produces)
    elif kind == WAIT_FETCH:
        need(frame, pos, 10, "waiting fetch request")
        max_wait_ms, min_bytes, count = _WAIT_HEAD.unpack_from(frame, pos)
        fetches, pos = read_many(frame, pos + 10, count, _read_fetch)
        request = WaitFetchRequest(max_wait_ms, min_bytes, fetches)
    elif kind in (METADATA, CLUSTER_METADATA):
        count, pos = read_int16(frame, pos)
        topics, pos = read_many(frame, pos, count, read_str)
        request = MetadataRequest(topics) if kind == METADATA else ClusterMetadataRequest(topics)
    elif kind == CREATE_TOPIC:
        topic, pos = read_str(frame, pos)
        need(frame, pos, _PARTITIONS.size, "create topic request")
        request, pos = CreateTopicRequest(topic, _PARTITIONS.unpack_from(frame, pos)[0]), pos + _PARTITIONS.size
    elif kind == BOUNDARIES:
        request, pos = _read_boundaries(frame, pos)
    elif kind == DELETE_TOPIC:
        topic, pos = read_str(frame, pos)
        request = DeleteTopicRequest(topic)
    elif kind in replication.TYPES:
        request, pos = replication.read_request(kind, frame, pos)
    elif kind in sasl.TYPES:
        request, pos = sasl.read_request(kind, frame, pos)
    else:
        raise MalformedRequest(f"unknown request type {kind}")
    done(frame, pos, "request")
    return request


def encode_request(request: Request) -> bytes:
    """The frame (without size prefix) of C{request}."""
    if isinstance(request, ProduceRequest):
        return I16.pack(PRODUCE) + _write_produce(request)
    if isinstance(request, FetchRequest):
        return I16.pack(FETCH) + _write_fetch(request)
    if isinstance(request, MultiFetchRequest):
        return b"".join([I16.pack(MULTIFETCH), I16.pack(len(request.fetches)), *map(_write_fetch, request.fetches)])
    if isinstance(request, MultiProduceRequest):
        return b"".join(
            [I16.pack(MULTIPRODUCE), I16.pack(len(request.produces)), *map(_write_produce, request.produces)]
        )
    if isinstance(request, OffsetsRequest):
        tail = _OFFSETS_TAIL.pack(request.partition, request.time, request.max_offsets)
        return I16.pack(OFFSETS) + write_str(request.topic) + tail
    if isinstance(request, AckProduceRequest):
        head = _ACK_HEAD.pack(request.ack, request.timeout_ms, len(request.produces))
        return b"".join([I16.pack(ACK_PRODUCE), head, *map(_write_produce, request.produces)])
    if isinstance(request, WaitFetchRequest):
        head = _WAIT_HEAD.pack(request.max_wait_ms, request.min_bytes, len(request.fetches))
        return b"".join([I16.pack(WAIT_FETCH), head, *map(_write_fetch, request.fetches)])
    if isinstance(request, (MetadataRequest, ClusterMetadataRequest)):
        kind = METADATA if isinstance(request, MetadataRequest) else CLUSTER_METADATA
        return b"".join([I16.pack(kind), I16.pack(len(request.topics)), *map(write_str, request.topics)])
    if isinstance(request, CreateTopicRequest):
        return I16.pack(CREATE_TOPIC) + write_str(request.topic) + _PARTITIONS.pack(request.partitions)
    if isinstance(request, BoundariesRequest):
        n = len(request.positions)
        return (I16.pack(BOUNDARIES) + write_str(request.topic) + _BOUNDARIES_HEAD.pack(request.partition, n)
                + struct.pack(f">{n}q", *request.positions))
    if isinstance(request, DeleteTopicRequest):
        return I16.pack(DELETE_TOPIC) + write_str(request.topic)
    if isinstance(request, replication.REPLICATION_REQUESTS):
        return replication.encode_request(request)
    if isinstance(request, sasl.SASL_REQUESTS):
        return sasl.encode_request(request)
    raise TypeError(f"not a request: {request!r}")


def expects_response(request: Request) -> bool:
    """Whether the broker answers C{request}: PRODUCE, MULTIPRODUCE and ACK_PRODUCE with ACK_NONE get no response."""
    if isinstance(request, AckProduceRequest):
        return request.ack != ACK_NONE
    return not isinstance(request, (ProduceRequest, MultiProduceRequest))


def describe_request(request: Request) -> str:
    """A short human description of C{request}, for error messages and logs."""
    if isinstance(request, ProduceRequest):
        return f"PRODUCE to {request.topic}-{request.partition}"
    if isinstance(request, FetchRequest):
        return f"FETCH {request.topic}-{request.partition} at offset {request.offset} (max_bytes {request.max_bytes})"
    if isinstance(request, (MultiFetchRequest, WaitFetchRequest)):
        name = "WAIT_FETCH" if isinstance(request, WaitFetchRequest) else "MULTIFETCH"
        parts = ", ".join(f"{f.topic}-{f.partition}@{f.offset}" for f in request.fetches)
        return f"{name} {parts}"
    if isinstance(request, (MultiProduceRequest, AckProduceRequest)):
        name = "ACK_PRODUCE" if isinstance(request, AckProduceRequest) else "MULTIPRODUCE"
        return f"{name} to " + ", ".join(f"{p.topic}-{p.partition}" for p in request.produces)
    if isinstance(request, OffsetsRequest):
        return f"OFFSETS {request.topic}-{request.partition} time {request.time}"
    if isinstance(request, (MetadataRequest, ClusterMetadataRequest)):
        name = "METADATA" if isinstance(request, MetadataRequest) else "CLUSTER_METADATA"
        return f"{name} " + (", ".join(request.topics) or "(all topics)")
    if isinstance(request, CreateTopicRequest):
        return f"CREATE_TOPIC {request.topic} with {request.partitions} partitions"
    if isinstance(request, BoundariesRequest):
        return f"BOUNDARIES {request.topic}-{request.partition} at {len(request.positions)} positions"
    if isinstance(request, DeleteTopicRequest):
        return f"DELETE_TOPIC {request.topic}"
    if isinstance(request, replication.REPLICATION_REQUESTS):
        return replication.describe_request(request)
    if isinstance(request, sasl.SASL_REQUESTS):
        return sasl.describe_request(request)
    return type(request).__name__


def decode_response(request: Request, frame: bytes) -> Response:
    """The typed response to C{request} in C{frame} (without its size prefix); its C{error} is not checked.

    @raise ProtocolViolation: the frame does not parse as C{request}'s response.
    @raise ValueError: C{request} gets no response (L{expects_response}).
    """
    if not expects_response(request):
        raise ValueError(f"a {type(request).__name__} gets no response")
    return _RESPONSE_DECODERS[type(request)](frame)


_RESPONSE_DECODERS = {
    FetchRequest: decode_fetch_response,
    MultiFetchRequest: decode_multifetch_response,
    WaitFetchRequest: decode_multifetch_response,
    OffsetsRequest: decode_offsets_response,
    AckProduceRequest: decode_ack_produce_response,
    MetadataRequest: decode_metadata_response,
    ClusterMetadataRequest: decode_cluster_metadata_response,
    CreateTopicRequest: decode_error_response,
    BoundariesRequest: decode_boundaries_response,
    DeleteTopicRequest: decode_error_response,
    **replication.RESPONSE_DECODERS,
    **sasl.RESPONSE_DECODERS,
}

__all__ = [
    "ACK_ALL", "ACK_APPENDED", "ACK_FLUSHED", "ACK_NONE", "ACK_PRODUCE", "BOUNDARIES", "MAX_BOUNDARY_POSITIONS",
    "BoundariesRequest", "BoundariesResponse", "decode_boundaries_response", "encode_boundaries_response",
    "CLUSTER_METADATA", "CREATE_TOPIC", "DELETE_TOPIC", "DeleteTopicRequest", "EARLIEST", "FETCH",
    "LATEST", "METADATA", "MULTIFETCH", "MULTIPRODUCE", "OFFSETS", "PRODUCE", "WAIT_FETCH",
    "AckProduceRequest", "AckProduceResponse", "ClusterMetadataRequest", "ClusterMetadataResponse",
    "CreateTopicRequest", "ErrorResponse", "FetchRequest", "FetchResult", "MetadataRequest",
    "MetadataResponse", "MultiFetchRequest", "MultiFetchResponse", "MultiProduceRequest", "OffsetsRequest",
    "OffsetsResponse", "ProduceRequest", "ProduceResult", "Request", "Response", "TopicMetadata",
    "WaitFetchRequest", "decode_ack_produce_response", "decode_error", "decode_error_response", "decode_fetch_response",
    "decode_metadata_response", "decode_multifetch_response", "decode_offsets_response", "decode_request",
    "decode_response", "describe_request", "encode_ack_produce_response", "encode_error_response",
    "encode_metadata_response", "decode_cluster_metadata_response", "encode_cluster_metadata_response",
    "encode_offsets_response", "encode_request", "expects_response", "fetch_response_header",
    "multifetch_part_header", "multifetch_response_header", "read_int16", "read_int32", "read_int64",
    "read_str", "write_str",
]
