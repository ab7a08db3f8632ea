# -*- test-case-name: tests.integration.test_cli,tests.integration.test_groups -*-
"""C{twlog groups}: each consumer group's members and, per partition, owner, committed offset and lag."""

from __future__ import annotations

from twlog.consumer.admin import describe_groups
from twlog.coord.zk import ZooKeeper


async def groups(reactor, args) -> None:
    """Print each consumer group's members and, per partition, owner, committed offset and lag."""
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
