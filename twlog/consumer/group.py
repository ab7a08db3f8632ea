# -*- test-case-name: tests.consumer.test_group,tests.integration.test_group,tests.integration.test_groups -*-
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
delivery is at-least-once, in order within a partition.  A member hands
messages out only while connected, writes offsets only in the session that
claimed the partitions, and commits first thing when a lost connection comes
back (docs/coordination.md, "Through a ZooKeeper loss").

Each time the partitions a member reads change (a rebalance ends with others,
the session is lost, a rebalance fails), or those that no member can read
(their broker is down) change, it logs one info line (L{AssignmentChange}:
C{now reading clicks:0-0..0-3 (4 partitions), gave up clicks:1-0..1-3; no
member can read 4 partitions: broker 1, which holds clicks:1-0..1-3, is not
registered: down?}) and tells the listeners of its L{GroupConsumer.assignments}.
"""

from __future__ import annotations

import os
import random
import socket
import uuid
from collections.abc import Callable, Mapping
from functools import partial

import attrs
from twisted.application.internet import backoffPolicy
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import Logger

from twlog.client.options import ClientOptions
from twlog.client.serde import Deserializer
from twlog.consumer.membership import Ownership, deregister_member, describe_error, register_member
from twlog.consumer.rebalance import encode_subscription, stream_ids, validate_subscription
from twlog.consumer.rebalancer import Consumption, GroupState, Rebalancer
from twlog.consumer.session import SessionEvents
from twlog.consumer.simple import check_on_corrupt
from twlog.consumer.stream import RESET_TIMES, BrokerFetcher, GroupMessage, GroupStream
from twlog.coord.cluster import ClusterView
from twlog.coord.layout import describe_offline
from twlog.coord.zk import IZooKeeper, ZooKeeper
from twlog.errors import ClientClosed, RebalanceFailed
from twlog.partition import TopicPartition, partition_ranges


def default_consumer_id() -> str:
    """C{<host>-<pid>-<8 hex digits>}: unique per consumer object."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@attrs.frozen
class AssignmentChange:
    """What a member reads after a change of its partitions, and what it gave up; L{describe} is its one line."""

    #: The partitions it reads now.
    now: frozenset[TopicPartition]
    #: The partitions it read before and no longer does.
    lost: frozenset[TopicPartition] = frozenset()
    #: Why, when it is not a completed rebalance (C{"the ZooKeeper session was lost"}).
    reason: str | None = None
    #: The subscribed partitions that no member of the group can read (their broker is down).
    unreadable: frozenset[TopicPartition] = frozenset()

    def describe(self) -> str:
        """C{now reading clicks:0-0..0-3 (4 partitions), gave up clicks:1-0..1-3; no member can read 4 partitions:
        broker 1, which holds clicks:1-0..1-3, is not registered: down?}."""
        count = len(self.now)
        text = (f"now reading {partition_ranges(self.now)} ({count} partition{'s' if count != 1 else ''})" if count
                else "now reading no partitions")
        if self.lost:
            text += f", gave up {partition_ranges(self.lost)}"
        text += f" ({self.reason})" if self.reason else ""
        if self.unreadable:
            count = len(self.unreadable)
            text += (f"; no member can read {count} partition{'s' if count != 1 else ''}: "
                     f"{describe_offline(self.unreadable)}")
        return text


