# -*- test-case-name: tests.bench.test_faultproxy -*-
"""A TCP proxy on loopback that cuts a link one way or both ways on demand: L{FaultProxy}.

Put it between a client and a server (a follower and its leader, a broker
and ZooKeeper: start the broker with C{--zookeeper} at the proxy's
L{FaultProxy.address}), then cut and heal the link from a test or a bench,
in the same reactor:

  - C{cut(TO_TARGET)}: the bytes from the clients to the target stop;
    C{cut(FROM_TARGET)}: the bytes from the target to the clients stop;
    C{cut(BOTH)}: both.  The other direction keeps flowing.
  - Mode L{HOLD} (the default), a partition that delays TCP: the proxy keeps
    what it has read of the cut direction and stops reading from that socket,
    so the sender's socket buffers fill and its writes wait (backpressure),
    as when packets are lost and retransmitted.  A close in the cut direction
    is held too.  At L{FaultProxy.heal} everything held is delivered, in
    order, and reading resumes: no byte is lost, as when a partition heals
    before TCP gives up.  A connection accepted while any cut holds is
    connected to the target only at the heal (a handshake cannot cross a cut).
  - Mode L{DROP}, a partition that outlasts TCP: the first bytes that reach
    the proxy in the cut direction are discarded and the connection is closed
    on both sides (aborted), as when retransmissions time out; bytes held
    by an earlier L{HOLD} cut of that direction are dropped the same way.  An
    idle connection stays open until it sends.  A connection accepted while a
    L{DROP} cut is in force is closed at once, never reaching the target.
  - C{kill_connections()}: every connection closed on both sides at once (a
    reset), the proxy still listening.

L{FaultProxy.stats} counts what happened, and L{FaultProxy.wait_until} fires
when a condition on the proxy holds, checked after every event, so tests wait
on events rather than sleep.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.interfaces import IPushProducer, IReactorTCP
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

__all__ = ["BOTH", "DIRECTIONS", "DROP", "FROM_TARGET", "HOLD", "MODES", "TO_TARGET", "FaultProxy", "ProxyStats"]

TO_TARGET = "to_target"
FROM_TARGET = "from_target"
BOTH = "both"
DIRECTIONS = (TO_TARGET, FROM_TARGET, BOTH)
HOLD = "hold"
DROP = "drop"
MODES = (HOLD, DROP)


@attrs.define
class ProxyStats:
    """What the proxy did so far (counters) and holds now (C{held_bytes}, C{waiting}, C{open})."""

    accepted: int = 0
    #: Connections linked to the target (a refused or failed connect is not linked).
    linked: int = 0
    #: Connections closed at once because a L{DROP} cut was in force, or the target could not be reached.
    refused: int = 0
    #: Connections aborted by a L{DROP} cut or L{FaultProxy.kill_connections}.
    killed: int = 0
    forwarded: dict[str, int] = attrs.field(factory=lambda: {TO_TARGET: 0, FROM_TARGET: 0})
    dropped: dict[str, int] = attrs.field(factory=lambda: {TO_TARGET: 0, FROM_TARGET: 0})
    held_bytes: int = 0
    #: Accepted connections waiting for a heal before they are connected to the target.
    waiting: int = 0
    #: Connections with at least one side still open.
    open: int = 0


@implementer(IPushProducer)
class _Half:
    """One direction of one proxied connection: bytes from C{source} to C{sink}, held while cut.

    It is the sink's producer, so a sink that cannot keep up pauses the
    source too; the source reads only when neither the sink nor a cut stops it.
    """

    def __init__(self, link: _Link, direction: str) -> None:
        self.link = link
        self.direction = direction
        self.source: _Side | None = None
        self.sink: _Side | None = None
        self.held: list[bytes] = []
        self.close_held = False
        self.sink_paused = False

    @property
    def holding(self) -> bool:
        return bool(self.held) or self.close_held

    @property
    def reading(self) -> bool:
        """Whether the source socket is being read (False while held or while the sink is full)."""
        return self.source is not None and self.source.reading

    def pauseProducing(self) -> None:
        self.sink_paused = True
        self.update()

    def resumeProducing(self) -> None:
        self.sink_paused = False
        self.update()

    def stopProducing(self) -> None:
        """The sink went; its side's loss closes the link."""

    def update(self) -> None:
        if self.source is not None:
            self.source.set_reading(not (self.sink_paused or self.holding or self.sink is None))

    def hold(self, data: bytes) -> None:
        self.held.append(data)
        self.link.proxy.stats.held_bytes += len(data)
        self.update()

    def release(self) -> None:
        """Deliver what is held, in order, then a held close; and read again."""
        held, self.held = self.held, []
        self.link.proxy.stats.held_bytes -= sum(map(len, held))
        if self.sink is not None:
            for data in held:
                self.sink.transport.write(data)
                self.link.proxy.stats.forwarded[self.direction] += len(data)
            if self.close_held:
                self.close_held = False
                self.sink.transport.loseConnection()
        self.update()

    def drop_held(self) -> int:
        dropped = sum(map(len, self.held))
        self.link.proxy.stats.held_bytes -= dropped
        self.link.proxy.stats.dropped[self.direction] += dropped
        self.held = []
        self.close_held = False
        return dropped


