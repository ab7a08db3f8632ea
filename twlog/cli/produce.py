# -*- test-case-name: tests.cli.test_produce,tests.integration.test_cli -*-
"""C{twlog produce}: lines of stdin or files to a topic, one message per line, in batches.

By default every batch is acknowledged once flushed (C{--ack flushed}), so
when the command returns, consumers can read everything it sent; several
batches are in flight at once, so the fsyncs overlap.  C{--no-wait} sends
fire-and-forget.  On a terminal, a progress line shows the count and rate.

A batch whose broker is down goes to a live broker's partition unless C{--partition}
or a key pins it (L{twlog.producer.router}).  When a batch fails, nothing more is
sent, and once the batches in flight are answered the command stops with one line
giving the longest prefix of the input that was acknowledged (L{Ledger}), which
C{--skip-lines} resumes from.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Iterator
from typing import BinaryIO

import attrs
from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.python.failure import Failure

from twlog.cli import avro
from twlog.cli.common import UsageError, client_options, where
from twlog.envelope import AuditSettings
from twlog.errors import (
    BrokerError,
    BrokerTimeout,
    ConnectionFailed,
    ConnectionLost,
    MessageSizeTooLarge,
    RequestTimedOut,
    StorageFailed,
    TwlogError,
)
from twlog.partition import TopicPartition, resolve_partition
from twlog.producer import Producer

#: Batches sent and not yet acknowledged, at most (the broker's fsyncs of one window overlap).
WINDOW = 8

#: How much of the input the reader thread reads at a time, and how many such chunks it reads ahead.
CHUNK_BYTES = 1 << 16
CHUNKS_AHEAD = 4


def count(n: int, noun: str = "message") -> str:
    """C{1 message}, C{2 messages}, C{1,000 messages}."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def chunks(streams: list[BinaryIO], size: int = CHUNK_BYTES) -> Iterator[list[bytes]]:
    """The lines of C{streams}, one after the other, without their line endings, in lists of what each read
    gave (at most C{size} bytes): a pipe's lines come as soon as they arrive, not once C{size} bytes have."""
    for stream in streams:
        with stream:
            tail = b""
            while True:
                data = stream.read1(size) if hasattr(stream, "read1") else stream.read(size)
                if not data:
                    break
                *complete, tail = (tail + data).split(b"\n")
                if complete:
                    yield [line.rstrip(b"\r\n") for line in complete]
            if tail:
                yield [tail.rstrip(b"\r\n")]


class InputReader:
    """The input's lines, read by a daemon thread: a slow pipe never holds up the reactor (the acknowledgements
    of batches in flight), nor the command's exit once it stops.

    @param streams: the open files (or stdin), read one after the other.
    """

    def __init__(self, reactor, streams: list[BinaryIO]) -> None:
        self._reactor = reactor
        self._streams = streams
        self._ready: deque[list[bytes] | BaseException | None] = deque()
        self._waiting: Deferred | None = None
        self._credit = threading.Semaphore(CHUNKS_AHEAD)
        self._thread: threading.Thread | None = None

    @classmethod
    def open(cls, reactor, sources: list[str]) -> InputReader:
        """A reader of the named files (all opened now, so that a missing one stops the command before anything
        is sent), or of stdin."""
        return cls(reactor, [open(path, "rb") for path in sources] if sources else [sys.stdin.buffer])

    def next(self) -> Deferred[list[bytes] | None]:
        """The next lines read (at least one), or None at the end of the input."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._read, name="twlog produce input", daemon=True)
            self._thread.start()
        if self._ready:
            return self._give(self._ready.popleft())
        self._waiting = Deferred()
        return self._waiting

    def _give(self, item) -> Deferred:
        if isinstance(item, BaseException):
            return fail(item)
        if item is not None:
            self._credit.release()
        return succeed(item)

    def _read(self) -> None:  # (in the thread)
        try:
            for lines in chunks(self._streams):
                self._credit.acquire()
                self._reactor.callFromThread(self._arrived, lines)
            self._reactor.callFromThread(self._arrived, None)
        except Exception as e:  # an unreadable file: the command stops with it
            self._reactor.callFromThread(self._arrived, e)

    def _arrived(self, item) -> None:
        if self._waiting is None:
            self._ready.append(item)
            return
        waiting, self._waiting = self._waiting, None
        self._give(item).chainDeferred(waiting)


@attrs.define(eq=False)
class _Batch:
    """One request's lines, by their numbers in the input (counting from its first line, skipped ones too)."""

    lines: list[int]
    #: None while in flight; then ACKNOWLEDGED, or the error (with whether the batch may be stored anyway).
    error: BaseException | None = None
    done: bool = False
    acknowledged: bool = False
    maybe_stored: bool = False


