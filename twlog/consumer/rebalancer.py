# -*- test-case-name: tests.consumer.test_group,tests.integration.test_group,tests.integration.test_groups -*-
"""A group member's rebalance machinery: the paper's Algorithm 1 with bounded retries, and what it starts and stops.

L{Rebalancer} runs the rebalances of one member (L{twlog.consumer.group.GroupConsumer})
and holds its L{GroupState}: on each request it stops fetching and drops what
was fetched but not handed out, commits the consumed offsets, releases its
owner nodes, reads the members and the partitions, computes its ranges
(L{twlog.consumer.rebalance}), claims each partition's owner node
(L{twlog.consumer.membership.Ownership}) and starts fetching
(L{Consumption}).  A conflict (a node still held by another member) releases
everything, backs off and retries, at most C{max_retries} attempts; then the
member is FAILED and its streams raise L{RebalanceFailed}.  Requests made
during a rebalance coalesce into exactly one more rebalance after it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.consumer.consumption import Consumption, UncommittedOffsets
from twlog.consumer.membership import Ownership, describe_error, read_members, read_offsets
from twlog.consumer.rebalance import consumer_assignment
from twlog.coord.cluster import ClusterView
from twlog.coord.layout import describe_offline
from twlog.coord.zk import EventType, IZooKeeper, KazooException
from twlog.errors import ClientClosed, RebalanceFailed
from twlog.partition import TopicPartition
from twlog.statemachine import StateMachine, logged_by


class GroupState(enum.Enum):
    """Where a group consumer is.  Transitions::

        NEW          --create_message_streams, registered-------------> REBALANCING
        REBALANCING  --claimed every partition of its ranges-----------> STABLE
        REBALANCING  --rebalance_max_retries conflicts in a row-------> FAILED
        STABLE       --members, brokers or topics changed-------------> REBALANCING
        FAILED       --members, brokers or topics changed-------------> REBALANCING
        FAILED       --reconnected to ZooKeeper------------------------> REBALANCING
        any but NEW  --session expired, or out of touch too long------> SESSION_LOST
        SESSION_LOST --new session, registered again-------------------> REBALANCING
        SESSION_LOST --registering again failed------------------------> FAILED
        any          --close()----------------------------------------> CLOSED

    The table is L{GROUP_MOVES}; the L{Rebalancer} makes every move.
    """

    NEW = "new"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    FAILED = "failed"
    SESSION_LOST = "session-lost"
    CLOSED = "closed"


#: Where each L{GroupState} may move; L{Rebalancer} makes the moves, any other raises
#: L{twlog.statemachine.IllegalTransition}.
GROUP_MOVES: dict[GroupState, set[GroupState]] = {
    GroupState.NEW: {GroupState.REBALANCING, GroupState.CLOSED},
    GroupState.REBALANCING: {GroupState.STABLE, GroupState.FAILED, GroupState.SESSION_LOST, GroupState.CLOSED},
    GroupState.STABLE: {GroupState.REBALANCING, GroupState.SESSION_LOST, GroupState.CLOSED},
    GroupState.FAILED: {GroupState.REBALANCING, GroupState.SESSION_LOST, GroupState.CLOSED},
    GroupState.SESSION_LOST: {GroupState.REBALANCING, GroupState.FAILED, GroupState.CLOSED},
}

#: The states in which the member waits for nothing: L{Rebalancer.when_stable} fires in them.
_SETTLED = (GroupState.STABLE, GroupState.FAILED, GroupState.CLOSED)


class Superseded(Exception):
    """The rebalance's generation is over (the session was lost, the consumer closed, or a newer attempt began)."""


