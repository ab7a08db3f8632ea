# -*- test-case-name: tests.consumer.test_admin,tests.integration.test_cli,tests.integration.test_groups -*-
"""C{twlog groups [describe]}, C{twlog groups reset} and C{twlog groups delete}: consumer groups as ZooKeeper
records them.

C{describe} prints each group's members and, per partition, the owning
stream, the committed offset, the broker's latest offset and the lag in
bytes (a table, or C{--json}).  A partition the group has an offset for whose
broker is down (not registered) or does not answer is listed with its offset
and an unknown lag (C{?}), a note names the broker, and the total says it
leaves them out.

C{reset} sets a stopped group's committed offsets of a topic to the earliest
or latest offset, a time, or a byte offset, which the partition's broker must
confirm starts a message (or is its end); it is refused while the group has
live members, and for a group that does not exist unless C{--create}.
C{--dry-run} prints the old and new offsets and changes nothing.  C{delete}
removes a stopped group's nodes.
"""

from __future__ import annotations

import sys

from twlog.cli.common import UsageError, client_options
from twlog.cli.output import print_json, print_table
from twlog.cli.zk_options import zookeeper_credentials
from twlog.client.connection import BrokerConnection
from twlog.consumer.admin import (
    GroupDescription,
    check_group,
    check_reset_offset,
    committed_partitions,
    delete_group,
    describe_groups,
    offsets_at,
    refuse_live_members,
    registered_partitions,
    reset_group,
)
from twlog.consumer.membership import read_offsets
from twlog.coord.layout import describe_offline
from twlog.coord.zk import ZooKeeper
from twlog.errors import TwlogError
from twlog.partition import TopicPartition, partition_ranges, resolve_partition
from twlog.protocol.codec import EARLIEST, LATEST

#: How long to wait for ZooKeeper, and for each broker's answer.
TIMEOUT_S = 5.0

#: What the lag column shows for a partition whose broker is down or did not answer.
UNKNOWN = "?"


async def _session(reactor, args) -> ZooKeeper:
    zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=TIMEOUT_S,
                   credentials=zookeeper_credentials(args))
    await zk.start()
    return zk


def group_json(group: GroupDescription) -> dict:
    """A group as C{twlog groups --json} prints it.

    A partition whose broker is down or did not answer has C{latest} and C{lag_bytes} null and its C{problem};
    C{lag_leaves_out} lists the partitions with a committed offset that the total C{lag_bytes} leaves out.
    """
    return {
        "group": group.group,
        "members": [{"id": m.consumer_id, "subscription": m.subscription} for m in group.members],
        "partitions": [{"topic": p.topic, "partition": p.partition, "owner": p.owner, "offset": p.offset,
                        "latest": p.latest, "lag_bytes": p.lag,
                        "problem": p.problem.describe([p.topic_partition]) if p.problem is not None else None}
                       for p in group.partitions],
        "lag_bytes": group.lag,
        "lag_leaves_out": [str(p.topic_partition) for p in group.unknown],
    }


def total_line(group: GroupDescription) -> str:
    """C{group g: 2 member(s), total lag 120 bytes}, saying which partitions the total leaves out."""
    total = "unknown" if group.lag is None else f"{group.lag:,} bytes"
    line = f"group {group.group}: {len(group.members)} member(s), total lag {total}"
    left_out = group.unknown
    if left_out:
        count = len(left_out)
        line += (f" (leaves out {count} partition{'s' if count != 1 else ''} whose lag is unknown, "
                 f"{UNKNOWN} below: {partition_ranges(p.topic_partition for p in left_out)})")
    return line


async def describe(reactor, args) -> None:
    """Print each consumer group (or --group): members, then owner, offsets and lag per partition."""
    zk = await _session(reactor, args)
    try:
        if args.group is not None:
            await check_group(zk, args.group)
        descriptions = await describe_groups(zk, args.group, reactor=reactor, timeout_s=TIMEOUT_S,
                                             options=client_options(args))
    finally:
        await zk.stop()
    if args.json:
        print_json([group_json(group) for group in descriptions])
        return
    if not descriptions:
        print("(no consumer groups)")
    for group in descriptions:
        print(total_line(group))
        for member in group.members:
            subscription = ", ".join(f"{t} x{n}" for t, n in sorted((member.subscription or {}).items()))
            print(f"  member {member.consumer_id}: {subscription or '(no subscription)'}")
        print_table(["topic", "partition", "owner", "offset", "latest", "lag (bytes)"],
                    [(p.topic, p.partition, p.owner, p.offset, UNKNOWN if p.problem else p.latest,
                      UNKNOWN if p.problem else p.lag) for p in group.partitions],
                    right=["offset", "latest", "lag (bytes)"])
        for problem in group.problems():
            print(f"{UNKNOWN} {problem}")


