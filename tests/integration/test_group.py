"""GroupConsumer details on a real ZooKeeper and real brokers: failed rebalances, offsets, back-pressure, facade."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import wait_until
from tests.integration.groups import FAST, Collector, payloads, produce_all, registered, start_brokers, wait_settled
from tests.integration.zookeeper import connect
from twlog.blocking import BlockingGroupConsumer
from twlog.consumer.group import GroupConsumer, GroupState
from twlog.coord import paths
from twlog.coord.zk import ZooKeeper
from twlog.errors import RebalanceFailed


class GroupConsumerTests(TestCase):
    timeout = 60

    async def cluster(self, brokers: int = 1, partitions: int = 4, per_partition: int = 10):
        zk = await connect(self)
        cluster = await start_brokers(self, zk.hosts, brokers, partitions)
        sent = await produce_all(cluster, "t", per_partition)
        await registered(zk, "t", cluster)
        return zk, cluster, sent

    def consumer(self, hosts: str, group: str = "g", **options) -> GroupConsumer:
        consumer = GroupConsumer(hosts, group, reactor=reactor, **{**FAST, **options})
        self.addCleanup(consumer.close)
        return consumer

    async def offsets(self, zk: ZooKeeper, group: str, names: list[str]) -> dict[str, int | None]:
        result = {}
        for name in names:
            try:
                result[name] = int((await zk.get(paths.offset_path(group, "t", name)))[0])
            except Exception:
                result[name] = None
        return result

    async def test_rebalance_failure_is_raised_then_recovers(self) -> None:
        """When a partition stays owned by someone else, the retries run out and the stream raises
        RebalanceFailed; a later change of the group rebalances again, and the stream delivers."""
        zk, cluster, sent = await self.cluster()
        intruder = await connect(self, zk.hosts)
        await intruder.create(paths.owner_path("g", "t", "0-1"), b"ghost-0", ephemeral=True, makepath=True)
        consumer = self.consumer(zk.hosts, consumer_id="a", rebalance_max_retries=2)
        [stream] = (await consumer.create_message_streams({"t": 1}))["t"]
        self.assertEqual(consumer.state, GroupState.FAILED)
        self.assertEqual(consumer.retries, 1)
        self.assertEqual(consumer.owned(), {})
        with self.assertRaises(RebalanceFailed):
            await stream.__anext__()
        await intruder.delete(paths.owner_path("g", "t", "0-1"))
        other = self.consumer(zk.hosts, consumer_id="b")
        collector = Collector()
        collector.read(consumer, {"t": [stream]})
        collector.read(other, await other.create_message_streams({"t": 1}))
        await collector.has_all(sent)
        self.assertEqual(consumer.state, GroupState.STABLE)
        self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1"])

    async def test_close_commits_and_the_group_resumes_there(self) -> None:
        """close() commits the consumed offsets; the next member of the group starts there, with no repeats."""
        zk, cluster, sent = await self.cluster()
        first = self.consumer(zk.hosts, auto_commit_interval_ms=0)
        collector = Collector()
        collector.read(first, await first.create_message_streams({"t": 2}))
        await collector.has_all(sent)
        await first.commit()
        names = [f"0-{p}" for p in range(4)]
        ends = {n: (await cluster[0].offsets("t", int(n[2:]))) for n in names}
        self.assertEqual(await self.offsets(zk, "g", names), ends)
        await first.close()
        self.assertEqual(await zk.children(paths.consumer_ids_path("g")), [])
        self.assertEqual(await zk.children(paths.owner_path("g", "t")), [])
        more = await produce_all(cluster, "t", 5, start=10)
        second = self.consumer(zk.hosts)
        later = Collector()
        later.read(second, await second.create_message_streams({"t": 1}))
        await later.has_all(more)
        self.assertEqual(set(later.payloads()), more)

    async def test_new_group_largest_and_out_of_range(self) -> None:
        """A new group with auto_offset_reset=largest sees only new messages; an out-of-range committed offset
        is reset to the smallest."""
        zk, cluster, sent = await self.cluster(partitions=2)
        latest = self.consumer(zk.hosts, "late", auto_offset_reset="largest")
        late = Collector()
        late.read(latest, await latest.create_message_streams({"t": 1}))
        await wait_until(lambda: all(p.consumed is not None for p in latest.rebalancer.consumption.owned.values()))
        more = await produce_all(cluster, "t", 3, start=10)
        await late.has_all(more)
        self.assertEqual(set(late.payloads()), more)

        await zk.set_or_create(paths.offset_path("reset", "t", "0-0"), b"999999")
        rewound = self.consumer(zk.hosts, "reset")
        early = Collector()
        early.read(rewound, await rewound.create_message_streams({"t": 1}))
        await early.has_all(sent | more)

    async def test_back_pressure_bounds_the_queue(self) -> None:
        """A stream nobody reads holds at most its bound (plus one fetch), its broker is not asked for more,
        and reading it later gets every message in order."""
        zk, cluster, _ = await self.cluster(partitions=1, per_partition=0)
        batch = payloads("t", 0, 0, 300)
        await cluster[0].produce("t", 0, batch)
        consumer = self.consumer(zk.hosts, queued_max_messages=10, fetch_max_bytes=200)
        [stream] = (await consumer.create_message_streams({"t": 1}))["t"]
        [fetcher] = consumer.rebalancer.consumption.fetchers
        await wait_until(lambda: stream.full and fetcher._wakeup is not None)
        requests = fetcher.requests
        self.assertLessEqual(stream.queued, 10 + 200 // 9)
        self.assertLess(requests, 5)
        received = [(await stream.__anext__()) for _ in range(300)]
        self.assertEqual([m.payload for m in received], batch)
        offsets = [m.offset for m in received]
        self.assertEqual(offsets, sorted(set(offsets)))
        self.assertGreater(fetcher.requests, 300 * 9 // 200)

    async def test_blocking_facade(self) -> None:
        """BlockingGroupConsumer: plain iterators over the group's streams, commit and close from a thread."""
        zk, cluster, sent = await self.cluster(partitions=2)

        def script() -> list[bytes]:
            consumer = BlockingGroupConsumer(zk.hosts, "plain", reactor=reactor, **FAST)
            with consumer:
                [stream] = consumer.create_message_streams({"t": 1})["t"]
                got = [next(stream).payload for _ in range(len(sent))]
                self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1"])
                consumer.commit()
            return got

        got = await deferToThread(script)
        self.assertEqual(set(got), sent)
        committed = await self.offsets(zk, "plain", ["0-0", "0-1"])
        self.assertEqual(committed, {n: (await cluster[0].offsets("t", int(n[2:]))) for n in committed})

    async def test_settles_with_more_consumers_than_partitions(self) -> None:
        """With more streams than partitions, every partition is owned once and the extra consumers idle."""
        zk, cluster, _ = await self.cluster(partitions=2)
        consumers = [self.consumer(zk.hosts, consumer_id=f"c{i}") for i in range(3)]
        for consumer in consumers:
            await consumer.create_message_streams({"t": 1})
        await wait_settled(consumers, {("t", "0-0"), ("t", "0-1")})
        self.assertEqual([sorted(c.owned().get("t", {})) for c in consumers], [["0-0"], ["0-1"], []])

    async def test_bursts_of_events_coalesce(self) -> None:
        """Changes arriving while a rebalance runs make one more rebalance, not one each."""
        zk, cluster, _ = await self.cluster()
        consumer = self.consumer(zk.hosts)
        await consumer.create_message_streams({"t": 1})
        before = consumer.rebalances
        for _ in range(5):
            consumer.rebalancer.request()  # what each watch does
        await consumer.when_stable()
        self.assertEqual(consumer.rebalances, before + 2)

    async def test_out_of_touch_session_stops_delivery(self) -> None:
        """A session out of touch for its timeout stops delivering (others may own its partitions by then);
        reconnected to the same session, it rebalances and delivers again."""
        zk, cluster, sent = await self.cluster(partitions=2)
        consumer = self.consumer(zk.hosts, session_timeout_s=0.2)
        [stream] = (await consumer.create_message_streams({"t": 1}))["t"]
        consumer._session_changed("suspended")  # as the adapter reports a lost connection
        await wait_until(lambda: consumer.state is GroupState.SESSION_LOST)
        self.assertEqual(consumer.owned(), {})
        waiting = stream.__anext__()
        consumer._session_changed("connected")  # the same session, still alive
        await consumer.when_stable()
        self.assertIn((await waiting).payload, sent)
        self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1"])
