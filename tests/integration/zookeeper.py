"""A real ZooKeeper server for the test suite, and sessions on it with a chroot of their own.

One server runs for the whole test run (the JVM takes a second to start), on a
free loopback port with its own data directory; it is started on first use and
stopped by its process id when the run ends.  Each test gets a fresh chroot
(C{127.0.0.1:port/t-<n>}), so tests never see each other's nodes.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile

from kazoo.client import KazooClient
from twisted.internet import reactor

from twlog.coord.zk import ZooKeeper
from twlog.coord.zkserver import ZooKeeperServer

_server: ZooKeeperServer | None = None
_chroots = itertools.count(1)


def zookeeper_server() -> ZooKeeperServer:
    """The suite's ZooKeeper server, started on first use."""
    global _server
    if _server is None:
        directory = tempfile.mkdtemp(prefix="twlog-test-zookeeper-")
        _server = ZooKeeperServer(directory).start()
        atexit.register(_stop, _server, directory)
    return _server


def _stop(server: ZooKeeperServer, directory: str) -> None:
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def fresh_connect_string() -> str:
    """A connect string with a new, empty chroot on the suite's server."""
    server = zookeeper_server()
    chroot = f"/t-{os.getpid()}-{next(_chroots)}"
    admin = KazooClient(server.connect_string)
    admin.start(timeout=30)
    try:
        admin.ensure_path(chroot)
    finally:
        admin.stop()
        admin.close()
    return server.connect_string + chroot


async def connect(testcase, hosts: str | None = None, **options) -> ZooKeeper:
    """A started L{ZooKeeper} session (on a fresh chroot unless C{hosts}), stopped when the test ends."""
    zk = ZooKeeper(hosts or fresh_connect_string(), reactor=reactor, **options)
    await zk.start()
    testcase.addCleanup(zk.stop)
    return zk


def expire_session(zk: ZooKeeper) -> None:
    """Expire C{zk}'s session from the server side, as a long network partition would (kazoo's testing trick):
    a second client joins the same session and closes it."""
    session_id, password = zk.client_id
    intruder = KazooClient(zk.hosts, client_id=(session_id, password))
    intruder.start(timeout=30)
    intruder.stop()
    intruder.close()