class Rebalancer:
    """Runs one member's rebalances and holds its L{GroupState}, which only it moves (L{GROUP_MOVES}).

    Its owner asks for the moves that are not a rebalance's: L{join}, L{lose_session},
    L{rejoined}, L{rejoin_failed} and L{close}.

    @param view: the cluster (brokers and the subscribed topics' partitions); set before the first L{request}.
    @param subscription: topic -> this member's number of streams.
    @param backoff: attempt number -> seconds to wait before the next attempt.
    @param on_move: told C{(source, target)} after each move of the state.
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper, group: str, consumer_id: str, *, clock, view: ClusterView | None,
                 subscription: dict[str, int], ownership: Ownership, consumption: Consumption, max_retries: int,
                 backoff: Callable[[int], float],
                 on_move: Callable[[GroupState, GroupState], object] | None = None) -> None:
        self._zk = zk
        self.group = group
        self.consumer_id = consumer_id
        self._clock = clock
        self.view = view
        self._subscription = subscription
        self.ownership = ownership
        self.consumption = consumption
        self.max_retries = max_retries
        self._backoff = backoff
        #: Told C{(source, target)} after each move of the state.
        self.on_move = on_move
        log_move = logged_by(self._log)

        def moved(machine: str, source: GroupState, target: GroupState) -> None:
            log_move(machine, source, target)
            if self.on_move is not None:
                self.on_move(source, target)

        self._machine = StateMachine(f"group {group} member {consumer_id}", GroupState.NEW, GROUP_MOVES, moved)
        self.generation = 0
        #: Completed rebalances, conflicts retried, and the last rebalance's duration (for stats and benchmarks).
        self.rebalances = 0
        self.retries = 0
        self.last_rebalance_s = 0.0
        #: The subscribed partitions the last completed rebalance found offline: no member of the group reads them.
        self.offline: frozenset[TopicPartition] = frozenset()
        self._running = False
        self._again = False
        self._sleep: Deferred | None = None
        self._stable_waiters: list[Deferred[None]] = []
        #: The members' subscriptions the last attempt read.
        self._members: dict[str, dict[str, int]] = {}

    @property
    def state(self) -> GroupState:
        """Where the member is (L{GroupState})."""
        return self._machine.state

    # -- the moves its owner asks for ------------------------------------------------------------

    def join(self) -> None:
        """NEW -> REBALANCING: the member is registered; run the first rebalance."""
        self._machine.move(GroupState.REBALANCING, sources=[GroupState.NEW])
        self.request()

    def lose_session(self, expired: bool) -> bool:
        """-> SESSION_LOST: stop delivering, since other members may own our partitions by now, and drop what
        was fetched but not handed out.

        C{expired}: the session is gone, and its owner nodes with it: the consumed offsets are forgotten
        (another member may own those partitions now; writing them could move its offsets either way).
        Otherwise (out of touch for the session timeout: it may have expired, or not) they are kept, and
        L{GroupConsumer} commits them first if the same session comes back, when they are still its own
        (it handed nothing out since the connection was lost: see L{Consumption.pause}).
        @return: whether the member moved (False: it was SESSION_LOST already).
        """
        if expired:
            self.ownership.forget()
            self.consumption.forget()
        if self.state is GroupState.SESSION_LOST:
            return False
        self._machine.move(GroupState.SESSION_LOST)
        self.consumption.stop()
        self.supersede()
        return True

    def rejoined(self) -> None:
        """SESSION_LOST -> REBALANCING: registered again in a live session; rebalance."""
        self._machine.move(GroupState.REBALANCING, sources=[GroupState.SESSION_LOST])
        self.request()

    def rejoin_failed(self, error: Exception) -> None:
        """SESSION_LOST -> FAILED: registering again failed; the streams raise C{error}."""
        self._machine.move(GroupState.FAILED, sources=[GroupState.SESSION_LOST])
        self.consumption.set_error(error)

    def close(self) -> GroupState:
        """-> CLOSED, ending the generation; return the state it was in."""
        previous = self._machine.move(GroupState.CLOSED)
        self.supersede()
        return previous

    # -- rebalancing -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a rebalance runs now (or one more is due after it)."""
        return self._running

    def request(self) -> None:
        """Rebalance now, or once more after the one running (bursts of events coalesce into one)."""
        if self.state in (GroupState.NEW, GroupState.SESSION_LOST, GroupState.CLOSED):
            return
        if self._running:
            self._again = True
            return
        self._running = True  # before starting: the run may end, or request more, before fromCoroutine returns
        Deferred.fromCoroutine(self._run()).addErrback(lambda f: self._log.failure("rebalance failed", f))

    def supersede(self) -> None:
        """End the current generation: a rebalance running stops at its next step, one backing off wakes."""
        self.generation += 1
        if self._sleep is not None and not self._sleep.called:
            self._sleep.cancel()

    def when_stable(self) -> Deferred[None]:
        """Fire once STABLE with no rebalance running or due (L{RebalanceFailed} if FAILED, L{ClientClosed})."""
        if not self._running and self.state in _SETTLED:
            return self._outcome()
        d: Deferred[None] = Deferred()
        self._stable_waiters.append(d)
        return d

    def tell_stable_waiters(self) -> None:
        """Fire the L{when_stable} waiters if the state is final for now."""
        if self.state in _SETTLED:
            waiters, self._stable_waiters = self._stable_waiters, []
            for d in waiters:
                self._outcome().chainDeferred(d)

    def _outcome(self) -> Deferred[None]:
        if self.state is GroupState.STABLE:
            return succeed(None)
        if self.state is GroupState.CLOSED:
            return fail(ClientClosed(f"consumer {self.consumer_id} was closed"))
        return fail(RebalanceFailed(f"consumer {self.consumer_id}: the last rebalance failed"))

    def members_watch(self, generation: int):
        """A watch on the group's members that requests a rebalance (if C{generation} is still current).

        A NONE event is no change: the connection was lost and kazoo dropped its
        watches (L{rewatch} sets it again once reconnected).
        """
        def changed(event) -> None:
            # Older watches are ignored: a newer read has its own.
            if event.type != EventType.NONE and generation == self.generation:
                self.request()

        return changed

    def rewatch(self) -> Deferred[None]:
        """Watch the members again after a lost connection (same session); rebalance if they changed meanwhile."""
        return Deferred.fromCoroutine(self._rewatch())

    async def _rewatch(self) -> None:
        generation = self.generation
        members = await read_members(self._zk, self.group, watch=self.members_watch(generation))
        members = {member: s for member, s in members.items() if s is not None}
        if generation == self.generation and members != self._members:
            self.request()

    # -- one rebalance ---------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                await self._rebalance()
                if not self._again or self.state in (GroupState.CLOSED, GroupState.SESSION_LOST):
                    break
        finally:
            self._running = False
            self.tell_stable_waiters()

    async def _rebalance(self) -> None:
        """Algorithm 1 with bounded retries; ends STABLE or FAILED (or returns early if superseded)."""
        if self.state is not GroupState.REBALANCING:  # (a rejoin made the move already)
            self._machine.move(GroupState.REBALANCING)
        started = self._clock.seconds()
        problem = "no attempt"
        for attempt in range(1, self.max_retries + 1):
            self.generation += 1
            generation = self.generation
            try:
                problem = await self._attempt(generation)
            except Superseded:
                return
            except Exception as e:  # ZooKeeper errors (connection loss...) are retried like conflicts
                if not isinstance(e, (KazooException, UncommittedOffsets)):
                    self._log.failure("consumer {consumer}: rebalance attempt broke", consumer=self.consumer_id)
                problem = describe_error(e)
            if problem is None:
                self._machine.move(GroupState.STABLE)
                self.rebalances += 1
                self.last_rebalance_s = self._clock.seconds() - started
                self.consumption.set_error(None)
                self._log.info("consumer {consumer} owns {owned} after {attempts} attempt(s) in {seconds:.3f} s",
                               consumer=self.consumer_id, owned=self.consumption.by_topic(), attempts=attempt,
                               seconds=self.last_rebalance_s)
                return
            self._log.info("consumer {consumer}: rebalance attempt {attempt} failed: {problem}",
                           consumer=self.consumer_id, attempt=attempt, problem=problem)
            try:
                await self.release(generation)
            except Superseded:
                return
            except Exception:
                pass  # the next attempt releases again
            if attempt < self.max_retries:
                self.retries += 1
                self._sleep = deferLater(self._clock, self._backoff(attempt), lambda: None)
                try:
                    await self._sleep
                except CancelledError:
                    return
                finally:
                    self._sleep = None
                if generation != self.generation:
                    return
        self._machine.move(GroupState.FAILED)
        error = RebalanceFailed(
            f"consumer {self.consumer_id} of group {self.group} could not rebalance in "
            f"{self.max_retries} attempts: {problem}"
        )
        self._log.error("{error}", error=error)
        self.consumption.set_error(error)

    def check(self, generation: int) -> None:
        """@raise Superseded: C{generation} is over."""
        if generation != self.generation:
            raise Superseded()

    async def _attempt(self, generation: int) -> str | None:
        """One pass of Algorithm 1: None if every assigned partition was claimed, else why not."""
        self.consumption.stop()
        await self.consumption.commit()
        self.check(generation)
        await self.release(generation)
        subscriptions = await read_members(self._zk, self.group, watch=self.members_watch(generation))
        self.check(generation)
        subscriptions = self._members = {member: s for member, s in subscriptions.items() if s is not None}
        layout = self.view.layout()
        partitions = {topic: layout.topic_partitions(topic) for topic in self._subscription}
        plan = {tp: stream for owners in consumer_assignment(self.consumer_id, subscriptions, partitions).values()
                for tp, stream in owners.items()}
        conflicts = await self.ownership.claim_all(plan, lambda: self.check(generation))
        self.check(generation)
        if conflicts:
            return f"owned by another consumer: {', '.join(conflicts)}"
        offsets = await read_offsets(self._zk, self.group, sorted(plan))
        self.check(generation)
        self.consumption.start(plan, offsets, layout)
        offline = [tp for topic in sorted(self._subscription) for tp in layout.offline_partitions(topic)]
        self.offline = frozenset(offline)
        if offline:  # never left out in silence: no member of the group can read them until their broker is back
            self._log.warn("group {group}: {count} partition(s) cannot be read by any member: {why}", group=self.group,
                           count=len(offline), why=describe_offline(offline))
        return None

    async def release(self, generation: int | None = None) -> None:
        """Forget this generation's partitions and delete the owner nodes this session holds.

        @raise UncommittedOffsets: an offset consumed could not be written (ZooKeeper is out of touch,
            mostly): the partitions and their nodes are kept, so that the offsets are written, while still
            owned, before the next attempt releases them.
        """
        if self.consumption.uncommitted():  # (acknowledged since the commit, with manual offsets) commit once more
            await self.consumption.commit()
        uncommitted = self.consumption.uncommitted()
        if uncommitted:
            raise UncommittedOffsets(f"the offsets of {len(uncommitted)} partition(s) are not committed yet")
        self.consumption.owned = {}
        try:
            await self.ownership.release()
        finally:
            if generation is not None:
                self.check(generation)
