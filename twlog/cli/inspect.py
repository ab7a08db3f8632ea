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
from contextlib import suppress
from datetime import datetime, timezone

from twisted.internet.threads import deferToThread

from twlog.cli.common import DISCOVERY_TIMEOUT_S, UsageError, client_options, find_partitions
from twlog.cli.output import print_json, print_table
from twlog.cli.suggest import suggest_topic
from twlog.cli.zk_options import zookeeper_credentials
from twlog.client.async_discovery import bootstrap_async, cluster_layout_async
from twlog.client.discovery import log_problems
from twlog.client.options import ClientOptions
from twlog.client.replica_status import PartitionProgress, ask_leaders
from twlog.client.topics import REGISTRATION_WAIT_S, TopicCreated, create_replicated, delete_replicated
from twlog.client.topics import create_topic as create_on_brokers
from twlog.client.topics import delete_topic as delete_on_brokers
from twlog.consumer.membership import read_members, sorted_children
from twlog.consumer.simple import SimpleConsumer
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.layout import PartitionLocation, describe_offline
from twlog.coord.replication.store import MIN_INSYNC_REPLICAS
from twlog.coord.zk import NoNodeError, NotEmptyError, ZooKeeper, ZooKeeperUnavailable
from twlog.errors import ConnectionFailed, TwlogError, UnknownTopic
from twlog.partition import TopicPartition, address_text
from twlog.protocol.codec import EARLIEST, LATEST
from twlog.protocol.replication_codec import ReplicatedLayout


