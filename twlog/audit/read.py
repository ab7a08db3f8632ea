# -*- test-case-name: tests.audit.test_read,tests.integration.test_audit -*-
"""The audit of one cluster: read a topic and C{twlog-audit} to their ends and count (blocking, no reactor).

Each partition is read from its earliest offset (or, with C{since_ms}, from the
first segment that may hold messages of that time) to the latest offset it
had when reading began, over L{SyncConnection}s: what the brokers have
flushed is what consumers can see, so that is what the audit judges.

Messages read so were there before the audit looked: when they arrived is not
known (a message has no timestamp but its envelope's creation time), only
their age at the audit. With C{follow_s}, the audit then follows the topic as
a consumer does (L{follow_topic}): it asks each partition for its end every
C{interval_s} and reads what is new, and a message first seen at one of those
asks arrived (became readable to consumers) after the ask before: its
delivery delay, creation to arrival, is measured to within C{interval_s} plus
one round of asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

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


def _read_range(leader: LeaderConnection, location, offset: int, end: int, on_payload: Callable[[bytes], object],
                options: ClientOptions) -> int:
    """Call C{on_payload} for every message of one partition from C{offset} to C{end}; how many."""
    topic = location.tp.topic
    read = 0
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


def read_topic(zookeeper: str, topic: str, on_payload: Callable[[bytes], object], *,
               options: ClientOptions | None = None, since_ms: int | None = None,
               ends: dict[str, int] | None = None) -> int:
    """Call C{on_payload(payload)} for every message of C{topic} in the cluster; return how many.

    @param ends: filled with where each partition (by name) was read to.
    @raise UnknownTopic: no broker registered in ZooKeeper holds C{topic}.
    @raise ConnectionFailed: ZooKeeper or a broker holding a partition cannot be reached.
    """
    options = options or ClientOptions()
    read = 0
    for location in discover([topic], zookeeper=zookeeper, options=options):
        with LeaderConnection(location, zookeeper=zookeeper, options=options) as leader:
            end = leader.offset(LATEST)  # (asked of the partition's leader, found again if it moved)
            offset = leader.offset(EARLIEST)
            if since_ms is not None:
                offset = max(offset, leader.offset(since_ms))
            read += _read_range(leader, location, offset, end, on_payload, options)
            if ends is not None:
                ends[location.name] = end
    return read


def follow_topic(zookeeper: str, topic: str, start: dict[str, int], seconds: float,
                 on_payload: Callable[[bytes, int | None], object], *, options: ClientOptions | None = None,
                 clock: Callable[[], int] = now_ms, interval_s: float = 0.1,
                 monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] = time.sleep) -> int:
    """Follow C{topic} for C{seconds} from C{start} (partition name -> offset; a partition not in it from its
    earliest offset), as a consumer polling every C{interval_s}; return how many messages were read.

    C{on_payload(payload, arrived_ms)} is called for each message: C{arrived_ms} is the time of the ask for the
    partition's end that first found it (it became readable after the ask before), or None for what the
    first ask finds, which arrived while the audit was reading the topic up to C{start}: when is not known.
    """
    options = options or ClientOptions()
    offsets = dict(start)
    read = 0
    deadline = monotonic() + seconds
    with ExitStack() as stack:
        locations = list(discover([topic], zookeeper=zookeeper, options=options))
        leaders = [stack.enter_context(LeaderConnection(location, zookeeper=zookeeper, options=options))
                   for location in locations]
        first = True
        while True:
            for location, leader in zip(locations, leaders):
                end = leader.offset(LATEST)
                asked_ms = None if first else clock()
                offset = offsets.get(location.name)
                if offset is None:
                    offset = leader.offset(EARLIEST)
                if end > offset:
                    read += _read_range(leader, location, offset, end, lambda p: on_payload(p, asked_ms), options)
                offsets[location.name] = max(offset, end)
            first = False
            if monotonic() >= deadline:
                return read
            sleep(interval_s)


class ClusterAudit:
    """What reading one cluster found: the counts, and how many messages of each topic were read."""

    def __init__(self, count: AuditCount, read: int, events_read: int) -> None:
        self.count = count
        self.read = read
        self.events_read = events_read


def count_cluster(zookeeper: str, topic: str, *, window_ms: int | None = None, since_ms: int | None = None,
                  options: ClientOptions | None = None, clock: Callable[[], int] = now_ms,
                  follow_s: float | None = None, **follow_options: Any) -> ClusterAudit:
    """Read C{topic} and the monitoring events for it in the cluster at C{zookeeper} and count them.

    A cluster without the topic C{twlog-audit} has no events (every window of the topic is then
    C{unreported} once closed). With C{follow_s}, the topic is then followed that long (L{follow_topic}, given
    C{follow_options}), which measures the delivery delay of what arrives meanwhile; the events are read again
    after, for the windows that closed meanwhile.
    """
    count = AuditCount(window_ms)

    def on_event(payload: bytes) -> None:
        event = decode_event(payload)
        if event is not None and event.topic == topic:
            count.add_event(event)

    def on_message(payload: bytes, arrived_ms: int | None = None) -> None:
        try:
            envelope = open_envelope(payload)
        except ValueError:
            envelope = None
        count.add_message(topic, envelope, clock(), arrived_ms)

    def read_events() -> int:
        try:
            return read_topic(zookeeper, AUDIT_TOPIC, on_event, options=options)
        except UnknownTopic:
            return 0

    # The events first: a window whose messages were read is then judged against events at least as recent.
    events_read = read_events()
    ends: dict[str, int] = {}
    read = read_topic(zookeeper, topic, on_message, options=options, since_ms=since_ms, ends=ends)
    if follow_s:
        read += follow_topic(zookeeper, topic, ends, follow_s, on_message, options=options, clock=clock,
                             **follow_options)
        events_read = read_events()  # the events again (a copy counts once): windows closed while following
    return ClusterAudit(count, read, events_read)


__all__ = ["ClusterAudit", "count_cluster", "follow_topic", "now_ms", "read_topic"]
