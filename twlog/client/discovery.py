# -*- test-case-name: tests.client.test_discovery -*-
"""Where a topic's partitions are: the one broker-address parser, and static and ZooKeeper discovery.

A partition is a L{TopicPartition} (topic, broker id, partition); where
addresses are needed it travels as a L{PartitionLocation}: the partition plus
the host and port of the broker that holds it.

Two sources, as in Kafka 0.7:

  - static brokers (C{"host:port,host:port"}, L{parse_brokers}): each is asked
    METADATA, and a topic's partitions are those the brokers report
    (L{metadata_partitions}, shared by the Twisted producer and the blocking path);
  - ZooKeeper: the brokers' registrations (C{/brokers/ids/<id>}, whose value
    L{twlog.coord.cluster.parse_broker_address} reads, 0.7's
    C{creator:host:port} included) and each topic's per-broker partition counts.

L{discover} is the blocking form, for the Spark driver and scripts (no
reactor; ZooKeeper through L{BlockingZooKeeper}); the Twisted producer follows
the same layout live with L{twlog.coord.cluster.ClusterView}.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from twlog.client.options import ClientOptions
from twlog.client.sync import SyncConnection
from twlog.coord import paths
from twlog.coord.cluster import parse_broker_address
from twlog.coord.zk import BlockingZooKeeper, ZooKeeperUnavailable
from twlog.errors import ConnectionFailed, UnknownTopic, raise_for
from twlog.partition import TopicPartition
from twlog.protocol.codec import MetadataResponse

__all__ = [
    "PartitionLocation",
    "TopicPartition",
    "discover",
    "format_address",
    "metadata_partitions",
    "parse_brokers",
    "registered_partitions",
]


def parse_brokers(brokers: str | Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """C{"host:port,host:port"} (or a list of pairs) as a list of C{(host, port)}; IPv6 hosts in brackets.

    @raise ValueError: an item is not C{host:port}, or there is none.
    """
    if isinstance(brokers, str):
        pairs = []
        for item in filter(None, (part.strip() for part in brokers.split(","))):
            host, sep, port = item.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"broker address {item!r} is not host:port")
            pairs.append((host.strip("[]") or "127.0.0.1", int(port)))
    else:
        pairs = [(str(host), int(port)) for host, port in brokers]
    if not pairs:
        raise ValueError("no broker address given")
    return pairs


def format_address(host: str, port: int) -> str:
    """C{host:port}, with an IPv6 host in brackets: the address as messages show it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@attrs.frozen(order=True)
class PartitionLocation:
    """A partition and the address of the broker that holds it; sorts as its L{TopicPartition}."""

    tp: TopicPartition
    host: str = attrs.field(order=False)
    port: int = attrs.field(order=False)

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def broker_id(self) -> int:
        return self.tp.broker_id

    @property
    def partition(self) -> int:
        """The partition's number on its broker."""
        return self.tp.partition

    @property
    def name(self) -> str:
        """The cluster-wide name C{<broker id>-<partition>}."""
        return self.tp.name

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.tp} at {self.address}"


def metadata_partitions(metadata: MetadataResponse, topics: Iterable[str], asked: str) -> list[TopicPartition]:
    """The partitions of C{topics} that a broker's METADATA answer reports (a topic it holds none of: none).

    @param asked: the broker's address, for the message of a refused topic.
    @raise BrokerError: the broker refused one of C{topics} (InvalidTopic).
    """
    wanted = set(topics)
    found = []
    for info in metadata.topics:
        if info.topic in wanted:
            raise_for(info.error, f"broker {asked} refuses topic {info.topic!r}")
            found.extend(TopicPartition(info.topic, metadata.broker_id, p) for p in range(info.partitions))
    return found


def discover(
    topics: Iterable[str],
    *,
    brokers: str | Sequence[tuple[str, int]] | None = None,
    zookeeper: str | None = None,
    options: ClientOptions | None = None,
    **overrides: Any,
) -> list[PartitionLocation]:
    """Every partition of C{topics} in the cluster, with its broker's address, sorted (blocking).

    With C{brokers}, each broker is asked METADATA for all its topics (a topic
    it has no data for is not its); with C{zookeeper}, the brokers' registrations
    are read.  Addresses are those given (static brokers) or registered (ZooKeeper).

    @raise UnknownTopic: a topic no broker holds, naming the brokers asked.
    @raise ConnectionFailed: a broker (or ZooKeeper) that cannot be reached, naming it.
    """
    options = ClientOptions.build(options, **overrides)
    topics = list(dict.fromkeys(topics))
    if (brokers is None) == (zookeeper is None):
        raise ValueError("give either the brokers option (host:port,...) or the zookeeper option, not both or none")
    if brokers is not None:
        asked = parse_brokers(brokers)
        found = _static_partitions(topics, asked, options)
        where = "brokers " + ", ".join(format_address(h, p) for h, p in asked)
    else:
        found = _zookeeper_partitions(topics, zookeeper, options.timeout_s)
        where = f"the brokers registered in ZooKeeper at {zookeeper}"
    for topic in topics:
        if not any(location.topic == topic for location in found):
            raise UnknownTopic(f"topic {topic!r} is on none of {where}")
    return sorted(found)


def _static_partitions(
    topics: list[str], asked: list[tuple[str, int]], options: ClientOptions
) -> list[PartitionLocation]:
    found: list[PartitionLocation] = []
    seen: set[int] = set()
    for host, port in asked:
        with SyncConnection(host, port, options) as connection:
            metadata = connection.metadata()
        if metadata.broker_id in seen:
            continue  # two addresses of one broker: keep the first
        seen.add(metadata.broker_id)
        held = metadata_partitions(metadata, topics, format_address(host, port))
        found.extend(PartitionLocation(tp, host, port) for tp in held)
    return found


def _zookeeper_partitions(topics: list[str], zookeeper: str, timeout_s: float) -> list[PartitionLocation]:
    try:
        with BlockingZooKeeper(zookeeper, timeout_s) as zk:
            return registered_partitions(zk, topics)
    except ZooKeeperUnavailable as e:
        raise ConnectionFailed(str(e)) from None


def registered_partitions(zk: BlockingZooKeeper, topics: Iterable[str]) -> list[PartitionLocation]:
    """The partitions of C{topics} on the live brokers registered in C{zk} (Kafka 0.7's layout).

    C{zk} needs only C{children(path)} and C{get(path)} (None for a missing node).
    """
    addresses: dict[int, tuple[str, int]] = {}
    for child in zk.children(paths.BROKER_IDS):
        value = zk.get(paths.broker_id_path(int(child)))
        if value is not None:
            addresses[int(child)] = parse_broker_address(value)
    found = []
    for topic in topics:
        for child in zk.children(paths.broker_topic_path(topic)):
            broker_id = int(child)
            count = zk.get(paths.broker_topic_path(topic, broker_id))
            if broker_id not in addresses or count is None:
                continue  # registered topic of a broker that has left
            host, port = addresses[broker_id]
            found.extend(
                PartitionLocation(TopicPartition(topic, broker_id, p), host, port)
                for p in range(int(count.decode() or 0))
            )
    return found
