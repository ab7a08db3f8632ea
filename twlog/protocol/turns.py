# -*- test-case-name: tests.protocol.test_fairness -*-
"""L{Turns}: a broker's connections take turns at having their requests handled (round robin).

Without it, one read of a connection that pipelines small requests (64 KiB,
about 2,000 OFFSETS requests) was handled whole before the reactor looked at
any other socket: 20 such connections made a healthy client's fetch wait
1.9 s at the median.  Now a connection handles at most L{FRAMES_PER_TURN}
frames per turn, or L{BYTES_PER_TURN} bytes of them, or its share of
L{SECONDS_PER_ROUND} of the reactor's time (split among the connections
waiting, never less than L{MIN_SECONDS_PER_TURN}), whichever comes first,
and always at least one frame.  Past that it stops reading and queues here;
each round, started with C{callLater(0)} so that the reactor polls its
sockets between rounds, gives every queued connection one more turn, in the
order they queued.  A newcomer's request is therefore handled within about
one round, about 10 ms however many connections are busy and whatever their
pipelines hold, while a connection busy on its own gets long turns (few
reactor iterations per request).  A connection read in the same reactor
iteration as its turn, while others wait, waits for the next round.  (Kafka
gets the same effect from one request in flight per connection in its
processor.)
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

__all__ = ["BYTES_PER_TURN", "FRAMES_PER_TURN", "MIN_SECONDS_PER_TURN", "SECONDS_PER_ROUND", "TURN", "Turns"]

#: Frames a connection may have handled in one turn ...
FRAMES_PER_TURN = 64
#: ... and bytes of them ...
BYTES_PER_TURN = 1024 * 1024
#: ... and seconds of the reactor's clock: this much per round, split among the connections waiting ...
SECONDS_PER_ROUND = 0.01
#: ... but never less than this per turn (and a turn always handles one frame, however large or slow).
MIN_SECONDS_PER_TURN = 0.0005

#: Why a connection's transport is held while it waits for its turn (see L{FrameReceiver.hold_reading}).
TURN = "turn"


class Taker(Protocol):
    """What the turns need of a connection."""

    def take_turn(self) -> None:
        """Handle up to a turn's worth of the frames buffered; queue again (L{Turns.wait}) if more remain."""


class Turns:
    """The connections waiting for a turn, served in rounds, one turn each per round."""

    _log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        frames_per_turn: int = FRAMES_PER_TURN,
        bytes_per_turn: int = BYTES_PER_TURN,
        seconds_per_round: float = SECONDS_PER_ROUND,
        min_seconds_per_turn: float = MIN_SECONDS_PER_TURN,
    ) -> None:
        self._clock = clock
        #: A turn's allowance: frames, bytes of them, and time (L{seconds_per_turn}).
        self.frames_per_turn = frames_per_turn
        self.bytes_per_turn = bytes_per_turn
        self.seconds_per_round = seconds_per_round
        self.min_seconds_per_turn = min_seconds_per_turn
        self._queue: deque[Taker] = deque()
        self._queued: set[Taker] = set()
        self._call: IDelayedCall | None = None
        #: Rounds run and turns given, over the broker's life (for tests and metrics).
        self.rounds = 0
        self.turns = 0

    @property
    def waiting(self) -> int:
        """How many connections wait for a turn."""
        return len(self._queue)

    @property
    def seconds_per_turn(self) -> float:
        """The time a turn starting now may take: the round's, shared with the connections waiting."""
        return max(self.min_seconds_per_turn, self.seconds_per_round / (1 + len(self._queue)))

    @property
    def round_due(self) -> bool:
        """Whether a round is due (some connection waits for a turn)."""
        return self._call is not None

    def is_waiting(self, taker: Taker) -> bool:
        """Whether C{taker} waits for a turn."""
        return taker in self._queued

    def wait(self, taker: Taker) -> None:
        """Give C{taker} a turn in the next round (once, however often it asks before then)."""
        if taker in self._queued:
            return
        self._queued.add(taker)
        self._queue.append(taker)
        if self._call is None:
            self._call = self._clock.callLater(0, self._round)

    def forget(self, taker: Taker) -> None:
        """C{taker} is gone: no turn for it."""
        if taker in self._queued:
            self._queued.discard(taker)
            self._queue.remove(taker)

    def _round(self) -> None:
        """One turn for each connection queued when the round starts; those that queue again wait for the next."""
        self._call = None
        self.rounds += 1
        for _ in range(len(self._queue)):
            if not self._queue:  # a turn closed the connections queued after it
                break
            taker = self._queue.popleft()
            self._queued.discard(taker)
            self.turns += 1
            try:
                taker.take_turn()
            except Exception:
                self._log.failure("a connection's turn failed")
        if self._queue and self._call is None:
            self._call = self._clock.callLater(0, self._round)
