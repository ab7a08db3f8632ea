# -*- test-case-name: tests.consumer.test_admin -*-
"""Consumer groups' registries: reading them, describing groups (owners, offsets, lag), a rebalance benchmark.

L{describe_groups} reads the group's nodes (Kafka 0.7's layout) and asks each
partition's broker for its latest offset (OFFSETS -1), so the lag is what the
group has left to consume of what is flushed.  L{rebalance_benchmark} times a
whole group joining at once, on in-process brokers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.consumer.rebalance import decode_subscription, natural_key
from twlog.coord import paths
from twlog.coord.cluster import parse_broker_address
from twlog.coord.zk import NodeExistsError, NoNodeError, ZooKeeper
from twlog.errors import RebalanceFailed
from twlog.protocol import codec
from twlog.client.connection import BrokerConnection
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


async def _children(zk: ZooKeeper, path: str) -> list[str]:
    try:
        return sorted(await zk.children(path), key=natural_key)
    except NoNodeError:
        return []


async def read_values(zk: ZooKeeper, paths_: list[str]) -> list[bytes | None]:
    """The values of C{paths_}, read at once; None for those that do not exist."""
    results = await DeferredList([zk.get(p) for p in paths_], consumeErrors=True)
    values: list[bytes | None] = []
    for ok, result in results:
        if ok:
            values.append(result[0])
        elif result.check(NoNodeError):
            values.append(None)
        else:
            result.raiseException()
    return values


async def read_members(zk: ZooKeeper, group: str, watch=None) -> dict[str, dict[str, int] | None]:
    """Each member of C{group} and its subscription (None if unreadable); C{watch} fires when members change."""
    ids_path = paths.consumer_ids_path(group)
    try:
        members = await zk.children(ids_path, watch=watch)
    except NoNodeError:
        return {}
    result: dict[str, dict[str, int] | None] = {}
    for member, value in zip(members, await read_values(zk, [f"{ids_path}/{m}" for m in members])):
        if value is None:
            continue  # gone meanwhile (a watch fires for it)
        try:
            result[member] = decode_subscription(value)
        except ValueError as e:
            _log.warn("group {group}: member {member} has an unreadable subscription: {error}", group=group,
                      member=member, error=e)
            result[member] = None
    return result


async def read_offsets(
    zk: ZooKeeper, group: str, partitions: list[tuple[str, str]]
) -> dict[tuple[str, str], int | None]:
    """The committed offsets of C{partitions} ((topic, name) pairs); None where there is none (or garbage)."""
    values = await read_values(zk, [paths.offset_path(group, topic, name) for topic, name in partitions])
    return {key: _int(value) for key, value in zip(partitions, values)}


async def write_offsets(zk: ZooKeeper, group: str, offsets: list[tuple[str, str, int]]) -> list[bool]:
    """Commit (topic, partition name, next offset) triples at once; whether each was written (failures are logged)."""
    results = await DeferredList([
        Deferred.fromCoroutine(zk.set_or_create(paths.offset_path(group, topic, name), str(offset).encode()))
        for topic, name, offset in offsets
    ], consumeErrors=True)
    for (topic, name, offset), (ok, result) in zip(offsets, results):
        if not ok:
            _log.warn("committing {topic}/{partition} at {offset} failed: {error}", topic=topic, partition=name,
                      offset=offset, error=f"{result.type.__name__} {result.getErrorMessage()}".strip())
    return [ok for ok, _ in results]


async def register_member(zk: ZooKeeper, group: str, consumer_id: str, value: bytes, *, attempts: int,
                          pause) -> None:
    """Create the ephemeral C{/consumers/<group>/ids/<consumer id>} = C{value} (or update it if this session's).

    A node held by another session (a previous incarnation whose session has
    not expired yet, or a duplicate id) is waited for: C{pause(attempt)} between
    C{attempts} tries.

    @raise RebalanceFailed: still held by another session after the last attempt.
    """
    path = paths.consumer_ids_path(group, consumer_id)
    for attempt in range(1, attempts + 1):
        try:
            await zk.create(path, value, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            _, stat = await zk.get(path)
        except NoNodeError:
            continue
        session = zk.client_id
        if session is not None and stat.ephemeralOwner == session[0]:
            await zk.set(path, value)
            return
        if attempt < attempts:
            await pause(attempt)
    raise RebalanceFailed(f"consumer id {consumer_id} is registered in group {group} by another session")


async def delete_session_owners(zk: ZooKeeper, group: str, topics: list[str], keep: set[tuple[str, str]]) -> None:
    """Delete the owner nodes of C{topics} that this session holds, except C{keep} ((topic, name) pairs).

    After a session expired, a claim sent as it expired may have been made
    by the new session: the consumer does not know of it, and would never
    release it.
    """
    session = zk.client_id
    for topic in topics:
        for name in await _children(zk, paths.owner_path(group, topic)):
            if (topic, name) in keep or session is None:
                continue
            path = paths.owner_path(group, topic, name)
            try:
                _, stat = await zk.get(path)
                if stat.ephemeralOwner == session[0]:
                    await zk.delete(path)
            except NoNodeError:
                pass


async def describe_groups(zk: ZooKeeper, group: str | None = None, *, reactor=None,
                          timeout_s: float = 5.0) -> list[GroupDescription]:
    """Every group (or just C{group}): members, owners and committed offsets per partition, and lag.

    A partition is listed if it is registered by a live broker for a topic the
    group subscribes to, or if the group has an owner or an offset for it.
    Brokers that do not answer within C{timeout_s} leave C{latest} (and so
    C{lag}) as None.
    """
    groups = [group] if group is not None else await _children(zk, paths.CONSUMERS)
    broker_ids = await _children(zk, paths.BROKER_IDS)
    addresses = {}
    for name, value in zip(broker_ids, await read_values(zk, [f"{paths.BROKER_IDS}/{b}" for b in broker_ids])):
        try:
            if value is not None:
                addresses[int(name)] = parse_broker_address(value)
        except ValueError:
            continue
    descriptions = []
    for name in groups:
        descriptions.append(await _describe(zk, name, addresses))
    await _fill_latest(descriptions, addresses, reactor, timeout_s)
    return descriptions


async def _describe(zk: ZooKeeper, group: str, addresses: dict[int, tuple[str, int]]) -> GroupDescription:
    registered_members = await read_members(zk, group)
    members = [GroupMember(i, registered_members[i]) for i in sorted(registered_members, key=natural_key)]
    topics = {t for m in members for t in (m.subscription or {})}
    topics |= set(await _children(zk, f"{paths.group_path(group)}/owners"))
    topics |= set(await _children(zk, f"{paths.group_path(group)}/offsets"))
    partitions = []
    for topic in sorted(topics, key=natural_key):
        names = set(await _children(zk, paths.owner_path(group, topic)))
        names |= set(await _children(zk, paths.offset_path(group, topic)))
        registered = await _children(zk, paths.broker_topic_path(topic))
        counts = await read_values(zk, [paths.broker_topic_path(topic, int(b)) for b in registered if b.isdigit()])
        for broker, count in zip([b for b in registered if b.isdigit()], counts):
            if count is not None and int(broker) in addresses and count.strip().isdigit():
                names |= {paths.partition_name(int(broker), p) for p in range(int(count))}
        names_sorted = sorted(names, key=natural_key)
        owners = await read_values(zk, [paths.owner_path(group, topic, n) for n in names_sorted])
        offsets = await read_offsets(zk, group, [(topic, n) for n in names_sorted])
        for partition, owner in zip(names_sorted, owners):
            partitions.append(PartitionStatus(
                topic, partition, owner.decode("utf-8", "replace") if owner is not None else None,
                offsets[(topic, partition)], None,
            ))
    return GroupDescription(group, members, partitions)


def _int(value: bytes | None) -> int | None:
    try:
        return int(value.decode().strip()) if value is not None else None
    except ValueError:
        return None


async def _fill_latest(descriptions: list[GroupDescription], addresses: dict[int, tuple[str, int]], reactor,
                       timeout_s: float) -> None:
    """Ask each broker once per partition for its latest offset; remember the answers in the descriptions."""
    wanted = sorted({(p.topic, p.partition) for d in descriptions for p in d.partitions})
    by_broker: dict[int, list[tuple[str, str]]] = {}
    for topic, name in wanted:
        broker_id, _ = paths.parse_partition_name(name)
        if broker_id in addresses:
            by_broker.setdefault(broker_id, []).append((topic, name))
    latest: dict[tuple[str, str], int | None] = {}

    async def ask(broker_id: int, items: list[tuple[str, str]]) -> None:
        host, port = addresses[broker_id]
        connection = BrokerConnection(host, port, reactor=reactor, timeout_s=timeout_s, connect_timeout_s=timeout_s,
                                      connect_attempts=1)
        try:
            for topic, name in items:
                _, partition = paths.parse_partition_name(name)
                frame = await connection.request(OffsetsRequest(topic, partition, -1, 1))
                offsets = codec.decode_offsets_response(frame)[1]
                latest[(topic, name)] = offsets[0] if offsets else 0
        except Exception:
            pass  # unreachable or refusing: unknown
        finally:
            await connection.close()

    await DeferredList([Deferred.fromCoroutine(ask(b, items)) for b, items in sorted(by_broker.items())])
    for d in descriptions:
        d.partitions[:] = [_replace_latest(p, latest.get((p.topic, p.partition))) for p in d.partitions]


def _replace_latest(p: PartitionStatus, latest: int | None) -> PartitionStatus:
    return PartitionStatus(p.topic, p.partition, p.owner, p.offset, latest)


async def reset_offsets(zk: ZooKeeper, group: str, topic: str, offsets: Mapping[str, int]) -> None:
    """Rewind (or skip ahead) a group: set the committed offset of each partition named in C{offsets}.

    The group's consumers start there the next time they claim the
    partitions, so stop (or close) them first: a partition owned now would
    overwrite the value with its own progress.

    @param offsets: partition name (C{<broker id>-<partition>}) -> next offset to consume.
    @raise ValueError: a bad partition name or negative offset, or a consumer owns one of the partitions now.
    """
    for name, offset in offsets.items():
        paths.parse_partition_name(name)  # ValueError on a bad name
        if offset < 0:
            raise ValueError(f"offset {offset} of {topic}/{name} is negative")
    names = sorted(offsets, key=natural_key)
    owners = await read_values(zk, [paths.owner_path(group, topic, n) for n in names])
    busy = [f"{n} (by {o.decode('utf-8', 'replace')})" for n, o in zip(names, owners) if o is not None]
    if busy:
        raise ValueError(f"group {group} is consuming {topic}: {', '.join(busy)}; stop its consumers first")
    for name in names:
        await zk.set_or_create(paths.offset_path(group, topic, name), str(offsets[name]).encode())


# -- benchmark ----------------------------------------------------------------------------


async def rebalance_benchmark(reactor, zookeeper: str, consumers: int = 10, partitions: int = 40, *,
                              brokers: int = 4, scenario: str = "start", rebalance_backoff_ms: int = 500,
                              log_dir: str | None = None, timeout_s: float = 120.0) -> tuple[float, int]:
    """Time a rebalance of C{consumers} group consumers over C{partitions} partitions; return (seconds, retries).

    C{brokers} in-process brokers on 127.0.0.1 hold C{partitions // brokers}
    partitions each of one topic, registered in a fresh chroot under
    C{zookeeper}.  Every consumer has its session open before the clock starts.

      - C{scenario="start"}: all consumers join at once; the time runs until
        every one is STABLE and each partition is owned by exactly one of them.
      - C{scenario="join"}: C{consumers - 1} are stable first; the time runs from
        the last one joining until the group is settled again.

    C{retries} is the number of failed rebalance attempts that were retried
    (almost always an owner node still held by another consumer), summed over
    the consumers.
    """
    import tempfile

    from twlog.config import BrokerConfig, LogConfig
    from twlog.consumer.group import GroupConsumer, GroupState
    from twlog.coord.registry import BrokerRegistration
    from twlog.broker.tap import BrokerService

    if scenario not in ("start", "join"):
        raise ValueError("scenario must be 'start' or 'join'")
    if partitions % brokers:
        raise ValueError("partitions must be a multiple of brokers")
    chroot = f"/twlog-bench-{uuid.uuid4().hex[:8]}"
    admin = ZooKeeper(zookeeper, reactor=reactor)
    await admin.start()
    await admin.ensure_path(chroot)
    hosts = zookeeper.rstrip("/") + chroot
    directory = log_dir or tempfile.mkdtemp(prefix="twlog-rebalance-bench-")
    services, sessions, registrations, group = [], [], [], []
    try:
        for broker_id in range(brokers):
            config = BrokerConfig(log=LogConfig(f"{directory}/broker-{broker_id}",
                                                num_partitions=partitions // brokers),
                                  port=0, interface="127.0.0.1", broker_id=broker_id)
            service = BrokerService(config, reactor)
            service.startService()
            services.append(service)
            await service.listening
            session = ZooKeeper(hosts, reactor=reactor)
            await session.start()
            sessions.append(session)
            registration = BrokerRegistration(session, config, service.logs, service.broker.port, clock=reactor)
            await registration.start()
            registrations.append(registration)
            service.logs.get_or_create_log("bench", 0)  # creates (and registers) the topic
        expected = {paths.partition_name(b, p) for b in range(brokers) for p in range(partitions // brokers)}
        group = [GroupConsumer(hosts, "bench", reactor=reactor, consumer_id=f"bench-{i:03d}",
                               rebalance_backoff_ms=rebalance_backoff_ms, rebalance_max_retries=20)
                 for i in range(consumers)]
        await DeferredList([c.start() for c in group], fireOnOneErrback=True, consumeErrors=True)
        while len(await _children(admin, f"{chroot}{paths.broker_topic_path('bench')}")) < brokers:
            await deferLater(reactor, 0.01, lambda: None)

        def settled(members) -> bool:
            if any(c.state is not GroupState.STABLE or c._rebalancing is not None for c in members):
                return False
            owned = [name for c in members for name in c.owned().get("bench", {})]
            return len(owned) == len(set(owned)) and set(owned) == expected

        first = group if scenario == "start" else group[:-1]
        if scenario == "join":
            await DeferredList([c.create_message_streams({"bench": 1}) for c in first], consumeErrors=True)
            await _until(reactor, lambda: settled(first), timeout_s)
            first = group[-1:]
        retries_before = sum(c.retries for c in group)
        started = reactor.seconds()
        await DeferredList([c.create_message_streams({"bench": 1}) for c in first], consumeErrors=True)
        await _until(reactor, lambda: settled(group), timeout_s)
        return reactor.seconds() - started, sum(c.retries for c in group) - retries_before
    finally:
        await DeferredList([c.close() for c in group], consumeErrors=True)
        await DeferredList([r.stop() for r in registrations], consumeErrors=True)
        await DeferredList([s.stop() for s in sessions], consumeErrors=True)
        await DeferredList([s.stopService() for s in services if s.running], consumeErrors=True)
        await admin.stop()


async def _until(reactor, predicate, timeout_s: float, step_s: float = 0.002) -> None:
    """Let the reactor run until C{predicate()} holds, checking every C{step_s}; TimeoutError after C{timeout_s}."""
    deadline = reactor.seconds() + timeout_s
    while not predicate():
        if reactor.seconds() > deadline:
            raise TimeoutError(f"not settled within {timeout_s:g} s")
        await deferLater(reactor, step_s, lambda: None)
