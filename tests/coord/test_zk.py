"""The ZooKeeper interface, and the in-memory fake the unit tests use in place of a server."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.logger import Logger, LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.coord.zk import (
    CONNECTED,
    LOST,
    SUSPENDED,
    BadVersionError,
    ConnectionLoss,
    EventType,
    IZooKeeper,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZooKeeper,
    ZooKeeperUnavailable,
    missing_chroot,
    split_chroot,
)


def started(server: FakeZooKeeperServer | None = None) -> FakeZooKeeper:
    zk = FakeZooKeeper(server)
    zk.start()
    return zk


class InterfaceTests(SynchronousTestCase):
    def test_fake_provides_interface(self) -> None:
        """The fake provides every method and attribute of IZooKeeper."""
        self.assertTrue(verifyObject(IZooKeeper, started()))

    def test_adapter_provides_interface(self) -> None:
        """So does the kazoo adapter (constructed, not connected)."""
        zk = ZooKeeper("127.0.0.1:1")
        self.assertTrue(verifyObject(IZooKeeper, zk))
        self.assertIsNone(zk.session_id)


class FakeTreeTests(SynchronousTestCase):
    def test_create_get_set_delete(self) -> None:
        """Values, versions, children and kazoo's errors."""
        zk = started()
        self.assertEqual(self.successResultOf(zk.create("/a/b", b"one", makepath=True)), "/a/b")
        value, stat = self.successResultOf(zk.get("/a/b"))
        self.assertEqual((value, stat.version, stat.ephemeralOwner), (b"one", 0, 0))
        self.successResultOf(zk.set("/a/b", b"two"))
        self.assertEqual(self.successResultOf(zk.get("/a/b"))[0], b"two")
        self.failureResultOf(zk.set("/a/b", b"x", version=0), BadVersionError)
        self.assertEqual(self.successResultOf(zk.children("/a")), ["b"])
        self.failureResultOf(zk.create("/a/b"), NodeExistsError)
        self.failureResultOf(zk.create("/x/y"), NoNodeError)
        self.failureResultOf(zk.delete("/a"), NotEmptyError)
        self.successResultOf(zk.delete("/a/b"))
        self.assertIsNone(self.successResultOf(zk.exists("/a/b")))
        self.failureResultOf(zk.get("/a/b"), NoNodeError)
        self.failureResultOf(zk.children("/a/b"), NoNodeError)

    def test_sequence_nodes(self) -> None:
        """Sequence nodes get the parent's child version, ten digits."""
        zk = started()
        self.successResultOf(zk.ensure_path("/q"))
        first = self.successResultOf(zk.create("/q/n-", sequence=True))
        second = self.successResultOf(zk.create("/q/n-", sequence=True))
        self.assertEqual((first, second), ("/q/n-0000000000", "/q/n-0000000001"))

    def test_set_or_create(self) -> None:
        """set_or_create writes whether or not the node and its parents exist."""
        zk = started()
        self.successResultOf(zk.set_or_create("/x/y", b"1"))
        self.successResultOf(zk.set_or_create("/x/y", b"2"))
        self.assertEqual(self.successResultOf(zk.get("/x/y"))[0], b"2")

    def test_hold_and_flush(self) -> None:
        """Held results wait for flush, in order."""
        zk = started()
        zk.hold()
        d = zk.create("/a")
        self.assertNoResult(d)
        self.assertEqual(zk.held, 1)
        zk.flush()
        self.assertEqual(self.successResultOf(d), "/a")


