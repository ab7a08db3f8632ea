# -*- test-case-name: tests.storage.test_log,tests.storage.test_group_commit -*-
"""When one partition log's appends become durable, and so visible to readers.

L{Flusher} keeps a log's flush policy (C{LogConfig.flush_policy}):

  - C{"group"} (group commit, the default): an fsync starts at the end of the
    reactor turn that made a log dirty, and, while data keeps arriving, the
    next one starts as soon as the previous returns.  Batches grow by
    themselves under load (everything appended during one fsync goes into the
    next), so data is visible about one fsync time after it is appended.
  - C{"timer"} (the paper's): an fsync starts once C{flush_messages} messages
    are unflushed, or C{flush_interval_ms} after the first unflushed one.

Both keep the count and interval triggers, so under C{"group"} they stay
upper bounds; both flush when someone asks (L{Flusher.flush}).  Under both, a
flush nobody waits for (count, time, group commit) starts no sooner than
C{flush_min_gap_ms} after the log's previous fsync started: the batching floor
of group commit, as PostgreSQL's C{commit_delay} (each fsync costs CPU whatever
it covers, so a disk that answers in 0.2 ms would otherwise be asked 1,000 times
a second by a log taking 1,000 messages a second).  A flush someone waits for
(L{Flusher.flush}, as C{ack=flushed} produces ask) starts at once, or right
after the one in flight.  The fsync runs
on a pool thread, never on the reactor, one at a time per log; only when it is
done does the flushed offset, which bounds what readers and OFFSETS see, move.

What a failure does, and what those waiting for a flush are told (each answer true):
  - A failed write (disk full, no inodes, quota, read-only, I/O error), or a
    failed roll, damages nothing: the file is cut back to where it was, and the
    write buffer is dropped, so nothing of a set refused gets into the file later
    (not even at close).  Flushes waited for by those sets fail with
    L{StorageFailed} ("nothing written"); the rest of the file is fsynced as
    usual.  The log then refuses appends for C{storage_retry_s}, after which the
    next append tries the disk again (L{Suspension}).
  - A failed fsync fails the log for good: only a restart (recovery) is safe
    then (an fsync retried after an error can report lost data as safe).  The
    sets already in the file may or may not survive: their waiters get
    L{OutcomeUnknown}; those still in the buffer (dropped) get L{StorageFailed}.
    So does a write whose cut-back failed too (the file may end in part of a set).
  - Running out of descriptors to open a directory for its fsync fails nothing:
    the directories are opened before anything is fsynced, and the flush is tried
    again later (by the interval timer, not at once, under either policy); those
    waiting keep waiting (bounded by their own timeouts).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.config import LogConfig
from twlog.errors import BrokerError, OutcomeUnknown, StorageFailed, TooManyOpenFiles
from twlog.storage.failures import NO_CUT, FlushWaiters, Suspension, describe, drop_cut
from twlog.storage.segment import Segment, descriptors_error, out_of_descriptors

#: Runs a blocking callable on a pool thread and returns a Deferred of its result.
ThreadRunner = Callable[..., Deferred]


class TimedRunner:
    """A L{ThreadRunner} that tells an observer how long each call took: the logs' fsyncs, for the broker's metrics.

    A log runs only its fsyncs on the pool, so wrapping its runner times them.
    """

    _log = Logger()

    def __init__(self, run_in_thread: ThreadRunner, clock: IReactorTime) -> None:
        self._run_in_thread = run_in_thread
        self._clock = clock
        #: Called C{(seconds, ok)} as each call ends; C{ok} is False when it failed.
        self.observer: Callable[[float, bool], object] | None = None

    def __call__(self, f: Callable[..., object], *args: object) -> Deferred:
        d = self._run_in_thread(f, *args)
        if self.observer is not None:
            d.addBoth(self._ended, self._clock.seconds())
        return d

    def _ended(self, result: object, started: float) -> object:
        observer = self.observer
        try:
            if observer is not None:
                observer(max(self._clock.seconds() - started, 0.0), not isinstance(result, Failure))
        except Exception:
            self._log.failure("flush observer failed")
        return result


def _fsync_all(segments: list[Segment], directories: list[str]) -> None:
    """fsync C{segments}, then C{directories} (new segment files' names must survive a power loss too).

    The directories are opened first: out of descriptors, nothing has been
    fsynced, and L{TooManyOpenFiles} says the flush may simply be tried again.
    """
    fds: list[int] = []
    try:
        for directory in directories:
            fds.append(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError as e:
        for fd in fds:
            os.close(fd)
        if out_of_descriptors(e):
            raise descriptors_error(e, f"cannot open {directory} to fsync it") from None
        raise
    try:
        for segment in segments:
            segment.fsync()
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


class Flusher:
    """The flush policy and state of one log in C{directory}.

    @param end_offset: where the log's next append lands (what a flush started now covers).
    @param on_flushed: called each time L{flushed_offset} moves.
    """

    _log = Logger()

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        clock: IReactorTime,
        run_in_thread: ThreadRunner,
        end_offset: Callable[[], int],
        on_flushed: Callable[[], object],
    ) -> None:
        self.directory = directory
        self._config = config
        self._clock = clock
        self._run_in_thread = run_in_thread
        self._end_offset = end_offset
        self._on_flushed = on_flushed
        #: The offset up to which everything is fsynced: what readers may see.
        self.flushed_offset = end_offset()
        #: Set when an fsync failed (or a write that could not be cut back): the log takes no more appends and
        #: its flushed offset no longer moves (a retried fsync can succeed for data the kernel dropped).
        self.failed: Exception | None = None
        self.closed = False
        #: Messages appended since the last flush started.
        self.unflushed_messages = 0
        self._dirty: list[Segment] = []
        self._flush_timer: IDelayedCall | None = None
        #: Group commit: the flush due at the end of this reactor turn.
        self._group = config.flush_policy == "group"
        self._soon: IDelayedCall | None = None
        #: Out of descriptors at the last flush: wait for the retry timer instead of retrying at once.
        self._postponed = False
        self._flush_in_flight = False
        self._flush_again = False
        self._flush_waiters = FlushWaiters()
        #: After a write or a roll failed without damaging the files (disk full, no inodes, ...).
        self.suspension = Suspension(directory, clock, config.storage_retry_s)
        #: What the last failed write answered for the sets it dropped.
        self.last_write_error: BrokerError | None = None
        #: Why the log was deleted (L{abandon}), or None.
        self.abandoned: Exception | None = None
        self._min_gap_s = config.flush_min_gap_ms / 1000
        #: When the last fsync started (clock seconds): a flush nobody waits for waits for the gap after it.
        self._last_start = float("-inf")
        #: Directories to fsync at the next flush (after a segment was created in them).
        self._sync_directories: set[str] = set()
        #: A truncation while the fsync in flight ran: (lowest offset cut to, the error for the sets cut).
        self._cut: tuple[float, BrokerError | None] = NO_CUT

    def sync_directory(self, directory: str) -> None:
        """fsync C{directory} at the next flush (a segment file was created in it)."""
        self._sync_directories.add(directory)

    def appended(self, segment: Segment, count: int) -> None:
        """C{count} messages were written to C{segment}: flush now, or set the timer, as the policy says."""
        if not self._dirty or self._dirty[-1] is not segment:
            self._dirty.append(segment)
        self.unflushed_messages += count
        if self.unflushed_messages >= self._config.flush_messages:
            self._flush_in_background()
        elif self._flush_timer is None:
            self._flush_timer = self._clock.callLater(self._config.flush_interval_ms / 1000, self._timed_flush)
        if self._group and not self._postponed:
            if self._flush_in_flight:
                self._flush_again = True  # the next fsync starts as soon as this one returns
            elif self._soon is None and self._dirty:
                self._soon = self._clock.callLater(self._gap_left(), self._gap_over)

    def _gap_left(self) -> float:
        """Seconds until a flush nobody waits for may start (0 once the gap after the last fsync has passed)."""
        return max(0.0, self._last_start + self._min_gap_s - self._clock.seconds())

    def _start_after_gap(self) -> None:
        """Start a flush nobody waits for now, or when the gap since the last one has passed."""
        wait = self._gap_left()
        if wait <= 0:
            self._start_flush()
        elif self._soon is None:
            self._soon = self._clock.callLater(wait, self._gap_over)

    def _gap_over(self) -> None:
        """The end of the turn that made the log dirty, or of the gap: start the flush that is due."""
        self._soon = None
        self._flush_in_background()  # the gap has passed: it starts at once

    def flush(self) -> Deferred[int]:
        """fsync everything appended so far (on a pool thread); fire with the new flushed offset.

        Only one fsync runs per log at a time; a flush asked for while one
        runs starts when it ends and covers everything appended until then.
        """
        if self.failed is not None:
            return fail(StorageFailed(f"{self.directory} failed ({self.failed})"))
        if self.abandoned is not None:
            return fail(self.abandoned)
        if not self._dirty and not self._flush_in_flight:
            return succeed(self.flushed_offset)
        d = self._flush_waiters.add(self._end_offset())
        if self._flush_in_flight:
            self._flush_again = True
        else:
            self._start_flush()
        return d

    def _flush_in_background(self) -> None:
        """Start a flush nobody waits for (count or time reached); no Deferred piles up meanwhile."""
        if self.failed is not None or self.closed:
            return
        if self._flush_in_flight:
            self._flush_again = True
        elif self._dirty:
            self._start_after_gap()

    def _timed_flush(self) -> None:
        self._flush_timer = None
        self._postponed = False
        self._flush_in_background()

    def _start_flush(self) -> None:
        self._cancel_timer()
        try:
            self.write_out()  # on the reactor thread: the pool thread only fsyncs
        except BrokerError:  # the waiters whose sets were not written are told; the rest is fsynced
            if self.failed is not None:
                return
        waiters = self._flush_waiters.take()
        target = self._end_offset()
        dirty, self._dirty = self._dirty, []
        directories, self._sync_directories = sorted(self._sync_directories), set()
        self.unflushed_messages = 0
        self._flush_in_flight = True
        self._last_start = self._clock.seconds()
        d = self._run_in_thread(_fsync_all, dirty, directories)
        d.addCallbacks(self._flushed, self._flush_failed, callbackArgs=(target, waiters),
                       errbackArgs=(waiters, dirty, directories))

    def _flushed(self, _: object, target: int, waiters: list[tuple[Deferred[int], int]]) -> None:
        self._flush_in_flight = False
        if self.abandoned is not None:
            for waiter, _end in waiters:
                waiter.errback(self.abandoned)
            return
        self._postponed = False  # descriptors were found again
        target = min(target, self._cut[0])  # it covers no more than a truncation left
        waiters, self._cut = drop_cut(waiters, self._cut), NO_CUT
        if target > self.flushed_offset:
            self.flushed_offset = target
            self._on_flushed()
        for waiter, _end in waiters:
            waiter.callback(self.flushed_offset)
        self._after_flush()

    def _flush_failed(
        self, failure: Failure, waiters: list[tuple[Deferred[int], int]], dirty: list[Segment], directories: list[str]
    ) -> None:
        self._flush_in_flight = False
        if self.abandoned is not None:  # (its directory was moved away meanwhile: no fault of the disk)
            for waiter, _end in waiters:
                waiter.errback(self.abandoned)
            return
        waiters, self._cut = drop_cut(waiters, self._cut), NO_CUT
        if failure.check(TooManyOpenFiles):
            self._not_flushed(failure.value, waiters, dirty, directories)
            return
        # Every set this fsync covered is in the file: it may or may not survive.
        self._flush_waiters.put_back(waiters)
        self.fail(failure.value, f"fsync failed in {self.directory}: {describe(failure.value)}")

    def _not_flushed(
        self, error: TooManyOpenFiles, waiters: list[tuple[Deferred[int], int]], dirty: list[Segment],
        directories: list[str],
    ) -> None:
        """Out of descriptors before any fsync: keep everything to flush and everyone waiting for it (their
        sets are appended: the retry flushes them, unless their own timeouts end first), retry later."""
        self._log.warn("{directory}: flush postponed: {error}", directory=self.directory, error=error)
        self._dirty = [s for s in dirty if s not in self._dirty] + self._dirty
        self._sync_directories.update(directories)
        self._flush_again = False
        self._postponed = True
        self._cancel_soon()
        self._flush_waiters.put_back(waiters)
        if not self.closed and self._flush_timer is None:
            self._flush_timer = self._clock.callLater(max(self._config.flush_interval_ms, 100) / 1000,
                                                      self._timed_flush)

    def _after_flush(self) -> None:
        if self._group and self._dirty:
            self._flush_again = True  # group commit: whatever arrived meanwhile goes at once
        if self._flush_again and not self.closed and self.failed is None:
            self._flush_again = False
            if self._dirty and self._flush_waiters:
                self._start_flush()  # someone waits for it: no gap
            elif self._dirty:
                self._start_after_gap()
            elif self._flush_waiters:
                for waiter, _end in self._flush_waiters.take():
                    waiter.callback(self.flushed_offset)

    def truncated(self, end: int, kept: Segment, removed_files: bool, error: BrokerError) -> None:
        """The log was cut back to C{end} in C{kept}: flushes cover no more, waiters past it get C{error}."""
        self._dirty = [s for s in self._dirty if s.base_offset < kept.base_offset] + [kept]
        if removed_files:
            self._sync_directories.add(self.directory)
        self.flushed_offset = min(self.flushed_offset, end)
        if self._flush_in_flight:
            self._cut = (min(self._cut[0], end), error)
        self._flush_waiters.fail_past(end, error)

    # -- failures ----------------------------------------------------------

    def check_writable(self) -> None:
        """Raise unless the log may take an append now (after a suspension, the next one tries the disk).

        @raise StorageFailed: the log failed (until a restart), or is suspended for a while yet.
        """
        if self.failed is not None:
            raise StorageFailed(f"{self.directory} failed ({self.failed}); restart the broker to recover it")
        self.suspension.check()

    def write_failed(self, segment: Segment, error: OSError, what: str) -> BrokerError:
        """C{what} (a write to C{segment}, or a roll after it) failed: drop the write buffer, fail the flushes
        waited for by what it held, suspend appends; or, if the file could not be cut back (L{Segment.damaged}),
        fail the log.  Returns the error for the set being written."""
        if segment.damaged:
            message = f"{what} failed ({describe(error)}) and could not be cut back"
            self.fail(error, message, all_unknown=True)
            self.last_write_error = OutcomeUnknown(f"{message}: the set may be stored in part; restart the broker "
                                                   "to recover it")
            return self.last_write_error
        segment.discard_pending()
        message = f"{what} failed: {describe(error)}"
        self._flush_waiters.fail_past(self._end_offset(), StorageFailed(f"{message}; nothing of this set was written"))
        self.last_write_error = self.suspension.start(error, message)
        return self.last_write_error

    def fail(self, error: Exception, message: str | None = None, all_unknown: bool = False) -> None:
        """Stop taking appends and stop moving the flushed offset: only a restart (recovery) is safe now.

        The write buffers are dropped, so that nothing unwritten gets into the file later, and those waiting
        for a flush are told: L{OutcomeUnknown} for sets in the file (they may or may not survive),
        L{StorageFailed} for sets only in a buffer (never written); with C{all_unknown} (a write that could not
        be cut back: the file may end in part of any of them), L{OutcomeUnknown} for all.
        """
        message = message or f"{self.directory}: {describe(error)}"
        if self.failed is None:
            self.failed = error
            self._log.critical("{cause}; the partition takes no more messages and its unflushed data stays "
                               "invisible; restart the broker to recover it", cause=message)
        self._cancel_timer()
        for segment in self._dirty:
            segment.discard_pending()
        unknown = OutcomeUnknown(f"{message}: the set is in the file but not known to be on disk")
        not_written = unknown if all_unknown else StorageFailed(f"{message}; the set was not written")
        self._flush_waiters.fail_all(self._end_offset(), unknown, not_written)

    def write_out(self) -> None:
        """Put everything appended into the file (page cache), not yet fsynced.

        @raise StorageFailed: a write failed (see L{write_failed}; those waiting for it are told): nothing of
            the buffered sets was written.
        @raise OutcomeUnknown: the write failed and could not be cut back.
        """
        for segment in self._dirty:
            try:
                segment.write_out()
            except OSError as e:
                raise self.write_failed(segment, e, f"writing to {segment.path}") from None
        self.suspension.wrote()

    def close(self) -> None:
        """Start no more flushes (one in flight still completes)."""
        self.closed = True
        self._cancel_timer()

    def abandon(self, error: Exception) -> None:
        """The log is being deleted: start no more flushes, and fail every flush waited for with C{error},
        those whose fsync is in flight too (when it ends, quietly: its files may be gone by then)."""
        self.abandoned = error
        self.close()
        for waiter, _end in self._flush_waiters.take():
            waiter.errback(error)

    def _cancel_timer(self) -> None:
        """Cancel the interval timer and the group-commit call: a flush starts, or none may."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        self._cancel_soon()

    def _cancel_soon(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None

