# -*- test-case-name: tests.consumer.test_admin,tests.integration.test_admin -*-
"""The admin side of consumer groups (C{twlog groups}): describing them (owners, offsets, lag), resetting offsets.

L{describe_groups} reads the group's nodes (Kafka 0.7's layout, through
L{twlog.consumer.membership}) and asks each partition's broker for its latest
offset (OFFSETS -1), so the lag is what the group has left to consume of what
is flushed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.client.async_discovery import read_registrations_async
from twlog.client.connection import BrokerConnection
from twlog.client.options import ClientOptions
from twlog.consumer.membership import read_members, read_offsets, read_values, sorted_children
from twlog.consumer.rebalance import natural_key
from twlog.coord import paths
from twlog.coord.endpoints import PLAINTEXT
from twlog.coord.layout import ClusterLayout
from twlog.coord.zk import IZooKeeper, NoNodeError, NotEmptyError
from twlog.errors import BrokerError, TwlogError
from twlog.partition import TopicPartition, address_text, partition_ranges
from twlog.protocol.codec import EARLIEST, LATEST, BoundariesRequest, OffsetsRequest

_log = Logger()


@dataclass(frozen=True)
class GroupMember:
    """A registered consumer and its subscription (topic -> streams); None if its registration is unreadable."""

    consumer_id: str
    subscription: dict[str, int] | None


@dataclass(frozen=True)
class BrokerProblem:
    """Why a broker's partitions have no latest offset: it is not registered, or it did not answer."""

    #: The broker that holds the partitions (None: a partition whose leader nobody knows).
    broker_id: int | None
    #: C{"is not registered: down?"}, C{"did not answer (...)"}, C{"answered WrongPartition (...)"}.
    what: str
    #: The broker's registered address, when it has one.
    address: str | None = None

    def describe(self, partitions) -> str:
        """C{broker 1, which holds clicks:1-0..1-3, is not registered: down?}."""
        held = partition_ranges(partitions)
        if self.broker_id is None:
            return f"{held}: {self.what}"
        at = f" at {self.address}" if self.address else ""
        return f"broker {self.broker_id}{at}, which holds {held}, {self.what}"


#: The problem of a broker that is not registered in ZooKeeper.
NOT_REGISTERED = "is not registered: down?"


@dataclass(frozen=True)
class PartitionStatus:
    """One partition as a group sees it."""

    topic: str
    #: C{<broker id>-<partition>}.
    partition: str
    #: The owning stream id, or None when nobody owns it now.
    owner: str | None
    #: The committed next offset, or None when the group never committed one.
    offset: int | None
    #: The broker's latest (flushed) offset, or None when the broker is down or unknown.
    latest: int | None
    #: Why C{latest} is unknown, naming the broker (L{BrokerProblem}); None when it is known (or was not asked).
    problem: BrokerProblem | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition as a L{TopicPartition}."""
        return TopicPartition.from_name(self.topic, self.partition)

    @property
    def lag(self) -> int | None:
        """Bytes of log the group has yet to consume (latest - committed), when both are known."""
        if self.offset is None or self.latest is None:
            return None
        return max(self.latest - self.offset, 0)


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group: its members and its partitions (sorted by topic, then broker and partition)."""

    group: str
    members: list[GroupMember] = field(default_factory=list)
    partitions: list[PartitionStatus] = field(default_factory=list)

    @property
    def lag(self) -> int | None:
        """The total lag over the partitions whose lag is known (None if none is); L{unknown} lists the others
        that have a committed offset."""
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None

    @property
    def unknown(self) -> list[PartitionStatus]:
        """The partitions with a committed offset whose lag is unknown, because their broker is down or did not
        answer: the total L{lag} leaves them out."""
        return [p for p in self.partitions if p.offset is not None and p.problem is not None]

    def problems(self) -> list[str]:
        """One line per broker whose partitions have an unknown lag: C{broker 1, which holds clicks:1-0..1-3, is
        not registered: down?}."""
        held: dict[BrokerProblem, list[TopicPartition]] = {}
        for p in self.partitions:
            if p.problem is None:
                continue
            held.setdefault(p.problem, []).append(p.topic_partition)
        return [problem.describe(tps) for problem, tps in
                sorted(held.items(), key=lambda item: (item[0].broker_id is None, item[0].broker_id or 0))]


