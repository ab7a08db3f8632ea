# -*- test-case-name: tests.coord.test_replication_decisions -*-
"""The controller's decisions for replicated partitions: pure functions of what ZooKeeper says.

Given a partition's assignment, its current state (None before its first), the live brokers, the brokers
shutting down and the controller's epoch, L{decide} says what its state must become (a L{Decision}) or
that it is right as it is (None).  It is level-triggered: it looks at the state and the live brokers, not at
what happened, so a new controller that reads ZooKeeper decides as the old one would have.  The rules
(docs/replication.md, "Controller decisions"):

  - B{creation} (no state yet): the first live replica leads, the ISR is the live replicas, leader epoch 0;
    with no replica live, no leader (-1) and every replica in the ISR (all are empty, so all are in sync);
  - B{broker loss}: a leader that is not live is replaced by the first live ISR member in replica order,
    leader epoch + 1, the ISR less the brokers that are not live; with no ISR member live the partition goes
    offline (leader -1, epoch + 1) and keeps its ISR, the replicas that hold every acknowledged message, for
    when one of them returns.  A follower that is not live leaves the ISR (same leader and epoch);
  - B{unclean election} (only when enabled): an offline partition with no live ISR member but a live
    replica takes that replica as leader, with an ISR of itself: L{Decision.loss} says what may be lost;
  - B{broker return}: nothing for a partition that has a leader (the broker rejoins the ISR through the
    leader); an offline partition whose ISR member returns takes it as leader, epoch + 1;
  - B{controlled shutdown}: a partition led by a broker shutting down moves to another live ISR member
    (epoch + 1), and the broker leaves the ISRs it is in, where another member remains;
  - B{preferred-leader election} (L{decide_preferred}): the first replica takes the lead back once it has
    been in the ISR for a set time.

Each decision is one move of the partition's L{PartitionPhase} along L{PARTITION_MOVES}.  Pure: no
Twisted, no I/O, no clock (times are arguments).
"""

from __future__ import annotations

import enum
from collections.abc import Collection

import attrs

from twlog.coord.replication.values import NO_LEADER, PartitionState, TopicAssignment
from twlog.statemachine import StateMachine

__all__ = ["PARTITION_MOVES", "Decision", "InIsrSince", "OfflinePartitions", "PartitionPhase", "Reason", "decide",
           "decide_preferred", "phase_of"]


class PartitionPhase(enum.Enum):
    """Where a replicated partition is (Kafka's partition state machine).  Transitions::

        NONEXISTENT --the topic's assignment is written (create_replicated_topic)--> NEW
        NEW         --first state, a replica live------------------------------------> ONLINE
        NEW         --first state, no replica live----------------------------------> OFFLINE
        ONLINE      --leader moved (loss, shutdown, preferred) or ISR shrank-------> ONLINE
        ONLINE      --no ISR member live-----------------------------------------------> OFFLINE
        OFFLINE     --an ISR member returned, or an unclean election-------------------> ONLINE

    The table is L{PARTITION_MOVES}; L{decide} makes every move but the first.
    """

    NONEXISTENT = "nonexistent"
    NEW = "new"
    ONLINE = "online"
    OFFLINE = "offline"


PARTITION_MOVES: dict[PartitionPhase, set[PartitionPhase]] = {
    PartitionPhase.NONEXISTENT: {PartitionPhase.NEW},
    PartitionPhase.NEW: {PartitionPhase.ONLINE, PartitionPhase.OFFLINE},
    PartitionPhase.ONLINE: {PartitionPhase.ONLINE, PartitionPhase.OFFLINE},
    PartitionPhase.OFFLINE: {PartitionPhase.ONLINE},
}


class Reason(enum.Enum):
    """Why a partition's state changes."""

    CREATED = "created"
    LEADER_LOST = "leader lost"
    FOLLOWER_LOST = "follower lost"
    ISR_MEMBER_RETURNED = "ISR member returned"
    UNCLEAN = "unclean election"
    CONTROLLED_SHUTDOWN = "controlled shutdown"
    PREFERRED = "preferred leader"


