"""The fault proxy on real loopback sockets: forwarding, one-way and two-way cuts (held and dropped), kills.

Every wait is on an event (bytes arrived, a connection made or lost, the
proxy's own counters); nothing sleeps.
"""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import TestCase

from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.bench.faultproxy import BOTH, DROP, FROM_TARGET, HOLD, TO_TARGET, FaultProxy
from twlog.coord.zk import CONNECTED, SUSPENDED, ZooKeeper


class Peer(Protocol):
    """One end of a test connection: records what it receives; waits for a byte count or the close."""

    def __init__(self) -> None:
        self.received = b""
        self.made: Deferred = Deferred()
        self.closed: Deferred = Deferred()
        self._waits: list[tuple[int, Deferred]] = []

    def connectionMade(self) -> None:
        self.made.callback(self)

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        for entry in [(n, d) for n, d in self._waits if len(self.received) >= n]:
            self._waits.remove(entry)
            entry[1].callback(self.received)

    def connectionLost(self, reason=None) -> None:
        for _, d in self._waits:
            d.errback(AssertionError(f"closed after {len(self.received)} bytes"))
        self._waits = []
        self.closed.callback(None)

    def until(self, count: int) -> Deferred:
        d: Deferred = Deferred()
        self._waits.append((count, d))
        self.dataReceived(b"")
        return d


class Target:
    """A loopback server whose accepted connections are L{Peer}s, handed out in order."""

    def __init__(self) -> None:
        self.peers: list[Peer] = []
        self._next: list[Deferred] = []

    def build(self) -> Peer:
        peer = Peer()
        self.peers.append(peer)
        peer.made.addCallback(self._made)
        return peer

    def _made(self, peer: Peer) -> Peer:
        if self._next:
            self._next.pop(0).callback(peer)
        return peer

    def accepted(self, index: int) -> Deferred:
        """The index-th accepted connection, once made."""
        if index < len(self.peers):
            return Deferred.fromCoroutine(_made(self.peers[index]))
        d: Deferred = Deferred()
        self._next.append(d)
        return d


async def _made(peer: Peer) -> Peer:
    return peer if peer.made.called else await peer.made


