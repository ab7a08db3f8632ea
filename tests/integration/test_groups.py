"""Consumer groups end to end: real brokers registered in a real ZooKeeper, several GroupConsumers in one reactor."""

from __future__ import annotations

from collections import Counter

from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.trial.unittest import TestCase

from tests.integration.groups import (
    FAST,
    Collector,
    ownership,
    partition_names,
    produce_all,
    registered,
    start_brokers,
    wait_settled,
)
from tests.integration.zookeeper import connect, expire_session
from twlog.consumer.group import GroupConsumer, GroupState
from twlog.coord import paths


class GroupTests(TestCase):
    timeout = 60

    async def setup_cluster(self, brokers: int = 3, topic: str = "clicks", per_partition: int = 20):
        """A ZooKeeper chroot, registered brokers holding C{topic}, and C{per_partition} messages on each partition."""
        zk = await connect(self)
        cluster = await start_brokers(self, zk.hosts, brokers)
        sent = await produce_all(cluster, topic, per_partition)
        await registered(zk, topic, cluster)
        return zk, cluster, sent

    def consumer(self, hosts: str, group: str = "g", name: str | None = None, **options) -> GroupConsumer:
        """A group consumer with fast test settings, closed when the test ends."""
        consumer = GroupConsumer(hosts, group, reactor=reactor, consumer_id=name, **{**FAST, **options})
        self.addCleanup(consumer.close)
        return consumer

    async def join(self, consumers: list[GroupConsumer], collector: Collector, topic: str = "clicks",
                   streams: int = 1) -> None:
        """Create every consumer's streams at once, and read them all into C{collector}."""
        results = await DeferredList([c.create_message_streams({topic: streams}) for c in consumers],
                                     fireOnOneErrback=True, consumeErrors=True)
        for consumer, (_, streams_by_topic) in zip(consumers, results):
            collector.read(consumer, streams_by_topic)

    async def test_exactly_once_without_failures(self) -> None:
        """Three consumers over 3 brokers x 4 partitions get every message exactly once, in partition order."""
        zk, cluster, sent = await self.setup_cluster()
        consumers = [self.consumer(zk.hosts, name=f"c{i}") for i in range(3)]
        collector = Collector()
        await self.join(consumers, collector)
        await wait_settled(consumers, partition_names("clicks", cluster))
        self.assertEqual(sorted(len(c.owned()["clicks"]) for c in consumers), [4, 4, 4])
        sent |= await produce_all(cluster, "clicks", 20, start=20)
        await collector.has_all(sent)
        counts = collector.payloads()
        self.assertEqual(set(counts), sent)
        self.assertEqual([p for p, n in counts.items() if n > 1], [])
        self.assertEqual(collector.unowned, [])
        by_partition: dict[str, list[int]] = {}
        for _, message in collector.received:
            by_partition.setdefault(message.partition, []).append(message.offset)
        for offsets in by_partition.values():
            self.assertEqual(offsets, sorted(offsets))

    async def test_killed_consumer_partitions_move(self) -> None:
        """A consumer whose session dies without a clean shutdown loses its partitions to the others; no message is
        lost, and the duplicates are exactly what it consumed after its last commit."""
        zk, cluster, sent = await self.setup_cluster()
        victim = self.consumer(zk.hosts, name="c0", auto_commit_interval_ms=0)
        survivors = [self.consumer(zk.hosts, name=f"c{i}") for i in (1, 2)]
        collector = Collector()
        await self.join([victim, *survivors], collector)
        await wait_settled([victim, *survivors], partition_names("clicks", cluster))
        await collector.has_all(sent)
        await victim.commit()
        committed = len(collector.received)
        second = await produce_all(cluster, "clicks", 10, start=20)
        await collector.has_all(second)
        uncommitted = Counter(m.payload for name, m in collector.received[committed:] if name == "c0")
        collector.stop(victim)
        await victim.zookeeper.stop()  # no commit, no release: the server drops its nodes with the session
        await wait_settled(survivors, partition_names("clicks", cluster))
        self.assertEqual(victim.state, GroupState.SESSION_LOST)
        self.assertEqual(victim.owned(), {})
        third = await produce_all(cluster, "clicks", 10, start=30)
        await collector.has_all(third)
        await collector.when(lambda: sum(collector.payloads().values()) == len(sent | second | third) + 40)
        counts = collector.payloads()
        self.assertEqual(set(counts), sent | second | third)
        duplicates = Counter({p: n - 1 for p, n in counts.items() if n > 1})
        Logger().info("killed consumer: {duplicates} duplicates of {count} messages",
                      duplicates=sum(duplicates.values()), count=len(counts))
        self.assertEqual(duplicates, uncommitted)
        self.assertEqual(len(uncommitted), 40)  # its 4 partitions x 10 messages since the commit
        self.assertEqual(collector.unowned, [])
        self.assertEqual(sorted(len(c.owned()["clicks"]) for c in survivors), [6, 6])

    async def test_broker_stops_and_returns(self) -> None:
        """Stopping a broker moves consumption to the brokers left; a restarted broker is picked up again."""
        zk, cluster, sent = await self.setup_cluster()
        consumers = [self.consumer(zk.hosts, name=f"c{i}") for i in range(2)]
        collector = Collector()
        await self.join(consumers, collector)
        await collector.has_all(sent)
        gone = cluster[2]
        await gone.stop()
        await wait_settled(consumers, partition_names("clicks", cluster[:2]))
        second = await produce_all(cluster[:2], "clicks", 10, start=20)
        await collector.has_all(second)
        await gone.start()  # same port and log directory; registers again
        await wait_settled(consumers, partition_names("clicks", cluster))
        third = await produce_all(cluster, "clicks", 10, start=30)
        await collector.has_all(third)
        counts = collector.payloads()
        self.assertEqual(set(counts), sent | second | third)
        self.assertEqual([p for p, n in counts.items() if n > 1], [])

    async def test_added_consumer_never_shares_a_partition(self) -> None:
        """A consumer added to a stable group takes its share, and no partition is ever owned twice meanwhile."""
        zk, cluster, sent = await self.setup_cluster()
        consumers = [self.consumer(zk.hosts, name=f"c{i}") for i in range(2)]
        collector = Collector()
        await self.join(consumers, collector)
        await wait_settled(consumers, partition_names("clicks", cluster))
        everyone = [*consumers, self.consumer(zk.hosts, name="c2")]

        overlaps: list[dict] = []
        samples = {"memory": 0, "zookeeper": 0}

        def sample_memory() -> None:
            samples["memory"] += 1
            shared = {p: o for p, o in ownership(everyone).items() if len(o) > 1}
            if shared:
                overlaps.append(shared)

        sampler = LoopingCall(sample_memory)
        sampler.start(0.001)
        self.addCleanup(lambda: sampler.running and sampler.stop())
        owners_path = paths.owner_path("g", "clicks")
        zk_snapshots: list[dict[str, str]] = []
        watching = {"on": True}

        async def sample_zookeeper() -> None:
            # Each change of the owner nodes is read with its values: a partition maps to one stream at most.
            while watching["on"]:
                changed: Deferred = Deferred()
                names = await zk.children(owners_path, watch=lambda e: changed.called or changed.callback(e))
                values = await DeferredList([zk.get(f"{owners_path}/{n}") for n in names], consumeErrors=True)
                zk_snapshots.append({n: r[0].decode() for n, (ok, r) in zip(names, values) if ok})
                samples["zookeeper"] += 1
                await changed

        reading = Deferred.fromCoroutine(sample_zookeeper())
        reading.addErrback(lambda f: None)
        collector.read(everyone[2], await everyone[2].create_message_streams({"clicks": 1}))
        more = await produce_all(cluster, "clicks", 10, start=20)
        await wait_settled(everyone, partition_names("clicks", cluster))
        await collector.has_all(sent | more)
        watching["on"] = False
        sampler.stop()
        self.assertEqual(overlaps, [])
        self.assertEqual(collector.unowned, [])
        self.assertEqual(sorted(len(c.owned()["clicks"]) for c in everyone), [4, 4, 4])
        self.assertGreater(samples["memory"], 10)
        self.assertGreater(len(zk_snapshots), 1)
        final = {n: s for n, s in zk_snapshots[-1].items()}
        expected = {name: c.owned()["clicks"][name] for c in everyone for name in c.owned()["clicks"]}
        await wait_settled(everyone, partition_names("clicks", cluster))
        values = await DeferredList([zk.get(f"{owners_path}/{n}") for n in expected], consumeErrors=True)
        self.assertEqual({n: r[0].decode() for n, (ok, r) in zip(expected, values)}, expected)
        self.assertTrue(set(final) <= set(expected))
        self.assertEqual(Counter(collector.payloads().values()), Counter({1: len(sent | more)}))

    async def test_two_groups_each_get_everything(self) -> None:
        """Two groups on one topic each receive the whole topic."""
        zk, cluster, sent = await self.setup_cluster(brokers=2)
        first = [self.consumer(zk.hosts, "g1", name=f"a{i}") for i in range(2)]
        second = [self.consumer(zk.hosts, "g2", name="b0")]
        one, two = Collector(), Collector()
        await self.join(first, one)
        await self.join(second, two, streams=2)
        await one.has_all(sent)
        await two.has_all(sent)
        self.assertEqual(set(one.payloads()), sent)
        self.assertEqual(set(two.payloads()), sent)
        self.assertEqual(len(second[0].owned()["clicks"]), 8)
        self.assertEqual(sorted(set(second[0].owned()["clicks"].values())), ["b0-0", "b0-1"])

    async def test_session_expiry_recovers(self) -> None:
        """A consumer whose ZooKeeper session expires registers again, rebalances, and consumes on."""
        zk, cluster, sent = await self.setup_cluster(brokers=2)
        consumers = [self.consumer(zk.hosts, name=f"c{i}") for i in range(2)]
        collector = Collector()
        await self.join(consumers, collector)
        await collector.has_all(sent)
        expired = consumers[0]
        before = expired.rebalances
        lost: Deferred = Deferred()
        expired.zookeeper.add_state_listener(lambda state: state == "lost" and not lost.called and lost.callback(None))
        expire_session(expired.zookeeper)
        await lost
        await wait_settled(consumers, partition_names("clicks", cluster))
        self.assertGreater(expired.rebalances, before)
        self.assertEqual(sorted(len(c.owned()["clicks"]) for c in consumers), [4, 4])
        members = await zk.children(paths.consumer_ids_path("g"))
        self.assertEqual(sorted(members), ["c0", "c1"])
        more = await produce_all(cluster, "clicks", 10, start=20)
        await collector.has_all(sent | more)
        self.assertEqual(collector.errors, [])
