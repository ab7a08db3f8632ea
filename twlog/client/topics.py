# -*- test-case-name: tests.client.test_topics,tests.integration.test_topics_create -*-
"""Creating and deleting a topic on every broker of a cluster (blocking): C{twlog topics create} and C{delete};
and creating a replicated topic in ZooKeeper (L{create_replicated}, on the reactor).

A replicated topic (C{--replication-factor}) has P partitions in all, C{0} to C{P-1}, each on R brokers:
L{create_replicated} spreads them over the live brokers (C{/brokers/ids}) with L{assign_replicas}, writes
C{/twlog/topics/<topic>} (L{twlog.coord.replication.store.create_replicated_topic}), and waits (boundedly) for
the controller to write each partition's first state, so a producer started next finds the leaders.  It talks
to ZooKeeper directly, as Kafka 0.8's C{kafka-topics.sh --zookeeper} does: no broker request creates one.

For a 0.7 topic partitions are per broker, as in Kafka 0.7: C{create_topic("clicks", 2)} on a
cluster of 3 brokers gives each broker 2 partitions, 6 in all.  The brokers are
the cluster's live brokers, learnt from any one broker address (CLUSTER_METADATA,
L{twlog.client.discovery.bootstrap}) or from ZooKeeper's C{/brokers/ids}.  Every
broker is asked METADATA first, so an unreachable one is named before anything
is created; then each gets CREATE_TOPIC (type 9), which is idempotent for the
same count.  Finally it waits (boundedly) until the cluster's registry shows the
topic on every broker, so a producer started next sees every partition.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs
from twisted.internet.task import deferLater

from twlog.client.discovery import bootstrap, registered_brokers
from twlog.client.options import ClientOptions
from twlog.client.sync import SyncConnection
from twlog.coord import paths
from twlog.coord.layout import describe_offline
from twlog.coord.replication import store
from twlog.coord.replication.assign import assign_replicas
from twlog.coord.replication.store import MIN_INSYNC_REPLICAS
from twlog.coord.replication.values import TopicAssignment
from twlog.coord.zk import BlockingZooKeeper, IZooKeeper, NoNodeError, ZooKeeperUnavailable
from twlog.errors import (
    BrokerTimeout,
    ConnectionFailed,
    InvalidRequest,
    PartitionsOffline,
    TopicExists,
    TwlogError,
    UnknownTopic,
    raise_for,
)
from twlog.partition import TopicPartition, address_text
from twlog.protocol.codec import CreateTopicRequest, DeleteTopicRequest
from twlog.protocol.replication_codec import ReplicatedLayout
from twlog.storage.manager import MAX_PARTITIONS, validate_topic

#: How long L{create_topic} waits for every broker's registration of the new topic to be visible.
REGISTRATION_WAIT_S = 5.0
_POLL_S = 0.1


@attrs.frozen
class Cluster:
    """The live brokers (id -> (host, port)) and the partitions of one topic each holds (id -> count)."""

    brokers: dict[int, tuple[str, int]]
    holders: dict[int, int]
    #: Where it was learnt, for messages.
    source: str
    #: The brokers that held the topic and are not live now (id -> count): their logs of it are still on disk.
    down: dict[int, int] = attrs.field(factory=dict)


@attrs.frozen
class TopicCreated:
    """What L{create_topic} did: C{partitions} on each of C{brokers}; C{existed}: those that had them already."""

    topic: str
    partitions: int
    brokers: dict[int, tuple[str, int]]
    existed: frozenset[int]
    #: Whether every broker's registration was seen within L{REGISTRATION_WAIT_S}.
    registered: bool

    @property
    def total(self) -> int:
        """Partitions over the whole cluster."""
        return self.partitions * len(self.brokers)


def check_partition_count(partitions: int) -> int:
    """C{partitions} if it is a valid per-broker count (1 to L{MAX_PARTITIONS}).

    @raise InvalidRequest: naming the count and the range accepted.
    """
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidRequest(f"a topic has 1 to {MAX_PARTITIONS} partitions on each broker, not {partitions}")
    return partitions


def read_cluster(topic: str, *, brokers: str | Sequence[tuple[str, int]] | None = None,
                 zookeeper: str | None = None, options: ClientOptions | None = None) -> Cluster:
    """The cluster's live brokers and who holds C{topic}, from C{brokers} (any one address) or C{zookeeper}.

    @raise ConnectionFailed: neither can be reached (naming them).
    """
    options = ClientOptions.build(options)
    if (brokers is None) == (zookeeper is None):
        raise ValueError("give either brokers (host:port,...) or zookeeper, not both or none")
    if brokers is not None:
        cluster = bootstrap(brokers, (topic,), options)
        layout = cluster.response.layout(topic)
        if layout is not None:
            raise_for(layout.error, f"broker {cluster.asked} refuses topic {topic!r}")
        if isinstance(layout, ReplicatedLayout):
            raise TopicExists(f"topic {topic!r} is a replicated topic ({len(layout.partitions)} partitions, each on "
                              "several brokers): per-broker create and delete do not apply to it")
        addresses = cluster.response.addresses
        every = dict(layout.holders) if layout is not None else {}  # (a down holder has no address)
        holders = {b: n for b, n in every.items() if b in addresses}
        down = {b: n for b, n in every.items() if b not in addresses}
        return Cluster(addresses, holders, f"the brokers known to {cluster.asked}", down)
    try:
        with BlockingZooKeeper(zookeeper, options.timeout_s, options.zookeeper_credentials) as zk:
            live = registered_brokers(zk)
            holders, down = {}, {}
            for child in zk.children(paths.broker_topic_path(topic)):
                count = zk.get(paths.broker_topic_path(topic, int(child)))
                if int(child) in live and count is not None:
                    holders[int(child)] = int(count.decode() or 0)
            for child in zk.children(paths.held_path(topic)):  # (what a broker that is down now registered)
                count = zk.get(paths.held_path(topic, int(child)))
                if child.isdigit() and int(child) not in live and count is not None and count.decode().isdigit():
                    down[int(child)] = int(count.decode())
    except ZooKeeperUnavailable as e:
        raise ConnectionFailed(str(e)) from None
    return Cluster(live, holders, f"the brokers registered in ZooKeeper at {zookeeper}", down)


def create_topic(topic: str, partitions: int, *, brokers: str | Sequence[tuple[str, int]] | None = None,
                 zookeeper: str | None = None, options: ClientOptions | None = None,
                 wait_s: float = REGISTRATION_WAIT_S) -> TopicCreated:
    """Create C{topic} with C{partitions} partitions on each live broker of the cluster (blocking).

    @raise InvalidTopic: the name breaks the topic rules.
    @raise InvalidRequest: C{partitions} is outside 1 to L{MAX_PARTITIONS}.
    @raise TopicExists: a broker holds the topic with another count (nothing is created).
    @raise ConnectionFailed: the cluster cannot be read, has no live broker, or a broker cannot be
        reached (naming each; nothing is created).
    """
    validate_topic(topic)
    check_partition_count(partitions)
    options = ClientOptions.build(options)
    cluster = read_cluster(topic, brokers=brokers, zookeeper=zookeeper, options=options)
    if not cluster.brokers:
        raise ConnectionFailed(f"no live broker among {cluster.source}")
    others = {b: n for b, n in sorted({**cluster.down, **cluster.holders}.items()) if n != partitions}
    if others:
        held = ", ".join(f"{n} partitions on broker {b}" for b, n in others.items())
        raise TopicExists(f"topic {topic!r} already exists with {held}, not the {partitions} asked for on each "
                          "broker (a topic keeps its partition count)")
    connections = _connect_all(topic, cluster.brokers, options)
    try:
        for broker_id, connection in sorted(connections.items()):
            connection.call(CreateTopicRequest(topic, partitions))
    finally:
        for connection in connections.values():
            connection.close()
    registered = _wait_registered(topic, partitions, set(cluster.brokers), brokers, zookeeper, options, wait_s)
    return TopicCreated(topic, partitions, dict(cluster.brokers), frozenset(cluster.holders), registered)


def _connect_all(topic: str, brokers: dict[int, tuple[str, int]], options: ClientOptions,
                 action: str = "create") -> dict[int, SyncConnection]:
    """A connection to every broker, checked (METADATA answered by the right id); or an error naming all that failed."""
    connections: dict[int, SyncConnection] = {}
    problems = []
    for broker_id, (host, port) in sorted(brokers.items()):
        connection = connections[broker_id] = SyncConnection(host, port, options)
        try:
            answer = connection.metadata(())
        except (ConnectionFailed, BrokerTimeout) as e:
            problems.append(f"broker {broker_id} at {address_text(host, port)} ({e})")
            continue
        if answer.broker_id != broker_id:
            problems.append(f"broker {broker_id} at {address_text(host, port)} (it answers as broker "
                            f"{answer.broker_id}: a stale registration?)")
    if problems:
        for connection in connections.values():
            connection.close()
        raise ConnectionFailed(f"cannot {action} topic {topic!r}: cannot reach " + "; ".join(problems)
                               + f"; nothing was {action}d")
    return connections


def _wait_registered(topic: str, partitions: int, expected: set[int], brokers, zookeeper, options: ClientOptions,
                     wait_s: float) -> bool:
    """Whether the cluster shows C{topic} with C{partitions} on every broker of C{expected} within C{wait_s}."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            cluster = read_cluster(topic, brokers=brokers, zookeeper=zookeeper, options=options)
            if all(cluster.holders.get(b) == partitions for b in expected):
                return True
        except ConnectionFailed:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


