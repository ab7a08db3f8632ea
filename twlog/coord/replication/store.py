# -*- test-case-name: tests.coord.test_replication_store -*-
"""Replicated topics' nodes in ZooKeeper, read and written over L{IZooKeeper} (shared/DESIGN.md, "Replication").

A partition's state is written only by compare-and-set on its znode version: L{write_state_cas} raises
L{StateChanged} when someone wrote it since it was read, and the writer reads it again and decides again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twlog.coord import paths
from twlog.coord.replication.values import (
    BadReplicationValue,
    PartitionState,
    TopicAssignment,
    decode_epoch,
    encode_epoch,
)
from twlog.coord.zk import BadVersionError, IZooKeeper, KazooException, NodeExistsError, NoNodeError
from twlog.errors import TwlogError
from twlog.storage.manager import validate_topic

__all__ = ["MIN_INSYNC_REPLICAS", "InvalidTopicConfig", "ReplicatedTopicExists", "StateChanged",
           "create_replicated_topic", "create_state", "delete_tree",
           "increment_controller_epoch", "leaderships", "list_topics", "read_controller_epoch", "read_state",
           "read_topic", "resign_controller", "write_state_cas"]

#: A step's check between two of ZooKeeper's answers: raises to stop there (the caller lost its session).
Checkpoint = Callable[[], None]


def _go_on() -> None:
    return None


class ReplicatedTopicExists(TwlogError):
    """A topic of that name exists already, replicated or Kafka 0.7 style."""


class InvalidTopicConfig(TwlogError):
    """A replicated topic's config has a value brokers could not use."""


#: The config key of the smallest ISR an C{ack="all"} produce is accepted with (a string, as Kafka keeps it).
MIN_INSYNC_REPLICAS = "min.insync.replicas"


class StateChanged(TwlogError):
    """A partition's state changed (or went) since it was read: read it again and decide again."""

    def __init__(self, topic: str, partition: int, expected_version: int) -> None:
        super().__init__(f"{paths.partition_state_path(topic, partition)} is no longer at version "
                         f"{expected_version}: someone else wrote it")
        self.topic = topic
        self.partition = partition
        self.expected_version = expected_version


async def create_replicated_topic(zk: IZooKeeper, topic: str, assignment: Mapping[int, tuple[int, ...]],
                                  config: Mapping[str, str] | None = None) -> TopicAssignment:
    """Write C{/twlog/topics/<topic>} (persistent) with C{assignment} and C{config}; the controller, watching
    C{/twlog/topics}, then writes each partition's first state.

    @raise ReplicatedTopicExists: C{topic} is a replicated topic already, or a 0.7 one (C{/brokers/topics}).
    @raise InvalidTopicConfig: C{min.insync.replicas} is not an integer >= 1 (above the replication factor
        is allowed, as in Kafka: every C{ack="all"} produce is then refused).
    @raise twlog.errors.InvalidTopic: a name brokers would refuse.
    """
    validate_topic(topic)
    value = TopicAssignment(topic, assignment, config or {})
    minimum = value.config.get(MIN_INSYNC_REPLICAS)
    if minimum is not None and not (minimum.isdigit() and minimum.isascii() and int(minimum) >= 1):
        raise InvalidTopicConfig(f"{MIN_INSYNC_REPLICAS} must be an integer of at least 1, not {minimum!r}")
    if await zk.exists(paths.broker_topic_path(topic)) is not None:
        raise ReplicatedTopicExists(f"topic {topic!r} exists already as a Kafka 0.7 topic "
                                    f"({paths.broker_topic_path(topic)})")
    try:
        await zk.create(paths.replicated_topic_path(topic), value.encode(), makepath=True)
    except NodeExistsError:
        raise ReplicatedTopicExists(f"topic {topic!r} exists already ({paths.replicated_topic_path(topic)})") from None
    return value


async def list_topics(zk: IZooKeeper, watch: Callable[[Any], Any] | None = None) -> list[str]:
    """The replicated topics, sorted; C{watch} fires when one is created or deleted (one operation: none
    before the first topic, and then no watch: the caller makes sure C{/twlog/topics} exists to watch it)."""
    try:
        return sorted(await zk.children(paths.REPLICATED_TOPICS, watch=watch))
    except NoNodeError:
        return []


async def read_topic(zk: IZooKeeper, topic: str, watch: Callable[[Any], Any] | None = None) -> TopicAssignment:
    """C{topic}'s assignment and config.

    @raise NoNodeError: it is not a replicated topic.
    @raise BadReplicationValue: its value is not of its shape.
    """
    path = paths.replicated_topic_path(topic)
    data, _ = await zk.get(path, watch=watch)
    return TopicAssignment.decode(topic, data, path)