class FakeWatchTests(SynchronousTestCase):
    def test_watches_fire_once(self) -> None:
        """Data, child and exists watches fire once with ZooKeeper's event types."""
        zk = started()
        events = []
        self.successResultOf(zk.exists("/n", watch=events.append))
        self.successResultOf(zk.create("/n", b""))
        self.successResultOf(zk.get("/n", watch=events.append))
        self.successResultOf(zk.children("/n", watch=events.append))
        self.successResultOf(zk.create("/n/c"))
        self.successResultOf(zk.set("/n", b"v"))
        self.successResultOf(zk.set("/n", b"w"))  # the data watch fired already
        self.successResultOf(zk.get("/n", watch=events.append))
        self.successResultOf(zk.children("/n", watch=events.append))
        self.successResultOf(zk.delete("/n/c"))
        self.successResultOf(zk.delete("/n"))
        self.assertEqual([(e.type, e.path) for e in events], [
            (EventType.CREATED, "/n"), (EventType.CHILD, "/n"), (EventType.CHANGED, "/n"),
            (EventType.CHILD, "/n"), (EventType.DELETED, "/n"),
        ])

    def test_one_watch_function_registered_twice_fires_once(self) -> None:
        """Like kazoo, the same callable watching one path twice fires once."""
        zk = started()
        events = []
        self.successResultOf(zk.create("/n"))
        self.successResultOf(zk.get("/n", watch=events.append))
        self.successResultOf(zk.exists("/n", watch=events.append))
        self.successResultOf(zk.set("/n", b"1"))
        self.assertEqual(len(events), 1)


class FakeSessionTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.server = FakeZooKeeperServer()
        self.zk = FakeZooKeeper(self.server)
        self.states: list[str] = []
        self.zk.add_state_listener(self.states.append)
        self.zk.start()
        self.other = started(self.server)

    def test_sessions_and_ephemeral_owner(self) -> None:
        """Each session has its own id, the owner of the ephemeral nodes it creates."""
        self.assertEqual(self.states, [CONNECTED])
        self.assertNotEqual(self.zk.session_id, self.other.session_id)
        self.successResultOf(self.zk.create("/e", ephemeral=True))
        self.assertEqual(self.successResultOf(self.other.exists("/e")).ephemeralOwner, self.zk.session_id)
        self.assertEqual(self.zk.client_id[0], self.zk.session_id)

    def test_suspend_and_reconnect(self) -> None:
        """Suspended: operations fail, watches fire NONE; reconnected on the same session, its nodes stay."""
        self.successResultOf(self.zk.create("/e", ephemeral=True))
        events = []
        self.successResultOf(self.zk.exists("/e", watch=events.append))
        session = self.zk.session_id
        self.zk.suspend()
        self.assertEqual([(e.type, e.path) for e in events], [(EventType.NONE, None)])
        self.failureResultOf(self.zk.get("/e"), ConnectionLoss)
        self.zk.reconnect()
        self.assertEqual(self.states, [CONNECTED, SUSPENDED, CONNECTED])
        self.assertEqual(self.zk.session_id, session)
        self.assertIsNotNone(self.successResultOf(self.zk.exists("/e")))

    def test_expire(self) -> None:
        """Expiry deletes the session's ephemerals and fires others' watches; LOST, then a new session."""
        self.successResultOf(self.zk.create("/e", ephemeral=True))
        self.successResultOf(self.zk.create("/p"))
        events = []
        self.successResultOf(self.other.exists("/e", watch=events.append))
        session = self.zk.session_id
        self.zk.expire()
        self.assertEqual([(e.type, e.path) for e in events], [(EventType.DELETED, "/e")])
        self.assertEqual(self.states, [CONNECTED, SUSPENDED, LOST])
        self.assertFalse(self.zk.connected)
        self.zk.reconnect()
        self.assertEqual(self.states, [CONNECTED, SUSPENDED, LOST, CONNECTED])
        self.assertNotEqual(self.zk.session_id, session)
        self.assertIsNone(self.successResultOf(self.zk.exists("/e")))
        self.assertIsNotNone(self.successResultOf(self.zk.exists("/p")))

    def test_expire_while_suspended(self) -> None:
        """A session that expired while disconnected is reported LOST on reconnecting, then CONNECTED."""
        self.zk.suspend()
        self.server.expire(self.zk.session_id)
        self.zk.reconnect()
        self.assertEqual(self.states, [CONNECTED, SUSPENDED, LOST, CONNECTED])

    def test_stop(self) -> None:
        """Closing the session deletes its ephemerals."""
        self.successResultOf(self.zk.create("/e", ephemeral=True))
        self.successResultOf(self.zk.stop())
        self.assertIsNone(self.successResultOf(self.other.exists("/e")))
        self.assertEqual(self.states, [CONNECTED, LOST])


