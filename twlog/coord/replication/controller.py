# -*- test-case-name: tests.coord.test_replication_controller -*-
"""The controller: one broker at a time, elected through ZooKeeper, writes replicated partitions' states.

Election (Kafka 0.8's): create the ephemeral C{/twlog/controller}
(L{ControllerRecord}); whoever creates it is the controller, and increments
C{/twlog/controller_epoch} by compare-and-set; the others watch the node and
try again when it goes.  The active controller watches C{/brokers/ids} and
C{/twlog/topics}; on every change (and every C{check_interval_s}, for
preferred leaders) it runs a round: it reads the live brokers, the topics'
assignments and each partition's state with its znode version, asks
L{twlog.coord.replication.decisions} what each state must become, and writes
each change by compare-and-set.  A write that fails (someone wrote the state
meanwhile) reads the state again and decides again.  A state written by a
controller of a later epoch means another controller is active: this one
stands down.

A suspended or lost session stops the controller at once: each step of a
round checks, after every ZooKeeper answer, that the controller is still in
the generation that started it, so an answer that arrives after the session
went writes nothing.  On reconnecting it runs for election again (a new epoch)
and reads everything again.  Its own moves are L{CONTROLLER_MOVES}.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.replication.decisions import Decision, InIsrSince, OfflinePartitions, decide, decide_preferred
from twlog.coord.replication.values import BadReplicationValue, ControllerRecord, PartitionState
from twlog.coord.zk import (
    CONNECTED,
    LOST,
    SUSPENDED,
    IZooKeeper,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from twlog.statemachine import StateMachine, logged_by

__all__ = ["CONTROLLER_MOVES", "Controller", "ControllerState"]


class ControllerState(enum.Enum):
    """Where a broker's controller is.  Transitions::

        IDLE         --start(), connected--------------------------------> ELECTING
        ELECTING     --created /twlog/controller, epoch incremented------> ACTIVE
        ELECTING     --another broker holds /twlog/controller-----------> STANDBY
        STANDBY      --/twlog/controller went----------------------------> ELECTING
        ACTIVE       --/twlog/controller went, or a later epoch wrote----> ELECTING
        any but IDLE --session suspended or lost-------------------------> SESSION_LOST
        SESSION_LOST --connected again-------------------------------------> ELECTING
        any          --stop()-----------------------------------------------> STOPPED
    """

    IDLE = "idle"
    ELECTING = "electing"
    STANDBY = "standby"
    ACTIVE = "active"
    SESSION_LOST = "session-lost"
    STOPPED = "stopped"


_S = ControllerState
CONTROLLER_MOVES: dict[ControllerState, set[ControllerState]] = {
    _S.IDLE: {_S.ELECTING, _S.STOPPED},
    _S.ELECTING: {_S.ACTIVE, _S.STANDBY, _S.SESSION_LOST, _S.STOPPED},
    _S.STANDBY: {_S.ELECTING, _S.SESSION_LOST, _S.STOPPED},
    _S.ACTIVE: {_S.ELECTING, _S.SESSION_LOST, _S.STOPPED},
    _S.SESSION_LOST: {_S.ELECTING, _S.STOPPED},
}


class Superseded(Exception):
    """The controller left the generation a step belongs to (session lost, stood down, stopped): stop there."""


class _Fenced(Exception):
    """A partition's state was written by a controller of a later epoch."""


