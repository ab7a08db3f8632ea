# -*- test-case-name: tests.replica.test_follower -*-
"""One partition this broker follows: L{Follower}, its fetcher.

On becoming a follower (KIP-101, docs/protocol.md "13 EPOCH_END_OFFSET"):

  1. it asks the leader where its own latest epoch ends, and truncates its log to the smaller of that
     and its own end of the epoch answered (KIP-279), or entirely when the leader knows no such epoch;
     never to its own high watermark.  In the same request it asks where the epoch before the leader's
     ends, which is where the leader's epoch begins: the follower records that epoch in its own
     checkpoint once its log reaches that offset, so that it can answer the same questions if it leads;
  2. it then sends REPLICA_FETCH from its end, in a loop, appending the leader's whole messages verbatim
     (C{Log.append_replica} at exactly the offset fetched, in a new segment when the leader's answer
     starts one: its segment files are the leader's, byte for byte) and taking the leader's high watermark
     (C{Log.high_watermark}, never past its own end).

Errors are retried after C{backoff_s}: a connection lost, NotLeader or an epoch that is not the
leader's (the controller's next state moves this follower); OffsetOutOfRange starts again from step 1,
after emptying the log to start at the leader's log start when its end is below it (the leader's
retention deleted what it lacks: C{Log.start_at}).
NotFollower stops it.  L{Follower.stop} ends the loop (the manager stops it on a leader change); every
loop turn is one request, so it is bounded by the requests' timeouts.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.errors import ClientClosed, NotFollower, OffsetOutOfRange, TwlogError, error_for
from twlog.protocol.replication_codec import (
    UNDEFINED_EPOCH,
    EpochEndOffsetRequest,
    EpochQuery,
    ReplicaFetch,
    ReplicaFetchRequest,
)
from twlog.storage.log import Log

__all__ = ["Follower"]


class _Restart(Exception):
    """Truncate again (the leader's log is not where this follower thought)."""


class Follower:
    """Broker C{broker_id} following C{topic}-C{partition} from broker C{leader_id} at C{leader_epoch}."""

    _log = Logger()

    def __init__(self, broker_id: int, topic: str, partition: int, log: Log, *, leader_id: int, leader_epoch: int,
                 connection: Any, clock: IReactorTime, max_bytes: int = 1_048_576 + 4, max_wait_ms: int = 500,
                 min_bytes: int = 1, backoff_s: float = 0.5, timeout_s: float = 30.0) -> None:
        self.broker_id, self.topic, self.partition, self.log = broker_id, topic, partition, log
        self.leader_id, self.leader_epoch = leader_id, leader_epoch
        self._connection, self._clock = connection, clock
        self.max_bytes, self.max_wait_ms, self.min_bytes = max_bytes, max_wait_ms, min_bytes
        self.backoff_s, self.timeout_s = backoff_s, timeout_s
        self._running: Deferred | None = None
        self._current: Deferred | None = None
        self._stopping = False
        #: The leader's epoch and where it begins on the leader, until this log reaches it.
        self._epoch_start: tuple[int, int] | None = None
        #: Set when the loop ended for good: the error that ended it (None: stopped).
        self.ended: BaseException | None = None
        #: How many truncations were made (tests, metrics).
        self.truncations = 0

    @property
    def connection(self) -> Any:
        """The connection to the leader this follower fetches on."""
        return self._connection

    def __repr__(self) -> str:
        return f"<Follower {self.topic}-{self.partition} of broker {self.leader_id} epoch {self.leader_epoch}>"

    def start(self) -> None:
        """Start following (once)."""
        if self._running is None:
            self._running = Deferred.fromCoroutine(self._run())
            self._running.addErrback(self._crashed)

    def stop(self) -> Deferred[None]:
        """Stop following: the request under way is cancelled; fires once the loop has ended."""
        self._stopping = True
        if self._current is not None:
            self._current.cancel()
        if self._running is None:
            return Deferred.fromCoroutine(_nothing())
        done: Deferred[None] = Deferred()
        self._running.addBoth(lambda result: (done.callback(None), result)[1])
        return done

    async def _await(self, d: Deferred) -> Any:
        self._current = d
        try:
            return await d
        finally:
            self._current = None

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._truncate()
                while not self._stopping:
                    await self._fetch_once()
            except (CancelledError, ClientClosed):
                if self._stopping:
                    return
                await self._backoff()
            except NotFollower as e:
                self._log.warn("{follower}: stops: {error}", follower=self, error=e)
                self.ended = e
                return
            except _Restart:
                continue
            except TwlogError as e:  # connection lost, NotLeader, an epoch not the leader's, a timeout
                if self._stopping:
                    return
                self._log.info("{error}; again in {backoff} s", backoff=self.backoff_s,
                               error=e if str(self) in str(e) else f"{self}: {e}")
                await self._backoff()

    async def _backoff(self) -> None:
        if not self._stopping:
            try:
                await self._await(deferLater(self._clock, self.backoff_s, lambda: None))
            except CancelledError:
                pass

    # -- step 1: truncation (KIP-101) ----------------------------------------------------

    async def _truncate(self) -> None:
        latest = self.log.epochs.latest_epoch
        queries = [EpochQuery(self.topic, self.partition, self.leader_epoch, latest)]
        if self.leader_epoch > 0:
            queries.append(EpochQuery(self.topic, self.partition, self.leader_epoch, self.leader_epoch - 1))
        response = await self._await(self._connection.request(EpochEndOffsetRequest(tuple(queries)),
                                                              timeout_s=self.timeout_s))
        for answer in response.answers:
            if answer.error:
                raise error_for(answer.error, f"{self}: EPOCH_END_OFFSET")
        ours = response.answers[0]
        if ours.leader_epoch == UNDEFINED_EPOCH:
            target = self.log.start_offset  # the leader knows none of this log's epochs: none of it is sure
        else:
            _, own_end = self.log.epochs.end_offset_for(ours.leader_epoch, self.log.end_offset)
            target = min(ours.end_offset, self.log.end_offset, *([own_end] if own_end >= 0 else []))
        target = max(target, self.log.start_offset)
        if target < self.log.end_offset:
            self._log.warn("{follower}: truncating from {end} to {target}, where epoch {epoch} ends on the leader",
                           follower=self, end=self.log.end_offset, target=target, epoch=ours.leader_epoch)
            self.truncations += 1
            await self._await(self.log.truncate_to(target))
        if len(response.answers) > 1 and response.answers[1].leader_epoch != UNDEFINED_EPOCH:
            self._epoch_start = (self.leader_epoch, response.answers[1].end_offset)
        else:
            self._epoch_start = (self.leader_epoch, min(self.log.end_offset, max(ours.end_offset, 0)))
        self._record_epoch()

    def _record_epoch(self) -> None:
        if self._epoch_start is not None and self.log.end_offset >= self._epoch_start[1]:
            epoch, start = self._epoch_start
            start = max(start, self.log.start_offset)  # (an epoch that began before this log's start)
            self._epoch_start = None
            self.log.epochs.assign(epoch, start).addErrback(
                lambda f: self._log.failure("{follower}: recording epoch {epoch}", f, follower=self, epoch=epoch))

    # -- step 2: fetching --------------------------------------------------------------

    async def _fetch_once(self) -> None:
        offset = self.log.end_offset
        request = ReplicaFetchRequest(self.broker_id, self.max_wait_ms, self.min_bytes, (
            ReplicaFetch(self.topic, self.partition, self.leader_epoch, offset, self.max_bytes),))
        response = await self._await(self._connection.request(
            request, timeout_s=self.timeout_s + self.max_wait_ms / 1000))
        if self._stopping:
            return
        part = response.parts[0]
        if part.error == OffsetOutOfRange.code and offset < part.log_start:
            self._log.warn("{follower}: its end {offset} is below the leader's log start {start} (retention): "
                           "emptying its log to start there", follower=self, offset=offset, start=part.log_start)
            self.truncations += 1
            await self._await(self.log.start_at(part.log_start))
            raise _Restart()
        if part.error == OffsetOutOfRange.code:
            self._log.warn("{follower}: offset {offset} is outside the leader's log [{start}, {end}]: truncating "
                           "again", follower=self, offset=offset, start=part.log_start, end=part.leader_end)
            raise _Restart()
        if part.error:
            raise error_for(part.error, f"{self}: REPLICA_FETCH from {offset}")
        whole, count = self.log.whole_replica(part.messages)  # the region may end in a partial message
        if whole:
            self.log.append_replica(part.messages[:whole], offset, leader_segment_base=part.segment_base, count=count)
            self._record_epoch()
        self.log.high_watermark = max(min(part.high_watermark, self.log.end_offset),
                                      self.log.high_watermark or 0)

    def _crashed(self, failure: Any) -> None:
        self.ended = failure.value
        self._log.failure("{follower}: the fetcher failed", failure, follower=self)


async def _nothing() -> None:
    return None
