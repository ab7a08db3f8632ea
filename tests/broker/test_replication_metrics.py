"""Tests for the replication families of twlog.broker.metrics (Kafka's metrics under twlog's names), scraped from
a broker's registry: a real leader (L{ReplicaManager}) on the fake ZooKeeper and task.Clock, and real controllers
on a fake ZooKeeper cluster."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.broker.test_metrics import MetricsTestCase, samples, value
from tests.coord.test_replication_controller import Cluster
from tests.replica.test_follower import FollowerTestMixin, Link
from twlog.broker.metrics import BrokerMetrics
from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.replication.values import PartitionState
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED
from twlog.protocol.factory import BrokerFactory

#: The gauges and counters with no labels, by the name of their sample.
SCALARS = ("twlog_under_replicated_partitions", "twlog_under_min_isr_partitions", "twlog_active_controller",
           "twlog_offline_partitions", "twlog_isr_shrinks_total", "twlog_isr_expands_total",
           "twlog_leader_partitions", "twlog_replica_partitions", "twlog_waiting_produces")


def scalars(registry) -> dict[str, float]:
    return {name: value(registry, name) for name in SCALARS}


def lags(registry, name: str) -> dict[int, float]:
    """A lag family's samples for t-0, by follower."""
    found = {}
    for labels, sample in samples(registry, name).items():
        labels = dict(labels)
        if (labels["topic"], labels["partition"]) == ("t", "0"):
            found[int(labels["replica"])] = sample
    return found


class NoReplicationTests(MetricsTestCase):
    def test_zeros_without_a_replica_manager(self) -> None:
        """A broker without ZooKeeper (or not yet joined) reports every family: zeros, and no lag samples."""
        self.start()
        self.assertEqual(scalars(self.registry), dict.fromkeys(SCALARS, 0))
        self.assertEqual(samples(self.registry, "twlog_replica_lag_bytes"), {})
        self.assertEqual(samples(self.registry, "twlog_replica_lag_seconds"), {})


class LeaderMetricsTests(FollowerTestMixin, SynchronousTestCase):
    """Broker 1 leads t-0, replicas (1, 2, 3); its metrics read its replica manager when scraped."""

    def start_leader(self, *args, **kwargs):
        leader = super().start_leader(*args, **kwargs)
        self.registry = BrokerMetrics(self.broker, BrokerFactory(self.broker), self.logs,
                                      replicas=lambda: self.manager).registry
        return leader

    def test_leading(self) -> None:
        """A leader with its whole ISR: one partition led, none under-replicated; each follower's lag in bytes is
        the leader's end less the end of its latest fetch, and its lag in seconds the time since it was caught up."""
        self.start_leader()
        self.produce(b"a" * 100, ack=ACK_APPENDED)
        first = self.leader_log().end_offset
        self.produce(b"b" * 100, ack=ACK_APPENDED)
        end = self.leader_log().end_offset
        self.assertEqual(scalars(self.registry), {**dict.fromkeys(SCALARS, 0), "twlog_leader_partitions": 1,
                                                  "twlog_replica_partitions": 1})
        self.assertEqual(lags(self.registry, "twlog_replica_lag_bytes"), {2: end, 3: end})
        self.clock.advance(2)
        self.replica_fetch(2, end)
        self.clock.advance(0.25)
        self.replica_fetch(3, first)
        self.assertEqual(lags(self.registry, "twlog_replica_lag_bytes"), {2: 0, 3: end - first})
        self.assertEqual(lags(self.registry, "twlog_replica_lag_seconds"), {2: 0.25, 3: 2.25})

    def test_shrink_then_expand(self) -> None:
        """A lagging follower written out of the ISR counts one shrink and makes the partition under-replicated
        (and, with min.insync.replicas 3, under min ISR); once caught up it is written back: one expand."""
        self.start_leader(lag_time_ms=1000, min_isr=3)
        self.produce(b"a", ack=ACK_APPENDED)
        end = self.leader_log().end_offset
        self.clock.advance(0.5)
        self.replica_fetch(2, end)
        self.clock.advance(0.75)  # 3 was last caught up at the start, 1.25 s ago: out
        self.assertEqual(self.zk_state().isr, (1, 2))
        found = scalars(self.registry)
        self.assertEqual((found["twlog_isr_shrinks_total"], found["twlog_isr_expands_total"]), (1, 0))
        self.assertEqual((found["twlog_under_replicated_partitions"], found["twlog_under_min_isr_partitions"]), (1, 1))
        self.assertEqual(lags(self.registry, "twlog_replica_lag_seconds"), {2: 0.75, 3: 1.25})
        self.replica_fetch(3, end)
        self.assertEqual(self.zk_state().isr, (1, 2, 3))
        found = scalars(self.registry)
        self.assertEqual((found["twlog_isr_shrinks_total"], found["twlog_isr_expands_total"]), (1, 1))
        self.assertEqual((found["twlog_under_replicated_partitions"], found["twlog_under_min_isr_partitions"]), (0, 0))
        self.assertEqual(lags(self.registry, "twlog_replica_lag_bytes"), {2: 0, 3: 0})

    def test_failed_compare_and_set_counts_nothing(self) -> None:
        """An ISR change the leader could not write (someone else wrote the state) is neither shrink nor expand."""
        self.start_leader(lag_time_ms=1000)
        _, version = self.successResultOf(store.read_state(self.zk, "t", 0))
        self.successResultOf(store.write_state_cas(self.zk, "t", 0, PartitionState(1, 4, 2, (1, 2, 3)), version))
        self.zk.hold()
        self.clock.advance(1.25)  # both followers lag: the leader asks for (1,)
        self.zk.flush_one()  # the compare-and-set fails
        self.assertTrue(self.leader.state.fenced)
        self.zk.flush()  # the state read again: still the leader, unfenced
        self.assertEqual(value(self.registry, "twlog_isr_shrinks_total"), 0)
        self.clock.advance(0.5)  # the next check writes it
        self.assertEqual((self.zk_state().isr, value(self.registry, "twlog_isr_shrinks_total")), ((1,), 1))

    def test_following(self) -> None:
        """Following the partition instead: it counts among the partitions held, not the led, and has no lag here
        (the lag is reported by each partition's leader)."""
        self.start_leader()
        self.manager._connect = lambda broker: Link(self.broker)
        self.manager.become_follower("t", 0, leader_id=2, leader_epoch=5)
        self.assertEqual((value(self.registry, "twlog_leader_partitions"),
                          value(self.registry, "twlog_replica_partitions")), (0, 1))
        self.assertEqual(samples(self.registry, "twlog_replica_lag_bytes"), {})

    def test_waiting_ack_all(self) -> None:
        """An ack=all set waits until the ISR holds it: one waiting produce, then none."""
        self.start_leader()
        d = self.produce(b"x")
        self.assertEqual(value(self.registry, "twlog_waiting_produces"), 1)
        end = self.leader_log().end_offset
        self.replica_fetch(2, end)
        self.replica_fetch(3, end)
        self.assertEqual(codec.decode_ack_produce_response(self.successResultOf(d)).results[0].error, 0)
        self.assertEqual(value(self.registry, "twlog_waiting_produces"), 0)


