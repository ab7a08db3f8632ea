# -*- test-case-name: tests.cli.test_produce,tests.integration.test_cli -*-
"""C{twlog produce}: lines of stdin or files to a topic, one message per line, in batches.

By default every batch is acknowledged once flushed (C{--ack flushed}), so
when the command returns, consumers can read everything it sent; several
batches are in flight at once, so the fsyncs overlap.  C{--no-wait} sends
fire-and-forget.  On a terminal, a progress line shows the count and rate.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterator
from typing import BinaryIO

from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text
from twisted.internet.defer import Deferred

from twlog.cli import avro
from twlog.cli.common import CLIENT_OPTIONS, UsageError, where
from twlog.envelope import AuditSettings
from twlog.errors import ConnectionFailed, MessageSizeTooLarge, TwlogError
from twlog.partition import TopicPartition, resolve_partition
from twlog.producer import Producer

#: Batches sent and not yet acknowledged, at most (the broker's fsyncs of one window overlap).
WINDOW = 8


def count(n: int, noun: str = "message") -> str:
    """C{1 message}, C{2 messages}, C{1,000 messages}."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def lines(sources: list[str]) -> Iterator[bytes]:
    """The lines of the named files (or stdin), without their line endings."""
    streams: list[BinaryIO] = [open(path, "rb") for path in sources] if sources else [sys.stdin.buffer]
    for stream in streams:
        with stream:
            for line in stream:
                yield line.rstrip(b"\r\n")


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


async def produce(reactor, args) -> None:
    """Send each input line as one message, in batches of C{--batch-size}; wait until they are visible."""
    ack = "none" if args.no_wait else args.ack
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    audit = AuditSettings(args.audit_origin, args.audit_window_s) if getattr(args, "audit", False) else False
    producer = Producer(**source, reactor=reactor, ack=ack, codec=args.codec, options=CLIENT_OPTIONS, audit=audit,
                        serializer=avro.serializer(args, reactor))
    separator = args.key_separator.encode("utf-8") if args.key_separator else None
    default_key = args.key.encode("utf-8") if args.key is not None else None
    in_flight: deque[Deferred] = deque()
    sent = 0
    bar = progress_bar()
    task = bar.add_task("produce", total=None) if bar is not None else None

    async def send(key: bytes | None, batch: list[bytes]) -> None:
        nonlocal sent
        d = producer.send(args.topic, batch, key=key, partition_index=index)
        d.addErrback(_explain, batch)
        in_flight.append(d)
        while len(in_flight) >= WINDOW:
            await in_flight.popleft()
        sent += len(batch)
        if bar is not None:
            bar.update(task, completed=sent)

    try:
        index = None
        if args.partition is not None:
            index = partition_index(await producer.partitions(args.topic), args.partition)
        if bar is not None:
            bar.start()
        pending: dict[bytes | None, list[bytes]] = {}
        queued = 0
        for line in lines(args.files):
            key, value = split_key(line, separator, default_key)
            pending.setdefault(key, []).append(value)
            queued += 1
            if queued >= args.batch_size:
                for key, batch in pending.items():
                    await send(key, batch)
                pending, queued = {}, 0
        for key, batch in pending.items():
            await send(key, batch)
        while in_flight:
            await in_flight.popleft()
    except ConnectionFailed as e:
        raise TwlogError(f"{e} (sending to {where(args)})") from None
    finally:
        if bar is not None:
            bar.stop()
        for d in in_flight:
            d.addErrback(lambda _: None)
        await producer.close()
    print(f"sent {count(sent)} to {args.topic}" + (" (not waiting for the brokers)" if args.no_wait else ""),
          file=sys.stderr)


def _explain(failure, batch: list[bytes]):
    """A refused batch's error; when its size was why, with the size of its largest line and the limit."""
    error = failure.value
    if isinstance(error, MessageSizeTooLarge):
        limit = f"{error.limit:,} bytes" if error.limit else "the broker's --max-message-bytes (default 1,000,000)"
        size = error.message_size or max(len(line) for line in batch)
        raise TwlogError(f"the broker refused a message of {size:,} bytes as too large; the limit is {limit}") from None
    return failure
