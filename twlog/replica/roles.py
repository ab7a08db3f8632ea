# -*- test-case-name: tests.replica.test_roles -*-
"""The broker's role in each replicated partition, kept in step with ZooKeeper: L{ReplicaRoles}.

The controller writes each partition's state (leader, leader epoch, ISR) in ZooKeeper; every broker
reads the states of the partitions it holds a replica of, through its L{ClusterView} (which watches
them), and acts on each change:

  - the state names this broker the leader at an epoch it does not lead yet: it reads the state again
    with its znode version (the compare-and-set base of its ISR changes), opens the replica's log, and
    leads (L{ReplicaManager.become_leader}); already leading at that epoch, a different ISR in the state
    (the controller shrank it after a broker's loss) makes the leader read it again;
  - the state names another live broker: it follows that leader at that epoch, from a connection of
    its own (L{ReplicaManager.become_follower}: KIP-101 truncation first);
  - no leader, a leader that is not live, or no replica here any more: it neither leads nor follows.

It also tells the manager which topics are replicated, so that a produce to one of their partitions that
this broker does not lead is refused (NotLeader) instead of being written as a 0.7 partition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.coord.cluster import ClusterView
from twlog.coord.replication.store import MIN_INSYNC_REPLICAS, read_state
from twlog.coord.replication.values import PartitionState, TopicAssignment
from twlog.coord.zk import IZooKeeper
from twlog.replica.manager import ReplicaManager
from twlog.storage.manager import LogManager

__all__ = ["ReplicaRoles"]

_Key = tuple[str, int]

#: After a failed take-over (ZooKeeper could not be read, say), how long before the roles are checked again.
RETRY_S = 1.0


class ReplicaRoles:
    """Broker C{broker_id}'s roles in the replicated partitions C{view} shows, applied to C{manager}.

    @param default_min_isr: min.insync.replicas of a topic whose config sets none (the broker's).
    """

    _log = Logger()

    def __init__(self, broker_id: int, manager: ReplicaManager, view: ClusterView, logs: LogManager,
                 zk: IZooKeeper, clock: IReactorTime, *, default_min_isr: int = 1) -> None:
        self.broker_id = broker_id
        self._manager, self._view, self._logs, self._zk, self._clock = manager, view, logs, zk, clock
        self.default_min_isr = default_min_isr
        #: The leader epoch each partition is being taken over at (the state is read again first).
        self._taking: dict[_Key, int] = {}
        self._stopped = False
        #: Set when the broker starts stopping (L{shutting_down}): it follows nothing any more.
        self.shutting_down = False
        #: Replicated topics being deleted (C{/twlog/delete_topics}): no role in them, produces refused.
        self.deleting: set[str] = set()
        self._listener: Callable[[], Any] = self.update

    def start(self) -> None:
        """Act on the view now and on each of its changes."""
        self._view.add_listener(self._listener)
        self.update()

    def shut_down(self) -> None:
        """The broker is stopping: stop following now, and follow nothing from now on (a controlled shutdown
        moves its leaderships away meanwhile; it must not rejoin the ISRs it is leaving, as Kafka's does not)."""
        self.shutting_down = True
        for key in sorted(self._manager.followers):
            self._manager.stop_partition(*key)

    def stop(self) -> Deferred[Any]:
        """Stop leading and following everything; fires once every follower has stopped."""
        self._stopped = True
        self._view.remove_listener(self._listener)
        keys = set(self._manager.leaders) | set(self._manager.followers)
        return DeferredList([d for d in (self._manager.stop_partition(*key) for key in sorted(keys)) if d is not None])

    # -- following the view -------------------------------------------------------------

    def update(self) -> None:
        """Bring every partition's role in line with the states the view holds."""
        if self._stopped:
            return
        wanted: dict[_Key, tuple[TopicAssignment, PartitionState]] = {}
        replicated: set[str] = set()
        for topic in self._view.topics():
            found = self._view.replica_states(topic)
            if found is None:
                continue
            assignment, states = found
            replicated.add(topic)
            if topic in self.deleting:
                continue
            for number, replicas in assignment.partitions.items():
                state = states.get(number)
                if self.broker_id in replicas and state is not None and state.online:
                    wanted[(topic, number)] = (assignment, state)
        self._manager.replicated_topics = frozenset(replicated)
        for key in sorted((set(self._manager.leaders) | set(self._manager.followers)) - set(wanted)):
            self._log.info("{topic}-{partition}: no longer a replica with a live leader here: stopping its role",
                           topic=key[0], partition=key[1])
            self._manager.stop_partition(*key)
        for key in sorted(set(self._taking) - set(wanted)):
            del self._taking[key]
        for key, (assignment, state) in sorted(wanted.items()):
            try:
                self._apply(key, assignment, state)
            except Exception:
                self._log.failure("{topic}-{partition}: taking the role the state gives failed", topic=key[0],
                                  partition=key[1])

    def _apply(self, key: _Key, assignment: TopicAssignment, state: PartitionState) -> None:
        topic, number = key
        if state.leader == self.broker_id:
            leader = self._manager.leaders.get(key)
            if leader is not None and leader.leader_epoch == state.leader_epoch:
                if leader.zk_state.isr != state.isr:  # the controller changed it: take its version too
                    Deferred.fromCoroutine(leader.reread()).addErrback(self._report, key, "reading the state")
                return
            if self._taking.get(key) == state.leader_epoch:
                return
            self._taking[key] = state.leader_epoch
            Deferred.fromCoroutine(self._lead(key, assignment, state.leader_epoch)).addErrback(
                self._report, key, "becoming the leader")
            return
        self._taking.pop(key, None)
        if self.shutting_down:
            if key in self._manager.leaders:
                self._manager.stop_partition(topic, number)
            return
        follower = self._manager.followers.get(key)
        if follower is not None and (follower.leader_id, follower.leader_epoch) == (state.leader, state.leader_epoch):
            return
        if state.leader not in self._view.brokers:
            if key in self._manager.leaders or follower is not None:
                self._manager.stop_partition(topic, number)
            return  # its leader is not live (yet): the controller moves it, or it registers
        self._logs.open_replica(topic, number, len(assignment.partitions))
        self._log.info("{topic}-{partition}: following broker {leader} at leader epoch {epoch}", topic=topic,
                       partition=number, leader=state.leader, epoch=state.leader_epoch)
        self._manager.become_follower(topic, number, state.leader, state.leader_epoch)

    async def _lead(self, key: _Key, assignment: TopicAssignment, epoch: int) -> None:
        topic, number = key
        state, version = await read_state(self._zk, topic, number)
        if self._stopped or self._taking.get(key) != epoch:
            return  # the view moved on meanwhile
        del self._taking[key]
        if state.leader != self.broker_id or state.leader_epoch != epoch:
            return  # the controller moved it again: the view's next change says where
        self._logs.open_replica(topic, number, len(assignment.partitions))
        min_isr = _min_isr(assignment, self.default_min_isr)
        self._manager.become_leader(topic, number, assignment.replicas(number), state, version, min_isr)
        self._log.info("{topic}-{partition}: leading at leader epoch {epoch}, ISR {isr}, min.insync.replicas "
                       "{min_isr}", topic=topic, partition=number, epoch=epoch, isr=list(state.isr),
                       min_isr=min_isr)

    def _report(self, failure: Any, key: _Key, what: str) -> None:
        self._taking.pop(key, None)
        self._log.failure("{topic}-{partition}: {what} failed; trying again in {retry} s", failure, topic=key[0],
                          partition=key[1], what=what, retry=RETRY_S)
        if not self._stopped:
            self._clock.callLater(RETRY_S, self.update)


def _min_isr(assignment: TopicAssignment, default: int) -> int:
    value = assignment.config.get(MIN_INSYNC_REPLICAS)
    return int(value) if value is not None and value.isdigit() else default
