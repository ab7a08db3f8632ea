# -*- test-case-name: tests.integration.test_cli -*-
"""C{twlog produce}: lines of stdin or files to a topic, one message per line, in batches."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from twlog.producer import Producer

#: Seconds between progress lines on a terminal.
PROGRESS_EVERY_S = 2.0


def _lines(sources: list[str]) -> Iterator[bytes]:
    """The lines of the named files (or stdin), without their line endings."""
    streams: list[BinaryIO] = [open(path, "rb") for path in sources] if sources else [sys.stdin.buffer]
    for stream in streams:
        with stream:
            for line in stream:
                yield line.rstrip(b"\r\n")


class _Progress:
    """A progress line on stderr every few seconds, only on a terminal."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.shown = time.monotonic()
        self.enabled = sys.stderr.isatty()

    def update(self, count: int) -> None:
        if self.enabled and time.monotonic() - self.shown >= PROGRESS_EVERY_S:
            self.shown = time.monotonic()
            print(f"  {self.verb} {count:,} messages", file=sys.stderr)


async def produce(reactor, args) -> None:
    """Send each input line as one message, in batches of C{--batch-size} (one request each)."""
    if args.zookeeper:
        producer = Producer(zookeeper=args.zookeeper, reactor=reactor, ack=args.ack, codec=args.codec)
    else:
        producer = Producer(args.broker, reactor=reactor, ack=args.ack, codec=args.codec)
    sent = 0
    batch: list[bytes] = []
    progress = _Progress("sent")
    try:
        for line in _lines(args.files):
            batch.append(line)
            if len(batch) >= args.batch_size:
                await producer.send(args.topic, batch, key=args.key, partition=args.partition)
                sent += len(batch)
                batch = []
                progress.update(sent)
        if batch:
            await producer.send(args.topic, batch, key=args.key, partition=args.partition)
            sent += len(batch)
    finally:
        await producer.close()
    print(f"sent {sent:,} messages to {args.topic}", file=sys.stderr)
