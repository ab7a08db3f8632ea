# -*- test-case-name: tests.protocol.test_codec -*-
"""The wire protocol as pure functions: frames in, typed requests and responses out.

No I/O and no Twisted here, so the broker, the Twisted client and the blocking
tools share one codec.  A frame is what follows the C{int32} size prefix
(L{twisted.protocols.basic.Int32StringReceiver} strips and adds it):

  - request:  C{[int16 type][body]}
  - response: C{[int16 error][body]}

Types 0-4 keep Kafka 0.7's layouts byte for byte; 5-7 are twlog's.  Strings
are C{[int16 length][utf-8]}.  docs/protocol.md is the reference.  Readers take
C{(buf, pos)} and return C{(value, next_pos)}; every malformed or truncated
input raises L{MalformedRequest}, never C{struct.error}.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from twlog.errors import NO_ERROR, MalformedRequest

PRODUCE = 0
FETCH = 1
MULTIFETCH = 2
MULTIPRODUCE = 3
OFFSETS = 4
ACK_PRODUCE = 5
WAIT_FETCH = 6
METADATA = 7

#: What an acknowledged produce waits for before it answers.
ACK_NONE = 0  # no response at all, as PRODUCE (fire-and-forget)
ACK_APPENDED = 1  # the messages are in the log (page cache)
ACK_FLUSHED = 2  # the messages are fsynced, and so visible to consumers

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_FETCH_TAIL = struct.Struct(">iqi")  # partition, offset, max bytes
_OFFSETS_TAIL = struct.Struct(">iqi")  # partition, time, max offsets
_PRODUCE_HEAD = struct.Struct(">ii")  # partition, message set size
_ACK_HEAD = struct.Struct(">bih")  # ack, timeout ms, count
_WAIT_HEAD = struct.Struct(">iih")  # max wait ms, min bytes, count
_RESULT = struct.Struct(">ihqq")  # partition, error, offset, next offset
_PART_HEAD = struct.Struct(">ih")  # size (2 + data), error


# -- values -------------------------------------------------------------------


@attrs.frozen
class ProduceRequest:
    """Type 0: append C{messages} (a message set) to a partition; no response."""

    topic: str
    partition: int
    messages: bytes


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
    """Type 4: offsets before C{time} (-1 latest, -2 earliest, or ms since the epoch), newest first."""

    topic: str
    partition: int
    time: int
    max_offsets: int


@attrs.frozen
class AckProduceRequest:
    """Type 5: produce, then answer once every set is appended (or flushed) with the offsets given."""

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


Request = (
    ProduceRequest
    | FetchRequest
    | MultiFetchRequest
    | MultiProduceRequest
    | OffsetsRequest
    | AckProduceRequest
    | WaitFetchRequest
    | MetadataRequest
)


@attrs.frozen
class FetchResult:
    """One partition's part of a fetch response: an error code and raw message-set bytes."""

    error: int
    messages: bytes


@attrs.frozen
class ProduceResult:
    """One partition's part of an acknowledged produce: where its set landed."""

    topic: str
    partition: int
    error: int
    offset: int
    next_offset: int


@attrs.frozen
class TopicMetadata:
    """A topic's partition count on a broker (error 0), or why it has none (InvalidTopic...)."""

    topic: str
    error: int
    partitions: int


@attrs.frozen
class MetadataResponse:
    """What a broker says of itself: id, address, and topics."""

    broker_id: int
    host: str
    port: int
    topics: tuple[TopicMetadata, ...]


# -- primitive readers and writers ----------------------------------------------


