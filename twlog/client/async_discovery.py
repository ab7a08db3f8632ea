# -*- test-case-name: tests.client.test_async_discovery -*-
"""Where a topic's partitions are, the Twisted way: L{discover_async}, for the CLI and other reactor code.

The same discovery as L{twlog.client.discovery.discover} (same sources, same
answers, same errors), driven by Deferreds: CLUSTER_METADATA and METADATA over
L{BrokerConnection}, ZooKeeper over the L{IZooKeeper} adapter, and the wait
before asking a starting broker again on the reactor's clock.  What it reads is
interpreted by the one pure reading, L{twlog.coord.layout.ClusterLayout}, and
what to do with the answers (L{BootstrapPass}, L{cluster_partitions}) is shared
with the blocking form.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from twlog.client.bootstrap import (
    OLDER_BROKER,
    STARTING_RETRIES,
    STARTING_WAIT_S,
    Bootstrap,
    BootstrapPass,
    Starting,
)
from twlog.client.connection import BrokerConnection
from twlog.client.discovery import (
    check_answered_as,
    cluster_partitions,
    holders_to_check,
    located,
    log_problems,
    parse_brokers,
    require_topics,
    unreachable,
)
from twlog.client.options import ClientOptions
from twlog.coord import paths
from twlog.coord.endpoints import PLAINTEXT, listener_values
from twlog.coord.layout import ClusterLayout, PartitionLocation, Reading, describe_offline
from twlog.coord.zk import IZooKeeper, KazooException, NoNodeError, ZooKeeper, ZooKeeperUnavailable
from twlog.errors import BrokerTimeout, ConnectionFailed
from twlog.protocol.codec import ClusterMetadataRequest, MetadataRequest
from twlog.protocol.replication_codec import ClusterMetadataV2Request
from twlog.storage.manager import validate_topic

__all__ = ["all_partitions_async", "bootstrap_async", "cluster_layout_async", "discover_async",
           "read_registrations_async"]

_logger = logging.getLogger("twlog.client.discovery")

#: C{connect(host, port, *, reactor, options)}: a connection like L{BrokerConnection}.
Connect = Callable[..., BrokerConnection]


def discover_async(
    topics: Iterable[str],
    *,
    brokers: str | Sequence[tuple[str, int]] | None = None,
    zookeeper: str | IZooKeeper | None = None,
    options: ClientOptions | None = None,
    check_reachable: bool = True,
    allow_partial: bool = False,
    reactor=None,
    connect: Connect = BrokerConnection,
    **overrides: Any,
) -> Deferred[list[PartitionLocation]]:
    """Every partition of C{topics} in the cluster, with its leader's address, sorted: L{discover}'s answer.

    @param zookeeper: a connect string (a session is opened and closed), or a started L{IZooKeeper}.
    @param allow_partial: leave out partitions whose broker is down, with a warning, instead of failing.
    @raise InvalidTopic: a topic name that cannot be, before asking anyone.
    @raise UnknownTopic: a topic no broker holds, naming the brokers asked.
    @raise PartitionsOffline: partitions whose broker is down (without C{allow_partial}), naming them.
    @raise ConnectionFailed: as L{twlog.client.discovery.discover}.
    """
    if reactor is None:
        from twisted.internet import reactor
    options = ClientOptions.build(options, **overrides)
    if (brokers is None) == (zookeeper is None):
        raise ValueError("give either the brokers option (host:port,...) or the zookeeper option, not both or none")
    return Deferred.fromCoroutine(_discover(topics, brokers, zookeeper, options, check_reachable, allow_partial,
                                            reactor, connect))


async def _discover(topics: list[str], brokers, zookeeper, options: ClientOptions, check_reachable: bool,
                    allow_partial: bool, reactor, connect: Connect) -> list[PartitionLocation]:
    topics = [validate_topic(topic) for topic in dict.fromkeys(topics)]
    answered: set[int] = set()
    if brokers is not None:
        cluster = await bootstrap_async(brokers, topics, options, reactor=reactor, connect=connect)
        found = cluster_partitions(cluster, topics, allow_partial)
        answered, where = cluster.answered, cluster.where
    else:
        found = located(await _registered(zookeeper, topics, options, reactor), topics, allow_partial=allow_partial)
        where = f"the brokers registered in ZooKeeper at {getattr(zookeeper, 'hosts', zookeeper)}"
    require_topics(found, topics, where)
    if check_reachable:
        await _reachable(found, options, answered, reactor, connect)
    return sorted(found)


def all_partitions_async(*, brokers: str | Sequence[tuple[str, int]] | None = None,
                         zookeeper: str | IZooKeeper | None = None, options: ClientOptions | None = None,
                         reactor=None, connect: Connect = BrokerConnection) -> Deferred[list[PartitionLocation]]:
    """Every partition of every topic of the cluster that can be read, located, sorted; those whose broker is
    down are left out with a warning naming them (L{cluster_layout_async} gives them too).

    @raise ConnectionFailed: no broker given answers, or ZooKeeper cannot be reached.
    """

    async def every() -> list[PartitionLocation]:
        reading = await cluster_layout_async(brokers=brokers, zookeeper=zookeeper, options=options, reactor=reactor,
                                             connect=connect)
        layout = reading.layout
        log_problems(reading.problems)
        offline = [tp for topic in layout.topics() for tp in layout.offline_partitions(topic)]
        if offline:
            _logger.warning("leaving out %d partitions that cannot be read: %s", len(offline),
                            describe_offline(offline))
        return sorted(location for topic in layout.topics() for location in layout.locations(topic))

    return Deferred.fromCoroutine(every())


def cluster_layout_async(*, brokers: str | Sequence[tuple[str, int]] | None = None,
                         zookeeper: str | IZooKeeper | None = None, options: ClientOptions | None = None,
                         reactor=None, connect: Connect = BrokerConnection) -> Deferred[Reading]:
    """The whole cluster's layout (every topic, its readable and its offline partitions), and the problems of the
    values skipped: what C{twlog topics} lists.

    @raise ConnectionFailed: no broker given answers, or ZooKeeper cannot be reached.
    """
    if reactor is None:
        from twisted.internet import reactor
    options = ClientOptions.build(options)
    if (brokers is None) == (zookeeper is None):
        raise ValueError("give either the brokers option (host:port,...) or the zookeeper option, not both or none")

    async def read() -> Reading:
        if zookeeper is not None:
            return await _registered(zookeeper, None, options, reactor)
        cluster = await bootstrap_async(brokers, (), options, reactor=reactor, connect=connect)
        return ClusterLayout.from_metadata(cluster.response)

    return Deferred.fromCoroutine(read())


async def _registered(zookeeper: str | IZooKeeper, topics: list[str] | None, options: ClientOptions,
                      reactor) -> Reading:
    if not isinstance(zookeeper, str):
        return await read_registrations_async(zookeeper, topics, options.listener)
    zk = ZooKeeper(zookeeper, reactor=reactor, connect_timeout_s=options.timeout_s,
                   credentials=options.zookeeper_credentials)
    try:
        await zk.start()
    except ZooKeeperUnavailable as e:
        raise ConnectionFailed(str(e)) from None
    try:
        return await read_registrations_async(zk, topics, options.listener)
    except KazooException as e:
        raise ConnectionFailed(f"cannot read the brokers from ZooKeeper at {zookeeper}: {e!r}") from None
    finally:
        await zk.stop()


async def read_registrations_async(zk: IZooKeeper, topics: Iterable[str] | None, listener: str = PLAINTEXT
                                   ) -> Reading:
    """Read the brokers' and C{topics}' (None: every registered topic's) registrations from C{zk}, interpreted by
    the layout (no watches); a named replicated topic's assignment and partition states too.  The brokers are
    located at their C{listener}'s address (L{twlog.coord.endpoints})."""
    brokers = await _values(zk, paths.BROKER_IDS)
    endpoints = await _values(zk, paths.BROKER_ENDPOINTS) if listener != PLAINTEXT else {}
    brokers, problems = listener_values(brokers, endpoints, listener)
    if topics is None:
        try:
            topics = sorted(await zk.children(paths.BROKER_TOPICS))
        except NoNodeError:
            topics = []
    registrations = {topic: await _values(zk, paths.broker_topic_path(topic)) for topic in topics}
    held = {topic: await _values(zk, paths.held_path(topic)) for topic in topics}
    replicated = {}
    for topic in topics:
        if not registrations[topic] and not held[topic]:  # (as the view: a 0.7 topic is not looked for there)
            try:
                value, _ = await zk.get(paths.replicated_topic_path(topic))
            except NoNodeError:
                continue
            states = await _values(zk, paths.partition_state_path(topic))  # partition -> its node's value ...
            replicated[topic] = (value, {p: await _state(zk, topic, p) for p in states})  # ... its state's
    reading = ClusterLayout.from_registrations(brokers, registrations, held, replicated)
    return attrs.evolve(reading, problems=(*problems, *reading.problems)) if problems else reading


async def _state(zk: IZooKeeper, topic: str, partition: str) -> bytes | None:
    try:
        value, _ = await zk.get(f"{paths.partition_state_path(topic)}/{partition}/state")
    except NoNodeError:
        return None
    return value


async def _values(zk: IZooKeeper, parent: str) -> Mapping[str, bytes | None]:
    """C{parent}'s children and their values (None: gone meanwhile); none when C{parent} is missing."""
    try:
        names = await zk.children(parent)
    except NoNodeError:
        return {}
    values: dict[str, bytes | None] = {}
    for name in names:
        try:
            values[name], _ = await zk.get(f"{parent}/{name}")
        except NoNodeError:
            values[name] = None
    return values


async def bootstrap_async(brokers: str | Sequence[tuple[str, int]], topics: Iterable[str] = (),
                          options: ClientOptions | None = None, *, reactor, connect: Connect = BrokerConnection
                          ) -> Bootstrap:
    """The cluster as the brokers at C{brokers} describe it: L{twlog.client.discovery.bootstrap}, on the reactor."""
    options = ClientOptions.build(options)
    topics = tuple(dict.fromkeys(topics))
    asked = parse_brokers(brokers)
    for attempt in range(STARTING_RETRIES + 1):
        try:
            return await _bootstrap_once(asked, topics, options, reactor, connect)
        except Starting as e:
            if attempt == STARTING_RETRIES:
                raise ConnectionFailed(str(e)) from None
            await deferLater(reactor, STARTING_WAIT_S)  # a starting broker reads ZooKeeper: ask again
    raise AssertionError("unreachable")


async def _bootstrap_once(asked: list[tuple[str, int]], topics: tuple[str, ...], options: ClientOptions, reactor,
                          connect: Connect) -> Bootstrap:
    """One pass over the addresses (L{BootstrapPass} decides), each asked CLUSTER_METADATA on the reactor."""
    walk = BootstrapPass(asked)
    while (address := walk.next_address()) is not None:
        try:
            walk.receive(await _ask_cluster(address, topics, options, reactor, connect))
        except (ConnectionFailed, BrokerTimeout) as e:
            walk.receive(e)
    return walk.result()


async def _ask_cluster(address: tuple[str, int], topics: tuple[str, ...], options: ClientOptions, reactor,
                       connect: Connect):
    """L{twlog.client.discovery._ask_cluster}, on the reactor: type 14, and type 8 from an older broker."""
    try:
        return await _ask(connect(*address, reactor=reactor, options=options), ClusterMetadataV2Request(topics))
    except OLDER_BROKER:
        pass
    return await _ask(connect(*address, reactor=reactor, options=options), ClusterMetadataRequest(topics))


async def _ask(connection: BrokerConnection, request):
    """C{request}'s answer on C{connection}, closed afterwards."""
    try:
        return await connection.request(request)
    finally:
        await connection.close()


async def _reachable(locations: Iterable[PartitionLocation], options: ClientOptions, skip: Iterable[int], reactor,
                     connect: Connect) -> None:
    """L{twlog.client.discovery.reachable}, on the reactor."""
    for broker_id, held in holders_to_check(locations, skip):
        first = held[0]
        try:
            answer = await _ask(connect(first.host, first.port, reactor=reactor, options=options), MetadataRequest(()))
        except (ConnectionFailed, BrokerTimeout) as e:
            raise unreachable(broker_id, held, e) from None
        check_answered_as(broker_id, held, answer.broker_id)
