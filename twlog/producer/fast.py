# -*- test-case-name: tests.producer.test_fast -*-
"""L{FireAndForget}: the producer's hot path, a fire-and-forget batch sent without a coroutine.

When a topic's partitions are known and the leader's connection can take a write now (the common case, and
the hot path of a log producer), L{Producer.send} makes the PRODUCE frame in one call
(L{twlog.storage.kernel.produce_frame}: size prefix, topic, partition, every message's header, CRC and
payload in one buffer) and hands it to the connection, which gathers such frames and writes them in one
call per reactor turn or per 64 KiB (L{twlog.client.writes.FrameWriter}).  A batch sent to a partition by
index reuses the route worked out for the last one (the partition, its leader, the frame's head) while the
router's partitions and layout are the same objects; keys and random batches are routed afresh each time.
Anything else (unknown partitions, a replicated partition, a paused or missing connection, a codec, an
audit trail) takes the general path (None).
"""

from __future__ import annotations

import struct

from twisted.internet.defer import Deferred, fail

from twlog.client.pool import ConnectionPool
from twlog.errors import PartitionsOffline
from twlog.partition import TopicPartition
from twlog.protocol.codec import PRODUCE, ProduceRequest
from twlog.protocol.primitives import write_str
from twlog.storage.kernel import produce_frame
from twlog.storage.message import CODEC_NONE, encode_message_set

__all__ = ["FireAndForget", "produce_head"]

_TYPE = struct.Struct(">h")
_PARTITION = struct.Struct(">i")


def produce_head(topic: str, partition: int) -> bytes:
    """The bytes of a PRODUCE frame before its message set's size: the request type, the topic, the partition."""
    return _TYPE.pack(PRODUCE) + write_str(topic) + _PARTITION.pack(partition)


class _Route:
    """Where batches to one partition index of a topic go, while the router's knowledge is the same."""

    __slots__ = ("head", "layout", "leader", "partitions", "target")

    def __init__(self, partitions, layout, target: TopicPartition, leader: int) -> None:
        self.partitions = partitions
        self.layout = layout
        self.target = target
        self.leader = leader
        self.head = produce_head(target.topic, target.number)


class FireAndForget:
    """Sends fire-and-forget batches of a producer at once, when nothing needs waiting for (L{send})."""

    #: At most this many routes by index are kept (topics times indices); beyond, they are forgotten.
    MAX_ROUTES = 4096

    def __init__(self, router, pool: ConnectionPool) -> None:
        self._router = router
        self._pool = pool
        self._routes: dict[tuple[str, int], _Route] = {}
        self._heads: dict[tuple[str, int], bytes] = {}

    def send(self, topic: str, messages, key: bytes | None, index: int | None,
             codec: int = CODEC_NONE) -> Deferred[None] | None:
        """Send C{messages} (bytes, or a non-empty list of them) now and fire once handed to the connection, or
        None: the general path must take it (it raises the errors of bad messages, as it always has).  With a
        C{codec}, the batch is one compressed wrapper."""
        kind = type(messages)
        if kind is bytes:
            payloads = [messages]
        elif kind is list and messages:
            payloads = messages
        else:
            return None
        router = self._router
        partitions = router.known(topic)
        if partitions is None:
            return None
        if key is None and index is not None:
            route = self._routes.get((topic, index))
            if route is None or route.partitions is not partitions or route.layout is not router.layout():
                route = self._route(topic, partitions, index)
                if not isinstance(route, _Route):
                    return route
            target, leader, head = route.target, route.leader, route.head
        else:
            try:
                target = router.choose(topic, partitions, key, index)
            except (ValueError, PartitionsOffline) as e:
                return fail(e)
            if target.fixed_leader is None:
                return None  # a replicated partition: in its turn, following its leader (twlog.producer.failover)
            leader = router.leader(target)
            head = self._head(target)
        connection = self._pool.get(leader)
        protocol = connection.ready() if connection is not None else None
        if protocol is None:
            return None
        if codec != CODEC_NONE:
            return protocol.send(ProduceRequest(topic, target.number, encode_message_set(payloads, codec)))
        try:
            frame = produce_frame(head, payloads)
        except (TypeError, ValueError):
            return None  # (the general path raises it, with its own words)
        return protocol.send_frame(frame)

    def _route(self, topic: str, partitions, index: int) -> _Route | Deferred | None:
        """The route of C{index} (kept), a failed Deferred (a bad index, an offline partition), or None (a
        replicated partition: the general path)."""
        router = self._router
        layout = router.layout()
        try:
            target = router.choose(topic, partitions, None, index)
        except (ValueError, PartitionsOffline) as e:
            return fail(e)
        if target.fixed_leader is None:
            return None
        if len(self._routes) >= self.MAX_ROUTES:
            self._routes.clear()
        route = self._routes[(topic, index)] = _Route(partitions, layout, target, router.leader(target))
        return route

    def _head(self, target: TopicPartition) -> bytes:
        head = self._heads.get((target.topic, target.number))
        if head is None:
            if len(self._heads) >= self.MAX_ROUTES:
                self._heads.clear()
            head = self._heads[(target.topic, target.number)] = produce_head(target.topic, target.number)
        return head
