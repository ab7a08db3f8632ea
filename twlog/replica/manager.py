# -*- test-case-name: tests.replica.test_manager -*-
"""A broker's replicated partitions and its role in each: L{ReplicaManager}.

The controller's wiring tells it, per partition, to lead (L{ReplicaManager.become_leader}) or to
follow (L{ReplicaManager.become_follower}), or to drop it (L{ReplicaManager.stop_partition}).  Installed
on a L{twlog.protocol.server.Broker} (L{ReplicaManager.install}), it answers REPLICA_FETCH,
EPOCH_END_OFFSET and REPLICA_STATUS (L{ReplicaHandlers}) and is the produce handlers' L{ReplicationGate}: a set to a
partition it follows is refused with NotLeader; an C{ack=all} set is refused before appending with
NotEnoughReplicas when the ISR is smaller than min.insync.replicas (or the leader is fenced), and
answered once the high watermark covers it and the leader flushed it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.coord.replication.values import PartitionState
from twlog.coord.zk import IZooKeeper
from twlog.errors import LeaderNotAvailable, NotEnoughReplicas, NotLeader
from twlog.protocol.codec import ACK_ALL
from twlog.protocol.replica_status_codec import ReplicaStatusRequest
from twlog.protocol.replication_codec import EpochEndOffsetRequest, ReplicaFetchRequest
from twlog.protocol.server import Broker
from twlog.replica.follower import Follower
from twlog.replica.handlers import ReplicaHandlers
from twlog.replica.leader import LeaderPartition
from twlog.replica.state import DEFAULT_REPLICA_LAG_TIME_MS
from twlog.storage.manager import LogManager

__all__ = ["ReplicaManager"]


class ReplicaManager:
    """Broker C{broker_id}'s replicated partitions: those it leads and those it follows.

    @param connect: C{connect(broker id) -> IBrokerConnection} to a leader, for followers (the wiring
        builds L{twlog.client.connection.BrokerConnection}s from the live brokers' addresses).
    """

    _log = Logger()

    def __init__(self, broker_id: int, logs: LogManager, zk: IZooKeeper, clock: IReactorTime, *,
                 connect: Callable[[int], Any], lag_time_ms: int = DEFAULT_REPLICA_LAG_TIME_MS,
                 max_fetch_wait_ms: int = 30_000, count_error: Callable[[int, int], Any] = lambda kind, code: None,
                 ) -> None:
        self.broker_id = broker_id
        self._logs, self._zk, self._clock, self._connect = logs, zk, clock, connect
        self.lag_time_ms = lag_time_ms
        self.leaders: dict[tuple[str, int], LeaderPartition] = {}
        self.followers: dict[tuple[str, int], Follower] = {}
        #: Called with (topic, partition) after a role change (the broker wakes the client fetches held on it).
        self._roles_changed: Callable[[str, int], Any] = lambda topic, partition: None
        #: The replicated topics (L{twlog.replica.roles.ReplicaRoles} keeps it): a produce to one of their
        #: partitions this broker does not lead is refused, never written as a 0.7 partition's.
        self.replicated_topics: frozenset[str] = frozenset()
        #: With a default replication factor: C{auto_create(topic)} for a produce to a topic neither replicated nor
        #: held here; True when it is being created replicated (the produce gets LeaderNotAvailable, to retry),
        #: False when it stays a 0.7 topic (held by other brokers, say) and the produce goes on as one.
        self.auto_create: Callable[[str], bool] | None = None
        #: ISR changes this broker's leaders wrote that took members out, and that put members in (Kafka's
        #: IsrShrinksPerSec and IsrExpandsPerSec, as counts: a write that does both counts once in each).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.handlers = ReplicaHandlers(lambda topic, partition: self.leaders.get((topic, partition)), clock,
                                        count_error, max_fetch_wait_ms)
        logs.add_flush_listener(self._flushed)

    def install(self, broker: Broker) -> None:
        """Serve REPLICA_FETCH, EPOCH_END_OFFSET and REPLICA_STATUS on C{broker}, and gate its produces."""
        self.handlers._count_error = broker.count_error
        broker.handlers[ReplicaFetchRequest] = self.handlers.replica_fetch
        broker.handlers[EpochEndOffsetRequest] = self.handlers.epoch_end_offset
        broker.handlers[ReplicaStatusRequest] = self.handlers.replica_status
        broker.replication = self
        self._roles_changed = broker.roles_changed

    # -- roles ------------------------------------------------------------------------

    def become_leader(self, topic: str, partition: int, replicas: tuple[int, ...], state: PartitionState,
                      version: int, min_isr: int = 1) -> LeaderPartition:
        """Lead C{topic}-C{partition} at C{state} (read at znode C{version}); a follower of it stops first."""
        self.stop_partition(topic, partition)
        log = self._logs.get_or_create_log(topic, partition)
        leader = LeaderPartition(topic, partition, log, broker_id=self.broker_id, replicas=tuple(replicas),
                                 state=state, version=version, zk=self._zk, clock=self._clock, min_isr=min_isr,
                                 lag_time_ms=self.lag_time_ms)
        leader.on_high_watermark.append(lambda led: self.handlers.changed(topic, partition))
        leader.on_isr_written.append(self._isr_written)
        self.leaders[(topic, partition)] = leader
        return leader

    def become_follower(self, topic: str, partition: int, leader_id: int, leader_epoch: int, **options: Any,
                        ) -> Follower:
        """Follow C{topic}-C{partition} from broker C{leader_id} at C{leader_epoch}: a leader or follower of it
        stops first; the follower truncates (KIP-101) and fetches (L{Follower})."""
        self.stop_partition(topic, partition)
        log = self._logs.get_or_create_log(topic, partition)
        follower = Follower(self.broker_id, topic, partition, log, leader_id=leader_id, leader_epoch=leader_epoch,
                            connection=self._connect(leader_id), clock=self._clock, **options)
        self.followers[(topic, partition)] = follower
        follower.start()
        self._roles_changed(topic, partition)
        return follower

    def stop_partition(self, topic: str, partition: int) -> Deferred[None] | None:
        """Stop leading or following C{topic}-C{partition}; the follower's stop, if any, to wait for."""
        leader = self.leaders.pop((topic, partition), None)
        if leader is not None:
            leader.stop()
            self.handlers.changed(topic, partition)  # held fetches get NotLeader now
            self._roles_changed(topic, partition)  # (clients' too, on a replicated topic)
        follower = self.followers.pop((topic, partition), None)
        if follower is None:
            return None
        d = follower.stop()
        close = getattr(getattr(follower, "connection", None), "close", None)
        if close is not None:  # each follower has a connection of its own: closed now, not once the loop ends
            close()  # (a dead leader's connection would otherwise go on reconnecting until the loop's backoff)
        return d

    # -- the produce handlers' gate (ReplicationGate) ------------------------------------

    def check_produce(self, topic: str, partition: int, ack: int) -> bool:
        key = (topic, partition)
        if key in self.followers:
            raise NotLeader(f"broker {self.broker_id} follows {topic}-{partition}: produce to its leader, "
                            f"broker {self.followers[key].leader_id}")
        leader = self.leaders.get(key)
        if leader is None:
            if topic in self.replicated_topics:
                raise NotLeader(f"broker {self.broker_id} does not lead {topic}-{partition}: ask the cluster "
                                "metadata (CLUSTER_METADATA_V2) for its leader")
            if self.auto_create is not None and topic not in self._logs.topics() and self.auto_create(topic):
                raise LeaderNotAvailable(f"{topic} is being created as a replicated topic: retry once its "
                                         "partitions have leaders")
            return False
        if ack >= ACK_ALL:
            if leader.state.fenced:
                raise NotEnoughReplicas(f"{topic}-{partition}: its leader is fenced (a failed ISR compare-and-set or "
                                        "its ZooKeeper session not connected): nothing acknowledged until it knows")
            if not leader.state.enough_replicas:
                raise NotEnoughReplicas(f"{topic}-{partition} has {len(leader.state.isr)} in-sync replicas "
                                        f"{list(leader.state.isr)}, fewer than min.insync.replicas "
                                        f"{leader.state.min_isr}")
        return True

    def check_read(self, topic: str, partition: int) -> None:
        """The fetches' gate (L{twlog.protocol.fetch.ReadGate}): a client may not read a partition this broker
        follows (its log may run past the high watermark, and its leader may move): NotLeader, naming the leader."""
        follower = self.followers.get((topic, partition))
        if follower is not None:
            raise NotLeader(f"broker {self.broker_id} follows {topic}-{partition}: read it from its leader, "
                            f"broker {follower.leader_id}")
        if topic in self.replicated_topics and (topic, partition) not in self.leaders:
            raise NotLeader(f"broker {self.broker_id} does not lead {topic}-{partition}: ask the cluster metadata "
                            "(CLUSTER_METADATA_V2) for its leader")

    def appended(self, topic: str, partition: int) -> None:
        leader = self.leaders.get((topic, partition))
        if leader is not None:
            leader.appended()
            self.handlers.changed(topic, partition)

    def wait_all(self, topic: str, partition: int, next_offset: int) -> Deferred[int]:
        leader = self.leaders.get((topic, partition))
        if leader is None:
            raise NotLeader(f"broker {self.broker_id} no longer leads {topic}-{partition}")
        return leader.wait_covered(next_offset)

    def _flushed(self, topic: str, partition: int, log: object) -> None:
        leader = self.leaders.get((topic, partition))
        if leader is not None:
            leader.flushed()

    # -- what the metrics read -------------------------------------------------------------

    def waiting_acks(self) -> int:
        """C{ack=all} sets waiting, over all led partitions (the metric)."""
        return sum(leader.waiting() for leader in self.leaders.values())

    def _isr_written(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        self.isr_shrinks += bool(set(before) - set(after))
        self.isr_expands += bool(set(after) - set(before))

    def under_replicated(self) -> int:
        """Led partitions whose ISR is smaller than their replicas (Kafka's UnderReplicatedPartitions)."""
        return sum(len(leader.state.isr) < len(leader.state.replicas) for leader in self.leaders.values())

    def under_min_isr(self) -> int:
        """Led partitions whose ISR is below min.insync.replicas: C{ack=all} refused (UnderMinIsrPartitionCount)."""
        return sum(not leader.state.enough_replicas for leader in self.leaders.values())

    def follower_lags(self) -> Iterator[tuple[str, int, int, int, float]]:
        """(topic, partition, follower, bytes behind, seconds since caught up) for each follower of each led
        partition, as its leader last heard (L{ReplicaState.lag})."""
        now = self._clock.seconds()
        for (topic, partition), leader in sorted(self.leaders.items()):
            end = leader.log.end_offset
            for replica in leader.state.followers:
                yield (topic, partition, replica, *leader.state.lag(replica, end, now))