async def reset(reactor, args) -> None:
    """Set GROUP's committed offsets of TOPIC (or --partition) to --to; refused while it has live members.

    A byte offset must start a message of the partition (or be its end), as its broker says; an unknown group
    needs --create; a partition the group has an offset for whose broker is down is refused, or with
    --allow-partial left out (saying so); --dry-run prints the table and changes nothing.
    """
    target = args.to
    if isinstance(target, int) and args.partition is None:
        raise UsageError(f"--to {target} is a byte offset in one partition: add --partition")
    options = client_options(args)  # (the brokers' TLS and SASL; docs/security.md)
    zk = await _session(reactor, args)
    left_out: list[TopicPartition] = []
    try:
        if not args.create:
            await check_group(zk, args.group, "use --create to start a new group")
        await refuse_live_members(zk, args.group, "resetting its offsets")
        live = await registered_partitions(zk, args.topic, options.listener)
        down = [tp for tp in await committed_partitions(zk, args.group, args.topic) if tp not in live]
        if not live and not down:
            raise TwlogError(f"topic {args.topic!r} does not exist on the brokers registered in ZooKeeper at "
                             f"{args.zookeeper}")
        if args.partition is not None:
            try:
                chosen = resolve_partition(args.partition, [*live, *down])
            except ValueError as e:
                raise UsageError(str(e)) from None
            if chosen not in live:
                raise TwlogError(f"{describe_offline([chosen])}; reset it once its broker is back")
            partitions = {chosen: live[chosen]}
        else:
            if down and not args.allow_partial:
                raise TwlogError(f"{describe_offline(down)}; --allow-partial resets the other partitions of "
                                 f"{args.topic} and leaves those")
            left_out, partitions = down, live
        if isinstance(target, int):
            [(tp, (host, port))] = partitions.items()
            await _check_offset(reactor, tp, host, port, target, options)
            offsets = {tp: target}
        else:
            time = {"earliest": EARLIEST, "latest": LATEST}.get(target) if isinstance(target, str) else target[1]
            offsets = await offsets_at(partitions, time, reactor=reactor, timeout_s=TIMEOUT_S, options=options)
        before = await read_offsets(zk, args.group, sorted(offsets))
        if not args.dry_run:
            await reset_group(zk, args.group, args.topic, {tp.name: offset for tp, offset in offsets.items()})
    finally:
        await zk.stop()
    print_table(["topic", "partition", "offset", "new offset"],
                [(tp.topic, tp.name, before[tp], offset) for tp, offset in sorted(offsets.items())],
                right=["offset", "new offset"])
    if left_out:
        print(f"twlog: left out {describe_offline(left_out)}", file=sys.stderr)
    if args.dry_run:
        print(f"dry run: would reset {len(offsets)} partition(s) of {args.topic} for group {args.group}; nothing "
              "changed", file=sys.stderr)
    else:
        print(f"reset {len(offsets)} partition(s) of {args.topic} for group {args.group}", file=sys.stderr)


async def _check_offset(reactor, tp: TopicPartition, host: str, port: int, offset: int, options) -> None:
    """Refuse C{offset} unless the broker says a message of C{tp} starts there (or it is the end)."""
    connection = BrokerConnection(host, port, reactor=reactor, options=options, timeout_s=TIMEOUT_S,
                                  connect_timeout_s=TIMEOUT_S, connect_attempts=1)
    try:
        await check_reset_offset(connection.request, tp, offset)
    finally:
        await connection.close()


async def delete(reactor, args) -> None:
    """Delete GROUP (its committed offsets and owners); refused while it has live members."""
    zk = await _session(reactor, args)
    try:
        deleted = await delete_group(zk, args.group)
    finally:
        await zk.stop()
    count = sum(deleted.values())
    what = (f"its committed offsets of {count} partition(s) of {', '.join(deleted)}" if count
            else "it had no committed offsets")
    print(f"deleted group {args.group}: {what}", file=sys.stderr)