class Controller:
    """One broker's candidacy for controller and, while elected, the controller's work (module docstring).

    @param unclean: allow unclean leader election (a replica outside the ISR may lead; acknowledged
        messages may be lost, and each such election is logged as a warning).
    @param preferred_delay_s: how long a preferred replica must have been seen in the ISR before it
        takes the lead back.
    @param check_interval_s: how often the active controller runs a round unasked (preferred leaders).
    @param max_cas_attempts: compare-and-set attempts per partition in one round before leaving it to the next.
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper, broker_id: int, *, clock, unclean: bool = False,
                 preferred_delay_s: float = 30.0, check_interval_s: float = 10.0, max_cas_attempts: int = 5) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self._clock = clock
        self.unclean = unclean
        self.preferred_delay_s = preferred_delay_s
        self.check_interval_s = check_interval_s
        self.max_cas_attempts = max_cas_attempts
        self._machine = StateMachine(f"broker {broker_id} controller", _S.IDLE, CONTROLLER_MOVES, logged_by(self._log))
        #: The epoch of this controller's last election (0: never elected).
        self.epoch = 0
        #: The active controller as this broker knows it: itself while active, the holder of
        #: C{/twlog/controller} while standing by, else -1 (none known: electing, session lost, stopped).
        self.controller_id = -1
        self._generation = 0
        #: Every decision this controller wrote, in order; and the compare-and-set failures it retried.
        self.decisions: list[Decision] = []
        self.cas_failures = 0
        self._shutting_down: set[int] = set()
        self._in_isr_since = InIsrSince()
        #: The partitions with no live leader as of this controller's rounds (the metric; 0 unless active).
        self.offline = OfflinePartitions()
        #: The generation whose rounds are running (None: none are).
        self._running: int | None = None
        self._again = False
        self._timer = None
        self._reported: set[str] = set()
        #: The nodes watched in this generation (a watch is set again only after it fired).
        self._armed: set[str] = set()

    @property
    def state(self) -> ControllerState:
        return self._machine.state

    @property
    def active(self) -> bool:
        return self.state is _S.ACTIVE

    def start(self) -> None:
        """Run for election now (if connected) and after every reconnection."""
        self._zk.add_state_listener(self._session_changed)
        if self._zk.connected:
            self._elect()

    def stop(self) -> Deferred[None]:
        """Stop acting; an active controller resigns (deletes its C{/twlog/controller}) so another is elected."""
        was_active = self.active
        self._move(_S.STOPPED)
        self._zk.remove_state_listener(self._session_changed)
        return Deferred.fromCoroutine(store.resign_controller(self._zk) if was_active else _nothing())

    def controlled_shutdown(self, broker_id: int) -> Deferred[list[tuple[str, int]]]:
        """Move broker C{broker_id}'s leaderships to other ISR members (Kafka's controlled shutdown); fire
        with the partitions it still leads (none where another live ISR member could take over).

        @raise Superseded: this controller is not active (or stops being so meanwhile).
        """
        return Deferred.fromCoroutine(self._controlled_shutdown(broker_id))

    # -- moves -------------------------------------------------------------------------------

    def _move(self, target: ControllerState) -> None:
        if self.state is not target:
            self._machine.move(target)
            self.controller_id = self.broker_id if target is _S.ACTIVE else -1
            self._generation += 1
            self._armed = set()
            self._timer = _cancel(self._timer)

    def _session_changed(self, state: str) -> None:
        if state in (SUSPENDED, LOST) and self.state not in (_S.IDLE, _S.STOPPED):
            if self.active:
                self._log.warn("controller (broker {broker}, epoch {epoch}): ZooKeeper session {state}: "
                               "stopped acting", broker=self.broker_id, epoch=self.epoch, state=state)
            self._move(_S.SESSION_LOST)
        elif state == CONNECTED and self.state in (_S.SESSION_LOST, _S.IDLE):  # (IDLE: started unconnected)
            self._elect()

    def _check(self, generation: int) -> None:
        if generation != self._generation:
            raise Superseded()

    # -- election ----------------------------------------------------------------------------

    def _elect(self) -> None:
        if self.state is _S.ELECTING:
            self._generation += 1  # (a retry: the attempt before it is over)
        self._move(_S.ELECTING)
        Deferred.fromCoroutine(self._run_election(self._generation)).addErrback(self._failed, "election")

    async def _run_election(self, generation: int) -> None:
        record = ControllerRecord(self.broker_id, int(self._clock.seconds() * 1000))
        try:
            await self._zk.create(paths.CONTROLLER, record.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            self._check(generation)
            try:
                data, stat = await self._zk.get(paths.CONTROLLER)
            except NoNodeError:
                self._check(generation)
                return self._elect()  # it went meanwhile: run again
            self._check(generation)
            if stat.ephemeralOwner != self._zk.session_id:
                return await self._standby(data)
        self._check(generation)
        self.epoch = await store.increment_controller_epoch(self._zk, lambda: self._check(generation))
        self._check(generation)
        self._move(_S.ACTIVE)
        self._log.info("broker {broker} is the controller (epoch {epoch})", broker=self.broker_id, epoch=self.epoch)
        if await self._watch_controller():
            self._request()

    async def _standby(self, data: bytes) -> None:
        self._move(_S.STANDBY)
        try:
            other = self.controller_id = ControllerRecord.decode(data, paths.CONTROLLER).broker_id
        except BadReplicationValue as e:
            other = f"unknown ({e})"
        self._log.debug("broker {other} is the controller, broker {id} stands by", other=other, id=self.broker_id)
        await self._watch_controller()

    async def _watch_controller(self) -> bool:
        """Watch C{/twlog/controller} in this generation; run for election again (and say False) if it went."""
        generation = self._generation
        stat = await self._zk.exists(paths.CONTROLLER, watch=self._watch(generation, paths.CONTROLLER))
        self._check(generation)
        if stat is None:
            self._elect()
        return stat is not None

    def _watch(self, generation: int, path: str):
        """A watch on C{path} for this generation, or None if one is set already (one watch per node, not one
        per round)."""
        if path in self._armed:
            return None
        self._armed.add(path)

        def fired(event) -> None:
            if generation != self._generation or self.state not in (_S.ACTIVE, _S.STANDBY):
                return
            self._armed.discard(path)
            if path == paths.CONTROLLER:
                self._elect()  # gone (or changed): run again; the holder keeps it
            elif self.active:
                self._request()

        return fired

    # -- rounds ------------------------------------------------------------------------------

    def _request(self) -> None:
        """Run a round now, or once more after the running one."""
        self._again = True
        if self._running != self._generation and self.active:
            Deferred.fromCoroutine(self._rounds(self._generation)).addErrback(self._failed, "round")

    async def _rounds(self, generation: int) -> None:
        self._running = generation
        try:
            while self._again and generation == self._generation:
                self._again = False
                await self._round(generation)
        finally:
            if self._running == generation:
                self._running = None
        if generation == self._generation and self.active:
            _cancel(self._timer)
            self._timer = self._clock.callLater(self.check_interval_s, self._request)

    async def _round(self, generation: int) -> None:
        for parent in (paths.BROKER_IDS, paths.REPLICATED_TOPICS):
            await self._zk.ensure_path(parent)
            self._check(generation)
        names = await self._zk.children(paths.BROKER_IDS, watch=self._watch(generation, paths.BROKER_IDS))
        self._check(generation)
        live = {int(n) for n in names if n.isdigit() and n.isascii()}
        self._shutting_down &= live
        topics = await store.list_topics(self._zk, watch=self._watch(generation, paths.REPLICATED_TOPICS))
        self._check(generation)
        seen = set()
        for topic in topics:
            try:
                assignment = await store.read_topic(self._zk, topic)
            except NoNodeError:
                continue  # deleted meanwhile
            except BadReplicationValue as e:
                self._report(str(e))
                continue
            finally:
                self._check(generation)
            for partition in sorted(assignment.partitions):
                seen.add((topic, partition))
                self.offline.note(topic, partition, await self._settle(generation, assignment, partition, live), live)
        self._in_isr_since.keep_only(seen)
        self.offline.keep_only(seen)

    async def _settle(self, generation: int, assignment, partition: int,
                      live: Collection[int]) -> PartitionState | None:
        """Read one partition's state, decide, write by compare-and-set (again on a failed write): the state then."""
        topic = assignment.topic
        for _ in range(self.max_cas_attempts):
            try:
                state, version = await store.read_state(self._zk, topic, partition)
            except NoNodeError:
                state, version = None, -1
            except BadReplicationValue as e:
                self._check(generation)
                self._report(str(e))
                return
            self._check(generation)
            if state is not None and state.controller_epoch > self.epoch:
                # Written by a later controller (stand down), or, if no election gave that epoch, a bad value.
                current = await store.read_controller_epoch(self._zk)
                self._check(generation)
                if current > self.epoch:
                    raise _Fenced(f"{topic}:{partition} was written by controller epoch {state.controller_epoch}; "
                                  f"{paths.CONTROLLER_EPOCH} is {current}")
                return self._report(f"{paths.partition_state_path(topic, partition)}: controller epoch "
                                    f"{state.controller_epoch} is past {paths.CONTROLLER_EPOCH} ({current})")
            decision = decide(assignment, partition, state, live=live, controller_epoch=self.epoch,
                              shutting_down=self._shutting_down, unclean=self.unclean)
            if decision is None and state is not None:
                decision = decide_preferred(assignment, partition, state, live=live, controller_epoch=self.epoch,
                                            in_isr_since=self._in_isr_since.seen(assignment, partition, state,
                                                                                 self._clock.seconds()),
                                            now=self._clock.seconds(), delay_s=self.preferred_delay_s,
                                            shutting_down=self._shutting_down)
            if decision is None:
                return state
            try:
                if state is None:
                    await store.create_state(self._zk, topic, partition, decision.new,
                                             checkpoint=lambda: self._check(generation))
                else:
                    await store.write_state_cas(self._zk, topic, partition, decision.new, version)
            except store.StateChanged:
                self._check(generation)
                self.cas_failures += 1
                continue
            self._check(generation)
            self._applied(decision)
            return decision.new
        self._again = True  # contended (None: its state unknown): the next round tries again

    def _applied(self, decision: Decision) -> None:
        self.decisions.append(decision)
        if decision.loss:
            self._log.warn("{loss}", loss=decision.loss)
        self._log.info("controller epoch {epoch}: {decision}", epoch=self.epoch, decision=str(decision))

    async def _controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        if not self.active:
            raise Superseded()
        generation = self._generation
        self._shutting_down.add(broker_id)
        while self._running == generation:  # let the running round finish, then run one that knows
            await _later(self._clock)
            self._check(generation)
        self._again = True
        await self._rounds(generation)
        self._check(generation)
        return await store.leaderships(self._zk, broker_id, lambda: self._check(generation))

    def _report(self, problem: str) -> None:
        if problem not in self._reported:
            self._reported.add(problem)
            self._log.warn("controller: ignoring a replication value in ZooKeeper: {problem}", problem=problem)

    def _failed(self, failure, what: str) -> None:
        if failure.check(Superseded):
            return
        if failure.check(_Fenced):
            self._log.warn("controller (broker {broker}, epoch {epoch}) stands down: {why}", broker=self.broker_id,
                           epoch=self.epoch, why=failure.getErrorMessage())
            if self.active:
                self._elect()
            return
        if failure.check(KazooException) and self.state in (_S.SESSION_LOST, _S.STOPPED):
            return  # the session went under the step: reconnecting runs again
        self._log.failure("controller {what} failed (broker {broker})", failure, what=what, broker=self.broker_id)
        if self.state in (_S.ACTIVE, _S.ELECTING):
            self._timer = self._clock.callLater(self.check_interval_s, self._retry, self._generation)

    def _retry(self, generation: int) -> None:
        if generation == self._generation:
            self._elect() if self.state is _S.ELECTING else self._request()


def _cancel(timer):
    """Cancel C{timer} (an C{IDelayedCall}, or None) if it is pending; None."""
    if timer is not None and timer.active():
        timer.cancel()


async def _nothing() -> None:
    return None


def _later(clock) -> Deferred[None]:
    d: Deferred[None] = Deferred()
    clock.callLater(0, d.callback, None)
    return d
