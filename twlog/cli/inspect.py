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

from twisted.internet.threads import deferToThread

from twlog.cli.common import CLIENT_OPTIONS, DISCOVERY_TIMEOUT_S, find_partitions
from twlog.cli.output import print_json, print_table
from twlog.client.async_discovery import cluster_layout_async
from twlog.client.discovery import log_problems
from twlog.client.options import ClientOptions
from twlog.client.topics import REGISTRATION_WAIT_S, TopicCreated
from twlog.client.topics import create_topic as create_on_brokers
from twlog.consumer.simple import SimpleConsumer
from twlog.coord.layout import PartitionLocation, describe_offline
from twlog.errors import ConnectionFailed, TwlogError
from twlog.partition import address_text


async def offsets(reactor, args) -> None:
    """Print the offsets OFFSETS answers, newest first: one partition's one per line, or a table of all."""
    locations = await find_partitions(args, args.topic, reactor)  # (--partition: that one)
    consumers: dict[tuple[str, int], SimpleConsumer] = {}
    answers: list[tuple[PartitionLocation, list[int]]] = []
    try:
        for location in locations:
            key = (location.host, location.port)
            if key not in consumers:
                consumers[key] = SimpleConsumer(location.host, location.port, reactor=reactor, options=CLIENT_OPTIONS)
            found = await consumers[key].offsets(location.topic, location.name, args.time, args.max)
            answers.append((location, found))
    finally:
        for consumer in consumers.values():
            await consumer.close()
    if args.json:
        print_json([{"topic": loc.topic, "partition": loc.name, "broker": loc.address, "offsets": found}
                    for loc, found in answers])
    elif args.partition is not None:
        for offset in answers[0][1]:
            print(offset)
    else:
        print_table(["partition", "broker", "offsets"],
                    [(loc.name, loc.address, " ".join(str(o) for o in found) or "-") for loc, found in answers],
                    title=f"{args.topic}: offsets, newest first")


async def topics(reactor, args) -> None:
    """Print each topic of the cluster with its partitions (C{<broker id>-<partition>}) and their brokers.

    A broker that is down (known to hold partitions, not registered) is listed as such, with its partitions,
    and one stderr line says so.
    """
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    options = ClientOptions.build(CLIENT_OPTIONS, timeout_s=DISCOVERY_TIMEOUT_S)
    try:
        layout, problems = await cluster_layout_async(reactor=reactor, options=options, **source)
    except ConnectionFailed as e:
        raise TwlogError(str(e)) from None
    log_problems(problems)
    names = [topic for topic in layout.topics() if layout.partitions.get(topic)]
    offline = [tp for topic in names for tp in layout.offline_partitions(topic)]
    if offline:
        print(f"twlog: warning: {describe_offline(offline)}", file=sys.stderr)
    if args.json:
        print_json([{"topic": topic, "partitions": [
            {"partition": loc.name, "broker": loc.address} for loc in layout.locations(topic)] + [
            {"partition": tp.name, "broker": None, "offline": True} for tp in layout.offline_partitions(topic)]}
            for topic in names])
        return
    if not names:
        print("(no topics)")
        return
    rows = []
    for topic in names:
        by_broker: dict[int, list[str]] = {}
        for tp in sorted(layout.partitions[topic]):
            by_broker.setdefault(tp.fixed_leader if tp.fixed_leader is not None else -1, []).append(tp.name)
        for broker_id, held in sorted(by_broker.items()):
            address = layout.brokers.get(broker_id)
            where = f"{broker_id} ({address_text(*address)})" if address else f"{broker_id} (down: not registered)"
            rows.append((topic, where, len(held), _span(held)))
    print_table(["topic", "broker", "partitions", "names"], rows, right=["partitions"])


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
