# -*- test-case-name: tests.cli.test_inspect,tests.integration.test_cli -*-
"""C{twlog offsets}, C{twlog topics} and C{twlog topics create}: what the brokers of a cluster hold.

Both find the cluster through C{--broker} (METADATA) or C{--zookeeper} (the
brokers' registrations).  C{offsets} prints one offset per line for one
partition (C{--partition}), or a table of every partition of the topic;
C{topics} prints a table of topics and their partitions; C{topics create}
creates a topic on every broker (L{twlog.client.topics}).  C{--json} prints
the same as JSON for scripts.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

from twisted.internet.threads import deferToThread

from twlog.cli.common import CLIENT_OPTIONS, DISCOVERY_TIMEOUT_S, find_partitions, resolve_partition
from twlog.cli.output import print_json, print_table
from twlog.client.async_discovery import all_partitions_async
from twlog.client.options import ClientOptions
from twlog.client.topics import REGISTRATION_WAIT_S, TopicCreated
from twlog.client.topics import create_topic as create_on_brokers
from twlog.consumer.simple import SimpleConsumer
from twlog.coord.layout import PartitionLocation
from twlog.errors import ConnectionFailed, TwlogError
from twlog.partition import address_text
from twlog.protocol.codec import EARLIEST, LATEST


async def offsets(reactor, args) -> None:
    """Print the offsets OFFSETS answers, newest first: one partition's one per line, or a table of all."""
    locations = await find_partitions(args, args.topic, reactor)
    if args.partition is not None:
        locations = [resolve_partition(locations, args.partition)]
    consumers: dict[tuple[str, int], SimpleConsumer] = {}
    answers: list[tuple[PartitionLocation, list[int]]] = []
    #: With a time: the earliest offset of each partition that has no segment that old.
    earliest: dict[str, int] = {}
    try:
        for location in locations:
            key = (location.host, location.port)
            if key not in consumers:
                consumers[key] = SimpleConsumer(location.host, location.port, reactor=reactor, options=CLIENT_OPTIONS)
            found = await consumers[key].offsets(location.topic, location.name, args.time, args.max)
            answers.append((location, found))
            if not found and args.time >= 0:
                (earliest[location.name],) = await consumers[key].offsets(location.topic, location.name, EARLIEST, 1)
    finally:
        for consumer in consumers.values():
            await consumer.close()
    if earliest and len(earliest) == len(answers) and not args.json:
        raise TwlogError(_none_that_old(args.topic, args.time, earliest))
    if args.json:
        print_json([{"topic": loc.topic, "partition": loc.name, "broker": loc.address, "offsets": found}
                    for loc, found in answers])
    elif args.partition is not None:
        for offset in answers[0][1]:
            print(offset)
    else:
        print_table(["partition", "broker", "offsets"],
                    [(loc.name, loc.address, " ".join(str(o) for o in found)
                      or f"none that old (earliest {earliest[loc.name]})") for loc, found in answers],
                    title=f"{args.topic}: offsets, newest first")


