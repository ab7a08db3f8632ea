# -*- test-case-name: tests.integration.test_cli -*-
"""C{twlog consume}: print one partition's messages (C{--broker}), or a group member's (C{--zookeeper})."""

from __future__ import annotations

import sys

from twisted.internet.defer import Deferred
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from twlog.cli.common import parse_time, single_broker
from twlog.consumer.group import GroupConsumer
from twlog.consumer.simple import LATEST, SimpleConsumer
from twlog.errors import TwlogError
from twlog.storage.message import CorruptMessage


async def consume(reactor, args) -> None:
    """Print messages of one partition, one per line, from an offset; stop at the end unless following."""
    if args.zookeeper:
        return await consume_group(reactor, args)
    if args.group:
        raise TwlogError("--group needs --zookeeper: groups are coordinated through ZooKeeper")
    host, port = single_broker(args.broker)
    consumer = SimpleConsumer(host, port, reactor=reactor, max_bytes=args.max_bytes, on_corrupt=_on_corrupt(args))
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
    except CorruptMessage as e:
        out.flush()  # the messages before the corrupt one are printed; then one line names it
        raise TwlogError(f"{e} (--skip-corrupt skips it)") from None
    finally:
        await consumer.close()


def _on_corrupt(args) -> str:
    """The consumers' C{on_corrupt}; with --skip-corrupt, each skip (a warning the consumer logs) goes to stderr."""
    if not getattr(args, "skip_corrupt", False):
        return "fail"
    globalLogPublisher.addObserver(_print_skips)  # (once: the publisher keeps one of each)
    return "skip"


def _print_skips(event: dict) -> None:
    if event.get("log_level") == LogLevel.warn and "corrupt" in (event.get("log_format") or ""):
        print(f"twlog: {formatEvent(event)}", file=sys.stderr)


async def consume_group(reactor, args) -> None:
    """Print the messages this group member receives, one per line, until --max-messages or Ctrl-C."""
    if not args.group:
        raise TwlogError("--zookeeper needs --group: the consumer group this member joins")
    if args.offset not in ("earliest", "latest"):
        raise TwlogError("with --zookeeper, --offset is where a new group starts: earliest or latest")
    consumer = GroupConsumer(args.zookeeper, args.group, reactor=reactor, on_corrupt=_on_corrupt(args),
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
