# -*- test-case-name: tests.storage.test_storage_errors -*-
"""What a partition log does after a write fails, and what it tells those waiting for a flush.

L{Suspension}: after a write or a roll failed without damaging the files (disk
full, no inodes, quota, read-only, I/O error), the log refuses appends for
C{storage_retry_s} without touching the disk, then lets the next one try it
again, and says once when a write succeeds again.  L{FlushWaiters}: those
waiting for a flush, each with the end offset their set needs flushed, so that
each is told what is true of its own set: L{OutcomeUnknown} when it is in the
file, L{StorageFailed} when it never got there.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.errors import BrokerError, StorageFailed


def describe(error: BaseException) -> str:
    """An OS error in one line (C{"[Errno 28] No space left on device"}), any other error as itself."""
    if isinstance(error, OSError) and error.errno is not None:
        return f"[Errno {error.errno}] {error.strerror}"
    return str(error)


class Suspension:
    """The retry state of the log in C{directory} after a write failed: refuse appends for C{retry_s}."""

    _log = Logger()

    def __init__(self, directory: str, clock: IReactorTime, retry_s: float) -> None:
        self.directory = directory
        self._clock = clock
        self.retry_s = retry_s
        #: The write error appends are refused for, until L{check} lets one try the disk again.
        self.error: Exception | None = None
        self._retry_at = 0.0
        #: An append was let through after a suspension: the next write that succeeds says so.
        self._probing = False

    def check(self) -> None:
        """Raise while suspended; once C{retry_s} has passed, let the caller try the disk.

        @raise StorageFailed: suspended for a while yet.
        """
        if self.error is None:
            return
        wait = self._retry_at - self._clock.seconds()
        if wait > 0:
            raise StorageFailed(f"{self.directory}: writes refused for {wait:.1f} s more after: {describe(self.error)}")
        self.error = None
        self._probing = True

    def start(self, error: Exception, message: str) -> StorageFailed:
        """A write failed (C{message} says which, and why): refuse appends for C{retry_s}, in one log line;
        return the error for the set that was being written."""
        self.error = error
        self._retry_at = self._clock.seconds() + self.retry_s
        self._probing = False
        self._log.warn("{directory}: {cause}; refusing writes for {retry:g} s, then trying again",
                       directory=self.directory, cause=message, retry=self.retry_s)
        return StorageFailed(f"{message}; nothing of this set was written, the partition takes writes again "
                             f"{self.retry_s:g} s later if the disk has room")

    def wrote(self) -> None:
        """A write reached the file: after a suspension, say once that the disk takes writes again."""
        if self._probing:
            self._probing = False
            self._log.info("{directory}: writes succeed again", directory=self.directory)


class FlushWaiters:
    """Those waiting for a flush, each with the end offset its set needs flushed (its next offset)."""

    def __init__(self) -> None:
        self._waiting: list[tuple[Deferred[int], int]] = []

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, needed: int) -> Deferred[int]:
        """A Deferred for a flush covering C{needed}."""
        d: Deferred[int] = Deferred()
        self._waiting.append((d, needed))
        return d

    def take(self) -> list[tuple[Deferred[int], int]]:
        """Everyone waiting (for the flush starting now); none are left."""
        waiting, self._waiting = self._waiting, []
        return waiting

    def put_back(self, waiting: list[tuple[Deferred[int], int]]) -> None:
        """Those a flush took and did not do (put off): they wait for the next one, first."""
        self._waiting = waiting + self._waiting

    def fail_past(self, end: int, error: BrokerError) -> None:
        """Fail those whose sets end past C{end} (dropped from a buffer: never written); keep the rest."""
        waiting = self._waiting
        self._waiting = [(d, needed) for d, needed in waiting if needed <= end]
        for d, needed in waiting:
            if needed > end:
                d.errback(error)

    def fail_all(self, written_end: int, in_file: BrokerError, not_written: BrokerError) -> None:
        """Fail everyone: with C{in_file} when the set lies before C{written_end}, else C{not_written}."""
        for d, needed in self.take():
            d.errback(in_file if needed <= written_end else not_written)


#: No truncation happened while an fsync ran (see L{drop_cut}).
NO_CUT: tuple[float, BrokerError | None] = (float("inf"), None)


def drop_cut(waiters: list[tuple[Deferred[int], int]], cut: tuple[float, BrokerError | None]) \
        -> list[tuple[Deferred[int], int]]:
    """Of those a flush took, fail those whose sets a truncation cut while the fsync ran (they end past
    C{cut}'s offset) with C{cut}'s error; return the others."""
    cut_to, error = cut
    for d, needed in waiters:
        if needed > cut_to:
            d.errback(error)
    return [(d, needed) for d, needed in waiters if needed <= cut_to]