async def offsets(reactor, args) -> None:
    """Print the offsets OFFSETS answers, newest first: one partition's one per line, or a table of all."""
    locations = await find_partitions(args, args.topic, reactor)  # (--partition: that one)
    consumers: dict[tuple[str, int], SimpleConsumer] = {}
    answers: list[tuple[PartitionLocation, list[int]]] = []
    #: With a time: the earliest offset of each partition that has no segment that old.
    earliest: dict[str, int] = {}
    try:
        for location in locations:
            key = (location.host, location.port)
            if key not in consumers:
                consumers[key] = SimpleConsumer(location.host, location.port, reactor=reactor,
                                                options=client_options(args))
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

    A broker that is down (known to hold partitions, not registered) is listed as such, with its partitions,
    and one stderr line says so.  With C{--topic}, describe that topic (L{describe_topic}).
    """
    if args.topic is not None:
        return await describe_topic(reactor, args)
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    options = ClientOptions.build(client_options(args), timeout_s=DISCOVERY_TIMEOUT_S)
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


async def describe_topic(reactor, args) -> None:
    """Print C{--topic}'s partitions: leader broker and address, earliest and latest offset, size in bytes of log.
    A replicated topic's: leader, leader epoch, replicas, ISR, high watermark and replica ends
    (L{_describe_replicated}), the last two asked of each leader (REPLICA_STATUS)."""
    replicated = await _replicated_layout(reactor, args, args.topic)
    if replicated is not None:
        layout, addresses = replicated
        options = ClientOptions.build(client_options(args), timeout_s=DISCOVERY_TIMEOUT_S)
        progress, problems = await ask_leaders(layout, addresses, reactor=reactor, options=options)
        for line in problems:
            print(f"twlog: warning: {line}: its high watermark and replica ends are unknown", file=sys.stderr)
        return _describe_replicated(args, layout, progress)
    offline: list[TopicPartition] = []  # (a down broker's: shown with unknown offsets, and said on stderr)
    locations = await find_partitions(args, args.topic, reactor, offline=offline)
    if offline:
        print(f"twlog: warning: {describe_offline(offline)} (offsets shown as ?)", file=sys.stderr)
    consumers: dict[tuple[str, int], SimpleConsumer] = {}
    rows = []
    try:
        for location in locations:
            key = (location.host, location.port)
            if key not in consumers:
                consumers[key] = SimpleConsumer(location.host, location.port, reactor=reactor,
                                                options=client_options(args))
            (earliest,) = await consumers[key].offsets(location.topic, location.name, EARLIEST, 1)
            (latest,) = await consumers[key].offsets(location.topic, location.name, LATEST, 1)
            rows.append((location, earliest, latest))
    finally:
        for consumer in consumers.values():
            await consumer.close()
    if getattr(args, "json", False):
        described = [(loc.tp, {"partition": loc.name, "leader": loc.leader, "broker": loc.address,
                               "earliest": earliest, "latest": latest, "size": latest - earliest})
                     for loc, earliest, latest in rows]
        described += [(tp, {"partition": tp.name, "leader": tp.fixed_leader, "broker": None, "earliest": None,
                            "latest": None, "size": None, "offline": True}) for tp in offline]
        print_json({"topic": args.topic, "partitions": [p for _, p in sorted(described, key=lambda d: d[0])]})
        return
    brokers = {loc.leader for loc, _, _ in rows} | {tp.fixed_leader for tp in offline}
    count = len(rows) + len(offline)
    title = (f"{args.topic}: {count} partition{'s' if count != 1 else ''} on {len(brokers)} "
             f"broker{'s' if len(brokers) != 1 else ''}; size = latest - earliest, in bytes of log")
    table = [(loc.tp, loc.name, f"{loc.leader} ({loc.address})", earliest, latest, latest - earliest)
             for loc, earliest, latest in rows]
    table += [(tp, tp.name, f"{tp.fixed_leader} (down: not registered)", "?", "?", "?") for tp in offline]
    print_table(["partition", "leader", "earliest", "latest", "size"], [row[1:] for row in sorted(table)],
                title=title, right=["earliest", "latest", "size"])


def _span(names: list[str]) -> str:
    """C{0-0 .. 0-3} for a run of partition names (all of one broker)."""
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"


async def create_topic(reactor, args) -> None:
    """Create C{--topic} with C{--partitions} on each broker of the cluster; say so in one sentence (or JSON).
    With C{--replication-factor}, a replicated topic of C{--partitions} in all (L{create_replicated_topic})."""
    if getattr(args, "replication_factor", None) is not None:
        return await create_replicated_topic(reactor, args)
    if getattr(args, "min_insync_replicas", None) is not None:
        raise UsageError("--min-insync-replicas is for replicated topics: give --replication-factor too")
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    options = ClientOptions.build(client_options(args), timeout_s=DISCOVERY_TIMEOUT_S)
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
    down = sorted(set(await _down_brokers(reactor, source, options)) - set(created.brokers))
    if down:
        ids = ", ".join(map(str, down))
        print(f"twlog: warning: broker{'s' if len(down) != 1 else ''} {ids} {'are' if len(down) != 1 else 'is'} down "
              f"(not registered, known to hold other topics), so {created.topic} has no partitions there: run this "
              f"again once {'they are' if len(down) != 1 else 'it is'} back to make them", file=sys.stderr)


async def _down_brokers(reactor, source: dict, options: ClientOptions) -> list[int]:
    """The brokers that are down (not registered) and known to hold some topic; none if the cluster cannot be read
    now."""
    try:
        layout, _ = await cluster_layout_async(reactor=reactor, options=options, **source)
    except (ConnectionFailed, ZooKeeperUnavailable):
        return []
    return sorted({tp.fixed_leader for topic in layout.topics() for tp in layout.offline_partitions(topic)
                   if tp.fixed_leader is not None})


async def create_replicated_topic(reactor, args) -> None:
    """Create C{--topic} as a replicated topic in ZooKeeper: C{--partitions} in all, each on
    C{--replication-factor} live brokers; say so in one sentence (or JSON) with each partition's replicas."""
    if not args.zookeeper:
        raise UsageError("--replication-factor creates the topic in ZooKeeper (as Kafka 0.8's kafka-topics.sh "
                         "does): give --zookeeper HOST:PORT")
    zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=DISCOVERY_TIMEOUT_S,
                   credentials=zookeeper_credentials(args))
    try:
        await zk.start()
        created = await create_replicated(zk, args.topic, args.partitions, args.replication_factor, clock=reactor,
                                          min_insync_replicas=args.min_insync_replicas)
    except ZooKeeperUnavailable as e:
        raise TwlogError(str(e)) from None
    finally:
        await zk.stop()
    assignment = created.assignment
    minimum = assignment.config.get(MIN_INSYNC_REPLICAS)
    if getattr(args, "json", False):
        print_json({"topic": assignment.topic, "partitions": len(assignment.partitions),
                    "replication_factor": assignment.replication_factor,
                    "min_insync_replicas": int(minimum) if minimum is not None else None,
                    "replicas": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
                    "started": created.started})
    else:
        count = len(assignment.partitions)
        print(f"created {assignment.topic}: {count} partition{'s' if count != 1 else ''} (0 to {count - 1}), each "
              f"on {assignment.replication_factor} of brokers {', '.join(map(str, created.live))}"
              + (f"; min.insync.replicas {minimum}" if minimum is not None else ""))
    if not created.started:
        print(f"twlog: warning: the controller did not elect every partition's leader within "
              f"{REGISTRATION_WAIT_S:g} s (is a broker running with --zookeeper?); producers find no leader until "
              "it does", file=sys.stderr)


