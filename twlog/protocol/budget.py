# -*- test-case-name: tests.protocol.test_budget -*-
"""How much request data all of a broker's connections may buffer, together: L{RequestBudget}.

Each connection buffers the part of a request frame that has arrived (and,
while it holds too many requests in flight, the frames behind them).  The
per-frame limit (C{max_request_bytes}) alone does not bound the sum: eight
clients sending 95 MiB of a frame and never finishing held 841 MB.  The
budget counts what every connection holds (L{RequestBudget.total}) and
decides which connections may read, by reservation:

 - a connection holding nothing always reads: a small request arrives whole
   in one read and is handled at once, so healthy clients are never held;
 - a connection that starts a frame it cannot finish in that read is
   admitted if the rest of the frame fits in the budget, beside the rest
   every admitted frame still needs: then it reads until its frame is whole,
   and the frame is handled; otherwise it stops reading
   (C{transport.pauseProducing}), holding only that first read;
 - as space frees (a frame is handled, a connection closes), the stopped
   connections needing the fewest bytes to finish are admitted first (among
   equals, the one stopped first), so the frames still to come that are
   largest wait longest: the frames that will free their bytes soonest go
   first;
 - an admitted frame that stops arriving holds its room only until the
   connection's frame deadline (C{request_timeout_s},
   L{twlog.protocol.connection}): then the connection is closed, forgotten
   here, and the waiting frames are admitted in its place.  Without the
   deadline, two clients that sent 95 MiB of a 100 MiB frame and stopped kept
   a legitimate 69 MB produce waiting until they went away.

So every admitted frame can complete without the total passing the bound,
and half-sent frames never deadlock each other.  The total passes the bound
only by the first read (at most L{READ_BYTES}) of each connection stopped
because the budget was full when it started a frame.
"""

from __future__ import annotations

from typing import Protocol

#: The most one read of a TCP transport delivers: the C{bufferSize} the broker sets on its connections (Twisted's
#: default is 64 KiB; 256 KiB reads bring 4x the produce frames per read to the bulk path, L{twlog.protocol.runs},
#: which halved the broker's CPU per message at batch 50).
READ_BYTES = 256 * 1024

#: Why a connection's transport is held when the budget stopped it (see L{FrameReceiver.hold_reading}).
BUDGET = "request budget"


class Holder(Protocol):
    """What the budget needs of a connection: what it buffers and needs, and its reading switch."""

    @property
    def buffered_bytes(self) -> int: ...

    @property
    def needed_bytes(self) -> int: ...

    def hold_reading(self, reason: str) -> None: ...

    def release_reading(self, reason: str) -> None: ...


class RequestBudget:
    """The bytes every connection buffers, against one bound shared by all of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes buffered over all connections.
        self.total = 0
        #: The largest L{total} seen (for tests and stats).
        self.peak = 0
        #: How many times the budget stopped a connection reading (for metrics).
        self.holds = 0
        self._held: dict[Holder, tuple[int, int]] = {}  # connection -> (buffered, needed), if it buffers any
        self._admitted: set[Holder] = set()
        self._reserved = 0  # what the admitted frames still need, together
        self._stopped: dict[Holder, None] = {}  # in the order they were stopped

    @property
    def stopped(self) -> int:
        """How many connections the budget stopped reading."""
        return len(self._stopped)

    def is_stopped(self, holder: Holder) -> bool:
        """Whether the budget stopped C{holder} reading."""
        return holder in self._stopped

    def update(self, holder: Holder) -> None:
        """C{holder} read or delivered frames: account what it holds now; admit or stop it; admit others."""
        self._set(holder, holder.buffered_bytes, holder.needed_bytes)

    def forget(self, holder: Holder) -> None:
        """C{holder} is gone: it holds nothing any more."""
        self._stopped.pop(holder, None)
        self._set(holder, 0, 0)

    def _set(self, holder: Holder, buffered: int, needed: int) -> None:
        before = self.total + self._reserved
        old_buffered, old_needed = self._held.pop(holder, (0, 0))
        self.total += buffered - old_buffered
        self.peak = max(self.peak, self.total)
        admitted = holder in self._admitted
        if admitted:
            self._admitted.discard(holder)
            self._reserved -= old_needed
        if not buffered:  # holds nothing: reads freely
            self._release(holder)
        else:
            self._held[holder] = (buffered, needed)
            if admitted and needed <= old_needed:  # the same frame, still coming
                self._admit(holder, needed)
            elif holder not in self._stopped:  # a new frame
                if self.total + self._reserved + needed <= self.limit:
                    self._admit(holder, needed)
                else:
                    self._stopped[holder] = None
                    self.holds += 1
                    holder.hold_reading(BUDGET)
        if self._stopped and self.total + self._reserved < before:
            self._admit_waiting()

    def _admit(self, holder: Holder, needed: int) -> None:
        self._admitted.add(holder)
        self._reserved += needed

    def _release(self, holder: Holder) -> None:
        if holder in self._stopped:
            del self._stopped[holder]
            holder.release_reading(BUDGET)

    def _admit_waiting(self) -> None:
        """Admit stopped connections, fewest bytes still needed first (the first stopped among equals), while
        their frames fit."""
        for holder in sorted(self._stopped, key=lambda h: self._held.get(h, (0, 0))[1]):
            needed = self._held.get(holder, (0, 0))[1]
            if self.total + self._reserved + needed > self.limit:
                break
            self._admit(holder, needed)
            self._release(holder)
