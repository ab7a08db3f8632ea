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
confirm starts a message (or is its end), or shifts them by N messages
(L{twlog.consumer.group_reset}, shared with the console); it is refused while
the group has live members, and for a group that does not exist unless C{--create}.
C{--dry-run} prints the old and new offsets and changes nothing.  C{delete}
removes a stopped group's nodes.
"""

from __future__ import annotations

import sys

from twlog.cli.common import UsageError, client_options
from twlog.cli.output import print_json, print_table
from twlog.cli.zk_options import zookeeper_credentials
from twlog.consumer.admin import GroupDescription, check_group, delete_group, describe_groups
from twlog.consumer.group_reset import BadResetParameter, apply_reset, group_json, plan_reset
from twlog.coord.zk import ZooKeeper
from twlog.partition import partition_ranges

#: How long to wait for ZooKeeper, and for each broker's answer.
TIMEOUT_S = 5.0

#: What the lag column shows for a partition whose broker is down or did not answer.
UNKNOWN = "?"


async def _session(reactor, args) -> ZooKeeper:
    zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=TIMEOUT_S,
                   credentials=zookeeper_credentials(args))
    await zk.start()
    return zk


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
    """Set GROUP's committed offsets of TOPIC (or --partition) to --to (or --shift N messages); refused while it
    has live members.

    The rules are L{plan_reset}'s (the console's reset runs them too): a byte offset must start a message of the
    partition (or be its end), as its broker says; an unknown group needs --create; a partition the group has an
    offset for whose broker is down is refused, or with --allow-partial left out (saying so); a shift is clamped
    to the log's earliest offset and end (saying so); --dry-run prints the table and changes nothing.
    """
    target = args.to if args.shift is None else ("shift", args.shift)
    if target is None:
        raise UsageError("say where to reset to: --to earliest|latest|TIME|OFFSET, or --shift N")
    if isinstance(target, int) and args.partition is None:
        raise UsageError(f"--to {target} is a byte offset in one partition: add --partition")
    options = client_options(args)  # (the brokers' TLS and SASL; docs/security.md)
    zk = await _session(reactor, args)
    try:
        try:
            plan = await plan_reset(
                zk, args.group, args.topic, args.partition, target, create=args.create,
                allow_partial=args.allow_partial, missing_hint="use --create to start a new group",
                partial_hint=f"--allow-partial resets the other partitions of {args.topic} and leaves those",
                where=args.zookeeper, reactor=reactor, timeout_s=TIMEOUT_S, options=options)
        except BadResetParameter as e:
            raise UsageError(str(e)) from None
        if not args.dry_run:
            await apply_reset(zk, plan)
    finally:
        await zk.stop()
    print_table(["topic", "partition", "offset", "new offset"],
                [(row.tp.topic, row.tp.name, row.offset, row.new_offset) for row in plan.rows],
                right=["offset", "new offset"])
    for line in plan.left_out:
        print(f"twlog: left out {line}", file=sys.stderr)
    clamped = [str(row.tp) for row in plan.rows if row.clamped]
    if clamped:
        print(f"twlog: shifting by {args.shift} went past the log's {'end' if args.shift > 0 else 'earliest offset'} "
              f"of {', '.join(clamped)}: reset there instead", file=sys.stderr)
    count = len(plan.rows)
    if args.dry_run:
        print(f"dry run: would reset {count} partition(s) of {args.topic} for group {args.group}; nothing "
              "changed", file=sys.stderr)
    else:
        print(f"reset {count} partition(s) of {args.topic} for group {args.group}", file=sys.stderr)


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
