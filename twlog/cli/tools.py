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
from twlog.client.connection import BrokerConnection, parse_brokers
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
        except (BrokenPipeError, KeyboardInterrupt):  # `twlog ... | head`, Ctrl-C: stop quietly
            raise SystemExit(1) from None
        except OSError as e:  # a file that is not there, a directory we cannot write
            print(f"twlog: {e.strerror}: {e.filename}" if e.filename else f"twlog: {e}", file=sys.stderr)
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
    if args.zookeeper:
        return await consume_group(reactor, args)
    if args.group:
        raise TwlogError("--group needs --zookeeper: groups are coordinated through ZooKeeper")
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


async def consume_group(reactor, args) -> None:
    """Print the messages this group member receives, one per line, until --max-messages or Ctrl-C."""
    from twlog.consumer.group import GroupConsumer

    if not args.group:
        raise TwlogError("--zookeeper needs --group: the consumer group this member joins")
    if args.offset not in ("earliest", "latest"):
        raise TwlogError("with --zookeeper, --offset is where a new group starts: earliest or latest")
    consumer = GroupConsumer(args.zookeeper, args.group, reactor=reactor,
                             auto_offset_reset="smallest" if args.offset == "earliest" else "largest")
    out = sys.stdout.buffer
    printed = 0
    done: Deferred = Deferred()

    async def drain(stream) -> None:
        nonlocal printed
        async for message in stream:
            out.write(message.payload + b"\n")
            printed += 1
            if args.max_messages and printed >= args.max_messages:
                if not done.called:
                    done.callback(None)
                return
            if printed % 100 == 0:
                out.flush()

    def stop_on_ctrl_c() -> Deferred:
        if not done.called:
            done.callback(None)
        return closing

    closing: Deferred = Deferred()
    reactor.addSystemEventTrigger("before", "shutdown", stop_on_ctrl_c)
    try:
        streams = (await consumer.create_message_streams({args.topic: args.streams}))[args.topic]
        for stream in streams:
            Deferred.fromCoroutine(drain(stream)).addErrback(
                lambda failure: done.called or done.errback(failure)
            )
        await done
    finally:
        out.flush()
        await consumer.close()  # commits what was printed
        closing.callback(None)


async def groups(reactor, args) -> None:
    """Print each consumer group's members and, per partition, owner, committed offset and lag."""
    from twlog.consumer.admin import describe_groups
    from twlog.coord.zk import ZooKeeper

    zk = ZooKeeper(args.zookeeper, reactor=reactor)
    await zk.start()
    try:
        descriptions = await describe_groups(zk, args.group, reactor=reactor)
    finally:
        await zk.stop()
    if not descriptions:
        print("(no consumer groups)")
    for group in descriptions:
        total = "unknown" if group.lag is None else f"{group.lag:,}"
        print(f"group {group.group}: {len(group.members)} member(s), total lag {total} bytes")
        for member in group.members:
            subscription = ", ".join(f"{t} x{n}" for t, n in sorted((member.subscription or {}).items()))
            print(f"  member {member.consumer_id}: {subscription or '(no subscription)'}")
        print(f"  {'topic':<20} {'partition':<10} {'owner':<36} {'offset':>14} {'latest':>14} {'lag':>12}")
        for p in group.partitions:
            def show(value):
                return "-" if value is None else f"{value:,}"

            print(f"  {p.topic:<20} {p.partition:<10} {p.owner or '-':<36} {show(p.offset):>14} "
                  f"{show(p.latest):>14} {show(p.lag):>12}")
