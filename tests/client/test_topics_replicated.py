"""create_replicated on the fake ZooKeeper and task.Clock: spread over the live brokers, written for the
controller, its first states waited for (boundedly), and every refusal typed."""

from __future__ import annotations

import random

from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.coord.test_replication_controller import Cluster
from twlog.client.topics import create_replicated
from twlog.coord.replication.assign import InvalidReplicationFactor
from twlog.coord.replication.controller import Controller
from twlog.coord.replication.store import InvalidTopicConfig, ReplicatedTopicExists, read_topic
from twlog.errors import ConnectionFailed, InvalidRequest, InvalidTopic


class CreateReplicatedTests(TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(self)
        self.admin = self.cluster.up(99)  # (a session of its own; registered as a broker only to be one)
        self.cluster.server.delete("/brokers/ids/99")

    def create(self, topic="orders", partitions=6, factor=3, **options) -> Deferred:
        return Deferred.fromCoroutine(create_replicated(self.admin, topic, partitions, factor,
                                                        clock=self.cluster.clock, rng=random.Random(1), **options))

    def test_spread_and_started(self) -> None:
        """6 partitions, factor 3 over 3 brokers: each leads 2 and holds 6; the controller's first states come."""
        for broker in (1, 2, 3):
            self.cluster.up(broker)
        controller = Controller(self.cluster.sessions[1], 1, clock=self.cluster.clock)
        controller.start()
        self.addCleanup(controller.stop)
        created = self.successResultOf(self.create(min_insync_replicas=2))
        self.assertTrue(created.started)
        self.assertEqual(created.live, (1, 2, 3))
        replicas = created.assignment.partitions
        self.assertEqual(sorted(replicas), list(range(6)))
        self.assertEqual({b: sum(r[0] == b for r in replicas.values()) for b in (1, 2, 3)}, {1: 2, 2: 2, 3: 2})
        self.assertEqual({b: sum(b in r for r in replicas.values()) for b in (1, 2, 3)}, {1: 6, 2: 6, 3: 6})
        stored = self.successResultOf(Deferred.fromCoroutine(read_topic(self.admin, "orders")))
        self.assertEqual((stored, stored.config), (created.assignment, {"min.insync.replicas": "2"}))
        self.assertEqual(self.cluster.summary("orders")[0][0], replicas[0][0], "led by its preferred replica")

    def test_no_controller_waits_boundedly(self) -> None:
        for broker in (1, 2):
            self.cluster.up(broker)
        d = self.create(partitions=2, factor=2, wait_s=1.0)
        self.assertNoResult(d)
        self.cluster.clock.pump([0.1] * 11)
        created = self.successResultOf(d)
        self.assertFalse(created.started)
        self.assertEqual(created.assignment.config, {}, "no min.insync.replicas: the brokers' default applies")

    def test_refusals(self) -> None:
        self.failureResultOf(self.create(), ConnectionFailed)  # no broker registered
        self.cluster.up(1)
        self.cluster.up(2)
        failure = self.failureResultOf(self.create(factor=3), InvalidReplicationFactor)
        self.assertIn("1, 2", str(failure.value))
        self.failureResultOf(self.create(partitions=0, factor=1), InvalidRequest)
        self.failureResultOf(self.create(partitions=1025, factor=1), InvalidRequest)
        self.failureResultOf(self.create(topic="a b", factor=1), InvalidTopic)
        self.failureResultOf(self.create(factor=1, min_insync_replicas=0), InvalidTopicConfig)
        self.cluster.clock.advance(10)
        self.successResultOf(self.create(partitions=1, factor=1, wait_s=0))
        self.failureResultOf(self.create(partitions=1, factor=1, wait_s=0), ReplicatedTopicExists)
