"""describe_groups and the rebalance benchmark, against a real ZooKeeper and real brokers."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from tests.integration.groups import FAST, payloads, registered, start_brokers
from tests.integration.zookeeper import connect
from twlog.bench.rebalance import rebalance_benchmark
from twlog.consumer.admin import GroupMember, describe_groups, reset_offsets
from twlog.consumer.group import GroupConsumer


class DescribeTests(TestCase):
    timeout = 60

    async def test_members_owners_offsets_and_lag(self) -> None:
        """A group is described with its members, each partition's owner and committed offset, and the lag;
        a stopped group can be rewound."""
        zk = await connect(self)
        [broker] = await start_brokers(self, zk.hosts, 1, partitions=2)
        first = payloads("t", 0, 0, 5)
        await broker.produce("t", 0, first)
        await broker.produce("t", 1, payloads("t", 0, 1, 3))
        await registered(zk, "t", [broker])
        self.assertEqual(await describe_groups(zk), [])
        options = {**FAST, "auto_commit_interval_ms": 0}
        consumer = GroupConsumer(zk.hosts, "g", reactor=reactor, consumer_id="c", **options)
        self.addCleanup(consumer.close)
        [stream] = (await consumer.create_message_streams({"t": 1}))["t"]
        got = [await stream.__anext__() for _ in range(8)]
        await consumer.commit()
        extra = payloads("t", 0, 0, 2, start=5)
        await broker.produce("t", 0, extra)
        end0, end1 = await broker.offsets("t", 0), await broker.offsets("t", 1)

        [group] = await describe_groups(zk, "g")
        self.assertEqual(group.group, "g")
        self.assertEqual(group.members, [GroupMember("c", {"t": 1})])
        rows = [(p.topic, p.partition, p.owner, p.offset, p.latest, p.lag) for p in group.partitions]
        consumed0 = max(m.next_offset for m in got if m.partition.name == "0-0")
        self.assertEqual(rows, [("t", "0-0", "c-0", consumed0, end0, end0 - consumed0),
                                ("t", "0-1", "c-0", end1, end1, 0)])
        self.assertEqual(group.lag, end0 - consumed0)
        self.assertEqual([g.group for g in await describe_groups(zk)], ["g"])

        with self.assertRaises(ValueError):
            await reset_offsets(zk, "g", "t", {"0-0": 0})  # owned now

        await consumer.close()
        [after] = await describe_groups(zk, "g")
        self.assertEqual(after.members, [])
        self.assertEqual([(p.owner, p.offset) for p in after.partitions], [(None, consumed0), (None, end1)])
        await reset_offsets(zk, "g", "t", {"0-0": 0})
        again = GroupConsumer(zk.hosts, "g", reactor=reactor, consumer_id="d", **options)
        self.addCleanup(again.close)
        [stream] = (await again.create_message_streams({"t": 1}))["t"]
        replay = [(await stream.__anext__()).payload for _ in range(len(first) + len(extra))]
        self.assertEqual(replay, first + extra)  # 0-0 from the start; 0-1 has nothing new
        for bad in ({"x": 0}, {"0-0": -1}):
            with self.assertRaises(ValueError):
                await reset_offsets(zk, "g", "t", bad)


class BenchmarkTests(TestCase):
    timeout = 60

    async def test_small_rebalance_benchmark(self) -> None:
        """The benchmark settles a small group and reports its time and retries."""
        zk = await connect(self)
        seconds, retries = await rebalance_benchmark(reactor, zk.hosts, consumers=3, partitions=6, brokers=2,
                                                     rebalance_backoff_ms=50, log_dir=self.mktemp())
        self.assertGreater(seconds, 0)
        self.assertGreaterEqual(retries, 0)
        seconds, retries = await rebalance_benchmark(reactor, zk.hosts, consumers=3, partitions=6, brokers=2,
                                                     scenario="join", rebalance_backoff_ms=50, log_dir=self.mktemp())
        self.assertGreater(seconds, 0)
