# -*- test-case-name: tests.console.test_groups_sampler -*-
"""The console's lag sampler, and what the group routes share: the brokers' connections and the errors.

L{LagSampler} runs on C{context.reactor} every L{SAMPLE_INTERVAL_S}: it takes the next L{GROUPS_PER_TICK} groups
of ZooKeeper's C{/consumers} (so 1,000 groups are all sampled every few ticks, and a tick stays bounded), reads
their committed offsets, asks each partition's leader for its latest offset (OFFSETS -1, one request per
partition, all of a broker's sent at once on one connection kept open between ticks), and records the lag as
C{twlog groups} computes it (latest - committed, over the partitions whose latest is known) into
C{context.history}: C{group.<g>.lag} and C{group.<g>.<topic>:<partition>.lag}.  The list of groups
(C{GET /api/groups}) shows each group's last sample (L{LagSampler.latest}), never asking a broker per group, and
sorts by the members counted then.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from twlog.client.async_discovery import read_registrations_async
from twlog.console.http import ApiError
from twlog.consumer.admin import connector
from twlog.consumer.membership import read_offsets, sorted_children
from twlog.coord import paths
from twlog.coord.zk import ConnectionLoss, KazooException, SessionExpiredError
from twlog.errors import BrokerError, BrokerTimeout, ConnectionFailed
from twlog.partition import TopicPartition
from twlog.protocol.codec import LATEST, OffsetsRequest

#: How often the sampler takes a sample (seconds), and how many groups one tick samples at most.
SAMPLE_INTERVAL_S = 10.0
GROUPS_PER_TICK = 250

#: Where the sampler is kept in C{context.parts}, and where a test puts its own C{connect(host, port)}.
SAMPLER = "groups.sampler"
CONNECT = "broker.connect"

_log = Logger(namespace="twlog.console")


def broker_connect(context) -> Callable[[str, int], Any]:
    """C{connect(host, port)} for the console's broker connections: the context's client settings, asking once
    within its timeout (a test's own from C{context.parts[CONNECT]})."""
    return context.parts.get(CONNECT) or connector(context.reactor, context.options, context.timeout_s)


def require_zookeeper(context) -> None:
    """@raise ApiError: 503 naming ZooKeeper while the console's session is not connected."""
    if not context.zk.connected:
        raise zookeeper_unreachable(context)


def zookeeper_unreachable(context) -> ApiError:
    return ApiError(503, f"ZooKeeper at {context.zookeeper} is unreachable", [context.zk_unreachable()])


async def guarded(context, work):
    """Await C{work}, answering 503 (ZooKeeper lost meanwhile) or 502 (a broker unreachable) as one line."""
    try:
        return await work
    except (ConnectionLoss, SessionExpiredError, KazooException):
        raise zookeeper_unreachable(context) from None
    except (ConnectionFailed, BrokerTimeout) as e:
        text = str(e).splitlines()[0]
        raise ApiError(502, text, [text]) from None


@attrs.frozen
class GroupSample:
    """A group's last sample: when, its total lag (None: no partition's known), the topics it has offsets for, and
    how many members it had."""

    t: float
    lag: int | None
    topics: tuple[str, ...]
    members: int = 0


class LagSampler:
    """Samples the groups' lag into C{context.history} (module docstring); L{stop} ends it."""

    def __init__(self, context, interval_s: float = SAMPLE_INTERVAL_S, groups_per_tick: int = GROUPS_PER_TICK):
        self.context = context
        self.interval_s = interval_s
        self.groups_per_tick = groups_per_tick
        #: Each group's last sample, by name.
        self.latest: dict[str, GroupSample] = {}
        self._pending: deque[str] = deque()
        self._connections: dict[tuple[str, int], Any] = {}
        self._loop = LoopingCall(self._tick)
        self._loop.clock = context.reactor
        self._running: Deferred | None = None

    def start(self) -> LagSampler:
        self._loop.start(self.interval_s, now=True)
        return self

    def stop(self) -> Deferred:
        """Stop sampling and close the brokers' connections."""
        if self._loop.running:
            self._loop.stop()
        if self._running is not None:  # (a tick waiting for ZooKeeper or a broker: it ends now, quietly)
            self._running.cancel()
        connections, self._connections = list(self._connections.values()), {}
        return DeferredList([c.close() for c in connections], consumeErrors=True)

    def _tick(self) -> Deferred | None:
        if self._running is not None:  # (the last tick is still waiting for a slow broker: skip this one)
            return None
        self._running = Deferred.fromCoroutine(self.sample())
        self._running.addErrback(self._failed)
        self._running.addBoth(self._ran)
        return None

    def _failed(self, failure) -> None:
        """A tick that lost ZooKeeper is one line (the next tick tries again; the API names ZooKeeper meanwhile);
        anything else is logged with its traceback."""
        if failure.check(CancelledError):
            return
        if failure.check(ConnectionLoss, SessionExpiredError, KazooException):
            _log.warn("console: the lag sample stopped: ZooKeeper {zookeeper} went away ({error})",
                      zookeeper=self.context.zookeeper, error=failure.type.__name__)
            return
        _log.failure("the lag sampler failed", failure)

    def _ran(self, _) -> None:
        self._running = None

    async def sample(self) -> None:
        """One tick: the next groups' committed offsets, their partitions' latest offsets, and the lags."""
        zk = self.context.zk
        if not zk.connected:
            return
        if not self._pending:
            groups = await sorted_children(zk, paths.CONSUMERS)
            for gone in set(self.latest) - set(groups):
                del self.latest[gone]
            self._pending.extend(groups)
        batch = [self._pending.popleft() for _ in range(min(self.groups_per_tick, len(self._pending)))]
        committed: dict[str, dict[TopicPartition, int | None]] = {}
        members: dict[str, int] = {}
        await DeferredList([Deferred.fromCoroutine(self._committed(group, committed, members)) for group in batch],
                           consumeErrors=True)
        latest = await self._latest({tp for offsets in committed.values() for tp in offsets})
        now = self.context.now()
        history = self.context.history
        for group in batch:
            offsets = committed.get(group)
            if offsets is None:
                continue
            lags = {tp: max(latest[tp] - offset, 0) for tp, offset in offsets.items()
                    if offset is not None and tp in latest}
            history.record_many(now, ((f"group.{group}.{tp.topic}:{tp.name}.lag", lag) for tp, lag in lags.items()))
            total = sum(lags.values()) if lags else None
            history.record(f"group.{group}.lag", now, total)
            self.latest[group] = GroupSample(now, total, tuple(sorted({tp.topic for tp in offsets})),
                                             members.get(group, 0))

    async def _committed(self, group: str, into: dict, members: dict) -> None:
        zk = self.context.zk
        members[group] = len(await sorted_children(zk, paths.consumer_ids_path(group)))
        tps = [TopicPartition.from_name(topic, name)
               for topic in await sorted_children(zk, f"{paths.group_path(group)}/offsets")
               for name in await sorted_children(zk, paths.offset_path(group, topic)) if _is_name(topic, name)]
        into[group] = await read_offsets(zk, group, tps)

    async def _latest(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's latest offset from its leader (those whose leader is unknown or fails: left out)."""
        if not tps:
            return {}
        layout, _ = await read_registrations_async(self.context.zk, sorted({tp.topic for tp in tps}),
                                                   self.context.options.listener)
        by_address: dict[tuple[str, int], list[TopicPartition]] = {}
        for tp in sorted(tps):
            leader = layout.leader(tp)
            if leader is not None:
                by_address.setdefault(layout.brokers[leader], []).append(tp)
        result: dict[TopicPartition, int] = {}
        await DeferredList([Deferred.fromCoroutine(self._ask(address, items, result))
                            for address, items in by_address.items()], consumeErrors=True)
        return result

    async def _ask(self, address: tuple[str, int], tps: list[TopicPartition], into: dict) -> None:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = broker_connect(self.context)(*address)
        answers = await DeferredList([connection.request(OffsetsRequest(tp.topic, tp.number, LATEST, 1))
                                      for tp in tps], consumeErrors=True)
        failed = False
        for tp, (ok, answer) in zip(tps, answers):
            if ok:
                into[tp] = answer.offsets[0] if answer.offsets else 0
            elif not answer.check(BrokerError):  # (unreachable: a new connection next time)
                failed = True
        if failed and self._connections.get(address) is connection:
            del self._connections[address]
            await connection.close()


def _is_name(topic: str, name: str) -> bool:
    try:
        TopicPartition.from_name(topic, name)
    except ValueError:
        return False
    return True


def start_sampling(context, interval_s: float = SAMPLE_INTERVAL_S) -> LagSampler:
    """Start sampling the groups' lag (what C{twlog console}'s service calls at start; C{.stop()} at stop)."""
    sampler = LagSampler(context, interval_s)
    context.parts[SAMPLER] = sampler
    return sampler.start()
