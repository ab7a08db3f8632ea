"""An in-memory ZooKeeper for deterministic tests: L{FakeZooKeeper}, one session on a L{FakeZooKeeperServer}.

It behaves like the real adapter (L{twlog.coord.zk.ZooKeeper}) as seen by twlog
(C{tests.integration.test_fakezk} runs one operation sequence on both and
compares): a tree of nodes with values and stats, ephemeral nodes owned by a
session, sequence nodes, kazoo's errors, and one-shot watches fired like
ZooKeeper's (data watches from C{get} and C{exists}, child watches from
C{children}).  Results are Deferreds fired at once, unless the session is
L{held <FakeZooKeeper.hold>}, when they wait for L{FakeZooKeeper.flush}.

The test drives the session's life: L{FakeZooKeeper.suspend} (the connection
is lost: SUSPENDED, operations fail with C{ConnectionLoss}, the session's
watches fire with a NONE event as kazoo's do), L{FakeZooKeeper.reconnect}
(CONNECTED, on the same session if it is still alive, else LOST first and a
new session), and L{FakeZooKeeper.expire} (SUSPENDED, then the server expires
the session: its ephemeral nodes go, firing the other sessions' watches, and
the client hears LOST, as kazoo reports it).  Several sessions share a tree through one server.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from twlog.coord.zk import (
    CONNECTED,
    LOST,
    SUSPENDED,
    BadVersionError,
    ConnectionLoss,
    EventType,
    IZooKeeper,
    KeeperState,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    WatchedEvent,
    ZnodeStat,
    set_or_create,
)
from twlog.coord.zkauth import ACL, WORLD_ALL

Watch = Callable[[WatchedEvent], Any]


class _Node:
    __slots__ = ("acl", "aversion", "children", "ctime", "cversion", "czxid", "ephemeral_owner", "mtime", "mzxid",
                 "value", "version")

    def __init__(self, value: bytes, zxid: int, owner: int) -> None:
        self.value = value
        self.czxid = self.mzxid = zxid
        self.ctime = self.mtime = zxid
        self.version = 0
        self.cversion = 0
        self.ephemeral_owner = owner
        self.children: set[str] = set()
        #: Kept, not enforced (tests.integration.test_zk_acls checks ZooKeeper's enforcement).
        self.acl: list[ACL] = [WORLD_ALL]
        self.aversion = 0

    def stat(self) -> ZnodeStat:
        return ZnodeStat(self.czxid, self.mzxid, self.ctime, self.mtime, self.version, self.cversion, self.aversion,
                         self.ephemeral_owner, len(self.value), len(self.children), self.mzxid)


class FakeZooKeeperServer:
    """The shared tree and the sessions' watches."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0)}
        self._zxid = itertools.count(1)
        self._sessions = itertools.count(0x1000)
        #: Live session ids.
        self.sessions: set[int] = set()
        #: path -> {watch: session}, one-shot.
        self._data_watches: dict[str, dict[Watch, FakeZooKeeper]] = {}
        self._child_watches: dict[str, dict[Watch, FakeZooKeeper]] = {}

    def new_session(self) -> int:
        session = next(self._sessions)
        self.sessions.add(session)
        return session

    def zxid(self) -> int:
        return next(self._zxid)

    # -- watches -------------------------------------------------------------------------

    def watch_data(self, path: str, watch: Watch | None, client: FakeZooKeeper) -> None:
        if watch is not None:
            self._data_watches.setdefault(path, {})[watch] = client

    def watch_children(self, path: str, watch: Watch | None, client: FakeZooKeeper) -> None:
        if watch is not None:
            self._child_watches.setdefault(path, {})[watch] = client

    def _fire(self, table: dict[str, dict[Watch, FakeZooKeeper]], path: str, kind: str) -> None:
        for watch, client in table.pop(path, {}).items():
            client.deliver_watch(watch, WatchedEvent(kind, KeeperState.CONNECTED, path))

    def created(self, path: str) -> None:
        self._fire(self._data_watches, path, EventType.CREATED)
        self._fire(self._child_watches, _parent(path), EventType.CHILD)

    def changed(self, path: str) -> None:
        self._fire(self._data_watches, path, EventType.CHANGED)

    def deleted(self, path: str) -> None:
        self._fire(self._data_watches, path, EventType.DELETED)
        self._fire(self._child_watches, path, EventType.DELETED)
        self._fire(self._child_watches, _parent(path), EventType.CHILD)

    def drop_watches(self, client: FakeZooKeeper) -> list[Watch]:
        """Forget C{client}'s watches (a lost connection or session); return them."""
        dropped = []
        for table in (self._data_watches, self._child_watches):
            for path in list(table):
                for watch, owner in list(table[path].items()):
                    if owner is client:
                        del table[path][watch]
                        dropped.append(watch)
                if not table[path]:
                    del table[path]
        return dropped

    # -- tree ----------------------------------------------------------------------------

    def create(self, path: str, value: bytes, owner: int, sequence: bool, makepath: bool) -> str:
        parent = _parent(path)
        if parent not in self.nodes:
            if not makepath:
                raise NoNodeError(parent)
            self.create(parent, b"", 0, False, True)
        parent_node = self.nodes[parent]
        if sequence:
            path = f"{path}{parent_node.cversion:010d}"
        if path in self.nodes:
            raise NodeExistsError(path)
        zxid = self.zxid()
        self.nodes[path] = _Node(value, zxid, owner)
        parent_node.children.add(path.rsplit("/", 1)[1])
        parent_node.cversion += 1
        self.created(path)
        return path

    def node(self, path: str) -> _Node:
        try:
            return self.nodes[path]
        except KeyError:
            raise NoNodeError(path) from None

    def set(self, path: str, value: bytes, version: int) -> ZnodeStat:
        node = self.node(path)
        if version not in (-1, node.version):
            raise BadVersionError(path)
        node.value = value
        node.version += 1
        node.mzxid = node.mtime = self.zxid()
        self.changed(path)
        return node.stat()

    def delete(self, path: str, version: int = -1) -> bool:
        node = self.node(path)
        if version not in (-1, node.version):
            raise BadVersionError(path)
        if node.children:
            raise NotEmptyError(path)
        del self.nodes[path]
        parent = self.nodes[_parent(path)]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.cversion += 1
        self.deleted(path)
        return True

    def expire(self, session: int) -> None:
        """End C{session}: delete its ephemeral nodes (firing watches)."""
        self.sessions.discard(session)
        for path in sorted((p for p, n in self.nodes.items() if n.ephemeral_owner == session), reverse=True):
            self.delete(path)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