class AssignmentReporter:
    """Logs (info) and tells the listeners what a member reads, each time a move of its state changes that."""

    _log = Logger()

    def __init__(self, consumer: GroupConsumer) -> None:
        self._consumer = consumer
        self._listeners: list[Callable[[AssignmentChange], object]] = []
        #: The partitions last reported; whether anything was (the first rebalance is said even if it gives none).
        self._reported: frozenset[TopicPartition] = frozenset()
        #: The partitions no member could read at the last report (said again only when that changes).
        self._unreadable: frozenset[TopicPartition] = frozenset()
        self._announced = False

    def add_listener(self, listener: Callable[[AssignmentChange], object]) -> None:
        """Call C{listener(change)} each time the partitions the member reads change (L{AssignmentChange})."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[AssignmentChange], object]) -> None:
        """Stop calling C{listener}."""
        self._listeners.remove(listener)

    def moved(self, source: GroupState, target: GroupState) -> None:
        """After a rebalance (STABLE), or on losing everything (SESSION_LOST, FAILED), report what changed."""
        if target is GroupState.STABLE:
            rebalancer = self._consumer.rebalancer
            self._report(frozenset(p.tp for p in rebalancer.consumption.active()), None, rebalancer.offline)
        elif target is GroupState.SESSION_LOST:
            self._report(frozenset(), "the ZooKeeper session was lost")
        elif target is GroupState.FAILED:
            self._report(frozenset(), "the rebalance failed")

    def _report(self, now: frozenset[TopicPartition], reason: str | None,
                unreadable: frozenset[TopicPartition] = frozenset()) -> None:
        """Report C{now} if it, or what no member can read, changed since the last report (or nothing was)."""
        if now == self._reported and unreadable == self._unreadable and self._announced:
            return
        self._announced = True
        change = AssignmentChange(now, self._reported - now, reason, unreadable)
        self._reported, self._unreadable = now, unreadable
        consumer = self._consumer
        self._log.info("consumer {consumer} of group {group}: {change}", consumer=consumer.consumer_id,
                       group=consumer.group, change=change.describe())
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                self._log.failure("consumer {consumer}: an assignment listener failed", consumer=consumer.consumer_id)


def _rebalancer_attribute(name: str, doc: str) -> property:
    """A read-only attribute of the consumer that is its rebalancer's C{name}."""
    return property(lambda self: getattr(self.rebalancer, name), doc=doc)


def _check_options(group: str, consumer_id: str, auto_offset_reset: str, rebalance_max_retries: int,
                   queued_max_messages: int, fetch_max_bytes: int) -> None:
    """@raise ValueError: one of L{GroupConsumer}'s options is bad."""
    if not group or "/" in group:
        raise ValueError(f"bad group name {group!r}")
    if "/" in consumer_id:
        raise ValueError(f"bad consumer id {consumer_id!r}")
    if auto_offset_reset not in RESET_TIMES:
        raise ValueError(f"auto_offset_reset must be 'smallest' or 'largest', not {auto_offset_reset!r}")
    if rebalance_max_retries < 1:
        raise ValueError("rebalance_max_retries must be at least 1")
    if queued_max_messages < 1 or fetch_max_bytes < 1:
        raise ValueError("queued_max_messages and fetch_max_bytes must be positive")


