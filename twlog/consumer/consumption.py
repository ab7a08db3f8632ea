# -*- test-case-name: tests.consumer.test_group -*-
"""L{Consumption}: the partitions a group member consumes now, their fetch loops and streams, and their offsets.

The rebalancer (L{twlog.consumer.rebalancer.Rebalancer}) decides what is owned; this keeps the consumed
offsets of what is owned, commits them to ZooKeeper, and pauses, resumes or stops handing messages out.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.consumer.membership import write_offsets
from twlog.consumer.stream import GroupStream, OwnedPartition
from twlog.coord.layout import ClusterLayout
from twlog.coord.zk import IZooKeeper
from twlog.partition import TopicPartition

__all__ = ["Consumption", "UncommittedOffsets"]


class UncommittedOffsets(Exception):
    """Owner nodes are not released while offsets consumed from their partitions are not written."""


class Consumption:
    """The partitions a member consumes in one generation: their fetch loops, consumed and committed offsets.

    @param fetcher_factory: C{(broker id, (host, port), [OwnedPartition])} -> a
        fetcher with C{start()} and C{stop() -> Deferred}
        (L{twlog.consumer.stream.BrokerFetcher.connect} with the member's options).
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper, group: str, streams: dict[str, list[GroupStream]],
                 fetcher_factory: Callable[..., object]) -> None:
        self._zk = zk
        self.group = group
        self._streams = streams
        self._fetcher_factory = fetcher_factory
        #: Partitions consumed in this generation.
        self.owned: dict[TopicPartition, OwnedPartition] = {}
        #: The fetch loops of this generation.
        self.fetchers: list = []
        #: The session in which this generation's partitions were claimed (their offsets are written only in it).
        self.session: int | None = None
        self._closing: set[Deferred] = set()

    def active(self) -> list[OwnedPartition]:
        """The partitions being delivered now."""
        return [p for p in self.owned.values() if p.active]

    def by_topic(self) -> dict[str, dict[str, str]]:
        """The partitions delivered now: topic -> {partition name: stream id}."""
        result: dict[str, dict[str, str]] = {}
        for p in self.active():
            result.setdefault(p.topic, {})[p.name] = p.stream.stream_id
        return result

    def stop(self) -> None:
        """Stop every fetch loop and drop what was fetched but not handed out."""
        for fetcher in self.fetchers:
            d = fetcher.stop()
            self._closing.add(d)
            d.addBoth(lambda _, d=d: self._closing.discard(d))
        self.fetchers = []
        for p in self.owned.values():
            p.active = False
        for streams in self._streams.values():
            for stream in streams:
                stream.clear()

    def start(self, plan: dict[TopicPartition, str], offsets: dict[TopicPartition, int | None],
              layout: ClusterLayout) -> None:
        """Fetch each partition of C{plan} (partition -> stream id) from its committed offset, one loop per
        leader (as C{layout} says)."""
        self.session = self._zk.session_id
        by_id = {(s.topic, s.stream_id): s for streams in self._streams.values() for s in streams}
        by_broker: dict[int, list[OwnedPartition]] = {}
        for tp, stream_id in sorted(plan.items()):
            p = OwnedPartition(tp, layout.locate(tp).leader, by_id[(tp.topic, stream_id)], offsets.get(tp))
            self.owned[tp] = p
            by_broker.setdefault(p.leader, []).append(p)
        for broker_id, partitions in sorted(by_broker.items()):
            fetcher = self._fetcher_factory(broker_id, layout.brokers[broker_id], partitions)
            self.fetchers.append(fetcher)
            fetcher.start()

    async def commit(self, partitions: list[OwnedPartition] | None = None) -> None:
        """Write the consumed offset of C{partitions} (default: all of this generation) where it moved.

        Only in the session that claimed them: after an expiry their owner nodes are gone and another member
        may own them, so nothing is written (and they are forgotten).  A write that fails leaves the partition
        L{uncommitted}.
        """
        if partitions is None:
            partitions = list(self.owned.values())
        if self._zk.session_id is None or self._zk.session_id != self.session:
            if self.owned:
                self._log.info("group {group}: not committing {count} partition(s) claimed in an expired session",
                               group=self.group, count=len(self.owned))
            self.forget()
            return
        due = [(p, p.consumed) for p in partitions if p.consumed is not None and p.consumed != p.committed]
        if not due:
            return
        written = await write_offsets(self._zk, self.group,
                                      [(p.tp, v) for p, v in due])
        for (p, value), ok in zip(due, written):
            if ok:
                p.committed = value

    def uncommitted(self) -> list[OwnedPartition]:
        """This generation's partitions whose consumed offset is not written yet."""
        return [p for p in self.owned.values() if p.consumed is not None and p.consumed != p.committed]

    def forget(self) -> None:
        """The session that claimed this generation's partitions expired: forget them and their offsets."""
        self.owned = {}

    def acknowledge(self, partition: TopicPartition, next_offset: int) -> None:
        """With C{manual_offsets}: everything of C{partition} before C{next_offset} is done, so commits may
        write C{next_offset} while this generation owns it (a lower one is ignored).

        A partition that stopped being delivered but is still held (out of touch with ZooKeeper, or a
        rebalance that has not committed yet) takes it too: it was handed out while owned, and is committed
        if the same session comes back; after an expiry the partitions are forgotten and it is ignored.
        """
        p = self.owned.get(partition)
        if p is not None and (p.consumed is None or next_offset > p.consumed):
            p.consumed = next_offset

    def pause(self) -> None:
        """Hand nothing out (fetching goes on, into the bounded queues) until L{resume}."""
        for streams in self._streams.values():
            for stream in streams:
                stream.pause()

    def resume(self) -> None:
        """Hand messages out again."""
        for streams in self._streams.values():
            for stream in streams:
                stream.resume()

    def set_error(self, error: Exception | None) -> None:
        """Every stream raises C{error} once (None: forget an error not raised yet)."""
        for streams in self._streams.values():
            for stream in streams:
                stream.set_error(error)

    def close_streams(self) -> None:
        """End every stream's iteration."""
        for streams in self._streams.values():
            for stream in streams:
                stream.close()

    async def closed(self) -> None:
        """Fire once every stopped fetch loop has closed its connection."""
        if self._closing:
            await DeferredList(list(self._closing), consumeErrors=True)