class Ledger:
    """Which lines of the input were acknowledged: exactly the longest prefix of the input that was, so that
    C{--skip-lines} resumes without losing a line; and what a resume from there sends again.

    The lines are handed out in chunks of consecutive lines (C{--batch-size} of them), each split into
    batches by key; the batches of several chunks are in flight at once and may be answered in any order.
    """

    def __init__(self, skipped: int = 0) -> None:
        #: The lines before the first chunk still held are all acknowledged.
        self._settled = skipped
        #: Chunks not wholly acknowledged yet, in input order: (their batches, the line after their last).
        self._chunks: deque[tuple[list[_Batch], int]] = deque()

    def chunk(self, batches: list[list[int]], end: int) -> list[_Batch]:
        """Batches of the lines up to (not including) line C{end}, in the order of their first lines."""
        made = [_Batch(lines) for lines in batches]
        self._chunks.append((made, end))
        return made

    def acknowledged(self, batch: _Batch) -> None:
        batch.done = batch.acknowledged = True
        while self._chunks and all(b.acknowledged for b in self._chunks[0][0]):
            self._settled = self._chunks.popleft()[1]

    def failed(self, batch: _Batch, error: BaseException) -> None:
        batch.done, batch.error, batch.maybe_stored = True, error, maybe_stored(error)

    @property
    def prefix(self) -> int:
        """How many lines at the start of the input are acknowledged (skipped ones included)."""
        for batches, _ in self._chunks:
            firsts = [b.lines[0] for b in batches if not b.acknowledged]
            if firsts:
                return min(firsts)
        return self._settled

    def beyond(self) -> tuple[int, int]:
        """Of the lines after L{prefix}: how many were acknowledged, and how many may be stored (their batch
        failed in a way that does not say whether it was written) — what a resume from L{prefix} sends again."""
        prefix = self.prefix
        batches = [b for chunk, _ in self._chunks for b in chunk]
        acknowledged = sum(1 for b in batches if b.acknowledged for n in b.lines if n >= prefix)
        return acknowledged, sum(len(b.lines) for b in batches if b.maybe_stored)

    def first_error(self) -> BaseException | None:
        """The error of the failed batch first in the input (where the prefix stops, if that one failed)."""
        failed = [b for chunk, _ in self._chunks for b in chunk if b.error is not None]
        return min(failed, key=lambda b: b.lines[0]).error if failed else None

    def report(self, error: BaseException, *, acknowledged: bool = True) -> str:
        """The line saying where the input stopped and how to resume: C{stopped after 12,000 of the input's
        lines were acknowledged (resume with --skip-lines 12000): <error>}."""
        prefix = self.prefix
        again, maybe = self.beyond()
        verb = "acknowledged" if acknowledged else "sent (--no-wait: not acknowledged)"
        notes = []
        if again:
            notes.append(f"{count(again, 'later line')} that {'was' if again == 1 else 'were'} {verb} too")
        if maybe:
            notes.append(f"{count(maybe, 'later line')} that may be stored (no answer came)")
        extra = f"; resuming there sends again {' and '.join(notes)}" if notes else ""
        if prefix == 0:
            return f"stopped before any of the input's lines were {verb}{extra}: {error}"
        return (f"stopped after {prefix:,} of the input's lines {'was' if prefix == 1 else 'were'} {verb} "
                f"(resume with --skip-lines {prefix}{extra}): {error}")


def maybe_stored(error: BaseException) -> bool:
    """Whether a batch that failed with C{error} may be stored all the same: the connection broke after it was
    written, no answer came in time, or the broker says it could not finish (a flush timed out or failed,
    an unknown error) rather than that it wrote nothing."""
    if isinstance(error, (ConnectionLost, BrokerTimeout, RequestTimedOut, StorageFailed)):
        return True
    return type(error) is BrokerError  # UNKNOWN (-1): the broker cannot say


def split_key(line: bytes, separator: bytes | None, key: bytes | None) -> tuple[bytes | None, bytes]:
    """The partitioning key and the value of a line: with C{separator}, the part before its first occurrence.

    A line without the separator has no key of its own (C{key}, the --key, if any).
    """
    if separator:
        head, sep, tail = line.partition(separator)
        if sep:
            return head, tail
    return key, line


def partition_index(partitions: list[TopicPartition], wanted: str) -> int:
    """The index (into the topic's partitions, by broker and partition) of the one C{wanted} names.

    @raise UsageError: no such partition, listing the valid ones.
    """
    ordered = sorted(partitions)
    try:
        return ordered.index(resolve_partition(wanted, ordered))
    except ValueError as e:
        raise UsageError(str(e)) from None


