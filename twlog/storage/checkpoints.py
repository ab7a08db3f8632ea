# -*- test-case-name: tests.storage.test_checkpoints -*-
"""Kafka's small text checkpoint files, and the high watermarks of a log directory.

Kafka keeps a replica's bookkeeping in plain text files of one shape: a
version line (C{0}), a count line, then that many lines of space-separated
fields.  Two of them are twlog's too:

  - C{<log-dir>/replication-offset-checkpoint}: C{topic partition offset}, the
    high watermark of each replicated partition (L{format_offsets},
    L{parse_offsets}; read at start, written now and then by its owner through
    L{OffsetCheckpoint});
  - C{<log-dir>/<topic>-<n>/leader-epoch-checkpoint}: C{epoch start_offset}
    (L{twlog.storage.epochs}).

A file is replaced atomically (L{write_atomically}: a temporary file, fsync,
rename, fsync of the directory), so a crash leaves the old file or the new
one, never a mix.  L{CheckpointWriter} does that on the thread pool, one write
at a time, a change made while one runs going into the next.  The parsers and
formatters are pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.errors import CorruptLog, StorageFailed
from twlog.storage.failures import describe
from twlog.storage.flush import ThreadRunner
from twlog.storage.topics import fsync_directory

__all__ = [
    "CHECKPOINT_VERSION",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointWriter",
    "OffsetCheckpoint",
    "format_checkpoint",
    "format_offsets",
    "parse_checkpoint",
    "parse_offsets",
    "read_replication_offsets",
    "write_atomically",
]

#: The only version of the format (Kafka's, for both files).
CHECKPOINT_VERSION = 0
#: The high watermarks of a log directory's replicated partitions.
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


def format_checkpoint(rows: Iterable[Sequence[object]]) -> str:
    """The text of a checkpoint holding C{rows}: the version, the count, then one line of fields per row."""
    lines = [" ".join(str(field) for field in row) for row in rows]
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(lines)), *lines])


def parse_checkpoint(text: str, fields: int) -> list[list[str]]:
    """The rows of a checkpoint's C{text}, each of C{fields} fields (still strings).

    @raise ValueError: not the format: another version, a count that is not the
        number of rows, a row of another width, or anything after the rows.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the last line's newline
    if not lines or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"the first line is {lines[0] if lines else ''!r}, not the version {CHECKPOINT_VERSION}")
    if len(lines) < 2 or not lines[1].strip().isdigit():
        raise ValueError("the second line is not a count")
    count = int(lines[1])
    if len(lines) - 2 != count:
        raise ValueError(f"the count says {count} entries but {len(lines) - 2} lines follow")
    rows = []
    for number, line in enumerate(lines[2:], start=3):
        row = line.split()
        if len(row) != fields:
            raise ValueError(f"line {number} has {len(row)} fields, not {fields}: {line!r}")
        rows.append(row)
    return rows


def non_negative(field: str, what: str) -> int:
    """C{field} as an integer of at least 0.

    @raise ValueError: it is not one; the message names C{what}.
    """
    if not field.isdigit():
        raise ValueError(f"{what} {field!r} is not an integer of at least 0")
    return int(field)


def format_offsets(offsets: Mapping[tuple[str, int], int]) -> str:
    """The text of a L{REPLICATION_OFFSET_CHECKPOINT}: C{topic partition offset} per partition, sorted."""
    return format_checkpoint((topic, partition, offset) for (topic, partition), offset in sorted(offsets.items()))


def parse_offsets(text: str) -> dict[tuple[str, int], int]:
    """The offsets of a L{REPLICATION_OFFSET_CHECKPOINT}'s C{text}, by C{(topic, partition)}.

    @raise ValueError: not the format, a partition or offset that is not an integer of at least 0,
        or a partition named twice.
    """
    offsets: dict[tuple[str, int], int] = {}
    for topic, partition, offset in parse_checkpoint(text, 3):
        key = (topic, non_negative(partition, "partition"))
        if key in offsets:
            raise ValueError(f"{topic} {partition} appears twice")
        offsets[key] = non_negative(offset, "offset")
    return offsets


def read_text(path: str) -> str | None:
    """The text of the file at C{path}, or None when there is none (blocking)."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_atomically(path: str, text: str) -> None:
    """Replace the file at C{path} with C{text}: a temporary file, fsync, rename, fsync of the directory (blocking).

    A crash leaves the old file or the new one, never a mix.
    """
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="ascii") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def read_replication_offsets(log_dir: str) -> dict[tuple[str, int], int]:
    """The high watermarks recorded in C{log_dir}'s L{REPLICATION_OFFSET_CHECKPOINT} (none when it is missing;
    blocking, at start).

    @raise CorruptLog: the file cannot be read or is not the format; the message names it.
    """
    path = os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT)
    try:
        text = read_text(path)
        return {} if text is None else parse_offsets(text)
    except (OSError, ValueError) as e:
        raise CorruptLog(f"{path} is not a replication offset checkpoint ({describe(e)}); move it away to start "
                         "(the high watermarks then start from 0 and follow the leaders)") from None


class CheckpointWriter:
    """Writes one checkpoint file on the thread pool, atomically, one write at a time.

    L{save} asks for a write of what C{render()} returns when the write
    starts: saves asked for while one runs are covered by one more write
    after it, so a burst of changes costs at most two writes.
    """

    _log = Logger()

    def __init__(self, path: str, run_in_thread: ThreadRunner, render: Callable[[], str]) -> None:
        self.path = path
        self._run_in_thread = run_in_thread
        self._render = render
        self._writing = False
        self._waiting: list[Deferred[None]] = []

    def save(self) -> Deferred[None]:
        """Write the file with the current contents; fires once they are durable.

        @return: fails with L{StorageFailed} when the file could not be written (the error is logged too).
        """
        d: Deferred[None] = Deferred()
        self._waiting.append(d)
        if not self._writing:
            self._start()
        return d

    def _start(self) -> None:
        self._writing = True
        waiting, self._waiting = self._waiting, []
        d = self._run_in_thread(write_atomically, self.path, self._render())
        d.addBoth(self._written, waiting)

    def _written(self, result: object, waiting: list[Deferred[None]]) -> None:
        self._writing = False
        if isinstance(result, Failure):
            error = StorageFailed(f"cannot write {self.path}: {describe(result.value)}")
            self._log.error("{error}", error=error)
            for d in waiting:
                d.errback(error)
        else:
            for d in waiting:
                d.callback(None)
        if self._waiting:
            self._start()


class OffsetCheckpoint:
    """The L{REPLICATION_OFFSET_CHECKPOINT} of one log directory: read at start, written by its owner."""

    def __init__(self, log_dir: str, run_in_thread: ThreadRunner) -> None:
        self.log_dir = log_dir
        self._offsets: dict[tuple[str, int], int] = {}
        self._writer = CheckpointWriter(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT), run_in_thread,
                                        lambda: format_offsets(self._offsets))

    def read(self) -> dict[tuple[str, int], int]:
        """The recorded high watermarks (blocking: at start).

        @raise CorruptLog: the file is not the format.
        """
        self._offsets = read_replication_offsets(self.log_dir)
        return dict(self._offsets)

    def write(self, offsets: Mapping[tuple[str, int], int]) -> Deferred[None]:
        """Record C{offsets} (every replicated partition's high watermark) in place of the last ones.

        @return: fires once the file is durable; fails with L{StorageFailed} when it could not be written.
        """
        self._offsets = dict(offsets)
        return self._writer.save()
