# -*- test-case-name: tests.consumer.test_membership,tests.consumer.test_group,tests.integration.test_admin -*-
"""The ZooKeeper reads and writes of consumer groups (Kafka 0.7's layout, shared/DESIGN.md).

  - C{/consumers/<group>/ids/<consumer id>}: ephemeral, a member's subscription
    (L{register_member}, L{deregister_member}, L{read_members});
  - C{/consumers/<group>/owners/<topic>/<broker id>-<partition>}: ephemeral,
    the owning stream id (L{Ownership}, L{delete_session_owners});
  - C{/consumers/<group>/offsets/<topic>/<broker id>-<partition>}: persistent,
    the next offset to consume (L{read_offsets}, L{write_offsets}).

Both the group consumer (L{twlog.consumer.group}) and the admin side
(L{twlog.consumer.admin}, C{twlog groups}) use these; neither imports the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.consumer.rebalance import decode_subscription, natural_key
from twlog.coord import paths
from twlog.coord.zk import IZooKeeper, NodeExistsError, NoNodeError
from twlog.errors import RebalanceFailed
from twlog.partition import TopicPartition

_log = Logger()
_DIGITS = re.compile(r"[0-9]+")


def describe_error(error: BaseException) -> str:
    """C{"<ExceptionType> <message>"}, for log lines."""
    return f"{type(error).__name__} {error}".strip()


def gather(coroutines: Iterable[Any]) -> DeferredList:
    """Run C{coroutines} at once; fire with DeferredList's [(success, result or Failure)]."""
    return DeferredList([Deferred.fromCoroutine(c) for c in coroutines], consumeErrors=True)


async def sorted_children(zk: IZooKeeper, path: str) -> list[str]:
    """The children of C{path} in natural order ([] if it does not exist)."""
    try:
        return sorted(await zk.children(path), key=natural_key)
    except NoNodeError:
        return []


async def read_values(zk: IZooKeeper, paths_: list[str]) -> list[bytes | None]:
    """The values of C{paths_}, read at once; None for those that do not exist."""
    results = await DeferredList([zk.get(p) for p in paths_], consumeErrors=True)
    values: list[bytes | None] = []
    for ok, result in results:
        if ok:
            values.append(result[0])
        elif result.check(NoNodeError):
            values.append(None)
        else:
            result.raiseException()
    return values


def parse_offset(value: bytes | None) -> int | None:
    """An offset node's value as an int: decimal digits, with any whitespace, newlines or NULs around them
    (as hand-edited or 0.7-era tools leave them).  None if missing or not a number."""
    if value is None:
        return None
    text = value.decode("utf-8", "replace").strip(" \t\r\n\x00")
    return int(text) if _DIGITS.fullmatch(text) else None


# -- members ---------------------------------------------------------------------------------


async def read_members(zk: IZooKeeper, group: str, watch=None) -> dict[str, dict[str, int] | None]:
    """Each member of C{group} and its subscription (None if unreadable); C{watch} fires when members change."""
    ids_path = paths.consumer_ids_path(group)
    try:
        members = await zk.children(ids_path, watch=watch)
    except NoNodeError:
        return {}
    result: dict[str, dict[str, int] | None] = {}
    for member, value in zip(members, await read_values(zk, [f"{ids_path}/{m}" for m in members])):
        if value is None:
            continue  # gone meanwhile (a watch fires for it)
        try:
            result[member] = decode_subscription(value)
        except ValueError as e:
            _log.warn("group {group}: skipping member {member}: {path} holds an unreadable subscription: {error}",
                      group=group, member=member, path=f"{ids_path}/{member}", error=e)
            result[member] = None
    return result


