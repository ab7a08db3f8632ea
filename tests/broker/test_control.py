"""BrokerControl on the fake ZooKeeper and task.Clock: the controller started with the broker, and the controlled
shutdown at stop (leaderships moved before the controller resigns), bounded in time."""

from __future__ import annotations

from twisted.trial.unittest import TestCase

from tests.coord.test_replication_controller import Cluster
from twlog.broker.control import BrokerControl
from twlog.coord.replication.controller import ControllerState

C = ControllerState


class ControlTests(TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(self)

    def control(self, broker: int, **options) -> BrokerControl:
        zk = self.cluster.up(broker)
        control = BrokerControl(zk, broker, clock=self.cluster.clock, **options)
        control.start()
        self.addCleanup(lambda: control.controller.state is not C.STOPPED and control.controller.stop())
        return control

    def test_controller_runs_and_is_known(self) -> None:
        one = self.control(1)
        two = self.control(2)
        self.assertEqual((one.controller.state, two.controller.state), (C.ACTIVE, C.STANDBY))
        self.assertEqual((one.controller_id(), two.controller_id()), (1, 1))

    def test_controlled_shutdown_of_the_controller(self) -> None:
        """The controller's broker gives away what it leads (epoch +1, out of the ISR), then resigns: the next
        candidate is elected at once."""
        one = self.control(1)
        two = self.control(2)
        self.cluster.up(3)
        self.cluster.create_topic()  # partition 0 on (1, 2, 3), led by 1
        self.assertEqual(self.cluster.summary()[0], (1, 0, (1, 2, 3)))
        self.successResultOf(one.stop())
        self.assertEqual(self.cluster.summary()[0], (2, 1, (2, 3)))
        self.assertEqual(one.still_led, [])
        self.assertEqual((one.controller.state, two.controller.state), (C.STOPPED, C.ACTIVE))
        self.assertIn("/brokers/ids/1", self.cluster.server.nodes, "deregistering is the service's next step")

    def test_no_other_replica_keeps_the_lead(self) -> None:
        one = self.control(1)
        self.cluster.create_topic("solo", {0: (1,)})
        self.successResultOf(one.stop())
        self.assertEqual(one.still_led, [("solo", 0)])

    def test_bounded_in_time(self) -> None:
        """A controlled shutdown ZooKeeper does not answer is given up after shutdown_timeout_s; the stop goes on."""
        one = self.control(1, shutdown_timeout_s=2.0)
        self.cluster.up(2)
        self.cluster.create_topic("t", {0: (1, 2)})
        one.controller._zk.hold()
        d = one.stop()
        self.cluster.clock.advance(1.9)
        self.assertNoResult(d)
        self.cluster.clock.advance(0.2)
        self.assertEqual(one.controller.state, C.STOPPED)
        one.controller._zk.flush()
        self.successResultOf(d)
        self.assertIsNone(one.still_led)

    def test_standby_broker_just_stops(self) -> None:
        """A broker that is not the controller runs no controlled shutdown (its deregistration moves its
        leaderships, through the active controller's watch)."""
        self.control(1)
        two = self.control(2)
        self.cluster.up(3)
        self.cluster.create_topic()  # partition 1 on (2, 3, 1), led by 2
        self.successResultOf(two.stop())
        self.assertIsNone(two.still_led)
        self.assertEqual(self.cluster.summary()[1], (2, 0, (2, 3, 1)))
        self.cluster.down(2)  # what the service does next: deregister
        self.assertEqual(self.cluster.summary()[1], (3, 1, (3, 1)))
