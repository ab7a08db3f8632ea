# -*- test-case-name: tests.coord.test_registration,tests.integration.test_registration -*-
"""L{BrokerNodes}: one broker's nodes in ZooKeeper, and how they are written and deleted.

Kafka 0.7's broker registry (shared/DESIGN.md, "ZooKeeper layout"): the ephemeral
C{/brokers/ids/<id>} (L{broker_value}), the ephemeral C{/brokers/topics/<topic>/<id>},
and twlog's persistent record C{/twlog/held/<topic>/<id>}, kept after the session
goes.  When to write them is L{twlog.coord.registration.BrokerRegistration}'s.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred, DeferredList, TimeoutError
from twisted.logger import Logger

from twlog.coord import paths
from twlog.coord import zk as zk_module
from twlog.coord.layout import parse_broker_address
from twlog.coord.zk import IZooKeeper, KazooException, NodeExistsError, NoNodeError
from twlog.errors import TwlogError
from twlog.partition import address_text

__all__ = ["BrokerIdInUse", "BrokerNodes", "broker_address", "broker_value"]

_OURS = object()  # _create_or_adopt: the node is held by this session now
_GONE = object()  # _create_or_adopt: the node vanished meanwhile


class BrokerIdInUse(TwlogError):
    """Another live broker is registered in ZooKeeper under this broker's id."""


def broker_address(host: str, port: int) -> str:
    """C{host:port}, an IPv6 host in brackets: how log lines name a broker."""
    return address_text(host, port)


def broker_value(host: str, port: int, created_ms: int) -> str:
    """The value of C{/brokers/ids/<id>}, Kafka 0.7's C{Broker.getZKString}: C{<creator id>:<host>:<port>},
    the creator id being C{<host>-<created_ms>}.  An IPv6 host is in brackets (in the creator id too)."""
    name = f"[{host}]" if ":" in host else host
    return f"{name}-{created_ms}:{name}:{port}"


def _describe(value: bytes) -> str:
    """A registration value as C{host:port} for messages (as stored, if it does not parse)."""
    try:
        return broker_address(*parse_broker_address(value))
    except ValueError:
        return value.decode("utf-8", "replace")


def _same_address(a: bytes, b: bytes) -> bool:
    """Whether two registration values name one host and port (whatever their creator ids)."""
    try:
        return parse_broker_address(a) == parse_broker_address(b)
    except ValueError:
        return a == b


