# -*- test-case-name: tests.replica.test_state -*-
"""A leader's view of one partition's replicas: L{ReplicaState} (pure: no I/O, the time is passed in).

The leader keeps, for each follower, its end (the offset of its latest REPLICA_FETCH: everything
before it is on that follower) and the last time it was caught up (a fetch at or past the leader's
end).  From those:

  - the high watermark is the minimum end over the ISR, the leader's own end included, and never
    moves backwards (a follower that fetches from below it, after a truncation, does not pull it
    back: what was acknowledged stays acknowledged);
  - a follower that has not been caught up for C{lag_time_ms} leaves the ISR; one whose end has
    reached the high watermark (and so holds every acknowledged message) joins it again.

ISR changes are requested (L{ReplicaState.wanted_isr}) and take effect only once written to
ZooKeeper by compare-and-set (L{ReplicaState.isr_written}), as Kafka 0.8's leader does.  A failed
compare-and-set or a suspended or lost ZooKeeper session fences the leader (L{ReplicaState.fence}):
from that moment it acknowledges nothing (L{ReplicaState.acknowledging}) until it has read the state
again and found itself still the leader at the same epoch (L{ReplicaState.unfence}).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

__all__ = ["DEFAULT_REPLICA_LAG_TIME_MS", "ReplicaState"]

#: Kafka's C{replica.lag.time.max.ms} default, and twlog's (C{--replica-lag-time-ms}).
DEFAULT_REPLICA_LAG_TIME_MS = 10_000
#: A follower outside the ISR joins only if it fetched within this many seconds (a follower fetches at least
#: every REPLICA_FETCH wait, 0.5 s by default): not on the last fetch of a broker that died caught up.
JOIN_FETCH_WINDOW_S = 2.0


@attrs.define
class ReplicaState:
    """One partition's replicas as its leader (broker C{leader}) sees them.

    @ivar replicas: the assigned replicas, in preference order (the leader among them).
    @ivar isr: the in-sync replicas as last written to ZooKeeper.
    @ivar min_isr: the partition's C{min.insync.replicas}.
    @ivar high_watermark: the minimum end over the ISR, never lower than before.
    @ivar ends: each follower's end, as its latest fetch said (unknown ones count as the starting high
        watermark: a follower in the ISR holds at least that).
    @ivar caught_up_at: each follower's last time (seconds) at or past the leader's end.
    @ivar fenced: a compare-and-set failed or the session is not connected: acknowledge nothing.
    """

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = attrs.field(converter=tuple)
    isr: tuple[int, ...] = attrs.field(converter=tuple)
    high_watermark: int
    now: float
    lag_time_ms: int = DEFAULT_REPLICA_LAG_TIME_MS
    min_isr: int = 1
    ends: dict[int, int] = attrs.field(factory=dict)
    caught_up_at: dict[int, float] = attrs.field(factory=dict)
    #: each follower's previous fetch: (time, the leader's end then).
    previous_fetch: dict[int, tuple[float, int]] = attrs.field(factory=dict)
    fenced: bool = False

    def __attrs_post_init__(self) -> None:
        if self.leader not in self.replicas:
            raise ValueError(f"broker {self.leader} leads a partition whose replicas are {list(self.replicas)}")
        for follower in self.followers:
            # Kafka's start: every follower counts as caught up when the leader starts, so that the
            # ISR the controller wrote is not shrunk before a follower had a chance to fetch.
            self.caught_up_at.setdefault(follower, self.now)
            if follower in self.isr:
                self.ends.setdefault(follower, self.high_watermark)

    @property
    def followers(self) -> tuple[int, ...]:
        """The replicas other than the leader, in preference order."""
        return tuple(r for r in self.replicas if r != self.leader)

    @property
    def acknowledging(self) -> bool:
        """Whether the leader may answer C{ack=all} (not fenced)."""
        return not self.fenced

    @property
    def enough_replicas(self) -> bool:
        """Whether the ISR is at least C{min.insync.replicas}: an C{ack=all} set may be appended."""
        return len(self.isr) >= self.min_isr

    def end_of(self, replica: int, leader_end: int) -> int:
        """C{replica}'s end as the leader knows it (the leader's own is C{leader_end})."""
        if replica == self.leader:
            return leader_end
        return self.ends.get(replica, 0)

    def lag(self, replica: int, leader_end: int, now: float) -> tuple[int, float]:
        """Follower C{replica}'s lag as the leader knows it (the metrics): bytes between its end and the leader's
        end C{leader_end}, and seconds since it was last caught up."""
        behind = max(leader_end - self.end_of(replica, leader_end), 0)
        return behind, max(now - self.caught_up_at.get(replica, now), 0.0)

    def _over_isr(self, leader_end: int, members: Iterable[int]) -> int:
        return min(self.end_of(r, leader_end) for r in members)

    def advance(self, leader_end: int) -> bool:
        """Recompute the high watermark from the ISR's ends (the leader's is C{leader_end}); True if it moved.

        It never moves backwards, and never past C{leader_end}.
        """
        candidate = min(self._over_isr(leader_end, self.isr), leader_end)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def fetched(self, replica: int, offset: int, leader_end: int, now: float) -> bool:
        """Follower C{replica} fetched from C{offset}: it holds everything before it.  True if the high
        watermark moved.

        As Kafka's C{lastCaughtUpTimeMs}: a fetch at or past C{leader_end} means it is caught up now, and one
        at or past the leader's end at its previous fetch means it was caught up then (so a follower keeping
        up with a steady stream of appends, one fetch behind, stays in sync).
        """
        if replica not in self.followers:
            raise ValueError(f"broker {replica} is not a follower of this partition ({list(self.replicas)})")
        self.ends[replica] = offset
        previous = self.previous_fetch.get(replica)
        if offset >= leader_end:
            self.caught_up_at[replica] = now
        elif previous is not None and offset >= previous[1]:
            self.caught_up_at[replica] = max(self.caught_up_at.get(replica, previous[0]), previous[0])
        self.previous_fetch[replica] = (now, leader_end)
        return self.advance(leader_end)

    def lagging(self, now: float) -> tuple[int, ...]:
        """The ISR's followers not caught up for longer than C{lag_time_ms}."""
        limit = self.lag_time_ms / 1000
        return tuple(r for r in self.isr if r != self.leader and now - self.caught_up_at.get(r, now) > limit)

    def wanted_isr(self, leader_end: int, now: float) -> tuple[int, ...] | None:
        """The ISR the leader should write, in replica order, or None when the current one is right.

        Lagging members leave; a follower outside it whose end has reached the high watermark (so holds
        every acknowledged message), that is not lagging and that fetched within L{JOIN_FETCH_WINDOW_S},
        joins.  The leader always stays.  A fenced leader asks for nothing.
        """
        if self.fenced:
            return None
        out = set(self.lagging(now))
        limit = self.lag_time_ms / 1000
        # (and fetching now: a follower that died caught up, which the controller took out, must not come back
        # on its last fetch; at a fetch this holds at once)
        joining = {r for r in self.followers if r not in self.isr and r in self.ends
                   and self.ends[r] >= self.high_watermark and now - self.caught_up_at.get(r, now) <= limit
                   and now - self.previous_fetch.get(r, (now - JOIN_FETCH_WINDOW_S - 1, 0))[0] <= JOIN_FETCH_WINDOW_S}
        wanted = tuple(r for r in self.replicas if (r in self.isr and r not in out) or r in joining or r == self.leader)
        return None if set(wanted) == set(self.isr) else wanted

    def isr_written(self, isr: Iterable[int], leader_end: int) -> bool:
        """The ISR C{isr} is now in ZooKeeper; True if the high watermark moved (a shrink can move it on)."""
        self.isr = tuple(isr)
        return self.advance(leader_end)

    def fence(self) -> None:
        """Stop acknowledging at once (a failed compare-and-set, or the session suspended or lost)."""
        self.fenced = True

    def unfence(self, isr: Iterable[int], leader_end: int) -> bool:
        """The state was read again and this broker still leads at the same epoch, with C{isr}: go on.
        True if the high watermark moved."""
        self.fenced = False
        return self.isr_written(isr, leader_end)
