# -*- test-case-name: tests.cli.test_consume,tests.integration.test_cli -*-
"""C{twlog consume}: print a topic's messages: every partition of the cluster, or one (C{--partition}).

Without C{--group}, the partitions are found through C{--broker} (METADATA:
any broker of the cluster) or C{--zookeeper} (the brokers' registrations), and
read from C{--offset} to the end each had when the command started,
interleaved (a fetch from each partition in turn), or forever with
C{--follow}.  With C{--group} (and C{--zookeeper}) the command is a member
of a consumer group instead (L{twlog.cli.consume_group}).
"""

from __future__ import annotations

import sys
from contextlib import suppress

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from twlog.cli import avro
from twlog.cli.common import UsageError, bounded, client_options, find_partitions, stop_on_shutdown
from twlog.cli.consume_group import consume_group
from twlog.cli.formats import Formatter, message_formatter
from twlog.client.connection import BrokerConnection
from twlog.consumer.admin import OffsetRefused, check_reset_offset
from twlog.consumer.simple import EARLIEST, LATEST, SimpleConsumer
from twlog.coord.layout import PartitionLocation
from twlog.envelope import strip
from twlog.errors import TwlogError
from twlog.storage.message import CorruptMessage

#: How long closing the connections may take after Ctrl-C.
CLOSE_TIMEOUT_S = 1.5


class _Output:
    """Writes formatted messages to stdout and counts them against C{--max-messages}."""

    def __init__(self, args, formatter: Formatter) -> None:
        self.out = sys.stdout.buffer
        self.formatter = formatter
        self.topic = args.topic
        self.limit = args.max_messages
        self.printed = 0

    @property
    def full(self) -> bool:
        return bool(self.limit) and self.printed >= self.limit

    def write(self, location: PartitionLocation, offset: int, value: bytes) -> None:
        self.out.write(self.formatter(self.topic, location.name, offset, value))
        self.printed += 1


async def consume(reactor, args) -> None:
    """Print the topic's messages (all partitions, or --partition), one per line, from --offset."""
    if args.group:
        if not args.zookeeper:
            raise UsageError("--group needs --zookeeper: groups are coordinated through ZooKeeper")
        return await consume_group(reactor, args, _formatter(args), _on_corrupt(args))
    locations = await find_partitions(args, args.topic, reactor)  # (--partition: that one)
    if isinstance(args.offset, int) and len(locations) > 1:
        names = ", ".join(location.name for location in locations)
        raise UsageError(f"--offset {args.offset} is a byte offset in one partition: add --partition (one of {names})")
    consumers: dict[tuple[str, int], SimpleConsumer] = {}
    decode = avro.deserializer(args, reactor)  # --registry: Avro to JSON
    options = client_options(args)

    def consumer_of(location: PartitionLocation) -> SimpleConsumer:
        key = (location.host, location.port)
        if key not in consumers:
            consumers[key] = SimpleConsumer(location.host, location.port, reactor=reactor, max_bytes=args.max_bytes,
                                            on_corrupt=_on_corrupt(args), options=options, deserializer=decode)
        return consumers[key]

    output = _Output(args, _formatter(args))
    try:
        starts = [await start_offset(consumer_of(location), location, args.offset, reactor) for location in locations]
        if args.follow:
            await _follow(reactor, locations, starts, consumer_of, output)
        else:
            await _read_to_end(locations, starts, consumer_of, output)
    except CorruptMessage as e:
        raise TwlogError(f"{e} (--skip-corrupt skips it)") from None
    finally:
        output.out.flush()  # the messages before an error are printed; then one line says why
        closing = DeferredList([c.close() for c in consumers.values()], consumeErrors=True)
        await bounded(reactor, closing, CLOSE_TIMEOUT_S)


