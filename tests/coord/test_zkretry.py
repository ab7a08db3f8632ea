"""Tests for L{twlog.coord.zkretry}: a start's step after a dropped connection (fake ZooKeeper, task.Clock)."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper
from twlog.coord.zk import ConnectionLoss, NodeExistsError
from twlog.coord.zkretry import retried_after_connection_loss


class RetriedTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock, self.zk = Clock(), FakeZooKeeper()
        self.successResultOf(self.zk.start())
        self.attempts = 0

    def step(self) -> Deferred:
        self.attempts += 1
        return self.zk.create("/brokers/ids/1", b"b", ephemeral=True, makepath=True)

    def retried(self, timeout_s: float = 5.0) -> Deferred:
        return Deferred.fromCoroutine(retried_after_connection_loss(self.zk, self.step, self.clock, timeout_s))

    def test_connected(self) -> None:
        """No loss: the step once, its result."""
        self.assertEqual(self.successResultOf(self.retried()), "/brokers/ids/1")
        self.assertEqual(self.attempts, 1)

    def test_again_once_reconnected(self) -> None:
        """A ConnectionLoss (the connection dropped, the session lives): the step again once connected."""
        self.zk.suspend()
        d = self.retried()
        self.assertEqual(self.attempts, 1)
        self.clock.advance(2)
        self.assertNoResult(d)
        self.zk.reconnect()
        self.assertEqual(self.successResultOf(d), "/brokers/ids/1")
        self.assertEqual(self.attempts, 2)
        self.assertEqual(self.zk._state_listeners, [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_not_back_in_time(self) -> None:
        """Not connected again within the timeout: the ConnectionLoss, and no more attempts."""
        self.zk.suspend()
        d = self.retried(timeout_s=5)
        self.clock.advance(4.9)
        self.assertNoResult(d)
        self.clock.advance(0.2)
        self.failureResultOf(d, ConnectionLoss)
        self.assertEqual(self.attempts, 1)
        self.assertEqual(self.zk._state_listeners, [])

    def test_other_errors_are_not_retried(self) -> None:
        """Only a ConnectionLoss is retried: a node already there (say) fails at once."""
        self.successResultOf(self.zk.create("/brokers/ids/1", b"other", makepath=True))
        self.failureResultOf(self.retried(), NodeExistsError)
        self.assertEqual(self.attempts, 1)

    def test_lost_session(self) -> None:
        """The session expired meanwhile: the step again in the new session (its ephemeral nodes are gone)."""
        self.zk.expire()
        d = self.retried()
        self.zk.reconnect()
        self.assertEqual(self.successResultOf(d), "/brokers/ids/1")
        self.assertEqual(self.attempts, 2)