async def _replicated_layout(reactor, args, topic: str
                             ) -> tuple[ReplicatedLayout, dict[int, tuple[str, int]]] | None:
    """C{topic}'s partitions with leader, epoch, replicas and ISR, and the live brokers' addresses, if it is a
    replicated topic, else None: read from ZooKeeper (C{--zookeeper}) or a broker's CLUSTER_METADATA_V2 answer
    (C{--broker})."""
    options = ClientOptions.build(client_options(args), timeout_s=DISCOVERY_TIMEOUT_S)
    try:
        if not getattr(args, "zookeeper", None):
            cluster = await bootstrap_async(args.broker, (topic,), options, reactor=reactor)
            found = cluster.response.layout(topic)
            return (found, cluster.response.addresses) if isinstance(found, ReplicatedLayout) else None
        zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=DISCOVERY_TIMEOUT_S,
                       credentials=zookeeper_credentials(args))
        try:
            await zk.start()
            view = ClusterView(zk, (topic,), listener=client_options(args).listener)
            await view.start()
            view.stop()
            found = view.replicated(topic)
            return (found, dict(view.layout().brokers)) if found is not None else None
        finally:
            await zk.stop()
    except (ConnectionFailed, ZooKeeperUnavailable) as e:
        raise TwlogError(str(e)) from None


def _describe_replicated(args, layout: ReplicatedLayout, progress: dict[int, PartitionProgress]) -> None:
    """Print a replicated topic's partitions: leader, leader epoch, replicas, ISR, and, as each leader answered
    (C{progress}; a partition missing from it is unknown), the high watermark and each replica's end (a table,
    or JSON)."""
    partitions = layout.partitions
    if getattr(args, "json", False):
        print_json({"topic": layout.topic, "replicated": True, "partitions": [
            {"name": str(p.partition), "leader": p.leader if p.leader >= 0 else None,
             "leader_epoch": p.leader_epoch if p.leader_epoch >= 0 else None,
             "replicas": list(p.replicas), "isr": list(p.isr),
             "high_watermark": progress[p.partition].high_watermark if p.partition in progress else None,
             "replica_ends": ({str(r): end for r, end in progress[p.partition].ends.items()}
                              if p.partition in progress else None)} for p in partitions]})
        return
    offline = [p.partition for p in partitions if p.leader < 0]
    if offline:
        print(f"twlog: warning: {layout.topic}: partition{'s' if len(offline) != 1 else ''} "
              f"{', '.join(map(str, offline))} {'have' if len(offline) != 1 else 'has'} no live leader",
              file=sys.stderr)
    factor = len(partitions[0].replicas) if partitions else 0
    title = (f"{layout.topic}: {len(partitions)} partition{'s' if len(partitions) != 1 else ''}, replication "
             f"factor {factor}")
    print_table(["partition", "leader", "leader epoch", "replicas", "isr", "high watermark", "replica ends"],
                [(p.partition, p.leader if p.leader >= 0 else "none",
                  p.leader_epoch if p.leader_epoch >= 0 else "-", ",".join(map(str, p.replicas)),
                  ",".join(map(str, p.isr)) or "-", *_progress_cells(progress.get(p.partition)))
                 for p in partitions],
                title=title, right=["leader epoch", "high watermark"])


def _progress_cells(progress: PartitionProgress | None) -> tuple[str, str]:
    """The high watermark and C{replica ends} cells (C{1:1200,2:1200,0:800}) of a partition; C{?} when unknown.
    (Offsets without thousands separators, so the two columns read alike.)"""
    if progress is None:
        return "?", "?"
    ends = ",".join(f"{r}:{'?' if end is None else end}" for r, end in progress.ends.items())
    return str(progress.high_watermark), ends


