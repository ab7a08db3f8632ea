# -*- test-case-name: tests.cli.test_groups,tests.integration.test_cli,tests.integration.test_groups -*-
"""C{twlog groups [describe]} and C{twlog groups reset}: consumer groups as ZooKeeper records them.

C{describe} prints each group's members and, per partition, the owning
stream, the committed offset, the broker's latest offset and the lag in
bytes (a table, or C{--json}).  C{reset} sets a stopped group's committed
offsets of a topic to the earliest or latest offset, a time, or a byte
offset; it is refused while the group has live members.
"""

from __future__ import annotations

import sys

from twlog.cli.common import UsageError
from twlog.cli.output import print_json, print_table
from twlog.consumer.admin import (
    GroupDescription,
    check_group,
    describe_groups,
    offsets_at,
    registered_partitions,
    reset_group,
)
from twlog.coord.zk import ZooKeeper
from twlog.errors import TwlogError
from twlog.partition import resolve_partition
from twlog.protocol.codec import EARLIEST, LATEST

#: How long to wait for ZooKeeper, and for each broker's answer.
TIMEOUT_S = 5.0


async def _session(reactor, args) -> ZooKeeper:
    zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=TIMEOUT_S)
    await zk.start()
    return zk


def group_json(group: GroupDescription) -> dict:
    """A group as C{twlog groups --json} prints it."""
    return {
        "group": group.group,
        "members": [{"id": m.consumer_id, "subscription": m.subscription} for m in group.members],
        "partitions": [{"topic": p.topic, "partition": p.partition, "owner": p.owner, "offset": p.offset,
                        "latest": p.latest, "lag_bytes": p.lag} for p in group.partitions],
        "lag_bytes": group.lag,
    }


async def describe(reactor, args) -> None:
    """Print each consumer group (or --group): members, then owner, offsets and lag per partition."""
    zk = await _session(reactor, args)
    try:
        if args.group is not None:
            await check_group(zk, args.group)
        descriptions = await describe_groups(zk, args.group, reactor=reactor, timeout_s=TIMEOUT_S)
    finally:
        await zk.stop()
    if args.json:
        print_json([group_json(group) for group in descriptions])
        return
    if not descriptions:
        print("(no consumer groups)")
    for group in descriptions:
        total = "unknown" if group.lag is None else f"{group.lag:,} bytes"
        print(f"group {group.group}: {len(group.members)} member(s), total lag {total}")
        for member in group.members:
            subscription = ", ".join(f"{t} x{n}" for t, n in sorted((member.subscription or {}).items()))
            print(f"  member {member.consumer_id}: {subscription or '(no subscription)'}")
        print_table(["topic", "partition", "owner", "offset", "latest", "lag (bytes)"],
                    [(p.topic, p.partition, p.owner, p.offset, p.latest, p.lag) for p in group.partitions],
                    right=["offset", "latest", "lag (bytes)"])


async def reset(reactor, args) -> None:
    """Set GROUP's committed offsets of TOPIC (or --partition) to --to; refused while it has live members."""
    target = args.to
    if isinstance(target, int) and args.partition is None:
        raise UsageError(f"--to {target} is a byte offset in one partition: add --partition")
    zk = await _session(reactor, args)
    try:
        partitions = await registered_partitions(zk, args.topic)
        if not partitions:
            raise TwlogError(f"topic {args.topic!r} does not exist on the brokers registered in ZooKeeper at "
                             f"{args.zookeeper}")
        if args.partition is not None:
            try:
                chosen = resolve_partition(args.partition, list(partitions))
            except ValueError as e:
                raise UsageError(str(e)) from None
            partitions = {chosen: partitions[chosen]}
        if isinstance(target, int):
            offsets = dict.fromkeys(partitions, target)
        else:
            time = {"earliest": EARLIEST, "latest": LATEST}.get(target) if isinstance(target, str) else target[1]
            offsets = await offsets_at(partitions, time, reactor=reactor, timeout_s=TIMEOUT_S)
        await reset_group(zk, args.group, args.topic, {tp.name: offset for tp, offset in offsets.items()})
    finally:
        await zk.stop()
    for tp, offset in sorted(offsets.items()):
        print(f"{args.group} {tp}: {offset}")
    print(f"reset {len(offsets)} partition(s) of {args.topic} for group {args.group}", file=sys.stderr)

