"""Tests for what a group consume says on stderr: waiting for a topic, losing and regaining ZooKeeper."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper
from twlog.cli.consume_group import SessionReporter, TopicWatch
from twlog.coord.zk import CONNECTED, LOST, SUSPENDED


class SessionReporterTests(SynchronousTestCase):
    def test_each_change_is_said_once(self) -> None:
        """Lost, expired and reconnected are each said once per change; repeats are quiet."""
        said: list[str] = []
        reporter = SessionReporter("zk:2181", "g", said.append)
        for state in (CONNECTED, SUSPENDED, SUSPENDED, LOST, CONNECTED, CONNECTED):
            reporter(state)
        self.assertEqual(len(said), 3)
        self.assertIn("lost the connection to ZooKeeper at zk:2181", said[0])
        self.assertIn("session expired; this member will rejoin group 'g'", said[1])
        self.assertEqual(said[2], "reconnected to ZooKeeper at zk:2181")

    def test_quiet_when_the_command_closes_its_session(self) -> None:
        """Closing our own session on exit (Ctrl-C, -n) is not reported as an expiry."""
        said: list[str] = []
        reporter = SessionReporter("zk:2181", "g", said.append)
        reporter.closing = True
        reporter(LOST)
        self.assertEqual(said, [])


class TopicWatchTests(SynchronousTestCase):
    def test_waits_then_appears(self) -> None:
        """A topic nobody registered is said once; its registration is said when it comes."""
        zk = FakeZooKeeper()
        self.successResultOf(zk.start())
        said: list[str] = []
        self.successResultOf(TopicWatch(zk, "later", "zk:2181", said.append).check())
        self.assertEqual(len(said), 1)
        self.assertIn("topic 'later' does not exist yet", said[0])
        self.assertIn("waiting for it to appear", said[0])
        self.successResultOf(zk.create("/brokers/topics/later", b"", makepath=True))
        self.assertEqual(said[1:], ["topic 'later' appeared"])

    def test_existing_topic_is_quiet(self) -> None:
        """A registered topic says nothing."""
        zk = FakeZooKeeper()
        self.successResultOf(zk.start())
        self.successResultOf(zk.create("/brokers/topics/now", b"", makepath=True))
        said: list[str] = []
        self.successResultOf(TopicWatch(zk, "now", "zk:2181", said.append).check())
        self.assertEqual(said, [])

    def test_replicated_topic_exists_too(self) -> None:
        """A replicated topic (its assignment under /twlog/topics, nothing under /brokers/topics) exists: nothing
        said; one created later is said to appear."""
        zk = FakeZooKeeper()
        self.successResultOf(zk.start())
        self.successResultOf(zk.create("/twlog/topics/orders", b"{}", makepath=True))
        said: list[str] = []
        self.successResultOf(TopicWatch(zk, "orders", "zk:2181", said.append).check())
        self.assertEqual(said, [])
        self.successResultOf(TopicWatch(zk, "later", "zk:2181", said.append).check())
        self.successResultOf(zk.create("/twlog/topics/later", b"{}", makepath=True))
        self.assertEqual(said[1:], ["topic 'later' appeared"])