async def register_member(zk: IZooKeeper, group: str, consumer_id: str, value: bytes, *, attempts: int,
                          pause: Callable[[int], Deferred]) -> None:
    """Create the ephemeral C{/consumers/<group>/ids/<consumer id>} = C{value} (or update it if this session's).

    A node held by another session (a previous incarnation whose session has
    not expired yet, or a duplicate id) is waited for: C{pause(attempt)} between
    C{attempts} tries.

    @raise RebalanceFailed: still held by another session after the last attempt.
    """
    path = paths.consumer_ids_path(group, consumer_id)
    for attempt in range(1, attempts + 1):
        try:
            await zk.create(path, value, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            _, stat = await zk.get(path)
        except NoNodeError:
            continue
        if zk.session_id is not None and stat.ephemeralOwner == zk.session_id:
            await zk.set(path, value)
            return
        if attempt < attempts:
            await pause(attempt)
    raise RebalanceFailed(f"consumer id {consumer_id} is registered in group {group} by another session")


async def deregister_member(zk: IZooKeeper, group: str, consumer_id: str) -> None:
    """Delete C{/consumers/<group>/ids/<consumer id>} (if still there)."""
    try:
        await zk.delete(paths.consumer_ids_path(group, consumer_id))
    except NoNodeError:
        pass


# -- offsets ---------------------------------------------------------------------------------


async def read_offsets(zk: IZooKeeper, group: str,
                       partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
    """The committed offsets of C{partitions}; None where there is none (or garbage)."""
    values = await read_values(zk, [paths.offset_path(group, tp.topic, tp.name) for tp in partitions])
    return {tp: parse_offset(value) for tp, value in zip(partitions, values)}


async def write_offsets(zk: IZooKeeper, group: str, offsets: list[tuple[TopicPartition, int]]) -> list[bool]:
    """Commit (partition, next offset) pairs at once; whether each was written (failures are logged)."""
    results = await DeferredList([zk.set_or_create(paths.offset_path(group, tp.topic, tp.name), str(offset).encode())
                                  for tp, offset in offsets], consumeErrors=True)
    for (tp, offset), (ok, result) in zip(offsets, results):
        if not ok:
            _log.warn("committing {partition} at {offset} failed: {error}", partition=str(tp), offset=offset,
                      error=describe_error(result.value))
    return [ok for ok, _ in results]


# -- owners ----------------------------------------------------------------------------------


class OwnerConflict(Exception):
    """An owner node is held by another consumer."""


class Ownership:
    """The owner nodes one member's session holds: claimed partition by partition, released all at once."""

    def __init__(self, zk: IZooKeeper, group: str) -> None:
        self._zk = zk
        self.group = group
        #: The partitions whose owner node this session holds.
        self.held: set[TopicPartition] = set()

    def forget(self) -> None:
        """The session expired: its owner nodes are gone."""
        self.held = set()

    async def claim(self, tp: TopicPartition, stream_id: str, still_wanted: Callable[[], None]) -> bool:
        """Create C{tp}'s owner node with C{stream_id}; False if another consumer holds it.

        C{still_wanted()} is called before each write, and raises to stop.
        """
        path = paths.owner_path(self.group, tp.topic, tp.name)
        for _ in range(2):
            still_wanted()
            try:
                await self._zk.create(path, stream_id.encode(), ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    _, stat = await self._zk.get(path)
                except NoNodeError:
                    continue  # released meanwhile: try once more
                if self._zk.session_id is None or stat.ephemeralOwner != self._zk.session_id:
                    return False
                await self._zk.set(path, stream_id.encode())  # ours already (a retried create)
            self.held.add(tp)
            return True
        return False

    async def claim_all(self, plan: dict[TopicPartition, str], still_wanted: Callable[[], None]) -> list[str]:
        """Claim every partition of C{plan} (partition -> stream id) at once; those held by others, as text.

        An exception of a claim (C{still_wanted}'s first) is raised after all finished.
        """
        items = sorted(plan.items())
        results = await gather(self.claim(tp, stream, still_wanted) for tp, stream in items)
        conflicts = []
        for (tp, _), (ok, result) in zip(items, results):
            if not ok:
                result.raiseException()
            if not result:
                conflicts.append(str(tp))
        return conflicts

    async def release(self) -> None:
        """Delete every owner node held (the first error is raised after all were tried)."""
        results = await gather(self._release(tp) for tp in sorted(self.held))
        for ok, result in results:
            if not ok:
                result.raiseException()

    async def _release(self, tp: TopicPartition) -> None:
        try:
            await self._zk.delete(paths.owner_path(self.group, tp.topic, tp.name))
        except NoNodeError:
            pass
        self.held.discard(tp)

    async def delete_strays(self, topics: list[str]) -> None:
        """Delete owner nodes of C{topics} this session holds without knowing it (see L{delete_session_owners})."""
        await delete_session_owners(self._zk, self.group, topics, self.held)


async def delete_session_owners(zk: IZooKeeper, group: str, topics: list[str], keep: set[TopicPartition]) -> None:
    """Delete the owner nodes of C{topics} that this session holds, except C{keep}.

    After a session expired, a claim sent as it expired may have been made
    by the new session: the consumer does not know of it, and would never
    release it.
    """
    session = zk.session_id
    if session is None:
        return
    for topic in topics:
        for name in await sorted_children(zk, paths.owner_path(group, topic)):
            try:
                if TopicPartition.from_name(topic, name) in keep:
                    continue
            except ValueError:
                pass  # not a partition name: not one we know of
            path = paths.owner_path(group, topic, name)
            try:
                _, stat = await zk.get(path)
                if stat.ephemeralOwner == session:
                    await zk.delete(path)
            except NoNodeError:
                pass
