# -*- test-case-name: tests.integration.test_groups,tests.consumer.test_group -*-
"""Group consumers: the paper's decentralized rebalance (section 3.2, Algorithm 1) over ZooKeeper.

Every consumer of a group registers C{/consumers/<group>/ids/<consumer id>}
(ephemeral; its subscription as JSON), watches the group's members and the
brokers' registrations, and on every change runs the same rebalance: stop
fetching and drop what was fetched but not handed out, commit the consumed
offsets, release its owner nodes, read the registries, compute its range of
each topic's partitions (L{twlog.consumer.rebalance}), and claim each
partition with an ephemeral owner node.  If a node is still held by another
consumer (which has not released it yet), it releases everything, backs off
with jitter and tries again, at most C{rebalance_max_retries} times; then the
streams raise L{RebalanceFailed}.  A consumer delivers a partition's messages
only while it holds its owner node, so no partition is consumed by two members
of a group at once, and offsets are committed before ownership is released:
delivery is at-least-once, in order within a partition.
"""

from __future__ import annotations

import enum
import os
import random
import socket
import uuid
from collections.abc import Mapping

from twisted.application.internet import backoffPolicy
from twisted.internet.defer import CancelledError, Deferred, DeferredList, fail, succeed
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import Logger

from twlog.consumer.admin import delete_session_owners, read_members, read_offsets, register_member, write_offsets
from twlog.consumer.rebalance import consumer_assignment, encode_subscription, stream_ids, validate_subscription
from twlog.consumer.stream import RESET_TIMES, BrokerFetcher, GroupStream, OwnedPartition
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.zk import CONNECTED, LOST, SUSPENDED, KazooException, NodeExistsError, NoNodeError, ZooKeeper
from twlog.errors import ClientClosed, RebalanceFailed


class GroupState(enum.Enum):
    """Where a L{GroupConsumer} is.  Transitions::

        NEW          --create_message_streams, registered-------------> REBALANCING
        REBALANCING  --claimed every partition of its ranges-----------> STABLE
        REBALANCING  --rebalance_max_retries conflicts in a row-------> FAILED
        STABLE       --members, brokers or topics changed-------------> REBALANCING
        FAILED       --members, brokers or topics changed-------------> REBALANCING
        any but NEW  --ZooKeeper session expired (owner nodes gone)----> SESSION_LOST
        SESSION_LOST --new session, registered again-------------------> REBALANCING
        any          --close()----------------------------------------> CLOSED
    """

    NEW = "new"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    FAILED = "failed"
    SESSION_LOST = "session-lost"
    CLOSED = "closed"


class _Superseded(Exception):
    """The rebalance's generation is over (the session was lost, or the consumer closed)."""


def _gather(coroutines) -> DeferredList:
    """Run C{coroutines} at once; fire with DeferredList's [(success, result or Failure)]."""
    return DeferredList([Deferred.fromCoroutine(c) for c in coroutines], consumeErrors=True)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__} {error}".strip()


