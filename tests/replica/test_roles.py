"""Tests for twlog.replica.roles: a broker's roles follow the controller's states, read through a ClusterView on
the fake ZooKeeper (task.Clock, a real Broker and logs); and a topic first written to is created replicated
when the broker has a default replication factor."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from tests.protocol.test_server import BrokerTestMixin
from tests.replica.test_follower import Link
from tests.replica.test_leader import frame
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.replication import store
from twlog.coord.replication.values import PartitionState
from twlog.errors import LeaderNotAvailable, NotLeader
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, ProduceRequest
from twlog.replica import roles
from twlog.replica.manager import ReplicaManager
from twlog.replica.roles import RETRY_S, ReplicaRoles
from twlog.storage.message import encode_message_set


def answer(testcase, response):
    """A handler's answer: at once (bytes) or by a Deferred."""
    return response if isinstance(response, bytes) else testcase.successResultOf(response)


BROKERS = {1: b"127.0.0.1:9001", 2: b"127.0.0.1:9002", 3: b"127.0.0.1:9003"}


class RolesTests(BrokerTestMixin, SynchronousTestCase):
    """Broker 1, a replica of clicks-0 (replicas 1, 2) and not of clicks-1 (replicas 2, 3)."""

    def setUp(self) -> None:
        self.make_broker()
        self.server = FakeZooKeeperServer()
        self.sessions = {}
        for broker, address in BROKERS.items():
            zk = self.sessions[broker] = FakeZooKeeper(self.server)
            zk.start()
            zk.create(paths.broker_id_path(broker), address, ephemeral=True, makepath=True)
        self.zk = self.sessions[1]
        self.view = ClusterView(self.zk, all_topics=True)
        self.successResultOf(Deferred.fromCoroutine(self.view.start()))
        self.addCleanup(self.view.stop)
        self.links: list[tuple[int, Link]] = []
        self.manager = ReplicaManager(1, self.logs, self.zk, self.clock, connect=self.connect_to)
        self.manager.install(self.broker)
        self.roles = ReplicaRoles(1, self.manager, self.view, self.logs, self.zk, self.clock, default_min_isr=1)
        self.roles.start()
        self.addCleanup(self.roles.stop)

    def connect_to(self, broker_id: int) -> Link:
        link = Link(self.broker)
        link.down = True  # (the follower's fetches fail and back off: what is tested is who it follows)
        self.links.append((broker_id, link))
        return link

    def create(self) -> None:
        self.successResultOf(Deferred.fromCoroutine(store.create_replicated_topic(
            self.zk, "clicks", {0: (1, 2), 1: (2, 3)}, {"min.insync.replicas": "2"})))

    def set_state(self, partition: int, leader: int, epoch: int, isr=(1, 2)) -> None:
        state = PartitionState(leader, epoch, 1, isr)
        try:
            _, version = self.successResultOf(Deferred.fromCoroutine(store.read_state(self.zk, "clicks", partition)))
        except Exception:
            self.successResultOf(Deferred.fromCoroutine(store.create_state(self.zk, "clicks", partition, state)))
        else:
            self.successResultOf(Deferred.fromCoroutine(
                store.write_state_cas(self.zk, "clicks", partition, state, version)))

    def produce(self, partition: int):
        response = self.broker.handlers[AckProduceRequest](AckProduceRequest(ACK_APPENDED, 1000, (
            ProduceRequest("clicks", partition, encode_message_set([b"x"])),)))
        return codec.decode_ack_produce_response(frame(answer(self, response))).results[0]

    def test_leads_when_the_state_says_so(self) -> None:
        """The state names broker 1: it leads at that epoch, with the topic's min.insync.replicas; partition 1,
        of which it holds no replica, it neither leads nor follows."""
        self.create()
        self.set_state(0, leader=1, epoch=0)
        self.set_state(1, leader=2, epoch=0, isr=(2, 3))
        leader = self.manager.leaders[("clicks", 0)]
        self.assertEqual((leader.leader_epoch, leader.state.min_isr, leader.state.isr), (0, 2, (1, 2)))
        self.assertEqual(set(self.manager.followers), set())
        self.assertEqual(self.manager.replicated_topics, {"clicks"})
        self.assertEqual(self.produce(0).error, 0)
        self.assertEqual(self.produce(1).error, NotLeader.code, "a replicated partition it does not lead")
        self.assertIsNone(self.successResultOf(self.zk.exists(paths.broker_topic_path("clicks"))),
                          "never registered as a 0.7 topic")

    def test_follows_and_moves_with_the_leader(self) -> None:
        """Broker 2 leads: broker 1 follows it; broker 2 leads again at epoch 1 (after a restart, say): broker 1
        follows it again on a new connection; then the lead moves to broker 1 (epoch 2): it leads."""
        self.create()
        self.set_state(0, leader=2, epoch=0)
        follower = self.manager.followers[("clicks", 0)]
        self.assertEqual((follower.leader_id, follower.leader_epoch), (2, 0))
        self.assertEqual(self.produce(0).error, NotLeader.code)
        self.set_state(0, leader=2, epoch=1)
        follower = self.manager.followers[("clicks", 0)]
        self.assertEqual((follower.leader_id, follower.leader_epoch), (2, 1))
        self.assertEqual([b for b, _ in self.links], [2, 2], "a new connection for the new epoch")
        self.set_state(0, leader=1, epoch=2)
        self.assertEqual(self.manager.leaders[("clicks", 0)].leader_epoch, 2)
        self.assertEqual(self.manager.followers, {})

    def test_leader_not_live(self) -> None:
        """The state names a broker that is not registered: broker 1 does not follow it, until it registers."""
        self.create()
        self.sessions[2].expire()
        self.set_state(0, leader=2, epoch=0)
        self.assertEqual((self.manager.leaders, self.manager.followers), ({}, {}))
        zk = FakeZooKeeper(self.server)
        zk.start()
        zk.create(paths.broker_id_path(2), BROKERS[2], ephemeral=True, makepath=True)
        self.assertEqual(self.manager.followers[("clicks", 0)].leader_id, 2)

    def test_isr_changed_by_the_controller(self) -> None:
        """Leading at epoch 0, the controller shrinks the ISR at the same epoch: the leader takes it, and its version
        (its next compare-and-set would otherwise fail)."""
        self.create()
        self.set_state(0, leader=1, epoch=0)
        leader = self.manager.leaders[("clicks", 0)]
        self.set_state(0, leader=1, epoch=0, isr=(1,))
        self.assertIs(self.manager.leaders[("clicks", 0)], leader)
        self.assertEqual((leader.state.isr, leader.zk_state.isr), ((1,), (1,)))

    def test_offline_partition(self) -> None:
        """An offline partition (leader -1): no role."""
        self.create()
        self.set_state(0, leader=1, epoch=0)
        self.set_state(0, leader=-1, epoch=1, isr=(1,))
        self.assertEqual((self.manager.leaders, self.manager.followers), ({}, {}))

    def test_stop(self) -> None:
        self.create()
        self.set_state(0, leader=2, epoch=0)
        self.successResultOf(self.roles.stop())
        self.assertEqual((self.manager.leaders, self.manager.followers), ({}, {}))
        self.set_state(0, leader=1, epoch=1)
        self.assertEqual(self.manager.leaders, {}, "stopped: no longer following the view")

    def test_shutting_down_follows_nothing(self) -> None:
        """A stopping broker stops following at once, and a leadership moved away meanwhile leaves it with no
        role (it does not follow the new leader back into the ISR it is leaving)."""
        self.create()
        self.set_state(0, leader=1, epoch=0)
        self.roles.shut_down()
        self.assertIn(("clicks", 0), self.manager.leaders, "it leads until the controller moves the lead")
        self.set_state(0, leader=2, epoch=1, isr=(2,))
        self.assertEqual((self.manager.leaders, self.manager.followers), ({}, {}))

    def test_taking_over_retried_after_a_failure(self) -> None:
        """Reading the state with its version fails (ZooKeeper away): tried again after RETRY_S."""
        self.create()
        failures = [ConnectionError("connection loss")]

        async def read_state(*args, **kwargs):
            if failures:
                raise failures.pop()
            return await store.read_state(*args, **kwargs)

        self.patch(roles, "read_state", read_state)
        self.set_state(0, leader=1, epoch=0)
        self.flushLoggedErrors(ConnectionError)
        self.assertEqual(self.manager.leaders, {})
        self.clock.advance(RETRY_S)
        self.assertEqual(self.manager.leaders[("clicks", 0)].leader_epoch, 0)