class FaultProxyTests(TestCase):
    timeout = 30

    async def setup(self) -> None:
        self.target = Target()
        endpoint = TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1")
        listening = await endpoint.listen(Factory.forProtocol(self.target.build))
        self.addCleanup(listening.stopListening)
        self.proxy = FaultProxy("127.0.0.1", listening.getHost().port, reactor=reactor)
        await self.proxy.start()
        self.addCleanup(self.proxy.stop)

    async def connect(self) -> Peer:
        client = Peer()
        await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", self.proxy.port), client)
        self.addCleanup(lambda: client.transport.abortConnection() if not client.closed.called else None)
        return client

    async def linked(self, index: int = 0) -> tuple[Peer, Peer]:
        client = await self.connect()
        server = await self.target.accepted(index)
        await self.proxy.wait_until(lambda p: p.stats.linked > index)
        return client, server

    async def test_forwards_both_ways_in_order(self) -> None:
        await self.setup()
        client, server = await self.linked()
        client.transport.write(b"ping-1 ")
        client.transport.write(b"ping-2")
        self.assertEqual(await server.until(13), b"ping-1 ping-2")
        server.transport.write(b"pong")
        self.assertEqual(await client.until(4), b"pong")
        self.assertEqual(self.proxy.stats.forwarded, {TO_TARGET: 13, FROM_TARGET: 4})
        self.assertEqual(self.proxy.address, f"127.0.0.1:{self.proxy.port}")

    async def test_one_way_hold_to_target(self) -> None:
        """Client bytes are held while the target's bytes still reach the client; the heal delivers in order."""
        await self.setup()
        client, server = await self.linked()
        self.proxy.cut(TO_TARGET)
        client.transport.write(b"held")
        await self.proxy.wait_until(lambda p: p.stats.held_bytes == 4)
        self.assertEqual(self.proxy.reading(TO_TARGET), [False])
        self.assertEqual(self.proxy.reading(FROM_TARGET), [True])
        server.transport.write(b"answer")
        self.assertEqual(await client.until(6), b"answer")
        self.assertEqual(server.received, b"")
        self.proxy.heal()
        client.transport.write(b"+after")
        self.assertEqual(await server.until(10), b"held+after")
        self.assertEqual(self.proxy.stats.held_bytes, 0)

    async def test_one_way_hold_from_target(self) -> None:
        await self.setup()
        client, server = await self.linked()
        self.proxy.cut(FROM_TARGET, HOLD)
        server.transport.write(b"late")
        await self.proxy.wait_until(lambda p: p.stats.held_bytes == 4)
        client.transport.write(b"request")
        self.assertEqual(await server.until(7), b"request")
        self.assertEqual(client.received, b"")
        self.proxy.heal(FROM_TARGET)
        self.assertEqual(await client.until(4), b"late")

    async def test_hold_applies_backpressure_and_loses_nothing(self) -> None:
        """The proxy stops reading a held direction, so the sender's buffers fill; all of it arrives after."""
        await self.setup()
        client, server = await self.linked()
        self.proxy.cut(BOTH)
        data = bytes(range(256)) * (16 * 1024)  # 4 MiB
        client.transport.write(data)
        await self.proxy.wait_until(lambda p: p.stats.held_bytes > 0)
        self.assertEqual(self.proxy.reading(TO_TARGET), [False])
        self.assertLessEqual(self.proxy.stats.held_bytes, 256 * 1024)
        self.proxy.heal()
        self.assertEqual(await server.until(len(data)), data)

    async def test_connection_during_a_hold_waits_for_the_heal(self) -> None:
        await self.setup()
        self.proxy.cut(BOTH)
        client = await self.connect()
        client.transport.write(b"hello")
        await self.proxy.wait_until(lambda p: p.stats.waiting == 1)
        self.assertEqual(self.target.peers, [])
        self.proxy.heal()
        server = await self.target.accepted(0)
        self.assertEqual(await server.until(5), b"hello")

    async def test_close_is_held_with_the_bytes(self) -> None:
        await self.setup()
        client, server = await self.linked()
        self.proxy.cut(TO_TARGET)
        client.transport.write(b"last words")
        await self.proxy.wait_until(lambda p: p.stats.held_bytes == 10)
        client.transport.loseConnection()
        await client.closed
        self.assertFalse(server.closed.called)
        self.proxy.heal()
        await server.closed
        self.assertEqual(server.received, b"last words")
        await self.proxy.wait_until(lambda p: p.stats.open == 0)

    async def test_drop_closes_both_sides_at_the_first_byte(self) -> None:
        await self.setup()
        client, server = await self.linked()
        self.proxy.cut(TO_TARGET, DROP)
        server.transport.write(b"still flows")
        self.assertEqual(await client.until(11), b"still flows")
        client.transport.write(b"lost")
        await client.closed
        await server.closed
        self.assertEqual(server.received, b"")
        self.assertEqual((self.proxy.stats.dropped[TO_TARGET], self.proxy.stats.killed), (4, 1))

    async def test_drop_after_hold_drops_the_held_bytes(self) -> None:
        await self.setup()
        client, server = await self.linked()
        self.proxy.cut(FROM_TARGET)
        server.transport.write(b"xyz")
        await self.proxy.wait_until(lambda p: p.stats.held_bytes == 3)
        self.proxy.cut(FROM_TARGET, DROP)
        await client.closed
        await server.closed
        self.assertEqual((client.received, self.proxy.stats.dropped[FROM_TARGET]), (b"", 3))

    async def test_connection_during_a_drop_is_refused(self) -> None:
        await self.setup()
        self.proxy.cut(BOTH, DROP)
        client = await self.connect()
        await client.closed
        self.assertEqual((self.proxy.stats.refused, self.target.peers), (1, []))
        self.proxy.heal()
        again, server = await self.linked(0)
        again.transport.write(b"ok")
        self.assertEqual(await server.until(2), b"ok")

    async def test_kill_connections(self) -> None:
        await self.setup()
        first, server1 = await self.linked(0)
        second, server2 = await self.linked(1)
        self.assertEqual(self.proxy.kill_connections(), 2)
        for peer in (first, server1, second, server2):
            await peer.closed
        await self.proxy.wait_until(lambda p: p.stats.open == 0)
        third, server3 = await self.linked(2)
        third.transport.write(b"new")
        self.assertEqual(await server3.until(3), b"new")

    async def test_target_down_closes_the_client(self) -> None:
        endpoint = TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1")
        listening = await endpoint.listen(Factory.forProtocol(Protocol))
        port = listening.getHost().port
        await listening.stopListening()
        proxy = FaultProxy("127.0.0.1", port, reactor=reactor)
        await proxy.start()
        self.addCleanup(proxy.stop)
        client = Peer()
        await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", proxy.port), client)
        await client.closed
        self.assertEqual((proxy.stats.refused, proxy.stats.linked), (1, 0))

    def test_bad_arguments(self) -> None:
        proxy = FaultProxy("127.0.0.1", 1, reactor=reactor)
        with self.assertRaises(ValueError):
            proxy.cut("sideways")
        with self.assertRaises(ValueError):
            proxy.cut(BOTH, "lose")
        with self.assertRaises(ValueError):
            proxy.heal("up")