def default_consumer_id() -> str:
    """C{<host>-<pid>-<8 hex digits>}: unique per consumer object."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GroupConsumer:
    """A member of consumer group C{group}: n message streams per topic, over the partitions it owns.

    @param zookeeper: a connect string (the consumer makes and closes its own
        session), or a L{ZooKeeper} (started or not; not stopped by L{close}).
    @param auto_commit_interval_ms: commit consumed offsets this often (0: only
        on rebalance, L{commit} and L{close}).
    @param auto_offset_reset: where a partition without a committed offset, or
        with one out of range, starts: C{"smallest"} or C{"largest"}.
    @param queued_max_messages: messages fetched ahead per stream; a partition
        is not fetched while its stream holds this many.
    @param fetch_max_bytes: bytes fetched per partition per request; a single
        message larger than this is an error raised by its stream.
    @param max_wait_ms: how long the broker holds a fetch that found no data
        (and so the longest a partition whose full stream drained waits to be
        fetched again, when another fetch is held on its broker).
    @param session_timeout_s: the ZooKeeper session timeout; out of touch with
        ZooKeeper this long, the consumer stops delivering (others may own its
        partitions by then) until it has rejoined.
    """

    _log = Logger()

    def __init__(
        self,
        zookeeper: str | ZooKeeper,
        group: str,
        *,
        reactor=None,
        consumer_id: str | None = None,
        auto_commit_interval_ms: int = 1000,
        auto_offset_reset: str = "smallest",
        queued_max_messages: int = 1000,
        fetch_max_bytes: int = 300 * 1024,
        max_wait_ms: int = 500,
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 500,
        session_timeout_s: float = 6.0,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        connect_attempts: int = 3,
        rng: random.Random | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        if not group or "/" in group:
            raise ValueError(f"bad group name {group!r}")
        if auto_offset_reset not in RESET_TIMES:
            raise ValueError(f"auto_offset_reset must be 'smallest' or 'largest', not {auto_offset_reset!r}")
        if rebalance_max_retries < 1:
            raise ValueError("rebalance_max_retries must be at least 1")
        if queued_max_messages < 1 or fetch_max_bytes < 1:
            raise ValueError("queued_max_messages and fetch_max_bytes must be positive")
        self.group = group
        self.consumer_id = consumer_id or default_consumer_id()
        if "/" in self.consumer_id:
            raise ValueError(f"bad consumer id {self.consumer_id!r}")
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.auto_offset_reset = auto_offset_reset
        self.queued_max_messages = queued_max_messages
        self.fetch_max_bytes = fetch_max_bytes
        self.max_wait_ms = max_wait_ms
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff_ms = rebalance_backoff_ms
        self.timeout_s = timeout_s
        self.session_timeout_s = session_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.connect_attempts = connect_attempts
        self._reactor = reactor
        self._rng = rng or random.Random()
        if isinstance(zookeeper, ZooKeeper):
            self.zookeeper, self._own_session = zookeeper, False
        else:
            self.zookeeper = ZooKeeper(zookeeper, reactor=reactor, session_timeout_s=session_timeout_s)
            self._own_session = True
        self._backoff = backoffPolicy(
            initialDelay=rebalance_backoff_ms / 1000, factor=1.5, maxDelay=4 * rebalance_backoff_ms / 1000,
            jitter=lambda: self._rng.random() * rebalance_backoff_ms / 1000,
        )
        self.state = GroupState.NEW
        #: Completed rebalances, conflicts retried, and the last rebalance's duration (for stats and benchmarks).
        self.rebalances = 0
        self.retries = 0
        self.last_rebalance_s = 0.0
        self._subscription: dict[str, int] = {}
        self._streams: dict[str, list[GroupStream]] = {}
        self._stream_by_id: dict[tuple[str, str], GroupStream] = {}
        self._view: ClusterView | None = None
        self._generation = 0
        #: Owner nodes this session holds: (topic, partition name).
        self._owner_nodes: set[tuple[str, str]] = set()
        #: Partitions being consumed in this generation.
        self._owned: dict[tuple[str, str], OwnedPartition] = {}
        self._fetchers: list[BrokerFetcher] = []
        self._closing: set[Deferred] = set()
        self._rebalancing: Deferred | None = None
        self._again = False
        self._sleep: Deferred | None = None
        self._stable_waiters: list[Deferred[None]] = []
        self._autocommit: LoopingCall | None = None
        self._started = False
        self._closed: Deferred[None] | None = None
        self._suspicion = None

    # -- public API ---------------------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Connect the ZooKeeper session (done by L{create_message_streams} if need be)."""
        return Deferred.fromCoroutine(self._start())

    def create_message_streams(self, subscription: Mapping[str, int]) -> Deferred[dict[str, list[GroupStream]]]:
        """Join the group with C{subscription} (topic -> number of streams) and fire with the streams.

        Fires after the first rebalance ends; if it failed, the streams raise L{RebalanceFailed}.
        @raise ValueError: a bad subscription, or streams were already created.
        """
        return Deferred.fromCoroutine(self._create(subscription))

    def commit(self) -> Deferred[None]:
        """Write the consumed offset of every partition owned now (where it moved since the last commit)."""
        return Deferred.fromCoroutine(self._commit([p for p in self._owned.values() if p.active]))

    def close(self) -> Deferred[None]:
        """Commit, release the partitions, leave the group, and close the session and connections; streams end."""
        if self._closed is None:
            self._closed = Deferred.fromCoroutine(self._close())
        return self._closed

    def owned(self) -> dict[str, dict[str, str]]:
        """The partitions this consumer delivers now: topic -> {partition name: stream id}."""
        result: dict[str, dict[str, str]] = {}
        for (topic, name), p in self._owned.items():
            if p.active:
                result.setdefault(topic, {})[name] = p.stream.stream_id
        return result

    def when_stable(self) -> Deferred[None]:
        """Fire once the consumer is STABLE with no rebalance running or due (L{RebalanceFailed} if it FAILED)."""
        if self._rebalancing is None and self.state is GroupState.STABLE:
            return succeed(None)
        if self._rebalancing is None and self.state is GroupState.FAILED:
            return fail(RebalanceFailed(f"consumer {self.consumer_id}: the last rebalance failed"))
        d: Deferred[None] = Deferred()
        self._stable_waiters.append(d)
        return d

    # -- joining ------------------------------------------------------------------------

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            if self._own_session or not self.zookeeper.connected:
                await self.zookeeper.start()
            self.zookeeper.add_state_listener(self._session_changed)

    async def _create(self, subscription: Mapping[str, int]) -> dict[str, list[GroupStream]]:
        if self.state is not GroupState.NEW or self._subscription:
            raise ValueError("create_message_streams was already called")
        subscription = validate_subscription(subscription)
        self._subscription = subscription
        for topic, count in subscription.items():
            streams = [GroupStream(topic, sid, self.queued_max_messages) for sid in stream_ids(self.consumer_id, count)]
            self._streams[topic] = streams
            self._stream_by_id.update(((topic, s.stream_id), s) for s in streams)
        await self._start()
        self._view = ClusterView(self.zookeeper, subscription)
        await self._view.start()
        self._view.add_listener(self._cluster_changed)
        await self._register()
        if self.state is GroupState.CLOSED:
            if self.zookeeper.connected:  # closed while registering: leave again
                await self._bounded(Deferred.fromCoroutine(self._leave([])))
            raise ClientClosed("the group consumer was closed")
        self.state = GroupState.REBALANCING
        self._request_rebalance()
        try:
            await self.when_stable()
        except (RebalanceFailed, ClientClosed):
            pass  # the streams raise it, or end
        if self.auto_commit_interval_ms > 0 and self.state is not GroupState.CLOSED:
            self._autocommit = LoopingCall(self._autocommit_tick)
            self._autocommit.clock = self._reactor
            self._autocommit.start(self.auto_commit_interval_ms / 1000, now=False).addErrback(
                lambda f: self._log.failure("autocommit stopped", f))
        return {topic: list(streams) for topic, streams in self._streams.items()}

    async def _register(self) -> None:
        """Create the ephemeral C{/consumers/<group>/ids/<consumer id>} with the subscription."""
        await register_member(self.zookeeper, self.group, self.consumer_id, encode_subscription(self._subscription),
                              attempts=self.rebalance_max_retries,
                              pause=lambda attempt: deferLater(self._reactor, self._backoff(attempt), lambda: None))

    # -- events -------------------------------------------------------------------------

    def _cluster_changed(self) -> None:
        self._request_rebalance()

    def _members_watch(self, generation: int):
        def changed(event) -> None:
            if generation == self._generation:  # older watches: a newer read has its own
                self._request_rebalance()

        return changed

    def _session_changed(self, state: str) -> None:
        if self.state in (GroupState.NEW, GroupState.CLOSED):
            return
        if self._suspicion is not None and self._suspicion.active():
            self._suspicion.cancel()
        self._suspicion = None
        if state == SUSPENDED:
            # The server expires the session after its timeout without contact: stop delivering by then,
            # since other members may own our partitions once it has.
            self._suspicion = self._reactor.callLater(self.session_timeout_s, self._lose_session, False)
        elif state == LOST:
            self._lose_session(True)
        elif state == CONNECTED and self.state is GroupState.FAILED:
            self._request_rebalance()  # a rebalance may have failed for want of a connection
        elif state == CONNECTED and self.state is GroupState.SESSION_LOST:
            Deferred.fromCoroutine(self._rejoin()).addErrback(
                lambda f: self._log.failure("consumer {consumer}: rejoining failed", f, consumer=self.consumer_id))

    def _lose_session(self, expired: bool) -> None:
        """Stop delivering: the session expired (C{expired}; its owner nodes are gone), or may have."""
        self._suspicion = None
        if expired:
            self._owner_nodes = set()
        if self.state is GroupState.SESSION_LOST:
            return
        self._log.warn("consumer {consumer}: ZooKeeper session {what}; stopped consuming until it rejoins group "
                       "{group}", consumer=self.consumer_id, group=self.group,
                       what="expired" if expired else f"out of touch for {self.session_timeout_s:g} s")
        self._generation += 1
        self._stop_fetching()
        self._owned = {}
        self.state = GroupState.SESSION_LOST
        self._wake_from_backoff()

    async def _rejoin(self) -> None:
        try:
            await self._register()
            await delete_session_owners(self.zookeeper, self.group, list(self._subscription), self._owner_nodes)
        except Exception as e:
            if self.state is GroupState.SESSION_LOST:
                self.state = GroupState.FAILED
                self._fail_streams(RebalanceFailed(f"consumer {self.consumer_id} could not rejoin group "
                                                   f"{self.group} after its session expired: {e}"))
            raise
        if self.state is GroupState.SESSION_LOST:
            self.state = GroupState.REBALANCING
            self._request_rebalance()

    def _fail_streams(self, error: Exception | None) -> None:
        for streams in self._streams.values():
            for stream in streams:
                stream.set_error(error)

    def _wake_from_backoff(self) -> None:
        if self._sleep is not None and not self._sleep.called:
            self._sleep.cancel()

    # -- rebalancing ----------------------------------------------------------------------

    def _request_rebalance(self) -> None:
        """Rebalance now, or once more after the one running (bursts of events coalesce into one)."""
        if self.state in (GroupState.NEW, GroupState.SESSION_LOST, GroupState.CLOSED):
            return
        if self._rebalancing is not None:
            self._again = True
            return
        self._rebalancing = Deferred.fromCoroutine(self._run_rebalances())
        self._rebalancing.addErrback(lambda f: self._log.failure("rebalance failed", f))

    async def _run_rebalances(self) -> None:
        try:
            while True:
                self._again = False
                await self._rebalance()
                if not self._again or self.state in (GroupState.CLOSED, GroupState.SESSION_LOST):
                    break
        finally:
            self._rebalancing = None
            self._tell_stable_waiters()

    def _tell_stable_waiters(self) -> None:
        if self.state in (GroupState.STABLE, GroupState.FAILED, GroupState.CLOSED):
            waiters, self._stable_waiters = self._stable_waiters, []
            for d in waiters:
                if self.state is GroupState.STABLE:
                    d.callback(None)
                elif self.state is GroupState.CLOSED:
                    d.errback(ClientClosed(f"consumer {self.consumer_id} was closed"))
                else:
                    d.errback(RebalanceFailed(f"consumer {self.consumer_id}: the last rebalance failed"))

    async def _rebalance(self) -> None:
        """Algorithm 1 with bounded retries; ends STABLE or FAILED (or returns early if superseded)."""
        self.state = GroupState.REBALANCING
        started = self._reactor.seconds()
        problem = "no attempt"
        for attempt in range(1, self.rebalance_max_retries + 1):
            self._generation += 1
            generation = self._generation
            try:
                problem = await self._attempt(generation)
            except _Superseded:
                return
            except Exception as e:  # ZooKeeper errors (connection loss...) are retried like conflicts
                if not isinstance(e, KazooException):
                    self._log.failure("consumer {consumer}: rebalance attempt broke", consumer=self.consumer_id)
                problem = _describe(e)
            if problem is None:
                self.state = GroupState.STABLE
                self.rebalances += 1
                self.last_rebalance_s = self._reactor.seconds() - started
                self._fail_streams(None)
                self._log.info("consumer {consumer} owns {owned} after {attempts} attempt(s) in {seconds:.3f} s",
                               consumer=self.consumer_id, owned=self.owned(), attempts=attempt,
                               seconds=self.last_rebalance_s)
                return
            self._log.info("consumer {consumer}: rebalance attempt {attempt} failed: {problem}",
                           consumer=self.consumer_id, attempt=attempt, problem=problem)
            try:
                await self._release(generation)
            except _Superseded:
                return
            except Exception:
                pass  # the next attempt releases again
            if attempt < self.rebalance_max_retries:
                self.retries += 1
                self._sleep = deferLater(self._reactor, self._backoff(attempt), lambda: None)
                try:
                    await self._sleep
                except CancelledError:
                    return
                finally:
                    self._sleep = None
                if generation != self._generation:
                    return
        self.state = GroupState.FAILED
        error = RebalanceFailed(
            f"consumer {self.consumer_id} of group {self.group} could not rebalance in "
            f"{self.rebalance_max_retries} attempts: {problem}"
        )
        self._log.error("{error}", error=error)
        self._fail_streams(error)

    def _check(self, generation: int) -> None:
        if generation != self._generation:
            raise _Superseded()

    async def _attempt(self, generation: int) -> str | None:
        """One pass of Algorithm 1: None if every assigned partition was claimed, else why not."""
        self._stop_fetching()
        await self._commit(list(self._owned.values()))
        self._check(generation)
        await self._release(generation)
        subscriptions = await read_members(self.zookeeper, self.group, watch=self._members_watch(generation))
        self._check(generation)
        subscriptions = {member: s for member, s in subscriptions.items() if s is not None}
        brokers = dict(self._view.brokers)
        partitions = {
            topic: [paths.partition_name(b, p) for b, p in self._view.partitions(topic)]
            for topic in self._subscription
        }
        plan = consumer_assignment(self.consumer_id, subscriptions, partitions)
        conflicts = await self._claim(plan, generation)
        self._check(generation)
        if conflicts:
            return f"owned by another consumer: {', '.join(sorted(conflicts))}"
        offsets = await read_offsets(self.zookeeper, self.group, [(t, n) for t, owners in plan.items() for n in owners])
        self._check(generation)
        self._start_fetching(plan, offsets, brokers)
        return None

    def _stop_fetching(self) -> None:
        """Stop every fetch loop and drop what was fetched but not handed out."""
        for fetcher in self._fetchers:
            d = fetcher.stop()
            self._closing.add(d)
            d.addBoth(lambda _, d=d: self._closing.discard(d))
        self._fetchers = []
        for p in self._owned.values():
            p.active = False
        for streams in self._streams.values():
            for stream in streams:
                stream.clear()

    async def _release(self, generation: int | None = None) -> None:
        """Delete the owner nodes this session holds."""
        self._owned = {}
        results = await _gather(self._delete_owner(topic, name) for topic, name in sorted(self._owner_nodes))
        if generation is not None:
            self._check(generation)
        for ok, result in results:
            if not ok:
                result.raiseException()

    async def _delete_owner(self, topic: str, name: str) -> None:
        try:
            await self.zookeeper.delete(paths.owner_path(self.group, topic, name))
        except NoNodeError:
            pass
        self._owner_nodes.discard((topic, name))

    async def _claim(self, plan: dict[str, dict[str, str]], generation: int) -> list[str]:
        """Create the owner node of every partition in C{plan}; the names of those held by others."""
        items = [(topic, name, stream) for topic, owners in plan.items() for name, stream in owners.items()]
        results = await _gather(self._claim_one(*item, generation) for item in items)
        conflicts = []
        for (topic, name, _), (ok, result) in zip(items, results):
            if not ok:
                if result.check(_Superseded):
                    raise _Superseded()
                result.raiseException()
            if not result:
                conflicts.append(f"{topic}/{name}")
        return conflicts

    async def _claim_one(self, topic: str, name: str, stream_id: str, generation: int) -> bool:
        path = paths.owner_path(self.group, topic, name)
        for _ in range(2):
            self._check(generation)
            try:
                await self.zookeeper.create(path, stream_id.encode(), ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    _, stat = await self.zookeeper.get(path)
                except NoNodeError:
                    continue  # released meanwhile: try once more
                client_id = self.zookeeper.client_id
                if client_id is None or stat.ephemeralOwner != client_id[0]:
                    return False
                await self.zookeeper.set(path, stream_id.encode())  # ours already (a retried create)
            self._owner_nodes.add((topic, name))
            return True
        return False

    def _start_fetching(
        self, plan: dict[str, dict[str, str]], offsets: dict[tuple[str, str], int | None],
        brokers: dict[int, tuple[str, int]],
    ) -> None:
        by_broker: dict[int, list[OwnedPartition]] = {}
        for topic, owners in plan.items():
            for name, stream_id in sorted(owners.items()):
                broker_id, partition = paths.parse_partition_name(name)
                p = OwnedPartition(topic, name, broker_id, partition, self._stream_by_id[(topic, stream_id)],
                                   offsets.get((topic, name)))
                self._owned[(topic, name)] = p
                by_broker.setdefault(broker_id, []).append(p)
        for broker_id, partitions in sorted(by_broker.items()):
            fetcher = BrokerFetcher.connect(
                broker_id, brokers[broker_id], partitions, reactor=self._reactor, timeout_s=self.timeout_s,
                connect_timeout_s=self.connect_timeout_s, connect_attempts=self.connect_attempts,
                fetch_max_bytes=self.fetch_max_bytes, max_wait_ms=self.max_wait_ms, reset=self.auto_offset_reset,
            )
            self._fetchers.append(fetcher)
            fetcher.start()

    # -- offsets --------------------------------------------------------------------------

    async def _commit(self, partitions: list[OwnedPartition]) -> None:
        due = [(p, p.consumed) for p in partitions if p.consumed is not None and p.consumed != p.committed]
        written = await write_offsets(self.zookeeper, self.group, [(p.topic, p.name, v) for p, v in due])
        for (p, value), ok in zip(due, written):
            if ok:
                p.committed = value

    def _autocommit_tick(self) -> Deferred[None] | None:
        if self.state is not GroupState.STABLE:
            return None
        return self.commit().addErrback(lambda f: self._log.failure("autocommit failed", f))

    # -- closing --------------------------------------------------------------------------

    async def _close(self) -> None:
        previous = self.state
        self.state = GroupState.CLOSED
        self._generation += 1
        if self._autocommit is not None and self._autocommit.running:
            self._autocommit.stop()
        if self._suspicion is not None and self._suspicion.active():
            self._suspicion.cancel()
        self._wake_from_backoff()
        self.zookeeper.remove_state_listener(self._session_changed)
        if self._view is not None:
            self._view.remove_listener(self._cluster_changed)
            self._view.stop()
        owned = list(self._owned.values())
        self._stop_fetching()
        for streams in self._streams.values():
            for stream in streams:
                stream.close()
        self._tell_stable_waiters()
        if self._rebalancing is not None:  # it stops at its next step
            await self._bounded(self.when_stable())
        if previous is not GroupState.SESSION_LOST and self._subscription and self.zookeeper.connected:
            await self._bounded(Deferred.fromCoroutine(self._leave(owned)))
        self._owned = {}
        if self._closing:
            await DeferredList(list(self._closing), consumeErrors=True)
        if self._own_session and self._started:
            await self.zookeeper.stop()

    async def _leave(self, owned: list[OwnedPartition]) -> None:
        """Commit, release the owner nodes, deregister."""
        await self._commit(owned)
        await self._release()
        try:
            await self.zookeeper.delete(paths.consumer_ids_path(self.group, self.consumer_id))
        except NoNodeError:
            pass

    async def _bounded(self, d: Deferred) -> None:
        """Wait for C{d} at most C{timeout_s}, whatever it fires with (closing goes on regardless)."""
        d.addTimeout(self.timeout_s, self._reactor)
        try:
            await d
        except ClientClosed:
            pass
        except Exception as e:
            self._log.info("consumer {consumer} closing: {error}", consumer=self.consumer_id, error=_describe(e))
