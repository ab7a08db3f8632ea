# -*- test-case-name: tests.client.test_pool,tests.producer.test_producer -*-
"""L{ConnectionPool}: one connection per broker, opened and retired as brokers come and go.

With a static broker list, the pool holds a connection per address given, and
learns each one's broker id from its METADATA answer (two addresses of one
broker: the first is kept).  With ZooKeeper, L{ConnectionPool.follow} is given
the live brokers after every change: it opens connections to the brokers that
joined and retires (closes) those of the brokers that left or moved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.client.connection import IBrokerConnection
from twlog.partition import address_text

#: Opens a connection to C{(host, port)}.
ConnectionFactory = Callable[[str, int], IBrokerConnection]


class ConnectionPool:
    """The connections a client keeps, by broker id; L{close} closes every one."""

    _log = Logger()

    def __init__(self, connection_factory: ConnectionFactory, addresses: Iterable[tuple[str, int]] = ()) -> None:
        self._factory = connection_factory
        #: The connections to the static addresses given (empty when following ZooKeeper).
        self.static: list[IBrokerConnection] = [connection_factory(host, port) for host, port in addresses]
        self._by_id: dict[int, IBrokerConnection] = {}
        self._retiring: set[Deferred] = set()

    def get(self, broker_id: int) -> IBrokerConnection | None:
        """The connection to broker C{broker_id}, if the pool has one."""
        return self._by_id.get(broker_id)

    def __contains__(self, broker_id: int) -> bool:
        return broker_id in self._by_id

    def learned(self, broker_id: int, connection: IBrokerConnection) -> None:
        """A static connection answered as broker C{broker_id} (the first connection to a broker is kept)."""
        self._by_id.setdefault(broker_id, connection)

    def add(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        """Open connections to the brokers in C{brokers} (id -> address) the pool has none for; retire nothing
        (a static broker described its cluster: the brokers it named join the pool)."""
        for broker_id, (host, port) in sorted(brokers.items()):
            if broker_id not in self._by_id:
                self._by_id[broker_id] = self._factory(host, port)
                self._log.info("broker {id} at {address} joined", id=broker_id, address=address_text(host, port))

    def follow(self, live: Mapping[int, tuple[str, int]]) -> None:
        """Match the live brokers (id -> address): open connections to new ones, retire those gone or moved."""
        for broker_id, connection in list(self._by_id.items()):
            if live.get(broker_id) != (connection.host, connection.port):
                del self._by_id[broker_id]
                self._log.info("broker {id} at {address} left", id=broker_id, address=connection.address)
                self._retire(connection)
        for broker_id, (host, port) in sorted(live.items()):
            if broker_id not in self._by_id:
                connection = self._by_id[broker_id] = self._factory(host, port)
                self._log.info("broker {id} at {address} joined", id=broker_id, address=connection.address)

    def write_gathered(self) -> None:
        """Hand the fire-and-forget frames each connection has gathered to its transport now
        (L{twlog.client.writes.FrameWriter}), not at the next reactor turn."""
        for connection in {id(c): c for c in [*self.static, *self._by_id.values()]}.values():
            protocol = connection.ready()
            if protocol is not None:
                protocol.writer.flush()

    def close(self) -> Deferred[None]:
        """Close every connection (and wait for those being retired)."""
        connections = {id(c): c for c in [*self.static, *self._by_id.values()]}.values()
        closing = [c.close() for c in connections] + list(self._retiring)
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)

    def _retire(self, connection: IBrokerConnection) -> None:
        """Close the connection to a broker that left; L{close} waits for it."""
        d = connection.close().addErrback(
            lambda f: self._log.warn("closing {address}: {error}", address=connection.address,
                                     error=f.getErrorMessage())
        )
        self._retiring.add(d)
        d.addBoth(lambda _: self._retiring.discard(d))
