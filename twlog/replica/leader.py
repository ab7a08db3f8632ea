# -*- test-case-name: tests.replica.test_leader -*-
"""One partition led by this broker: L{LeaderPartition}.

It joins the pure L{ReplicaState} to the partition's log, to ZooKeeper and to the clock:

  - on start it records its leader epoch in the log's epoch checkpoint (KIP-101) at the log's end;
  - it publishes the high watermark to the log (C{Log.high_watermark}: what readers see);
  - it writes ISR changes by compare-and-set on the partition's state znode (L{write_state_cas}), checked
    after each follower fetch and every half C{lag_time_ms};
  - a failed compare-and-set, or a suspended or lost ZooKeeper session, fences it at once: it
    acknowledges nothing until it has read the state again and found itself the leader at the same epoch;
  - it holds the C{ack=all} sets waiting for the high watermark and the leader's flush to cover them
    (L{LeaderPartition.wait_covered}).
"""

from __future__ import annotations

from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from twlog.coord.replication.store import StateChanged, read_state, write_state_cas
from twlog.coord.replication.values import PartitionState
from twlog.coord.zk import CONNECTED, IZooKeeper
from twlog.errors import NotEnoughReplicasAfterAppend, NotLeader
from twlog.replica.state import DEFAULT_REPLICA_LAG_TIME_MS, ReplicaState
from twlog.storage.log import Log

__all__ = ["LeaderPartition"]


@attrs.define(eq=False)
class _Waiter:
    next_offset: int
    deferred: Deferred