async def describe_groups(zk: IZooKeeper, group: str | None = None, *, reactor=None, timeout_s: float = 5.0,
                          options: ClientOptions | None = None, connect=None) -> list[GroupDescription]:
    """Every group (or just C{group}): members, owners and committed offsets per partition, and lag.

    A partition is listed if it is registered by a live broker for a topic the
    group subscribes to, or if the group has an owner or an offset for it.
    Brokers that do not answer within C{timeout_s}, or are not registered (down),
    leave C{latest} (and so C{lag}) as None, with the C{problem}: a partition
    the group has an offset for is listed even when its broker is down.  The brokers are asked with C{options}
    (TLS, SASL: at their TLS listener with TLS), their timeouts C{timeout_s}; C{connect(host, port)} (default:
    L{connector}) makes each broker connection.
    """
    groups = [group] if group is not None else await sorted_children(zk, paths.CONSUMERS)
    reported: set[str] = set()
    options = _asking(options, timeout_s)
    addresses = dict((await _layout(zk, (), reported, options.listener)).brokers)
    descriptions = []
    leaders: dict[TopicPartition, int | None] = {}
    for name in groups:
        descriptions.append(await _describe(zk, name, reported, leaders))
    await _fill_latest(descriptions, addresses, leaders, connect or connector(reactor, options, timeout_s))
    return descriptions


async def _describe(zk: IZooKeeper, group: str, reported: set[str],
                    leaders: dict[TopicPartition, int | None]) -> GroupDescription:
    registered_members = await read_members(zk, group)
    members = [GroupMember(i, registered_members[i]) for i in sorted(registered_members, key=natural_key)]
    topics = {t for m in members for t in (m.subscription or {})}
    topics |= set(await sorted_children(zk, f"{paths.group_path(group)}/owners"))
    topics |= set(await sorted_children(zk, f"{paths.group_path(group)}/offsets"))
    partitions = []
    layout = await _layout(zk, topics, reported)
    for topic in sorted(topics, key=natural_key):
        names = await sorted_children(zk, paths.owner_path(group, topic))
        names += await sorted_children(zk, paths.offset_path(group, topic))
        tps = sorted(set(_partitions(topic, names)) | set(layout.topic_partitions(topic)))
        leaders.update((tp, layout.leader(tp)) for tp in tps if tp.fixed_leader is None)
        owners = await read_values(zk, [paths.owner_path(group, topic, tp.name) for tp in tps])
        offsets = await read_offsets(zk, group, tps)
        for tp, owner in zip(tps, owners):
            partitions.append(PartitionStatus(
                topic, tp.name, owner.decode("utf-8", "replace") if owner is not None else None, offsets[tp], None,
            ))
    return GroupDescription(group, members, partitions)


def _partitions(topic: str, names: list[str]) -> list[TopicPartition]:
    """The partitions named C{names} (ZooKeeper child names; others are skipped)."""
    result = []
    for name in names:
        try:
            result.append(TopicPartition.from_name(topic, name))
        except ValueError:
            continue
    return result


def _asking(options: ClientOptions | None, timeout_s: float) -> ClientOptions:
    """C{options} (default: the defaults) for asking a broker once, within C{timeout_s}."""
    return ClientOptions.build(options, timeout_s=timeout_s, connect_timeout_s=timeout_s, connect_attempts=1)


def connector(reactor, options: ClientOptions | None, timeout_s: float):
    """C{connect(host, port)}: a L{BrokerConnection} asking once, within C{timeout_s}, with C{options}."""
    asking = _asking(options, timeout_s)
    return lambda host, port: BrokerConnection(host, port, reactor=reactor, options=asking)


