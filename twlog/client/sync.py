# -*- test-case-name: tests.spark.test_source -*-
"""A small synchronous broker client over blocking sockets, for processes without a reactor.

Spark's Python workers are plain processes: they cannot run Twisted's reactor,
so the Spark reader (L{twlog.spark}) talks to brokers through this module.  It
frames requests as C{[int32 size][frame]} and reuses the pure codec
(L{twlog.protocol.codec}) and message decoder (L{twlog.storage.message}), so
the bytes on the wire are exactly those of the Twisted client.  Every socket
has a timeout; failures are typed (L{twlog.errors}) and name the broker.

Discovery (L{discover}) asks each broker for METADATA, or reads ZooKeeper's
registrations with kazoo's synchronous client: it is meant for the Spark
driver, once per plan, never per row.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence

import attrs

from twlog.errors import NO_ERROR, BrokerTimeout, ConnectionFailed, ProtocolViolation, UnknownTopic, check
from twlog.protocol.codec import (
    FetchRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetsRequest,
    Request,
    Response,
    decode_response,
    describe_request,
    encode_request,
)

DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024

_SIZE = struct.Struct(">i")


def parse_brokers(brokers: str) -> list[tuple[str, int]]:
    """C{"host:port,host:port"} as a list of C{(host, port)}; IPv6 hosts in brackets."""
    pairs = []
    for item in filter(None, (part.strip() for part in brokers.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"broker address {item!r} is not host:port")
        pairs.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not pairs:
        raise ValueError("no broker address given")
    return pairs


class SyncConnection:
    """One blocking connection to a broker; requests are answered in order, one at a time."""

    def __init__(
        self, host: str, port: int, timeout_s: float = 30.0, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
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
                self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
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
            if not 0 <= size <= self.max_response_bytes:
                raise ProtocolViolation(
                    f"broker {self.address} sent a {size}-byte response, larger than max_response_bytes "
                    f"{self.max_response_bytes}; connection dropped"
                )
            response = decode_response(request, bytes(self._recv_exactly(sock, size)))
        except TimeoutError:
            self.close()
            raise BrokerTimeout(f"no answer from broker {self.address} within {self.timeout_s:g} s") from None
        except ConnectionFailed:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise ConnectionFailed(f"connection to broker {self.address} failed: {e}") from None
        return check(response, f"broker {self.address} refused {describe_request(request)}")

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Up to C{max_bytes} of raw log from C{offset}; broker errors raise their typed exceptions."""
        return self.call(FetchRequest(topic, partition, offset, max_bytes)).messages

    def offset(self, topic: str, partition: int, time: int) -> int:
        """The single offset OFFSETS answers for C{time} (L{LATEST} or L{EARLIEST})."""
        offsets = self.call(OffsetsRequest(topic, partition, time, 1)).offsets
        return offsets[0] if offsets else 0

    def metadata(self, topics: Sequence[str] = ()) -> MetadataResponse:
        """This broker's id, address and topics (every topic it holds when C{topics} is empty)."""
        return self.call(MetadataRequest(tuple(topics)))


@attrs.frozen(order=True)
class TopicPartition:
    """One partition of a topic in the cluster: held by broker C{broker_id} at C{host:port}."""

    topic: str
    broker_id: int
    partition: int
    host: str = attrs.field(order=False)
    port: int = attrs.field(order=False)

    @property
    def name(self) -> str:
        """The cluster-wide name C{<broker id>-<partition>}."""
        return f"{self.broker_id}-{self.partition}"


def discover(
    topics: Iterable[str], *, brokers: str | None = None, zookeeper: str | None = None, timeout_s: float = 30.0
) -> list[TopicPartition]:
    """Every partition of C{topics} in the cluster, sorted.

    With C{brokers}, each broker is asked METADATA for all its topics (a topic
    it has no data for is not its); with C{zookeeper}, the brokers' registrations
    are read.  Addresses are those given (static brokers) or registered (ZooKeeper).

    @raise UnknownTopic: a topic no broker holds, naming the brokers asked.
    @raise ConnectionFailed: a broker that cannot be reached, naming it.
    """
    topics = list(dict.fromkeys(topics))
    found: list[TopicPartition] = []
    if (brokers is None) == (zookeeper is None):
        raise ValueError("give either the brokers option (host:port,...) or the zookeeper option, not both or none")
    if brokers is not None:
        asked = parse_brokers(brokers)
        seen: set[int] = set()
        for host, port in asked:
            with SyncConnection(host, port, timeout_s) as connection:
                metadata = connection.metadata()
            if metadata.broker_id in seen:
                continue
            seen.add(metadata.broker_id)
            held = {t.topic: t.partitions for t in metadata.topics if t.error == NO_ERROR}
            for topic in topics:
                for partition in range(held.get(topic, 0)):
                    found.append(TopicPartition(topic, metadata.broker_id, partition, host, port))
        where = "brokers " + ", ".join(f"{h}:{p}" for h, p in asked)
    else:
        found = _zookeeper_partitions(topics, zookeeper, timeout_s)
        where = f"the brokers registered in ZooKeeper at {zookeeper}"
    for topic in topics:
        if not any(tp.topic == topic for tp in found):
            raise UnknownTopic(f"topic {topic!r} is on none of {where}")
    return sorted(found)


def _zookeeper_partitions(topics: list[str], zookeeper: str, timeout_s: float) -> list[TopicPartition]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    from twlog.coord.paths import BROKER_IDS, broker_id_path, broker_topic_path

    zk = KazooClient(zookeeper, timeout=timeout_s)
    try:
        zk.start(timeout=timeout_s)
    except Exception as e:
        zk.close()
        raise ConnectionFailed(f"cannot connect to ZooKeeper at {zookeeper}: {e}") from None
    try:
        addresses: dict[int, tuple[str, int]] = {}
        for child in zk.get_children(BROKER_IDS) if zk.exists(BROKER_IDS) else []:
            try:
                data, _ = zk.get(broker_id_path(int(child)))
            except NoNodeError:
                continue
            (host, port), = parse_brokers(data.decode())
            addresses[int(child)] = (host, port)
        found = []
        for topic in topics:
            try:
                children = zk.get_children(broker_topic_path(topic))
            except NoNodeError:
                continue
            for child in children:
                broker_id = int(child)
                if broker_id not in addresses:
                    continue  # registered topic of a broker that has left
                try:
                    data, _ = zk.get(broker_topic_path(topic, broker_id))
                except NoNodeError:
                    continue
                host, port = addresses[broker_id]
                for partition in range(int(data.decode() or 0)):
                    found.append(TopicPartition(topic, broker_id, partition, host, port))
        return found
    finally:
        zk.stop()
        zk.close()
