# -*- test-case-name: tests.coord.test_layout -*-
"""The cluster's layout: which brokers are live, which partitions each topic has, and who leads each.

L{ClusterLayout} is a pure value: it is the one place that maps a partition's
identity (L{TopicPartition}) to its leader and the leader's address.  Every
path builds it the same way, whatever it read (a broker's CLUSTER_METADATA
answer, or ZooKeeper's registrations), and routes by L{ClusterLayout.locate}.

For a Kafka 0.7 topic the leader of C{<broker id>-<n>} is that broker, always.
A replicated topic's partitions are C{0} to C{P-1}, each led by the leader its
state in ZooKeeper names (L{ClusterLayout.leaders}); with no state yet, leader
-1, or a leader that is not live, it is offline, by the same rule as below.
A partition whose broker is not live stays in the layout when the cluster
remembers it (C{/twlog/held}, L{twlog.coord.paths.held_path}; in a
CLUSTER_METADATA answer, a holder with no address): it is offline
(L{ClusterLayout.offline_partitions}), and every reader either fails naming
it (L{describe_offline}) or, when asked for what is reachable, says what it
left out: never a silent subset.

Two pure readings build it; the drivers only fetch what they read:

  - L{ClusterLayout.from_metadata}: a CLUSTER_METADATA answer (one broker's, or
    several merged), as the blocking discovery, the async discovery and the
    producer's router get it;
  - L{ClusterLayout.from_registrations}: ZooKeeper's values, C{/brokers/ids/<id>}
    (C{{child name: value}}) and C{/brokers/topics/<topic>/<id>} (C{{topic: {child
    name: value}}}), as L{twlog.coord.cluster.ClusterView}, both discoveries and
    C{twlog groups} read them.

One tolerance rule for bad values, the same on every path: a value that cannot
be used is skipped, and the reading returns one problem (a line naming the node
and what is wrong with it) for it, with the rest of the layout.  The bad values
are: a broker id child name that is not a non-negative integer; a broker
registration that L{parse_broker_address} refuses; a topic name that
L{validate_topic} refuses; a topic registration under a child name that is not
a broker id, or whose value is not a non-negative integer partition count
(the same for a C{/twlog/held} record); a topic registration whose broker is
not live; a negative count in a METADATA answer; a replicated topic's
C{/twlog/topics/<topic>} or partition state that L{twlog.coord.replication.values}
refuses, or a replicated topic that is a 0.7 topic too.  A value of None is a
node that went away between listing and reading it: it is gone, not bad, and
skipped without a problem.  Readings never raise for a bad value; each driver
logs each distinct problem once, with its own logger
(L{twlog.coord.cluster.ClusterView} with C{twisted.logger}, the blocking
paths with C{logging}).  What the caller asked for is refused with a typed error
by the driver, the same everywhere: a topic on no live broker is
L{twlog.errors.UnknownTopic}, a topic a broker refuses L{twlog.errors.InvalidTopic}.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping

import attrs

from twlog.coord import paths
from twlog.coord.replication.values import BadReplicationValue, PartitionState, TopicAssignment
from twlog.deprecation import renamed_attribute
from twlog.errors import InvalidTopic, LeaderNotAvailable
from twlog.partition import TopicPartition, address_text, partition_ranges
from twlog.protocol.replication_codec import ClusterMetadataV2Response, ReplicatedLayout
from twlog.protocol.responses import ClusterMetadataResponse
from twlog.storage.manager import validate_topic

__all__ = ["ClusterLayout", "PartitionLocation", "Reading", "describe_offline", "parse_broker_address"]

#: Kafka 0.7's C{<creator id>:<address>}, the creator id being C{<host>-<ms since the epoch>}.
_CREATOR = re.compile(r"^(?P<creator>.*-\d+):(?P<address>.+)$", re.DOTALL)


def parse_broker_address(value: bytes) -> tuple[str, int]:
    """A broker registration's value as C{(host, port)}: the one parser every reader of C{/brokers/ids/<id>} uses.

    Both forms are read: Kafka 0.7's C{<creator id>:<host>:<port>} (creator id C{<host>-<ms>},
    L{twlog.coord.registration.broker_value}, what twlog writes) and a plain C{<host>:<port>}.  An IPv6 host
    may be in brackets (C{[::1]:9092}, C{[::1]-1300000000000:[::1]:9092}) or, in 0.7's form, bare.

    @raise ValueError: neither form, or a port that is not a number in 0-65535.
    """
    try:
        text = value.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"broker registration {value!r} is not UTF-8") from None
    head, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not port.isascii() or int(port) > 65535:
        raise ValueError(f"broker registration {text!r} does not end in :<port>")
    if head.endswith("]"):  # a bracketed IPv6 host, alone or after 0.7's "creator:"
        start = head.rfind("[")
        if start < 0 or (start > 0 and head[start - 1] != ":"):
            raise ValueError(f"broker registration {text!r} has a bad [host]")
        host = head[start + 1 : -1]
    else:
        creator = _CREATOR.match(head)
        if creator is not None:
            host = creator.group("address")
        elif ":" in head and not _is_ipv6(head):
            host = head.rpartition(":")[2]  # another creator id: 0.7 clients take the last two fields too
        else:
            host = head
    if not host or "[" in host or "]" in host:
        raise ValueError(f"broker registration {text!r} has no host")
    return host, int(port)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _broker_id(name: str) -> int | None:
    """A ZooKeeper child name as a broker id, or None if it is not a non-negative decimal integer."""
    return int(name) if isinstance(name, str) and name.isdigit() and name.isascii() else None


def _count(value: bytes) -> int | None:
    """A topic registration's value as a partition count, or None if it is not a non-negative integer."""
    try:
        text = value.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    return int(text) if text.isdigit() else None


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

    #: Deprecated names from when a partition was (topic, broker id, per-broker number).
    broker_id = renamed_attribute("broker_id", "leader")
    partition = renamed_attribute("partition", "number")


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
                    topics: Iterable[str] = (), offline: Mapping[str, Mapping[int, int]] | None = None
                    ) -> ClusterLayout:
        """The layout of 0.7 topics from per-broker partition counts (C{topic -> {broker id: count}}).

        C{counts} of a broker that is not live are left out.  C{offline} are the counts of brokers known to
        hold a topic that are not live (C{/twlog/held}, or a CLUSTER_METADATA holder with no address): their
        partitions are in the layout with no live leader (L{offline_partitions}).  C{topics} are known even
        with no partition.
        """
        live = _frozen_brokers(brokers)
        found: dict[str, list[TopicPartition]] = {t: [] for t in topics}
        for topic, holders in counts.items():
            found.setdefault(topic, []).extend(
                TopicPartition.on_broker(topic, b, p) for b in sorted(holders) if b in live for p in range(holders[b])
            )
        for topic, holders in (offline or {}).items():
            found.setdefault(topic, []).extend(
                TopicPartition.on_broker(topic, b, p) for b in sorted(holders) if b not in live
                for p in range(holders[b])
            )
        return cls(live, {topic: tuple(sorted(set(tps))) for topic, tps in found.items()})

    @classmethod
    def from_registrations(cls, brokers: Mapping[str, bytes | None],
                           topics: Mapping[str, Mapping[str, bytes | None]],
                           held: Mapping[str, Mapping[str, bytes | None]] | None = None,
                           replicated: Mapping[str, tuple[bytes | None, Mapping[str, bytes | None]]] | None = None
                           ) -> Reading:
        """The layout ZooKeeper's registrations describe, and the problems of the values skipped (module docstring).

        @param brokers: C{/brokers/ids}' children: child name -> value (None: gone meanwhile).
        @param topics: topic -> C{/brokers/topics/<topic>}'s children: child name -> value (None: gone).
            A topic given with no children is known, with no partitions.
        @param held: topic -> C{/twlog/held/<topic>}'s children (the persistent record of which brokers held
            it): the partitions of a broker there that is not live are offline, in the layout with no leader.
            A topic known only from it is known.
        @param replicated: topic -> (C{/twlog/topics/<topic>}'s value, or None: gone; and its partitions'
            states, partition number -> C{.../partitions/<p>/state}'s value, or None: none yet).  Each
            partition C{0..P-1} is in the layout; its leader is the state's, if that broker is live, else it is
            offline (no state yet, leader -1, or a leader not live).  A bad value is a problem: a bad assignment
            leaves the topic out, a bad state leaves its partition offline.
        """
        problems: list[str] = []
        live: dict[int, tuple[str, int]] = {}
        for name, value in sorted(brokers.items()):
            broker_id = _broker_id(name)
            if broker_id is None:
                problems.append(f"{paths.BROKER_IDS}/{name}: {name!r} is not a broker id")
            elif value is not None:
                try:
                    live[broker_id] = parse_broker_address(value)
                except ValueError as e:
                    problems.append(f"{paths.broker_id_path(broker_id)}: {e}")
        counts: dict[str, dict[int, int]] = {}
        for topic, registrations in sorted(topics.items()):
            try:
                validate_topic(topic)
            except InvalidTopic as e:
                problems.append(f"{paths.broker_topic_path(topic)}: {e}")
                continue
            counts[topic] = _counts(paths.broker_topic_path(topic), registrations, live, problems)
        offline: dict[str, dict[int, int]] = {}
        for topic, records in sorted((held or {}).items()):
            if topic in topics and topic not in counts:
                continue  # its name is bad: said once, above
            try:
                validate_topic(topic)
            except InvalidTopic as e:
                problems.append(f"{paths.held_path(topic)}: {e}")
                continue
            offline[topic] = _counts(paths.held_path(topic), records, live, problems, held=True)
        layout = cls.from_counts(live, counts, offline=offline)
        if replicated:
            layout = layout._with_replicated(replicated, problems)
        return Reading(layout, tuple(problems))

    def _with_replicated(self, replicated: Mapping[str, tuple[bytes | None, Mapping[str, bytes | None]]],
                         problems: list[str]) -> ClusterLayout:
        """This layout with the replicated topics' partitions and leaders (L{from_registrations})."""
        partitions = dict(self.partitions)
        leaders = dict(self.leaders)
        for topic, (value, states) in sorted(replicated.items()):
            where = paths.replicated_topic_path(topic)
            if value is None:
                continue  # deleted meanwhile
            try:
                validate_topic(topic)
                assignment = TopicAssignment.decode(topic, value, where)
            except (InvalidTopic, BadReplicationValue) as e:
                problems.append(f"{where}: {e}" if isinstance(e, InvalidTopic) else str(e))
                continue
            if partitions.get(topic):
                problems.append(f"{where}: topic {topic!r} is a Kafka 0.7 topic too ({paths.broker_topic_path(topic)}):"
                                " its replicated partitions are left out")
                continue
            tps = tuple(TopicPartition(topic, str(p)) for p in sorted(assignment.partitions))
            partitions[topic] = tps
            for tp in tps:
                data = states.get(tp.name)
                if data is None:
                    continue  # no state yet: offline
                try:
                    state = PartitionState.decode(data, paths.partition_state_path(topic, tp.number))
                except BadReplicationValue as e:
                    problems.append(str(e))
                    continue
                if state.online:
                    leaders[tp] = state.leader
        return attrs.evolve(self, partitions=partitions, leaders=leaders)

    @classmethod
    def from_metadata(cls, answer: ClusterMetadataResponse | ClusterMetadataV2Response) -> Reading:
        """The layout a CLUSTER_METADATA (or _V2) answer describes (one broker's, or several merged), and its problems.

        A topic the answer refuses (an error code) is left out, with no problem: the driver that asked for it
        raises the typed error (L{twlog.errors.raise_for}).  A holder the answer gives no address for is a
        broker known to hold the topic that is not live: its partitions are offline (no leader).  A replicated
        topic (V2's L{ReplicatedLayout}) has partitions C{0} to C{P-1}, each led by its answer's leader, or
        offline when that is no broker or not live.
        """
        problems: list[str] = []
        counts: dict[str, dict[int, int]] = {}
        offline: dict[str, dict[int, int]] = {}
        replicated: list[ReplicatedLayout] = []
        live = answer.addresses
        for layout in answer.topics:
            if layout.error:
                continue
            if isinstance(layout, ReplicatedLayout):
                replicated.append(layout)
                continue
            held = counts.setdefault(layout.topic, {})
            for broker_id, count in layout.holders:
                if count < 0:
                    problems.append(f"topic {layout.topic!r}: broker {broker_id} holds {count} partitions")
                elif broker_id not in live:
                    offline.setdefault(layout.topic, {})[broker_id] = count
                else:
                    held[broker_id] = count
        result = cls.from_counts(live, counts, offline=offline)
        if replicated:
            partitions = dict(result.partitions)
            leaders = dict(result.leaders)
            for layout in replicated:
                if partitions.get(layout.topic):
                    problems.append(f"topic {layout.topic!r} is both a Kafka 0.7 topic and a replicated one: "
                                    "its replicated partitions are left out")
                    continue
                tps = []
                for p in layout.partitions:
                    tp = TopicPartition(layout.topic, str(p.partition))
                    tps.append(tp)
                    if p.leader >= 0:
                        leaders[tp] = p.leader
                partitions[layout.topic] = tuple(sorted(tps))
            result = attrs.evolve(result, partitions=partitions, leaders=leaders)
        return Reading(result, tuple(problems))

    def topics(self) -> list[str]:
        """The topics the layout knows, sorted."""
        return sorted(self.partitions)

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        """C{topic}'s partitions that have a live leader, sorted by name (empty for an unknown topic)."""
        return sorted(tp for tp in self.partitions.get(topic, ()) if self.leader(tp) is not None)

    def offline_partitions(self, topic: str) -> list[TopicPartition]:
        """C{topic}'s partitions that are known to exist but have no live leader, sorted (L{describe_offline})."""
        return sorted(tp for tp in self.partitions.get(topic, ()) if self.leader(tp) is None)

    def offline_holders(self, topic: str) -> dict[int, int]:
        """How many of C{topic}'s partitions each broker that is not live holds (0.7 topics)."""
        counts: dict[int, int] = {}
        for tp in self.offline_partitions(topic):
            if tp.fixed_leader is not None:
                counts[tp.fixed_leader] = counts.get(tp.fixed_leader, 0) + 1
        return counts

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