@implementer(IZooKeeper)
class FakeZooKeeper:
    """One session on a L{FakeZooKeeperServer} (a new one unless given), connected by L{start}.

    Nodes keep the ACL L{set_acls} gives them (open otherwise) without enforcing it; C{credentials} is only told.
    """

    def __init__(self, server: FakeZooKeeperServer | None = None, *, hosts: str = "fake:2181",
                 credentials=None) -> None:
        self.server = server if server is not None else FakeZooKeeperServer()
        self.hosts = hosts
        self.credentials = credentials
        self.connected = False
        self._session: int | None = None
        self._password = b"fake"
        self._state_listeners: list[Callable[[str], Any]] = []
        self._held: list[tuple[Deferred, Any, BaseException | None]] | None = None
        #: Every operation, as (name, path), in order (for tests that check what was done).
        self.operations: list[tuple[str, str]] = []

    # -- the session's life, driven by the test -----------------------------------------------

    def start(self) -> Deferred[None]:
        if not self.connected:
            self.reconnect()
        return succeed(None)

    def stop(self) -> Deferred[None]:
        """Close the session: its ephemeral nodes go; the client hears LOST (as kazoo's listeners do)."""
        if self._session is not None:
            session, self._session = self._session, None
            self.server.drop_watches(self)
            self.server.expire(session)
            was_connected, self.connected = self.connected, False
            if was_connected:
                self._tell(LOST)
        return succeed(None)

    def suspend(self) -> None:
        """The connection is lost (the session lives on): SUSPENDED; this client's watches fire with a NONE event."""
        if not self.connected:
            return
        self.connected = False
        self._tell(SUSPENDED)
        self._drop_watches(KeeperState.CONNECTING)

    def reconnect(self) -> None:
        """Connect again: CONNECTED on the same session if it lives, else LOST (if not told yet) and a new session."""
        if self.connected:
            return
        if self._session is not None and self._session not in self.server.sessions:
            self._session = None
            self._tell(LOST)
        if self._session is None:
            self._session = self.server.new_session()
        self.connected = True
        self._tell(CONNECTED)

    def expire(self) -> None:
        """The server expires the session, as after a long partition: a connected client is cut off first
        (SUSPENDED, its watches fire NONE), its ephemeral nodes go, and the client hears LOST.  It stays
        disconnected until L{reconnect}, which brings a new session."""
        if self._session is None:
            return
        self.suspend()
        session, self._session = self._session, None
        self.server.expire(session)
        self._tell(LOST)

    def hold(self) -> None:
        """Keep results (not watch events) until L{flush}, as if the server were slow to answer."""
        if self._held is None:
            self._held = []

    def flush(self) -> None:
        """Fire the held results in order (including those of calls made meanwhile) and stop holding."""
        while self._held:
            d, value, error = self._held.pop(0)
            if error is None:
                d.callback(value)
            else:
                d.errback(error)
        self._held = None

    def flush_one(self) -> None:
        """Fire the oldest held result, and go on holding the others (and those of calls it makes)."""
        d, value, error = self._held.pop(0)
        if error is None:
            d.callback(value)
        else:
            d.errback(error)

    @property
    def held(self) -> int:
        """How many results wait for L{flush}."""
        return len(self._held or ())

    # -- IZooKeeper ------------------------------------------------------------------------------

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return None if self._session is None else (self._session, self._password)

    @property
    def session_id(self) -> int | None:
        return self._session

    def add_state_listener(self, listener: Callable[[str], Any]) -> None:
        self._state_listeners.append(listener)

    def remove_state_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._state_listeners:
            self._state_listeners.remove(listener)

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False) -> Deferred[str]:
        return self._do("create", path, lambda: self.server.create(
            path, value, self._session if ephemeral else 0, sequence, makepath))

    def get(self, path: str, watch: Watch | None = None) -> Deferred[tuple[bytes, ZnodeStat]]:
        def get() -> tuple[bytes, ZnodeStat]:
            node = self.server.node(path)
            self.server.watch_data(path, watch, self)
            return node.value, node.stat()

        return self._do("get", path, get)

    def set(self, path: str, value: bytes, version: int = -1) -> Deferred[ZnodeStat]:
        return self._do("set", path, lambda: self.server.set(path, value, version))

    def delete(self, path: str, version: int = -1) -> Deferred[bool]:
        return self._do("delete", path, lambda: self.server.delete(path, version))

    def children(self, path: str, watch: Watch | None = None) -> Deferred[list[str]]:
        def children() -> list[str]:
            node = self.server.node(path)
            self.server.watch_children(path, watch, self)
            return sorted(node.children)

        return self._do("children", path, children)

    def exists(self, path: str, watch: Watch | None = None) -> Deferred[ZnodeStat | None]:
        def exists() -> ZnodeStat | None:
            self.server.watch_data(path, watch, self)
            node = self.server.nodes.get(path)
            return None if node is None else node.stat()

        return self._do("exists", path, exists)

    def ensure_path(self, path: str) -> Deferred[bool]:
        def ensure() -> bool:
            if path not in self.server.nodes:
                self.server.create(path, b"", 0, False, True)
            return True

        return self._do("ensure_path", path, ensure)

    def set_or_create(self, path: str, value: bytes) -> Deferred[None]:
        return Deferred.fromCoroutine(set_or_create(self, path, value))

    def get_acls(self, path: str) -> Deferred[list[ACL]]:
        return self._do("get_acls", path, lambda: list(self.server.node(path).acl))

    def set_acls(self, path: str, acl: list[ACL], version: int = -1) -> Deferred[ZnodeStat]:
        def set_acls() -> ZnodeStat:
            node = self.server.node(path)
            if version not in (-1, node.aversion):
                raise BadVersionError(path)
            node.acl, node.aversion = list(acl), node.aversion + 1
            return node.stat()

        return self._do("set_acls", path, set_acls)

    # -- plumbing ---------------------------------------------------------------------------------

    def deliver_watch(self, watch: Watch, event: WatchedEvent) -> None:
        watch(event)

    def _drop_watches(self, state: str) -> None:
        for watch in self.server.drop_watches(self):
            watch(WatchedEvent(EventType.NONE, state, None))

    def _tell(self, state: str) -> None:
        for listener in list(self._state_listeners):
            listener(state)

    def _do(self, name: str, path: str, operation: Callable[[], Any]) -> Deferred:
        self.operations.append((name, path))
        value, error = None, None
        if not self.connected:
            error = ConnectionLoss(f"{name} {path}: not connected")
        else:
            try:
                value = operation()
            except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as e:
                error = e
        if self._held is not None:
            d: Deferred = Deferred()
            self._held.append((d, value, error))
            return d
        return succeed(value) if error is None else fail(error)


__all__ = ["FakeZooKeeper", "FakeZooKeeperServer"]