@attrs.frozen
class TopicDeletion:
    """What L{delete_topic} did: the brokers (id -> address) that held the topic and deleted it."""

    topic: str
    brokers: dict[int, tuple[str, int]]
    #: Whether every broker's registration of the topic was seen gone within L{REGISTRATION_WAIT_S}.
    deregistered: bool


def delete_topic(topic: str, *, brokers: str | Sequence[tuple[str, int]] | None = None,
                 zookeeper: str | None = None, options: ClientOptions | None = None,
                 wait_s: float = REGISTRATION_WAIT_S) -> TopicDeletion:
    """Delete C{topic} on every live broker that holds it (blocking): DELETE_TOPIC (type 11) to each.

    Each broker removes the topic's logs and its recorded count, and drops its registration
    C{/brokers/topics/<topic>/<id>}; this waits (boundedly) until the cluster shows no holder.
    Consumer groups are not looked at here (C{twlog topics delete} does that).

    @raise InvalidTopic: the name breaks the topic rules.
    @raise UnknownTopic: no live broker holds the topic.
    @raise ConnectionFailed: the cluster cannot be read, or a holder cannot be reached (naming each;
        nothing is deleted).
    @raise PartitionsOffline: a broker that holds the topic is down (naming it; nothing is deleted): its logs
        would register the topic again when it starts.
    """
    validate_topic(topic)
    options = ClientOptions.build(options)
    cluster = read_cluster(topic, brokers=brokers, zookeeper=zookeeper, options=options)
    if cluster.down:
        offline = [TopicPartition(topic, f"{b}-{n}") for b, count in sorted(cluster.down.items()) for n in range(count)]
        retired = " and ".join(f"twlog brokers forget --broker-id {b}" for b in sorted(cluster.down))
        raise PartitionsOffline(
            f"cannot delete topic {topic!r}: {describe_offline(offline)}; its logs would bring the topic back when it "
            f"starts, so nothing was deleted: start it and delete again (or, for a broker retired for good, "
            f"{retired} first)", offline)
    holders = {b: cluster.brokers[b] for b in sorted(cluster.holders) if b in cluster.brokers}
    if not holders:
        raise UnknownTopic(f"topic {topic!r} does not exist on {cluster.source}")
    connections = _connect_all(topic, holders, options, action="delete")
    try:
        for broker_id, connection in sorted(connections.items()):
            connection.call(DeleteTopicRequest(topic))
    finally:
        for connection in connections.values():
            connection.close()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if not read_cluster(topic, brokers=brokers, zookeeper=zookeeper, options=options).holders:
                return TopicDeletion(topic, holders, True)
        except ConnectionFailed:
            pass
        if time.monotonic() >= deadline:
            return TopicDeletion(topic, holders, False)
        time.sleep(_POLL_S)


