"""Consumer groups end to end: real brokers registered in a real ZooKeeper, several GroupConsumers in one reactor."""

from __future__ import annotations

import json
from collections import Counter

from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.trial.unittest import TestCase

from tests.integration.broker import wait_until
from tests.integration.groups import (
    FAST,
    Collector,
    Command,
    ownership,
    partition_names,
    payloads,
    produce_all,
    registered,
    run_twlog,
    start_brokers,
    start_twlog,
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


class GroupsCommandTests(TestCase):
    """C{twlog groups}, C{groups reset}, C{groups delete} and C{consume -g}'s rebalance lines, as processes against
    real brokers in a real ZooKeeper."""

    timeout = 120

    def one_line(self, err: str) -> None:
        self.assertEqual(err.count("\n"), 1, err)
        self.assertNotIn("Traceback", err)

    async def committed(self, zk, group: str, name: str) -> int:
        return int((await zk.get(paths.offset_path(group, "clicks", name)))[0])

    def member(self, hosts: str, group: str) -> Command:
        """A `twlog consume -g` that runs until SIGINT (sent when the test ends, if it still runs)."""
        command = start_twlog("consume", "-z", hosts, "-g", group, "-t", "clicks", "--follow")

        def stop() -> Deferred:
            if not command.ended.called:
                command.process.signalProcess("INT")
            return command.ended

        self.addCleanup(stop)
        return command

    async def test_reset_checks_the_offset_and_the_group(self) -> None:
        """reset refuses an offset inside a message or past the end (one line: the boundaries, the range) and an
        unknown group (did you mean?) unless --create; --dry-run changes nothing; a boundary is accepted and read
        from; delete refuses a group with live members and deletes a stopped one; members say what they read."""
        zk = await connect(self)
        [broker] = await start_brokers(self, zk.hosts, 1, partitions=1)
        starts = [0]
        for payload in payloads("clicks", 0, 0, 3):
            await broker.produce("clicks", 0, [payload * (len(starts) * 3)])  # messages of different sizes
            starts.append(await broker.offsets("clicks", 0))
        end = starts.pop()
        await registered(zk, "clicks", [broker])
        status, out, err = await run_twlog("consume", "-z", zk.hosts, "-g", "clicks-etl", "-t", "clicks", "-n", "3")
        self.assertEqual((status, len(out.splitlines())), (0, 3), err)
        self.assertIn("now reading clicks:0-0 (1 partition)", err)
        self.assertEqual(await self.committed(zk, "clicks-etl", "0-0"), end)

        reset = ("groups", "reset", "-z", zk.hosts, "-t", "clicks")
        status, _, err = await run_twlog(*reset, "-g", "clickz", "--to", "earliest")
        self.assertEqual(status, 1, err)
        self.assertIn("no group 'clickz' in ZooKeeper at", err)
        self.assertIn("did you mean 'clicks-etl'? use --create to start a new group", err)
        self.one_line(err)
        status, _, err = await run_twlog(*reset, "-g", "clicks-etl", "-p", "0-0", "--to", str(starts[1] - 5))
        self.assertEqual(status, 1, err)
        self.assertIn(f"offset {starts[1] - 5} does not start a message of clicks:0-0: the nearest message "
                      f"boundaries are 0 and {starts[1]}", err)
        self.one_line(err)
        status, _, err = await run_twlog(*reset, "-g", "clicks-etl", "-p", "0-0", "--to", "99999999")
        self.assertEqual(status, 1, err)
        self.assertIn(f"offset 99999999 is past the end of clicks:0-0: its offsets run from 0 to {end}", err)
        self.one_line(err)
        self.assertEqual(await self.committed(zk, "clicks-etl", "0-0"), end)

        status, out, err = await run_twlog(*reset, "-g", "clicks-etl", "--to", "earliest", "--dry-run")
        self.assertEqual(status, 0, err)
        self.assertRegex(out, r"topic +partition +offset +new offset\n")
        self.assertRegex(out, rf"clicks +0-0 +{end} +0\n")
        self.assertIn("dry run: would reset 1 partition(s) of clicks for group clicks-etl; nothing changed", err)
        self.assertEqual(await self.committed(zk, "clicks-etl", "0-0"), end)

        status, out, err = await run_twlog(*reset, "-g", "clicks-etl", "-p", "0-0", "--to", str(starts[1]))
        self.assertEqual(status, 0, err)
        self.assertRegex(out, rf"clicks +0-0 +{end} +{starts[1]}\n")
        self.assertEqual(await self.committed(zk, "clicks-etl", "0-0"), starts[1])
        status, out, err = await run_twlog("consume", "-z", zk.hosts, "-g", "clicks-etl", "-t", "clicks", "-n", "2")
        self.assertEqual((status, out.splitlines()), (0, [p.decode() * (n * 3) for n, p in
                                                         enumerate(payloads("clicks", 0, 0, 3)[1:], 2)]), err)

        status, _, err = await run_twlog(*reset, "-g", "fresh", "--to", "latest", "--create")
        self.assertEqual(status, 0, err)
        self.assertEqual(await self.committed(zk, "fresh", "0-0"), end)
        status, _, err = await run_twlog("groups", "delete", "-z", zk.hosts, "-g", "fresh")
        self.assertEqual(status, 0, err)
        self.assertIn("deleted group fresh: its committed offsets of 1 partition(s) of clicks", err)
        self.assertIsNone(await zk.exists(paths.group_path("fresh")))
        status, _, err = await run_twlog("groups", "delete", "-z", zk.hosts, "-g", "fresh")
        self.assertEqual(status, 1, err)
        self.assertIn("no group 'fresh'", err)

        first = self.member(zk.hosts, "clicks-etl")
        await wait_until(lambda: b"now reading" in first.err, timeout_s=30)
        self.assertIn(b"twlog: now reading clicks:0-0 (1 partition)\n", first.err)
        status, _, err = await run_twlog("groups", "delete", "-z", zk.hosts, "-g", "clicks-etl")
        self.assertEqual(status, 1, err)
        self.assertRegex(err, r"group 'clicks-etl' has 1 live member \(.+\); stop them before deleting it")
        self.one_line(err)
        second = self.member(zk.hosts, "clicks-etl")  # one partition for two members: the first gives it up, or

        def last(command: Command) -> str:  # keeps it; either way each says what it reads now
            return [line for line in command.err.decode().splitlines() if "now reading" in line][-1]

        await wait_until(lambda: b"now reading" in second.err and (b"gave up" in first.err
                                                                   or b"no partitions" in second.err), timeout_s=30)
        if b"gave up" in first.err:
            self.assertEqual(last(first), "twlog: now reading no partitions, gave up clicks:0-0")
            await wait_until(lambda: last(second) == "twlog: now reading clicks:0-0 (1 partition)", timeout_s=30)
        else:
            self.assertEqual(last(second), "twlog: now reading no partitions")
        self.assertIsNotNone(await zk.exists(paths.group_path("clicks-etl")))

    async def test_down_broker_partitions_are_listed(self) -> None:
        """A broker gone from ZooKeeper: `groups` lists its partitions with their committed offsets and lag '?',
        names it, and says the total leaves them out (--json: lag null); reset refuses them unless
        --allow-partial, which says what it left out."""
        zk = await connect(self)
        cluster = await start_brokers(self, zk.hosts, 2, partitions=2)
        await produce_all(cluster, "clicks", 5)
        await registered(zk, "clicks", cluster)
        status, _, err = await run_twlog("consume", "-z", zk.hosts, "-g", "g", "-t", "clicks", "-n", "20")
        self.assertEqual(status, 0, err)
        self.assertIn("now reading clicks:{0-0..0-1, 1-0..1-1} (4 partitions)", err)
        ends = {f"{b.broker_id}-{n}": await b.offsets("clicks", n) for b in cluster for n in range(2)}
        await cluster[0].produce("clicks", 0, [b"x" * 91])  # 100 bytes of lag on 0-0
        await cluster[1].stop()  # leaves ZooKeeper, as a dead broker does once its session expires

        status, out, err = await run_twlog("groups", "-z", zk.hosts, "-g", "g")
        self.assertEqual(status, 0, err)
        self.assertIn("group g: 0 member(s), total lag 100 bytes (leaves out 2 partitions whose lag is unknown, "
                      "? below: clicks:1-0..1-1)\n", out)
        self.assertRegex(out, rf"clicks +0-0 +- +{ends['0-0']} +{ends['0-0'] + 100} +100\n")
        for name in ("1-0", "1-1"):
            self.assertRegex(out, rf"clicks +{name} +- +{ends[name]} +\? +\?\n")
        self.assertIn("? broker 1, which holds clicks:1-0..1-1, is not registered: down?\n", out)
        status, out, err = await run_twlog("groups", "-z", zk.hosts, "-g", "g", "--json")
        [group] = json.loads(out)
        self.assertEqual((group["lag_bytes"], group["lag_leaves_out"]), (100, ["clicks:1-0", "clicks:1-1"]))
        self.assertEqual({p["partition"]: (p["offset"], p["lag_bytes"]) for p in group["partitions"]},
                         {"0-0": (ends["0-0"], 100), "0-1": (ends["0-1"], 0), "1-0": (ends["1-0"], None),
                          "1-1": (ends["1-1"], None)})

        reset = ("groups", "reset", "-z", zk.hosts, "-g", "g", "-t", "clicks")
        status, _, err = await run_twlog(*reset, "--to", "earliest")
        self.assertEqual(status, 1, err)
        self.assertIn("broker 1, which holds clicks:1-0..1-1, is not registered: down?; --allow-partial resets the "
                      "other partitions of clicks and leaves those", err)
        self.one_line(err)
        status, _, err = await run_twlog(*reset, "-p", "1-0", "--to", "earliest")
        self.assertEqual(status, 1, err)
        self.assertIn("broker 1, which holds clicks:1-0, is not registered: down?; reset it once its broker is back",
                      err)
        status, out, err = await run_twlog(*reset, "--to", "earliest", "--allow-partial")
        self.assertEqual(status, 0, err)
        self.assertIn("left out broker 1, which holds clicks:1-0..1-1, is not registered: down?", err)
        self.assertEqual([await self.committed(zk, "g", n) for n in ("0-0", "0-1", "1-0", "1-1")],
                         [0, 0, ends["1-0"], ends["1-1"]])

        # A member reads the rest and says why it leaves broker 1's partitions out (no other member has them).
        status, out, err = await run_twlog("consume", "-z", zk.hosts, "-g", "g", "-t", "clicks", "-n", "1")
        self.assertEqual((status, len(out.splitlines())), (0, 1), err)
        self.assertIn("twlog: now reading clicks:0-0..0-1 (2 partitions); no member can read 2 partitions: broker 1, "
                      "which holds clicks:1-0..1-1, is not registered: down?\n", err)