def _none_that_old(topic: str, time_ms: int, earliest: dict[str, int]) -> str:
    """The one line of an OFFSETS by time that found no segment that old in any partition asked."""
    when = datetime.fromtimestamp(time_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S UTC")
    if len(earliest) == 1:
        ((name, first),) = earliest.items()
        where, starts = f"partition {name} of {topic!r}", f"its earliest offset is {first}"
    else:
        where = f"any partition of {topic!r}"
        starts = "the earliest offsets are " + ", ".join(f"{name}: {first}" for name, first in earliest.items())
    return (f"no segment of {where} was last modified before {when}, so no offset is that old; {starts} "
            "(--time earliest)")


async def topics(reactor, args) -> None:
    """Print each topic of the cluster with its partitions (C{<broker id>-<partition>}) and their brokers.

    With C{--topic}, describe that topic (L{describe_topic}).
    """
    if args.topic is not None:
        return await describe_topic(reactor, args)
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    options = ClientOptions.build(CLIENT_OPTIONS, timeout_s=DISCOVERY_TIMEOUT_S)
    try:
        locations = await all_partitions_async(reactor=reactor, options=options, **source)
    except ConnectionFailed as e:
        raise TwlogError(str(e)) from None
    by_topic: dict[str, list[PartitionLocation]] = {}
    for location in sorted(locations):
        by_topic.setdefault(location.topic, []).append(location)
    if args.json:
        print_json([{"topic": topic, "partitions": [{"partition": loc.name, "broker": loc.address} for loc in locs]}
                    for topic, locs in by_topic.items()])
        return
    if not by_topic:
        print("(no topics)")
        return
    rows = []
    for topic, locs in by_topic.items():
        brokers = sorted({(loc.leader, loc.address) for loc in locs})
        for broker_id, address in brokers:
            names = [loc.name for loc in locs if loc.leader == broker_id]
            rows.append((topic, f"{broker_id} ({address})", len(names), _span(names)))
    print_table(["topic", "broker", "partitions", "names"], rows, right=["partitions"])


async def describe_topic(reactor, args) -> None:
    """Print C{--topic}'s partitions: leader broker and address, earliest and latest offset, size in bytes of log."""
    locations = await find_partitions(args, args.topic, reactor)
    consumers: dict[tuple[str, int], SimpleConsumer] = {}
    rows = []
    try:
        for location in locations:
            key = (location.host, location.port)
            if key not in consumers:
                consumers[key] = SimpleConsumer(location.host, location.port, reactor=reactor, options=CLIENT_OPTIONS)
            (earliest,) = await consumers[key].offsets(location.topic, location.name, EARLIEST, 1)
            (latest,) = await consumers[key].offsets(location.topic, location.name, LATEST, 1)
            rows.append((location, earliest, latest))
    finally:
        for consumer in consumers.values():
            await consumer.close()
    if getattr(args, "json", False):
        print_json({"topic": args.topic, "partitions": [
            {"partition": loc.name, "leader": loc.leader, "broker": loc.address, "earliest": earliest,
             "latest": latest, "size": latest - earliest} for loc, earliest, latest in rows]})
        return
    brokers = {loc.leader for loc, _, _ in rows}
    title = (f"{args.topic}: {len(rows)} partition{'s' if len(rows) != 1 else ''} on {len(brokers)} "
             f"broker{'s' if len(brokers) != 1 else ''}; size = latest - earliest, in bytes of log")
    print_table(["partition", "leader", "earliest", "latest", "size"],
                [(loc.name, f"{loc.leader} ({loc.address})", earliest, latest, latest - earliest)
                 for loc, earliest, latest in rows],
                title=title, right=["earliest", "latest", "size"])


def _span(names: list[str]) -> str:
    """C{0-0 .. 0-3} for a run of partition names (all of one broker)."""
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"


async def create_topic(reactor, args) -> None:
    """Create C{--topic} with C{--partitions} on each broker of the cluster; say so in one sentence (or JSON)."""
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    options = ClientOptions.build(CLIENT_OPTIONS, timeout_s=DISCOVERY_TIMEOUT_S)
    created = await deferToThread(create_on_brokers, args.topic, args.partitions, options=options, **source)
    if getattr(args, "json", False):
        print_json({"topic": created.topic, "partitions_per_broker": created.partitions, "partitions": created.total,
                    "brokers": [{"broker": b, "address": address_text(*a), "created": b not in created.existed}
                                for b, a in sorted(created.brokers.items())],
                    "registered": created.registered})
    else:
        print(_created_sentence(created))
    if not created.registered:
        print(f"twlog: warning: not every broker's registration of {created.topic} was visible within "
              f"{REGISTRATION_WAIT_S:g} s; producers may see only some partitions for a moment", file=sys.stderr)


def _created_sentence(created: TopicCreated) -> str:
    """C{created clicks: 2 partitions on each of 2 brokers (4 in all)}, saying which brokers had them already."""
    count = len(created.brokers)
    each = f"{created.partitions} partition{'s' if created.partitions != 1 else ''} on " + (
        f"each of {count} brokers" if count != 1 else "1 broker")
    shape = f"{each} ({created.total} in all)"
    if created.existed == set(created.brokers):
        return f"{created.topic} already exists: {shape}; nothing changed"
    if created.existed:
        had = ", ".join(str(b) for b in sorted(created.existed))
        brokers = "brokers" if len(created.existed) != 1 else "broker"
        return f"created {created.topic}: {shape}; {brokers} {had} had them already"
    return f"created {created.topic}: {shape}"
