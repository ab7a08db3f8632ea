"""The mirror and the audit's reader with replicated topics: two clusters of three brokers in this process (two
chroots of the suite's real ZooKeeper), a replicated topic in each; the mirror (in this process) copies the source's
topic into the target's while a leader of each is stopped (SIGTERM's path); the audit's reader (blocking, in a
thread) reads the target's copy, every message, after the leader change."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.defer import DeferredList
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_replication_control import run
from tests.integration.test_replication_zk import until
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.audit.read import read_topic
from twlog.cli.inspect import create_topic
from twlog.coord import paths
from twlog.mirror.mirror import Mirror, MirrorSettings
from twlog.producer import Producer

TOPIC = "clicks"


class Cluster:
    """Three brokers on one chroot, and a replicated TOPIC of two partitions on all three."""

    def __init__(self, testcase: TestCase, first_id: int) -> None:
        self.testcase, self.ids = testcase, range(first_id, first_id + 3)
        self.hosts, self.brokers = fresh_connect_string(), {}

    async def start(self) -> Cluster:
        for b in self.ids:
            self.brokers[b] = await start_broker(self.testcase, self.testcase.mktemp(), broker_id=b,
                                                 zookeeper=self.hosts, flush_interval_ms=5, replica_lag_time_ms=1000)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "2", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        await until(lambda: all(self.leader(p) is not None for p in (0, 1)), "both partitions have leaders")
        return self

    def leader(self, partition: int) -> int | None:
        return next((b for b, s in self.brokers.items()
                     if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.leaders), None)

    async def stop_leader(self, partition: int) -> None:
        old = self.leader(partition)
        await self.brokers.pop(old).stopService()  # its leaderships move first
        await until(lambda: all(self.leader(p) not in (None, old) for p in (0, 1)), "both lead elsewhere")


class MirrorReplicatedTests(TestCase):
    timeout = 120

    async def test_mirror_and_audit_across_leader_changes(self) -> None:
        source = await Cluster(self, 1).start()
        target = await Cluster(self, 11).start()
        producer = Producer(zookeeper=source.hosts, ack="all", ack_timeout_ms=10_000, leader_wait_s=20)
        self.addCleanup(producer.close)

        async def produce(prefix: str, count: int) -> set[bytes]:
            values = [b"%s-%03d" % (prefix.encode(), n) for n in range(count)]
            results = await DeferredList([producer.send(TOPIC, v, partition_index=n % 2) for n, v in enumerate(values)],
                                         consumeErrors=True)
            self.assertEqual([r.getErrorMessage() for ok, r in results if not ok], [])
            return set(values)

        async def copied() -> list[bytes]:
            payloads: list[bytes] = []
            await deferToThread(read_topic, target.hosts, TOPIC, payloads.append)
            return payloads

        async def wait_copied(expected: set[bytes]) -> None:
            got: list[bytes] = []
            for _ in range(200):  # (bounded: 200 reads, 0.1 s apart)
                got = await copied()
                if set(got) >= expected:
                    return
                await deferLater(reactor, 0.1, lambda: None)
            self.fail(f"the target holds {len(set(got) & expected)} of {len(expected)} messages")

        written = await produce("a", 100)
        mirror = Mirror(MirrorSettings(sources=(source.hosts,), target=target.hosts, group="m", status_s=0),
                        reactor=reactor, say=lambda line: None)
        await mirror.start()
        self.addCleanup(mirror.stop)
        await wait_copied(written)  # the replicated source topic was picked up (from /twlog/topics)
        self.assertEqual(mirror.producer.ack, "all")

        await source.stop_leader(0)
        await target.stop_leader(0)
        written |= await produce("b", 100)
        await wait_copied(written)
        await mirror.stop()
        self.assertIsNone(mirror.error)

        every = await copied()  # at least once: a resend may copy a message twice, never lose one
        self.assertEqual(set(every), written)
        zk = await connect(self, source.hosts)
        for p in ("0", "1"):  # the group's offsets of replicated partitions, by number
            value, _ = await zk.get(paths.offset_path("m", TOPIC, p))
            self.assertGreater(int(value), 0)
