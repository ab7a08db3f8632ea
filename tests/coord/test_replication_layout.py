"""Replicated topics in the one layout: ClusterLayout.from_registrations(replicated=...) and ClusterView."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.layout import ClusterLayout, describe_offline
from twlog.coord.replication import store
from twlog.coord.replication.controller import Controller
from twlog.coord.replication.values import PartitionState, TopicAssignment
from twlog.errors import LeaderNotAvailable
from twlog.partition import TopicPartition
from twlog.protocol.replication_codec import NO_BROKER, UNDEFINED_EPOCH

BROKERS = {"1": b"127.0.0.1:9001", "2": b"127.0.0.1:9002", "3": b"127.0.0.1:9003"}
ASSIGNMENT = TopicAssignment("clicks", {0: (1, 2), 1: (2, 3), 2: (3, 1), 3: (1, 3)}).encode()


def state(leader: int, isr=(1, 2)) -> bytes:
    return PartitionState(leader, 3, 1, isr).encode()


def tp(name: str, topic: str = "clicks") -> TopicPartition:
    return TopicPartition(topic, name)


class LayoutTests(SynchronousTestCase):
    def test_replicated_partitions_and_leaders(self) -> None:
        """Partitions 0..P-1, each led by its state's leader if live; the rest offline, by the one rule."""
        states = {"0": state(2), "1": state(-1, (2,)), "2": state(4, (3, 4)), "3": None}
        layout, problems = ClusterLayout.from_registrations(BROKERS, {}, replicated={"clicks": (ASSIGNMENT, states)})
        self.assertEqual(problems, ())
        self.assertEqual(layout.topics(), ["clicks"])
        self.assertEqual(layout.topic_partitions("clicks"), [tp("0")])
        self.assertEqual(layout.offline_partitions("clicks"), [tp("1"), tp("2"), tp("3")])
        location = layout.locate(tp("0"))
        self.assertEqual((location.leader, location.address, location.number), (2, "127.0.0.1:9002", 0))
        with self.assertRaises(LeaderNotAvailable) as caught:
            layout.locate(tp("2"))
        self.assertEqual(str(caught.exception), "partition clicks:2 has no live leader")
        self.assertEqual(describe_offline(layout.offline_partitions("clicks")),
                         "clicks:1 has no live leader; clicks:2 has no live leader; clicks:3 has no live leader")
        self.assertEqual(layout.holders("clicks"), {2: 1})

    def test_alongside_07_topics(self) -> None:
        layout, problems = ClusterLayout.from_registrations(
            BROKERS, {"views": {"1": b"2"}}, replicated={"clicks": (ASSIGNMENT, {"0": state(1)})})
        self.assertEqual(problems, ())
        self.assertEqual(layout.topics(), ["clicks", "views"])
        self.assertEqual(layout.topic_partitions("views"), [tp("1-0", "views"), tp("1-1", "views")])
        self.assertEqual(layout.leader(tp("0")), 1)

    def test_bad_values_are_problems(self) -> None:
        layout, problems = ClusterLayout.from_registrations(BROKERS, {"both": {"1": b"1"}}, replicated={
            "bad": (b"{}", {}),
            "clicks": (ASSIGNMENT, {"0": b"nonsense", "1": state(2)}),
            "both": (ASSIGNMENT, {}),
            "gone": (None, {}),
            "a/b": (ASSIGNMENT, {}),
        })
        self.assertEqual(layout.topics(), ["both", "clicks"])
        self.assertEqual(layout.topic_partitions("both"), [tp("1-0", "both")], "the 0.7 topic as it was")
        self.assertEqual(layout.topic_partitions("clicks"), [tp("1")])
        self.assertEqual(layout.offline_partitions("clicks"), [tp("0"), tp("2"), tp("3")])
        self.assertEqual(len(problems), 4, problems)
        self.assertTrue(problems[0].startswith("/twlog/topics/a/b: "), problems)
        self.assertTrue(problems[1].startswith("/twlog/topics/bad: version None is not 1"), problems)
        self.assertIn("/twlog/topics/both: topic 'both' is a Kafka 0.7 topic too", problems[2])
        self.assertTrue(problems[3].startswith("/twlog/topics/clicks/partitions/0/state: "), problems)


