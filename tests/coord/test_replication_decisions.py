"""The controller's decisions, as a table: (assignment, state, live brokers, ...) -> the new state."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.coord.replication.decisions import (
    PARTITION_MOVES,
    PartitionPhase,
    Reason,
    decide,
    decide_preferred,
    phase_of,
)
from twlog.coord.replication.values import PartitionState, TopicAssignment
from twlog.statemachine import StateMachine

P = PartitionPhase
ASSIGNMENT = TopicAssignment("clicks", {0: (1, 2, 3)}, {"min.insync.replicas": "2"})
EPOCH = 7  # the deciding controller's


def S(leader: int, epoch: int, isr, controller_epoch: int = 5) -> PartitionState:
    return PartitionState(leader, epoch, controller_epoch, tuple(isr))


#: name -> (state, live, shutting down, unclean, expected new state (None: no change), reason, move).
TABLE = {
    "creation, all live": (None, {1, 2, 3}, (), False, S(1, 0, [1, 2, 3], EPOCH), Reason.CREATED, (P.NEW, P.ONLINE)),
    "creation, first replica down": (None, {2, 3}, (), False, S(2, 0, [2, 3], EPOCH), Reason.CREATED,
                                     (P.NEW, P.ONLINE)),
    "creation, none live": (None, set(), (), False, S(-1, 0, [1, 2, 3], EPOCH), Reason.CREATED, (P.NEW, P.OFFLINE)),
    "all well": (S(1, 0, [1, 2, 3]), {1, 2, 3}, (), False, None, None, None),
    "leader lost: first live ISR member in replica order": (
        S(1, 4, [3, 1, 2]), {2, 3}, (), False, S(2, 5, [3, 2], EPOCH), Reason.LEADER_LOST, (P.ONLINE, P.ONLINE)),
    "leader lost: a live replica outside the ISR is not chosen": (
        S(1, 4, [1, 3]), {2, 3}, (), False, S(3, 5, [3], EPOCH), Reason.LEADER_LOST, (P.ONLINE, P.ONLINE)),
    "follower lost: leaves the ISR, same leader and epoch": (
        S(1, 4, [1, 2, 3]), {1, 3}, (), False, S(1, 4, [1, 3], EPOCH), Reason.FOLLOWER_LOST, (P.ONLINE, P.ONLINE)),
    "last ISR member lost: offline, the ISR kept": (
        S(2, 4, [2]), {1, 3}, (), False, S(-1, 5, [2], EPOCH), Reason.LEADER_LOST, (P.ONLINE, P.OFFLINE)),
    "whole ISR lost at once: offline, every member kept": (
        S(1, 4, [1, 2]), {3}, (), False, S(-1, 5, [1, 2], EPOCH), Reason.LEADER_LOST, (P.ONLINE, P.OFFLINE)),
    "unclean: a live replica outside the ISR leads": (
        S(2, 4, [2]), {1, 3}, (), True, S(1, 5, [1], EPOCH), Reason.UNCLEAN, (P.ONLINE, P.ONLINE)),
    "unclean from offline": (S(-1, 5, [2]), {3}, (), True, S(3, 6, [3], EPOCH), Reason.UNCLEAN, (P.OFFLINE, P.ONLINE)),
    "offline, nothing live": (S(-1, 5, [2]), set(), (), True, None, None, None),
    "offline, a non-ISR replica returns: stays offline": (S(-1, 5, [2]), {1, 3}, (), False, None, None, None),
    "offline, an ISR member returns: it leads": (
        S(-1, 5, [1, 2]), {2}, (), False, S(2, 6, [2], EPOCH), Reason.ISR_MEMBER_RETURNED, (P.OFFLINE, P.ONLINE)),
    "broker return: no leader change": (S(2, 5, [2, 3]), {1, 2, 3}, (), False, None, None, None),
    "controlled shutdown of the leader: another ISR member leads": (
        S(1, 4, [1, 2, 3]), {1, 2, 3}, {1}, False, S(2, 5, [2, 3], EPOCH), Reason.CONTROLLED_SHUTDOWN,
        (P.ONLINE, P.ONLINE)),
    "controlled shutdown of the only ISR member: it stays": (S(1, 4, [1]), {1, 2, 3}, {1}, False, None, None, None),
    "controlled shutdown of a follower: leaves the ISR": (
        S(1, 4, [1, 2, 3]), {1, 2, 3}, {3}, False, S(1, 4, [1, 2], EPOCH), Reason.CONTROLLED_SHUTDOWN,
        (P.ONLINE, P.ONLINE)),
    "leader lost, only a broker shutting down left in the ISR: it leads rather than none": (
        S(1, 4, [1, 2]), {2, 3}, {2}, False, S(2, 5, [2], EPOCH), Reason.LEADER_LOST, (P.ONLINE, P.ONLINE)),
    "leader lost, shutting-down members come last": (
        S(1, 4, [1, 2, 3]), {2, 3}, {2}, False, S(3, 5, [3], EPOCH), Reason.LEADER_LOST, (P.ONLINE, P.ONLINE)),
}


class DecisionTableTests(SynchronousTestCase):
    def test_table(self) -> None:
        for name, (state, live, shutting, unclean, new, reason, move) in TABLE.items():
            decision = decide(ASSIGNMENT, 0, state, live=live, controller_epoch=EPOCH, shutting_down=shutting,
                              unclean=unclean)
            if new is None:
                self.assertIsNone(decision, name)
                continue
            self.assertIsNotNone(decision, name)
            self.assertEqual((decision.new, decision.reason, decision.move, decision.old), (new, reason, move, state),
                             name)
            self.assertEqual(bool(decision.loss), reason is Reason.UNCLEAN, name)

    def test_decisions_are_fixed_points(self) -> None:
        """Deciding again on a decided state (same brokers) changes nothing: a new controller that reads what the
        last one wrote carries on without rewriting it."""
        for name, (state, live, shutting, unclean, new, _, _) in TABLE.items():
            if new is not None:
                again = decide(ASSIGNMENT, 0, new, live=live, controller_epoch=EPOCH, shutting_down=shutting,
                               unclean=unclean)
                self.assertIsNone(again, f"{name}: {again}")

    def test_every_move_is_made(self) -> None:
        """Each move of PARTITION_MOVES but NONEXISTENT -> NEW (create_replicated_topic's) is made by a row."""
        made = {row[6] for row in TABLE.values() if row[6] is not None}
        machine = StateMachine("partition", P.NONEXISTENT, PARTITION_MOVES)
        self.assertEqual(made | {(P.NONEXISTENT, P.NEW)}, set(machine.transitions()))

    def test_unclean_loss_is_said(self) -> None:
        decision = decide(ASSIGNMENT, 0, S(2, 4, [2]), live={1}, controller_epoch=EPOCH, unclean=True)
        self.assertIn("unclean election of clicks:0: broker 1 was not in the ISR [2]", decision.loss)
        self.assertIn("clicks:0 unclean election: leader 2 epoch 4 isr [2] -> leader 1 epoch 5 isr [1]", str(decision))

    def test_phase_of(self) -> None:
        self.assertIs(phase_of(None, None), P.NONEXISTENT)
        self.assertIs(phase_of(ASSIGNMENT, None), P.NEW)
        self.assertIs(phase_of(ASSIGNMENT, S(1, 0, [1])), P.ONLINE)
        self.assertIs(phase_of(ASSIGNMENT, S(-1, 0, [1])), P.OFFLINE)


class PreferredTests(SynchronousTestCase):
    def preferred(self, state, *, live=frozenset({1, 2, 3}), since=100.0, now=130.0, shutting=()):
        return decide_preferred(ASSIGNMENT, 0, state, live=live, controller_epoch=EPOCH, in_isr_since=since, now=now,
                                delay_s=30.0, shutting_down=shutting)

    def test_after_the_delay(self) -> None:
        decision = self.preferred(S(2, 5, [2, 3, 1]))
        self.assertEqual((decision.new, decision.reason), (S(1, 6, [2, 3, 1], EPOCH), Reason.PREFERRED))

    def test_not_yet_or_not_eligible(self) -> None:
        self.assertIsNone(self.preferred(S(2, 5, [2, 3, 1]), now=129.9), "too soon")
        self.assertIsNone(self.preferred(S(2, 5, [2, 3, 1]), since=None), "never seen in the ISR")
        self.assertIsNone(self.preferred(S(2, 5, [2, 3])), "not in the ISR")
        self.assertIsNone(self.preferred(S(1, 5, [1, 2, 3])), "leads already")
        self.assertIsNone(self.preferred(S(2, 5, [2, 3, 1]), live={2, 3}), "not live")
        self.assertIsNone(self.preferred(S(2, 5, [2, 3, 1]), shutting={1}), "shutting down")
        self.assertIsNone(self.preferred(S(-1, 5, [1])), "offline: decide's business")
