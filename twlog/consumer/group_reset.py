# -*- test-case-name: tests.consumer.test_group_reset,tests.integration.test_groups -*-
"""Planning and applying a reset of a stopped group's committed offsets: the one set of rules behind
C{twlog groups reset} and the console's C{POST /api/groups/<group>/reset}.

L{plan_reset} checks the group (it exists, unless C{create}; it has no live members), chooses the partitions
(of one topic, one partition of it, or every topic the group has committed offsets for), and asks their brokers
where the target lies:

  - C{"earliest"}, C{"latest"}, C{("time", ms)}: OFFSETS, as L{offsets_at};
  - a byte offset (one partition): the broker must confirm a message starts there or it is the end
    (L{check_reset_offset});
  - C{("shift", n)}: n messages after (before, when negative) the committed offset, clamped to the log's
    earliest offset and end (L{twlog.consumer.walk.shift_offset}); a partition without a committed offset is
    left out.

The plan lists each partition's committed and new offset; L{apply_reset} writes it (refused again if a member
joined meanwhile).  A partition the group has an offset for whose broker is down is refused, or with
C{allow_partial} left out (the plan says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twlog.client.options import ClientOptions
from twlog.client.times import parse_time
from twlog.consumer.admin import (
    GroupDescription,
    check_group,
    check_reset_offset,
    committed_partitions,
    connector,
    offsets_at,
    refuse_live_members,
    registered_partitions,
    reset_group,
)
from twlog.consumer.membership import read_offsets, sorted_children
from twlog.consumer.walk import shift_offset
from twlog.coord import paths
from twlog.coord.layout import describe_offline
from twlog.coord.zk import IZooKeeper
from twlog.errors import TwlogError
from twlog.partition import TopicPartition, resolve_partition
from twlog.protocol.codec import EARLIEST, LATEST

#: What a reset goes to: C{"earliest"}, C{"latest"}, C{("time", ms)}, a byte offset, or C{("shift", n)}.
Target = str | int | tuple[str, int]


class ResetRefused(TwlogError):
    """A reset that cannot be planned as asked (a topic nobody holds, a partition whose broker is down)."""


class UnknownTopic(ResetRefused):
    """The topic to reset is held by no registered broker and the group has no offsets for it."""


class BadResetParameter(TwlogError):
    """A reset's parameter that names nothing (a partition not in the topic, a byte offset without a partition).

    @ivar parameter: which one: C{"partition"}, C{"to"}, C{"topic"}.
    """

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class ResetRow:
    """One partition of a plan: its committed offset (None: never committed), the offset it is reset to, and
    whether a shift was clamped to the log's earliest offset or end."""

    tp: TopicPartition
    offset: int | None
    new_offset: int
    clamped: bool = False


@dataclass
class ResetPlan:
    """What L{apply_reset} will write: C{rows} sorted by partition; C{left_out}: one line per reason."""

    group: str
    rows: list[ResetRow] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def by_topic(self) -> dict[str, dict[str, int]]:
        """topic -> partition name -> new offset."""
        result: dict[str, dict[str, int]] = {}
        for row in self.rows:
            result.setdefault(row.tp.topic, {})[row.tp.name] = row.new_offset
        return result


def parse_target(to) -> Target:
    """A target as JSON gives it (the console's C{"to"}): C{"earliest"}, C{"latest"}, C{{"time": T}} (ISO 8601
    or ms), C{{"offset": n}}, C{{"shift": n}}.  @raise BadResetParameter: none of these."""
    if to in ("earliest", "latest"):
        return to
    if isinstance(to, dict) and len(to) == 1:
        [(kind, value)] = to.items()
        if kind == "time" and isinstance(value, (str, int)) and not isinstance(value, bool):
            try:
                ms = parse_time(str(value))
            except ValueError as e:
                raise BadResetParameter("to", str(e)) from None
            if ms >= 0:
                return ("time", ms)
        elif kind in ("offset", "shift") and isinstance(value, int) and not isinstance(value, bool):
            if kind == "shift":
                return ("shift", value)
            if value >= 0:
                return value
    raise BadResetParameter("to", f"{str(to)[:60]!r} is not \"earliest\", \"latest\", {{\"time\": ISO 8601 or ms}}, "
                                  "{\"offset\": n >= 0} or {\"shift\": n}")