class LeaderPartition:
    """Partition C{partition} of C{topic}, led by broker C{broker_id} at C{state}'s epoch (znode C{version}).

    Call L{fetched} for each follower fetch, L{appended} after each append, L{flushed} when the log's
    flushed offset moves, and L{stop} when this broker stops leading it.
    """

    _log = Logger()

    def __init__(self, topic: str, partition: int, log: Log, *, broker_id: int, replicas: tuple[int, ...],
                 state: PartitionState, version: int, zk: IZooKeeper, clock: IReactorTime, min_isr: int = 1,
                 lag_time_ms: int = DEFAULT_REPLICA_LAG_TIME_MS) -> None:
        if state.leader != broker_id:
            raise ValueError(f"{topic}-{partition}: broker {broker_id} does not lead it (the state names "
                             f"{state.leader})")
        self.topic, self.partition, self.log = topic, partition, log
        self.zk_state, self.version = state, version
        self._zk, self._clock = zk, clock
        self._writing = False
        self._stopped = False
        self._waiters: list[_Waiter] = []
        #: Called with this partition whenever the high watermark moves (waiting REPLICA_FETCHes, metrics).
        self.on_high_watermark: list[Any] = []
        #: Called with (ISR before, ISR after) whenever this leader wrote an ISR change (the shrink and expand counts).
        self.on_isr_written: list[Any] = []
        start = log.high_watermark if log.high_watermark is not None else 0
        self.state = ReplicaState(broker_id, state.leader_epoch, replicas, state.isr, min(start, log.end_offset),
                                  clock.seconds(), lag_time_ms, min_isr)
        log.epochs.assign(state.leader_epoch, log.end_offset).addErrback(self._report, "recording the epoch")
        self.state.advance(log.end_offset)
        log.high_watermark = self.state.high_watermark
        zk.add_state_listener(self._session_changed)
        self._loop = LoopingCall(self.check_isr)
        self._loop.clock = clock
        self._loop.start(max(lag_time_ms, 2) / 2000, now=False).addErrback(self._report, "the ISR check")

    @property
    def leader_epoch(self) -> int:
        return self.zk_state.leader_epoch

    def __repr__(self) -> str:
        return f"<LeaderPartition {self.topic}-{self.partition} epoch {self.leader_epoch} isr {list(self.state.isr)}>"

    # -- what the handlers tell it -------------------------------------------------------

    def fetched(self, replica: int, offset: int) -> None:
        """Follower C{replica} fetched from C{offset} (its end)."""
        if self.state.fetched(replica, offset, self.log.end_offset, self._clock.seconds()):
            self._publish()
        self.check_isr()

    def appended(self) -> None:
        """The log grew (the ISR may be the leader alone)."""
        if self.state.advance(self.log.end_offset):
            self._publish()

    def flushed(self) -> None:
        """The log's flushed offset moved: C{ack=all} sets may be covered now."""
        self._check_waiters()

    def wait_covered(self, next_offset: int) -> Deferred[int]:
        """Fire with the visible end once readers see up to C{next_offset} (the high watermark covers it and
        the leader flushed it); fail with L{NotEnoughReplicasAfterAppend} if the ISR falls below
        min.insync.replicas first, or L{NotLeader} if this broker stops leading.  The caller times it out."""
        waiter = _Waiter(next_offset, Deferred(canceller=lambda d: self._forget(waiter)))
        self._waiters.append(waiter)
        self._check_waiters()
        return waiter.deferred

    # -- the ISR -----------------------------------------------------------------------

    def check_isr(self) -> None:
        """Write the ISR the state asks for, if any and no write is under way."""
        if self._stopped or self._writing:
            return
        wanted = self.state.wanted_isr(self.log.end_offset, self._clock.seconds())
        if wanted is not None:
            self._writing = True
            Deferred.fromCoroutine(self._write_isr(wanted)).addErrback(self._report, "changing the ISR")

    async def _write_isr(self, isr: tuple[int, ...]) -> None:
        new_state = attrs.evolve(self.zk_state, isr=isr)
        try:
            version = await write_state_cas(self._zk, self.topic, self.partition, new_state, self.version)
        except StateChanged:
            self._log.warn("{topic}-{partition}: the ISR compare-and-set failed (version {version}): fenced until "
                           "the state is read again", topic=self.topic, partition=self.partition,
                           version=self.version)
            self.state.fence()
            self._writing = False
            await self.reread()
            return
        except Exception:
            self.state.fence()  # the session went or ZooKeeper refused: unknown whether it was written
            self._writing = False
            raise
        self._writing = False
        if self._stopped:
            return
        before = self.state.isr
        self.zk_state, self.version = new_state, version
        self._log.info("{topic}-{partition}: ISR {before} -> {after}", topic=self.topic, partition=self.partition,
                       before=list(before), after=list(isr))
        for listener in list(self.on_isr_written):
            listener(before, isr)
        if self.state.isr_written(isr, self.log.end_offset):
            self._publish()
        else:
            self._check_waiters()

    async def reread(self) -> None:
        """Read the state again: still the leader at the same epoch, take its ISR and version and go on;
        otherwise stay fenced (the controller's new state makes this broker a follower)."""
        try:
            state, version = await read_state(self._zk, self.topic, self.partition)
        except Exception as e:
            self._log.warn("{topic}-{partition}: cannot read the state again ({error}): still fenced",
                           topic=self.topic, partition=self.partition, error=e)
            return
        if self._stopped:
            return
        if state.leader != self.state.leader or state.leader_epoch != self.leader_epoch:
            self._log.warn("{topic}-{partition}: no longer the leader at epoch {epoch} (the state says leader "
                           "{leader}, epoch {now}): fenced", topic=self.topic, partition=self.partition,
                           epoch=self.leader_epoch, leader=state.leader, now=state.leader_epoch)
            return
        self.zk_state, self.version = state, version
        if self.state.unfence(state.isr, self.log.end_offset):
            self._publish()
        else:
            self._check_waiters()

    def _session_changed(self, session_state: str) -> None:
        if self._stopped:
            return
        if session_state == CONNECTED:
            if self.state.fenced:
                Deferred.fromCoroutine(self.reread()).addErrback(self._report, "reading the state again")
            return
        self._log.warn("{topic}-{partition}: ZooKeeper session {state}: fenced, acknowledging nothing",
                       topic=self.topic, partition=self.partition, state=session_state)
        self.state.fence()

    # -- the high watermark and ack=all -------------------------------------------------

    def _publish(self) -> None:
        self.log.high_watermark = self.state.high_watermark
        for listener in list(self.on_high_watermark):
            listener(self)
        self._check_waiters()

    def _check_waiters(self) -> None:
        if not self._waiters or self.state.fenced:
            return
        visible = self.log.visible_end
        for waiter in list(self._waiters):
            # As Kafka's checkEnoughReplicasReachOffset: an ISR below min.insync.replicas never acknowledges,
            # even once the high watermark covers the set (a leader that shrank the ISR to itself, Jepsen 2013).
            if self.state.enough_replicas and visible >= waiter.next_offset:
                self._forget(waiter)
                waiter.deferred.callback(visible)
            elif not self.state.enough_replicas:
                self._forget(waiter)
                waiter.deferred.errback(NotEnoughReplicasAfterAppend(
                    f"{self.topic}-{self.partition}: the ISR {list(self.state.isr)} fell below min.insync.replicas "
                    f"{self.state.min_isr} before it held the set"))

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    def waiting(self) -> int:
        """How many C{ack=all} sets wait here."""
        return len(self._waiters)

    def stop(self) -> None:
        """This broker no longer leads the partition: stop checking, and fail the waiting sets (NotLeader)."""
        if self._stopped:
            return
        self._stopped = True
        if self._loop.running:
            self._loop.stop()
        self._zk.remove_state_listener(self._session_changed)
        for waiter in list(self._waiters):
            self._forget(waiter)
            waiter.deferred.errback(NotLeader(f"this broker no longer leads {self.topic}-{self.partition}"))

    def _report(self, failure: Any, what: str) -> None:
        self._log.failure("{topic}-{partition}: {what} failed", failure, topic=self.topic,
                          partition=self.partition, what=what)
