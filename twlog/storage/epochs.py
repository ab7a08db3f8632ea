# -*- test-case-name: tests.storage.test_epochs -*-
"""The leader epochs of one partition and the offset each began at (KIP-101): L{LeaderEpochCache}.

Each time a partition gets a new leader its epoch goes up, and the leader
records C{(epoch, the offset its first message will get)}.  A replica that
becomes a follower asks the leader where the follower's own latest epoch ends
(L{LeaderEpochCache.end_offset_for} on the leader) and truncates its log there,
never to its own high watermark: that is what keeps an acknowledged message
through a fast double failover, and keeps replicas from diverging.

The entries live in memory and in C{<topic>-<n>/leader-epoch-checkpoint}, in
Kafka's text format (L{twlog.storage.checkpoints}):

    0
    2
    3 0
    5 1090

(version, count, then C{epoch start_offset} lines, oldest first).  Every
change is written atomically on the thread pool (temporary file, fsync,
rename, fsync of the directory), one write at a time.  Epochs strictly
increase and start offsets never decrease.  A file that cannot be read is
reported once and the cache starts empty (so the replica truncates as one with
no epochs would), never a crash.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from twlog.storage.checkpoints import CheckpointWriter, format_checkpoint, non_negative, parse_checkpoint, read_text
from twlog.storage.failures import describe
from twlog.storage.flush import ThreadRunner

__all__ = ["LEADER_EPOCH_CHECKPOINT", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochCache"]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: Kafka's "no epoch" and "no offset", as L{LeaderEpochCache.end_offset_for} answers them.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    """A leader epoch and the offset of its first message."""

    epoch: int
    start_offset: int


def parse_epochs(text: str) -> list[EpochEntry]:
    """The entries of a L{LEADER_EPOCH_CHECKPOINT}'s C{text}.

    @raise ValueError: not the format, or the epochs do not strictly increase, or the start offsets decrease.
    """
    entries = [EpochEntry(non_negative(epoch, "epoch"), non_negative(offset, "start offset"))
               for epoch, offset in parse_checkpoint(text, 2)]
    for before, after in zip(entries, entries[1:]):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise ValueError(f"entry {tuple(after)} does not follow {tuple(before)}")
    return entries


class LeaderEpochCache:
    """The leader epochs of the partition in C{directory}, oldest first, kept in its L{LEADER_EPOCH_CHECKPOINT}.

    Every method runs on the reactor thread; those that change the entries
    return a Deferred that fires once the file holds the change (it fails with
    L{StorageFailed} when the file could not be written; the entries in memory
    are changed either way).  Open one with L{LeaderEpochCache.open}.
    """

    _log = Logger()

    def __init__(self, directory: str, run_in_thread: ThreadRunner, entries: list[EpochEntry] | None = None) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self._entries = list(entries or [])
        self._writer = CheckpointWriter(self.path, run_in_thread,
                                        lambda: format_checkpoint(self._entries))

    @classmethod
    def open(cls, directory: str, run_in_thread: ThreadRunner) -> "LeaderEpochCache":
        """The cache recorded in C{directory} (blocking: at start); empty when there is no file.

        A file that cannot be read or is not the format is reported in one warning and replaced by an
        empty one: the cache starts empty.
        """
        path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        try:
            text = read_text(path)
            return cls(directory, run_in_thread, [] if text is None else parse_epochs(text))
        except (OSError, ValueError) as e:
            cls._log.warn("{path} cannot be read ({error}); the leader epochs start empty", path=path,
                          error=describe(e))
        cache = cls(directory, run_in_thread)
        cache._writer.save().addErrback(lambda _: None)  # logged by the CheckpointWriter
        return cache

    # -- reading -----------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        """Every entry, oldest first (a copy)."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or L{UNDEFINED_EPOCH} when there is none."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        """The newest entry, or None."""
        return self._entries[-1] if self._entries else None

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """Where C{epoch} ends in this log, as C{(epoch, end offset)}: Kafka's C{LeaderEpochFileCache.endOffsetFor}.

          - the latest epoch ends at C{log_end} (the leader's end: it is still being written);
          - an older epoch ends where the first epoch greater than it starts, answered with the greatest
            epoch at or below it (the one whose messages end there);
          - L{UNDEFINED_EPOCH} (or any epoch below the first recorded, or above the latest, or none recorded)
            gives C{(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)}.
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._entries[-1].epoch:
            return epoch, log_end
        if epoch < self._entries[0].epoch or epoch > self._entries[-1].epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        previous = max(e for e in self._entries if e.epoch <= epoch)
        following = min(e for e in self._entries if e.epoch > epoch)
        return previous.epoch, following.start_offset

    # -- changing ----------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> Deferred[None]:
        """Record that C{epoch} begins at C{start_offset}.

        Ignored unless C{epoch} is newer than the latest and C{start_offset}
        is not below the latest entry's (a warning says so when either goes back).
        """
        latest = self.latest_entry
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"an epoch and its start offset are at least 0, not {epoch} and {start_offset}")
        if latest is not None and (epoch <= latest.epoch or start_offset < latest.start_offset):
            if latest != (epoch, start_offset):
                self._log.warn("{path}: epoch {epoch} at offset {offset} ignored: the latest is epoch {latest} at "
                               "offset {latest_offset}", path=self.path, epoch=epoch, offset=start_offset,
                               latest=latest.epoch, latest_offset=latest.start_offset)
            return succeed(None)
        self._entries.append(EpochEntry(epoch, start_offset))
        self._log.info("{path}: epoch {epoch} begins at offset {offset}", path=self.path, epoch=epoch,
                       offset=start_offset)
        return self._writer.save()

    def truncate_from_end(self, offset: int) -> Deferred[None]:
        """Drop the entries that start at or after C{offset} (the log was cut back to it)."""
        kept = [e for e in self._entries if e.start_offset < offset]
        if len(kept) == len(self._entries):
            return succeed(None)
        self._entries = kept
        return self._writer.save()

    def truncate_from_start(self, offset: int) -> Deferred[None]:
        """The log now starts at C{offset} (retention): drop the entries wholly before it, and move the start of
        the one it falls in (the last starting at or before it) to C{offset}: Kafka's C{truncateFromStart}."""
        before = [e for e in self._entries if e.start_offset <= offset]
        if not before or before[-1].start_offset == offset and len(before) == 1:
            return succeed(None)
        self._entries = [EpochEntry(before[-1].epoch, offset)] + self._entries[len(before):]
        return self._writer.save()
