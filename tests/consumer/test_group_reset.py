"""The reset planner shared by `twlog groups reset` and the console, and describe on a replicated topic, on a
FakeZooKeeper with fake brokers."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from tests.fakelog import FakeBrokers, FakeLog
from tests.fakezk import FakeZooKeeper
from twlog.consumer.admin import GroupNotFound, describe_groups
from twlog.consumer.group_reset import (
    BadResetParameter,
    ResetRefused,
    UnknownTopic,
    apply_reset,
    parse_target,
    plan_reset,
)
from twlog.coord import paths
from twlog.partition import TopicPartition

B0, B1 = ("127.0.0.1", 9092), ("127.0.0.1", 9093)


class PlanTests(SynchronousTestCase):
    """Broker 0 holds clicks:0-0 and 0-1, broker 1 (down: not registered) 1-0; group g committed 0-0 and 1-0."""

    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()
        self.brokers = FakeBrokers()
        self.logs = [self.brokers.add(B0, "clicks", n, FakeLog([b"m" * 20] * 10)) for n in (0, 1)]
        self.ok(self.zk.create(paths.broker_id_path(0), b"h:127.0.0.1:9092", ephemeral=True, makepath=True))
        self.ok(self.zk.create(paths.broker_topic_path("clicks", 0), b"2", ephemeral=True, makepath=True))
        for name, offset in (("0-0", self.logs[0].starts[5]), ("1-0", 7)):
            self.ok(self.zk.set_or_create(paths.offset_path("g", "clicks", name), str(offset).encode()))

    def ok(self, d):
        return self.successResultOf(d)

    def plan(self, topic, partition, target, **kwargs):
        return plan_reset(self.zk, "g", topic, partition, target, connect=self.brokers.connect, **kwargs)

    def test_shift_leaves_out_what_it_cannot_shift(self) -> None:
        """With allow_partial: the down broker's partition and the one never committed are left out, saying so."""
        plan = self.ok(self.plan("clicks", None, ("shift", -2), allow_partial=True))
        self.assertEqual([(str(r.tp), r.offset, r.new_offset, r.clamped) for r in plan.rows],
                         [("clicks:0-0", self.logs[0].starts[5], self.logs[0].starts[3], False)])
        self.assertEqual(plan.left_out, ["broker 1, which holds clicks:1-0, is not registered: down?",
                                         "clicks:0-1: no committed offset to shift from"])
        self.ok(apply_reset(self.zk, plan))
        self.assertEqual(self.ok(self.zk.get(paths.offset_path("g", "clicks", "0-0")))[0],
                         str(self.logs[0].starts[3]).encode())

    def test_refusals(self) -> None:
        self.failureResultOf(self.plan("clicks", None, "earliest"), ResetRefused)  # (broker 1 down)
        self.failureResultOf(self.plan("views", None, "earliest"), UnknownTopic)
        self.assertEqual(self.failureResultOf(self.plan("clicks", None, 40), BadResetParameter).value.parameter,
                         "partition")
        self.assertEqual(self.failureResultOf(self.plan(None, "0-0", "latest"), BadResetParameter).value.parameter,
                         "topic")
        self.failureResultOf(plan_reset(self.zk, "h", "clicks", None, "latest"), GroupNotFound)
        self.ok(self.zk.create(paths.consumer_ids_path("g", "c"), b"{}", ephemeral=True, makepath=True))
        self.failureResultOf(self.plan("clicks", "0-0", "latest"), ValueError)

    def test_every_topic_of_the_group(self) -> None:
        self.ok(self.zk.delete(paths.offset_path("g", "clicks", "1-0")))
        plan = self.ok(self.plan(None, None, "latest"))
        self.assertEqual(plan.by_topic(), {"clicks": {"0-0": self.logs[0].end, "0-1": self.logs[1].end}})

    def test_parse_target(self) -> None:
        self.assertEqual(parse_target("earliest"), "earliest")
        self.assertEqual(parse_target({"offset": 5}), 5)
        self.assertEqual(parse_target({"shift": -3}), ("shift", -3))
        self.assertEqual(parse_target({"time": 1300000000000}), ("time", 1300000000000))
        self.assertEqual(parse_target({"time": "2011-03-13T07:06:40"}), ("time", 1300000000000))
        for bad in ("start", {"offset": -1}, {"offset": True}, {"time": "yesterday"}, {"shift": 1.5}, None,
                    {"offset": 1, "shift": 1}):
            self.assertEqual(self.assertRaises(BadResetParameter, parse_target, bad).parameter, "to")


class ReplicatedDescribeTests(SynchronousTestCase):
    def test_lag_from_the_leader(self) -> None:
        """A replicated topic's partition is asked of its leader (as its state names it), so its lag is known."""
        zk = FakeZooKeeper()
        zk.start()
        brokers = FakeBrokers()
        log = brokers.add(B1, "orders", 0, FakeLog([b"o" * 30] * 4))
        self.successResultOf(zk.create(paths.broker_id_path(1), b"h:127.0.0.1:9093", ephemeral=True, makepath=True))
        self.successResultOf(zk.create(paths.replicated_topic_path("orders"), json.dumps(
            {"version": 1, "partitions": {"0": [1]}, "config": {}}).encode(), makepath=True))
        self.successResultOf(zk.create(paths.partition_state_path('orders', 0), json.dumps(
            {"version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 1, "isr": [1]}).encode(),
            makepath=True))
        self.successResultOf(zk.set_or_create(paths.offset_path("g", "orders", "0"), str(log.starts[1]).encode()))
        [group] = self.successResultOf(describe_groups(zk, "g", connect=brokers.connect))
        [partition] = group.partitions
        self.assertEqual((partition.topic_partition, partition.latest, partition.lag, partition.problem),
                         (TopicPartition("orders", "0"), log.end, log.end - log.starts[1], None))
