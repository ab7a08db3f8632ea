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
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from twlog.client.options import ClientOptions
from twlog.client.reader import BATCH, Fetched, PartitionReader, Refresh, SizeProbe
from twlog.client.reader import Request as ReaderRequest
from twlog.client.sasl import SaslExchange
from twlog.client.tls import describe_tls_failure
from twlog.errors import (
    CONNECTION_REFUSALS,
    BrokerError,
    BrokerTimeout,
    ConnectionFailed,
    ConnectionLost,
    InvalidTopic,
    ProtocolViolation,
    check,
    error_for,
    error_message,
)
from twlog.partition import TopicPartition
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
from twlog.protocol.frames import FrameBuffer, FrameTooLarge, frame
from twlog.protocol.replication_codec import ClusterMetadataV2Request, ClusterMetadataV2Response
from twlog.storage.batch import MessageBatch
from twlog.storage.manager import validate_topic

#: The most one read of a response asks the socket for.
_MAX_READ = 4 * 1024 * 1024


def check_topic(topic: str, context: str) -> None:
    """Refuse a topic name the broker would refuse, before a request of Kafka 0.7's types (OFFSETS) is sent:
    the broker answers those with 0.7's codes only, where an invalid topic is just Unknown (-1).

    @raise InvalidTopic: naming C{context} and what is wrong with the name.
    """
    try:
        validate_topic(topic)
    except InvalidTopic as e:
        raise InvalidTopic(f"{error_message(InvalidTopic.code, context)} ({e})") from None


def _over(options: ClientOptions) -> str:
    """C{" over TLS"} for a TLS client (its errors say so), else nothing."""
    return " over TLS" if options.tls is not None else ""


