# -*- test-case-name: tests.storage.test_pieces -*-
"""Writing a large message set a piece at a time, with the reactor running between the pieces.

Writing 50 MB into the page cache takes 15 ms on an idle machine and 35-80 ms on a
busy one: as one step, it held every other connection of the broker that long
(issue 21: a healthy client's slowest fetch beside 50 MB produces).  The produce
path appends sets of at least L{PIECED_SET_BYTES} with L{Log.append_in_pieces}
instead: L{PIECE_BYTES} per reactor iteration (L{Segment.append_in_pieces}).

The set is still appended whole or not at all.  Until its last piece is in, the
segment's size, the log's end, the index and the flush policy know nothing of it
(readers and fsyncs stop where they stopped); a failed piece, a log that fails
or closes meanwhile cuts the file back to where the set began.  A crash
in between leaves whole messages of a set never acknowledged, which recovery
keeps as it keeps any unacknowledged tail.  Only one set is written in pieces per
log at a time, and nothing else is appended to it meanwhile: L{PiecedWrites.turn}
tells the others when their turn comes, in the order they asked.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Generator
from typing import Generic, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from twlog.errors import StorageFailed

__all__ = ["PIECED_SET_BYTES", "PIECE_BYTES", "PiecedWrites"]

#: Bytes written per reactor iteration: about 0.3 ms of the reactor on an idle machine, 5-8 ms on a busy one
#: (4 MiB took up to 30 ms there).
PIECE_BYTES = 1024 * 1024
#: Sets at least this large are appended in pieces by the produce path.
PIECED_SET_BYTES = 8 * PIECE_BYTES

T = TypeVar("T")


class _Run(Generic[T]):
    def __init__(self, steps: Generator[None, None, None], check: Callable[[], None], finish: Callable[[], T],
                 failed: Callable[[OSError], Exception]) -> None:
        self.steps, self.check, self.finish, self.failed = steps, check, finish, failed
        self.done: Deferred[T] = Deferred()
        self.call: IDelayedCall | None = None


class PiecedWrites:
    """One log's writes in pieces: at most one at a time, and L{turn} for whoever waits to append."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._run: _Run | None = None
        self._waiting: list[Deferred[None]] = []
        #: Pieces written so far (steps run), for tests and curiosity.
        self.pieces = 0

    @property
    def busy(self) -> bool:
        """Whether a set is being written in pieces: nothing else may be appended to the log."""
        return self._run is not None

    def turn(self) -> Deferred[None]:
        """Fire once no set is being written in pieces (at once if none is); those waiting fire in the order
        they asked, and the first may start another (the later ones then ask again)."""
        if self._run is None:
            return succeed(None)
        waiting: Deferred[None] = Deferred()
        self._waiting.append(waiting)
        return waiting

    def run(self, steps: Generator[None, None, None], check: Callable[[], None], finish: Callable[[], T],
            failed: Callable[[OSError], Exception]) -> Deferred[T]:
        """Run C{steps} (each C{next} writes a piece), the first now and each next one in a later reactor
        iteration after C{check()}; fire with C{finish()} once they end.  A step's C{OSError} fails it with
        C{failed(error)}; an error C{check} or C{finish} raises fails it as it is (C{steps} closed first)."""
        assert self._run is None, "one set written in pieces at a time"
        run = _Run(steps, check, finish, failed)
        self._run = run
        self._step(run, first=True)
        return run.done

    def cancel(self, error: Exception) -> None:
        """Stop the set being written (the log closes): its file is cut back, its Deferred fails with C{error}."""
        run = self._run
        if run is not None:
            if run.call is not None and run.call.active():
                run.call.cancel()
            run.steps.close()
            self._end(run, error)

    def _step(self, run: _Run, first: bool = False) -> None:
        run.call = None
        try:
            if not first:
                run.check()
            self.pieces += 1
            next(run.steps)
        except StopIteration:
            try:
                result = run.finish()
            except Exception as e:
                self._end(run, e)
            else:
                self._end(run, None, result)
            return
        except OSError as e:  # (ESTALE: the segment was cut or closed under it, not a failing disk)
            error = StorageFailed(f"the set was not written: {e.strerror}") if e.errno == errno.ESTALE else None
            self._end(run, error or run.failed(e))
            return
        except Exception as e:
            run.steps.close()
            self._end(run, e)
            return
        run.call = self._clock.callLater(0, self._step, run)

    def _end(self, run: _Run, error: Exception | None, result: object = None) -> None:
        self._run = None
        waiting, self._waiting = self._waiting, []
        if error is None:
            run.done.callback(result)
        else:
            run.done.errback(error)
        for each in waiting:
            each.callback(None)