async def _fill_latest(descriptions: list[GroupDescription], addresses: dict[int, tuple[str, int]],
                       leaders: dict[TopicPartition, int | None], connect) -> None:
    """Ask each partition's leader (a replicated one's from C{leaders}) once per partition for its latest offset;
    remember the answers in the descriptions."""
    wanted = sorted({p.topic_partition for d in descriptions for p in d.partitions})
    by_broker: dict[int, list[TopicPartition]] = {}
    latest: dict[TopicPartition, int] = {}
    problems: dict[TopicPartition, BrokerProblem] = {}
    for tp in wanted:
        leader = tp.fixed_leader if tp.fixed_leader is not None else leaders.get(tp)
        if leader in addresses:
            by_broker.setdefault(leader, []).append(tp)
        elif tp.fixed_leader is not None:
            problems[tp] = BrokerProblem(tp.fixed_leader, NOT_REGISTERED)
        else:
            problems[tp] = BrokerProblem(None, "no broker is known to lead it")

    async def ask(broker_id: int, items: list[TopicPartition]) -> None:
        host, port = addresses[broker_id]
        where = address_text(host, port)
        connection = connect(host, port)
        try:
            for tp in items:
                try:
                    offsets = (await connection.request(OffsetsRequest(tp.topic, tp.number, -1, 1))).offsets
                except BrokerError as e:  # this partition only (WrongPartition...)
                    problems[tp] = BrokerProblem(broker_id, f"answered {type(e).__name__} ({e})", where)
                    continue
                latest[tp] = offsets[0] if offsets else 0
        except Exception as e:  # unreachable, timed out: its partitions not asked yet are unknown
            for tp in items:
                if tp not in latest and tp not in problems:
                    problems[tp] = BrokerProblem(broker_id, f"did not answer ({e})", where)
        finally:
            await connection.close()

    await DeferredList([Deferred.fromCoroutine(ask(b, items)) for b, items in sorted(by_broker.items())])
    for d in descriptions:
        d.partitions[:] = [replace(p, latest=latest.get(p.topic_partition), problem=problems.get(p.topic_partition))
                           for p in d.partitions]


async def reset_offsets(zk: IZooKeeper, group: str, topic: str, offsets: Mapping[str, int]) -> None:
    """Rewind (or skip ahead) a group: set the committed offset of each partition named in C{offsets}.

    The group's consumers start there the next time they claim the
    partitions, so stop (or close) them first: a partition owned now would
    overwrite the value with its own progress.

    @param offsets: partition name (C{<broker id>-<partition>}) -> next offset to consume.
    @raise ValueError: a bad partition name or negative offset, or a consumer owns one of the partitions now.
    """
    for name, offset in offsets.items():
        TopicPartition.from_name(topic, name)  # ValueError on a bad name
        if offset < 0:
            raise ValueError(f"offset {offset} of {topic}/{name} is negative")
    names = sorted(offsets, key=natural_key)
    owners = await read_values(zk, [paths.owner_path(group, topic, n) for n in names])
    busy = [f"{n} (by {o.decode('utf-8', 'replace')})" for n, o in zip(names, owners) if o is not None]
    if busy:
        raise ValueError(f"group {group} is consuming {topic}: {', '.join(busy)}; stop its consumers first")
    for name in names:
        await zk.set_or_create(paths.offset_path(group, topic, name), str(offsets[name]).encode())


class GroupNotFound(TwlogError):
    """No consumer group of that name is registered in ZooKeeper."""


#: How many group names a "no group" error lists.
_LISTED_GROUPS = 10


async def check_group(zk: IZooKeeper, group: str, hint: str = "") -> None:
    """@raise GroupNotFound: C{group} has no node under C{/consumers}: the nearest name there is (did you mean?),
    or the groups there are; C{hint} ends the message (C{"use --create to start a new group"})."""
    if await zk.exists(paths.group_path(group)) is None:
        known = await sorted_children(zk, paths.CONSUMERS)
        near = difflib.get_close_matches(group, known, n=1)
        text = f"no group {group!r} in ZooKeeper at {getattr(zk, 'hosts', '?')}"
        if near:
            text += f"; did you mean {near[0]!r}?"
        elif known:
            listed = known if len(known) <= _LISTED_GROUPS else [*known[:_LISTED_GROUPS], "..."]
            text += f" (groups: {', '.join(listed)})"
        else:
            text += " (no groups at all)"
        raise GroupNotFound(text + (f" {hint}" if near else f"; {hint}") if hint else text)


