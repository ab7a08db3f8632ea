# -*- test-case-name: tests.replica.test_handlers -*-
"""The leader's answers to its followers, REPLICA_FETCH (type 12) and EPOCH_END_OFFSET (type 13), and to tools,
REPLICA_STATUS (type 15).

docs/protocol.md, "Replication requests", is the reference.  L{ReplicaHandlers} finds the partition's
L{LeaderPartition} (C{leaders}), checks the request's leader epoch (older: FencedLeaderEpoch, 27; newer:
UnknownLeaderEpoch, 28) and, for a fetch, that the replica is one of the partition's followers
(NotFollower, 29); a partition this broker does not lead is NotLeader (16).  A fetch's offset is that
follower's end: the leader records it (L{LeaderPartition.fetched}) before reading, so the high watermark
in the answer already counts it.  The bytes are read up to the leader's written end (L{Log.read_replica})
and sent with sendfile, as FETCH's, from one segment, whose base offset the answer gives (the follower's
segments start where the leader's do); a fetch with fewer than C{min_bytes} is held, as WAIT_FETCH, until
the leader appends or C{max_wait_ms} (capped by C{max_fetch_wait_ms}) passes.  REPLICA_STATUS answers
what the leader knows: its epoch, high watermark and end, and each follower's end and time since it was
last caught up (L{ReplicaState}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from twlog.errors import (
    NO_ERROR,
    BrokerError,
    FencedLeaderEpoch,
    FetchSizeTooSmall,
    NotFollower,
    NotLeader,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    UnknownLeaderEpoch,
)
from twlog.protocol.handling import Response
from twlog.protocol.replica_status_codec import (
    REPLICA_STATUS,
    UNKNOWN,
    FollowerStatus,
    ReplicaStatus,
    ReplicaStatusRequest,
    encode_replica_status_response,
)
from twlog.protocol.replication_codec import (
    ANY_EPOCH,
    EPOCH_END_OFFSET,
    REPLICA_FETCH,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEndOffset,
    EpochEndOffsetRequest,
    ReplicaFetch,
    ReplicaFetchRequest,
    encode_epoch_end_offset_response,
    replica_fetch_part_header,
    replica_fetch_response_header,
)
from twlog.replica.leader import LeaderPartition
from twlog.storage.segment import FileRegion

__all__ = ["ReplicaHandlers"]

#: The errors whose parts still carry the leader's offsets (docs/protocol.md), so the follower knows where to go.
_OFFSETS_KEPT = (OffsetOutOfRange.code, FetchSizeTooSmall.code, OffsetNotOnBoundary.code)

Leaders = Callable[[str, int], LeaderPartition | None]


@attrs.define(eq=False)
class _Held:
    request: ReplicaFetchRequest
    deferred: Deferred
    keys: set[tuple[str, int]]
    timer: Any = None


@attrs.frozen
class _Part:
    error: int
    high_watermark: int = -1
    leader_end: int = -1
    log_start: int = -1
    segment_base: int = -1
    region: FileRegion | None = None

    @property
    def length(self) -> int:
        return self.region.length if self.region is not None else 0


def check_epoch(leader: LeaderPartition, asked: int, what: str) -> None:
    """@raise FencedLeaderEpoch: C{asked} is older than the leader's epoch.
    @raise UnknownLeaderEpoch: it is newer."""
    if asked == ANY_EPOCH or asked == leader.leader_epoch:
        return
    name = f"{leader.topic}-{leader.partition}"
    if asked < leader.leader_epoch:
        raise FencedLeaderEpoch(f"{what} of {name} in leader epoch {asked}, but it is at {leader.leader_epoch}")
    raise UnknownLeaderEpoch(f"{what} of {name} in leader epoch {asked}, but this broker knows {leader.leader_epoch}")


class ReplicaHandlers:
    """REPLICA_FETCH, EPOCH_END_OFFSET and REPLICA_STATUS over the partitions this broker leads
    (C{leaders(topic, partition)}).

    Call L{changed} when a led partition's log grows or its high watermark moves (wakes held fetches).
    """

    def __init__(self, leaders: Leaders, clock: IReactorTime, count_error: Callable[[int, int], Any],
                 max_fetch_wait_ms: int = 30_000) -> None:
        """@param count_error: C{count_error(request type, code)} for each error answered (the broker's metrics)."""
        self._leaders = leaders
        self._clock = clock
        self._count_error = count_error
        self._max_wait_ms = max_fetch_wait_ms
        self._held: dict[tuple[str, int], set[_Held]] = {}

    def _leader(self, topic: str, partition: int) -> LeaderPartition:
        leader = self._leaders(topic, partition)
        if leader is None:
            raise NotLeader(f"this broker does not lead {topic}-{partition}")
        return leader

    # -- REPLICA_FETCH -----------------------------------------------------------------

    def _part(self, replica_id: int, fetch: ReplicaFetch, record: bool) -> _Part:
        try:
            leader = self._leader(fetch.topic, fetch.partition)
            check_epoch(leader, fetch.leader_epoch, f"replica {replica_id} fetched")
            if replica_id not in leader.state.followers:
                raise NotFollower(f"broker {replica_id} is not a follower of {fetch.topic}-{fetch.partition} "
                                  f"(replicas {list(leader.state.replicas)})")
        except BrokerError as e:
            return _Part(e.code)
        log = leader.log
        try:
            region = log.read_replica(fetch.offset, fetch.max_bytes)
        except BrokerError as e:
            if e.code in _OFFSETS_KEPT:
                return _Part(e.code, leader.state.high_watermark, log.end_offset, log.start_offset)
            return _Part(e.code)
        if record:
            leader.fetched(replica_id, fetch.offset)
        return _Part(NO_ERROR, leader.state.high_watermark, log.end_offset, log.start_offset,
                     -1 if region.segment is None else region.segment.base_offset, region)

    def _answer(self, parts: list[_Part]) -> Response:
        lengths = [p.length for p in parts]
        out: list[bytes | FileRegion] = [replica_fetch_response_header(NO_ERROR, lengths)]
        for part, length in zip(parts, lengths):
            if part.error:
                self._count_error(REPLICA_FETCH, part.error)
            out.append(replica_fetch_part_header(part.error, part.high_watermark, part.leader_end, part.log_start,
                                                 part.segment_base, length))
            if length:
                out.append(part.region)
        return out

    def replica_fetch(self, request: ReplicaFetchRequest, peer: str = "?") -> Response | Deferred[Response]:
        """REPLICA_FETCH: record each follower end, then answer once C{min_bytes} are there or the wait ends."""
        parts = [self._part(request.replica_id, f, record=True) for f in request.fetches]
        if (request.max_wait_ms <= 0 or any(p.error for p in parts)
                or sum(p.length for p in parts) >= request.min_bytes):
            return self._answer(parts)
        held = _Held(request, Deferred(canceller=lambda d: self._forget(held)),
                     {(f.topic, f.partition) for f in request.fetches})
        held.timer = self._clock.callLater(min(request.max_wait_ms, self._max_wait_ms) / 1000, self._wake, held)
        for key in held.keys:
            self._held.setdefault(key, set()).add(held)
        return held.deferred

    def changed(self, topic: str, partition: int) -> None:
        """C{topic}-C{partition}'s log grew or its high watermark moved: answer the fetches held on it."""
        for held in list(self._held.get((topic, partition), ())):
            self._wake(held)

    def _wake(self, held: _Held) -> None:
        self._forget(held)
        held.deferred.callback(self._answer([self._part(held.request.replica_id, f, record=False)
                                             for f in held.request.fetches]))

    def _forget(self, held: _Held) -> None:
        if held.timer is not None and held.timer.active():
            held.timer.cancel()
        for key in held.keys:
            waiting = self._held.get(key)
            if waiting is not None:
                waiting.discard(held)
                if not waiting:
                    del self._held[key]

    def held_fetches(self) -> int:
        """How many REPLICA_FETCHes are held (tests and stats)."""
        return len({id(h) for hs in self._held.values() for h in hs})

    # -- EPOCH_END_OFFSET ----------------------------------------------------------------

    def _end_of(self, query) -> EpochEndOffset:
        try:
            leader = self._leader(query.topic, query.partition)
            check_epoch(leader, query.current_leader_epoch, "asked for an epoch's end")
        except BrokerError as e:
            self._count_error(EPOCH_END_OFFSET, e.code)
            return EpochEndOffset(e.code, UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        epoch, end = leader.log.epochs.end_offset_for(query.leader_epoch, leader.log.end_offset)
        return EpochEndOffset(NO_ERROR, epoch, end)

    def epoch_end_offset(self, request: EpochEndOffsetRequest, peer: str = "?") -> Response:
        """EPOCH_END_OFFSET: where each asked epoch ends on this leader (KIP-101)."""
        return encode_epoch_end_offset_response(NO_ERROR, [self._end_of(q) for q in request.queries])

    # -- REPLICA_STATUS -----------------------------------------------------------------

    def _status_of(self, topic: str, partition: int) -> ReplicaStatus:
        try:
            leader = self._leader(topic, partition)
        except BrokerError as e:
            self._count_error(REPLICA_STATUS, e.code)
            return ReplicaStatus(partition, e.code)
        state, end, now = leader.state, leader.log.end_offset, self._clock.seconds()
        followers = tuple(FollowerStatus(r, state.ends.get(r, UNKNOWN), round(state.lag(r, end, now)[1] * 1000))
                          for r in state.followers)
        return ReplicaStatus(partition, NO_ERROR, leader.leader_epoch, state.high_watermark, end, followers)

    def replica_status(self, request: ReplicaStatusRequest, peer: str = "?") -> Response:
        """REPLICA_STATUS: what this leader knows of each asked partition's replicas (NotLeader for the others)."""
        return encode_replica_status_response(NO_ERROR, [self._status_of(request.topic, p)
                                                         for p in request.partitions])
