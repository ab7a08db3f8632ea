# -*- test-case-name: tests.integration.test_dead_broker -*-
"""C{twlog brokers} and C{twlog brokers forget}: the brokers ZooKeeper knows, live or down.

A broker that has registered a topic is remembered (C{/twlog/held/<topic>/<id>},
persistent) after its registration goes, so readers can say that its partitions
exist and cannot be read now, rather than leave them out.  C{brokers} lists every
broker, live (registered, with its address) or down (remembered only), with the
topics and partitions it holds.  C{brokers forget} removes a down broker's
records, for a broker retired for good: from then on its partitions are no longer
part of their topics (its data is not touched).  A live broker is refused.
"""

from __future__ import annotations

from twlog.cli.output import print_json, print_table
from twlog.cli.zk_session import zookeeper_session
from twlog.coord import paths
from twlog.coord.layout import ClusterLayout
from twlog.coord.zk import IZooKeeper, NoNodeError
from twlog.errors import TwlogError
from twlog.partition import address_text


async def _children(zk: IZooKeeper, path: str) -> list[str]:
    try:
        return sorted(await zk.children(path))
    except NoNodeError:
        return []


async def _values(zk: IZooKeeper, parent: str) -> dict[str, bytes | None]:
    values: dict[str, bytes | None] = {}
    for name in await _children(zk, parent):
        try:
            values[name], _ = await zk.get(f"{parent}/{name}")
        except NoNodeError:
            values[name] = None
    return values


async def _read(zk: IZooKeeper) -> ClusterLayout:
    """Every broker's registration and every topic's registrations and records, as one layout."""
    topics = sorted(set(await _children(zk, paths.BROKER_TOPICS)) | set(await _children(zk, paths.HELD)))
    layout, _ = ClusterLayout.from_registrations(
        await _values(zk, paths.BROKER_IDS),
        {topic: await _values(zk, paths.broker_topic_path(topic)) for topic in topics},
        {topic: await _values(zk, paths.held_path(topic)) for topic in topics},
    )
    return layout


def _rows(layout: ClusterLayout) -> list[dict]:
    """One entry per broker, live or down: its address (None when down) and what it holds, by topic."""
    held: dict[int, dict[str, int]] = {broker_id: {} for broker_id in layout.brokers}
    for topic in layout.topics():
        for tp in layout.partitions.get(topic, ()):
            if tp.fixed_leader is not None:
                by_topic = held.setdefault(tp.fixed_leader, {})
                by_topic[topic] = by_topic.get(topic, 0) + 1
    return [{"broker": broker_id, "live": broker_id in layout.brokers,
             "address": address_text(*layout.brokers[broker_id]) if broker_id in layout.brokers else None,
             "partitions": dict(sorted(topics.items()))}
            for broker_id, topics in sorted(held.items())]


async def brokers(reactor, args) -> None:
    """Print every broker ZooKeeper knows: live ones with their address, down ones, and what each holds."""
    zk = await zookeeper_session(reactor, args)
    try:
        rows = _rows(await _read(zk))
    finally:
        await zk.stop()
    if args.json:
        print_json(rows)
        return
    if not rows:
        print("(no brokers)")
        return
    print_table(["broker", "state", "address", "partitions held"],
                [(row["broker"], "live" if row["live"] else "down: not registered", row["address"] or "-",
                  ", ".join(f"{topic} ({count})" for topic, count in row["partitions"].items()) or "-")
                 for row in rows], right=["broker"])


async def forget(reactor, args) -> None:
    """Remove a down broker's records: its partitions are no longer part of their topics."""
    zk = await zookeeper_session(reactor, args)
    try:
        if await zk.exists(paths.broker_id_path(args.broker_id)) is not None:
            raise TwlogError(f"broker {args.broker_id} is live (registered at {paths.broker_id_path(args.broker_id)}): "
                             "stop it first; only a broker that is gone for good can be forgotten")
        topics = [topic for topic in await _children(zk, paths.HELD)
                  if await zk.exists(paths.held_path(topic, args.broker_id)) is not None]
        if not topics:
            raise TwlogError(f"ZooKeeper remembers no partitions of broker {args.broker_id}: nothing to forget")
        for topic in topics:
            try:
                await zk.delete(paths.held_path(topic, args.broker_id))
            except NoNodeError:
                pass  # forgotten meanwhile
    finally:
        await zk.stop()
    print(f"forgot broker {args.broker_id}: its partitions of {', '.join(topics)} are no longer read or listed "
          "(its log directory is untouched; starting it again brings them back)")