async def delete_group(zk: IZooKeeper, group: str) -> dict[str, int]:
    """Delete C{group}'s nodes (its committed offsets, owners and member registry); refused while it has live
    members or owners.

    @return: topic -> how many committed offsets were deleted.
    @raise GroupNotFound: there is no such group.
    @raise ValueError: it has live members (naming them), or one joined while it was deleted.
    """
    await check_group(zk, group)
    await refuse_live_members(zk, group, "deleting it")
    owners_root = f"{paths.group_path(group)}/owners"
    owned = [f"{topic}:{name}" for topic in await sorted_children(zk, owners_root)
             for name in await sorted_children(zk, f"{owners_root}/{topic}")]
    if owned:
        raise ValueError(f"group {group!r} still owns {', '.join(owned)} (a member's session is alive); stop its "
                         "members before deleting it")
    offsets_root = f"{paths.group_path(group)}/offsets"
    deleted = {topic: len(await sorted_children(zk, paths.offset_path(group, topic)))
               for topic in await sorted_children(zk, offsets_root)}
    try:
        await _delete_tree(zk, paths.group_path(group))
    except NotEmptyError:
        raise ValueError(f"a member joined group {group!r} while it was being deleted; its offsets are gone, "
                         "its member registry is not") from None
    return deleted


async def _delete_tree(zk: IZooKeeper, path: str) -> None:
    """Delete C{path} and everything under it (what is gone meanwhile is skipped)."""
    for child in await sorted_children(zk, path):
        await _delete_tree(zk, f"{path}/{child}")
    try:
        await zk.delete(path)
    except NoNodeError:
        pass


async def live_members(zk: IZooKeeper, group: str) -> list[str]:
    """The consumer ids registered (alive) in C{group} now."""
    return await sorted_children(zk, paths.consumer_ids_path(group))


async def registered_partitions(zk: IZooKeeper, topic: str,
                                listener: str = PLAINTEXT) -> dict[TopicPartition, tuple[str, int]]:
    """Every partition of C{topic} registered by a live broker, with that broker's address (at C{listener}).

    The registrations are read by the one reading of the layout (L{ClusterLayout.from_registrations}): bad
    values are skipped, each logged once as a warning.
    """
    layout = await _layout(zk, [topic], set(), listener)
    return {location.tp: (location.host, location.port) for location in layout.locations(topic)}


async def _layout(zk: IZooKeeper, topics, reported: set[str], listener: str = PLAINTEXT) -> ClusterLayout:
    """The brokers (at C{listener}) and C{topics} as registered in C{zk}; each problem not in C{reported} yet is
    logged (and added)."""
    layout, problems = await read_registrations_async(zk, list(topics), listener)
    for problem in problems:
        if problem not in reported:
            reported.add(problem)
            _log.warn("ignoring a registration in ZooKeeper: {problem}", problem=problem)
    return layout


async def offsets_at(partitions: Mapping[TopicPartition, tuple[str, int]], time: int, *, reactor=None,
                     timeout_s: float = 5.0, options: ClientOptions | None = None,
                     connect=None) -> dict[TopicPartition, int]:
    """Each partition's offset at C{time}: L{LATEST} (-1), L{EARLIEST} (-2), or ms since the epoch.

    For a time, the offset is the newest segment start written before it (Kafka
    0.7's OFFSETS), or the earliest offset if every segment is newer.

    @raise ConnectionFailed: a broker cannot be reached (naming it).
    """
    result: dict[TopicPartition, int] = {}
    by_broker: dict[tuple[str, int], list[TopicPartition]] = {}
    for tp, address in sorted(partitions.items()):
        by_broker.setdefault(address, []).append(tp)
    connect = connect or connector(reactor, options, timeout_s)
    for (host, port), tps in by_broker.items():
        connection = connect(host, port)
        try:
            for tp in tps:
                found = (await connection.request(OffsetsRequest(tp.topic, tp.number, time, 1))).offsets
                if not found and time >= 0:
                    found = (await connection.request(OffsetsRequest(tp.topic, tp.number, -2, 1))).offsets
                result[tp] = found[0] if found else 0
        finally:
            await connection.close()
    return result