@attrs.frozen
class ReplicatedTopicCreated:
    """What L{create_replicated} did: the topic's assignment (partition -> replicas, preferred leader first)."""

    assignment: TopicAssignment
    #: The live brokers it was spread over.
    live: tuple[int, ...]
    #: Whether the controller wrote every partition's first state (its leader and ISR) within the wait.
    started: bool


def check_total_partitions(partitions: int) -> int:
    """C{partitions} if it is a valid count for a replicated topic (1 to L{MAX_PARTITIONS}, all brokers together).

    @raise InvalidRequest: naming the count and the range accepted.
    """
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidRequest(f"a replicated topic has 1 to {MAX_PARTITIONS} partitions in all, not {partitions}")
    return partitions


async def create_replicated(zk: IZooKeeper, topic: str, partitions: int, replication_factor: int, *, clock,
                            min_insync_replicas: int | None = None, wait_s: float = REGISTRATION_WAIT_S,
                            rng=None) -> ReplicatedTopicCreated:
    """Create C{topic} with C{partitions} partitions in all, each on C{replication_factor} of the live brokers
    (leaders and replicas spread evenly), in ZooKeeper; wait up to C{wait_s} for the controller's first states.

    @param min_insync_replicas: the topic's C{min.insync.replicas} (None: the brokers' --min-insync-replicas).
    @raise InvalidTopic: the name breaks the topic rules.
    @raise InvalidRequest: C{partitions} is outside 1 to L{MAX_PARTITIONS}.
    @raise InvalidReplicationFactor: more than the live brokers, or below 1 (naming the live brokers).
    @raise ReplicatedTopicExists: the name is taken, by a replicated topic or a 0.7 one.
    @raise InvalidTopicConfig: C{min_insync_replicas} below 1.
    @raise ConnectionFailed: no broker is registered.
    """
    validate_topic(topic)
    check_total_partitions(partitions)
    try:
        names = await zk.children(paths.BROKER_IDS)
    except NoNodeError:
        names = []
    live = tuple(sorted(int(n) for n in names if n.isascii() and n.isdigit()))
    if not live:
        raise ConnectionFailed(f"no live broker is registered in ZooKeeper ({paths.BROKER_IDS} is empty): "
                               "start the brokers first")
    assignment = assign_replicas(live, partitions, replication_factor, rng=rng)
    config = {MIN_INSYNC_REPLICAS: str(min_insync_replicas)} if min_insync_replicas is not None else {}
    created = await store.create_replicated_topic(zk, topic, assignment, config)
    deadline = clock.seconds() + wait_s
    while True:
        started = True
        for partition in created.partitions:
            if await zk.exists(paths.partition_state_path(topic, partition)) is None:
                started = False
                break
        if started or clock.seconds() >= deadline:
            return ReplicatedTopicCreated(created, live, started)
        await deferLater(clock, _POLL_S)


