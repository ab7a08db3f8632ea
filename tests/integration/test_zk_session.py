"""L{twlog.cli.zk_session.zookeeper_session}: a command's ZooKeeper session, against the suite's real ZooKeeper."""

from __future__ import annotations

import argparse

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from tests.integration.zookeeper import fresh_connect_string
from twlog.cli.zk_session import zookeeper_session
from twlog.coord.zkserver import free_port
from twlog.errors import TwlogError


def _args(connect: str) -> argparse.Namespace:
    return argparse.Namespace(zookeeper=connect, zookeeper_credentials_file=None)


class ZooKeeperSessionTests(TestCase):
    async def test_a_session_that_works(self) -> None:
        zk = await zookeeper_session(reactor, _args(fresh_connect_string()))
        try:
            await zk.ensure_path("/twlog/probe")
            self.assertIsNotNone(await zk.exists("/twlog/probe"))
        finally:
            await zk.stop()

    async def test_no_zookeeper_is_one_line(self) -> None:
        connect = f"127.0.0.1:{free_port()}"  # nothing listens there
        with self.assertRaises(TwlogError) as caught:
            await zookeeper_session(reactor, _args(connect), timeout_s=0.5)
        self.assertNotIn("\n", str(caught.exception))
        self.assertIn("127.0.0.1", str(caught.exception))
