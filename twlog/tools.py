# -*- test-case-name: tests.integration.test_cli -*-
"""What C{twlog produce}, C{consume}, C{offsets} and C{topics} do, on the Twisted client.

Each command runs its coroutine under C{task.react}; L{twlog.cli} parses the
arguments.  Errors a user can act on (a broker that is down, a bad offset) end
the command with one line on stderr and exit status 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from twisted.internet.defer import Deferred
from twisted.internet.task import react

from twlog.consumer.simple import EARLIEST, LATEST, SimpleConsumer
from twlog.errors import TwlogError, error_for_code
from twlog.producer import Producer
from twlog.protocol.client import BrokerConnection, parse_brokers
from twlog.protocol.codec import MetadataRequest, decode_metadata_response

#: Seconds between progress lines on a terminal.
PROGRESS_EVERY_S = 2.0


def run(main, args) -> int:
    """Run C{main(reactor, args)} (a coroutine function) under react; return the exit status."""

    async def guarded(reactor) -> None:
        try:
            await main(reactor, args)
        except TwlogError as e:
            print(f"twlog: {e}", file=sys.stderr)
            raise SystemExit(1) from None
        except OSError as e:  # a file that is not there, a directory we cannot write
            print(f"twlog: {e.strerror}: {e.filename}" if e.filename else f"twlog: {e}", file=sys.stderr)
            raise SystemExit(1) from None
        except (BrokenPipeError, KeyboardInterrupt):
            raise SystemExit(1) from None

    try:
        react(lambda reactor: Deferred.fromCoroutine(guarded(reactor)))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def parse_time(text: str) -> int:
    """C{latest}, C{earliest}, or milliseconds since the epoch, as OFFSETS wants it."""
    if text == "latest":
        return LATEST
    if text == "earliest":
        return EARLIEST
    return int(text)


def _single_broker(text: str) -> tuple[str, int]:
    brokers = parse_brokers(text)
    if len(brokers) != 1:
        raise TwlogError(f"name one broker (HOST:PORT), not {text!r}")
    return brokers[0]


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


async def consume(reactor, args) -> None:
    """Print messages of one partition, one per line, from an offset; stop at the end unless following."""
    host, port = _single_broker(args.broker)
    consumer = SimpleConsumer(host, port, reactor=reactor, max_bytes=args.max_bytes)
    out = sys.stdout.buffer
    printed = 0
    try:
        if args.offset in ("earliest", "latest"):
            (offset,) = await consumer.offsets(args.topic, args.partition, parse_time(args.offset), 1)
        else:
            offset = int(args.offset)
        if args.follow:
            stream = consumer.stream(args.topic, args.partition, offset)
            async for message in stream:
                out.write(message.payload + b"\n")
                out.flush()
                printed += 1
                if args.max_messages and printed >= args.max_messages:
                    break
            return
        (end,) = await consumer.offsets(args.topic, args.partition, LATEST, 1)
        while offset < end and not (args.max_messages and printed >= args.max_messages):
            fetched = await consumer.fetch(args.topic, args.partition, offset)
            for message in fetched:
                out.write(message.payload + b"\n")
                printed += 1
                if args.max_messages and printed >= args.max_messages:
                    break
            if fetched.next_offset == offset:
                break
            offset = fetched.next_offset
        out.flush()
    finally:
        await consumer.close()


async def offsets(reactor, args) -> None:
    """Print the offsets OFFSETS answers, newest first, one per line."""
    host, port = _single_broker(args.broker)
    consumer = SimpleConsumer(host, port, reactor=reactor)
    try:
        for offset in await consumer.offsets(args.topic, args.partition, parse_time(args.time), args.max):
            print(offset)
    finally:
        await consumer.close()


async def topics(reactor, args) -> None:
    """Print what each broker holds: its id and address, then a line per topic."""
    for host, port in parse_brokers(args.broker):
        connection = BrokerConnection(host, port, reactor=reactor)
        try:
            error, metadata = decode_metadata_response(await connection.request(MetadataRequest()))
        finally:
            await connection.close()
        if error:
            raise error_for_code(error, f"broker {host}:{port} answered METADATA with error {error}")
        print(f"broker {metadata.broker_id} at {metadata.host}:{metadata.port} ({host}:{port})")
        for topic in metadata.topics:
            print(f"  {topic.topic}\t{topic.partitions} partitions")
        if not metadata.topics:
            print("  (no topics)")