async def delete_replicated(zk: IZooKeeper, topic: str, *, clock,
                            wait_s: float = REGISTRATION_WAIT_S) -> tuple[int, ...]:
    """Delete replicated topic C{topic}: mark it (C{/twlog/delete_topics/<topic>}), wait until every broker with a
    replica of it has stopped its roles and deleted its logs, then remove its ZooKeeper state; the brokers.

    @raise TwlogError: a replica's broker is down (its replicas must go too: nothing is deleted), or a broker did
        not delete its replicas within C{wait_s} (the mark stays, and the brokers finish when they can; run
        the command again).
    """
    assignment = await store.read_topic(zk, topic)
    replicas = tuple(sorted({b for r in assignment.partitions.values() for b in r}))
    try:
        names = await zk.children(paths.BROKER_IDS)
    except NoNodeError:
        names = []
    down = [b for b in replicas if str(b) not in names]
    if down:
        raise TwlogError(f"broker{'s' if len(down) > 1 else ''} {', '.join(map(str, down))}, with replicas of "
                         f"{topic!r}, {'are' if len(down) > 1 else 'is'} down: start "
                         f"{'them' if len(down) > 1 else 'it'} first, so that every replica goes; nothing was deleted")
    await zk.ensure_path(paths.delete_topic_path(topic))
    deadline = clock.seconds() + wait_s
    while True:
        done = {int(n) for n in await zk.children(paths.delete_topic_path(topic)) if n.isdigit()}
        left = [b for b in replicas if b not in done]
        if not left:
            break
        if clock.seconds() >= deadline:
            raise TwlogError(f"broker{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} did not delete "
                             f"{'their' if len(left) > 1 else 'its'} replicas of {topic!r} within {wait_s:g} s; the "
                             "deletion goes on when they do: run the command again to finish it")
        await deferLater(clock, _POLL_S)
    await store.delete_tree(zk, paths.replicated_topic_path(topic))
    await store.delete_tree(zk, paths.delete_topic_path(topic))
    return replicas
