# -*- test-case-name: tests.protocol.test_responses,tests.protocol.test_codec -*-
"""Responses on the wire: typed values, the broker's encoders and the client's decoders (pure).

Every response frame is C{[int16 error][body]} (docs/protocol.md), and any
response may be the error code alone.  Each decoder returns a frozen value
that carries that error code (C{.error}), so a client checks it in one place
(L{twlog.errors.check}); per-partition errors stay in the parts
(L{FetchResult.error}, L{ProduceResult.error}, L{TopicMetadata.error}).

A frame that does not parse is the peer's protocol violation: the decoders
raise L{ProtocolViolation}, a L{MalformedRequest} (the codec's contract) that
is also a L{ConnectionFailed} (what a client retries or reports), never
C{struct.error}.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

from twlog.errors import (
    NO_ERROR,
    BrokerError,
    MalformedRequest,
    MessageSizeTooLarge,
    ProtocolViolation,
    error_message,
)
from twlog.protocol.primitives import (
    I16,
    I32,
    I64,
    check_count,
    done,
    need,
    read_int16,
    read_int32,
    read_many,
    read_str,
    write_str,
)

T = TypeVar("T")
R = TypeVar("R")

_RESULT = struct.Struct(">ihqq")  # partition, error, offset, next offset
_PART_HEAD = struct.Struct(">ih")  # size (2 + data), error
_CLUSTER_HEAD = struct.Struct(">ib")  # answering broker id, view
_HOLDER = struct.Struct(">ii")  # broker id, partition count


# -- values ------------------------------------------------------------------------------


@attrs.frozen
class FetchResult:
    """FETCH's response, and one partition's part of a MULTIFETCH: an error code and raw message-set bytes."""

    error: int
    messages: bytes


@attrs.frozen
class MultiFetchResponse:
    """MULTIFETCH's (and WAIT_FETCH's) response: the outer error and one part per fetch, in request order."""

    error: int
    parts: tuple[FetchResult, ...] = ()


@attrs.frozen
class OffsetsResponse:
    """OFFSETS' response: the error and the offsets, newest first."""

    error: int
    offsets: tuple[int, ...] = ()


@attrs.frozen
class ProduceResult:
    """One partition's part of an acknowledged produce: where its set landed."""

    topic: str
    partition: int
    error: int
    #: Where the set landed; -1 when refused, except for MessageSizeTooLarge: the refused message's size.
    offset: int
    #: The offset after the set; -1 when refused, except for MessageSizeTooLarge: the limit it broke.
    next_offset: int

    @classmethod
    def refused(cls, topic: str, partition: int, error: BrokerError) -> ProduceResult:
        """The result of a set refused with C{error}: -1 for both offsets, except that a
        L{MessageSizeTooLarge} carries the refused size and the limit there (-1 for one not known)."""
        if isinstance(error, MessageSizeTooLarge):
            return cls(topic, partition, error.code, _or_minus_one(error.message_size), _or_minus_one(error.limit))
        return cls(topic, partition, error.code, -1, -1)

    def size_error(self, context: str) -> MessageSizeTooLarge:
        """The L{MessageSizeTooLarge} of a result refused with it, carrying the size and the limit the broker sent."""
        size = self.offset if self.offset >= 0 else None
        limit = self.next_offset if self.next_offset >= 0 else None
        text = error_message(self.error, context)
        if size is not None and limit is not None:
            text += f" (a message of {size} bytes; the broker's limit is {limit})"
        elif limit is not None:
            text += f" (the broker's limit is {limit})"
        error = MessageSizeTooLarge(text)
        error.message_size, error.limit = size, limit
        return error


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


@attrs.frozen
class AckProduceResponse:
    """ACK_PRODUCE's response: the error and one result per produced set."""

    error: int
    results: tuple[ProduceResult, ...] = ()


@attrs.frozen
class ErrorResponse:
    """The response of a request whose answer is its error code alone (CREATE_TOPIC)."""

    error: int


@attrs.frozen
class BoundariesResponse:
    """BOUNDARIES' response: the error and, per position asked about, the offset of the message boundary."""

    error: int
    offsets: tuple[int, ...] = ()


@attrs.frozen
class TopicMetadata:
    """A topic's partition count on a broker (error 0), or why it has none (InvalidTopic...)."""

    topic: str
    error: int
    partitions: int


