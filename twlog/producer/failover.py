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

Order: one request at a time per replicated partition, its batches in the order they were sent
(L{PartitionQueue}), so a later batch never overtakes one being retried: Kafka's
C{max.in.flight.requests=1}.  Batches sent while a request is out wait, and go together in the next
request (one set each, up to L{COALESCE_BYTES}), each answered with its own offsets: a slow
acknowledgement (C{ack="all"}: the followers' fetches and the leader's fsync) is paid once for every
batch that waited for it, as Kafka's accumulator fills its next batch while one is in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from twisted.internet.defer import Deferred
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

__all__ = ["COALESCE_BYTES", "FOLLOW_ON", "MAX_BACKOFF_S", "PartitionQueue", "deliver_following", "wait_created"]

#: What sends a replicated partition's batch again, to its leader as the router learns it again.
FOLLOW_ON = (NotLeader, LeaderNotAvailable, NotEnoughReplicas, ConnectionFailed)

#: The longest wait between two attempts at a replicated partition whose leader is moving.
MAX_BACKOFF_S = 1.0

T = TypeVar("T")


#: The most payload bytes one request to a replicated partition carries when batches have waited (a batch
#: larger than this goes alone): Kafka's C{max.request.size} default.
COALESCE_BYTES = 1024 * 1024

Outcome = Any  # a set's result (ProduceResult or None), or the Exception that refused it

SendSets = Callable[[TopicPartition, list[list[bytes]]], Awaitable[list[Outcome]]]


class PartitionQueue:
    """One request at a time per partition, in the order the batches came; the batches that came while one was
    out go together in the next request.

    C{send(tp, sets)} delivers C{sets} in one request and gives each set's outcome in order (raising for a
    failure of the whole request, which every batch of it then gets).  An outcome that is one of L{FOLLOW_ON}
    (the leader moved between two sets of a request) puts that batch and the later ones back at the head of
    the queue, to be sent again in order.
    """

    def __init__(self, send: SendSets, max_bytes: int = COALESCE_BYTES) -> None:
        self._send = send
        self._max_bytes = max_bytes
        self._waiting: dict[TopicPartition, deque[tuple[list[bytes], Deferred]]] = {}

    def deliver(self, tp: TopicPartition, payloads: list[bytes]) -> Deferred:
        """Deliver C{payloads} to C{tp} after every batch given before; fires with its outcome."""
        done: Deferred = Deferred()
        waiting = self._waiting.get(tp)
        if waiting is None:  # idle: this batch starts the partition's run
            waiting = self._waiting[tp] = deque()
            waiting.append((payloads, done))
            Deferred.fromCoroutine(self._run(tp, waiting))
        else:
            waiting.append((payloads, done))
        return done

    def busy(self, tp: TopicPartition) -> bool:
        """Whether a delivery to C{tp} is under way or waiting."""
        return tp in self._waiting

    def _take(self, waiting: deque[tuple[list[bytes], Deferred]]) -> list[tuple[list[bytes], Deferred]]:
        group = [waiting.popleft()]
        size = sum(map(len, group[0][0]))
        while waiting:
            more = sum(map(len, waiting[0][0]))
            if size + more > self._max_bytes:
                break
            group.append(waiting.popleft())
            size += more
        return group

    async def _run(self, tp: TopicPartition, waiting: deque[tuple[list[bytes], Deferred]]) -> None:
        try:
            while waiting:
                group = self._take(waiting)
                try:
                    outcomes = await self._send(tp, [payloads for payloads, _ in group])
                except Exception as e:
                    for _, done in group:
                        done.errback(e)
                    continue
                for n, ((payloads, done), outcome) in enumerate(zip(group, outcomes, strict=True)):
                    if isinstance(outcome, FOLLOW_ON):  # to be sent again, with the batches after it, in order
                        waiting.extendleft(reversed(group[n:]))
                        break
                    if isinstance(outcome, Exception):
                        done.errback(outcome)
                    else:
                        done.callback(outcome)
        finally:
            del self._waiting[tp]


async def deliver_following(producer: Any, target: TopicPartition, payloads: Any,
                            once: Callable[[Any, TopicPartition, Any], Awaitable[T]]) -> T:
    """C{once(producer, target, payloads)} (L{twlog.producer.delivery.deliver_sets}: one request to the leader the
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
