# -*- test-case-name: tests.coord.test_cluster,tests.integration.test_cluster -*-
"""What ZooKeeper says of the cluster: live brokers and the partitions of watched topics, kept current.

L{ClusterView} reads C{/brokers/ids}, C{/brokers/topics/<topic>} and
C{/twlog/held/<topic>} (which brokers held the topic, kept after they go) and keeps
watches on them, so producers and consumers learn when brokers come and go
and when a broker registers a topic.  A topic's partitions are the union of
C{<broker id>-<partition>} over the live brokers that registered it, sorted
by (broker id, partition).  A replicated topic's (C{/twlog/topics/<topic>}, with
each partition's C{.../partitions/<p>/state} watched too) are C{0} to C{P-1},
each led by its state's leader: a leader change reaches the view by its watch.

A broker follows every topic (C{all_topics=True}: a watch on C{/brokers/topics}
too), to answer CLUSTER_METADATA for the whole cluster; producers and consumers
follow the topics they use.

The view only reads the nodes and keeps the watches: it stores the values it
read, and L{ClusterLayout.from_registrations} interprets them (the one tolerance
rule for bad values, L{twlog.coord.layout}).  Each distinct problem is logged
once, as a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.coord import paths
from twlog.coord.endpoints import PLAINTEXT, SSL, listener_values
from twlog.coord.layout import ClusterLayout, parse_broker_address
from twlog.coord.replication.values import BadReplicationValue, PartitionState, TopicAssignment
from twlog.coord.zk import CONNECTED, LOST, SUSPENDED, IZooKeeper, NoNodeError
from twlog.errors import NO_ERROR, LeaderNotAvailable
from twlog.partition import TopicPartition
from twlog.protocol import replication_codec

__all__ = ["ClusterView", "parse_broker_address"]

class ClusterView:
    """Live brokers and watched topics' partitions, from ZooKeeper, updated by watches."""

    _log = Logger()

    def __init__(self, zk: IZooKeeper, topics: Iterable[str] = (), *, all_topics: bool = False,
                 listener: str = PLAINTEXT) -> None:
        self._zk = zk
        self._all_topics = all_topics
        #: How its client reaches the brokers (L{twlog.coord.endpoints}): L{SSL} locates them at their TLS ports.
        self.listener = listener
        #: The brokers' listeners are read for a TLS client, and by a broker (it answers TLS clients too).
        self._read_endpoints = listener != PLAINTEXT or all_topics
        #: C{/twlog/brokers/endpoints}' children, name -> value (when read).
        self._endpoint_values: dict[str, bytes | None] = {}
        #: Live brokers with a TLS listener: id -> (host, TLS port) (when the endpoints are read).
        self.tls_brokers: dict[int, tuple[str, int]] = {}
        #: Whether the brokers and topics have been read once since L{start}.
        self.ready = False
        #: Live brokers: id -> (host, port).
        self.brokers: dict[int, tuple[str, int]] = {}
        #: What was read: C{/brokers/ids}' children and each read topic's registrations, child name -> value.
        self._broker_values: dict[str, bytes | None] = {}
        self._topic_values: dict[str, dict[str, bytes | None]] = {}
        #: Each read topic's persistent records, C{/twlog/held/<topic>}'s children: child name -> value.
        self._held_values: dict[str, dict[str, bytes | None]] = {}
        #: Each read replicated topic's C{/twlog/topics/<topic>} value and its partitions' state values.
        self._replicated_values: dict[str, tuple[bytes | None, dict[str, bytes | None]]] = {}
        self._layout = ClusterLayout()
        self._read_state: tuple[ClusterLayout, frozenset[str], dict] = (self._layout, frozenset(), {})
        #: The problems already logged (each distinct one is logged once).
        self._reported: set[str] = set()
        self._topics: set[str] = set(topics)
        self._listeners: list[Callable[[], Any]] = []
        #: The watch functions of this generation's reads, by what they re-read (L{_watcher}).
        self._watchers: dict[tuple[object, int], Callable[[Any], None]] = {}
        self._generation = 0
        self._started = False
        self._session_lost = False

    async def start(self) -> None:
        """Read the brokers and the topics, and start watching them."""
        self._zk.add_state_listener(self._session_changed)
        self._started = True
        await self._refresh()

    @property
    def connected(self) -> bool:
        """Whether the session is connected (so watches keep the view current), as far as the view knows."""
        return self._started and not self._session_lost

    def stop(self) -> None:
        """Stop reacting to watches (they fire once more at most, and are ignored)."""
        self._started = False
        self._generation += 1
        self._zk.remove_state_listener(self._session_changed)

    def add_listener(self, listener: Callable[[], Any]) -> None:
        """Call C{listener()} after each change of the brokers or of a watched topic."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], Any]) -> None:
        """Stop calling C{listener}."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def watch_topic(self, topic: str) -> None:
        """Start following C{topic}'s registrations (no-op if already followed)."""
        if topic in self._topics and topic in self._topic_values:
            return
        self._topics.add(topic)
        await self._read_topic(topic, self._generation)

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """C{topic}'s partitions on live brokers, as (broker id, partition), sorted."""
        return [(tp.fixed_leader, tp.number) for tp in self._layout.topic_partitions(topic)]

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        """C{topic}'s partitions on live brokers, sorted by (broker id, partition)."""
        return self.layout().topic_partitions(topic)

    def layout(self) -> ClusterLayout:
        """The cluster as the view knows it now: live brokers, followed topics' partitions and their leaders."""
        return self._layout

    def topics(self) -> list[str]:
        """The topics being followed."""
        return sorted(self._topics)

    def holders(self, topic: str) -> dict[int, int]:
        """C{topic}'s partition count on each live broker that registered it."""
        return self._layout.holders(topic)

    def offline_holders(self, topic: str) -> dict[int, int]:
        """C{topic}'s partition count on each broker that held it (C{/twlog/held}) and is not live now."""
        return self._layout.offline_holders(topic)

    def replicated(self, topic: str) -> replication_codec.ReplicatedLayout | None:
        """C{topic}'s partitions with their replicas, leader, leader epoch and ISR (L{replicated_layout})."""
        read = self.replica_states(topic) if topic in self._layout.partitions else None
        return None if read is None else replicated_layout(self._layout, topic, *read)

    def replica_states(self, topic: str) -> tuple[TopicAssignment, dict[int, PartitionState | None]] | None:
        """C{topic}'s assignment and each partition's state as ZooKeeper holds it (None: none yet, or a bad
        value), whether or not its leader is live; None when C{topic} is not a replicated topic read here."""
        return decode_replica_states(topic, *self._replicated_values.get(topic, (None, {})))

    # -- reading and watching --------------------------------------------------------

    async def _refresh(self) -> None:
        self._generation += 1
        generation = self._generation
        self._watchers = {k: w for k, w in self._watchers.items() if k[1] == generation}
        await self._read_brokers(generation)
        if self._all_topics:
            await self._read_topic_names(generation)
            await self._read_topic_names(generation, paths.REPLICATED_TOPICS)
        await self._read_topics(list(self._topics), generation)
        if self._started and generation == self._generation:
            self.ready = True

    async def _read_topics(self, topics: list[str], generation: int) -> None:
        """Read C{topics} at once; a read that fails is logged unless the view was stopped or lost its session
        meanwhile (reconnecting reads everything again)."""
        results = await DeferredList(
            [Deferred.fromCoroutine(self._read_topic(t, generation)) for t in topics], consumeErrors=True
        )
        for topic, (ok, failure) in zip(topics, results):
            if not ok and self._started and generation == self._generation and not self._session_lost:
                # (ConnectionLoss or an expired session, mostly: their state change may come after the error.)
                self._log.warn("reading topic {topic} failed: {error}", topic=topic,
                               error=failure.getErrorMessage() or failure.type.__name__)

    def _session_changed(self, state: str) -> None:
        if state in (LOST, SUSPENDED):
            self._session_lost = True
        elif state == CONNECTED and self._session_lost and self._started:
            # A new session: the old one's watches are gone.  Or the same one after a lost
            # connection, when a read (and the watch it would have set) may have failed.
            # Read everything again.
            self._session_lost = False
            Deferred.fromCoroutine(self._refresh()).addErrback(
                lambda f: self._started and self._log.failure("re-reading the cluster after reconnecting failed", f)
            )

    async def _read_brokers(self, generation: int) -> None:
        await self._zk.ensure_path(paths.BROKER_IDS)
        ids = await self._zk.children(paths.BROKER_IDS, watch=self._watcher(self._read_brokers, generation, "brokers"))
        values = await self._values(paths.BROKER_IDS, ids)  # (one gone meanwhile: the children watch fires again)
        if self._read_endpoints:
            await self._zk.ensure_path(paths.BROKER_ENDPOINTS)
            names = await self._zk.children(paths.BROKER_ENDPOINTS,
                                            watch=self._watcher(self._read_brokers, generation, "brokers"))
            endpoints = await self._values(paths.BROKER_ENDPOINTS, names)
            if generation == self._generation:
                self._endpoint_values = endpoints
        if generation == self._generation:
            self._broker_values = values
            self._update()

    async def _read_topic_names(self, generation: int, parent: str = paths.BROKER_TOPICS) -> None:
        """Follow every topic under C{parent} (C{/brokers/topics}, or the replicated topics' C{/twlog/topics}),
        and, by its watch, each one created later."""
        await self._zk.ensure_path(parent)
        names = await self._zk.children(parent, watch=self._watcher(lambda g: self._read_topic_names(g, parent),
                                                                    generation, ("names", parent)))
        new = [name for name in names if name not in self._topics]
        self._topics.update(new)
        if self._started and generation == self._generation and self.ready:
            # (On a refresh, _refresh reads every followed topic itself.)
            await self._read_topics(new, generation)

    async def _read_topic(self, topic: str, generation: int) -> None:
        path = paths.broker_topic_path(topic)
        watch = self._watcher(lambda g: self._read_topic(topic, g), generation, ("topic", topic))
        try:
            ids = await self._zk.children(path, watch=watch)
        except NoNodeError:
            # Not registered yet: watch for its creation.
            if await self._zk.exists(path, watch=watch) is not None:
                return await self._read_topic(topic, generation)
            ids = []
        values = await self._values(path, ids)
        held_path = paths.held_path(topic)
        try:
            held = await self._values(held_path, await self._zk.children(held_path, watch=watch))
        except NoNodeError:
            held = {}  # (no broker wrote it yet: a broker writes it before its registration, whose watch reads it)
        # (A 0.7 topic, registered or remembered, is not looked for under /twlog/topics: its reading costs
        # what it did before replication.)
        replicated = None if values or held else await self._read_replicated(topic, watch)
        if generation == self._generation:
            self._topic_values[topic] = values
            self._held_values[topic] = held
            if replicated is None:
                self._replicated_values.pop(topic, None)
            else:
                self._replicated_values[topic] = replicated
            self._update()

    async def _read_replicated(self, topic: str, watch) -> tuple[bytes, dict[str, bytes | None]] | None:
        """C{/twlog/topics/<topic>}'s value and its partitions' state values (None: none yet), or None if it is
        not a replicated topic; C{watch} is set on each node read (or on its absence)."""
        path = paths.replicated_topic_path(topic)
        try:
            value, _ = await self._zk.get(path, watch=watch)
        except NoNodeError:
            if await self._zk.exists(path, watch=watch) is not None:
                return await self._read_replicated(topic, watch)
            return None
        parent = paths.partition_state_path(topic)
        try:
            names = await self._zk.children(parent, watch=watch)
        except NoNodeError:
            if await self._zk.exists(parent, watch=watch) is not None:  # (created meanwhile: read it now)
                return await self._read_replicated(topic, watch)
            names = []
        states: dict[str, bytes | None] = {}
        for name in names:
            state_path = f"{parent}/{name}/state"
            states[name] = await self._state(state_path, watch)
        return value, states

    async def _state(self, path: str, watch) -> bytes | None:
        """A partition state's value with C{watch} on it, or None with C{watch} on its creation.  A state created
        between the read and the watch is read again: the watch set then fires only on its next change."""
        for _ in range(3):
            try:
                value, _ = await self._zk.get(path, watch=watch)
                return value
            except NoNodeError:
                if await self._zk.exists(path, watch=watch) is None:
                    return None
        return None

    async def _values(self, parent: str, names: Iterable[str]) -> dict[str, bytes | None]:
        """The values of C{parent}'s children C{names}; None for one gone meanwhile."""
        values: dict[str, bytes | None] = {}
        for name in names:
            try:
                values[name], _ = await self._zk.get(f"{parent}/{name}")
            except NoNodeError:
                values[name] = None
        return values

    def _update(self) -> None:
        """Interpret what was read (L{ClusterLayout.from_registrations}); log new problems; tell the listeners
        if the layout, the set of read topics or a replicated topic's values changed."""
        topics = {t: self._topic_values[t] for t in self._topics if t in self._topic_values}
        held = {t: self._held_values.get(t, {}) for t in topics}
        replicated = {t: self._replicated_values[t] for t in topics if t in self._replicated_values}
        brokers, problems = listener_values(self._broker_values, self._endpoint_values, self.listener)
        layout, read_problems = ClusterLayout.from_registrations(brokers, topics, held, replicated)
        problems += read_problems
        if self._read_endpoints:
            tls, _ = listener_values(self._broker_values, self._endpoint_values, SSL)
            self.tls_brokers = dict(ClusterLayout.from_registrations(tls, {}).layout.brokers)
        for problem in problems:
            if problem not in self._reported:
                self._reported.add(problem)
                self._log.warn("ignoring a registration in ZooKeeper: {problem}", problem=problem)
        self._layout = layout
        self.brokers = dict(layout.brokers)
        # (a replicated partition's ISR is not in the layout, but its leader and followers act on it)
        state = (layout, frozenset(topics), {t: (v, tuple(sorted(s.items()))) for t, (v, s) in replicated.items()})
        if state != self._read_state:
            self._read_state = state
            self._changed()

    def _watcher(self, read, generation: int, key: object = None):
        """The watch that re-reads (C{read(generation)}); with a C{key}, the same function for every read of that
        key in this generation, so a node read again is watched once (ZooKeeper's watches are a set per node:
        a new function at each read would pile up, and one change would start as many re-reads)."""
        if key is not None:
            cached = self._watchers.get((key, generation))
            if cached is None:
                cached = self._watchers[(key, generation)] = self._watcher(read, generation)
            return cached

        def watch(event) -> None:
            if self._started and generation == self._generation:
                Deferred.fromCoroutine(read(generation)).addErrback(failed, event.path)

        def failed(failure, path: str) -> None:
            # Stopped meanwhile (the session closing under the read), or connection lost:
            # reconnecting reads everything again.
            if self._started and generation == self._generation and not self._session_lost:
                self._log.failure("re-reading {path} failed", failure, path=path)

        return watch

    def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                self._log.failure("cluster listener failed")


