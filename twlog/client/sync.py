# -*- test-case-name: tests.client.test_sync,tests.integration.test_spark_source -*-
"""A small synchronous broker client over blocking sockets, for processes without a reactor.

Spark's Python workers are plain processes: they cannot run Twisted's reactor,
so the Spark reader (L{twlog.spark}) talks to brokers through this module.  It
frames requests as C{[int32 size][frame]} and reuses the pure codec
(L{twlog.protocol.codec}) and message decoder (L{twlog.storage.message}), so
the bytes on the wire are exactly those of the Twisted client.  Every socket
has a timeout; failures are typed (L{twlog.errors}) and name the broker.

Discovery (which brokers hold a topic) is L{twlog.client.discovery.discover},
built on this module.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

from twlog.client.options import ClientOptions
from twlog.errors import (
    BrokerError,
    BrokerTimeout,
    ConnectionFailed,
    FetchSizeTooSmall,
    InvalidTopic,
    OffsetNotOnBoundary,
    ProtocolViolation,
    check,
    error_message,
)
from twlog.protocol.codec import (
    BoundariesRequest,
    ClusterMetadataRequest,
    ClusterMetadataResponse,
    FetchRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetsRequest,
    Request,
    Response,
    WaitFetchRequest,
    decode_response,
    describe_request,
    encode_request,
)
from twlog.storage.batch import MessageBatch, decode_batch
from twlog.storage.manager import validate_topic
from twlog.storage.message import MIN_MESSAGE_BYTES, CorruptMessage

_SIZE = struct.Struct(">i")


def check_topic(topic: str, context: str) -> None:
    """Refuse a topic name the broker would refuse, before a request of Kafka 0.7's types (OFFSETS) is sent:
    the broker answers those with 0.7's codes only, where an invalid topic is just Unknown (-1).

    @raise InvalidTopic: naming C{context} and what is wrong with the name.
    """
    try:
        validate_topic(topic)
    except InvalidTopic as e:
        raise InvalidTopic(f"{error_message(InvalidTopic.code, context)} ({e})") from None


class SyncConnection:
    """One blocking connection to a broker; requests are answered in order, one at a time."""

    def __init__(self, host: str, port: int, options: ClientOptions | None = None, **overrides: Any) -> None:
        """@param overrides: fields of L{ClientOptions} replacing those of C{options} (C{timeout_s=5}...)."""
        self.host = host
        self.port = port
        self.options = ClientOptions.build(options, **overrides)
        self._sock: socket.socket | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            try:
                self._sock = socket.create_connection((self.host, self.port), timeout=self.options.connect_timeout_s)
                self._sock.settimeout(self.options.timeout_s)
            except OSError as e:
                raise ConnectionFailed(f"cannot connect to broker {self.address}: {e}") from None
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._sock

    def _recv_exactly(self, sock: socket.socket, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionFailed(f"broker {self.address} closed the connection before answering")
            got += k
        return buf

    def call(self, request: Request) -> Response:
        """Send C{request} (a codec value) and return its decoded response, its error checked.

        @raise BrokerError: the response's error code.
        @raise ProtocolViolation: the response is over C{max_response_bytes} or does not parse.
        """
        frame = encode_request(request)
        sock = self._connect()
        try:
            sock.sendall(_SIZE.pack(len(frame)) + frame)
            (size,) = _SIZE.unpack(self._recv_exactly(sock, 4))
            if not 0 <= size <= self.options.max_response_bytes:
                raise ProtocolViolation(
                    f"broker {self.address} sent a {size}-byte response, larger than max_response_bytes "
                    f"{self.options.max_response_bytes}; connection dropped"
                )
            response = decode_response(request, bytes(self._recv_exactly(sock, size)))
        except TimeoutError:
            self.close()
            raise BrokerTimeout(f"no answer from broker {self.address} within {self.options.timeout_s:g} s") from None
        except ConnectionFailed:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise ConnectionFailed(f"connection to broker {self.address} failed: {e}") from None
        return check(response, f"broker {self.address} refused {describe_request(request)}")

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Up to C{max_bytes} of raw log from C{offset}; broker errors raise their typed exceptions.

        Sent as twlog's WAIT_FETCH waiting 0 ms, which names every error precisely (FetchSizeTooSmall,
        OffsetNotOnBoundary...), where a FETCH is answered as a Kafka 0.7 broker would.
        """
        request = WaitFetchRequest(0, 0, (FetchRequest(topic, partition, offset, max_bytes),))
        parts = self.call(request).parts
        if len(parts) != 1:
            self.close()
            raise ProtocolViolation(f"broker {self.address} answered a one-part WAIT_FETCH with {len(parts)} parts")
        try:
            return check(parts[0], f"broker {self.address} refused {describe_request(request)}").messages
        except FetchSizeTooSmall:
            needed = self._message_size(topic, partition, offset)
            size = f"is {needed} bytes, " if needed is not None else "is "
            raise FetchSizeTooSmall(
                f"the message at offset {offset} of {topic}-{partition} (broker {self.address}) {size}larger than "
                f"max_bytes={max_bytes}"
            ) from None

    def fetch_batch(self, topic: str, partition: int, offset: int, max_bytes: int, *, on_corrupt: str = "fail",
                    previous: int | None = None) -> MessageBatch:
        """L{fetch}, decoded as a L{MessageBatch} (every CRC checked, no object per message until iterated).

        A corrupt message ends the batch (the valid messages before it are in it, C{corrupt} names it) or, with
        C{on_corrupt="skip"}, is skipped; C{previous} (the offset of the message before C{offset}) lets a fetch
        from a corrupt message's offset, which the broker refuses, read it (L{read_past_refusal}).
        """
        try:
            data = self.fetch(topic, partition, offset, max_bytes)
        except OffsetNotOnBoundary as e:
            if previous is None:
                raise
            data = self.read_past_refusal(topic, partition, previous, offset, max_bytes, e)
        return decode_batch(data, offset, topic=topic, partition=partition, on_corrupt=on_corrupt,
                            max_decompressed_bytes=self.options.max_decompressed_bytes)

    def read_past_refusal(self, topic: str, partition: int, previous: int | None, offset: int, max_bytes: int,
                          refusal: Exception) -> bytes:
        """The bytes from C{offset}, which the broker refused to read from (C{refusal}, an L{OffsetNotOnBoundary})
        although the message at C{previous} ends there: the message at C{offset} is corrupt.  They are read from
        C{previous}, whose bytes run into it.

        @raise CorruptMessage: the message at C{offset} is not whole in them (or C{previous} is None): naming
            the offset after it when its length field is sane.
        """
        data = b""
        if previous is not None:
            data = self.fetch(topic, partition, previous, max_bytes + offset - previous)[offset - previous :]
        size = int.from_bytes(data[:4], "big", signed=True) if len(data) >= 4 else -1
        if size < MIN_MESSAGE_BYTES or 4 + size > len(data):
            after = offset + 4 + size if size >= MIN_MESSAGE_BYTES else None
            raise CorruptMessage(f"the broker refuses to read from it: {refusal}", offset, after, topic, partition)
        return data

    def _message_size(self, topic: str, partition: int, offset: int) -> int | None:
        """The size (length field included) of the message at C{offset}, or None if it cannot be learnt.

        A FETCH of 4 bytes: the broker answers it as Kafka 0.7 would, with the start of the message.
        """
        try:
            data = self.call(FetchRequest(topic, partition, offset, 4)).messages
        except (BrokerError, ConnectionFailed, BrokerTimeout):
            return None
        return int.from_bytes(data, "big", signed=True) + 4 if len(data) == 4 else None

    def offset(self, topic: str, partition: int, time: int) -> int:
        """The single offset OFFSETS answers for C{time} (L{LATEST} or L{EARLIEST})."""
        check_topic(topic, f"OFFSETS {topic}-{partition}")
        offsets = self.call(OffsetsRequest(topic, partition, time, 1)).offsets
        return offsets[0] if offsets else 0

    def boundaries(self, topic: str, partition: int, positions: Sequence[int]) -> list[int]:
        """The offset of the first whole, valid message at or after each of C{positions} (BOUNDARIES, type 10),
        in order; a position at or past the flushed end gets the flushed end.  At most
        L{twlog.protocol.codec.MAX_BOUNDARY_POSITIONS} positions per call."""
        return list(self.call(BoundariesRequest(topic, partition, tuple(positions))).offsets)

    def metadata(self, topics: Sequence[str] = ()) -> MetadataResponse:
        """This broker's id, address and topics (every topic it holds when C{topics} is empty)."""
        return self.call(MetadataRequest(tuple(topics)))

    def cluster_metadata(self, topics: Sequence[str] = ()) -> ClusterMetadataResponse:
        """The cluster as this broker knows it: the live brokers, and where C{topics} (all when empty) are held."""
        return self.call(ClusterMetadataRequest(tuple(topics)))
