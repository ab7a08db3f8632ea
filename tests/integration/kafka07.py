"""A minimal, blocking Kafka 0.7 client, written from Kafka 0.7's wire layouts and ZooKeeper registry format.

This is the compatibility suite's stand-in for "a client written for a Kafka 0.7
broker": it imports nothing from twlog (no codec, no message-set code, no
ZooKeeper code), so that it checks twlog against 0.7's layouts rather than
against itself.  Everything is spelled out with C{struct}, C{zlib} and raw
sockets, as a 0.7-era client library would do it:

  - requests C{[int32 size][int16 type][body]}, responses C{[int32 size][int16 error][body]};
    strings C{[int16 n][bytes]}; big-endian throughout;
  - 0 PRODUCE C{[topic][int32 partition][int32 set size][set]}, no response;
  - 1 FETCH C{[topic][int32 partition][int64 offset][int32 max size]} -> C{[error][set bytes]};
  - 2 MULTIFETCH C{[int16 n][n x fetch body]} -> C{[error]} then n x C{[int32 size][int16 error][set bytes]};
  - 3 MULTIPRODUCE C{[int16 n][n x produce body]}, no response;
  - 4 OFFSETS C{[topic][int32 partition][int64 time][int32 max]} -> C{[error][int32 n][n x int64]};
  - messages C{[int32 N][int8 magic=0][uint32 crc32][payload]} and
    C{[int32 N][int8 magic=1][int8 attributes][uint32 crc32][payload]}, attribute bits 0-1 the codec
    (1 = gzip: the payload is a gzipped inner message set);
  - offsets are byte positions: the next offset is C{offset + 4 + N};
  - a fetch's last entry may be partial and is dropped; when not one whole message fits in the
    fetched bytes, the client doubles its fetch size and asks again;
  - C{/brokers/ids/<id>} holds C{<creator id>:<host>:<port>} and is read with C{split(":")}
    (0.7's C{Broker.createBroker}), so a bare C{host:port} value fails here, as it failed 0.7 clients;
  - the ZooKeeper-balanced consumer registers C{/consumers/<g>/ids/<consumer id>} with 0.7's
    topic-count value C{{ "topic": n }}, sorts partitions C{"<broker>-<partition>"} and thread ids,
    gives each thread a contiguous range (the first |P| mod |C| threads one extra), claims
    C{/consumers/<g>/owners/<t>/<b-p>} (on a taken node: release all, back off, retry), and keeps its
    position in C{/consumers/<g>/offsets/<t>/<b-p>}.

Only what the compatibility tests need; kazoo is used directly for ZooKeeper.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4

#: Kafka 0.7's error codes: the only ones a 0.7 client knows.
UNKNOWN, NO_ERROR, OFFSET_OUT_OF_RANGE, INVALID_MESSAGE, WRONG_PARTITION, INVALID_FETCH_SIZE = -1, 0, 1, 2, 3, 4
KAFKA07_ERROR_CODES = frozenset(range(-1, 5))

LATEST, EARLIEST = -1, -2

NO_CODEC, GZIP = 0, 1
CODEC_MASK = 0x03


class Kafka07Error(Exception):
    """Something a 0.7 client would raise."""


class BrokerError(Kafka07Error):
    """A non-zero error code in a response."""

    def __init__(self, code: int, what: str = "") -> None:
        super().__init__(f"broker error {code}" + (f" ({what})" if what else ""))
        self.code = code


class InvalidMessage(Kafka07Error):
    """A whole entry that is not a valid message (size, magic, codec or CRC)."""


class MessageSizeTooLarge(Kafka07Error):
    """Not one whole message fits even in the largest fetch size the client allows."""


class ConnectionClosed(Kafka07Error):
    """The broker closed the connection."""


class RebalanceFailed(Kafka07Error):
    """A consumer could not claim its partitions within its retries."""


# ---------------------------------------------------------------------------------------------------------------
# Messages and message sets


def encode_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def crc32(payload: bytes) -> int:
    return zlib.crc32(payload) & 0xFFFFFFFF


def message(payload: bytes, magic: int = 0, attributes: int = 0) -> bytes:
    """One message set entry: C{[int32 N][message]}, magic 0 or 1."""
    if magic == 0:
        body = struct.pack(">bI", 0, crc32(payload)) + payload
    elif magic == 1:
        body = struct.pack(">bbI", 1, attributes, crc32(payload)) + payload
    else:
        raise ValueError(f"magic {magic}")
    return struct.pack(">i", len(body)) + body


def message_set(payloads: Iterable[bytes], magic: int = 0) -> bytes:
    """Uncompressed messages, back to back."""
    return b"".join(message(p, magic) for p in payloads)


def gzip_message_set(payloads: Iterable[bytes]) -> bytes:
    """One magic-1 gzip wrapper whose payload is the gzipped bytes of an inner magic-0 set."""
    return message(gzip.compress(message_set(payloads)), magic=1, attributes=GZIP)


@dataclass(frozen=True)
class Message:
    """A message as a 0.7 consumer sees it: where its entry starts, where the next one starts, its payload.

    Messages inside a compressed wrapper share the wrapper's offsets.
    """

    offset: int
    next_offset: int
    payload: bytes
    magic: int = 0
    codec: int = NO_CODEC


def decode_message_set(data: bytes, base_offset: int = 0) -> tuple[list[Message], int]:
    """The whole messages in C{data} (fetched from C{base_offset}) and how many bytes they cover.

    A partial last entry (its size field or its body cut off) ends the set and is not counted.
    Compressed wrappers are opened (their inner set must be whole).
    """
    messages: list[Message] = []
    position = 0
    while len(data) - position >= 4:
        (size,) = struct.unpack_from(">i", data, position)
        if size < 0:
            raise InvalidMessage(f"negative message size {size} at {base_offset + position}")
        if len(data) - position - 4 < size:
            break  # a partial trailing message: the next fetch starts here
        body = data[position + 4: position + 4 + size]
        offset, next_offset = base_offset + position, base_offset + position + 4 + size
        messages.extend(_decode_message(body, offset, next_offset))
        position += 4 + size
    return messages, position


def _decode_message(body: bytes, offset: int, next_offset: int) -> list[Message]:
    if len(body) < 5:
        raise InvalidMessage(f"message of {len(body)} bytes at {offset}")
    magic = body[0]
    if magic == 0:
        attributes, (crc,), payload = 0, struct.unpack_from(">I", body, 1), body[5:]
    elif magic == 1:
        if len(body) < 6:
            raise InvalidMessage(f"magic-1 message of {len(body)} bytes at {offset}")
        attributes, (crc,), payload = body[1], struct.unpack_from(">I", body, 2), body[6:]
    else:
        raise InvalidMessage(f"unknown magic {magic} at {offset}")
    if crc32(payload) != crc:
        raise InvalidMessage(f"CRC mismatch at {offset}")
    codec = attributes & CODEC_MASK
    if codec == NO_CODEC:
        return [Message(offset, next_offset, payload, magic, codec)]
    if codec != GZIP:
        raise InvalidMessage(f"codec {codec} at {offset} is not supported by this client")
    try:
        inner_bytes = gzip.decompress(payload)
    except (OSError, EOFError, zlib.error) as e:
        raise InvalidMessage(f"bad gzip payload at {offset}: {e}") from None
    inner, valid = decode_message_set(inner_bytes)
    if valid != len(inner_bytes):
        raise InvalidMessage(f"partial inner message set in the wrapper at {offset}")
    return [Message(offset, next_offset, m.payload, magic, GZIP) for m in inner]


# ---------------------------------------------------------------------------------------------------------------
# One broker connection


class Connection:
    """A blocking connection to one broker, speaking request types 0 to 4 only."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        self.host, self.port = host, port
        self._socket = socket.create_connection((host, port), timeout=timeout_s)

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # framing

    def send(self, request_type: int, body: bytes) -> None:
        self._socket.sendall(struct.pack(">ih", 2 + len(body), request_type) + body)

    def receive(self) -> tuple[int, bytes]:
        """The next response: (error code, body after the error code)."""
        (size,) = struct.unpack(">i", self._read(4))
        if size < 2:
            raise Kafka07Error(f"response of size {size}")
        frame = self._read(size)
        (error,) = struct.unpack_from(">h", frame)
        return error, frame[2:]

    def request(self, request_type: int, body: bytes) -> tuple[int, bytes]:
        self.send(request_type, body)
        return self.receive()

    def _read(self, count: int) -> bytes:
        chunks, left = [], count
        while left:
            chunk = self._socket.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionClosed(f"{self.host}:{self.port} closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    # request bodies

    @staticmethod
    def produce_body(topic: str, partition: int, messages: bytes) -> bytes:
        return encode_string(topic) + struct.pack(">ii", partition, len(messages)) + messages

    @staticmethod
    def fetch_body(topic: str, partition: int, offset: int, max_size: int) -> bytes:
        return encode_string(topic) + struct.pack(">iqi", partition, offset, max_size)

    # the five request types

    def produce(self, topic: str, partition: int, messages: bytes) -> None:
        """0 PRODUCE: no response."""
        self.send(PRODUCE, self.produce_body(topic, partition, messages))

    def multiproduce(self, produces: Iterable[tuple[str, int, bytes]]) -> None:
        """3 MULTIPRODUCE: no response."""
        produces = list(produces)
        body = struct.pack(">h", len(produces)) + b"".join(self.produce_body(*p) for p in produces)
        self.send(MULTIPRODUCE, body)

    def fetch(self, topic: str, partition: int, offset: int, max_size: int) -> tuple[int, bytes]:
        """1 FETCH: (error, message set bytes)."""
        return self.request(FETCH, self.fetch_body(topic, partition, offset, max_size))

    def multifetch(self, fetches: Iterable[tuple[str, int, int, int]]) -> tuple[int, list[tuple[int, bytes]]]:
        """2 MULTIFETCH: (outer error, [(error, message set bytes)] in request order)."""
        fetches = list(fetches)
        body = struct.pack(">h", len(fetches)) + b"".join(self.fetch_body(*f) for f in fetches)
        error, rest = self.request(MULTIFETCH, body)
        parts, position = [], 0
        while position < len(rest):
            (size,) = struct.unpack_from(">i", rest, position)
            (part_error,) = struct.unpack_from(">h", rest, position + 4)
            parts.append((part_error, rest[position + 6: position + 4 + size]))
            position += 4 + size
        return error, parts

    def offsets(self, topic: str, partition: int, time_ms: int, max_offsets: int = 1) -> tuple[int, list[int]]:
        """4 OFFSETS: (error, offsets newest first)."""
        body = encode_string(topic) + struct.pack(">iqi", partition, time_ms, max_offsets)
        error, rest = self.request(OFFSETS, body)
        if len(rest) < 4:
            return error, []
        (count,) = struct.unpack_from(">i", rest)
        return error, list(struct.unpack_from(f">{count}q", rest, 4))


def fetch_messages(connection: Connection, topic: str, partition: int, offset: int, fetch_size: int,
                   max_fetch_size: int = 16 << 20) -> tuple[list[Message], int, int]:
    """FETCH from C{offset}, growing the fetch size as 0.7 clients did.

    Returns (whole messages, the offset to fetch next, the fetch size that got them).
    When the response holds bytes but not one whole message (the first message is
    larger than the fetch size: the broker sent a partial message), the size is
    doubled and the fetch repeated, up to C{max_fetch_size}.
    """
    size = fetch_size
    while True:
        error, data = connection.fetch(topic, partition, offset, size)
        if error != NO_ERROR:
            raise BrokerError(error, f"FETCH {topic} {partition} @{offset}")
        messages, valid = decode_message_set(data, offset)
        if messages or not data:
            return messages, offset + valid, size
        if size >= max_fetch_size:
            raise MessageSizeTooLarge(f"{topic} {partition} @{offset}: a message larger than {max_fetch_size}")
        size = min(size * 2, max_fetch_size)


# ---------------------------------------------------------------------------------------------------------------
# ZooKeeper registry, read as 0.7 read it


@dataclass(frozen=True)
class Broker:
    id: int
    creator_id: str
    host: str
    port: int


def parse_broker(broker_id: int | str, value: bytes | str) -> Broker:
    """0.7's C{Broker.createBroker}: the value split on C{":"} into creator id, host and port.

    A value of any other shape (a bare C{host:port}, say) raises ValueError, as it did in 0.7 clients.
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    creator_id, host, port = value.split(":")
    return Broker(int(broker_id), creator_id, host, int(port))


def topic_count_value(topic_count: dict[str, int]) -> bytes:
    """0.7's consumer registration value (C{TopicCount.toJsonString}): C{{ "topic": n }}."""
    return ("{ " + ",".join(f'"{t}": {n}' for t, n in topic_count.items()) + " }").encode("utf-8")


def consumer_thread_ids(consumer_id: str, topic_count: dict[str, int]) -> dict[str, list[str]]:
    """Per topic, a consumer's thread ids C{<consumer id>-<i>}."""
    return {topic: [f"{consumer_id}-{i}" for i in range(n)] for topic, n in topic_count.items()}


def assign(partitions: list[str], threads: list[str], thread: str) -> list[str]:
    """0.7's range assignment: C{thread}'s contiguous share of the sorted partitions."""
    partitions, threads = sorted(partitions), sorted(threads)
    position = threads.index(thread)
    per_thread, extra = divmod(len(partitions), len(threads))
    start = per_thread * position + min(position, extra)
    count = per_thread + (1 if position < extra else 0)
    return partitions[start:start + count]


def read_brokers(zk: KazooClient) -> dict[int, Broker]:
    brokers = {}
    for child in zk.get_children("/brokers/ids"):
        try:
            value, _ = zk.get(f"/brokers/ids/{child}")
        except NoNodeError:
            continue
        brokers[int(child)] = parse_broker(child, value)
    return brokers


def read_partitions(zk: KazooClient, topic: str, brokers: dict[int, Broker]) -> list[str]:
    """The topic's partitions C{"<broker id>-<partition>"} on live brokers, from C{/brokers/topics/<t>/<id>}."""
    partitions = []
    try:
        children = zk.get_children(f"/brokers/topics/{topic}")
    except NoNodeError:
        return []
    for child in children:
        if int(child) not in brokers:
            continue
        try:
            value, _ = zk.get(f"/brokers/topics/{topic}/{child}")
        except NoNodeError:
            continue
        partitions.extend(f"{child}-{p}" for p in range(int(value.decode())))
    return sorted(partitions)


# ---------------------------------------------------------------------------------------------------------------
# The ZooKeeper-balanced consumer


class BalancedConsumer:
    """One member of a consumer group, in Kafka 0.7's style, driven by whoever calls L{run} (one thread).

    C{on_message(thread_id, "<b>-<p>", message)} is called for each message in
    partition order; the consumer's position moves past a message once the call
    returns, and is committed to C{/consumers/<g>/offsets/<t>/<b>-<p>} every
    C{commit_interval_s}, before each rebalance and when L{run} ends.
    """

    def __init__(self, zookeeper: str, group: str, topic: str, *, streams: int = 1,
                 consumer_id: str | None = None, fetch_size: int = 300 * 1024, max_fetch_size: int = 16 << 20,
                 rebalance_retries: int = 20, rebalance_backoff_s: float = 0.2,
                 commit_interval_s: float = 0.5, socket_timeout_s: float = 10.0) -> None:
        self.zookeeper, self.group, self.topic = zookeeper, group, topic
        self.topic_count = {topic: streams}
        self.consumer_id = consumer_id or f"{group}_{socket.gethostname()}-{int(time.time() * 1000)}"
        self.threads = consumer_thread_ids(self.consumer_id, self.topic_count)[topic]
        self.fetch_size, self.max_fetch_size = fetch_size, max_fetch_size
        self.rebalance_retries, self.rebalance_backoff_s = rebalance_retries, rebalance_backoff_s
        self.commit_interval_s, self.socket_timeout_s = commit_interval_s, socket_timeout_s
        self.zk = KazooClient(zookeeper)
        #: partition name -> owning thread id, as claimed in the last successful rebalance.
        self.owned: dict[str, str] = {}
        #: partition name -> next offset to consume.
        self.positions: dict[str, int] = {}
        self._committed: dict[str, int] = {}
        self._fetch_sizes: dict[str, int] = {}
        self._brokers: dict[int, Broker] = {}
        self._connections: dict[int, Connection] = {}
        self._rebalance_needed = threading.Event()
        self.rebalances = 0
        #: how many times a partition's fetch size was doubled because not one whole message fitted.
        self.fetch_size_growths = 0

    # paths
    def _ids(self) -> str:
        return f"/consumers/{self.group}/ids"

    def _owner(self, partition: str) -> str:
        return f"/consumers/{self.group}/owners/{self.topic}/{partition}"

    def _offset(self, partition: str) -> str:
        return f"/consumers/{self.group}/offsets/{self.topic}/{partition}"

    def start(self, timeout_s: float = 15.0) -> BalancedConsumer:
        """Connect, register the consumer, and watch the group and the topic's brokers."""
        self.zk.start(timeout=timeout_s)
        self.zk.create(f"{self._ids()}/{self.consumer_id}", topic_count_value(self.topic_count),
                       ephemeral=True, makepath=True)
        self.zk.ensure_path(f"/brokers/topics/{self.topic}")
        for path in (self._ids(), "/brokers/ids", f"/brokers/topics/{self.topic}"):
            ChildrenWatch(self.zk, path, self._changed)
        return self

    def _changed(self, children) -> None:
        self._rebalance_needed.set()

    @property
    def rebalance_pending(self) -> bool:
        return self._rebalance_needed.is_set()

    def rebalance(self) -> None:
        """Commit, release everything, then claim this consumer's share (retrying on taken owner nodes)."""
        for _ in range(self.rebalance_retries):
            self._rebalance_needed.clear()
            self.commit()
            self._release_all()
            if self._try_rebalance():
                self.rebalances += 1
                return
            time.sleep(self.rebalance_backoff_s)
        raise RebalanceFailed(f"{self.consumer_id}: no rebalance within {self.rebalance_retries} attempts")

    def _try_rebalance(self) -> bool:
        threads = []
        for member in self.zk.get_children(self._ids()):
            try:
                value, _ = self.zk.get(f"{self._ids()}/{member}")
            except NoNodeError:
                continue
            threads.extend(consumer_thread_ids(member, json.loads(value.decode())).get(self.topic, []))
        self._brokers = read_brokers(self.zk)
        partitions = read_partitions(self.zk, self.topic, self._brokers)
        wanted = {}
        for thread in self.threads:
            for partition in assign(partitions, threads, thread):
                wanted[partition] = thread
        for partition, thread in sorted(wanted.items()):
            try:
                self.zk.create(self._owner(partition), thread.encode(), ephemeral=True, makepath=True)
            except NodeExistsError:
                self._release_all()
                return False
            self.owned[partition] = thread
        for partition in self.owned:
            offset, committed = self._start_offset(partition)
            self.positions[partition] = offset
            if committed:
                self._committed[partition] = offset
            self._fetch_sizes[partition] = self.fetch_size
        return True

    def _release_all(self) -> None:
        for partition in list(self.owned):
            try:
                self.zk.delete(self._owner(partition))
            except NoNodeError:
                pass
            del self.owned[partition]
        self.positions.clear()
        self._committed.clear()

    def _start_offset(self, partition: str) -> tuple[int, bool]:
        """The committed offset (and True), or the earliest offset by OFFSETS -2 (and False)."""
        try:
            value, _ = self.zk.get(self._offset(partition))
            return int(value.decode()), True
        except NoNodeError:
            broker, number = (int(x) for x in partition.split("-"))
            error, offsets = self._connection(broker).offsets(self.topic, number, EARLIEST, 1)
            if error != NO_ERROR:
                raise BrokerError(error, f"OFFSETS {self.topic} {partition}") from None
            return offsets[0], False

    def commit(self) -> None:
        """Write every position that moved since the last commit."""
        for partition, offset in list(self.positions.items()):
            if self._committed.get(partition) == offset:
                continue
            value = str(offset).encode()
            try:
                self.zk.set(self._offset(partition), value)
            except NoNodeError:
                self.zk.create(self._offset(partition), value, makepath=True)
            self._committed[partition] = offset

    def _connection(self, broker_id: int) -> Connection:
        if broker_id not in self._connections:
            broker = self._brokers[broker_id]
            self._connections[broker_id] = Connection(broker.host, broker.port, self.socket_timeout_s)
        return self._connections[broker_id]

    def fetch_round(self, on_message: Callable[[str, str, Message], None]) -> int:
        """One MULTIFETCH per broker over the owned partitions; deliver what came back. Returns the count."""
        by_broker: dict[int, list[str]] = {}
        for partition in sorted(self.owned):
            by_broker.setdefault(int(partition.split("-")[0]), []).append(partition)
        delivered = 0
        for broker_id, partitions in by_broker.items():
            fetches = [(self.topic, int(p.split("-")[1]), self.positions[p], self._fetch_sizes[p]) for p in partitions]
            error, parts = self._connection(broker_id).multifetch(fetches)
            if error != NO_ERROR:
                raise BrokerError(error, f"MULTIFETCH on broker {broker_id}")
            for partition, (part_error, data) in zip(partitions, parts):
                if part_error == OFFSET_OUT_OF_RANGE:  # 0.7's autooffset.reset = smallest
                    _, earliest = self._connection(broker_id).offsets(self.topic, int(partition.split("-")[1]),
                                                                      EARLIEST, 1)
                    self.positions[partition] = earliest[0]
                    continue
                if part_error != NO_ERROR:
                    raise BrokerError(part_error, f"MULTIFETCH part {self.topic} {partition}")
                messages, valid = decode_message_set(data, self.positions[partition])
                if not messages and data:  # not one whole message: grow and ask again next round
                    if self._fetch_sizes[partition] >= self.max_fetch_size:
                        raise MessageSizeTooLarge(f"{self.topic} {partition} @{self.positions[partition]}")
                    self._fetch_sizes[partition] = min(self._fetch_sizes[partition] * 2, self.max_fetch_size)
                    self.fetch_size_growths += 1
                    continue
                for m in messages:
                    on_message(self.owned[partition], partition, m)
                    self.positions[partition] = m.next_offset
                    delivered += 1
        return delivered

    def run(self, on_message: Callable[[str, str, Message], None], stop: threading.Event,
            deadline_s: float, idle_sleep_s: float = 0.05) -> None:
        """Rebalance when needed, fetch and deliver, commit now and then; until C{stop} or C{deadline_s}
        (a time.monotonic() value) and then commit."""
        last_commit = time.monotonic()
        try:
            while not stop.is_set() and time.monotonic() < deadline_s:
                if self._rebalance_needed.is_set():
                    self.rebalance()
                delivered = self.fetch_round(on_message)
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self.commit()
                    last_commit = time.monotonic()
                if not delivered:
                    stop.wait(idle_sleep_s)
        finally:
            self.commit()

    def close(self) -> None:
        """Commit, release the owner nodes, leave the group, disconnect."""
        try:
            if self.zk.connected:
                self.commit()
                self._release_all()
                try:
                    self.zk.delete(f"{self._ids()}/{self.consumer_id}")
                except NoNodeError:
                    pass
        finally:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
            self.zk.stop()
            self.zk.close()
