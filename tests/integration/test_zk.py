"""The kazoo adapter against a real ZooKeeper server: Deferreds, watches and session events on the reactor thread."""

from __future__ import annotations

import threading

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from tests.integration.zookeeper import connect, expire_session, zookeeper_server
from twlog.coord import paths
from twlog.coord.zk import LOST, NodeExistsError, NoNodeError, ZooKeeper, ZooKeeperUnavailable
from twlog.coord.zkserver import ZooKeeperNotFound, find_classpath, four_letter_word


class ZooKeeperTests(TestCase):
    timeout = 60

    async def test_create_get_set_delete(self) -> None:
        """The basic operations round-trip values and raise kazoo's typed errors."""
        zk = await connect(self)
        self.assertEqual(await zk.create("/a/b", b"one", makepath=True), "/a/b")
        value, stat = await zk.get("/a/b")
        self.assertEqual((value, stat.version), (b"one", 0))
        await zk.set("/a/b", b"two")
        self.assertEqual((await zk.get("/a/b"))[0], b"two")
        self.assertEqual(await zk.children("/a"), ["b"])
        with self.assertRaises(NodeExistsError):
            await zk.create("/a/b")
        await zk.delete("/a/b")
        self.assertIsNone(await zk.exists("/a/b"))
        with self.assertRaises(NoNodeError):
            await zk.get("/a/b")

    async def test_set_or_create(self) -> None:
        """set_or_create writes a value whether or not the node (and its parents) exist."""
        zk = await connect(self)
        await zk.set_or_create("/x/y/z", b"1")
        await zk.set_or_create("/x/y/z", b"2")
        self.assertEqual((await zk.get("/x/y/z"))[0], b"2")

    async def test_results_and_watches_on_reactor_thread(self) -> None:
        """Callbacks and watch events run on the reactor thread, not kazoo's."""
        zk = await connect(self)
        main = threading.current_thread()
        await zk.ensure_path("/w")
        fired: Deferred = Deferred()
        await zk.children("/w", watch=lambda event: fired.callback((event, threading.current_thread())))
        await zk.create("/w/child")
        event, thread = await fired
        self.assertIs(thread, main)
        self.assertEqual(event.path, "/w")

    async def test_a_watch_set_again_fires_once(self) -> None:
        """The same watch function given on every read of a node fires once at its change, not once per read
        (a ClusterView reads a node again at each change of its topic: piled-up watches made re-read storms)."""
        zk = await connect(self)
        await zk.create("/once", b"0")
        fired: list = []

        def watch(event) -> None:
            fired.append(event.path)

        for _ in range(5):
            await zk.get("/once", watch=watch)
        await zk.set("/once", b"1")
        await zk.get("/once")  # (after the change: its watch events came first, on the same connection)
        await deferLater(reactor, 0.1, lambda: None)  # (the events' hop to the reactor thread)
        self.assertEqual(fired, ["/once"])

    async def test_ephemeral_nodes_go_with_the_session(self) -> None:
        """An ephemeral node disappears when its session is closed; another session sees it go."""
        hosts = (await connect(self)).hosts
        owner = ZooKeeper(hosts)
        await owner.start()
        await owner.create(paths.broker_id_path(1), b"127.0.0.1:9092", ephemeral=True, makepath=True)
        observer = await connect(self, hosts)
        gone: Deferred = Deferred()
        await observer.exists(paths.broker_id_path(1), watch=gone.callback)
        await owner.stop()
        await gone
        self.assertIsNone(await observer.exists(paths.broker_id_path(1)))

    async def test_session_expiry_is_reported(self) -> None:
        """An expired session is reported as LOST on the reactor thread."""
        zk = await connect(self)
        lost: Deferred = Deferred()
        zk.add_state_listener(lambda state: state == LOST and not lost.called and lost.callback(state))
        expire_session(zk)
        self.assertEqual(await lost, LOST)

    async def test_unreachable(self) -> None:
        """A server that is not there is ZooKeeperUnavailable after the connect timeout, not a hang."""
        zk = ZooKeeper("127.0.0.1:1", connect_timeout_s=1)
        with self.assertRaises(ZooKeeperUnavailable):
            await zk.start()


