"""The controller on the fake ZooKeeper and task.Clock: election, decisions written by compare-and-set, and a
session loss or a compare-and-set failure at every step of a scenario."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.replication.controller import CONTROLLER_MOVES, Controller, ControllerState
from twlog.coord.replication.values import ControllerRecord, PartitionState
from twlog.statemachine import StateMachine

C = ControllerState
ASSIGNMENT = {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}
#: After the scenario (topic created on brokers 1-3, then broker 1 lost): (leader, leader epoch, ISR).
AFTER_SCENARIO = {0: (2, 1, (2, 3)), 1: (2, 0, (2, 3)), 2: (3, 0, (3, 2))}


class Tripwire(FakeZooKeeper):
    """A session that runs C{trips[n](name, path)} just before its operation number C{n} (counting from 0)."""

    def __init__(self, server: FakeZooKeeperServer) -> None:
        super().__init__(server)
        self.trips: dict[int, object] = {}
        self.heard: list[str] = []
        self.add_state_listener(self.heard.append)
        self.pending: tuple[str, bytes] | None = None
        #: Called as C{before(name, path)} just before every operation, if set.
        self.before = None
        #: C{after[n]()} runs just after operation number C{n} was done (its answer held or given).
        self.after: dict[int, object] = {}
        #: The operations asked for while the session was not connected.
        self.offline: list[tuple[str, str]] = []

    def create(self, path, value=b"", **kwargs):
        self.pending = (path, value)
        return super().create(path, value, **kwargs)

    def set(self, path, value, version=-1):
        self.pending = (path, value)
        return super().set(path, value, version)

    def _do(self, name, path, operation):
        trip = self.trips.pop(len(self.operations), None)
        if trip is not None:
            trip(name, path)
        if self.before is not None:
            self.before(name, path)
        self.pending = None
        if not self.connected:
            self.offline.append((name, path))
        step = len(self.operations)
        result = super()._do(name, path, operation)
        after = self.after.pop(step, None)
        if after is not None:
            after()
        return result


class Cluster:
    """Brokers registered in a fake ZooKeeper (each its own session), controllers, and a clock."""

    def __init__(self, testcase: TestCase) -> None:
        self.server = FakeZooKeeperServer()
        self.clock = Clock()
        self.sessions: dict[int, FakeZooKeeper] = {}
        self.controllers: dict[int, Controller] = {}
        self.testcase = testcase

    def up(self, broker: int, session: FakeZooKeeper | None = None) -> FakeZooKeeper:
        zk = session if session is not None else FakeZooKeeper(self.server)
        zk.start()
        zk.create(paths.broker_id_path(broker), f"127.0.0.1-1:127.0.0.1:{9000 + broker}".encode(), ephemeral=True,
                  makepath=True)
        self.sessions[broker] = zk
        return zk

    def down(self, broker: int) -> None:
        self.sessions.pop(broker).expire()

    def controller(self, broker: int, session: FakeZooKeeper | None = None, **options) -> Controller:
        zk = self.up(broker, session)
        controller = Controller(zk, broker, clock=self.clock, **options)
        self.controllers[broker] = controller
        controller.start()
        self.testcase.addCleanup(controller.stop)
        return controller

    def create_topic(self, topic: str = "clicks", assignment=None) -> None:
        admin = FakeZooKeeper(self.server)
        admin.start()
        self.testcase.successResultOf(Deferred.fromCoroutine(
            store.create_replicated_topic(admin, topic, assignment or ASSIGNMENT)))

    def state(self, topic: str, partition: int) -> PartitionState:
        node = self.server.nodes[paths.partition_state_path(topic, partition)]
        return PartitionState.decode(node.value, "test")

    def summary(self, topic: str = "clicks") -> dict[int, tuple[int, int, tuple[int, ...]]]:
        found = {}
        for partition in ASSIGNMENT:
            if paths.partition_state_path(topic, partition) in self.server.nodes:
                state = self.state(topic, partition)
                found[partition] = (state.leader, state.leader_epoch, state.isr)
        return found

    def epoch(self) -> int:
        return int(self.server.nodes[paths.CONTROLLER_EPOCH].value)

    def write(self, topic: str, partition: int, state: PartitionState) -> None:
        """Another writer (a leader changing its ISR) sets the state, whatever its version."""
        self.server.set(paths.partition_state_path(topic, partition), state.encode(), -1)


def scenario(cluster: Cluster, a: FakeZooKeeper) -> tuple[Controller, Controller]:
    """Brokers 1-3; controller candidates 4 (on session C{a}) and 5; the topic created; broker 1 lost."""
    for broker in (1, 2, 3):
        cluster.up(broker)
    first = cluster.controller(4, a)
    second = cluster.controller(5)
    cluster.create_topic()
    cluster.down(1)
    return first, second


class ElectionTests(TestCase):
    def test_one_controller_and_epochs(self) -> None:
        cluster = Cluster(self)
        cluster.clock.advance(1700000000.5)
        one = cluster.controller(1)
        two = cluster.controller(2)
        self.assertEqual((one.state, one.epoch, two.state), (C.ACTIVE, 1, C.STANDBY))
        node = cluster.server.nodes[paths.CONTROLLER]
        self.assertEqual(node.value, b'{"version":1,"brokerid":1,"timestamp":"1700000000500"}')
        self.assertEqual(node.ephemeral_owner, cluster.sessions[1].session_id)
        self.assertEqual(cluster.server.nodes[paths.CONTROLLER_EPOCH].value, b"1")
        cluster.down(1)  # the controller's session expires
        self.assertEqual((one.state, two.state, two.epoch, cluster.epoch()), (C.SESSION_LOST, C.ACTIVE, 2, 2))
        self.assertEqual(ControllerRecord.decode(cluster.server.nodes[paths.CONTROLLER].value, "").broker_id, 2)
        cluster.sessions[1] = one._zk
        one._zk.reconnect()  # a new session: it stands by
        self.assertEqual((one.state, two.state), (C.STANDBY, C.ACTIVE))

    def test_controller_id_known(self) -> None:
        """Each candidate knows who the controller is (for CLUSTER_METADATA_V2); -1 while none is known."""
        cluster = Cluster(self)
        one = cluster.controller(1)
        two = cluster.controller(2)
        self.assertEqual((one.controller_id, two.controller_id), (1, 1))
        cluster.down(1)
        self.assertEqual((one.controller_id, two.controller_id), (-1, 2))
        self.successResultOf(two.stop())
        self.assertEqual(two.controller_id, -1)

    def test_stop_resigns(self) -> None:
        cluster = Cluster(self)
        one = cluster.controller(1)
        two = cluster.controller(2)
        self.successResultOf(one.stop())
        self.assertEqual((one.state, two.state, two.epoch), (C.STOPPED, C.ACTIVE, 2))
        self.assertIn(paths.broker_id_path(1), cluster.server.nodes, "the broker stays registered")

    def test_suspended_then_reconnected_elects_again(self) -> None:
        cluster = Cluster(self)
        one = cluster.controller(1)
        one._zk.suspend()
        self.assertEqual(one.state, C.SESSION_LOST)
        one._zk.reconnect()  # same session, its node still there: a new election, a new epoch
        self.assertEqual((one.state, one.epoch, cluster.epoch()), (C.ACTIVE, 2, 2))

    def test_started_before_connecting(self) -> None:
        cluster = Cluster(self)
        zk = FakeZooKeeper(cluster.server)
        controller = Controller(zk, 1, clock=cluster.clock)
        controller.start()
        self.addCleanup(controller.stop)
        self.assertEqual((controller.state, zk.operations), (C.IDLE, []))
        zk.start()
        self.assertEqual((controller.state, controller.epoch), (C.ACTIVE, 1))

    def test_controller_node_deleted(self) -> None:
        cluster = Cluster(self)
        one = cluster.controller(1)
        two = cluster.controller(2)
        cluster.server.delete(paths.CONTROLLER)
        self.assertEqual(sorted([one.state, two.state], key=lambda s: s.value), [C.ACTIVE, C.STANDBY])
        self.assertEqual(cluster.epoch(), 2)

    def test_every_move_is_made(self) -> None:
        """The moves these tests make cover CONTROLLER_MOVES."""
        moves = set()
        cluster = Cluster(self)
        for broker in (1, 2):
            zk = cluster.up(broker)
            controller = Controller(zk, broker, clock=cluster.clock)
            controller._machine._observer = lambda name, a, b: moves.add((a, b))
            cluster.controllers[broker] = controller
        cluster.controllers[1].start()
        cluster.controllers[2].start()  # ELECTING -> STANDBY
        cluster.sessions[2].suspend()  # STANDBY -> SESSION_LOST
        cluster.sessions[2].reconnect()
        cluster.server.delete(paths.CONTROLLER)  # ACTIVE -> ELECTING (1), STANDBY -> ELECTING (2)
        active = next(c for c in cluster.controllers.values() if c.active)
        active._zk.expire()  # ACTIVE -> SESSION_LOST; the other is elected
        other = next(c for c in cluster.controllers.values() if c is not active)
        self.assertTrue(other.active)
        other._zk.suspend()
        other._zk.reconnect()  # SESSION_LOST -> ELECTING -> ACTIVE
        self.assertTrue(other.active)
        self.successResultOf(other.stop())  # ACTIVE -> STOPPED
        self.successResultOf(active.stop())  # SESSION_LOST -> STOPPED
        idle = Controller(cluster.up(3), 3, clock=cluster.clock)
        idle._machine._observer = lambda name, a, b: moves.add((a, b))
        self.successResultOf(idle.stop())  # IDLE -> STOPPED
        electing = Controller(cluster.up(4), 4, clock=cluster.clock)
        electing._machine._observer = lambda name, a, b: moves.add((a, b))
        electing._zk.hold()
        electing.start()
        self.successResultOf(electing.stop())  # ELECTING -> STOPPED
        electing._zk.flush()
        standby = Controller(cluster.up(5), 5, clock=cluster.clock)
        standby._machine._observer = lambda name, a, b: moves.add((a, b))
        standby.start()
        self.successResultOf(standby.stop())  # STANDBY -> STOPPED
        electing2 = Controller(cluster.up(6), 6, clock=cluster.clock)
        electing2._machine._observer = lambda name, a, b: moves.add((a, b))
        electing2._zk.hold()
        electing2.start()
        electing2._zk.suspend()  # ELECTING -> SESSION_LOST
        self.assertEqual(moves, set(StateMachine("c", C.IDLE, CONTROLLER_MOVES).transitions()))


class DecisionTests(TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(self)
        for broker in (1, 2, 3):
            self.cluster.up(broker)
        self.controller = self.cluster.controller(9, preferred_delay_s=30.0, check_interval_s=10.0)

    def test_topic_creation(self) -> None:
        self.cluster.create_topic()
        self.assertEqual(self.cluster.summary(), {0: (1, 0, (1, 2, 3)), 1: (2, 0, (2, 3, 1)), 2: (3, 0, (3, 1, 2))})
        self.assertEqual(self.cluster.state("clicks", 0).controller_epoch, 1)

    def test_broker_loss_and_return(self) -> None:
        self.cluster.create_topic()
        self.cluster.down(1)
        self.assertEqual(self.cluster.summary(), AFTER_SCENARIO)
        self.cluster.up(1)
        self.assertEqual(self.cluster.summary(), AFTER_SCENARIO, "no leader change on return")

    def test_offline_then_isr_member_returns(self) -> None:
        self.cluster.create_topic()
        for broker in (1, 2, 3):
            self.cluster.down(broker)
        self.assertEqual(self.cluster.summary()[0], (-1, 3, (3,)))
        self.cluster.up(1)
        self.assertEqual(self.cluster.summary()[0], (-1, 3, (3,)), "1 is not in the ISR: no unclean election")
        self.cluster.up(3)
        self.assertEqual(self.cluster.summary(), {0: (3, 4, (3,)), 1: (3, 3, (3,)), 2: (3, 2, (3,))})

    def test_unclean_election(self) -> None:
        self.controller.unclean = True
        self.cluster.create_topic()
        for broker in (1, 2, 3):
            self.cluster.down(broker)
        self.cluster.up(1)
        self.assertEqual(self.cluster.summary()[0], (1, 4, (1,)))
        losses = [d.loss for d in self.controller.decisions if d.loss]
        self.assertEqual(len(losses), 3)
        self.assertEqual(len(self.flushLoggedErrors()), 0)

    def test_controlled_shutdown(self) -> None:
        self.cluster.create_topic()
        left = self.successResultOf(self.controller.controlled_shutdown(2))
        self.assertEqual(left, [])
        self.assertEqual(self.cluster.summary(), {0: (1, 0, (1, 3)), 1: (3, 1, (3, 1)), 2: (3, 0, (3, 1))})
        self.cluster.down(2)
        self.assertEqual(self.cluster.summary(), {0: (1, 0, (1, 3)), 1: (3, 1, (3, 1)), 2: (3, 0, (3, 1))},
                         "nothing left to move when it goes")

    def test_controlled_shutdown_of_a_sole_member(self) -> None:
        self.cluster.create_topic("solo", {0: (2,)})
        self.assertEqual(self.successResultOf(self.controller.controlled_shutdown(2)), [("solo", 0)])

    def test_preferred_leader_after_delay(self) -> None:
        self.cluster.create_topic()
        self.cluster.down(1)
        self.cluster.up(1)
        state = self.cluster.state("clicks", 0)  # the leader (2) takes 1 back into the ISR
        self.cluster.write("clicks", 0, PartitionState(state.leader, state.leader_epoch, state.controller_epoch,
                                                       (2, 3, 1)))
        self.cluster.clock.advance(10)  # a round sees 1 in the ISR: the delay starts
        self.cluster.clock.advance(10)
        self.assertEqual(self.cluster.summary()[0], (2, 1, (2, 3, 1)), "not yet")
        self.cluster.clock.advance(20)
        self.assertEqual(self.cluster.summary()[0], (1, 2, (2, 3, 1)))

    def test_fenced_by_a_later_controller(self) -> None:
        """A state written by a later controller (the epoch counter says so): this one runs for election
        again before it writes anything; here it wins again (it still holds the node), with a later epoch."""
        self.cluster.create_topic()
        state = self.cluster.state("clicks", 0)
        self.cluster.server.set(paths.CONTROLLER_EPOCH, b"2", -1)
        self.cluster.write("clicks", 0, PartitionState(state.leader, state.leader_epoch, 2, state.isr))
        self.cluster.down(1)
        self.assertEqual((self.controller.state, self.controller.epoch), (C.ACTIVE, 3))
        self.assertEqual(self.cluster.summary(), AFTER_SCENARIO)
        self.assertEqual({d.new.controller_epoch for d in self.controller.decisions[3:]}, {3})

    def test_state_epoch_past_the_counter(self) -> None:
        """A controller epoch no election gave (past /twlog/controller_epoch) is a bad value: left alone, said."""
        self.cluster.create_topic()
        state = self.cluster.state("clicks", 0)
        self.cluster.write("clicks", 0, PartitionState(state.leader, state.leader_epoch, 99, state.isr))
        self.cluster.down(1)
        self.assertEqual((self.controller.state, self.controller.epoch), (C.ACTIVE, 1))
        self.assertEqual(self.cluster.summary()[0], (1, 0, (1, 2, 3)), "it wrote nothing over epoch 99's state")
        self.assertEqual(self.cluster.summary()[1], AFTER_SCENARIO[1])
        self.assertEqual(len(self.controller._reported), 1)

    def test_cas_failure_rereads(self) -> None:
        """A leader shrank its ISR between the controller's read and write: the controller decides again."""
        cluster = Cluster(self)
        for broker in (1, 2, 3):
            cluster.up(broker)
        zk = Tripwire(cluster.server)
        controller = cluster.controller(9, zk)
        cluster.create_topic()
        target = paths.partition_state_path("clicks", 0)

        def before(name, path):
            if (name, path) == ("set", target):
                zk.before = None
                state = cluster.state("clicks", 0)  # (the leader, 1, on its way out)
                cluster.write("clicks", 0, PartitionState(1, 0, state.controller_epoch, (1, 2)))

        zk.before = before
        cluster.down(1)
        self.assertEqual(controller.cas_failures, 1)
        self.assertEqual(cluster.summary()[0], (2, 1, (2,)), "decided on the ISR the leader wrote")