class ZooKeeperThroughTheProxyTests(TestCase):
    """A twlog ZooKeeper session through the proxy, as a broker started with --zookeeper at the proxy has."""

    timeout = 60

    async def session(self) -> tuple[FaultProxy, ZooKeeper, list[str]]:
        hosts = fresh_connect_string()
        server, _, chroot = hosts.partition("/")
        host, _, port = server.partition(":")
        proxy = FaultProxy(host, int(port), reactor=reactor)
        await proxy.start()
        self.addCleanup(proxy.stop)
        zk = await connect(self, f"{proxy.address}/{chroot}", session_timeout_s=6.0)
        states: list[str] = []
        zk.add_state_listener(states.append)
        return proxy, zk, states

    async def test_one_way_cut_suspends_and_the_heal_keeps_the_session(self) -> None:
        """Answers held (FROM_TARGET): the session is suspended; healed in time, it goes on with the same id."""
        proxy, zk, states = await self.session()
        session = zk.session_id
        await zk.create("/before", b"1")
        proxy.cut(FROM_TARGET)
        await until_state(zk, SUSPENDED)
        self.assertGreater(proxy.stats.forwarded[TO_TARGET], 0)
        proxy.heal()
        await until_state(zk, CONNECTED)
        self.assertEqual((zk.session_id, states), (session, [SUSPENDED, CONNECTED]))
        self.assertEqual((await zk.get("/before"))[0], b"1")

    async def test_dropped_connections_reconnect_after_the_heal(self) -> None:
        proxy, zk, states = await self.session()
        proxy.cut(BOTH, DROP)
        proxy.kill_connections()
        await until_state(zk, SUSPENDED)
        await proxy.wait_until(lambda p: p.stats.refused > 0)  # kazoo's reconnections are refused meanwhile
        proxy.heal()
        await until_state(zk, CONNECTED)
        await zk.create("/after", b"2")
        self.assertEqual((await zk.get("/after"))[0], b"2")


def until_state(zk: ZooKeeper, state: str) -> Deferred:
    """Fires at the session's next change to C{state}."""
    d: Deferred = Deferred()

    def listener(now: str) -> None:
        if now == state and not d.called:
            zk.remove_state_listener(listener)
            d.callback(now)

    zk.add_state_listener(listener)
    return d
