"""describe_groups and reset_offsets on a FakeZooKeeper (no broker is asked: none is live)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper
from twlog.consumer.admin import GroupMember, PartitionStatus, describe_groups, reset_offsets
from twlog.coord import paths
from twlog.partition import TopicPartition


class AdminTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()

    def test_describe(self) -> None:
        """Members, and per partition (owned, committed, or registered by a live broker) owner and offset."""
        self.successResultOf(self.zk.create(paths.consumer_ids_path("g", "c"), b'{"t":1}', makepath=True))
        self.successResultOf(self.zk.create(paths.owner_path("g", "t", "0-1"), b"c-0", makepath=True))
        self.successResultOf(self.zk.set_or_create(paths.offset_path("g", "t", "0-0"), b"12"))
        self.successResultOf(self.zk.create(paths.offset_path("g", "t", "junk"), b"1"))
        self.successResultOf(self.zk.create(paths.broker_topic_path("t", 3), b"2", makepath=True))  # broker 3 is dead
        [group] = self.successResultOf(describe_groups(self.zk))
        self.assertEqual(group.members, [GroupMember("c", {"t": 1})])
        self.assertEqual(group.partitions, [PartitionStatus("t", "0-0", None, 12, None),
                                            PartitionStatus("t", "0-1", "c-0", None, None)])
        self.assertEqual(group.partitions[1].topic_partition, TopicPartition("t", "0-1"))
        self.assertIsNone(group.lag)

    def test_no_groups(self) -> None:
        self.assertEqual(self.successResultOf(describe_groups(self.zk)), [])

    def test_reset_offsets(self) -> None:
        """Offsets are set; bad names, negative offsets and owned partitions are refused."""
        self.successResultOf(reset_offsets(self.zk, "g", "t", {"0-0": 5}))
        self.assertEqual(self.successResultOf(self.zk.get(paths.offset_path("g", "t", "0-0")))[0], b"5")
        self.failureResultOf(reset_offsets(self.zk, "g", "t", {"x": 5}), ValueError)
        self.failureResultOf(reset_offsets(self.zk, "g", "t", {"0-0": -1}), ValueError)
        self.successResultOf(self.zk.create(paths.owner_path("g", "t", "0-0"), b"c-0", makepath=True))
        self.failureResultOf(reset_offsets(self.zk, "g", "t", {"0-0": 1}), ValueError)