def decode_replica_states(topic: str, value: bytes | None, states: dict[str, bytes | None],
                          ) -> tuple[TopicAssignment, dict[int, PartitionState | None]] | None:
    """L{ClusterView.replica_states} from the values read: C{/twlog/topics/<topic>}'s and its partitions' states."""
    if value is None:
        return None
    try:
        assignment = TopicAssignment.decode(topic, value, paths.replicated_topic_path(topic))
    except BadReplicationValue:
        return None
    found: dict[int, PartitionState | None] = {}
    for number in assignment.partitions:
        data = states.get(str(number))
        try:
            path = paths.partition_state_path(topic, number)
            found[number] = None if data is None else PartitionState.decode(data, path)
        except BadReplicationValue:
            found[number] = None
    return assignment, found


def replicated_layout(layout: ClusterLayout, topic: str, assignment: TopicAssignment,
                      states: dict[int, PartitionState | None]) -> replication_codec.ReplicatedLayout:
    """C{topic}'s partitions with their replicas, leader, leader epoch and ISR, as CLUSTER_METADATA_V2 carries
    them, from its C{assignment} and partition C{states} and the C{layout}'s leaders.

    A partition with no state yet, a bad one (a problem already logged) or a leader that is not live has
    leader L{replication_codec.NO_BROKER} and error LeaderNotAvailable; with no usable state its epoch is
    L{replication_codec.UNDEFINED_EPOCH} and its ISR empty.
    """
    found = []
    for number, replicas in sorted(assignment.partitions.items()):
        state = states[number]
        leader = layout.leader(TopicPartition(topic, str(number)))
        found.append(replication_codec.PartitionState(
            number, NO_ERROR if leader is not None else LeaderNotAvailable.code,
            leader if leader is not None else replication_codec.NO_BROKER,
            state.leader_epoch if state is not None else replication_codec.UNDEFINED_EPOCH,
            replicas, state.isr if state is not None else ()))
    return replication_codec.ReplicatedLayout(topic, NO_ERROR, tuple(found))
