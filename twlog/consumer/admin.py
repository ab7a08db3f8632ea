# -*- test-case-name: tests.consumer.test_admin,tests.integration.test_admin -*-
"""The admin side of consumer groups (C{twlog groups}): describing them (owners, offsets, lag), resetting offsets.

L{describe_groups} reads the group's nodes (Kafka 0.7's layout, through
L{twlog.consumer.membership}) and asks each partition's broker for its latest
offset (OFFSETS -1), so the lag is what the group has left to consume of what
is flushed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.client.async_discovery import read_registrations_async
from twlog.client.connection import BrokerConnection
from twlog.consumer.membership import read_members, read_offsets, read_values, sorted_children
from twlog.consumer.rebalance import natural_key
from twlog.coord import paths
from twlog.coord.layout import ClusterLayout
from twlog.coord.zk import IZooKeeper
from twlog.errors import TwlogError
from twlog.partition import TopicPartition
from twlog.protocol.codec import OffsetsRequest

_log = Logger()


@dataclass(frozen=True)
class GroupMember:
    """A registered consumer and its subscription (topic -> streams); None if its registration is unreadable."""

    consumer_id: str
    subscription: dict[str, int] | None


@dataclass(frozen=True)
class PartitionStatus:
    """One partition as a group sees it."""

    topic: str
    #: C{<broker id>-<partition>}.
    partition: str
    #: The owning stream id, or None when nobody owns it now.
    owner: str | None
    #: The committed next offset, or None when the group never committed one.
    offset: int | None
    #: The broker's latest (flushed) offset, or None when the broker is down or unknown.
    latest: int | None

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition as a L{TopicPartition}."""
        return TopicPartition.from_name(self.topic, self.partition)

    @property
    def lag(self) -> int | None:
        """Bytes of log the group has yet to consume (latest - committed), when both are known."""
        if self.offset is None or self.latest is None:
            return None
        return max(self.latest - self.offset, 0)


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group: its members and its partitions (sorted by topic, then broker and partition)."""

    group: str
    members: list[GroupMember] = field(default_factory=list)
    partitions: list[PartitionStatus] = field(default_factory=list)

    @property
    def lag(self) -> int | None:
        """The total lag over the partitions whose lag is known (None if none is)."""
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


async def describe_groups(zk: IZooKeeper, group: str | None = None, *, reactor=None,
                          timeout_s: float = 5.0) -> list[GroupDescription]:
    """Every group (or just C{group}): members, owners and committed offsets per partition, and lag.

    A partition is listed if it is registered by a live broker for a topic the
    group subscribes to, or if the group has an owner or an offset for it.
    Brokers that do not answer within C{timeout_s} leave C{latest} (and so
    C{lag}) as None.
    """
    groups = [group] if group is not None else await sorted_children(zk, paths.CONSUMERS)
    reported: set[str] = set()
    addresses = dict((await _layout(zk, (), reported)).brokers)
    descriptions = []
    for name in groups:
        descriptions.append(await _describe(zk, name, reported))
    await _fill_latest(descriptions, addresses, reactor, timeout_s)
    return descriptions


async def _describe(zk: IZooKeeper, group: str, reported: set[str]) -> GroupDescription:
    registered_members = await read_members(zk, group)
    members = [GroupMember(i, registered_members[i]) for i in sorted(registered_members, key=natural_key)]
    topics = {t for m in members for t in (m.subscription or {})}
    topics |= set(await sorted_children(zk, f"{paths.group_path(group)}/owners"))
    topics |= set(await sorted_children(zk, f"{paths.group_path(group)}/offsets"))
    partitions = []
    layout = await _layout(zk, topics, reported)
    for topic in sorted(topics, key=natural_key):
        names = await sorted_children(zk, paths.owner_path(group, topic))
        names += await sorted_children(zk, paths.offset_path(group, topic))
        tps = sorted(set(_partitions(topic, names)) | set(layout.topic_partitions(topic)))
        owners = await read_values(zk, [paths.owner_path(group, topic, tp.name) for tp in tps])
        offsets = await read_offsets(zk, group, tps)
        for tp, owner in zip(tps, owners):
            partitions.append(PartitionStatus(
                topic, tp.name, owner.decode("utf-8", "replace") if owner is not None else None, offsets[tp], None,
            ))
    return GroupDescription(group, members, partitions)


def _partitions(topic: str, names: list[str]) -> list[TopicPartition]:
    """The partitions named C{names} (ZooKeeper child names; others are skipped)."""
    result = []
    for name in names:
        try:
            result.append(TopicPartition.from_name(topic, name))
        except ValueError:
            continue
    return result


async def _fill_latest(descriptions: list[GroupDescription], addresses: dict[int, tuple[str, int]], reactor,
                       timeout_s: float) -> None:
    """Ask each broker once per partition for its latest offset; remember the answers in the descriptions."""
    wanted = sorted({p.topic_partition for d in descriptions for p in d.partitions})
    by_broker: dict[int, list[TopicPartition]] = {}
    for tp in wanted:
        if tp.fixed_leader in addresses:
            by_broker.setdefault(tp.fixed_leader, []).append(tp)
    latest: dict[TopicPartition, int | None] = {}

    async def ask(broker_id: int, items: list[TopicPartition]) -> None:
        host, port = addresses[broker_id]
        connection = BrokerConnection(host, port, reactor=reactor, timeout_s=timeout_s, connect_timeout_s=timeout_s,
                                      connect_attempts=1)
        try:
            for tp in items:
                offsets = (await connection.request(OffsetsRequest(tp.topic, tp.number, -1, 1))).offsets
                latest[tp] = offsets[0] if offsets else 0
        except Exception:
            pass  # unreachable or refusing: unknown
        finally:
            await connection.close()

    await DeferredList([Deferred.fromCoroutine(ask(b, items)) for b, items in sorted(by_broker.items())])
    for d in descriptions:
        d.partitions[:] = [_replace_latest(p, latest.get(p.topic_partition)) for p in d.partitions]


def _replace_latest(p: PartitionStatus, latest: int | None) -> PartitionStatus:
    return PartitionStatus(p.topic, p.partition, p.owner, p.offset, latest)


async def reset_offsets(zk: IZooKeeper, group: str, topic: str, offsets: Mapping[str, int]) -> None:
    """Rewind (or skip ahead) a group: set the committed offset of each partition named in C{offsets}.

    The group's consumers start there the next time they claim the
    partitions, so stop (or close) them first: a partition owned now would
    overwrite the value with its own progress.

    @param offsets: partition name (C{<broker id>-<partition>}) -> next offset to consume.
    @raise ValueError: a bad partition name or negative offset, or a consumer owns one of the partitions now.
    """
    for name, offset in offsets.items():
        TopicPartition.from_name(topic, name)  # ValueError on a bad name
        if offset < 0:
            raise ValueError(f"offset {offset} of {topic}/{name} is negative")
    names = sorted(offsets, key=natural_key)
    owners = await read_values(zk, [paths.owner_path(group, topic, n) for n in names])
    busy = [f"{n} (by {o.decode('utf-8', 'replace')})" for n, o in zip(names, owners) if o is not None]
    if busy:
        raise ValueError(f"group {group} is consuming {topic}: {', '.join(busy)}; stop its consumers first")
    for name in names:
        await zk.set_or_create(paths.offset_path(group, topic, name), str(offsets[name]).encode())


class GroupNotFound(TwlogError):
    """No consumer group of that name is registered in ZooKeeper."""


async def check_group(zk: IZooKeeper, group: str) -> None:
    """@raise GroupNotFound: C{group} has no node under C{/consumers}, naming the groups there are."""
    if await zk.exists(paths.group_path(group)) is None:
        known = await sorted_children(zk, paths.CONSUMERS)
        raise GroupNotFound(f"no group {group!r} in ZooKeeper at {getattr(zk, 'hosts', '?')}"
                            + (f" (groups: {', '.join(known)})" if known else " (no groups at all)"))


async def live_members(zk: IZooKeeper, group: str) -> list[str]:
    """The consumer ids registered (alive) in C{group} now."""
    return await sorted_children(zk, paths.consumer_ids_path(group))


async def registered_partitions(zk: IZooKeeper, topic: str) -> dict[TopicPartition, tuple[str, int]]:
    """Every partition of C{topic} registered by a live broker, with that broker's address.

    The registrations are read by the one reading of the layout (L{ClusterLayout.from_registrations}): bad
    values are skipped, each logged once as a warning.
    """
    layout = await _layout(zk, [topic], set())
    return {location.tp: (location.host, location.port) for location in layout.locations(topic)}


async def _layout(zk: IZooKeeper, topics, reported: set[str]) -> ClusterLayout:
    """The brokers and C{topics} as registered in C{zk}; each problem not in C{reported} yet is logged (and added)."""
    layout, problems = await read_registrations_async(zk, list(topics))
    for problem in problems:
        if problem not in reported:
            reported.add(problem)
            _log.warn("ignoring a registration in ZooKeeper: {problem}", problem=problem)
    return layout


async def offsets_at(partitions: Mapping[TopicPartition, tuple[str, int]], time: int, *, reactor=None,
                     timeout_s: float = 5.0) -> dict[TopicPartition, int]:
    """Each partition's offset at C{time}: L{LATEST} (-1), L{EARLIEST} (-2), or ms since the epoch.

    For a time, the offset is the newest segment start written before it (Kafka
    0.7's OFFSETS), or the earliest offset if every segment is newer.

    @raise ConnectionFailed: a broker cannot be reached (naming it).
    """
    result: dict[TopicPartition, int] = {}
    by_broker: dict[tuple[str, int], list[TopicPartition]] = {}
    for tp, address in sorted(partitions.items()):
        by_broker.setdefault(address, []).append(tp)
    for (host, port), tps in by_broker.items():
        connection = BrokerConnection(host, port, reactor=reactor, timeout_s=timeout_s, connect_timeout_s=timeout_s,
                                      connect_attempts=1)
        try:
            for tp in tps:
                found = (await connection.request(OffsetsRequest(tp.topic, tp.number, time, 1))).offsets
                if not found and time >= 0:
                    found = (await connection.request(OffsetsRequest(tp.topic, tp.number, -2, 1))).offsets
                result[tp] = found[0] if found else 0
        finally:
            await connection.close()
    return result


async def reset_group(zk: IZooKeeper, group: str, topic: str, offsets: Mapping[str, int]) -> None:
    """L{reset_offsets}, refused while the group has any live member (not only owners of these partitions).

    @raise ValueError: the group has live members (naming them), or a bad partition name or offset.
    """
    members = await live_members(zk, group)
    if members:
        raise ValueError(f"group {group!r} has {len(members)} live member{'s' if len(members) != 1 else ''} "
                         f"({', '.join(members)}); stop them before resetting its offsets")
    await reset_offsets(zk, group, topic, offsets)
