# -*- test-case-name: tests.cli.test_consume_group,tests.integration.test_cli -*-
"""C{twlog consume --zookeeper Z --group G}: print what this member of a consumer group receives.

The command says on stderr, once each, what a user would otherwise wait on in
silence: that the topic does not exist yet (it waits for a broker to register
it), that ZooKeeper was lost (and when it is back), that the session expired
(the member rejoins), and, after each rebalance that changes them, the
partitions it reads now and those it gave up.  Ctrl-C stops it within about 2 s: closing commits the
offsets of what was printed if ZooKeeper answers in time, and says so if not.
"""

from __future__ import annotations

import sys
from contextlib import suppress

from twisted.internet.defer import Deferred

from twlog.cli import avro
from twlog.cli.common import UsageError, bounded, client_options, stop_on_shutdown
from twlog.cli.formats import Formatter
from twlog.cli.zk_options import zookeeper_credentials
from twlog.consumer.group import GroupConsumer
from twlog.coord import paths
from twlog.coord.zk import CONNECTED, LOST, SUSPENDED, ZooKeeper

#: How long closing (committing offsets, leaving the group) may take after Ctrl-C or --max-messages.
CLOSE_TIMEOUT_S = 1.5

#: How long to wait for ZooKeeper when starting.
ZOOKEEPER_CONNECT_TIMEOUT_S = 5.0


def _say(text: str) -> None:
    print(f"twlog: {text}", file=sys.stderr, flush=True)


class SessionReporter:
    """Says on stderr when the ZooKeeper session is lost, expires, and comes back (each change once)."""

    def __init__(self, hosts: str, group: str, say=_say) -> None:
        self.hosts = hosts
        self.group = group
        self.say = say
        self.state = CONNECTED
        #: Set when the command closes its own session: what follows is not news for the user.
        self.closing = False

    def __call__(self, state: str) -> None:
        if state == self.state or self.closing:
            return
        if state == SUSPENDED:
            self.say(f"lost the connection to ZooKeeper at {self.hosts}; no messages until it is back (retrying)")
        elif state == LOST:
            self.say(f"the ZooKeeper session expired; this member will rejoin group {self.group!r} when ZooKeeper "
                     "is back")
        elif state == CONNECTED:
            self.say(f"reconnected to ZooKeeper at {self.hosts}")
        self.state = state


class TopicWatch:
    """Says once that the topic does not exist yet, and again when a broker registers it."""

    def __init__(self, zk, topic: str, hosts: str, say=_say) -> None:
        self.zk = zk
        self.topic = topic
        self.hosts = hosts
        self.say = say
        self.waiting = False

    async def check(self) -> None:
        """Look for the topic's registrations (a 0.7 topic's, or a replicated topic's assignment); if there are
        none, say so and watch for them."""
        registered = await self.zk.exists(paths.broker_topic_path(self.topic), watch=self._changed)
        replicated = await self.zk.exists(paths.replicated_topic_path(self.topic), watch=self._changed)
        if registered is None and replicated is None:
            self.waiting = True
            self.say(f"topic {self.topic!r} does not exist yet on the brokers registered in ZooKeeper at {self.hosts}; "
                     "waiting for it to appear (Ctrl-C to stop)")

    def _changed(self, event) -> None:
        if self.waiting and getattr(event, "type", None) == "CREATED":
            self.waiting = False
            self.say(f"topic {self.topic!r} appeared")


async def consume_group(reactor, args, formatter: Formatter, on_corrupt: str) -> None:
    """Print the messages this group member receives until --max-messages or Ctrl-C."""
    if args.offset not in ("earliest", "latest"):
        raise UsageError(f"with --group, --offset is where a new group starts: earliest or latest, not {args.offset!r}")
    zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=ZOOKEEPER_CONNECT_TIMEOUT_S,
                   credentials=zookeeper_credentials(args))
    await zk.start()
    reporter = SessionReporter(args.zookeeper, args.group)
    zk.add_state_listener(reporter)
    consumer = GroupConsumer(zk, args.group, reactor=reactor, on_corrupt=on_corrupt, options=client_options(args),
                             auto_offset_reset="smallest" if args.offset == "earliest" else "largest",
                             deserializer=avro.deserializer(args, reactor))
    consumer.assignments.add_listener(lambda change: _say(change.describe()))
    out = sys.stdout.buffer
    printed = 0
    done: Deferred = Deferred()
    closing: Deferred = Deferred()

    def finish(failure=None) -> None:
        if not done.called:
            done.errback(failure) if failure is not None else done.callback(None)

    async def drain(stream) -> None:
        nonlocal printed
        async for message in stream:
            out.write(formatter(message.topic, message.partition, message.offset, message.payload))
            out.flush()
            printed += 1
            if args.max_messages and printed >= args.max_messages:
                finish()
                return

    trigger = stop_on_shutdown(reactor, finish, closing)
    closed = False
    try:
        await TopicWatch(zk, args.topic, args.zookeeper).check()
        streams = (await consumer.create_message_streams({args.topic: args.streams}))[args.topic]
        for stream in streams:
            Deferred.fromCoroutine(drain(stream)).addErrback(finish)
        await done
    finally:
        out.flush()
        closed = await bounded(reactor, consumer.close(), CLOSE_TIMEOUT_S)  # commits what was printed
        reporter.closing = True
        await bounded(reactor, zk.stop(), 0.5)
        with suppress(ValueError, KeyError):
            reactor.removeSystemEventTrigger(trigger)
        closing.callback(None)
    if not closed:
        _say(f"could not commit the offsets of group {args.group!r} within {CLOSE_TIMEOUT_S:g} s (ZooKeeper at "
             f"{args.zookeeper} does not answer); the next member starts from the last commit")
        raise SystemExit(1)