class _Side(Protocol):
    """One socket of a proxied connection; C{incoming} is the direction of the bytes it receives."""

    def __init__(self, link: _Link, incoming: str) -> None:
        self.link = link
        self.incoming = incoming
        self.reading = True
        self.lost = False

    def set_reading(self, reading: bool) -> None:
        if self.lost or reading == self.reading:
            return
        self.reading = reading
        if reading:
            self.transport.resumeProducing()
        else:
            self.transport.pauseProducing()

    def connectionMade(self) -> None:
        self.link.side_made(self)

    def dataReceived(self, data: bytes) -> None:
        self.link.arrived(self.incoming, data)

    def connectionLost(self, reason: Failure = None) -> None:
        self.lost = True
        self.link.side_lost(self)


class _Link:
    """A client's connection and the proxy's connection to the target for it."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.client = _Side(self, TO_TARGET)
        self.target: _Side | None = None
        self.halves = {TO_TARGET: _Half(self, TO_TARGET), FROM_TARGET: _Half(self, FROM_TARGET)}
        self.halves[TO_TARGET].source = self.client
        self.halves[FROM_TARGET].sink = self.client
        self.waiting = False
        self.closed = False

    def side_made(self, side: _Side) -> None:
        if side is self.client:
            self.proxy.accepted(self)
        elif self.closed or self.client.lost:  # the client went while the target was being connected
            side.transport.abortConnection()
            return
        else:
            self.target = side
            to, back = self.halves[TO_TARGET], self.halves[FROM_TARGET]
            to.sink = back.source = side
            side.transport.registerProducer(to, True)
            self.client.transport.registerProducer(back, True)
            self.proxy.stats.linked += 1
            to.update()
            back.update()
        self.proxy.changed()

    def connect(self) -> None:
        """Connect to the target; the client's bytes wait (unread) meanwhile."""
        self.waiting = False
        self.halves[TO_TARGET].update()
        self.proxy.connecting(self)

    def connect_failed(self, failure: Failure) -> None:
        self.proxy.stats.refused += 1
        self.client.transport.abortConnection()

    def arrived(self, direction: str, data: bytes) -> None:
        half = self.halves[direction]
        mode = self.proxy.cut_mode(direction)
        if mode == DROP:
            self.proxy.stats.dropped[direction] += len(data)
            half.drop_held()
            self.abort()
        elif mode == HOLD or half.holding:
            half.hold(data)
        else:
            half.sink.transport.write(data)
            self.proxy.stats.forwarded[direction] += len(data)
        self.proxy.changed()

    def side_lost(self, side: _Side) -> None:
        other = self.target if side is self.client else self.client
        direction = side.incoming
        if other is not None and not other.lost:
            if self.proxy.cut_mode(direction) == HOLD or self.halves[direction].holding:
                self.halves[direction].close_held = True
            else:
                other.transport.loseConnection()
        if side is self.client and self.target is None and self.waiting:
            self.waiting = False
            self.proxy.stats.waiting -= 1
        if self.client.lost and (self.target is None or self.target.lost) and not self.closed:
            self.closed = True
            self.proxy.closed(self)
        self.proxy.changed()

    def cut(self, direction: str, mode: str) -> None:
        if mode == DROP and self.halves[direction].holding:
            self.halves[direction].drop_held()
            self.abort()

    def heal(self, direction: str) -> None:
        self.halves[direction].release()

    def abort(self) -> None:
        if self.closed or all(s is None or s.lost for s in (self.client, self.target)):
            return
        self.proxy.stats.killed += 1
        for side in (self.client, self.target):
            if side is not None and not side.lost:
                side.transport.abortConnection()


