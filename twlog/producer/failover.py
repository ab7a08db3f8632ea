# -*- test-case-name: tests.producer.test_failover -*-
"""Delivering to a replicated partition across a leader change (L{deliver_following}), in order (L{Turns}).

A replicated partition keeps its number when its leader changes.  A batch for it that meets
L{NotLeader} (the broker follows it now), L{LeaderNotAvailable} (an election is under way),
L{NotEnoughReplicas} (refused before appending: the ISR is too small for C{ack="all"}) or a broker
that cannot be reached is sent again to the same partition, after the router learnt its leader again
(L{twlog.producer.router.Router.refresh}) and a backoff (the connections' retry policy, at most
L{MAX_BACKOFF_S}), until the producer's C{leader_wait_s} has passed: then the last error is raised.
Nothing was stored by those, so the resend is safe.  A batch that may have been stored (L{ConnectionLost}
after the write, the outcome unknown) is resent to the new leader too, counted against the producer's
C{retries} (at least once: it may be stored twice, never reordered).

Order: the batches of one replicated partition go one at a time, in the order they were sent
(L{Turns}), so a later batch never overtakes one being retried: Kafka's C{max.in.flight.requests=1}.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from twisted.internet.defer import DeferredLock
from twisted.internet.task import deferLater

from twlog.errors import (
    ConnectionFailed,
    ConnectionLost,
    LeaderNotAvailable,
    NotEnoughReplicas,
    NotLeader,
    PartitionsOffline,
)
from twlog.partition import TopicPartition

__all__ = ["FOLLOW_ON", "MAX_BACKOFF_S", "Turns", "deliver_following", "wait_created"]

#: What sends a replicated partition's batch again, to its leader as the router learns it again.
FOLLOW_ON = (NotLeader, LeaderNotAvailable, NotEnoughReplicas, ConnectionFailed)

#: The longest wait between two attempts at a replicated partition whose leader is moving.
MAX_BACKOFF_S = 1.0

T = TypeVar("T")


class Turns:
    """One delivery at a time per partition, in the order they asked (a FIFO lock per partition)."""

    def __init__(self) -> None:
        self._locks: dict[TopicPartition, DeferredLock] = {}

    async def run(self, tp: TopicPartition, work: Callable[[], Awaitable[T]]) -> T:
        """C{await work()} once every delivery to C{tp} asked before has finished."""
        lock = self._locks.get(tp)
        if lock is None:
            lock = self._locks[tp] = DeferredLock()
        await lock.acquire()
        try:
            return await work()
        finally:
            lock.release()
            if not lock.locked and not lock.waiting:
                self._locks.pop(tp, None)

    def busy(self, tp: TopicPartition) -> bool:
        """Whether a delivery to C{tp} is under way or waiting."""
        return tp in self._locks


async def deliver_following(producer: Any, target: TopicPartition, payloads: list[bytes],
                            once: Callable[[Any, TopicPartition, list[bytes]], Awaitable[T]]) -> T:
    """C{once(producer, target, payloads)} (L{twlog.producer.delivery.deliver}: one delivery to the leader the
    router knows), sent again as the module says.

    (C{producer} is the L{twlog.producer.producer.Producer} sending: its router, clock, options, C{retries}
    and C{leader_wait_s}.)

    @raise NotLeader: or another of L{FOLLOW_ON}, the last one met, once C{leader_wait_s} has passed.
    @raise ConnectionLost: the batch may be stored, and the producer's C{retries} are spent.
    """
    clock = producer._reactor
    deadline = clock.seconds() + producer.leader_wait_s
    policy = producer.options.backoff()
    attempt = resends = 0
    while True:
        try:
            return await once(producer, target, payloads)
        except FOLLOW_ON as e:
            if producer._closed and isinstance(e, ConnectionFailed):
                raise
            if isinstance(e, ConnectionLost):
                if resends >= producer.retries:
                    raise
                resends += 1
            attempt += 1
            delay = min(policy(attempt), MAX_BACKOFF_S)
            if clock.seconds() + delay > deadline:
                raise
            producer._log.info("{p}: {error}; sending the batch to its leader again in {delay:.2f} s", p=str(target),
                               error=str(e), delay=delay)
            await deferLater(clock, delay, lambda: None)
            try:
                await producer._router.refresh(target.topic)
            except ConnectionFailed as failed:
                producer._log.info("{p}: cannot learn its leader now ({error})", p=str(target), error=str(failed))


async def wait_created(producer, target: TopicPartition, error: LeaderNotAvailable | NotLeader,
                       waited: float) -> float:
    """A batch for a 0.7 partition got C{error}: its broker is creating the topic replicated
    (C{--default-replication-factor}: LeaderNotAvailable), or another broker made it replicated first
    (NotLeader), and stored nothing.  Wait a little and forget the topic's layout, so the batch goes to a
    partition of the replicated topic once it has leaders; the time waited so far.

    @raise LeaderNotAvailable: C{error}, for a replicated partition (its own failover handled it), a partition
        of a broker that is down (L{PartitionsOffline}), or once C{producer.leader_wait_s} has passed.
    """
    if isinstance(error, PartitionsOffline) or target.fixed_leader is None or waited >= producer.leader_wait_s:
        raise error
    producer._router.forget(target.topic)
    await deferLater(producer._reactor, MAX_BACKOFF_S / 4, lambda: None)
    return waited + MAX_BACKOFF_S / 4
