# -*- test-case-name: tests.coord.test_layout -*-
"""The cluster's layout: which brokers are live, which partitions each topic has, and who leads each.

L{ClusterLayout} is a pure value: it is the one place that maps a partition's
identity (L{TopicPartition}) to its leader and the leader's address.  Every
path builds it the same way, whatever it read (a broker's CLUSTER_METADATA
answer, or ZooKeeper's registrations), and routes by L{ClusterLayout.locate}.

For a Kafka 0.7 topic the leader of C{<broker id>-<n>} is that broker, always:
the partition is in the layout while its broker is live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from twlog.errors import LeaderNotAvailable
from twlog.partition import TopicPartition, address_text

__all__ = ["ClusterLayout", "PartitionLocation"]


@attrs.frozen(order=True)
class PartitionLocation:
    """A partition, its leader and the leader's address; sorts as its L{TopicPartition}."""

    tp: TopicPartition
    #: The id of the broker that leads it (for a 0.7 partition, the broker its name says).
    leader: int = attrs.field(order=False)
    host: str = attrs.field(order=False)
    port: int = attrs.field(order=False)

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def name(self) -> str:
        """The partition's name within its topic (C{<broker id>-<n>}, or C{<n>} of a replicated topic)."""
        return self.tp.name

    @property
    def number(self) -> int:
        """The number the leader knows the partition by (L{TopicPartition.number})."""
        return self.tp.number

    @property
    def address(self) -> str:
        return address_text(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.tp} at {self.address}"


def _frozen_brokers(brokers: Mapping[int, tuple[str, int]]) -> dict[int, tuple[str, int]]:
    return {int(b): (str(h), int(p)) for b, (h, p) in brokers.items()}


@attrs.frozen
class ClusterLayout:
    """Live brokers, each known topic's partitions, and each partition's leader."""

    #: Live brokers: id -> (host, port).
    brokers: Mapping[int, tuple[str, int]] = attrs.field(factory=dict, converter=_frozen_brokers)
    #: Each known topic's partitions (a topic present with none: known, but on no live broker).
    partitions: Mapping[str, tuple[TopicPartition, ...]] = attrs.field(factory=dict)
    #: The leaders of partitions whose name does not fix it (replicated topics).
    leaders: Mapping[TopicPartition, int] = attrs.field(factory=dict)

    @classmethod
    def from_counts(cls, brokers: Mapping[int, tuple[str, int]], counts: Mapping[str, Mapping[int, int]],
                    topics: Iterable[str] = ()) -> ClusterLayout:
        """The layout of 0.7 topics from per-broker partition counts (C{topic -> {broker id: count}}).

        Partitions of a broker that is not live are left out.  C{topics} are known even with no partition.
        """
        live = _frozen_brokers(brokers)
        found: dict[str, tuple[TopicPartition, ...]] = {t: () for t in topics}
        for topic, holders in counts.items():
            found[topic] = tuple(
                TopicPartition.on_broker(topic, b, p) for b in sorted(holders) if b in live for p in range(holders[b])
            )
        return cls(live, found)

    def topics(self) -> list[str]:
        """The topics the layout knows, sorted."""
        return sorted(self.partitions)

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        """C{topic}'s partitions that have a live leader, sorted by name (empty for an unknown topic)."""
        return sorted(tp for tp in self.partitions.get(topic, ()) if self.leader(tp) is not None)

    def holders(self, topic: str) -> dict[int, int]:
        """How many of C{topic}'s partitions each live broker leads."""
        counts: dict[int, int] = {}
        for tp in self.topic_partitions(topic):
            leader = self.leader(tp)
            counts[leader] = counts.get(leader, 0) + 1
        return counts

    def leader(self, tp: TopicPartition) -> int | None:
        """The live broker that leads C{tp}, or None (no leader, or it is not live)."""
        leader = tp.fixed_leader if tp.fixed_leader is not None else self.leaders.get(tp)
        return leader if leader in self.brokers else None

    def locate(self, tp: TopicPartition) -> PartitionLocation:
        """C{tp} with its leader's address.

        @raise LeaderNotAvailable: it has no live leader in this layout.
        """
        leader = self.leader(tp)
        if leader is None:
            raise LeaderNotAvailable(f"partition {tp} has no live leader"
                                     + (f" (broker {tp.fixed_leader} is not live)" if tp.fixed_leader is not None
                                        else ""))
        host, port = self.brokers[leader]
        return PartitionLocation(tp, leader, host, port)

    def locations(self, topic: str) -> list[PartitionLocation]:
        """Every partition of C{topic} that has a live leader, located, sorted."""
        return [self.locate(tp) for tp in self.topic_partitions(topic)]