class FaultProxy:
    """Listens on C{listen_host}:C{listen_port} (0: any free port) and forwards each connection to the target.

    L{start} before use, L{stop} after (it closes every connection).  Every
    control acts at once, in the reactor's thread.
    """

    def __init__(self, target_host: str, target_port: int, *, reactor: IReactorTCP | None = None,
                 listen_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self.target_host, self.target_port = target_host, target_port
        self._listen = (listen_host, listen_port)
        self._listening = None
        self._cuts: dict[str, str] = {}
        self._links: list[_Link] = []
        self._waiters: list[tuple[Callable[[FaultProxy], bool], Deferred]] = []
        self.stats = ProxyStats()

    async def start(self) -> int:
        """Start listening; the port."""
        factory = Factory.forProtocol(lambda: _Link(self).client)
        endpoint = TCP4ServerEndpoint(self._reactor, self._listen[1], interface=self._listen[0])
        self._listening = await endpoint.listen(factory)
        return self.port

    @property
    def port(self) -> int:
        return self._listening.getHost().port

    @property
    def address(self) -> str:
        """C{host:port} to give clients (a broker's C{--zookeeper}, for instance)."""
        return f"{self._listen[0]}:{self.port}"

    def stop(self) -> Deferred[None]:
        """Stop listening and close every connection."""
        self.kill_connections()
        listening, self._listening = self._listening, None
        return succeed(None) if listening is None else listening.stopListening()

    def cut_mode(self, direction: str) -> str | None:
        """The cut of C{direction} (L{TO_TARGET} or L{FROM_TARGET}) in force: L{HOLD}, L{DROP} or None."""
        return self._cuts.get(direction)

    def cut(self, direction: str = BOTH, mode: str = HOLD) -> None:
        """Cut C{direction} (L{TO_TARGET}, L{FROM_TARGET} or L{BOTH}) in C{mode} (L{HOLD} or L{DROP}).

        @raise ValueError: an unknown direction or mode.
        """
        if direction not in DIRECTIONS or mode not in MODES:
            raise ValueError(f"cut({direction!r}, {mode!r}): direction is one of {DIRECTIONS}, mode one of {MODES}")
        for d in _expand(direction):
            self._cuts[d] = mode
            for link in list(self._links):
                link.cut(d, mode)
        self.changed()

    def heal(self, direction: str = BOTH) -> None:
        """End the cut of C{direction}: held bytes and closes are delivered in order; waiting connections go on.

        @raise ValueError: an unknown direction.
        """
        if direction not in DIRECTIONS:
            raise ValueError(f"heal({direction!r}): direction is one of {DIRECTIONS}")
        for d in _expand(direction):
            self._cuts.pop(d, None)
            for link in list(self._links):
                link.heal(d)
        if not self._cuts:
            for link in [link for link in self._links if link.waiting]:
                self.stats.waiting -= 1
                link.connect()
        self.changed()

    def kill_connections(self) -> int:
        """Abort every connection on both sides; how many there were."""
        links = [link for link in self._links if not link.closed]
        for link in links:
            link.abort()
        return len(links)

    def wait_until(self, condition: Callable[[FaultProxy], bool]) -> Deferred[FaultProxy]:
        """A Deferred that fires with this proxy once C{condition(proxy)} holds (checked now and after each event)."""
        d: Deferred[FaultProxy] = Deferred()
        self._waiters.append((condition, d))
        self.changed()
        return d

    def reading(self, direction: str) -> list[bool]:
        """For each open, linked connection, whether the proxy reads its C{direction}'s source now."""
        return [link.halves[direction].reading for link in self._links if link.target is not None and not link.closed]

    # What the links tell the proxy.

    def accepted(self, link: _Link) -> None:
        self.stats.accepted += 1
        self.stats.open += 1
        self._links.append(link)
        if DROP in self._cuts.values():
            self.stats.refused += 1
            link.client.transport.abortConnection()
        elif self._cuts:
            link.waiting = True
            self.stats.waiting += 1
            link.halves[TO_TARGET].update()
        else:
            link.connect()

    def connecting(self, link: _Link) -> None:
        endpoint = TCP4ClientEndpoint(self._reactor, self.target_host, self.target_port, timeout=10)
        connectProtocol(endpoint, _Side(link, FROM_TARGET)).addErrback(link.connect_failed)

    def closed(self, link: _Link) -> None:
        self.stats.open -= 1
        self._links.remove(link)

    def changed(self) -> None:
        """Fire the waiters whose condition now holds."""
        ready = [(c, d) for c, d in self._waiters if c(self)]
        for entry in ready:
            self._waiters.remove(entry)
        for _, d in ready:
            d.callback(self)


def _expand(direction: str) -> tuple[str, ...]:
    return (TO_TARGET, FROM_TARGET) if direction == BOTH else (direction,)
