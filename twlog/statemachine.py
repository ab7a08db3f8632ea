# -*- test-case-name: tests.test_statemachine -*-
"""State machines whose allowed moves are a table: the one place a state changes.

The idea of h11's C{_state.py} (a table of moves; a move not in it is an
error) and kazoo's C{_set_state} (one method changes the state, and tells a
listener).  An owner keeps a L{StateMachine} private, offers methods that ask
for moves (C{close()}, C{lose_session()}), and derives its flags
(C{connected}, C{expired}) from L{StateMachine.state}::

    class Door(enum.Enum):
        OPEN = "open"
        SHUT = "shut"

    machine = StateMachine("door", Door.OPEN, {Door.OPEN: {Door.SHUT}, Door.SHUT: {Door.OPEN}})
    machine.move(Door.SHUT)   # fine
    machine.move(Door.SHUT)   # IllegalTransition: door: no move from SHUT to SHUT

Pure: no Twisted import, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

S = TypeVar("S", bound=enum.Enum)

#: Told of each move: C{observer(machine name, from state, to state)}, after the state changed.
Observer = Callable[[str, enum.Enum, enum.Enum], object]


class IllegalTransition(RuntimeError):
    """A move its machine's table does not allow: a bug in the code that asked for it, not a peer's fault."""

    def __init__(self, machine: str, source: enum.Enum, target: enum.Enum) -> None:
        super().__init__(f"{machine}: no move from {source.name} to {target.name}")
        self.machine = machine
        self.source = source
        self.target = target


class StateMachine(Generic[S]):
    """One state of an enum, changed only by L{move}, along the moves of a table.

    @param name: names the machine in errors and to the observer (C{"broker 3 registration"}).
    @param table: state -> the states it may move to; a state missing from it is final.
        A move to the same state is allowed only where the table lists it.
    @param observer: told of every move (for logging).
    """

    __slots__ = ("name", "_state", "_table", "_observer")

    def __init__(self, name: str, initial: S, table: Mapping[S, Iterable[S]], observer: Observer | None = None) -> None:
        kind = type(initial)
        moves = {source: frozenset(targets) for source, targets in table.items()}
        strays = [s for source, targets in moves.items() for s in (source, *targets) if not isinstance(s, kind)]
        if strays:
            raise TypeError(f"{name}: states not of {kind.__name__}: {strays}")
        self.name = name
        self._state = initial
        self._table = moves
        self._observer = observer

    def __repr__(self) -> str:
        return f"<StateMachine {self.name}: {self._state.name}>"

    @property
    def state(self) -> S:
        """The current state."""
        return self._state

    def allows(self, target: S) -> bool:
        """Whether the table allows a move from the current state to C{target}."""
        return target in self._table.get(self._state, ())

    def move(self, target: S, *, sources: Iterable[S] | None = None) -> S:
        """Move to C{target} and return the state moved from.

        @param sources: where the caller's move may start (a method named for one move, as
            C{rejoined()} for SESSION_LOST -> REBALANCING), when fewer than the table allows.
        @raise IllegalTransition: the table has no such move, or it does not start in
            C{sources} (the state is unchanged).
        """
        source = self._state
        if target not in self._table.get(source, ()) or (sources is not None and source not in sources):
            raise IllegalTransition(self.name, source, target)
        self._state = target
        if self._observer is not None:
            self._observer(self.name, source, target)
        return source

    def transitions(self) -> list[tuple[S, S]]:
        """Every (from, to) move of the table, in the enum's order (for tests that walk them all)."""
        kind = type(self._state)
        order = {s: i for i, s in enumerate(kind)}
        return sorted(((a, b) for a, targets in self._table.items() for b in targets),
                      key=lambda move: (order[move[0]], order[move[1]]))


def logged_by(log) -> Observer:
    """An observer telling C{log.debug} (a C{twisted.logger.Logger}, or anything with that method) of
    each move, with the fields C{machine}, C{source} and C{target} (state names)."""

    def moved(machine: str, source: enum.Enum, target: enum.Enum) -> None:
        log.debug("{machine}: {source} -> {target}", machine=machine, source=source.name, target=target.name)

    return moved


__all__ = ["IllegalTransition", "Observer", "StateMachine", "logged_by"]
