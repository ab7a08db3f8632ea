# -*- test-case-name: tests.producer.test_producer,tests.integration.test_zk_producer -*-
"""L{Router}: a topic's partitions, and the choice of the one a batch goes to.

A topic's partitions are the L{TopicPartition}s over the brokers that hold it,
ordered by (broker id, partition), as in Kafka 0.7.  The router learns them in
one of two ways:

  - from a static broker list: CLUSTER_METADATA, so that any one address
    bootstraps the whole cluster (a broker that follows ZooKeeper describes
    every live broker, and the pool connects to those not given); brokers
    without ZooKeeper describe themselves, and their answers are merged (one
    that does not answer is left out, with a warning: a producer writes to
    the partitions it can reach).  A live broker given or described that does
    not hold the topic yet gets partition 0 of it (below), as every broker
    listed did before; while any does, the topic is asked again at most once
    a second (L{PROVISIONAL_S}), and on a connection failure;
  - from ZooKeeper: a L{ClusterView} watches the live brokers and each topic's
    registrations, and the pool follows the live brokers.

Either way, what it reads is interpreted by the one reading of the layout
(L{ClusterLayout.from_metadata}, or the view's L{ClusterLayout.from_registrations}):
bad values are skipped, each logged once as a warning, and the router asks the
layout for a partition's leader.

A replicated topic's partitions are C{0} to C{P-1} (L{twlog.coord.layout}), each
led by the broker its state names: the router learns the leaders from the view
(ZooKeeper) or from CLUSTER_METADATA_V2 (type 14; a broker that does not know
it, an older one, is asked CLUSTER_METADATA, type 8, from then on).  Static
mode asks again at most every L{REPLICATED_MAX_AGE_S}, and whenever a
delivery asks (L{Router.refresh}: the broker said NotLeader, or the leader
cannot be reached).  A replicated partition keeps its number across a
failover, only its leader changes: keys keep their partition, and a keyed (or
indexed) batch to a partition with no leader right now waits for one
(L{twlog.producer.failover}) instead of failing.

Either way, a topic no live broker holds starts at partition 0 of each live
broker (the broker creates the log on the first write and registers it);
registrations replace those bootstrap partitions as they come, and the
partitions of a broker that left are not chosen any more (Kafka 0.7's
ZKBrokerPartitionInfo).

A batch goes to the partition given by index, else the one the partitioner
picks for its key, else a random one.  Indices and keys count over every
partition the router knows of, offline ones included (a dead broker's, from
the layout, or one this router has seen live before), so that a broker going
down does not silently move keys to other partitions: a key (or index) whose
partition is offline fails with L{PartitionsOffline}.  A random batch goes to
a live partition, avoiding a broker a delivery has just failed to reach for
L{DOWN_S} (with ZooKeeper a killed broker stays registered until its session
expires).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.client.pool import ConnectionPool
from twlog.coord.cluster import ClusterView
from twlog.coord.endpoints import PLAINTEXT
from twlog.coord.layout import ClusterLayout, describe_offline
from twlog.coord.zk import IZooKeeper, KazooException, ZooKeeper
from twlog.coord.zkauth import ZooKeeperCredentials
from twlog.errors import ClientClosed, ConnectionFailed, LeaderNotAvailable, PartitionsOffline
from twlog.partition import TopicPartition
from twlog.producer.static import PROVISIONAL_S, REPLICATED_MAX_AGE_S, StaticBrokers  # noqa: F401 (re-exported)

#: How long random batches avoid a broker that a delivery could not reach (unless no other broker is left).
DOWN_S = 10.0

#: A partitioning function: C{(key, number of partitions) -> partition index}.
Partitioner = Callable[[bytes, int], int]


def hash_partitioner(key: bytes, num_partitions: int) -> int:
    """The default partitioner: CRC-32 of the key, modulo the number of partitions (stable across runs)."""
    return zlib.crc32(key) % num_partitions


class Router(StaticBrokers):
    """Knows the partitions of topics (asking the brokers or following ZooKeeper) and picks one per batch.

    @param zookeeper: None (static brokers: the pool's), a connect string (the
        router opens the session on first use and closes it in L{close}), or a
        started session, which it leaves open.
    """

    _log = Logger()

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        zookeeper: str | IZooKeeper | None = None,
        reactor=None,
        partitioner: Partitioner | None = None,
        rng: random.Random | None = None,
        listener: str = PLAINTEXT,
        zookeeper_credentials: ZooKeeperCredentials | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._pool = pool
        self._listener = listener  # which of the brokers' listeners the view locates them at (TLS: SSL)
        self._reactor = reactor
        self._partitioner = partitioner or hash_partitioner
        self._rng = rng or random.Random()
        self._own_zk = isinstance(zookeeper, str)
        self._zk: IZooKeeper | None = (ZooKeeper(zookeeper, reactor=reactor, credentials=zookeeper_credentials)
                                       if self._own_zk else zookeeper)
        self._zk_started = not self._own_zk
        self._view: ClusterView | None = None
        self._view_waiters: list[Deferred[ClusterView]] = []
        self._view_starting: Deferred | None = None
        # The live brokers each topic was bootstrapped with (partition 0 of each, until they register).
        self._bootstrap: dict[str, set[int]] = {}
        self._topics: dict[str, list[TopicPartition]] = {}
        # Static mode: topics whose partitions include bootstrap ones, and until when they are kept.
        self._provisional: dict[str, float] = {}
        self._discovering: dict[str, list[Deferred[list[TopicPartition]]]] = {}
        #: Static mode: the live brokers the answers described (the view's layout, with ZooKeeper).
        self._static_layout = ClusterLayout()
        #: The problems of readings already logged (each distinct one is logged once).
        self._reported: set[str] = set()
        #: Every partition of each topic seen live: one no longer live is offline (keys and indices keep it).
        self._seen: dict[str, set[TopicPartition]] = {}
        #: Static mode: each topic's partitions the answers named on brokers that are not live.
        self._static_offline: dict[str, list[TopicPartition]] = {}
        #: Static connections (by id) that do not know CLUSTER_METADATA_V2 (older brokers): asked type 8.
        self._older: set[int] = set()
        #: Brokers deliveries could not reach lately (L{DownBrokers}).
        self.down = DownBrokers(self._reactor)
        self._closed = False

    @property
    def cluster(self) -> ClusterView | None:
        """With ZooKeeper, the view of live brokers and registrations, once started."""
        return self._view

    def known(self, topic: str) -> list[TopicPartition] | None:
        """C{topic}'s partitions if known and not being discovered again (the fast path), else None."""
        self._expire(topic)
        return None if topic in self._discovering else self._topics.get(topic)

    def _expire(self, topic: str) -> None:
        until = self._provisional.get(topic)
        if until is not None and self._reactor.seconds() >= until:
            del self._provisional[topic]
            self._topics.pop(topic, None)

    def forget(self, topic: str) -> None:
        """Ask again on the next send to C{topic} (a broker may be gone, or back)."""
        self._topics.pop(topic, None)

    async def refresh(self, topic: str) -> None:
        """Learn C{topic}'s leaders again (a delivery met NotLeader, no leader, or a leader it cannot reach): with
        static brokers, ask them now; with ZooKeeper the view follows the partitions' states by its watches.

        @raise ConnectionFailed: no broker could be asked.
        """
        self.forget(topic)
        await self.partitions(topic)

    def choose(self, topic: str, partitions: list[TopicPartition], key: bytes | None,
               index: int | None, avoid: frozenset[int] | set[int] = frozenset()) -> TopicPartition:
        """The partition at C{index}, else the partitioner's for C{key}, else a random live one.

        C{partitions} are the live ones (L{partitions}).  C{index} and C{key} count over L{numbered} (the live
        and the offline ones), so a broker going down does not move keys; a random batch goes to a partition
        whose broker is neither in C{avoid} nor recently failed (L{failed}), if there is one.

        @raise ValueError: C{index} is outside the partitions.
        @raise PartitionsOffline: the partition C{index} or C{key} picks is offline.
        """
        if index is None and key is None:
            layout = self.layout()
            leaders = {tp: layout.leader(tp) if tp.fixed_leader is None else tp.fixed_leader for tp in partitions}
            live = [tp for tp in partitions if leaders[tp] is not None]
            if not live:
                waiting = [tp for tp in self.numbered(topic, partitions) if tp.fixed_leader is None]
                if waiting:  # every partition of a replicated topic is between leaders: one waits for its next
                    return waiting[self._rng.randrange(len(waiting))]
            return self.down.pick(topic, live, leaders, avoid, self._rng)
        numbered = self.numbered(topic, partitions)
        n = len(numbered)
        pinned = ("the partition asked for" if index is not None
                  else "its key's partition (a key is never moved to another one)")
        if index is None:
            index = self._partitioner(key, n)
        if not 0 <= index < n:
            raise ValueError(f"partition index {index} is outside topic {topic!r}'s partitions [0, {n - 1}]")
        target = numbered[index]
        if target not in partitions and target.fixed_leader is not None:  # (a replicated one waits for a leader)
            raise PartitionsOffline(f"cannot write to {target}, {pinned}: {describe_offline([target])}",
                                    offline=[target], available=partitions)
        return target

    def numbered(self, topic: str, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Every partition of C{topic} known: the live C{partitions} and the offline ones (the layout's, and
        those seen live before that are not now), sorted; what partition indices and keys count over."""
        seen = self._seen.setdefault(topic, set())
        seen.update(partitions)
        if self._view is not None:
            offline = self._view.layout().offline_partitions(topic)
        else:
            offline = self._static_offline.get(topic, ())
        return sorted(seen.union(offline))

    def layout(self) -> ClusterLayout:
        """The cluster as the router knows it now: the view's, with ZooKeeper; else what the brokers described."""
        return self._view.layout() if self._view is not None else self._static_layout

    def leader(self, tp: TopicPartition) -> int:
        """The broker that leads C{tp}, which L{choose} picked from the known partitions (asked of the layout; a
        0.7 partition's own broker while the layout does not know it live yet)."""
        leader = self.layout().leader(tp)
        if leader is None:
            leader = tp.fixed_leader
        if leader is None:
            raise LeaderNotAvailable(f"partition {tp} has no known leader")
        return leader

    def broker_left(self, broker_id: int) -> bool:
        """Whether, with ZooKeeper, C{broker_id} is no longer live (its partitions are not chosen any more)."""
        return self._view is not None and not self._closed and broker_id not in self._pool

    async def partitions(self, topic: str) -> list[TopicPartition]:
        """C{topic}'s partitions, ordered by (broker id, partition), discovering them if not known yet."""
        self._expire(topic)
        known = self._topics.get(topic)
        if known is not None:
            return known
        # Every caller waits on its own Deferred, fired in call order, so that
        # sends made during a discovery keep their order.
        waiting: Deferred[list[TopicPartition]] = Deferred()
        if topic in self._discovering:
            self._discovering[topic].append(waiting)
        else:
            self._discovering[topic] = [waiting]
            Deferred.fromCoroutine(self._discover(topic)).addBoth(self._discovered, topic)
        return await waiting

    async def close(self) -> None:
        """Stop following ZooKeeper (closing the session if the router opened it)."""
        self._closed = True
        if self._zk is None:
            return
        if self._view_starting is not None:
            await self._view_starting  # (fires with None once the waiters are told)
        if self._view is not None:
            self._view.remove_listener(self._cluster_changed)
            self._view.stop()
        if self._own_zk and self._zk_started:
            self._zk_started = False
            await self._zk.stop()

    # -- discovery -------------------------------------------------------------------

    def _discovered(self, result: list[TopicPartition] | Failure, topic: str) -> None:
        waiters = self._discovering.pop(topic, [])
        if not isinstance(result, Failure):
            self._topics[topic] = result
            self._seen.setdefault(topic, set()).update(result)
        for d in waiters:
            if isinstance(result, Failure):
                d.errback(result.value)
            else:
                d.callback(result)

    async def _discover(self, topic: str) -> list[TopicPartition]:
        """Ask every broker for its id and its partition count of C{topic} (or ZooKeeper, with one)."""
        if self._zk is not None:
            try:
                view = await self._cluster()
                await view.watch_topic(topic)
            except KazooException as e:
                raise ConnectionFailed(f"cannot read brokers from ZooKeeper at {self._zk.hosts}: {e!r}") from None
            if self._closed:
                raise ClientClosed("the producer is closed")
            return self._zk_partitions(topic)
        return await self._static_partitions(topic)

    # -- ZooKeeper -----------------------------------------------------------------------

    async def _cluster(self) -> ClusterView:
        """The started view (starting the session and the view on first use; retried after a failure)."""
        if self._view is not None:
            return self._view
        waiting: Deferred[ClusterView] = Deferred()
        self._view_waiters.append(waiting)
        if self._view_starting is None:
            self._view_starting = Deferred.fromCoroutine(self._start_cluster()).addBoth(self._cluster_started)
        return await waiting

    async def _start_cluster(self) -> ClusterView:
        if not self._zk_started:
            await self._zk.start()
            self._zk_started = True
        if self._closed:
            raise ClientClosed("the producer is closed")
        view = ClusterView(self._zk, listener=self._listener)
        view.add_listener(self._cluster_changed)
        try:
            await view.start()
        except BaseException:
            view.stop()
            raise
        return view

    def _cluster_started(self, result: ClusterView | Failure) -> None:
        self._view_starting = None
        waiters, self._view_waiters = self._view_waiters, []
        if isinstance(result, Failure):
            for d in waiters:
                d.errback(result.value)
            return
        if self._closed:
            result.stop()
            for d in waiters:
                d.errback(ClientClosed("the producer is closed"))
            return
        self._view = result
        self._cluster_changed()
        for d in waiters:
            d.callback(result)

    def _cluster_changed(self) -> None:
        """The view changed: the pool follows the live brokers, and known topics are recomputed."""
        if self._view is None or self._closed:
            return
        self._pool.follow(dict(self._view.layout().brokers))
        for topic in list(self._topics):
            try:
                self._topics[topic] = self._zk_partitions(topic)
                self._seen.setdefault(topic, set()).update(self._topics[topic])
            except ConnectionFailed:
                del self._topics[topic]  # no broker: the next send says so

    def _read(self, reading) -> ClusterLayout:
        """C{reading}'s layout, its problems not logged yet logged as warnings."""
        for problem in reading.problems:
            if problem not in self._reported:
                self._reported.add(problem)
                self._log.warn("ignoring a bad value in the cluster's answer: {problem}", problem=problem)
        return reading.layout

    def _zk_partitions(self, topic: str) -> list[TopicPartition]:
        """C{topic}'s partitions on live brokers: the registered ones, plus partition 0 of each broker
        the topic was bootstrapped on that has not registered it yet."""
        layout = self._view.layout()
        live = layout.brokers
        if not live:
            raise ConnectionFailed(f"no broker is registered in ZooKeeper at {self._zk.hosts}: none is live")
        if any(tp.fixed_leader is None for tp in layout.partitions.get(topic, ())):
            return layout.topic_partitions(topic)  # a replicated topic: those with a live leader now
        registered = [(tp.fixed_leader, tp.number) for tp in layout.topic_partitions(topic)]
        if not registered:
            # Nobody live holds it: partition 0 of each live broker, which creates the log on the first write.
            self._bootstrap[topic] = set(live)
            return [TopicPartition.on_broker(topic, b, 0) for b in sorted(live)]
        holders = {b for b, _ in registered}
        pending = {(b, 0) for b in self._bootstrap.get(topic, ()) if b in live and b not in holders}
        return [TopicPartition.on_broker(topic, b, p) for b, p in sorted(set(registered) | pending)]


class DownBrokers:
    """Brokers a delivery could not reach lately: random batches avoid each for L{DOWN_S} (with ZooKeeper a
    killed broker stays registered until its session expires)."""

    def __init__(self, clock) -> None:
        self._clock = clock
        self._until: dict[int, float] = {}

    def failed(self, broker_id: int | None) -> None:
        """A delivery could not reach C{broker_id}: random batches avoid it for L{DOWN_S} (None: no broker)."""
        if broker_id is not None:
            self._until[broker_id] = self._clock.seconds() + DOWN_S

    def reached(self, broker_id: int | None) -> None:
        """A delivery reached C{broker_id}: it is a target of random batches again."""
        self._until.pop(broker_id, None)

    def pick(self, topic: str, partitions: list[TopicPartition], leaders: dict[TopicPartition, int],
             avoid: frozenset[int] | set[int], rng) -> TopicPartition:
        """A random one of C{partitions} whose leader is neither in C{avoid} nor recently failed (else one not in
        C{avoid}).

        @raise ConnectionFailed: every partition's leader is in C{avoid}.
        """
        now = self._clock.seconds()
        usable = [tp for tp in partitions if leaders[tp] not in avoid and self._until.get(leaders[tp], now) <= now]
        if not usable:
            usable = [tp for tp in partitions if leaders[tp] not in avoid]
        if not usable:
            raise ConnectionFailed(f"no live partition of topic {topic!r} is left to try: brokers "
                                   f"{', '.join(map(str, sorted(avoid)))} could not be reached")
        return usable[rng.randrange(len(usable))]