class ViewTests(SynchronousTestCase):
    """ClusterView follows replicated topics: created, first states, a leader moved by the controller."""

    def setUp(self) -> None:
        self.server = FakeZooKeeperServer()
        self.sessions = {}
        for broker in (1, 2, 3):
            zk = FakeZooKeeper(self.server)
            zk.start()
            zk.create(paths.broker_id_path(broker), BROKERS[str(broker)], ephemeral=True, makepath=True)
            self.sessions[broker] = zk
        self.zk = FakeZooKeeper(self.server)
        self.zk.start()
        self.changes = 0

    def view(self, topics=("clicks",), **options) -> ClusterView:
        view = ClusterView(self.zk, topics, **options)
        self.successResultOf(view.start())
        view.add_listener(self.changed)
        self.addCleanup(view.stop)
        return view

    def changed(self) -> None:
        self.changes += 1

    def create(self, topic: str = "clicks") -> None:
        self.successResultOf(Deferred.fromCoroutine(store.create_replicated_topic(
            self.zk, topic, {0: (1, 2), 1: (2, 3)}, {"min.insync.replicas": "2"})))

    def test_follows_leaders(self) -> None:
        view = self.view()
        self.create()
        self.assertEqual(view.layout().offline_partitions("clicks"), [tp("0"), tp("1")], "no states yet")
        controller_zk = FakeZooKeeper(self.server)
        controller_zk.start()
        controller = Controller(controller_zk, 9, clock=Clock())
        controller.start()
        self.addCleanup(controller.stop)
        layout = view.layout()
        self.assertEqual({p: layout.leader(p) for p in layout.topic_partitions("clicks")}, {tp("0"): 1, tp("1"): 2})
        before = self.changes
        self.sessions[1].expire()  # broker 1 dies: the controller moves partition 0 to broker 2
        layout = view.layout()
        self.assertEqual({p: layout.leader(p) for p in layout.topic_partitions("clicks")}, {tp("0"): 2, tp("1"): 2})
        self.assertGreater(self.changes, before)
        self.assertEqual(view.topic_partitions("clicks"), [tp("0"), tp("1")])

    def test_one_watch_per_node(self) -> None:
        """However often a topic is read again, each of its nodes holds one watch of the view (piled-up watches
        would start as many re-reads at the next change)."""
        view = self.view()
        self.create()
        for epoch in range(4):
            for p in (0, 1):
                state = PartitionState(2, epoch, 1, (2,))
                if epoch == 0:
                    self.successResultOf(Deferred.fromCoroutine(store.create_state(self.zk, "clicks", p, state)))
                else:
                    _, version = self.successResultOf(Deferred.fromCoroutine(store.read_state(self.zk, "clicks", p)))
                    self.successResultOf(Deferred.fromCoroutine(
                        store.write_state_cas(self.zk, "clicks", p, state, version)))
        self.assertEqual(view.replica_states("clicks")[1][0].leader_epoch, 3)
        for path in (paths.partition_state_path("clicks", 0), paths.replicated_topic_path("clicks")):
            mine = [w for w, session in self.server._data_watches.get(path, {}).items() if session is self.zk]
            self.assertEqual(len(mine), 1, path)

    def test_all_topics_sees_replicated_ones(self) -> None:
        view = self.view(topics=(), all_topics=True)
        self.create("orders")
        self.assertIn("orders", view.topics())
        self.assertEqual(view.layout().offline_partitions("orders"), [tp("0", "orders"), tp("1", "orders")])

    def test_after_reconnecting(self) -> None:
        """A new session reads replicated topics again, with their states."""
        view = self.view()
        self.create()
        self.zk.expire()
        self.server.create(paths.partition_state_path("clicks", 0), state(2), 0, False, True)
        self.zk.reconnect()
        self.assertEqual(view.layout().leader(tp("0")), 2)

    def test_07_topic_reading_unchanged(self) -> None:
        """A 0.7 topic (registered) is not looked for under /twlog/topics: its reading costs what it did."""
        self.sessions[1].create(paths.broker_topic_path("views", 1), b"2", ephemeral=True, makepath=True)
        self.zk.operations.clear()
        view = self.view(topics=("views",))
        self.assertEqual(view.topic_partitions("views"), [tp("1-0", "views"), tp("1-1", "views")])
        self.assertEqual([p for _, p in self.zk.operations if p.startswith(paths.REPLICATED_TOPICS)], [])

    def test_replicated_for_cluster_metadata_v2(self) -> None:
        """ClusterView.replicated gives what CLUSTER_METADATA_V2 carries: replicas, and once the controller
        wrote the states, leader, epoch and ISR; a lost leader is no broker, with LeaderNotAvailable."""
        view = self.view(topics=(), all_topics=True)
        self.create()
        self.assertIsNone(view.replicated("nope"))
        first = view.replicated("clicks")
        self.assertEqual([(p.partition, p.error, p.leader, p.leader_epoch, p.replicas, p.isr)
                          for p in first.partitions],
                         [(0, LeaderNotAvailable.code, NO_BROKER, UNDEFINED_EPOCH, (1, 2), ()),
                          (1, LeaderNotAvailable.code, NO_BROKER, UNDEFINED_EPOCH, (2, 3), ())])
        controller_zk = FakeZooKeeper(self.server)
        controller_zk.start()
        controller = Controller(controller_zk, 9, clock=Clock())
        controller.start()
        self.addCleanup(controller.stop)
        states = view.replicated("clicks").partitions
        self.assertEqual([(p.error, p.leader, p.leader_epoch, p.isr) for p in states],
                         [(0, 1, 0, (1, 2)), (0, 2, 0, (2, 3))])
        self.server.set(paths.partition_state_path("clicks", 1), state(7, isr=(7,)), -1)  # a leader not live
        states = view.replicated("clicks").partitions
        self.assertEqual((states[1].error, states[1].leader, states[1].leader_epoch), (LeaderNotAvailable.code,
                                                                                       NO_BROKER, 3))

    def test_07_topic_is_not_replicated(self) -> None:
        self.sessions[1].create(paths.broker_topic_path("views", 1), b"2", ephemeral=True, makepath=True)
        view = self.view(topics=("views",))
        self.assertIsNone(view.replicated("views"))