class GroupConsumer:
    """A member of consumer group C{group}: n message streams per topic, over the partitions it owns.

    @param zookeeper: a connect string (the consumer makes and closes its own
        session), or an L{IZooKeeper} (started or not; not stopped by L{close}).
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
    @param session_timeout_s: the ZooKeeper session timeout.  Disconnected, the
        consumer hands nothing out (it could not commit it) but goes on fetching;
        out of touch this long, it stops fetching and drops what it fetched (others
        may own its partitions by then) until it has rejoined.  When the session is
        back it first commits, then hands messages out again; after an expiry it
        commits nothing of the old session.
    @param on_corrupt: C{"fail"}: a corrupt message is raised by its stream, in its partition's
        place after the messages before it (L{twlog.storage.message.CorruptMessage}, naming the
        offsets), and the partition is not fetched any more; C{"skip"}: it is logged with its
        byte range and skipped.
    @param options: how the fetch loops talk to brokers (L{ClientOptions});
        C{timeout_s}, C{connect_timeout_s} and C{connect_attempts}, when given,
        replace its fields.
    @param fetcher_factory: C{(broker id, (host, port), [OwnedPartition])} -> a
        fetch loop (default: L{BrokerFetcher.connect} with the options above).
    @param manual_offsets: a message handed out is not consumed until L{acknowledge} says so (a mirror
        commits only what its target acknowledged).
    @param envelope: hand out payloads without their audit envelope (L{twlog.envelope}).
    @param deserializer: C{(topic, payload) -> value} (or a Deferred of it), such as L{twlog.avro.AvroDeserializer}:
        the streams hand out messages whose C{payload} is the value.
    """

    _log = Logger()

    def __init__(
        self,
        zookeeper: str | IZooKeeper,
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
        on_corrupt: str = "fail",
        options: ClientOptions | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
        connect_attempts: int | None = None,
        rng: random.Random | None = None,
        fetcher_factory: Callable[..., object] | None = None,
        manual_offsets: bool = False,
        envelope: bool = False,
        deserializer: Deserializer | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.group = group
        self.consumer_id = consumer_id or default_consumer_id()
        _check_options(group, self.consumer_id, auto_offset_reset, rebalance_max_retries, queued_max_messages,
                       fetch_max_bytes)
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.auto_offset_reset = auto_offset_reset
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self.queued_max_messages = queued_max_messages
        self.fetch_max_bytes = fetch_max_bytes
        self.max_wait_ms = max_wait_ms
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff_ms = rebalance_backoff_ms
        overrides = dict(timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, connect_attempts=connect_attempts)
        #: How the fetch loops talk to brokers: C{options} with the keywords given replacing its fields.
        self.options = ClientOptions.build(options, **{k: v for k, v in overrides.items() if v is not None})
        self.timeout_s = self.options.timeout_s
        self.session_timeout_s = session_timeout_s
        self._reactor = reactor
        self._rng = rng or random.Random()
        if IZooKeeper.providedBy(zookeeper):
            self.zookeeper, self._own_session = zookeeper, False
        else:
            self.zookeeper = ZooKeeper(zookeeper, reactor=reactor, session_timeout_s=session_timeout_s,
                                       credentials=self.options.zookeeper_credentials)
            self._own_session = True
        self._backoff = backoffPolicy(
            initialDelay=rebalance_backoff_ms / 1000, factor=1.5, maxDelay=4 * rebalance_backoff_ms / 1000,
            jitter=lambda: self._rng.random() * rebalance_backoff_ms / 1000,
        )
        if fetcher_factory is None:
            fetcher_factory = partial(
                BrokerFetcher.connect, reactor=reactor, options=self.options, fetch_max_bytes=fetch_max_bytes,
                max_wait_ms=max_wait_ms,
                reset=auto_offset_reset, on_corrupt=self.on_corrupt,
            )
        self._stream_options = dict(manual_offsets=manual_offsets, envelope=envelope, deserializer=deserializer)
        self._subscription: dict[str, int] = {}
        self._streams: dict[str, list[GroupStream]] = {}
        self._view: ClusterView | None = None
        #: The rebalance machinery, which holds the state; its owner nodes; the partitions consumed now.
        self.rebalancer = Rebalancer(
            self.zookeeper, group, self.consumer_id, clock=reactor, view=None, subscription=self._subscription,
            ownership=Ownership(self.zookeeper, group),
            consumption=Consumption(self.zookeeper, group, self._streams, fetcher_factory),
            max_retries=rebalance_max_retries, backoff=self._backoff,
        )
        #: Says what this member reads after each change (L{AssignmentReporter.add_listener}).
        self.assignments = AssignmentReporter(self)
        self.rebalancer.on_move = self.assignments.moved
        self._autocommit: LoopingCall | None = None
        self._started = False
        self._closed: Deferred[None] | None = None
        #: What a change of the ZooKeeper session does (L{SessionEvents}).
        self._session = SessionEvents(self)

    # -- state and statistics (the rebalancer's) -------------------------------------------

    state = _rebalancer_attribute("state", "Where the consumer is (L{GroupState}).")
    rebalances = _rebalancer_attribute("rebalances", "Completed rebalances.")
    retries = _rebalancer_attribute("retries", "Rebalance attempts that failed (mostly conflicts) and were retried.")
    last_rebalance_s = _rebalancer_attribute("last_rebalance_s", "How long the last completed rebalance took.")
    rebalancing = _rebalancer_attribute("running", "Whether a rebalance runs now (or one more is due after it).")

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
        consumption = self.rebalancer.consumption
        return Deferred.fromCoroutine(consumption.commit(consumption.active()))

    def acknowledge(self, message: GroupMessage) -> None:
        """With C{manual_offsets}: C{message}, and everything of its partition before it, is done; commits
        may write the offset after it while this consumer owns the partition."""
        self.acknowledge_offset(message.partition, message.next_offset)

    def acknowledge_offset(self, partition: TopicPartition, next_offset: int) -> None:
        """With C{manual_offsets}: everything of C{partition} before C{next_offset} is done (a lower offset
        than one acknowledged before is ignored)."""
        self.rebalancer.consumption.acknowledge(partition, next_offset)

    def close(self) -> Deferred[None]:
        """Commit, release the partitions, leave the group, and close the session and connections; streams end."""
        if self._closed is None:
            self._closed = Deferred.fromCoroutine(self._close())
        return self._closed

    def owned(self) -> dict[str, dict[str, str]]:
        """The partitions this consumer delivers now: topic -> {partition name: stream id}."""
        return self.rebalancer.consumption.by_topic()

    def when_stable(self) -> Deferred[None]:
        """Fire once the consumer is STABLE with no rebalance running or due (L{RebalanceFailed} if it FAILED)."""
        return self.rebalancer.when_stable()

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
        self._subscription.update(subscription)
        for topic, count in subscription.items():
            self._streams[topic] = [GroupStream(topic, sid, self.queued_max_messages, **self._stream_options)
                                    for sid in stream_ids(self.consumer_id, count)]
        await self._start()
        self._view = self.rebalancer.view = ClusterView(self.zookeeper, subscription,
                                                                listener=self.options.listener)
        await self._view.start()
        self._view.add_listener(self.rebalancer.request)
        await self._register()
        if self.state is GroupState.CLOSED:
            if self.zookeeper.connected:  # closed while registering: leave again
                await self._bounded(Deferred.fromCoroutine(self._leave([])))
            raise ClientClosed("the group consumer was closed")
        self.rebalancer.join()
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

    def _session_changed(self, state: str) -> None:
        """The ZooKeeper session's state changed (L{SessionEvents})."""
        self._session.changed(state)

    def _logged(self, d: Deferred, what: str) -> None:
        d.addErrback(lambda f: self._log.failure("consumer {consumer}: {what} failed", f, consumer=self.consumer_id,
                                                 what=what))

    def _autocommit_tick(self) -> Deferred[None] | None:
        if self.state is not GroupState.STABLE or not self.zookeeper.connected:
            return None  # (out of touch: the offsets are committed first thing when the session is back)
        return self.commit().addErrback(lambda f: self._log.failure("autocommit failed", f))

    # -- closing --------------------------------------------------------------------------

    async def _close(self) -> None:
        previous = self.rebalancer.close()
        if self._autocommit is not None and self._autocommit.running:
            self._autocommit.stop()
        self._session.cancel()
        self.zookeeper.remove_state_listener(self._session_changed)
        if self._view is not None:
            self._view.remove_listener(self.rebalancer.request)
            self._view.stop()
        consumption = self.rebalancer.consumption
        owned = list(consumption.owned.values())
        consumption.stop()
        consumption.close_streams()
        self.rebalancer.tell_stable_waiters()
        if self.rebalancer.running:  # it stops at its next step
            await self._bounded(self.when_stable())
        if previous is not GroupState.SESSION_LOST and self._subscription and self.zookeeper.connected:
            await self._bounded(Deferred.fromCoroutine(self._leave(owned)))
        elif owned and self.zookeeper.connected:  # out of touch, then back in the same session: still its own
            await self._bounded(Deferred.fromCoroutine(consumption.commit(owned)))
        consumption.owned = {}
        await consumption.closed()
        if self._own_session and self._started:
            await self.zookeeper.stop()

    async def _leave(self, owned) -> None:
        """Commit, release the owner nodes, deregister."""
        consumption = self.rebalancer.consumption
        await consumption.commit(owned)
        uncommitted = consumption.uncommitted()
        if uncommitted:  # leaving anyway: the next owner delivers these partitions again from the last commit
            self._log.warn("consumer {consumer} closing without committing {partitions}: they will be delivered "
                           "again from their last committed offset", consumer=self.consumer_id,
                           partitions=partition_ranges(p.tp for p in uncommitted))
            consumption.forget()
        await self.rebalancer.release()
        await deregister_member(self.zookeeper, self.group, self.consumer_id)

    async def _bounded(self, d: Deferred) -> None:
        """Wait for C{d} at most C{timeout_s}, whatever it fires with (closing goes on regardless)."""
        await _bounded(d, self.timeout_s, self._reactor, self.consumer_id)


async def _bounded(d: Deferred, timeout_s: float, clock, consumer_id: str) -> None:
    d.addTimeout(timeout_s, clock)
    try:
        await d
    except ClientClosed:
        pass
    except Exception as e:
        GroupConsumer._log.info("consumer {consumer} closing: {error}", consumer=consumer_id, error=describe_error(e))


__all__ = ["AssignmentChange", "GroupConsumer", "GroupState", "default_consumer_id"]
