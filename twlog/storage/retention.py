# -*- test-case-name: tests.storage.test_retention -*-
"""Retention: which segments go (L{segments_to_expire}), and the periodic run that deletes them (L{Retention}).

Retention takes a partition's oldest segments when they were last modified
more than C{retention_ms} ago, then the oldest while the partition exceeds
C{retention_bytes}.  Only a prefix ever goes, and only segments holding
flushed data, never the active one, so offsets never go back and a crash
never leaves a gap.  The files are unlinked on the thread pool, oldest first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from twlog.storage.flush import ThreadRunner
from twlog.storage.segment import Segment

__all__ = ["ExpiringLog", "Retention", "delete_segments", "segments_to_expire"]


def segments_to_expire(segments: Sequence[Segment], flushed_offset: int, cutoff_ms: int, retention_bytes: int) -> int:
    """How many of the oldest C{segments} (oldest first, the last active) retention takes.

    First those last modified before C{cutoff_ms}, then more of the oldest
    while the rest exceed C{retention_bytes} (no cap when negative); never the
    last segment, nor one ending past C{flushed_offset}.
    """
    last = len(segments) - 1

    def deletable(i: int) -> bool:
        return i < last and segments[i].end_offset <= flushed_offset

    count = 0
    while deletable(count) and segments[count].mtime_ms() < cutoff_ms:
        count += 1
    if retention_bytes >= 0:
        total = sum(s.size for s in segments[count:])
        while deletable(count) and total > retention_bytes:
            total -= segments[count].size
            count += 1
    return count


def delete_segments(segments: list[Segment]) -> int:
    """Unlink expired segments oldest first, stopping at the first failure; return how many went.

    Deleting in order, one at a time, means a crash or an error leaves a
    contiguous log behind: never a gap that a restart would refuse to open.
    A segment's descriptor stays open until nothing refers to it.
    """
    for deleted, segment in enumerate(segments):
        try:
            os.unlink(segment.path)
        except FileNotFoundError:
            pass
        except OSError:
            return deleted
    return len(segments)


def close_quietly(fd: int) -> None:
    """Close C{fd}, a deleted segment's last descriptor (on the thread pool; nobody waits to hear of an error)."""
    try:
        os.close(fd)
    except OSError:
        pass


class ExpiringLog(Protocol):
    """What retention needs of a partition log (L{twlog.storage.log.Log} provides it)."""

    directory: str

    def expire_segments(self, now_ms: int) -> list[Segment]:
        """Take the expired segments off the log's index and return them; the caller deletes their files."""


class Retention:
    """Retention over a directory's logs: every C{interval_s} of C{clock} time, and on demand (L{run})."""

    _log = Logger()

    def __init__(
        self,
        logs: Callable[[], Iterable[ExpiringLog]],
        clock: IReactorTime,
        run_in_thread: ThreadRunner,
        interval_s: float,
    ) -> None:
        self._logs = logs
        self._clock = clock
        self._run_in_thread = run_in_thread
        self._interval_s = interval_s
        self._timer = LoopingCall(self.run)
        self._timer.clock = clock

    @property
    def running(self) -> bool:
        """Whether the periodic runs are on."""
        return self._timer.running

    def start(self) -> None:
        """Run every interval from now on (the first run one interval from now)."""
        self._timer.start(self._interval_s, now=False)

    def stop(self) -> None:
        """Stop the periodic runs (a deletion already on the pool finishes)."""
        if self._timer.running:
            self._timer.stop()

    def run(self) -> Deferred[int]:
        """Expire segments in every log and delete them in a pool thread; fire with how many went."""
        now_ms = int(self._clock.seconds() * 1000)
        runs: list[Deferred[int]] = []
        for log in self._logs():
            try:
                expired = log.expire_segments(now_ms)
            except Exception:  # one bad partition must not stop retention for the others
                self._log.failure("retention failed in {directory}", directory=log.directory)
                continue
            if expired:
                for segment in expired:
                    self._log.info("retention deletes {path}", path=segment.path)
                d = self._run_in_thread(delete_segments, expired)
                runs.append(d.addCallbacks(self._deleted, self._deletion_failed, callbackArgs=(expired,)))
        if not runs:
            return succeed(0)
        return gatherResults(runs).addCallback(sum)

    def _deleted(self, deleted: int, expired: list[Segment]) -> int:
        for segment in expired[:deleted]:  # its last descriptor, when nothing refers to it any more
            segment.close_later = self._close_later
        if deleted < len(expired):
            self._log.warn(
                "retention could not delete {path}; it and {left} newer expired segments stay on disk"
                " until the next start",
                path=expired[deleted].path, left=len(expired) - deleted - 1,
            )
        return deleted

    def _close_later(self, fd: int) -> None:
        self._run_in_thread(close_quietly, fd)

    def _deletion_failed(self, failure) -> int:
        self._log.failure("retention failed to delete segments", failure)
        return 0