async def plan_reset(zk: IZooKeeper, group: str, topic: str | None, partition: str | None, target: Target, *,
                     create: bool = False, allow_partial: bool = False, missing_hint: str = "",
                     partial_hint: str = "", where: str = "", reactor=None, timeout_s: float = 5.0,
                     options: ClientOptions | None = None, connect=None) -> ResetPlan:
    """The offsets C{group}'s partitions of C{topic} (every topic it has offsets for, when None; or one
    C{partition}) would be reset to.

    @param missing_hint: ends the message for a group that does not exist (C{"use --create ..."}).
    @param partial_hint: ends the message refusing partitions whose broker is down (C{"--allow-partial ..."}).
    @param where: ZooKeeper's address, for messages.
    @raise GroupNotFound: no such group (unless C{create}).
    @raise ValueError: the group has live members, naming them.
    @raise BadResetParameter: a partition or target that does not fit.
    @raise ResetRefused: a topic no broker holds, a chosen partition whose broker is down, or partitions whose
        broker is down without C{allow_partial}.
    @raise OffsetRefused: a byte offset where no message starts.
    """
    options = options or ClientOptions()
    connect = connect or connector(reactor, options, timeout_s)
    if isinstance(target, int) and partition is None:
        raise BadResetParameter("partition", f"offset {target} is a byte offset in one partition: name the partition")
    if partition is not None and topic is None:
        raise BadResetParameter("topic", "a partition is a partition of one topic: name the topic")
    if not create:
        await check_group(zk, group, missing_hint)
    await refuse_live_members(zk, group, "resetting its offsets")
    topics = [topic] if topic is not None else await sorted_children(zk, f"{paths.group_path(group)}/offsets")
    if not topics:
        raise BadResetParameter("topic", f"group {group!r} has no committed offsets: name a topic to reset")
    plan = ResetPlan(group)
    chosen: dict[TopicPartition, tuple[str, int]] = {}
    for name in topics:
        live = await registered_partitions(zk, name, options.listener)
        down = [tp for tp in await committed_partitions(zk, group, name) if tp not in live]
        if not live and not down:
            raise UnknownTopic(f"topic {name!r} does not exist on the brokers registered in ZooKeeper"
                               + (f" at {where}" if where else ""))
        if partition is not None:
            try:
                tp = resolve_partition(partition, [*live, *down])
            except ValueError as e:
                raise BadResetParameter("partition", str(e)) from None
            if tp not in live:
                raise ResetRefused(f"{describe_offline([tp])}; reset it once its broker is back")
            chosen[tp] = live[tp]
            continue
        if down and not allow_partial:
            raise ResetRefused(f"{describe_offline(down)}; {partial_hint or 'reset the others alone'}")
        if down:
            plan.left_out.append(describe_offline(down))
        chosen.update(live)
    before = await read_offsets(zk, group, sorted(chosen))
    new = await _targets(chosen, before, target, plan, connect, reactor, timeout_s, options)
    plan.rows = [ResetRow(tp, before[tp], offset, clamped) for tp, (offset, clamped) in sorted(new.items())]
    return plan


async def _targets(chosen, before, target: Target, plan: ResetPlan, connect, reactor, timeout_s,
                   options) -> dict[TopicPartition, tuple[int, bool]]:
    if isinstance(target, int):
        [(tp, (host, port))] = chosen.items()
        await _with_connection(connect, host, port, lambda request: check_reset_offset(request, tp, target))
        return {tp: (target, False)}
    if isinstance(target, tuple) and target[0] == "shift":
        return await _shifted(chosen, before, target[1], plan, connect)
    time = {"earliest": EARLIEST, "latest": LATEST}[target] if isinstance(target, str) else target[1]
    offsets = await offsets_at(chosen, time, reactor=reactor, timeout_s=timeout_s, options=options,
                               connect=connect)
    return {tp: (offset, False) for tp, offset in offsets.items()}


async def _shifted(chosen, before, messages: int, plan: ResetPlan, connect) -> dict[TopicPartition, tuple[int, bool]]:
    result: dict[TopicPartition, tuple[int, bool]] = {}
    uncommitted = [tp for tp in sorted(chosen) if before[tp] is None]
    if uncommitted:
        plan.left_out.append(f"{', '.join(map(str, uncommitted))}: no committed offset to shift from")
    by_broker: dict[tuple[str, int], list[TopicPartition]] = {}
    for tp in sorted(chosen):
        if before[tp] is not None:
            by_broker.setdefault(chosen[tp], []).append(tp)
    for (host, port), tps in by_broker.items():
        async def shift_all(request, tps=tps) -> None:
            for tp in tps:
                result[tp] = await shift_offset(request, tp, before[tp], messages)
        await _with_connection(connect, host, port, shift_all)
    return result


async def _with_connection(connect, host: str, port: int, use) -> None:
    connection = connect(host, port)
    try:
        await use(connection.request)
    finally:
        await connection.close()


async def apply_reset(zk: IZooKeeper, plan: ResetPlan) -> None:
    """Write C{plan}'s offsets, topic by topic.  @raise ValueError: the group has live members now."""
    await refuse_live_members(zk, plan.group, "resetting its offsets")
    for topic, offsets in plan.by_topic().items():
        await reset_group(zk, plan.group, topic, offsets)


def group_json(group: GroupDescription) -> dict:
    """A group as C{twlog groups --json} prints it (and the console's C{/api/groups/<group>} extends it).

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