def phase_of(assignment: TopicAssignment | None, state: PartitionState | None) -> PartitionPhase:
    """The phase a partition with this assignment and state is in."""
    return PartitionPhase.NONEXISTENT if assignment is None else _phase(state)


@attrs.frozen
class Decision:
    """A partition's state must go from C{old} (None: it has none yet) to C{new}, for C{reason}."""

    topic: str
    partition: int
    old: PartitionState | None
    new: PartitionState
    reason: Reason
    #: For an unclean election: what may be lost (a line for the log); else "".
    loss: str = ""

    @property
    def move(self) -> tuple[PartitionPhase, PartitionPhase]:
        return _phase(self.old), _phase(self.new)

    def __str__(self) -> str:
        old = "none" if self.old is None else _describe(self.old)
        return f"{self.topic}:{self.partition} {self.reason.value}: {old} -> {_describe(self.new)}"


def _describe(state: PartitionState) -> str:
    leader = "offline" if not state.online else f"leader {state.leader}"
    return f"{leader} epoch {state.leader_epoch} isr {list(state.isr)}"


def _phase(state: PartitionState | None) -> PartitionPhase:
    if state is None:
        return PartitionPhase.NEW
    return PartitionPhase.ONLINE if state.online else PartitionPhase.OFFLINE


def _checked(decision: Decision) -> Decision:
    """C{decision}, its move checked against L{PARTITION_MOVES} (an illegal one is a bug here)."""
    source, target = decision.move
    StateMachine(f"partition {decision.topic}:{decision.partition}", source, PARTITION_MOVES).move(target)
    return decision


def decide(assignment: TopicAssignment, partition: int, state: PartitionState | None, *, live: Collection[int],
           controller_epoch: int, shutting_down: Collection[int] = (), unclean: bool = False) -> Decision | None:
    """What partition C{partition}'s state must become (module docstring), or None if it is right as it is.

    @param live: the registered brokers (C{/brokers/ids}), those shutting down included.
    @param shutting_down: live brokers in a controlled shutdown: they lead nothing another ISR member can lead.
    @param unclean: whether an offline partition may take a replica outside its ISR as leader.
    """
    replicas = assignment.replicas(partition)
    topic = assignment.topic
    if state is None:
        return _checked(_create(topic, partition, replicas, live, shutting_down, controller_epoch))

    def make(leader: int, isr: Collection[int], reason: Reason, loss: str = "") -> Decision:
        epoch = state.leader_epoch + (leader != state.leader)
        return _checked(Decision(topic, partition, state, PartitionState(leader, epoch, controller_epoch, tuple(isr)),
                                 reason, loss))

    live_isr = [r for r in state.isr if r in live]
    candidates = _prefer_staying([r for r in replicas if r in live_isr], shutting_down)
    if state.online and state.leader in live:
        leaving = state.leader in shutting_down
        stays = [r for r in candidates if r not in shutting_down]
        if leaving and stays:
            return make(stays[0], [r for r in live_isr if r != state.leader], Reason.CONTROLLED_SHUTDOWN)
        isr = [r for r in live_isr if r == state.leader or r not in shutting_down]
        if tuple(isr) != state.isr:
            lost = [r for r in state.isr if r not in live]
            return make(state.leader, isr, Reason.FOLLOWER_LOST if lost else Reason.CONTROLLED_SHUTDOWN)
        return None
    if candidates:
        reason = Reason.LEADER_LOST if state.online else Reason.ISR_MEMBER_RETURNED
        leader = candidates[0]
        return make(leader, [r for r in live_isr if r == leader or r not in shutting_down], reason)
    others = _prefer_staying([r for r in replicas if r in live], shutting_down)
    if unclean and others:
        loss = (f"unclean election of {topic}:{partition}: broker {others[0]} was not in the ISR "
                f"{list(state.isr)}; messages acknowledged by the ISR and not on broker {others[0]} are lost")
        return make(others[0], [others[0]], Reason.UNCLEAN, loss)
    if state.online:
        return make(NO_LEADER, state.isr, Reason.LEADER_LOST)
    return None


