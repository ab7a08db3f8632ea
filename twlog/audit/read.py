# -*- test-case-name: tests.audit.test_read,tests.integration.test_audit -*-
"""The audit of one cluster: read a topic and C{twlog-audit} to their ends and count (blocking, no reactor).

Each partition is read from its earliest offset (or, with C{since_ms}, from the
first segment that may hold messages of that time) to the latest offset it
had when reading began, over L{SyncConnection}s: what the brokers have
flushed is what consumers can see, so that is what the audit judges.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from twlog.audit.count import AuditCount
from twlog.client.discovery import discover
from twlog.client.leader import LeaderConnection
from twlog.client.options import ClientOptions
from twlog.client.reader import PartitionReader
from twlog.envelope import AUDIT_TOPIC, decode_event, open_envelope
from twlog.errors import InvalidMessage, UnknownTopic
from twlog.protocol.codec import EARLIEST, LATEST

FETCH_SIZE = 1024 * 1024


def now_ms() -> int:
    return int(time.time() * 1000)


def read_topic(zookeeper: str, topic: str, on_payload: Callable[[bytes], object], *,
               options: ClientOptions | None = None, since_ms: int | None = None) -> int:
    """Call C{on_payload(payload)} for every message of C{topic} in the cluster; return how many.

    @raise UnknownTopic: no broker registered in ZooKeeper holds C{topic}.
    @raise ConnectionFailed: ZooKeeper or a broker holding a partition cannot be reached.
    """
    options = options or ClientOptions()
    read = 0
    for location in discover([topic], zookeeper=zookeeper, options=options):
        with LeaderConnection(location, zookeeper=zookeeper, options=options) as leader:
            connection = leader.connection
            partition = location.number
            end = connection.offset(topic, partition, LATEST)
            offset = connection.offset(topic, partition, EARLIEST)
            if since_ms is not None:
                offset = max(offset, connection.offset(topic, partition, since_ms))
            reader = PartitionReader(location.tp, offset, max_bytes=FETCH_SIZE, end=end, label=location.name,
                                     max_decompressed_bytes=options.max_decompressed_bytes)
            while not reader.done:
                start = reader.offset
                for message in leader.read(reader):
                    if message.offset >= end:
                        break
                    on_payload(message.payload)
                    read += 1
                if reader.offset == start:
                    raise InvalidMessage(f"no whole message at offset {start} of {topic} partition {location.name}")
    return read


class ClusterAudit:
    """What reading one cluster found: the counts, and how many messages of each topic were read."""

    def __init__(self, count: AuditCount, read: int, events_read: int) -> None:
        self.count = count
        self.read = read
        self.events_read = events_read


def count_cluster(zookeeper: str, topic: str, *, window_ms: int | None = None, since_ms: int | None = None,
                  options: ClientOptions | None = None, clock: Callable[[], int] = now_ms) -> ClusterAudit:
    """Read C{topic} and the monitoring events for it in the cluster at C{zookeeper} and count them.

    A cluster without the topic C{twlog-audit} has no events (every window of the topic is then
    C{unreported} once closed).
    """
    count = AuditCount(window_ms)

    def on_event(payload: bytes) -> None:
        event = decode_event(payload)
        if event is not None and event.topic == topic:
            count.add_event(event)

    def on_message(payload: bytes) -> None:
        try:
            envelope = open_envelope(payload)
        except ValueError:
            envelope = None
        count.add_message(topic, envelope, clock())

    # The events first: a window whose messages were read is then judged against events at least as recent.
    try:
        events_read = read_topic(zookeeper, AUDIT_TOPIC, on_event, options=options)
    except UnknownTopic:
        events_read = 0
    read = read_topic(zookeeper, topic, on_message, options=options, since_ms=since_ms)
    return ClusterAudit(count, read, events_read)


__all__ = ["ClusterAudit", "count_cluster", "now_ms", "read_topic"]