@attrs.frozen
class MetadataResponse:
    """What a broker says of itself: id, address, and topics; and the response's error.

    An error-only response decodes with C{broker_id} and C{port} -1, no host and no topics.
    """

    broker_id: int
    host: str
    port: int
    topics: tuple[TopicMetadata, ...]
    error: int = NO_ERROR


#: How the broker answering CLUSTER_METADATA knows the cluster (L{ClusterMetadataResponse.view}).
VIEW_STANDALONE = 0  # no ZooKeeper: the broker is the whole cluster
VIEW_CURRENT = 1  # ZooKeeper's registry, kept current by watches
VIEW_STALE = 2  # ZooKeeper's registry as last read: the broker's session is disconnected now
VIEW_STARTING = 3  # ZooKeeper not read yet (the broker is starting, or ZooKeeper is slow): the broker alone
VIEWS = {
    VIEW_STANDALONE: "standalone (no ZooKeeper)",
    VIEW_CURRENT: "current (ZooKeeper)",
    VIEW_STALE: "stale (ZooKeeper disconnected)",
    VIEW_STARTING: "starting (ZooKeeper not read yet)",
}


@attrs.frozen(order=True)
class BrokerAddress:
    """A live broker of the cluster: its id and the address clients connect to."""

    broker_id: int
    host: str
    port: int


@attrs.frozen
class TopicLayout:
    """Where a topic's partitions are: C{(broker id, partition count)} per broker holding it, by broker id;
    or why there are none (an error, such as InvalidTopic; error 0 with no holders: no broker holds it)."""

    topic: str
    error: int
    holders: tuple[tuple[int, int], ...] = ()


@attrs.frozen
class ClusterMetadataResponse:
    """CLUSTER_METADATA's response: which broker answered, how it knows the cluster (L{VIEWS}), every live
    broker and, per topic, the brokers holding it.  An error-only response has broker id -1 and nothing else."""

    broker_id: int
    view: int
    brokers: tuple[BrokerAddress, ...]
    topics: tuple[TopicLayout, ...]
    error: int = NO_ERROR

    @property
    def addresses(self) -> dict[int, tuple[str, int]]:
        """The live brokers, id -> (host, port)."""
        return {b.broker_id: (b.host, b.port) for b in self.brokers}

    def layout(self, topic: str) -> TopicLayout | None:
        """C{topic}'s entry, if the response has one."""
        return next((t for t in self.topics if t.topic == topic), None)


Response = (
    FetchResult | MultiFetchResponse | OffsetsResponse | AckProduceResponse | MetadataResponse
    | ClusterMetadataResponse | BoundariesResponse
)


# -- encoding (broker side) ----------------------------------------------------------------


def fetch_response_header(error: int, length: int) -> bytes:
    """FETCH's response up to its message set: C{[int32 size][int16 error]}; C{length} bytes follow."""
    return I32.pack(2 + length) + I16.pack(error)


def multifetch_response_header(error: int, lengths: Sequence[int]) -> bytes:
    """MULTIFETCH's (and WAIT_FETCH's) outer header: C{[int32 size][int16 error]}.

    The body is, per fetch, C{[int32 2 + n][int16 error][n bytes]}.
    """
    return I32.pack(2 + sum(6 + n for n in lengths)) + I16.pack(error)


def multifetch_part_header(error: int, length: int) -> bytes:
    """One fetch's header inside a MULTIFETCH response; C{length} bytes of message set follow."""
    return _PART_HEAD.pack(2 + length, error)


def encode_error_response(error: int) -> bytes:
    """A response frame (without size prefix) with only an error code."""
    return I16.pack(error)


def encode_offsets_response(error: int, offsets: Sequence[int]) -> bytes:
    """OFFSETS' response frame: C{[int16 error][int32 n][int64 offset]*n}."""
    return I16.pack(error) + I32.pack(len(offsets)) + b"".join(I64.pack(o) for o in offsets)


def encode_boundaries_response(error: int, offsets: Sequence[int]) -> bytes:
    """BOUNDARIES' response frame: C{[int16 error][int16 n][int64 offset]*n}."""
    return I16.pack(error) + I16.pack(len(offsets)) + struct.pack(f">{len(offsets)}q", *offsets)


def encode_ack_produce_response(error: int, results: Sequence[ProduceResult]) -> bytes:
    """ACK_PRODUCE's response frame: per set, topic, partition, error, offset and next offset."""
    parts = [I16.pack(error), I16.pack(len(results))]
    for r in results:
        parts.append(write_str(r.topic))
        parts.append(_RESULT.pack(r.partition, r.error, r.offset, r.next_offset))
    return b"".join(parts)