class OffsetRefused(TwlogError):
    """A byte offset to reset to that lies outside the partition or does not start a message in it."""


#: Positions asked about per BOUNDARIES request when looking for the message boundary before an offset.
_SEARCH_POSITIONS = 64


async def check_reset_offset(request, tp: TopicPartition, offset: int) -> None:
    """Refuse C{offset} unless a message of C{tp} starts there or it is C{tp}'s end (the next message's offset).

    Asks the partition's broker through C{request} (L{BrokerConnection.request}): OFFSETS for the earliest and
    latest offsets, BOUNDARIES for the message boundaries around C{offset}.

    @raise OffsetRefused: one line giving the valid range, or the nearest message boundaries.
    """
    earliest = await _single_offset(request, tp, EARLIEST)
    latest = await _single_offset(request, tp, LATEST)
    valid = f"its offsets run from {earliest} to {latest} (the end, where the next message goes)"
    if offset > latest:
        raise OffsetRefused(f"offset {offset} is past the end of {tp}: {valid}")
    if offset < earliest:
        raise OffsetRefused(f"offset {offset} is before the earliest offset of {tp} (retention deleted what was "
                            f"before {earliest}): {valid}")
    if offset == latest:
        return
    [after] = await _boundaries(request, tp, [offset])
    if after == offset:
        return
    before = await boundary_before(lambda positions: _boundaries(request, tp, positions), earliest, offset)
    nearest = f"{before} and {after}" if before is not None else f"{after} (none before it)"
    raise OffsetRefused(f"offset {offset} does not start a message of {tp}: the nearest message boundaries are "
                        f"{nearest}")


async def boundary_before(boundaries, low: int, offset: int, per_request: int = _SEARCH_POSITIONS) -> int | None:
    """The last message boundary before C{offset} (at or after C{low}), or None.

    C{boundaries(positions)} answers, for each position, the first boundary at or after it (BOUNDARIES; the
    answers never decrease as positions increase).  The search narrows C{[low, offset)} C{per_request}-fold
    per request: the last position answered below C{offset} is the boundary sought.
    """
    found: int | None = None
    high = offset
    while high > low:
        step = -(-(high - low) // per_request)  # ceiling: at most per_request positions
        positions = list(range(low, high, step))
        answers = await boundaries(positions)
        below = [i for i, answer in enumerate(answers) if answer < offset]
        if not below:
            return found
        last = below[-1]
        found = answers[last]
        if step == 1:
            return found
        low, high = positions[last] + 1, positions[last + 1] if last + 1 < len(positions) else high
    return found


async def _single_offset(request, tp: TopicPartition, time: int) -> int:
    offsets = (await request(OffsetsRequest(tp.topic, tp.number, time, 1))).offsets
    return offsets[0] if offsets else 0


async def _boundaries(request, tp: TopicPartition, positions: list[int]) -> list[int]:
    return list((await request(BoundariesRequest(tp.topic, tp.number, tuple(positions)))).offsets)


async def refuse_live_members(zk: IZooKeeper, group: str, doing: str) -> None:
    """@raise ValueError: C{group} has live members, naming them: C{stop them before <doing>}."""
    members = await live_members(zk, group)
    if members:
        raise ValueError(f"group {group!r} has {len(members)} live member{'s' if len(members) != 1 else ''} "
                         f"({', '.join(members)}); stop them before {doing}")


async def committed_partitions(zk: IZooKeeper, group: str, topic: str) -> list[TopicPartition]:
    """The partitions of C{topic} that C{group} has a committed offset node for (whether or not their broker is
    up), sorted."""
    return sorted(_partitions(topic, await sorted_children(zk, paths.offset_path(group, topic))))


async def reset_group(zk: IZooKeeper, group: str, topic: str, offsets: Mapping[str, int]) -> None:
    """L{reset_offsets}, refused while the group has any live member (not only owners of these partitions).

    @raise ValueError: the group has live members (naming them), or a bad partition name or offset.
    """
    await refuse_live_members(zk, group, "resetting its offsets")
    await reset_offsets(zk, group, topic, offsets)
