"""A consumer group through a real ZooKeeper outage: stopped for longer than the members' session timeout and
started again, while a producer writes and two members read (L{twlog.bench.zk_outage}, C{twlog bench zk-outage})."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from twlog.bench.zk_outage import outage_run
from twlog.coord.zkserver import ZooKeeperServer


class ZooKeeperOutageTests(TestCase):
    timeout = 180

    async def test_duplicates_after_an_outage(self) -> None:
        """ZooKeeper stopped for 12 s, three times the members' 4 s session timeout: every message is delivered,
        and at most 5% of the deliveries are duplicates.  Disconnected, the members hand nothing out; the restarted
        server restores their sessions, and each commits first thing when its session is back.  A member slow to
        reconnect (a loaded machine) finds its session expired: then what it handed out after its last commit
        before the loss (at most one 200 ms autocommit period) is delivered again."""
        server = ZooKeeperServer(self.mktemp())
        await deferToThread(server.start)
        self.addCleanup(deferToThread, server.stop)
        result = await outage_run(reactor, server, 12.0, before_s=4.0, after_s=4.0, drain_s=30.0, rate=500,
                                  session_timeout_s=4.0, auto_commit_interval_ms=200)
        self.assertGreater(result.produced, 500 * 12)  # the producer ran through the outage
        self.assertEqual(result.missing, 0)
        self.assertLessEqual(result.duplicate_share, 0.05, result)