def encode_metadata_response(error: int, metadata: MetadataResponse) -> bytes:
    """METADATA's response frame (C{error} is written, not C{metadata.error})."""
    parts = [
        I16.pack(error),
        I32.pack(metadata.broker_id),
        write_str(metadata.host),
        I32.pack(metadata.port),
        I16.pack(len(metadata.topics)),
    ]
    for t in metadata.topics:
        parts.append(write_str(t.topic))
        parts.append(I16.pack(t.error))
        parts.append(I32.pack(t.partitions))
    return b"".join(parts)


def encode_cluster_metadata_response(error: int, cluster: ClusterMetadataResponse) -> bytes:
    """CLUSTER_METADATA's response frame (C{error} is written, not C{cluster.error}); docs/protocol.md, type 8."""
    parts = [I16.pack(error), _CLUSTER_HEAD.pack(cluster.broker_id, cluster.view), I16.pack(len(cluster.brokers))]
    for b in cluster.brokers:
        parts += [I32.pack(b.broker_id), write_str(b.host), I32.pack(b.port)]
    parts.append(I16.pack(len(cluster.topics)))
    for t in cluster.topics:
        parts += [write_str(t.topic), I16.pack(t.error), I16.pack(len(t.holders))]
        parts += [_HOLDER.pack(broker_id, count) for broker_id, count in t.holders]
    return b"".join(parts)


# -- decoding (client side) ------------------------------------------------------------------


def peer_violation(decode: Callable[[bytes], T]) -> Callable[[bytes], T]:
    """Raise the codec's L{MalformedRequest}s of C{decode} as L{ProtocolViolation}s (the peer sent garbage)."""

    @functools.wraps(decode)
    def checked(frame: bytes) -> T:
        try:
            return decode(frame)
        except ProtocolViolation:
            raise
        except MalformedRequest as e:
            what = decode.__name__.removeprefix("decode_").replace("_", " ")
            raise ProtocolViolation(f"malformed {what}: {e}") from None

    return checked


@peer_violation
def decode_error(frame: bytes) -> int:
    """The error code every response frame starts with."""
    return read_int16(frame, 0)[0]


@peer_violation
def decode_error_response(frame: bytes) -> ErrorResponse:
    """An error-only response (CREATE_TOPIC's): C{[int16 error]} and nothing after it."""
    error, pos = read_int16(frame, 0)
    done(frame, pos, "error-only response")
    return ErrorResponse(error)


@peer_violation
def decode_fetch_response(frame: bytes) -> FetchResult:
    """FETCH's response: error and message-set bytes (a partial trailing message included)."""
    error, pos = read_int16(frame, 0)
    return FetchResult(error, frame[pos:])


def _read_part(frame: bytes, pos: int) -> tuple[FetchResult, int]:
    size, pos = read_int32(frame, pos)
    need(frame, pos, size, "fetch part")
    if size < 2:
        raise MalformedRequest(f"fetch part of size {size} at byte {pos}")
    return FetchResult(I16.unpack_from(frame, pos)[0], frame[pos + 2 : pos + size]), pos + size


@peer_violation
def decode_multifetch_response(frame: bytes) -> MultiFetchResponse:
    """MULTIFETCH's (and WAIT_FETCH's) response: the outer error and one part per fetch, in order."""
    error, pos = read_int16(frame, 0)
    parts = []
    while pos < len(frame):
        part, pos = _read_part(frame, pos)
        parts.append(part)
    return MultiFetchResponse(error, tuple(parts))


def _error_or_body(frame: bytes, response: Callable[..., R], read_body: Callable[[bytes, int], object]) -> R:
    """C{response(error)} for a frame that is the error code alone, else C{response(error, body)} with the body
    that C{read_body(frame, pos)} reads from after the error code to the end of the frame."""
    error, pos = read_int16(frame, 0)
    if pos == len(frame):
        return response(error)
    return response(error, read_body(frame, pos))


def _offsets_after(read_count: Callable[[bytes, int], tuple[int, int]], what: str
                   ) -> Callable[[bytes, int], tuple[int, ...]]:
    """The body reader of a count (read with C{read_count}) and as many int64 offsets, nothing after them."""

    def read_offsets(frame: bytes, pos: int) -> tuple[int, ...]:
        count, pos = read_count(frame, pos)
        check_count(count)
        need(frame, pos, 8 * count, what)
        offsets = struct.unpack_from(f">{count}q", frame, pos)
        done(frame, pos + 8 * count, f"{what} response")
        return offsets

    return read_offsets


