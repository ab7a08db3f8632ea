"""L{twlog.statemachine}: a state changes only along its table's moves, and an illegal move raises."""

from __future__ import annotations

import enum

from twisted.trial.unittest import SynchronousTestCase

from twlog.statemachine import IllegalTransition, StateMachine, logged_by


class Door(enum.Enum):
    OPEN = "open"
    SHUT = "shut"
    LOCKED = "locked"
    GONE = "gone"


TABLE = {
    Door.OPEN: {Door.SHUT, Door.GONE},
    Door.SHUT: {Door.OPEN, Door.LOCKED, Door.GONE},
    Door.LOCKED: {Door.SHUT, Door.LOCKED},
}


class Other(enum.Enum):
    X = "x"


class StateMachineTests(SynchronousTestCase):
    def machine(self, observer=None) -> StateMachine[Door]:
        return StateMachine("door", Door.OPEN, TABLE, observer)

    def test_moves_along_the_table(self) -> None:
        """A move in the table changes the state and returns the state moved from."""
        machine = self.machine()
        self.assertIs(machine.state, Door.OPEN)
        self.assertIs(machine.move(Door.SHUT), Door.OPEN)
        self.assertIs(machine.move(Door.LOCKED), Door.SHUT)
        self.assertIs(machine.state, Door.LOCKED)

    def test_illegal_move_raises(self) -> None:
        """A move not in the table raises IllegalTransition naming machine, from and to, and changes nothing."""
        machine = self.machine()
        error = self.assertRaises(IllegalTransition, machine.move, Door.LOCKED)
        self.assertEqual((error.machine, error.source, error.target), ("door", Door.OPEN, Door.LOCKED))
        self.assertEqual(str(error), "door: no move from OPEN to LOCKED")
        self.assertIs(machine.state, Door.OPEN)

    def test_same_state_only_if_listed(self) -> None:
        """Staying put is a move like any other: allowed only where the table lists it."""
        machine = self.machine()
        self.assertRaises(IllegalTransition, machine.move, Door.OPEN)
        machine.move(Door.SHUT)
        machine.move(Door.LOCKED)
        machine.move(Door.LOCKED)
        self.assertIs(machine.state, Door.LOCKED)

    def test_final_state(self) -> None:
        """A state missing from the table is final: every move from it raises."""
        machine = self.machine()
        machine.move(Door.GONE)
        for target in Door:
            self.assertRaises(IllegalTransition, machine.move, target)
            self.assertFalse(machine.allows(target))

    def test_sources(self) -> None:
        """A move the table allows still raises when it does not start where the caller says it must."""
        machine = self.machine()
        error = self.assertRaises(IllegalTransition, machine.move, Door.GONE, sources=[Door.SHUT])
        self.assertEqual((error.source, error.target), (Door.OPEN, Door.GONE))
        self.assertIs(machine.state, Door.OPEN)
        machine.move(Door.SHUT)
        machine.move(Door.GONE, sources=[Door.SHUT])
        self.assertIs(machine.state, Door.GONE)

    def test_allows(self) -> None:
        """allows() answers from the table without moving."""
        machine = self.machine()
        self.assertTrue(machine.allows(Door.SHUT))
        self.assertFalse(machine.allows(Door.LOCKED))
        self.assertIs(machine.state, Door.OPEN)

    def test_observer(self) -> None:
        """The observer hears of each move after it happened, and of no refused one."""
        seen = []
        machine = self.machine(lambda name, a, b: seen.append((name, a, b, machine.state)))
        machine.move(Door.SHUT)
        self.assertRaises(IllegalTransition, machine.move, Door.SHUT)
        self.assertEqual(seen, [("door", Door.OPEN, Door.SHUT, Door.SHUT)])

    def test_logged_by(self) -> None:
        """logged_by(log) tells log.debug of each move, naming machine, from and to."""
        seen = []

        class Log:
            def debug(self, format: str, **fields) -> None:
                seen.append((format, fields))

        machine = StateMachine("door", Door.OPEN, TABLE, logged_by(Log()))
        machine.move(Door.SHUT)
        self.assertEqual(seen, [("{machine}: {source} -> {target}",
                                 {"machine": "door", "source": "OPEN", "target": "SHUT"})])

    def test_transitions(self) -> None:
        """transitions() lists every move of the table once, in the enum's order."""
        self.assertEqual(self.machine().transitions(), [
            (Door.OPEN, Door.SHUT), (Door.OPEN, Door.GONE),
            (Door.SHUT, Door.OPEN), (Door.SHUT, Door.LOCKED), (Door.SHUT, Door.GONE),
            (Door.LOCKED, Door.SHUT), (Door.LOCKED, Door.LOCKED),
        ])

    def test_walk_whole_table(self) -> None:
        """Every move of the table can be made from its source state; every other move raises."""
        for source in Door:
            for target in Door:
                machine = StateMachine("door", source, TABLE)
                if (source, target) in self.machine().transitions():
                    machine.move(target)
                    self.assertIs(machine.state, target)
                else:
                    self.assertRaises(IllegalTransition, machine.move, target)

    def test_states_of_one_enum(self) -> None:
        """A table naming states of another enum is refused when the machine is made."""
        self.assertRaises(TypeError, StateMachine, "door", Door.OPEN, {Door.OPEN: {Other.X}})