def _need(buf: bytes, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise MalformedRequest(f"truncated {what} at byte {pos}")


def read_int16(buf: bytes, pos: int) -> tuple[int, int]:
    """An int16 at C{pos}."""
    _need(buf, pos, 2, "int16")
    return _I16.unpack_from(buf, pos)[0], pos + 2


def read_int32(buf: bytes, pos: int) -> tuple[int, int]:
    """An int32 at C{pos}."""
    _need(buf, pos, 4, "int32")
    return _I32.unpack_from(buf, pos)[0], pos + 4


def read_int64(buf: bytes, pos: int) -> tuple[int, int]:
    """An int64 at C{pos}."""
    _need(buf, pos, 8, "int64")
    return _I64.unpack_from(buf, pos)[0], pos + 8


def read_str(buf: bytes, pos: int) -> tuple[str, int]:
    """An int16-prefixed UTF-8 string at C{pos}."""
    n, pos = read_int16(buf, pos)
    _need(buf, pos, n, "string")
    try:
        return buf[pos : pos + n].decode("utf-8"), pos + n
    except UnicodeDecodeError:
        raise MalformedRequest(f"string at byte {pos} is not UTF-8") from None


def write_str(value: str) -> bytes:
    """An int16-prefixed UTF-8 string."""
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for the protocol")
    return _I16.pack(len(data)) + data


def _done(buf: bytes, pos: int, what: str) -> None:
    if pos != len(buf):
        raise MalformedRequest(f"{len(buf) - pos} unexpected bytes after the {what}")


# -- requests -------------------------------------------------------------------


def _read_produce(buf: bytes, pos: int) -> tuple[ProduceRequest, int]:
    topic, pos = read_str(buf, pos)
    _need(buf, pos, 8, "produce request")
    partition, size = _PRODUCE_HEAD.unpack_from(buf, pos)
    pos += 8
    _need(buf, pos, size, "message set")
    return ProduceRequest(topic, partition, buf[pos : pos + size]), pos + size


def _write_produce(p: ProduceRequest) -> bytes:
    return write_str(p.topic) + _PRODUCE_HEAD.pack(p.partition, len(p.messages)) + p.messages


def _read_fetch(buf: bytes, pos: int) -> tuple[FetchRequest, int]:
    topic, pos = read_str(buf, pos)
    _need(buf, pos, 16, "fetch request")
    partition, offset, max_bytes = _FETCH_TAIL.unpack_from(buf, pos)
    return FetchRequest(topic, partition, offset, max_bytes), pos + 16


def _write_fetch(f: FetchRequest) -> bytes:
    return write_str(f.topic) + _FETCH_TAIL.pack(f.partition, f.offset, f.max_bytes)


def _check_count(count: int) -> None:
    if count < 0:
        raise MalformedRequest(f"negative count {count}")


def _read_many(buf: bytes, pos: int, count: int, reader) -> tuple[tuple, int]:
    _check_count(count)
    items = []
    for _ in range(count):
        item, pos = reader(buf, pos)
        items.append(item)
    return tuple(items), pos


def decode_request(frame: bytes) -> Request:
    """The request in C{frame} (without its size prefix).

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
            fetches, pos = _read_many(frame, pos, count, _read_fetch)
            request = MultiFetchRequest(fetches)
        else:
            produces, pos = _read_many(frame, pos, count, _read_produce)
            request = MultiProduceRequest(produces)
    elif kind == OFFSETS:
        topic, pos = read_str(frame, pos)
        _need(frame, pos, 16, "offsets request")
        partition, time, max_offsets = _OFFSETS_TAIL.unpack_from(frame, pos)
        request, pos = OffsetsRequest(topic, partition, time, max_offsets), pos + 16
    elif kind == ACK_PRODUCE:
        _need(frame, pos, 7, "acknowledged produce request")
        ack, timeout_ms, count = _ACK_HEAD.unpack_from(frame, pos)
        if ack not in (ACK_NONE, ACK_APPENDED, ACK_FLUSHED):
            raise MalformedRequest(f"unknown acknowledgement mode {ack}")
        produces, pos = _read_many(frame, pos + 7, count, _read_produce)
        request = AckProduceRequest(ack, timeout_ms, produces)
    elif kind == WAIT_FETCH:
        _need(frame, pos, 10, "waiting fetch request")
        max_wait_ms, min_bytes, count = _WAIT_HEAD.unpack_from(frame, pos)
        fetches, pos = _read_many(frame, pos + 10, count, _read_fetch)
        request = WaitFetchRequest(max_wait_ms, min_bytes, fetches)
    elif kind == METADATA:
        count, pos = read_int16(frame, pos)
        topics, pos = _read_many(frame, pos, count, read_str)
        request = MetadataRequest(topics)
    else:
        raise MalformedRequest(f"unknown request type {kind}")
    _done(frame, pos, "request")
    return request


def encode_request(request: Request) -> bytes:
    """The frame (without size prefix) of C{request}."""
    if isinstance(request, ProduceRequest):
        return _I16.pack(PRODUCE) + _write_produce(request)
    if isinstance(request, FetchRequest):
        return _I16.pack(FETCH) + _write_fetch(request)
    if isinstance(request, MultiFetchRequest):
        return b"".join([_I16.pack(MULTIFETCH), _I16.pack(len(request.fetches)), *map(_write_fetch, request.fetches)])
    if isinstance(request, MultiProduceRequest):
        return b"".join(
            [_I16.pack(MULTIPRODUCE), _I16.pack(len(request.produces)), *map(_write_produce, request.produces)]
        )
    if isinstance(request, OffsetsRequest):
        return (
            _I16.pack(OFFSETS)
            + write_str(request.topic)
            + _OFFSETS_TAIL.pack(request.partition, request.time, request.max_offsets)
        )
    if isinstance(request, AckProduceRequest):
        return b"".join(
            [
                _I16.pack(ACK_PRODUCE),
                _ACK_HEAD.pack(request.ack, request.timeout_ms, len(request.produces)),
                *map(_write_produce, request.produces),
            ]
        )
    if isinstance(request, WaitFetchRequest):
        return b"".join(
            [
                _I16.pack(WAIT_FETCH),
                _WAIT_HEAD.pack(request.max_wait_ms, request.min_bytes, len(request.fetches)),
                *map(_write_fetch, request.fetches),
            ]
        )
    if isinstance(request, MetadataRequest):
        return b"".join([_I16.pack(METADATA), _I16.pack(len(request.topics)), *map(write_str, request.topics)])
    raise TypeError(f"not a request: {request!r}")


def expects_response(request: Request) -> bool:
    """Whether the broker answers C{request}: PRODUCE, MULTIPRODUCE and ACK_PRODUCE with ACK_NONE get no response."""
    if isinstance(request, AckProduceRequest):
        return request.ack != ACK_NONE
    return not isinstance(request, (ProduceRequest, MultiProduceRequest))


# -- responses: headers written before zero-copy file data ---------------------------


def fetch_response_header(error: int, length: int) -> bytes:
    """FETCH's response up to its message set: C{[int32 size][int16 error]}; C{length} bytes follow."""
    return _I32.pack(2 + length) + _I16.pack(error)


def multifetch_response_header(error: int, lengths: Sequence[int]) -> bytes:
    """MULTIFETCH's (and WAIT_FETCH's) outer header: C{[int32 size][int16 error]}.

    The body is, per fetch, C{[int32 2 + n][int16 error][n bytes]}.
    """
    return _I32.pack(2 + sum(6 + n for n in lengths)) + _I16.pack(error)


def multifetch_part_header(error: int, length: int) -> bytes:
    """One fetch's header inside a MULTIFETCH response; C{length} bytes of message set follow."""
    return _PART_HEAD.pack(2 + length, error)


def encode_error_response(error: int) -> bytes:
    """A response frame (without size prefix) with only an error code."""
    return _I16.pack(error)


def encode_offsets_response(error: int, offsets: Sequence[int]) -> bytes:
    """OFFSETS' response frame: C{[int16 error][int32 n][int64 offset]*n}."""
    return _I16.pack(error) + _I32.pack(len(offsets)) + b"".join(_I64.pack(o) for o in offsets)


def encode_ack_produce_response(error: int, results: Sequence[ProduceResult]) -> bytes:
    """ACK_PRODUCE's response frame: per set, topic, partition, error, offset and next offset."""
    parts = [_I16.pack(error), _I16.pack(len(results))]
    for r in results:
        parts.append(write_str(r.topic))
        parts.append(_RESULT.pack(r.partition, r.error, r.offset, r.next_offset))
    return b"".join(parts)


def encode_metadata_response(error: int, metadata: MetadataResponse) -> bytes:
    """METADATA's response frame."""
    parts = [
        _I16.pack(error),
        _I32.pack(metadata.broker_id),
        write_str(metadata.host),
        _I32.pack(metadata.port),
        _I16.pack(len(metadata.topics)),
    ]
    for t in metadata.topics:
        parts.append(write_str(t.topic))
        parts.append(_I16.pack(t.error))
        parts.append(_I32.pack(t.partitions))
    return b"".join(parts)


# -- responses: decoding (client side) -------------------------------------------


def decode_error(frame: bytes) -> int:
    """The error code every response frame starts with."""
    return read_int16(frame, 0)[0]


def decode_fetch_response(frame: bytes) -> FetchResult:
    """FETCH's response: error and message-set bytes."""
    error, pos = read_int16(frame, 0)
    return FetchResult(error, frame[pos:])


def decode_multifetch_response(frame: bytes) -> tuple[int, tuple[FetchResult, ...]]:
    """MULTIFETCH's (and WAIT_FETCH's) response: the outer error and one result per fetch, in order."""
    error, pos = read_int16(frame, 0)
    results = []
    while pos < len(frame):
        size, pos = read_int32(frame, pos)
        _need(frame, pos, size, "fetch part")
        if size < 2:
            raise MalformedRequest(f"fetch part of size {size} at byte {pos}")
        part_error = _I16.unpack_from(frame, pos)[0]
        results.append(FetchResult(part_error, frame[pos + 2 : pos + size]))
        pos += size
    return error, tuple(results)


def decode_offsets_response(frame: bytes) -> tuple[int, tuple[int, ...]]:
    """OFFSETS' response: error and offsets, newest first."""
    error, pos = read_int16(frame, 0)
    if pos == len(frame):
        return error, ()
    count, pos = read_int32(frame, pos)
    _need(frame, pos, 8 * count, "offsets")
    offsets = struct.unpack_from(f">{count}q", frame, pos)
    _done(frame, pos + 8 * count, "offsets response")
    return error, offsets


def decode_ack_produce_response(frame: bytes) -> tuple[int, tuple[ProduceResult, ...]]:
    """ACK_PRODUCE's response: error and one result per produced set."""
    error, pos = read_int16(frame, 0)
    if pos == len(frame):
        return error, ()
    count, pos = read_int16(frame, pos)
    _check_count(count)
    results = []
    for _ in range(count):
        topic, pos = read_str(frame, pos)
        _need(frame, pos, _RESULT.size, "produce result")
        partition, part_error, offset, next_offset = _RESULT.unpack_from(frame, pos)
        pos += _RESULT.size
        results.append(ProduceResult(topic, partition, part_error, offset, next_offset))
    _done(frame, pos, "produce response")
    return error, tuple(results)


def decode_metadata_response(frame: bytes) -> tuple[int, MetadataResponse | None]:
    """METADATA's response: error and, when there is no error, the broker's metadata."""
    error, pos = read_int16(frame, 0)
    if error != NO_ERROR and pos == len(frame):
        return error, None
    broker_id, pos = read_int32(frame, pos)
    host, pos = read_str(frame, pos)
    port, pos = read_int32(frame, pos)
    count, pos = read_int16(frame, pos)
    _check_count(count)
    topics = []
    for _ in range(count):
        topic, pos = read_str(frame, pos)
        topic_error, pos = read_int16(frame, pos)
        partitions, pos = read_int32(frame, pos)
        topics.append(TopicMetadata(topic, topic_error, partitions))
    _done(frame, pos, "metadata response")
    return error, MetadataResponse(broker_id, host, port, tuple(topics))