class ControllerMetricsTests(MetricsTestCase):
    """Brokers 1-3 registered; controllers 8 (elected first) and 9 (standing by), each with a broker's metrics."""

    def setUp(self) -> None:
        self.cluster = Cluster(self)
        for broker in (1, 2, 3):
            self.cluster.up(broker)
        self.active = self.cluster.controller(8)
        self.standby = self.cluster.controller(9)
        self.registries = {}
        for broker, controller in ((8, self.active), (9, self.standby)):
            metrics = self.start()
            metrics.controller = lambda controller=controller: controller
            self.registries[broker] = metrics.registry

    def counts(self) -> dict[int, tuple[float, float]]:
        """(twlog_active_controller, twlog_offline_partitions) of each candidate."""
        return {b: (value(r, "twlog_active_controller"), value(r, "twlog_offline_partitions"))
                for b, r in self.registries.items()}

    def test_offline_partitions_on_the_active_controller(self) -> None:
        """Only the active controller reports offline partitions: those with no live leader after its round."""
        self.cluster.create_topic()
        self.assertEqual(self.counts(), {8: (1, 0), 9: (0, 0)})
        for broker in (1, 2):
            self.cluster.down(broker)
        self.assertEqual(self.counts(), {8: (1, 0), 9: (0, 0)}, "3 leads all of them")
        self.cluster.down(3)
        self.assertEqual(self.counts(), {8: (1, 3), 9: (0, 0)})
        self.assertIn(("clicks", 0), self.active.offline)
        self.cluster.up(3)
        self.assertEqual(self.counts(), {8: (1, 0), 9: (0, 0)})

    def test_the_next_controller_takes_over_the_count(self) -> None:
        """When the active controller's session goes, the standby is elected, reads the states and reports them."""
        self.cluster.create_topic()
        for broker in (1, 2, 3):
            self.cluster.down(broker)
        self.cluster.down(8)
        self.assertEqual(self.counts(), {8: (0, 0), 9: (1, 3)})

    def test_a_deleted_topic_is_forgotten(self) -> None:
        """The partitions of a topic deleted while offline leave the count at the controller's next round."""
        self.cluster.create_topic()
        self.cluster.create_topic("solo", {0: (3,)})
        for broker in (1, 2, 3):
            self.cluster.down(broker)
        self.assertEqual(self.counts()[8], (1, 4))
        server = self.cluster.server
        for path in sorted((p for p in server.nodes if p.startswith(paths.replicated_topic_path("clicks"))),
                           key=len, reverse=True):
            server.delete(path)
        self.assertEqual(self.counts(), {8: (1, 1), 9: (0, 0)})
        self.assertEqual([key in self.active.offline for key in (("solo", 0), ("clicks", 0))], [True, False])
