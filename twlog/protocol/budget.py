# -*- test-case-name: tests.protocol.test_budget -*-
"""How much request data all of a broker's connections may buffer, together: L{RequestBudget}.

Each connection buffers the part of a request frame that has arrived (and,
while it holds too many requests in flight, the frames behind them).  The
per-frame limit (C{max_request_bytes}) alone does not bound the sum: eight
clients sending 95 MiB of a frame and never finishing held 841 MB.  The
budget counts what every connection holds (L{RequestBudget.total}) and
decides which connections may read:

 - a connection holding nothing always reads (a small request arrives whole
   in one read and is handled at once, so healthy clients are never held);
 - a connection holding part of a frame reads while the rest of its frame
   fits in the budget: the holders needing the fewest bytes to finish go
   first, each reserving what it still needs; the others, the connections
   with the largest frames still to come, stop reading
   (C{transport.pauseProducing}) and resume as space frees (a frame is
   handled, or a connection closes).

So every frame being read can complete without the total passing the
bound, and no set of half-sent frames can deadlock each other.  The total
can pass the bound only by the one read (at most L{READ_BYTES}) of a
connection that starts a frame while the budget is full, after which that
connection stops reading.
"""

from __future__ import annotations

from typing import Protocol

#: The most one read of a TCP transport delivers (Twisted's C{Connection.bufferSize}).
READ_BYTES = 65536

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
        self._held: dict[Holder, tuple[int, int]] = {}  # connection -> (buffered, needed), if it buffers any
        self._needed = 0  # the sum of every holder's needed bytes
        self._stopped: set[Holder] = set()

    @property
    def stopped(self) -> int:
        """How many connections the budget stopped reading."""
        return len(self._stopped)

    def update(self, holder: Holder) -> None:
        """C{holder} read, delivered frames or closed: account what it holds now, and rebalance."""
        self._set(holder, holder.buffered_bytes, holder.needed_bytes)

    def forget(self, holder: Holder) -> None:
        """C{holder} is gone: it holds nothing any more."""
        self._stopped.discard(holder)
        self._set(holder, 0, 0)

    def _set(self, holder: Holder, buffered: int, needed: int) -> None:
        old_buffered, old_needed = self._held.pop(holder, (0, 0))
        if buffered:
            self._held[holder] = (buffered, needed)
        else:
            needed = 0
        self.total += buffered - old_buffered
        self._needed += needed - old_needed
        self.peak = max(self.peak, self.total)
        if buffered != old_buffered or needed != old_needed:
            self._rebalance()

    def _rebalance(self) -> None:
        if self.total + self._needed <= self.limit:  # every frame being read fits: nobody waits
            if self._stopped:
                stopped, self._stopped = self._stopped, set()
                for holder in stopped:
                    holder.release_reading(BUDGET)
            return
        free = self.limit - self.total
        for holder, (_, needed) in sorted(self._held.items(), key=lambda item: item[1][1]):
            if needed <= free:
                free -= needed
                if holder in self._stopped:
                    self._stopped.discard(holder)
                    holder.release_reading(BUDGET)
            elif holder not in self._stopped:
                self._stopped.add(holder)
                holder.hold_reading(BUDGET)
        for holder in [h for h in self._stopped if h not in self._held]:  # holds nothing now: reads again
            self._stopped.discard(holder)
            holder.release_reading(BUDGET)