async def read_state(zk: IZooKeeper, topic: str, partition: int,
                     watch: Callable[[Any], Any] | None = None) -> tuple[PartitionState, int]:
    """Partition C{partition}'s state and its znode version (for L{write_state_cas}).

    @raise NoNodeError: it has no state yet (the controller has not written its first).
    @raise BadReplicationValue: its value is not of its shape.
    """
    path = paths.partition_state_path(topic, partition)
    data, stat = await zk.get(path, watch=watch)
    return PartitionState.decode(data, path), stat.version


async def create_state(zk: IZooKeeper, topic: str, partition: int, state: PartitionState,
                       checkpoint: Checkpoint = _go_on) -> int:
    """Write a partition's first state (version 0), under its topic's node (never creating that: a topic
    deleted meanwhile stays deleted).

    @param checkpoint: called after each of ZooKeeper's answers but the last; it raises to stop there (a
        controller that lost its session asks nothing more).
    @raise StateChanged: it has one already (another controller wrote it), or its topic went.
    """
    parents = (paths.partition_state_path(topic), f"{paths.partition_state_path(topic)}/{int(partition)}")
    try:
        for parent in parents:
            try:
                await zk.create(parent)
            except NodeExistsError:
                pass
            checkpoint()
        await zk.create(paths.partition_state_path(topic, partition), state.encode())
    except (NodeExistsError, NoNodeError):
        raise StateChanged(topic, partition, -1) from None
    return 0


async def write_state_cas(zk: IZooKeeper, topic: str, partition: int, state: PartitionState,
                          expected_version: int) -> int:
    """Write C{state} if the znode is still at C{expected_version}; return its new version.

    @raise StateChanged: it is not (or it went).
    """
    if expected_version < 0:
        raise ValueError(f"a compare-and-set needs a znode version, not {expected_version}")
    try:
        stat = await zk.set(paths.partition_state_path(topic, partition), state.encode(), version=expected_version)
    except (BadVersionError, NoNodeError):
        raise StateChanged(topic, partition, expected_version) from None
    return stat.version


async def increment_controller_epoch(zk: IZooKeeper, checkpoint: Checkpoint = _go_on) -> int:
    """Add 1 to C{/twlog/controller_epoch} by compare-and-set (created at 1); return the new epoch.  Called by
    the holder of C{/twlog/controller}, so a failed compare-and-set (an older election's) is tried again."""
    while True:
        try:
            data, stat = await zk.get(paths.CONTROLLER_EPOCH)
        except NoNodeError:
            checkpoint()
            try:
                await zk.create(paths.CONTROLLER_EPOCH, encode_epoch(1), makepath=True)
                return 1
            except NodeExistsError:
                checkpoint()
                continue
        checkpoint()
        epoch = decode_epoch(data, paths.CONTROLLER_EPOCH) + 1
        try:
            await zk.set(paths.CONTROLLER_EPOCH, encode_epoch(epoch), version=stat.version)
            return epoch
        except BadVersionError:
            checkpoint()


async def read_controller_epoch(zk: IZooKeeper) -> int:
    """The epoch of the last controller election (0: none yet)."""
    try:
        data, _ = await zk.get(paths.CONTROLLER_EPOCH)
    except NoNodeError:
        return 0
    return decode_epoch(data, paths.CONTROLLER_EPOCH)


async def resign_controller(zk: IZooKeeper) -> None:
    """Delete C{/twlog/controller} if this session holds it (a stopping controller), so another is elected now."""
    try:
        _, stat = await zk.get(paths.CONTROLLER)
        if stat.ephemeralOwner == zk.session_id:
            await zk.delete(paths.CONTROLLER, version=stat.version)
    except KazooException:
        pass  # gone already, or no session: the node goes with the session


async def leaderships(zk: IZooKeeper, broker_id: int, checkpoint: Checkpoint = _go_on) -> list[tuple[str, int]]:
    """The replicated partitions (topic, number) whose state names C{broker_id} as leader, sorted; a topic or
    state that is missing or bad is skipped."""
    led = []
    topics = await list_topics(zk)
    checkpoint()
    for topic in topics:
        try:
            partitions = sorted((await read_topic(zk, topic)).partitions)
        except (NoNodeError, BadReplicationValue):
            partitions = []
        checkpoint()
        for partition in partitions:
            try:
                state, _ = await read_state(zk, topic, partition)
            except (NoNodeError, BadReplicationValue):
                continue
            finally:
                checkpoint()
            if state.leader == broker_id:
                led.append((topic, partition))
    return led


__all__ += ["BadReplicationValue"]


async def delete_tree(zk: IZooKeeper, path: str) -> None:
    """Delete C{path} and everything under it (gone already: nothing to do)."""
    try:
        children = await zk.children(path)
    except NoNodeError:
        return
    for child in children:
        await delete_tree(zk, f"{path}/{child}")
    try:
        await zk.delete(path)
    except NoNodeError:
        pass
