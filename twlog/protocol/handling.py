# -*- test-case-name: tests.protocol.test_server -*-
"""What the broker's request handlers share: the L{Response} they return, the L{ErrorCounts} they add to,
and the one check of a request's topic and partition (L{check_partition}).

The handlers come in families, one module each: produce (L{twlog.protocol.produce}),
fetch (L{twlog.protocol.fetch}) and metadata and admin (L{twlog.protocol.metadata});
L{twlog.protocol.server.Broker} dispatches to them.
"""

from __future__ import annotations

from twisted.internet.interfaces import ISSLTransport

from twlog.errors import WrongPartition
from twlog.storage.manager import LogManager, validate_topic
from twlog.storage.segment import FileRegion

__all__ = ["ErrorCounts", "Peer", "Response", "check_partition"]


class Peer(str):
    """A client's address as handlers are given it (C{"host:port"}, for messages), and whether it came over TLS
    (then METADATA and CLUSTER_METADATA name this broker's TLS port)."""

    tls: bool = False

    def __new__(cls, text: str, transport=None) -> Peer:
        """C{text}, over C{transport} (TLS when it is an C{ISSLTransport})."""
        peer = super().__new__(cls, text)
        peer.tls = ISSLTransport.providedBy(transport)
        return peer

#: A response: a frame (error code and body, no size prefix), or parts of a
#: zero-copy response (size prefix included) mixing bytes and file regions.
Response = bytes | list[bytes | FileRegion]


class ErrorCounts:
    """Error codes answered (or, for a fire-and-forget produce, meant), by (request type, code): for metrics."""

    def __init__(self) -> None:
        #: (request type, error code) -> how many; read at scrape time.
        self.counts: dict[tuple[int, int], int] = {}

    def count(self, kind: int, code: int) -> None:
        """Count one error C{code} in the answer to a request of type C{kind} (one per failed part)."""
        self.counts[kind, code] = self.counts.get((kind, code), 0) + 1


def check_partition(logs: LogManager, topic: str, partition: int) -> None:
    """Raise unless C{topic} is a valid name and C{partition} one of its partitions on this broker.

    @raise InvalidTopic: the name is not a valid topic name.
    @raise WrongPartition: C{partition} is outside the topic's partitions.
    """
    validate_topic(topic)
    count = logs.partition_count(topic)
    if not 0 <= partition < count:
        raise WrongPartition(f"partition {partition} of {topic!r} is outside [0, {count - 1}]")
