"""The schema registry's journal in a cluster of three brokers (in this process, the suite's real ZooKeeper): it
creates twlog-schemas replicated (3 replicas, min.insync.replicas 2, one partition), appends with ack="all", and
goes on appending and reading after its partition's leader is stopped (SIGTERM's path).  With two brokers, the
topic is created as before (a 0.7 topic, ack="flushed")."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_replication_zk import until
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.coord import paths
from twlog.coord.replication.values import TopicAssignment
from twlog.schema_registry.journal import TOPIC, Journal


class RegistryTopicTests(TestCase):
    timeout = 120

    async def cluster(self, count: int) -> None:
        self.hosts, self.brokers = fresh_connect_string(), {}
        for b in range(1, count + 1):
            self.brokers[b] = await start_broker(self, self.mktemp(), broker_id=b, zookeeper=self.hosts,
                                                 flush_interval_ms=5, replica_lag_time_ms=1000)
        self.journal = Journal(zookeeper=self.hosts)
        self.addCleanup(self.journal.close)

    def leader(self) -> int | None:
        return next((b for b, s in self.brokers.items()
                     if s.replicas is not None and (TOPIC, 0) in s.replicas.manager.leaders), None)

    async def test_replicated_with_three_brokers(self) -> None:
        await self.cluster(3)
        self.assertEqual(await self.journal.read_new(), [])
        first = await self.journal.append({"n": 1})
        zk = await connect(self, self.hosts)
        value, _ = await zk.get(paths.replicated_topic_path(TOPIC))
        assignment = TopicAssignment.decode(TOPIC, value, paths.replicated_topic_path(TOPIC))
        self.assertEqual((len(assignment.partitions), assignment.replication_factor, assignment.config),
                         (1, 3, {"min.insync.replicas": "2"}))
        self.assertEqual(self.journal._producer.ack, "all")
        self.assertEqual(await self.journal.read_new(), [(first, {"n": 1})])
        self.assertEqual(self.journal._location.name, "0")

        old = self.leader()
        await self.brokers.pop(old).stopService()  # its leadership moves first
        await until(lambda: self.leader() is not None, "partition 0 has a new leader")
        # What the registry does when its connection to the leader drops (on_lost): disconnect, probe, read on.
        await self.journal.disconnect()
        await self.journal.probe()  # (the partition is found again: not the stopped broker's address)
        self.assertEqual(await self.journal.read_new(), [])
        self.assertEqual(self.journal._location.leader, self.leader())
        second = await self.journal.append({"n": 2})
        third = await self.journal.append({"n": 3})
        self.assertEqual(await self.journal.read_new(), [(second, {"n": 2}), (third, {"n": 3})])
        # A new journal (a restarted registry) replays both records from the new leader.
        again = Journal(zookeeper=self.hosts)
        self.addCleanup(again.close)
        self.assertEqual(await again.read_new(), [(first, {"n": 1}), (second, {"n": 2}), (third, {"n": 3})])

    async def test_not_replicated_with_two_brokers(self) -> None:
        await self.cluster(2)
        self.assertEqual(await self.journal.read_new(), [])
        offset = await self.journal.append({"n": 1})
        self.assertEqual(self.journal._producer.ack, "flushed")
        read: list = []
        for _ in range(100):  # (bounded: the brokers register the new topic in ZooKeeper a moment later)
            read += await self.journal.read_new()
            if read:
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(read, [(offset, {"n": 1})])
        self.assertEqual(self.journal._location.tp.fixed_leader, self.journal._location.leader)  # a 0.7 partition
        zk = await connect(self, self.hosts)
        self.assertIsNone(await zk.exists(paths.replicated_topic_path(TOPIC)))
