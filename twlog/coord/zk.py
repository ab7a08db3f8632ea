# -*- test-case-name: tests.coord.test_zk,tests.integration.test_zk -*-
"""ZooKeeper for Twisted code: kazoo behind Deferreds, with watches and session events on the reactor thread.

The design card names txzookeeper; it is Python 2 only (last released in 2013,
built on the zkpython C bindings) and cannot run on Python 3.  kazoo is the
maintained Python 3 client.  Its calls complete and its watches fire on
kazoo's own threads, so this adapter hands every result, watch event and
session change to the reactor thread with C{callFromThread}; the rest of
twlog sees only Deferreds and reactor-thread callbacks.  This is the only
module that imports kazoo.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (  # noqa: F401  (re-exported: callers catch these)
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat  # noqa: F401
from kazoo.retry import KazooRetry
from kazoo.security import ACL as KazooACL
from kazoo.security import Id
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from zope.interface import Attribute, Interface, implementer

from twlog.coord.probe import describe_answer
from twlog.coord.zkauth import ACL, ZooKeeperCredentials, acl_for, node_acl
from twlog.coord.zkconnect import MissingChroot, ZooKeeperUnavailable, missing_chroot, split_chroot  # noqa: F401

#: Session states handed to state listeners.
CONNECTED = "connected"
SUSPENDED = "suspended"  # connection lost; the session may still be alive
LOST = "lost"  # the session expired: ephemeral nodes and watches are gone

_STATES = {KazooState.CONNECTED: CONNECTED, KazooState.SUSPENDED: SUSPENDED, KazooState.LOST: LOST}


#: kazoo's warnings on each failed attempt to reach the server: while ZooKeeper is down they repeat every second
#: or two, so they are debug lines; the session says once that it lost ZooKeeper, and once that it is back.
_RETRY_CHATTER = ("Connection dropped", "Connection time-out", "Transition to CONNECTING", "Session has expired")


class _ToTwistedLog(logging.Handler):
    """kazoo logs with the standard library: pass its warnings on to Twisted's log, under one namespace.

    The warnings of its reconnection loop become debug lines; the last one is kept by the session that logged it
    (L{ZooKeeper}, through a C{LoggerAdapter}) to say why it lost ZooKeeper.
    """

    _log = Logger(namespace="kazoo")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.levelno >= logging.WARNING and message.startswith(_RETRY_CHATTER):
            session = getattr(record, "twlog_session", None)
            if session is not None and message.startswith(("Connection dropped", "Connection time-out")):
                session.last_drop = message
            self._log.debug("{kazoo_message}", kazoo_message=message)
        elif record.levelno >= logging.WARNING:
            self._log.warn("{kazoo_message}", kazoo_message=message)
        else:
            self._log.debug("{kazoo_message}", kazoo_message=message)


_kazoo_logger = logging.getLogger("kazoo")
if not any(isinstance(h, _ToTwistedLog) for h in _kazoo_logger.handlers):
    _kazoo_logger.addHandler(_ToTwistedLog())
    _kazoo_logger.propagate = False


def _start_kazoo(client: KazooClient, hosts: str, timeout_s: float, create_chroot: bool,
                 credentials: ZooKeeperCredentials | None = None) -> None:
    """Start C{client} (a kazoo session on C{hosts}) and check its chroot, creating it if asked.

    @raise ZooKeeperUnavailable: no session within C{timeout_s} (the client is stopped).
    @raise MissingChroot: the chroot does not exist and C{create_chroot} is false (the client is stopped).
    """
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "No chroot path exists")  # checked below, with a better message
            client.start(timeout=timeout_s)
    except Exception as e:
        client.stop()
        client.close()
        answered = describe_answer(hosts)  # a broker's port given as ZooKeeper's, say
        raise ZooKeeperUnavailable(f"cannot reach ZooKeeper at {hosts} within {timeout_s:g} s "
                                   f"({answered or e})") from None
    servers, chroot = split_chroot(hosts)
    if not chroot or client.exists("/") is not None:
        return
    if create_chroot:
        root = KazooClient(servers, timeout=timeout_s, auth_data=credentials.auth_data if credentials else None)
        try:
            root.start(timeout=timeout_s)
            root.ensure_path(chroot, acl=_to_kazoo(node_acl(chroot, credentials.digest_id)) if credentials else None)
        finally:
            root.stop()
            root.close()
        return
    client.stop()
    client.close()
    raise missing_chroot(hosts)


class IZooKeeper(Interface):
    """A ZooKeeper session as the rest of twlog uses it: Deferreds, one-shot watches and session states.

    Results and watch events arrive on the reactor thread.  Errors are kazoo's,
    re-exported by this module (L{NodeExistsError}, L{NoNodeError},
    L{BadVersionError}, L{NotEmptyError}, L{ConnectionLoss}, ...).  A watch is a
    callable taking a L{WatchedEvent}; it fires once.  The real session is
    L{ZooKeeper}; tests use C{tests.fakezk.FakeZooKeeper}.
    """

    hosts = Attribute("The connect string, C{host:port[,host:port...][/chroot]}.")
    connected = Attribute("Whether the session is connected now.")
    client_id = Attribute("The session's (id, password), or None before the first connection.")
    session_id = Attribute("The session's id (the C{ephemeralOwner} of its ephemeral nodes), or None.")
    credentials = Attribute("The L{ZooKeeperCredentials} the session authenticates with, or None (open nodes).")

    def start() -> Deferred[None]:
        """Connect (L{ZooKeeperUnavailable} on failure)."""

    def stop() -> Deferred[None]:
        """Close the session: its ephemeral nodes go at once."""

    def add_state_listener(listener: Callable[[str], Any]) -> None:
        """Call C{listener(CONNECTED | SUSPENDED | LOST)} when the session changes."""

    def remove_state_listener(listener: Callable[[str], Any]) -> None:
        """Stop calling C{listener}."""

    def create(path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False) -> Deferred[str]:
        """Create C{path}; fire with the path created."""

    def get(path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> Deferred[tuple[bytes, ZnodeStat]]:
        """The value and stat of C{path}; C{watch} fires when it changes or goes."""

    def set(path: str, value: bytes, version: int = -1) -> Deferred[ZnodeStat]:
        """Set the value of C{path}; fire with its new stat."""

    def delete(path: str, version: int = -1) -> Deferred[bool]:
        """Delete C{path}."""

    def children(path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> Deferred[list[str]]:
        """The children of C{path}; C{watch} fires when they change."""

    def exists(path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> Deferred[ZnodeStat | None]:
        """The stat of C{path} or None; C{watch} fires when it is created, changed or deleted."""

    def ensure_path(path: str) -> Deferred[bool]:
        """Create C{path} and its parents as needed (persistent, empty)."""

    def set_or_create(path: str, value: bytes) -> Deferred[None]:
        """Set C{path} to C{value}, creating it (and its parents, persistent) if missing."""

    def get_acls(path: str) -> Deferred[list[ACL]]:
        """The ACL of C{path} (L{twlog.coord.zkauth.ACL} entries)."""

    def set_acls(path: str, acl: list[ACL], version: int = -1) -> Deferred[ZnodeStat]:
        """Replace the ACL of C{path} (C{NoAuthError} without the ADMIN permission on it)."""


def _to_kazoo(acl: list[ACL]) -> list[KazooACL]:
    return [KazooACL(entry.perms, Id(entry.scheme, entry.id)) for entry in acl]


def _parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0] or "/"


async def set_or_create(zk: IZooKeeper, path: str, value: bytes) -> None:
    """Set C{path} to C{value} in C{zk}, creating it (and its parents, persistent) if missing."""
    try:
        await zk.set(path, value)
    except NoNodeError:
        try:
            await zk.create(path, value, makepath=True)
        except NodeExistsError:
            await zk.set(path, value)


@implementer(IZooKeeper)
class ZooKeeper:
    """A ZooKeeper session whose operations return Deferreds fired on the reactor thread.

    @param hosts: a connect string, C{host:port[,host:port...][/chroot]}.
    @param session_timeout_s: how long the server keeps the session (and its
        ephemeral nodes) after the connection is lost.
    @param create_chroot: create a missing chroot on L{start} (a broker
        does); otherwise a missing chroot fails L{start} with L{MissingChroot}
        at once, rather than every read finding nothing.
    @param credentials: authenticate with ZooKeeper's digest scheme, and give
        the nodes created the ACLs of L{twlog.coord.zkauth}'s policy; by
        None (the default): anonymous, and open nodes.
    """

    _log = Logger()

    def __init__(
        self,
        hosts: str,
        *,
        reactor=None,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 15.0,
        client_id: tuple[int, bytes] | None = None,
        create_chroot: bool = False,
        credentials: ZooKeeperCredentials | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.hosts = hosts
        self.create_chroot = create_chroot
        self._reactor = reactor
        self.connect_timeout_s = connect_timeout_s
        self.credentials = credentials
        self._client = KazooClient(
            hosts=hosts,
            auth_data=self.credentials.auth_data if self.credentials else None,
            timeout=session_timeout_s,
            client_id=client_id,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
            logger=logging.LoggerAdapter(_kazoo_logger, {"twlog_session": self}),
        )
        #: kazoo's last reason for a dropped connection (set on its thread; read when the loss is said).
        self.last_drop: str | None = None
        #: When the connection was lost (reactor time), while it is.
        self._lost_at: float | None = None
        self._closing = False
        self._state_listeners: list[Callable[[str], Any]] = []
        #: Each watch function's kazoo watcher (L{_watch}); a function no one holds any more goes with it.
        self._watchers: WeakKeyDictionary[Callable[[WatchedEvent], Any], Callable[[WatchedEvent], None]] = (
            WeakKeyDictionary())
        self._client.add_listener(self._kazoo_state)

    # -- session -------------------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Connect; fail with L{ZooKeeperUnavailable} after the connect timeout, or L{MissingChroot}."""

        def connect() -> None:
            _start_kazoo(self._client, self.hosts, self.connect_timeout_s, self.create_chroot, self.credentials)

        return deferToThreadPool(self._reactor, self._reactor.getThreadPool(), connect)

    def stop(self) -> Deferred[None]:
        """Close the session (its ephemeral nodes go at once) and stop kazoo's threads."""
        self._closing = True

        def close() -> None:
            self._client.stop()
            self._client.close()

        return deferToThreadPool(self._reactor, self._reactor.getThreadPool(), close)

    @property
    def connected(self) -> bool:
        """Whether the session is connected now."""
        return self._client.connected

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """The session's (id, password), e.g. to expire it from another client in tests."""
        return self._client.client_id

    @property
    def session_id(self) -> int | None:
        """The session's id: the C{ephemeralOwner} of the nodes it creates."""
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    def add_state_listener(self, listener: Callable[[str], Any]) -> None:
        """Call C{listener(CONNECTED | SUSPENDED | LOST)} on the reactor thread when the session changes."""
        self._state_listeners.append(listener)

    def remove_state_listener(self, listener: Callable[[str], Any]) -> None:
        """Stop calling C{listener}."""
        if listener in self._state_listeners:
            self._state_listeners.remove(listener)

    def _kazoo_state(self, state: str) -> None:  # on a kazoo thread
        self._reactor.callFromThread(self._tell_state, _STATES.get(state, state))

    def _tell_state(self, state: str) -> None:
        self._log_state(state)
        for listener in list(self._state_listeners):
            try:
                listener(state)
            except Exception:
                self._log.failure("ZooKeeper state listener failed")

    def _log_state(self, state: str) -> None:
        """One line when the connection is lost, and one when it is back (not one per attempt in between)."""
        if state in (SUSPENDED, LOST) and self._lost_at is None:
            if self._closing:
                return  # closed by stop(): not a loss
            self._lost_at = self._reactor.seconds()
            why = f" ({self.last_drop})" if self.last_drop else ""
            self._log.warn("lost ZooKeeper at {hosts}{why}; reconnecting", hosts=self.hosts, why=why)
        elif state == CONNECTED and self._lost_at is not None:
            seconds, self._lost_at = self._reactor.seconds() - self._lost_at, None
            self.last_drop = None
            self._log.info("ZooKeeper at {hosts} is back, after {seconds:.1f} s", hosts=self.hosts, seconds=seconds)

    # -- operations ----------------------------------------------------------------

    def create(
        self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
        makepath: bool = False,
    ) -> Deferred[str]:
        """Create C{path}; fire with the path created (C{NodeExistsError}, C{NoNodeError} on failure).

        With credentials, C{path} and the parents C{makepath} creates each get their policy's ACL.
        """
        if self.credentials is None:
            return self._call(self._client.create_async, path, value, ephemeral=ephemeral, sequence=sequence,
                              makepath=makepath)
        return Deferred.fromCoroutine(self._create_secured(path, value, ephemeral, sequence, makepath))

    def get(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> Deferred[tuple[bytes, ZnodeStat]]:
        """The value and stat of C{path}; C{watch} fires once, on the reactor thread, when it changes."""
        return self._call(self._client.get_async, path, watch=self._watch(watch))

    def set(self, path: str, value: bytes, version: int = -1) -> Deferred[ZnodeStat]:
        """Set the value of C{path} (C{BadVersionError} if C{version} does not match)."""
        return self._call(self._client.set_async, path, value, version)

    def delete(self, path: str, version: int = -1) -> Deferred[bool]:
        """Delete C{path}."""
        return self._call(self._client.delete_async, path, version)

    def children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> Deferred[list[str]]:
        """The children of C{path}; C{watch} fires once when they change."""
        return self._call(self._client.get_children_async, path, watch=self._watch(watch))

    def exists(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> Deferred[ZnodeStat | None]:
        """The stat of C{path}, or None; C{watch} fires once when it is created, changed or deleted."""
        return self._call(self._client.exists_async, path, watch=self._watch(watch))

    def ensure_path(self, path: str) -> Deferred[bool]:
        """Create C{path} and its parents as needed (persistent, empty; with credentials, with their ACLs)."""
        if self.credentials is None:
            return self._call(self._client.ensure_path_async, path)
        return Deferred.fromCoroutine(self._ensure_secured(path))

    def set_or_create(self, path: str, value: bytes) -> Deferred[None]:
        """Set C{path} to C{value}, creating it (and its parents, persistent) if missing."""
        return Deferred.fromCoroutine(set_or_create(self, path, value))

    def get_acls(self, path: str) -> Deferred[list[ACL]]:
        """The ACL of C{path}."""
        d = self._call(self._client.get_acls_async, path)
        return d.addCallback(lambda result: [ACL(a.id.scheme, a.id.id, a.perms) for a in result[0]])

    def set_acls(self, path: str, acl: list[ACL], version: int = -1) -> Deferred[ZnodeStat]:
        """Replace the ACL of C{path}."""
        return self._call(self._client.set_acls_async, path, _to_kazoo(acl), version)

    # -- the ACLs of a session with credentials (twlog.coord.zkauth) -----------------

    async def _read_acl(self, path: str) -> list[ACL] | None:
        try:
            return await self.get_acls(path)
        except NoNodeError:
            return None

    async def _create_secured(self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False,
                              makepath: bool = False, exists_ok: bool = False) -> str:
        acl = _to_kazoo(await acl_for(self._read_acl, path, self.credentials.digest_id))
        for parent_made in (False, True):
            try:
                return await self._call(self._client.create_async, path, value, acl, ephemeral, sequence)
            except NoNodeError:
                if not makepath or parent_made:
                    raise
                await self._ensure_secured(_parent(path))
            except NodeExistsError:
                if not exists_ok:
                    raise
                return path
        raise AssertionError("unreachable")

    async def _ensure_secured(self, path: str) -> bool:
        if path != "/" and await self._call(self._client.exists_async, path) is None:
            await self._create_secured(path, makepath=True, exists_ok=True)
        return True

    # -- plumbing ------------------------------------------------------------------

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred:
        d: Deferred = Deferred()
        reactor = self._reactor

        def deliver(result) -> None:  # may run on a kazoo thread
            reactor.callFromThread(_fire, d, result, function.__name__.removesuffix("_async"), args[0])

        function(*args, **kwargs).rawlink(deliver)
        return d

    def _watch(self, watch: Callable[[WatchedEvent], Any] | None):
        """The kazoo watcher of C{watch}: one per function, so that kazoo (which keeps a set of watchers per path)
        registers a watch set again on a node once, and fires it once, however often the node is read."""
        if watch is None:
            return None
        wrapper = self._watchers.get(watch)
        if wrapper is None:
            reactor = self._reactor

            def on_kazoo_thread(event: WatchedEvent) -> None:
                reactor.callFromThread(watch, event)

            wrapper = self._watchers[watch] = on_kazoo_thread
        return wrapper


def _fire(d: Deferred, result, operation: str, path: str) -> None:
    try:
        value = result.get_nowait()
    except NoAuthError:  # (kazoo's says nothing): which write ZooKeeper refused
        d.errback(NoAuthError(f"ZooKeeper refused to {operation} {path}: not authorized (its ACL)"))
    except Exception as e:
        d.errback(e)
    else:
        d.callback(value)


class BlockingZooKeeper:
    """A short synchronous ZooKeeper session for reads, in processes without a reactor (the Spark driver).

    Use it as a context manager; it keeps kazoo inside this module.  A missing
    node reads as None (L{get}) or no children (L{children}).

    @raise ZooKeeperUnavailable: (on entering) no session within C{timeout_s}.
    @raise MissingChroot: (on entering) the connect string's chroot does not exist.
    """

    def __init__(self, hosts: str, timeout_s: float = 30.0,
                 credentials: ZooKeeperCredentials | None = None) -> None:
        self.hosts = hosts
        self._timeout_s = timeout_s
        self.credentials = credentials
        self._client = KazooClient(hosts, timeout=timeout_s,
                                   auth_data=self.credentials.auth_data if self.credentials else None)

    def __enter__(self) -> BlockingZooKeeper:
        _start_kazoo(self._client, self.hosts, self._timeout_s, create_chroot=False, credentials=self.credentials)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.stop()
        self._client.close()

    def children(self, path: str) -> list[str]:
        """The children of C{path} ([] if it does not exist)."""
        try:
            return self._client.get_children(path)
        except NoNodeError:
            return []

    def get(self, path: str) -> bytes | None:
        """The value of C{path} (None if it does not exist)."""
        try:
            return self._client.get(path)[0]
        except NoNodeError:
            return None