class BrokerNodes:
    """One broker's nodes in one ZooKeeper session: what to write and how (L{BrokerRegistration} says when).

    It claims C{/brokers/ids/<id>} with L{value}, or adopts it if the session holds
    it already, waiting out a registration of this broker's own address left by an
    earlier run; registers its topics; deletes the nodes a session owns.
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper, broker_id: int, value: str, clock, endpoints: bytes | None = None) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self.value = value
        self._clock = clock
        #: The value of C{/twlog/brokers/endpoints/<id>} (L{twlog.coord.endpoints}); None: not written.
        self.endpoints = endpoints

    async def claim_id(self, stale_wait_s: float) -> None:
        """Create (or adopt) C{/brokers/ids/<id>}; wait up to C{stale_wait_s} for a registration of this
        broker's own address, left by an earlier run, to expire.

        @raise BrokerIdInUse: another live broker (or a persistent node) holds the id.
        """
        path = paths.broker_id_path(self.broker_id)
        value = self.value.encode("utf-8")
        deadline = self._clock.seconds() + stale_wait_s
        while True:
            held = await self._create_or_adopt(path, value)
            if held is _OURS:
                return True
            if held is _GONE:
                continue  # deleted meanwhile: try again
            current, stat = held
            owner = stat.ephemeralOwner
            holder = _describe(current)
            if not owner:
                raise BrokerIdInUse(
                    f"broker id {self.broker_id} is already registered at {holder} by a persistent node, "
                    f"not by a live broker; delete {path} if no broker uses this id"
                )
            remaining = deadline - self._clock.seconds()
            same = _same_address(current, value)  # a previous run of this broker (its creator id differs)
            if not same or remaining <= 0:
                expired = " (its session did not expire in time)" if same else ""
                raise BrokerIdInUse(
                    f"broker id {self.broker_id} is already registered by a live broker at {holder}{expired}"
                )
            self._log.info(
                "broker {id}: waiting up to {seconds:.0f} s for the registration of a previous run at {address} "
                "(session {session:#x}) to expire", id=self.broker_id, seconds=remaining, address=holder,
                session=owner,
            )
            await self._changed(path, remaining)

    async def _create_or_adopt(self, path: str, value: bytes):
        """Create C{path} (ephemeral, C{value}), or take it if this session already holds it.

        @return: L{_OURS} when the node is now ours with C{value}; L{_GONE} when it
            vanished between the attempts (try again); else the other holder's
            (value, stat).
        """
        try:
            await self._zk.create(path, value, ephemeral=True, makepath=True)
            return _OURS
        except NodeExistsError:
            pass
        try:
            current, stat = await self._zk.get(path)
        except NoNodeError:
            return _GONE
        if stat.ephemeralOwner and stat.ephemeralOwner == self._zk.session_id:
            if current != value:
                await self._zk.set(path, value, stat.version)
            return _OURS
        return current, stat

    async def _changed(self, path: str, timeout_s: float) -> None:
        """Wait until C{path} changes or goes, at most C{timeout_s}."""
        event: Deferred = Deferred()
        stat = await self._zk.exists(path, watch=lambda e: None if event.called else event.callback(e))
        if stat is None:
            return
        event.addTimeout(timeout_s, self._clock)
        try:
            await event
        except TimeoutError:
            pass  # the caller checks the deadline

    async def register_topic(self, topic: str, count: int, check: Callable[[], None]) -> bool:
        """Create (or take over) C{/brokers/topics/<topic>/<id>} with C{count}; C{check()} before each try
        raises if the work has become stale.  A replicated topic (C{/twlog/topics/<topic>}) is not registered
        so: its partitions here are replicas, led as its state says; return whether it was registered."""
        path = paths.broker_topic_path(topic, self.broker_id)
        value = str(count).encode("ascii")
        check()
        if await self._zk.exists(paths.replicated_topic_path(topic)) is not None:
            return False
        # The persistent record first: a reader woken by the registration's watch finds it there already.
        await self._remember_topic(topic, value)
        for _ in range(5):
            check()
            held = await self._create_or_adopt(path, value)
            if held is _OURS:
                return True
            if held is _GONE:
                continue
            _, stat = held
            # Left by an earlier session of this broker id, which we now hold: replace it.
            try:
                await self._zk.delete(path, stat.version)
            except NoNodeError:
                pass
        raise KazooException(f"could not register {path}: it keeps changing")

    async def write_endpoints(self) -> None:
        """Create (or take over) the ephemeral C{/twlog/brokers/endpoints/<id>} with L{endpoints} (after
        L{claim_id}: a node left by an earlier session of this id is replaced)."""
        if self.endpoints is None:
            return
        path = paths.broker_endpoints_path(self.broker_id)
        for _ in range(5):
            held = await self._create_or_adopt(path, self.endpoints)
            if held is _OURS:
                return
            if held is not _GONE:
                try:
                    await self._zk.delete(path, held[1].version)
                except NoNodeError:
                    pass
        raise KazooException(f"could not register {path}: it keeps changing")

    async def _remember_topic(self, topic: str, value: bytes) -> None:
        """Keep C{/twlog/held/<topic>/<id>} (persistent) equal to the registration: it outlives this session."""
        path = paths.held_path(topic, self.broker_id)
        try:
            current, _ = await self._zk.get(path)
        except NoNodeError:
            current = None
        if current != value:
            await self._zk.set_or_create(path, value)

    async def deregister_topic(self, topic: str) -> None:
        """Delete C{/brokers/topics/<topic>/<id>} (the topic was deleted here) where the current session owns it,
        then C{/brokers/topics/<topic>} if no other broker's node is left under it; and this broker's record
        C{/twlog/held/<topic>/<id>} (then C{/twlog/held/<topic>} if it was the last)."""
        await self._delete_if_owned(paths.broker_topic_path(topic, self.broker_id), self._zk.session_id)
        for path in (paths.broker_topic_path(topic), paths.held_path(topic, self.broker_id), paths.held_path(topic)):
            try:
                await self._zk.delete(path)
            except (NoNodeError, zk_module.NotEmptyError):
                pass  # gone already, or another broker still holds the topic (the last one deletes it)

    async def delete_owned(self, topics: list[str]) -> None:
        """Delete the id node and the nodes of C{topics} where the current session owns them."""
        session = self._zk.session_id
        ours = [paths.broker_id_path(self.broker_id), paths.broker_endpoints_path(self.broker_id)]
        ours += [paths.broker_topic_path(topic, self.broker_id) for topic in topics]
        await DeferredList([Deferred.fromCoroutine(self._delete_if_owned(p, session)) for p in ours],
                           consumeErrors=True)

    async def _delete_if_owned(self, path: str, session: int | None) -> None:
        stat = await self._zk.exists(path)
        if stat is not None and stat.ephemeralOwner == session:
            try:
                await self._zk.delete(path, stat.version)
            except NoNodeError:
                pass