class ServerTests(SynchronousTestCase):
    def test_server_answers_on_loopback(self) -> None:
        """The suite's server is a real ZooKeeper answering four-letter commands on 127.0.0.1."""
        server = zookeeper_server()
        self.assertEqual(four_letter_word(server.port), b"imok")
        self.assertIn(b"Zookeeper version: 3.", four_letter_word(server.port, b"srvr"))

    def test_missing_jars(self) -> None:
        """Without any ZooKeeper jars the error says how to get them."""
        e = self.assertRaises(ZooKeeperNotFound, find_classpath, pyspark_locations=list, debian_libs=())
        self.assertIn("pip install 'twlog[local]'", str(e))


async def _script(a, b, expire, settle) -> list:
    """One sequence of operations on two sessions C{a} and C{b} of one tree; what each returned, and the events.

    C{expire()} expires C{a}'s session (which then reconnects on a new one);
    C{settle(events, states)} waits for the watch events and session states due
    by then (a real server's arrive on their own time).
    """
    out: list = []
    events: list = []
    states: list = []
    a.add_state_listener(states.append)

    def watch(tag):
        return lambda event: events.append((tag, event.type, event.path))

    async def do(label, d):
        try:
            result = await d
        except Exception as e:
            out.append((label, "error", type(e).__name__))
            return None
        if isinstance(result, tuple) and len(result) == 2:  # get: (value, stat)
            result = (result[0], result[1].version)
        elif isinstance(result, list):  # children: in no particular order
            result = sorted(result)
        out.append((label, result if not hasattr(result, "version") else ("stat", result.version)))
        return result

    await do("create", a.create("/p/q", b"1", makepath=True))
    await do("create again", a.create("/p/q"))
    await do("create orphan", a.create("/none/x"))
    await do("exists missing", b.exists("/p/e", watch=watch("b exists /p/e")))
    await do("children", b.children("/p", watch=watch("b children /p")))
    await do("ephemeral", a.create("/p/e", b"eph", ephemeral=True))
    value, stat = await a.get("/p/e", watch=watch("a get /p/e"))
    out.append(("get", value, stat.version, stat.ephemeralOwner == a.session_id))
    await do("get watch b", b.get("/p/e", watch=watch("b get /p/e")))
    await do("set", a.set("/p/q", b"2", version=0))
    await do("set bad version", a.set("/p/q", b"3", version=0))
    await do("sequence", a.create("/p/s-", sequence=True))
    await do("children after", a.children("/p", watch=watch("a children /p")))
    await do("delete not empty", a.delete("/p"))
    await do("delete missing", a.delete("/p/none"))
    await do("get missing", a.get("/p/none"))
    await do("set_or_create", a.set_or_create("/r/s", b"x"))
    await do("read back", a.get("/r/s"))
    await settle(events, states)
    expire()
    await settle(events, states)
    await do("ephemeral gone", b.exists("/p/e"))
    await do("persistent stays", b.exists("/p/q"))
    out.append(("states", states))
    out.append(("events", sorted(events, key=repr)))
    return out


class FakeMatchesServerTests(TestCase):
    """The in-memory fake of the unit tests answers as a real ZooKeeper (through the adapter) does."""

    timeout = 60
    maxDiff = None

    async def test_same_script_same_results(self) -> None:
        server = FakeZooKeeperServer()
        fake_a, fake_b = FakeZooKeeper(server), FakeZooKeeper(server)
        await fake_a.start()
        await fake_b.start()

        checkpoints = []

        async def fake_settle(events, states) -> None:
            checkpoints.append((len(events), list(states)))

        def fake_expire() -> None:
            fake_a.expire()
            fake_a.reconnect()

        expected = await _script(fake_a, fake_b, fake_expire, fake_settle)

        real_a = await connect(self)
        real_b = await connect(self, real_a.hosts)

        async def real_settle(events, states) -> None:
            count, expected_states = checkpoints.pop(0)
            for _ in range(1000):
                if len(events) >= count and states == expected_states:
                    return
                await deferLater(reactor, 0.01, lambda: None)

        actual = await _script(real_a, real_b, lambda: expire_session(real_a), real_settle)
        self.assertEqual(actual, expected)