def _one_line(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return describe_tls_failure(str(e))
    return " ".join(str(e).split()) or type(e).__name__


class SyncConnection:
    """One blocking connection to a broker; requests are answered in order, one at a time."""

    def __init__(self, host: str, port: int, options: ClientOptions | None = None, *,
                 connect: Callable[..., socket.socket] = socket.create_connection, **overrides: Any) -> None:
        """@param connect: C{(address, timeout=) -> socket}, as C{socket.create_connection} (the default): what
            opens the connection (tests pass a fake socket's).
        @param overrides: fields of L{ClientOptions} replacing those of C{options} (C{timeout_s=5}...)."""
        self.host = host
        self.port = port
        self._open = connect
        self.options = ClientOptions.build(options, **overrides)
        self._sock: socket.socket | None = None
        self._context: ssl.SSLContext | None = None
        #: Whether any answer came on this connection.
        self._answered = False
        self._frames = FrameBuffer(self.options.max_response_bytes)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._frames.clear()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            try:
                sock = self._open((self.host, self.port), timeout=self.options.connect_timeout_s)
                if self.options.tls is not None:
                    sock = self._tls_context().wrap_socket(sock, server_hostname=self.host)
                self._sock = sock
                self._sock.settimeout(self.options.timeout_s)
            except OSError as e:
                raise ConnectionFailed(f"cannot connect to broker {self.address}{_over(self.options)}: "
                                       f"{_one_line(e)}") from None
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.options.sasl is not None:
                self._authenticate(self._sock)
        return self._sock

    def _authenticate(self, sock: socket.socket) -> None:
        """Run the SASL exchange of C{options.sasl} on the new connection (L{twlog.client.sasl})."""
        assert self.options.sasl is not None
        steps = SaslExchange(self.options.sasl, self.options.tls is not None, self.address).requests()
        request = next(steps)
        while True:
            sock.sendall(frame(encode_request(request)))
            response = decode_response(request, self._receive_frame(sock))
            try:
                request = steps.send(response)
            except StopIteration:
                return

    def _tls_context(self) -> ssl.SSLContext:
        """The TLS context of this connection's settings, made once (a reconnect reuses it)."""
        if self._context is None:
            assert self.options.tls is not None
            self._context = self.options.tls.ssl_context()
        return self._context

    def _tls_hint(self) -> str:
        """For a plaintext connection closed before its first answer: the port may be a broker's TLS port (which
        closes on bytes that are not TLS without a word)."""
        if self.options.tls is not None or self._answered:
            return ""
        return f" (if {self.address} is a TLS port, this client needs TLS: --tls-ca)"

    def _receive_frame(self, sock: socket.socket) -> bytes:
        """The next response frame, parsed by the one frame buffer (L{twlog.protocol.frames})."""
        buffer = self._frames
        while (got := buffer.next_frame()) is None:
            data = sock.recv(min(max(buffer.needed_bytes, 65536), _MAX_READ))
            if not data:
                raise ConnectionLost(f"broker {self.address} closed the connection before answering{self._tls_hint()}")
            buffer.append(data)
        self._answered = True
        return bytes(got)

    def call(self, request: Request) -> Response:
        """Send C{request} (a codec value) and return its decoded response, its error checked.

        @raise BrokerError: the response's error code.
        @raise ProtocolViolation: the response is over C{max_response_bytes} or does not parse.
        """
        return self._exchange(request, self._receive_frame)

    def _exchange(self, request: Request, receive: Callable[[socket.socket], bytes | memoryview], *,
                  sent: bool = False) -> Response:
        """L{call}, the answer's frame taken by C{receive(sock)}; C{request} not sent again when C{sent} (it went
        ahead: L{twlog.spark.fetch.FetchConnection}, which receives fetches into a reused buffer)."""
        try:
            sock = self._connect()
            if not sent:
                sock.sendall(frame(encode_request(request)))
            answer = receive(sock)
            if len(answer) == 2 and int.from_bytes(answer, "big", signed=True) in CONNECTION_REFUSALS:
                # Refused at a cap (docs/protocol.md, "Connection limits"): the broker closes the connection.
                raise error_for(int.from_bytes(answer, "big", signed=True),
                                f"broker {self.address} refused the connection")
            response = decode_response(request, answer)
        except FrameTooLarge as e:
            self.close()
            raise ProtocolViolation(
                f"broker {self.address} sent a {e.length}-byte response, larger than max_response_bytes "
                f"{self.options.max_response_bytes}; connection dropped"
            ) from None
        except TimeoutError:
            self.close()
            raise BrokerTimeout(f"no answer from broker {self.address} within {self.options.timeout_s:g} s") from None
        except ConnectionFailed:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise ConnectionLost(f"connection to broker {self.address}{_over(self.options)} failed: "
                                 f"{_one_line(e)}") from None
        return check(response, f"broker {self.address} refused {describe_request(request)}")

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Up to C{max_bytes} of raw log from C{offset}; broker errors raise their typed exceptions.

        Sent as twlog's WAIT_FETCH waiting 0 ms, which names every error precisely (FetchSizeTooSmall,
        OffsetNotOnBoundary...), where a FETCH is answered as a Kafka 0.7 broker would.  A message larger than
        C{max_bytes} raises L{FetchSizeTooSmall} naming its size (the reader's size probe).
        """
        reader = PartitionReader(_identity(topic, partition), offset, max_bytes=max_bytes, decode=_raw,
                                 label=f"{partition} (broker {self.address})", max_refreshes=0)
        return read(self, reader).data

    def fetch_batch(self, topic: str, partition: int, offset: int, max_bytes: int, *, on_corrupt: str = "fail",
                    previous: int | None = None) -> MessageBatch:
        """L{fetch}, decoded as a L{MessageBatch} (every CRC checked, no object per message until iterated).

        A corrupt message ends the batch (the valid messages before it are in it, C{corrupt} names it) or, with
        C{on_corrupt="skip"}, is skipped; C{previous} (the offset of the message before C{offset}) lets a fetch
        from a corrupt message's offset, which the broker refuses, read it from C{previous}
        (L{twlog.client.reader}).
        """
        reader = PartitionReader(_identity(topic, partition), offset, max_bytes=max_bytes, on_corrupt=on_corrupt,
                                 max_decompressed_bytes=self.options.max_decompressed_bytes, decode=BATCH,
                                 label=partition, boundary=(previous, offset) if previous is not None else None,
                                 max_refreshes=0)
        return read(self, reader)

    def fetch_part(self, part: FetchRequest) -> bytes:
        """The bytes of one fetch, sent as a one-part WAIT_FETCH waiting 0 ms; broker errors raise."""
        request = WaitFetchRequest(0, 0, (part,))
        parts = self.call(request).parts
        if len(parts) != 1:
            self.close()
            raise ProtocolViolation(f"broker {self.address} answered a one-part WAIT_FETCH with {len(parts)} parts")
        return check(parts[0], f"broker {self.address} refused {describe_request(request)}").messages

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

    def cluster_metadata_v2(self, topics: Sequence[str] = ()) -> ClusterMetadataV2Response:
        """CLUSTER_METADATA_V2: as L{cluster_metadata}, replicated topics described by partition (leader,
        leader epoch, replicas, ISR).  An older broker answers InvalidRequest and closes the connection."""
        return self.call(ClusterMetadataV2Request(tuple(topics)))


# -- the blocking driver of a partition reader -----------------------------------------------------


@attrs.frozen
class RawFetch:
    """A fetch's bytes, undecoded (a reader's decode for L{SyncConnection.fetch})."""

    data: bytes
    next_offset: int
    last_boundary: None = None


def _raw(reader: PartitionReader, data: bytes, offset: int) -> RawFetch:
    return RawFetch(data, offset)


def _identity(topic: str, number: int) -> TopicPartition:
    """The partition a broker knows as C{number} (what a request names it by)."""
    return TopicPartition(topic, str(number))


def answer(connection: SyncConnection, reader: PartitionReader, request: ReaderRequest) -> bytes | Exception:
    """The broker's answer to the reader's C{request}: the bytes, or the broker or connection error it raised."""
    try:
        if isinstance(request, SizeProbe):
            return connection.call(request.part(reader.tp)).messages
        return connection.fetch_part(request.part(reader.tp))
    except (BrokerError, ConnectionFailed, BrokerTimeout) as e:
        return e


def read(connection: SyncConnection, reader: PartitionReader,
         refresh: Callable[[Refresh], SyncConnection | None] | None = None) -> Any:
    """One fetch's worth of C{reader} over C{connection}: its probes and re-reads sent, and its refreshes handed to
    C{refresh} (which returns the connection to the partition's leader now; without it, the same connection is
    used again: it reconnects).

    @return: the L{Fetched} value.
    @raise BrokerError: what the reader raises (L{FetchSizeTooSmall}, L{CorruptMessage}...).
    """
    request = reader.next_request()
    while True:
        event = reader.receive(answer(connection, reader, request), request)
        if isinstance(event, Fetched):
            return event.value
        if isinstance(event, Refresh) and refresh is not None:
            connection = refresh(event) or connection
        request = reader.next_request()