class _Rate(ProgressColumn):
    """Messages per second."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:,.0f} msg/s" if task.speed else "")


def progress_bar() -> Progress | None:
    """A progress display on stderr (count, rate, time), only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None
    return Progress(SpinnerColumn(), TextColumn("sent {task.completed:,.0f} messages"), _Rate(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


class _Stop(Exception):
    """A batch failed: send nothing more."""


async def produce(reactor, args, reader: InputReader | None = None, producer: Producer | None = None) -> None:
    """Send each input line as one message, in batches of C{--batch-size}; wait until they are visible.

    When a batch fails, nothing more is sent; once the batches in flight are answered, the command stops saying
    how many lines at the start of the input were acknowledged (L{Ledger.report}), to resume from with
    C{--skip-lines}.  (C{reader} and C{producer}: tests.)
    """
    ack = "none" if args.no_wait else args.ack
    if producer is None:
        source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
        audit = AuditSettings(args.audit_origin, args.audit_window_s) if getattr(args, "audit", False) else False
        producer = Producer(**source, reactor=reactor, ack=ack, codec=args.codec, options=client_options(args),
                            audit=audit, serializer=avro.serializer(args, reactor))
    if reader is None:
        reader = InputReader.open(reactor, args.files)
    skip = getattr(args, "skip_lines", 0) or 0
    separator = args.key_separator.encode("utf-8") if args.key_separator else None
    default_key = args.key.encode("utf-8") if args.key is not None else None
    ledger = Ledger(skip)
    in_flight: deque[Deferred] = deque()
    failures: list[BaseException] = []
    sent = 0
    bar = progress_bar()
    task = bar.add_task("produce", total=None) if bar is not None else None

    stopping: Deferred[None] = Deferred()  # fires at the first failure: stop waiting for more input

    def settled(result, batch: _Batch):
        if isinstance(result, Failure):
            ledger.failed(batch, result.value)
            failures.append(result.value)
            if not stopping.called:
                stopping.callback(None)
        else:
            ledger.acknowledged(batch)

    async def next_lines() -> list[bytes] | None:
        """The next lines of the input; None at its end, or once a batch failed (a pipe may be slow to
        send more: the command stops without waiting for it)."""
        coming = reader.next()
        if not coming.called:
            await DeferredList([coming, stopping], fireOnOneCallback=True, fireOnOneErrback=True)
            if not coming.called:
                return None
        return await coming

    async def send_chunk(chunk: list[bytes], first: int) -> None:
        """Send lines C{first}.. (C{chunk}) as one batch per key."""
        nonlocal sent
        pending: dict[bytes | None, tuple[list[int], list[bytes]]] = {}
        for number, line in enumerate(chunk, first):
            key, value = split_key(line, separator, default_key)
            numbers, values = pending.setdefault(key, ([], []))
            numbers.append(number)
            values.append(value)
        batches = ledger.chunk([numbers for numbers, _ in pending.values()], first + len(chunk))
        for (key, (_, values)), batch in zip(pending.items(), batches):
            if failures:
                raise _Stop()
            d = producer.send(args.topic, values, key=key, partition_index=index)
            d.addErrback(_explain, values)
            d.addBoth(settled, batch)
            in_flight.append(d)
            while len(in_flight) >= WINDOW:
                await in_flight.popleft()
            sent += len(values)
            if bar is not None:
                bar.update(task, completed=sent)

    read = 0  # the number of the first line queued (lines read before it, skipped ones included)
    try:
        try:
            index = None
            if args.partition is not None:
                index = partition_index(await producer.partitions(args.topic, offline=True), args.partition)
            if bar is not None:
                bar.start()
            queued: list[bytes] = []
            while (lines := await next_lines()) is not None:
                if read + len(lines) <= skip:
                    read += len(lines)
                    continue
                lines = lines[max(0, skip - read):] if read < skip else lines
                read = max(read, skip)
                queued.extend(lines)
                while len(queued) >= args.batch_size:
                    chunk, queued = queued[:args.batch_size], queued[args.batch_size:]
                    await send_chunk(chunk, read)
                    read += len(chunk)
            if queued:
                await send_chunk(queued, read)
                read += len(queued)
        except _Stop:
            pass
        finally:
            if bar is not None:
                bar.stop()
            # Each settles into the ledger (none fails).  (A DeferredList, not an await of each: this may run
            # inside the callbacks of the batch whose failure stopped the input.)
            await DeferredList(list(in_flight))
            in_flight.clear()
        if failures:
            error = ledger.first_error()
            raise TwlogError(ledger.report(_where(error, args), acknowledged=not args.no_wait)) from None
        if read < skip:
            raise TwlogError(f"--skip-lines {skip} is more than the {count(read, 'line')} of the input: nothing sent")
    except ConnectionFailed as e:
        raise TwlogError(f"{e} (sending to {where(args)})") from None
    finally:
        await producer.close()
    skipped = f" (after skipping the input's first {count(skip, 'line')})" if skip else ""
    print(f"sent {count(sent)} to {args.topic}{skipped}" + (" (not waiting for the brokers)" if args.no_wait else ""),
          file=sys.stderr)


def _where(error: BaseException, args) -> BaseException | str:
    """C{error}, with where the command was sending to when it is a connection's."""
    return f"{error} (sending to {where(args)})" if isinstance(error, ConnectionFailed) else error


def _explain(failure, batch: list[bytes]):
    """A refused batch's error; when its size was why, with the size of its largest line and the limit."""
    error = failure.value
    if isinstance(error, MessageSizeTooLarge):
        limit = f"{error.limit:,} bytes" if error.limit else "the broker's --max-message-bytes (default 1,000,000)"
        size = error.message_size or max(len(line) for line in batch)
        raise TwlogError(f"the broker refused a message of {size:,} bytes as too large; the limit is {limit}") from None
    return failure