async def start_offset(consumer: SimpleConsumer, location: PartitionLocation, offset: str | int, reactor=None) -> int:
    """Where to start reading C{location}: its earliest or latest offset, or a byte offset inside its log where a
    message starts.

    @raise TwlogError: a byte offset outside the partition's log, naming its valid range; or one inside a
        message, naming the nearest message boundaries (asked of the broker, as C{groups reset} does).
    """
    if offset == "earliest":
        (first,) = await consumer.offsets(location.topic, location.name, EARLIEST, 1)
        return first
    (latest,) = await consumer.offsets(location.topic, location.name, LATEST, 1)
    if offset == "latest":
        return latest
    (earliest,) = await consumer.offsets(location.topic, location.name, EARLIEST, 1)
    if not earliest <= int(offset) <= latest:
        raise TwlogError(
            f"offset {offset} is outside partition {location.name} of {location.topic!r}: valid offsets are "
            f"{earliest} to {latest} (or earliest, latest)"
        )
    if earliest < int(offset) < latest:
        connection = BrokerConnection(location.host, location.port, reactor=reactor, options=consumer.options)
        try:
            await check_reset_offset(connection.request, location.tp, int(offset))
        except OffsetRefused as e:
            raise TwlogError(str(e)) from None
        finally:
            await connection.close()
    return int(offset)


async def _read_to_end(locations, starts, consumer_of, output: _Output) -> None:
    """Fetch from each partition in turn until each reaches the end it had when the command started."""
    ends = [(await consumer_of(loc).offsets(loc.topic, loc.name, LATEST, 1))[0] for loc in locations]
    positions = dict(enumerate(starts))
    while positions and not output.full:
        for index, offset in list(positions.items()):
            location = locations[index]
            if offset >= ends[index]:
                del positions[index]
                continue
            fetched = await consumer_of(location).fetch(location.topic, location.name, offset)
            for message in fetched:
                output.write(location, message.offset, message.payload)
                if output.full:
                    return
            if fetched.next_offset == offset:
                del positions[index]  # nothing more to read (a skipped tail, or data gone)
            else:
                positions[index] = fetched.next_offset


async def _follow(reactor, locations, starts, consumer_of, output: _Output) -> None:
    """Print every partition's messages as they come, until --max-messages or Ctrl-C."""
    done: Deferred = Deferred()
    closing: Deferred = Deferred()

    def finish(failure=None) -> None:
        if not done.called:
            done.errback(failure) if failure is not None else done.callback(None)

    async def drain(location: PartitionLocation, stream) -> None:
        async for message in stream:
            output.write(location, message.offset, message.payload)
            output.out.flush()
            if output.full:
                finish()
                return

    trigger = stop_on_shutdown(reactor, finish, closing)
    streams = [consumer_of(loc).stream(loc.topic, loc.name, start) for loc, start in zip(locations, starts)]
    try:
        for location, stream in zip(locations, streams):
            Deferred.fromCoroutine(drain(location, stream)).addErrback(finish)
        await done
    finally:
        await bounded(reactor, DeferredList([s.close() for s in streams], consumeErrors=True), CLOSE_TIMEOUT_S)
        with suppress(ValueError, KeyError):  # (already run: this is the shutdown)
            reactor.removeSystemEventTrigger(trigger)
        closing.callback(None)


def _formatter(args) -> Formatter:
    """C{--json}/C{--format}'s formatter; with C{--audit}, of the payloads without their audit envelope."""
    formatter = message_formatter(args)
    if not getattr(args, "audit", False):
        return formatter
    return lambda topic, partition, offset, value: formatter(topic, partition, offset, strip(value))


def _on_corrupt(args) -> str:
    """The consumers' C{on_corrupt}; with --skip-corrupt, each skip (a warning the consumer logs) goes to stderr."""
    if not getattr(args, "skip_corrupt", False):
        return "fail"
    globalLogPublisher.addObserver(_print_skips)  # (once: the publisher keeps one of each)
    return "skip"


def _print_skips(event: dict) -> None:
    if event.get("log_level") == LogLevel.warn and "corrupt" in (event.get("log_format") or ""):
        print(f"twlog: {formatEvent(event)}", file=sys.stderr)