_read_offsets = _offsets_after(read_int32, "offsets")
_read_boundaries = _offsets_after(read_int16, "boundaries")


@peer_violation
def decode_offsets_response(frame: bytes) -> OffsetsResponse:
    """OFFSETS' response: error and offsets, newest first."""
    return _error_or_body(frame, OffsetsResponse, _read_offsets)


@peer_violation
def decode_boundaries_response(frame: bytes) -> BoundariesResponse:
    """BOUNDARIES' response: error and one offset per position asked about (none in an error-only frame)."""
    return _error_or_body(frame, BoundariesResponse, _read_boundaries)


def _read_result(frame: bytes, pos: int) -> tuple[ProduceResult, int]:
    topic, pos = read_str(frame, pos)
    need(frame, pos, _RESULT.size, "produce result")
    partition, error, offset, next_offset = _RESULT.unpack_from(frame, pos)
    return ProduceResult(topic, partition, error, offset, next_offset), pos + _RESULT.size


def _read_results(frame: bytes, pos: int) -> tuple[ProduceResult, ...]:
    count, pos = read_int16(frame, pos)
    results, pos = read_many(frame, pos, count, _read_result)
    done(frame, pos, "produce response")
    return results


@peer_violation
def decode_ack_produce_response(frame: bytes) -> AckProduceResponse:
    """ACK_PRODUCE's response: error and one result per produced set."""
    return _error_or_body(frame, AckProduceResponse, _read_results)


def _read_topic(frame: bytes, pos: int) -> tuple[TopicMetadata, int]:
    topic, pos = read_str(frame, pos)
    error, pos = read_int16(frame, pos)
    partitions, pos = read_int32(frame, pos)
    return TopicMetadata(topic, error, partitions), pos


@peer_violation
def decode_metadata_response(frame: bytes) -> MetadataResponse:
    """METADATA's response: the broker's id, address and topics, with the error (alone if the frame has no body)."""
    error, pos = read_int16(frame, 0)
    if error != NO_ERROR and pos == len(frame):
        return MetadataResponse(-1, "", -1, (), error)
    broker_id, pos = read_int32(frame, pos)
    host, pos = read_str(frame, pos)
    port, pos = read_int32(frame, pos)
    count, pos = read_int16(frame, pos)
    topics, pos = read_many(frame, pos, count, _read_topic)
    done(frame, pos, "metadata response")
    return MetadataResponse(broker_id, host, port, topics, error)


def read_broker(frame: bytes, pos: int) -> tuple[BrokerAddress, int]:
    broker_id, pos = read_int32(frame, pos)
    host, pos = read_str(frame, pos)
    port, pos = read_int32(frame, pos)
    return BrokerAddress(broker_id, host, port), pos


def read_holder(frame: bytes, pos: int) -> tuple[tuple[int, int], int]:
    need(frame, pos, _HOLDER.size, "topic holder")
    return _HOLDER.unpack_from(frame, pos), pos + _HOLDER.size


def _read_layout(frame: bytes, pos: int) -> tuple[TopicLayout, int]:
    topic, pos = read_str(frame, pos)
    error, pos = read_int16(frame, pos)
    count, pos = read_int16(frame, pos)
    holders, pos = read_many(frame, pos, count, read_holder)
    return TopicLayout(topic, error, holders), pos


@peer_violation
def decode_cluster_metadata_response(frame: bytes) -> ClusterMetadataResponse:
    """CLUSTER_METADATA's response: the answering broker, its view, the live brokers and the topics' holders."""
    error, pos = read_int16(frame, 0)
    if error != NO_ERROR and pos == len(frame):
        return ClusterMetadataResponse(-1, VIEW_STANDALONE, (), (), error)
    need(frame, pos, _CLUSTER_HEAD.size, "cluster metadata response")
    broker_id, view = _CLUSTER_HEAD.unpack_from(frame, pos)
    count, pos = read_int16(frame, pos + _CLUSTER_HEAD.size)
    brokers, pos = read_many(frame, pos, count, read_broker)
    count, pos = read_int16(frame, pos)
    topics, pos = read_many(frame, pos, count, _read_layout)
    done(frame, pos, "cluster metadata response")
    return ClusterMetadataResponse(broker_id, view, brokers, topics, error)