def _prefer_staying(brokers: list[int], shutting_down: Collection[int]) -> list[int]:
    """C{brokers} in order, those shutting down last (they lead only when no other can)."""
    return [b for b in brokers if b not in shutting_down] + [b for b in brokers if b in shutting_down]


def _create(topic: str, partition: int, replicas: tuple[int, ...], live: Collection[int],
            shutting_down: Collection[int], controller_epoch: int) -> Decision:
    up = [r for r in replicas if r in live]
    leaders = _prefer_staying(up, shutting_down)
    if leaders:
        state = PartitionState(leaders[0], 0, controller_epoch, tuple(up))
    else:
        state = PartitionState(NO_LEADER, 0, controller_epoch, replicas)
    return Decision(topic, partition, None, state, Reason.CREATED)


def decide_preferred(assignment: TopicAssignment, partition: int, state: PartitionState, *, live: Collection[int],
                     controller_epoch: int, in_isr_since: float | None, now: float, delay_s: float,
                     shutting_down: Collection[int] = ()) -> Decision | None:
    """Give the lead back to the first replica (the preferred leader) if it is live, not shutting down, not the
    leader, and has been in the ISR since C{in_isr_since} for at least C{delay_s} by C{now}; else None."""
    preferred = assignment.replicas(partition)[0]
    if (not state.online or state.leader == preferred or preferred not in live or preferred in shutting_down
            or preferred not in state.isr or in_isr_since is None or now - in_isr_since < delay_s):
        return None
    new = PartitionState(preferred, state.leader_epoch + 1, controller_epoch, state.isr)
    return _checked(Decision(assignment.topic, partition, state, new, Reason.PREFERRED))


class InIsrSince:
    """When the controller first saw each partition's preferred replica in its ISR while another led it (the
    C{in_isr_since} of L{decide_preferred}); forgotten when it leaves the ISR or takes the lead."""

    def __init__(self) -> None:
        self._since: dict[tuple[str, int], float] = {}

    def seen(self, assignment: TopicAssignment, partition: int, state: PartitionState, now: float) -> float | None:
        """Note C{state} as read at C{now}; return since when the preferred replica has been waiting, or None."""
        key = (assignment.topic, partition)
        preferred = assignment.replicas(partition)[0]
        if preferred in state.isr and state.leader != preferred:
            return self._since.setdefault(key, now)
        self._since.pop(key, None)
        return None

    def keep_only(self, partitions: Collection[tuple[str, int]]) -> None:
        """Forget the partitions not in C{partitions} (their topic went)."""
        for key in set(self._since) - set(partitions):
            del self._since[key]


class OfflinePartitions:
    """The partitions the controller last found with no live leader (Kafka's OfflinePartitionsCount): after each
    partition's part of a round, the state it read or wrote has no leader, or a leader not live."""

    def __init__(self) -> None:
        self._offline: set[tuple[str, int]] = set()

    def __len__(self) -> int:
        return len(self._offline)

    def __contains__(self, key: object) -> bool:
        return key in self._offline

    def note(self, topic: str, partition: int, state: PartitionState | None, live: Collection[int]) -> None:
        """Partition C{partition} of C{topic} was settled at C{state} (None: not known, as it was)."""
        if state is None:
            return
        if state.online and state.leader in live:
            self._offline.discard((topic, partition))
        else:
            self._offline.add((topic, partition))

    def keep_only(self, partitions: Collection[tuple[str, int]]) -> None:
        """Forget the partitions not in C{partitions} (their topic went)."""
        self._offline &= set(partitions)
