# -*- test-case-name: tests.client.test_discovery -*-
"""Where a topic's partitions are, blocking: static and ZooKeeper discovery, drivers of the cluster layout.

A partition is a L{TopicPartition} (topic, name); where addresses are needed
it travels as a L{PartitionLocation} (from L{twlog.coord.layout}, re-exported
here): the partition plus its leader and the leader's host and port.

Two sources:

  - brokers (C{"host:port,host:port"}, L{parse_brokers}): any one address
    bootstraps everything (L{bootstrap}): a broker that follows ZooKeeper
    answers CLUSTER_METADATA with every live broker and every partition of the
    cluster (L{cluster_partitions}); brokers without ZooKeeper each describe
    themselves, so then every address given is asked and the answers merged;
  - ZooKeeper: the brokers' registrations (C{/brokers/ids/<id>}, whose value
    L{twlog.coord.layout.parse_broker_address} reads, 0.7's
    C{creator:host:port} included) and each topic's per-broker partition counts.

Both are read by one pure reading, L{twlog.coord.layout.ClusterLayout}
(C{from_metadata}, C{from_registrations}): this module only fetches the
answers and the values, and logs each problem the reading reports (a bad
value skipped) once, as a warning.

Either way, L{discover} returns every partition or fails naming what it could
not reach (L{reachable}): never a silent subset.  L{resolve_partition} (from
L{twlog.partition}) turns what a user typed (C{1-0}, or an index C{3}) into one
of a topic's partitions.

L{discover} is the blocking form, for the Spark driver and scripts (no
reactor; ZooKeeper through L{BlockingZooKeeper}); its I/O and time come in as
C{connect=} (default L{SyncConnection}) and C{sleep=} (default C{time.sleep}).
L{twlog.client.async_discovery.discover_async} is the Twisted form, for the CLI;
the Twisted producer follows the same layout live with
L{twlog.coord.cluster.ClusterView}.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from twlog.client.bootstrap import (
    OLDER_BROKER,
    STARTING_RETRIES,
    STARTING_WAIT_S,
    Bootstrap,
    BootstrapPass,
    ClusterAnswer,
    Starting,
)
from twlog.client.options import ClientOptions
from twlog.client.sync import SyncConnection
from twlog.coord import paths
from twlog.coord.endpoints import PLAINTEXT, listener_values
from twlog.coord.layout import ClusterLayout, PartitionLocation, Reading, describe_offline
from twlog.coord.zk import BlockingZooKeeper, ZooKeeperUnavailable
from twlog.errors import BrokerTimeout, BrokerUnreachable, ConnectionFailed, PartitionsOffline, UnknownTopic, raise_for
from twlog.partition import TopicPartition, address_text, describe_partitions, resolve_partition
from twlog.protocol.codec import MetadataResponse
from twlog.storage.manager import validate_topic

_logger = logging.getLogger(__name__)

__all__ = [
    "STARTING_RETRIES",
    "STARTING_WAIT_S",
    "Bootstrap",
    "PartitionLocation",
    "located",
    "TopicPartition",
    "bootstrap",
    "cluster_partitions",
    "describe_partitions",
    "discover",
    "format_address",
    "metadata_partitions",
    "parse_brokers",
    "reachable",
    "registered_brokers",
    "registered_partitions",
    "resolve_partition",
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


#: C{host:port}, with an IPv6 host in brackets: the address as messages show it.
format_address = address_text


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
            found.extend(TopicPartition.on_broker(info.topic, metadata.broker_id, p) for p in range(info.partitions))
    return found


def discover(
    topics: Iterable[str],
    *,
    brokers: str | Sequence[tuple[str, int]] | None = None,
    zookeeper: str | None = None,
    options: ClientOptions | None = None,
    check_reachable: bool = True,
    allow_partial: bool = False,
    sleep: Callable[[float], object] = time.sleep,
    connect: Callable[..., SyncConnection] = SyncConnection,
    **overrides: Any,
) -> list[PartitionLocation]:
    """Every partition of C{topics} in the cluster, with its broker's address, sorted (blocking).

    With C{brokers}, one of them (the first that answers) describes the whole cluster
    (CLUSTER_METADATA, L{bootstrap}); brokers without ZooKeeper know only themselves, so then
    every one given is asked.  With C{zookeeper}, the brokers' registrations are read.  With
    C{check_reachable}, every broker holding a partition found is asked METADATA once, so a
    partition on a broker that cannot be reached is an error naming it, never a silent subset.
    So is a partition the cluster knows of whose broker is down (not registered): unless
    C{allow_partial}, when it is left out with a warning naming it.
    A bad value (L{twlog.coord.layout}'s rule) is skipped and logged as a warning.

    @param sleep: how to wait before asking a starting broker again (C{time.sleep}).
    @param connect: C{connect(host, port, options)} gives a L{SyncConnection} (or one like it).
    @raise InvalidTopic: a topic name that cannot be (L{validate_topic}), before asking anyone.
    @raise UnknownTopic: a topic no broker holds, naming the brokers asked.
    @raise PartitionsOffline: partitions whose broker is down (without C{allow_partial}), naming them.
    @raise ConnectionFailed: no broker given answers, ZooKeeper cannot be reached (or has no
        such chroot), or a broker holding partitions cannot be reached: naming it and them.
    """
    options = ClientOptions.build(options, **overrides)
    topics = [validate_topic(topic) for topic in dict.fromkeys(topics)]
    if (brokers is None) == (zookeeper is None):
        raise ValueError("give either the brokers option (host:port,...) or the zookeeper option, not both or none")
    answered: set[int] = set()
    if brokers is not None:
        cluster = bootstrap(brokers, topics, options, sleep=sleep, connect=connect)
        found = cluster_partitions(cluster, topics, allow_partial)
        answered = cluster.answered
        where = cluster.where
    else:
        found = _zookeeper_partitions(topics, zookeeper, options, allow_partial)
        where = f"the brokers registered in ZooKeeper at {zookeeper}"
    require_topics(found, topics, where)
    if check_reachable:
        reachable(found, options, skip=answered, connect=connect)
    return sorted(found)


def require_topics(found: Iterable[PartitionLocation], topics: Iterable[str], where: str) -> None:
    """@raise UnknownTopic: one of C{topics} has none of C{found}, naming C{where} was asked."""
    held = {location.topic for location in found}
    for topic in topics:
        if topic not in held:
            raise UnknownTopic(f"topic {topic!r} is on none of {where}")


def bootstrap(
    brokers: str | Sequence[tuple[str, int]], topics: Iterable[str] = (), options: ClientOptions | None = None, *,
    sleep: Callable[[float], object] = time.sleep, connect: Callable[..., SyncConnection] = SyncConnection,
) -> Bootstrap:
    """The cluster as the brokers at C{brokers} describe it (blocking): any one address is enough.

    The addresses are asked CLUSTER_METADATA in turn; the first broker that follows ZooKeeper
    (view current) describes everything.  Brokers without ZooKeeper each describe themselves, so
    then every address must answer and the answers are merged.  An answer from a broker whose
    ZooKeeper session is down (stale) is used when no better one comes, with a warning in the log;
    one that has not read ZooKeeper yet is not used.

    @raise ConnectionFailed: no usable answer, or (without ZooKeeper) an address that cannot be
        reached; naming the addresses and why.
    @raise InvalidTopic: a topic the brokers refuse.
    """
    options = ClientOptions.build(options)
    topics = tuple(dict.fromkeys(topics))
    asked = parse_brokers(brokers)
    for attempt in range(STARTING_RETRIES + 1):
        try:
            return _bootstrap_once(asked, topics, options, connect)
        except Starting as e:
            if attempt == STARTING_RETRIES:
                raise ConnectionFailed(str(e)) from None
            sleep(STARTING_WAIT_S)  # a broker reads ZooKeeper right after it starts: ask again
    raise AssertionError("unreachable")


def _bootstrap_once(asked: list[tuple[str, int]], topics: tuple[str, ...], options: ClientOptions,
                    connect: Callable[..., SyncConnection]) -> Bootstrap:
    """One pass over the addresses (L{BootstrapPass} decides), each asked CLUSTER_METADATA over C{connect}."""
    walk = BootstrapPass(asked)
    while (address := walk.next_address()) is not None:
        try:
            walk.receive(_ask_cluster(address, topics, options, connect))
        except (ConnectionFailed, BrokerTimeout) as e:
            walk.receive(e)
    return walk.result()


def _ask_cluster(address: tuple[str, int], topics: tuple[str, ...], options: ClientOptions,
                 connect: Callable[..., SyncConnection]) -> ClusterAnswer:
    """C{address}'s CLUSTER_METADATA_V2 answer; from a broker that closes the connection on it (an older one,
    which answers InvalidRequest first), its CLUSTER_METADATA answer, on a new connection."""
    try:
        with connect(*address, options) as connection:
            return connection.cluster_metadata_v2(topics)
    except OLDER_BROKER:
        pass
    with connect(*address, options) as connection:
        return connection.cluster_metadata(topics)


def cluster_partitions(cluster: Bootstrap | ClusterAnswer, topics: Iterable[str],
                       allow_partial: bool = False) -> list[PartitionLocation]:
    """The partitions of C{topics} in a CLUSTER_METADATA answer, with their brokers' addresses, sorted.

    The answer is read by L{ClusterLayout.from_metadata}: a holder the answer gives no address for is a
    broker that is down (L{located} decides what its partitions mean).

    @raise InvalidTopic: the answer refuses one of C{topics}.
    @raise PartitionsOffline: as L{located}.
    """
    answer = cluster.response if isinstance(cluster, Bootstrap) else cluster
    topics = list(dict.fromkeys(topics))
    for topic in topics:
        layout = answer.layout(topic)
        if layout is not None:
            raise_for(layout.error, f"broker {answer.broker_id} refuses topic {topic!r}")
    return located(ClusterLayout.from_metadata(answer), topics, allow_partial=allow_partial)


def located(reading: Reading, topics: Iterable[str], logger: logging.Logger = _logger, *,
            allow_partial: bool = False) -> list[PartitionLocation]:
    """The partitions of C{topics} in C{reading}'s layout, located and sorted; its problems logged as warnings.

    A partition the layout knows of but cannot locate (its broker is down: L{ClusterLayout.offline_partitions})
    is never left out in silence: it is an error naming it, or, with C{allow_partial}, a warning saying what
    is left out.

    @raise PartitionsOffline: some of C{topics}' partitions have no live leader (without C{allow_partial}).
    """
    log_problems(reading.problems, logger)
    topics = list(dict.fromkeys(topics))
    found = sorted(location for topic in topics for location in reading.layout.locations(topic))
    offline = [tp for topic in topics for tp in reading.layout.offline_partitions(topic)]
    if offline:
        why = describe_offline(offline)
        unreadable = {tp.topic for tp in offline} - {location.topic for location in found}
        if not allow_partial or unreadable:  # (a topic with nothing left to read is not a partial answer)
            raise PartitionsOffline(why, offline, found)
        logger.warning("leaving out %d partition%s that cannot be read: %s", len(offline),
                       "" if len(offline) == 1 else "s", why)
    return found


def log_problems(problems: Iterable[str], logger: logging.Logger = _logger) -> None:
    """Log each distinct problem of a reading once, as a warning."""
    for problem in dict.fromkeys(problems):
        logger.warning("ignoring a bad value: %s", problem)


def reachable(locations: Iterable[PartitionLocation], options: ClientOptions | None = None,
              skip: Iterable[int] = (), *, connect: Callable[..., SyncConnection] = SyncConnection) -> None:
    """Check that every broker holding one of C{locations} answers at its address, as itself (blocking).

    @param skip: broker ids known to answer (not asked again).
    @raise ConnectionFailed: naming the broker, its address and the partitions it holds.
    """
    options = ClientOptions.build(options)
    for broker_id, held in holders_to_check(locations, skip):
        first = held[0]
        try:
            with connect(first.host, first.port, options) as connection:
                answer = connection.metadata(())
        except (ConnectionFailed, BrokerTimeout) as e:
            raise unreachable(broker_id, held, e) from None
        check_answered_as(broker_id, held, answer.broker_id)


def holders_to_check(locations: Iterable[PartitionLocation], skip: Iterable[int] = ()
                     ) -> list[tuple[int, list[PartitionLocation]]]:
    """The brokers holding C{locations} (but those in C{skip}), each with what it holds, by broker id."""
    skipped = set(skip)
    by_broker: dict[int, list[PartitionLocation]] = {}
    for location in locations:
        if location.leader not in skipped:
            by_broker.setdefault(location.leader, []).append(location)
    return [(broker_id, sorted(held)) for broker_id, held in sorted(by_broker.items())]


def unreachable(broker_id: int, held: Sequence[PartitionLocation], error: BaseException) -> BrokerUnreachable:
    """The error for broker C{broker_id}, holding C{held}, that cannot be reached."""
    names = ", ".join(str(location.tp) for location in held)
    return BrokerUnreachable(f"broker {broker_id} at {held[0].address} holds {names} but cannot be reached: {error}",
                             [location.tp for location in held])


def check_answered_as(broker_id: int, held: Sequence[PartitionLocation], answered: int) -> None:
    """@raise ConnectionFailed: the address of broker C{broker_id} answered as broker C{answered}."""
    if answered != broker_id:
        names = ", ".join(str(location.tp) for location in held)
        raise ConnectionFailed(f"broker {broker_id} holds {names}, but {held[0].address} answers as broker "
                               f"{answered} (a stale registration?)")


def _zookeeper_partitions(topics: list[str], zookeeper: str, options: ClientOptions,
                          allow_partial: bool = False) -> list[PartitionLocation]:
    try:
        with BlockingZooKeeper(zookeeper, options.timeout_s, options.zookeeper_credentials) as zk:
            return registered_partitions(zk, topics, allow_partial, options.listener)
    except ZooKeeperUnavailable as e:
        raise ConnectionFailed(str(e)) from None


def registered_partitions(zk: BlockingZooKeeper, topics: Iterable[str],
                          allow_partial: bool = False, listener: str = PLAINTEXT) -> list[PartitionLocation]:
    """The partitions of C{topics} on the live brokers registered in C{zk} (Kafka 0.7's layout), sorted.

    C{zk} needs only C{children(path)} and C{get(path)} (None for a missing node).  Bad values are skipped
    and logged (L{ClusterLayout.from_registrations}).

    @raise PartitionsOffline: as L{located}.
    """
    topics = list(dict.fromkeys(topics))
    return located(read_registrations(zk, topics, listener), topics, allow_partial=allow_partial)


def registered_brokers(zk: BlockingZooKeeper) -> dict[int, tuple[str, int]]:
    """The live brokers registered in C{zk} (C{/brokers/ids/<id>}): id -> (host, port); bad values logged."""
    reading = read_registrations(zk, ())
    log_problems(reading.problems)
    return dict(reading.layout.brokers)


def read_registrations(zk: BlockingZooKeeper, topics: Iterable[str], listener: str = PLAINTEXT) -> Reading:
    """Read the brokers' and C{topics}' registrations from C{zk} (blocking), interpreted by the layout; a
    replicated topic's assignment and partition states too (its partitions located at their leaders).  The
    brokers are located at their C{listener}'s address (L{twlog.coord.endpoints})."""
    brokers = _values(zk, paths.BROKER_IDS)
    endpoints = _values(zk, paths.BROKER_ENDPOINTS) if listener != PLAINTEXT else {}
    brokers, problems = listener_values(brokers, endpoints, listener)
    topics = list(topics)
    registered = {t: _values(zk, paths.broker_topic_path(t)) for t in topics}
    held = {t: _values(zk, paths.held_path(t)) for t in topics}
    replicated = {}
    for t in topics:
        if not registered[t] and not held[t]:  # (as the view: a 0.7 topic is not looked for under /twlog/topics)
            value = zk.get(paths.replicated_topic_path(t))
            if value is not None:
                parent = paths.partition_state_path(t)
                replicated[t] = (value, {p: zk.get(f"{parent}/{p}/state") for p in zk.children(parent)})
    reading = ClusterLayout.from_registrations(brokers, registered, held, replicated)
    return attrs.evolve(reading, problems=(*problems, *reading.problems)) if problems else reading


def _values(zk: BlockingZooKeeper, parent: str) -> Mapping[str, bytes | None]:
    return {name: zk.get(f"{parent}/{name}") for name in zk.children(parent)}