class AutoCreateTests(BrokerTestMixin, SynchronousTestCase):
    def test_replica_log_without_a_role_refuses(self) -> None:
        """A log with leader epochs (a replica's) refuses a 0.7 produce while no role is known."""
        self.make_broker()
        log = self.logs.get_or_create_log("t", 0)
        self.successResultOf(log.epochs.assign(3, 0))
        response = self.broker.handlers[AckProduceRequest](AckProduceRequest(ACK_APPENDED, 1000, (
            ProduceRequest("t", 0, encode_message_set([b"x"])),)))
        result = codec.decode_ack_produce_response(frame(answer(self, response))).results[0]
        self.assertEqual(result.error, LeaderNotAvailable.code)

    def test_auto_create_hook(self) -> None:
        """With a default replication factor, a produce to a topic neither replicated nor held here gets
        LeaderNotAvailable while the topic is created replicated; one the hook leaves as 0.7 is appended."""
        self.make_broker()
        zk = FakeZooKeeper()
        zk.start()
        manager = ReplicaManager(1, self.logs, zk, self.clock, connect=lambda broker: None)
        manager.install(self.broker)
        asked = []
        manager.auto_create = lambda topic: asked.append(topic) or topic == "new"
        for topic, error in (("new", LeaderNotAvailable.code), ("old", 0)):
            response = self.broker.handlers[AckProduceRequest](AckProduceRequest(ACK_APPENDED, 1000, (
                ProduceRequest(topic, 0, encode_message_set([b"x"])),)))
            frame_ = response if isinstance(response, bytes) else self.successResultOf(response)
            self.assertEqual(codec.decode_ack_produce_response(frame(frame_)).results[0].error, error)
        self.assertEqual(asked, ["new", "old"])
        self.assertIsNone(self.logs.get_log("new", 0), "nothing written for the replicated topic to be")
        self.assertEqual(self.logs.get_log("old", 0).end_offset > 0, True)