class ChrootTests(SynchronousTestCase):
    def test_split_chroot(self) -> None:
        """A connect string splits into servers and chroot ("" when none, trailing slashes ignored)."""
        self.assertEqual(split_chroot("a:1,b:2/twlog/x"), ("a:1,b:2", "/twlog/x"))
        self.assertEqual(split_chroot("a:1/twlog/"), ("a:1", "/twlog"))
        self.assertEqual(split_chroot("a:1"), ("a:1", ""))
        self.assertEqual(split_chroot("a:1/"), ("a:1", ""))

    def test_missing_chroot_message(self) -> None:
        """One line: the chroot missing, the connect string probably meant, and who creates a chroot."""
        error = missing_chroot("localhost:2181/twlog")
        self.assertIsInstance(error, ZooKeeperUnavailable)
        self.assertEqual(str(error), "ZooKeeper at localhost:2181 has no /twlog: did you mean localhost:2181 "
                         "(no chroot)? (a broker started with --zookeeper localhost:2181/twlog creates /twlog; "
                         "twlog local uses no chroot)")


class ReconnectionLogTests(SynchronousTestCase):
    """While ZooKeeper is down kazoo warns on every attempt to reconnect (every second or two): a session says once
    that it lost ZooKeeper and why, and once that it is back, and kazoo's warnings are debug lines."""

    def session(self) -> tuple[ZooKeeper, Clock, list[tuple[LogLevel, str]]]:
        clock = Clock()
        zk = ZooKeeper("127.0.0.1:1", reactor=clock)
        lines: list[tuple[LogLevel, str]] = []
        zk._log = Logger(namespace="twlog.coord.zk.ZooKeeper",
                         observer=lambda event: lines.append((event["log_level"], formatEvent(event))))
        return zk, clock, lines

    def kazoo_lines(self) -> list[tuple[LogLevel, str]]:
        """What kazoo's warnings become in Twisted's log."""
        lines: list[tuple[LogLevel, str]] = []

        def observe(event: dict) -> None:
            if event.get("log_namespace") == "twlog.coord.zk._ToTwistedLog":
                lines.append((event["log_level"], formatEvent(event)))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        return lines

    def test_one_line_per_loss_and_return(self) -> None:
        zk, clock, lines = self.session()
        kazoo = self.kazoo_lines()
        zk._client.logger.warning("Connection dropped: %s", "socket connection broken")
        zk._client.logger.warning("Transition to CONNECTING")
        zk._tell_state(SUSPENDED)
        for _ in range(5):  # the attempts while the server is down
            clock.advance(1.5)
            zk._client.logger.warning("Connection dropped: %s", "socket connection error: Connection refused")
        zk._tell_state(LOST)  # the session expired meanwhile: still the same loss
        zk._tell_state(CONNECTED)
        self.assertEqual(lines, [
            (LogLevel.warn, "lost ZooKeeper at 127.0.0.1:1 (Connection dropped: socket connection broken); "
                            "reconnecting"),
            (LogLevel.info, "ZooKeeper at 127.0.0.1:1 is back, after 7.5 s"),
        ])
        self.assertEqual({level for level, _ in kazoo}, {LogLevel.debug})
        self.assertEqual(len(kazoo), 7)
        self.assertEqual(kazoo[0][1], "Connection dropped: socket connection broken")
        # The next loss is said again, with its own reason.
        zk._client.logger.warning("Connection time-out: %s", "timed out")
        zk._tell_state(SUSPENDED)
        self.assertEqual(lines[-1], (LogLevel.warn, "lost ZooKeeper at 127.0.0.1:1 (Connection time-out: timed out); "
                                                    "reconnecting"))

    def test_first_connection_and_stop_are_no_loss(self) -> None:
        """Connecting the first time says nothing; neither does the end of a session closed by stop()."""
        zk, clock, lines = self.session()
        zk._tell_state(CONNECTED)
        zk._closing = True  # (what stop() sets before closing the session)
        zk._tell_state(LOST)
        self.assertEqual(lines, [])

    def test_other_kazoo_warnings_stay_warnings(self) -> None:
        zk, _, _ = self.session()
        kazoo = self.kazoo_lines()
        zk._client.logger.warning("Cannot resolve %s: %s", "nowhere", "Name or service not known")
        self.assertEqual(kazoo, [(LogLevel.warn, "Cannot resolve nowhere: Name or service not known")])