class EveryStepTests(TestCase):
    """The scenario with a fault before each operation of the first controller's session in turn."""

    def clean_run(self) -> tuple[int, int]:
        cluster = Cluster(self)
        a = Tripwire(cluster.server)
        first, _ = scenario(cluster, a)
        self.assertEqual(cluster.summary(), AFTER_SCENARIO)
        self.assertTrue(first.active)
        return 1, len(a.operations)  # (op 0 registers broker 4)

    def test_session_expires_at_every_step(self) -> None:
        start, end = self.clean_run()
        for step in range(start, end):
            cluster = Cluster(self)
            a = Tripwire(cluster.server)
            a.trips[step] = lambda name, path: a.expire()
            first, second = scenario(cluster, a)
            self.assertEqual(cluster.summary(), AFTER_SCENARIO, f"step {step}")
            self.assertEqual(len(a.operations), step + 1, f"step {step}: it went on after losing its session")
            self.assertEqual((first.state, second.state), (C.SESSION_LOST, C.ACTIVE), f"step {step}")
            a.reconnect()
            self.assertEqual(first.state, C.STANDBY)

    def test_session_suspended_at_every_step(self) -> None:
        """Suspended and reconnected at once (same session): an answer that arrives after that writes nothing of
        the old round; the new election (a new epoch) reads everything again."""
        start, end = self.clean_run()
        for step in range(start, end):
            cluster = Cluster(self)
            a = Tripwire(cluster.server)

            def trip(name, path, a=a):
                a.suspend()
                a.reconnect()

            a.trips[step] = trip
            first, second = scenario(cluster, a)
            self.assertEqual(cluster.summary(), AFTER_SCENARIO, f"step {step}")
            self.assertEqual((first.state, second.state), (C.ACTIVE, C.STANDBY), f"step {step}")
            self.assertEqual(first.epoch, cluster.epoch(), f"step {step}")
            stale = [d for d in first.decisions if d.new.controller_epoch != first.epoch and d.old is not None
                     and d.old.controller_epoch == first.epoch]
            self.assertEqual(stale, [], f"step {step}")

    def test_answer_after_suspension_at_every_step(self) -> None:
        """The session is suspended while an answer is on its way: when it arrives, the controller asks
        ZooKeeper nothing more until it is connected again (and then runs for election first)."""
        start, end = self.clean_run()
        for step in range(start, end):
            cluster = Cluster(self)
            a = Tripwire(cluster.server)
            a.trips[step] = lambda name, path, a=a: a.hold()

            def suspend(a=a):
                a.suspend()
                a.flush()

            a.after[step] = suspend
            first, second = scenario(cluster, a)
            self.assertEqual(a.offline, [], f"step {step}")
            self.assertEqual(first.state, C.SESSION_LOST)
            a.reconnect()
            self.assertEqual(a.operations[step + 1], ("create", paths.CONTROLLER), f"step {step}")
            # (Suspended before it wrote the first states, it writes them after broker 1 went: 2 leads from epoch 0.)
            self.assertIn(cluster.summary(), (AFTER_SCENARIO, {**AFTER_SCENARIO, 0: (2, 0, (2, 3))}), f"step {step}")
            self.assertEqual((first.state, second.state), (C.ACTIVE, C.STANDBY), f"step {step}")

    def test_cas_fails_at_every_step(self) -> None:
        """Before each write of a state, another writer writes it: the controller reads again and decides again."""
        cluster = Cluster(self)
        a = Tripwire(cluster.server)
        scenario(cluster, a)
        writes = [n for n, (name, path) in enumerate(a.operations)
                  if name in ("create", "set") and path.endswith("/state")]
        self.assertEqual(len(writes), 6, "3 first states, 1 leader change, 2 ISRs shrunk")
        for step in writes:
            cluster = Cluster(self)
            a = Tripwire(cluster.server)

            def trip(name, path, a=a, cluster=cluster):
                target, value = a.pending
                if name == "set":
                    cluster.server.set(target, cluster.server.nodes[target].value, -1)
                else:  # another writer creates it first, with what this one would write
                    cluster.server.create(target, value, 0, False, True)

            a.trips[step] = trip
            first, _ = scenario(cluster, a)
            self.assertEqual(cluster.summary(), AFTER_SCENARIO, f"step {step}")
            self.assertEqual(first.cas_failures, 1, f"step {step}")
            self.assertEqual(len(first.decisions), 6 - (a.operations[step][0] == "create"), f"step {step}")