def describe_offline(partitions: Iterable[TopicPartition]) -> str:
    """Why C{partitions} cannot be read, one clause per broker: C{broker 1, which holds clicks:1-0..1-3, is not
    registered: down?} (joined by C{; }); a partition whose name fixes no broker: C{clicks:3 has no live leader}."""
    by_broker: dict[int | None, list[TopicPartition]] = {}
    for tp in sorted(partitions):
        by_broker.setdefault(tp.fixed_leader, []).append(tp)
    clauses = []
    for broker_id, tps in sorted(by_broker.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        if broker_id is None:
            clauses.extend(f"{tp} has no live leader" for tp in tps)
        else:
            clauses.append(f"broker {broker_id}, which holds {partition_ranges(tps)}, is not registered: down?")
    return "; ".join(clauses)


def _counts(parent: str, children: Mapping[str, bytes | None], live: Mapping[int, tuple[str, int]],
            problems: list[str], *, held: bool = False) -> dict[int, int]:
    """The usable partition counts (broker id -> count) among C{parent}'s C{children}, a problem appended per bad
    one: a topic's registrations (their broker must be live), or with C{held} its persistent records (only
    those of brokers that are not live count: a live broker's registration says what it holds)."""
    counts: dict[int, int] = {}
    for name, value in sorted(children.items()):
        where = f"{parent}/{name}"
        broker_id = _broker_id(name)
        if broker_id is None:
            problems.append(f"{where}: {name!r} is not a broker id")
        elif value is None or (held and broker_id in live):
            continue  # gone meanwhile; or a live broker's record
        elif (count := _count(value)) is None:
            problems.append(f"{where}: partition count {value!r} is not a non-negative integer")
        elif not held and broker_id not in live:
            problems.append(f"{where}: broker {broker_id} is not live (no usable {paths.broker_id_path(broker_id)})")
        else:
            counts[broker_id] = count
    return counts


@attrs.frozen
class Reading:
    """What a reading of the cluster gives: the layout, and one line per bad value it skipped.

    Unpacks as C{layout, problems = ClusterLayout.from_registrations(...)}.
    """

    layout: ClusterLayout
    problems: tuple[str, ...] = ()

    def __iter__(self):
        return iter((self.layout, self.problems))
