"""Replicated topics' nodes over IZooKeeper, on the fake ZooKeeper."""

from __future__ import annotations

from twisted.trial.unittest import TestCase

from tests.fakezk import FakeZooKeeper
from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.replication.values import BadReplicationValue, PartitionState, TopicAssignment
from twlog.coord.zk import NoNodeError
from twlog.errors import InvalidTopic


class StoreTests(TestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()

    async def test_create_and_read_topic(self) -> None:
        created = await store.create_replicated_topic(self.zk, "clicks", {0: (1, 2), 1: (2, 1)},
                                                      {"min.insync.replicas": "2"})
        value, stat = await self.zk.get("/twlog/topics/clicks")
        self.assertEqual(value, b'{"version":1,"partitions":{"0":[1,2],"1":[2,1]},'
                                b'"config":{"min.insync.replicas":"2"}}')
        self.assertEqual(stat.ephemeralOwner, 0, "persistent")
        self.assertEqual(await store.read_topic(self.zk, "clicks"), created)
        self.assertEqual(await store.list_topics(self.zk), ["clicks"])

    async def test_refuses_an_existing_topic_of_either_kind(self) -> None:
        await store.create_replicated_topic(self.zk, "clicks", {0: (1,)})
        with self.assertRaises(store.ReplicatedTopicExists) as caught:
            await store.create_replicated_topic(self.zk, "clicks", {0: (2,)})
        self.assertEqual(str(caught.exception), "topic 'clicks' exists already (/twlog/topics/clicks)")
        await self.zk.create(paths.broker_topic_path("views", 1), b"4", makepath=True)
        with self.assertRaises(store.ReplicatedTopicExists) as caught:
            await store.create_replicated_topic(self.zk, "views", {0: (1,)})
        self.assertIn("exists already as a Kafka 0.7 topic (/brokers/topics/views)", str(caught.exception))
        self.assertNotIn("/twlog/topics/views", self.zk.server.nodes)

    async def test_refuses_bad_names_and_values(self) -> None:
        with self.assertRaises(InvalidTopic):
            await store.create_replicated_topic(self.zk, "a/b", {0: (1,)})
        with self.assertRaises(BadReplicationValue):
            await store.create_replicated_topic(self.zk, "t", {1: (1,)})
        await self.zk.create("/twlog/topics/bad", b"{}", makepath=True)
        with self.assertRaises(BadReplicationValue) as caught:
            await store.read_topic(self.zk, "bad")
        self.assertTrue(str(caught.exception).startswith("/twlog/topics/bad: "))
        with self.assertRaises(NoNodeError):
            await store.read_topic(self.zk, "none")

    async def test_min_insync_replicas_checked(self) -> None:
        for bad in ("0", "two", "-1", ""):
            with self.assertRaises(store.InvalidTopicConfig) as caught:
                await store.create_replicated_topic(self.zk, "t", {0: (1, 2)}, {"min.insync.replicas": bad})
            self.assertEqual(str(caught.exception),
                             f"min.insync.replicas must be an integer of at least 1, not {bad!r}")
        self.assertNotIn("/twlog/topics/t", self.zk.server.nodes)
        await store.create_replicated_topic(self.zk, "t", {0: (1, 2)}, {"min.insync.replicas": "3"})

    async def test_state_compare_and_set(self) -> None:
        await store.create_replicated_topic(self.zk, "clicks", {0: (1, 2)})
        first = PartitionState(1, 0, 1, (1, 2))
        self.assertEqual(await store.create_state(self.zk, "clicks", 0, first), 0)
        with self.assertRaises(store.StateChanged):
            await store.create_state(self.zk, "clicks", 0, first)
        self.assertEqual(await store.read_state(self.zk, "clicks", 0), (first, 0))
        second = PartitionState(2, 1, 1, (2,))
        self.assertEqual(await store.write_state_cas(self.zk, "clicks", 0, second, 0), 1)
        self.assertEqual(await store.read_state(self.zk, "clicks", 0), (second, 1))
        with self.assertRaises(store.StateChanged) as caught:
            await store.write_state_cas(self.zk, "clicks", 0, first, 0)
        self.assertEqual(str(caught.exception), "/twlog/topics/clicks/partitions/0/state is no longer at version 0: "
                                                "someone else wrote it")
        self.assertEqual(await store.read_state(self.zk, "clicks", 0), (second, 1), "unchanged")
        with self.assertRaises(store.StateChanged):
            await store.write_state_cas(self.zk, "clicks", 1, first, 0)  # no such node
        with self.assertRaises(ValueError):
            await store.write_state_cas(self.zk, "clicks", 0, first, -1)

    async def test_first_state_never_recreates_a_deleted_topic(self) -> None:
        with self.assertRaises(store.StateChanged):
            await store.create_state(self.zk, "gone", 0, PartitionState(1, 0, 1, (1,)))
        self.assertNotIn("/twlog/topics/gone", self.zk.server.nodes)

    async def test_read_state_refuses_bad_value(self) -> None:
        await self.zk.create(paths.partition_state_path("t", 0), b'{"version":1}', makepath=True)
        with self.assertRaises(BadReplicationValue) as caught:
            await store.read_state(self.zk, "t", 0)
        self.assertIn("/twlog/topics/t/partitions/0/state: missing", str(caught.exception))


class AssignmentRoundTripTests(TestCase):
    async def test_what_create_writes_decodes(self) -> None:
        zk = FakeZooKeeper()
        zk.start()
        await store.create_replicated_topic(zk, "t", {0: (3, 1, 2)})
        data, _ = await zk.get("/twlog/topics/t")
        self.assertEqual(TopicAssignment.decode("t", data, "/twlog/topics/t").replicas(0), (3, 1, 2))