async def delete_topic(reactor, args) -> None:
    """Delete C{--topic} on every broker that holds it, and its committed offsets; refused while a group reads it,
    and while a broker that holds it is down (its logs would bring the topic back when it starts).

    A group reads the topic when one of its live members (C{/consumers/<group>/ids/*}) is subscribed to it;
    that needs ZooKeeper, so without C{--zookeeper} only C{--force} deletes.  With C{--zookeeper}, every
    group's committed offsets of the topic (C{/consumers/<group>/offsets/<topic>}) go too: they are byte
    positions in logs that no longer exist, and a topic made again under the name starts at offset 0.
    """
    source = {"zookeeper": args.zookeeper} if args.zookeeper else {"brokers": args.broker}
    options = ClientOptions.build(client_options(args), timeout_s=DISCOVERY_TIMEOUT_S)
    if not args.zookeeper and not args.force:
        raise UsageError(f"deleting {args.topic!r} first checks that no consumer group reads it, in ZooKeeper: give "
                         "--zookeeper HOST:PORT (or --force to delete without checking)")
    zk = None
    try:
        if args.zookeeper:
            zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=DISCOVERY_TIMEOUT_S,
                           credentials=zookeeper_credentials(args))
            await zk.start()
            replicated = await zk.exists(paths.replicated_topic_path(args.topic)) is not None
            readers = await _groups_reading(zk, args.topic)
            if readers and not args.force:
                raise TwlogError(f"topic {args.topic!r} is being read by {_readers_text(readers)}: stop "
                                 f"{'them' if len(readers) > 1 else 'it'} first, or --force")
        if zk is not None and replicated:
            return await _delete_replicated(reactor, zk, args)
        try:
            deleted = await deferToThread(delete_on_brokers, args.topic, options=options, **source)
        except UnknownTopic as e:
            raise TwlogError(f"{e}{await suggest_topic(args.topic, source, options, reactor)}") from None
        cleared = await _delete_offsets(zk, args.topic) if zk is not None else None
        if zk is not None:
            await _delete_held(zk, args.topic)
    finally:
        if zk is not None:
            await zk.stop()
    if getattr(args, "json", False):
        print_json({"topic": deleted.topic, "deleted": True,
                    "brokers": [{"broker": b, "address": address_text(*a)} for b, a in sorted(deleted.brokers.items())],
                    "offsets_deleted_for_groups": cleared, "deregistered": deleted.deregistered})
    else:
        count = len(deleted.brokers)
        ids = ", ".join(str(b) for b in sorted(deleted.brokers))
        sentence = f"deleted {deleted.topic} on {count} broker{'s' if count != 1 else ''} ({ids})"
        if cleared:
            sentence += f"; and the committed offsets of group{'s' if len(cleared) != 1 else ''} {', '.join(cleared)}"
        elif cleared is None:
            sentence += "; committed offsets not looked at (no --zookeeper)"
        print(sentence)
    if not deleted.deregistered:
        print(f"twlog: warning: a broker's registration of {deleted.topic} was still visible after "
              f"{REGISTRATION_WAIT_S:g} s", file=sys.stderr)


async def _groups_reading(zk, topic: str) -> dict[str, int]:
    """Each group with live members subscribed to C{topic}, and how many."""
    readers = {}
    for group in await sorted_children(zk, paths.CONSUMERS):
        members = await read_members(zk, group)
        count = sum(1 for subscription in members.values() if subscription and topic in subscription)
        if count:
            readers[group] = count
    return readers


def _readers_text(readers: dict[str, int]) -> str:
    """C{group demo (2 live members)}, or several."""
    parts = [f"{group} ({n} live member{'s' if n != 1 else ''})" for group, n in readers.items()]
    return ("group " if len(parts) == 1 else "groups ") + ", ".join(parts)


async def _delete_replicated(reactor, zk, args) -> None:
    """C{twlog topics delete} of a replicated topic: its replicas on every broker (L{delete_replicated}), its
    state in ZooKeeper, and the groups' committed offsets."""
    brokers = await delete_replicated(zk, args.topic, clock=reactor)
    cleared = await _delete_offsets(zk, args.topic)
    if getattr(args, "json", False):
        print_json({"topic": args.topic, "deleted": True, "replicated": True, "brokers": list(brokers),
                    "offsets_deleted_for_groups": cleared})
        return
    sentence = f"deleted replicated topic {args.topic}: its replicas on brokers {', '.join(map(str, brokers))}"
    if cleared:
        sentence += f"; and the committed offsets of group{'s' if len(cleared) != 1 else ''} {', '.join(cleared)}"
    print(sentence)


async def _delete_offsets(zk, topic: str) -> list[str]:
    """Delete every group's committed offsets of C{topic}; return the groups that had some."""
    cleared = []
    for group in await sorted_children(zk, paths.CONSUMERS):
        path = paths.offset_path(group, topic)
        partitions = await sorted_children(zk, path)
        for partition in partitions:
            with suppress(NoNodeError):
                await zk.delete(paths.offset_path(group, topic, partition))
        with suppress(NoNodeError, NotEmptyError):
            await zk.delete(path)
            cleared.append(group)
    return cleared


async def _delete_held(zk, topic: str) -> None:
    """Delete what ZooKeeper remembers of which brokers held C{topic} (C{/twlog/held/<topic>}): the topic is gone.
    (A broker that is down keeps its logs, which would bring the topic back: L{delete_on_brokers} refuses while
    one holds it.)"""
    for broker in await sorted_children(zk, paths.held_path(topic)):
        with suppress(NoNodeError):
            await zk.delete(f"{paths.held_path(topic)}/{broker}")
    with suppress(NoNodeError, NotEmptyError):
        await zk.delete(paths.held_path(topic))


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
