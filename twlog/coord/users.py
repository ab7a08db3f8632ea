# -*- test-case-name: tests.coord.test_users -*-
"""The users' SCRAM credentials in ZooKeeper, in Kafka's layout: C{/config/users/<user>}.

Each user's node holds C{{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,
iterations=4096","SCRAM-SHA-512":"..."}}} (L{twlog.security.credentials}), as C{kafka-configs --alter
--entity-type users --add-config SCRAM-SHA-256=[...]} writes it.  L{UserStore} writes and lists them (C{twlog
users}); L{UserCache} is the broker's copy, read once and kept current with ZooKeeper watches, so that a user
added, changed or deleted counts at the next authentication without a restart.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.coord.zk import CONNECTED, EventType, IZooKeeper, NoNodeError, WatchedEvent, set_or_create
from twlog.security.credentials import InvalidCredential, ScramCredential, parse_user_config, user_config

__all__ = ["USERS", "UserCache", "UserStore", "user_path"]

#: Kafka's parent of the users' configurations (C{/config/users/<user>}).
USERS = "/config/users"


def user_path(user: str) -> str:
    """C{/config/users/<user>}."""
    return f"{USERS}/{user}"


class UserStore:
    """The users' credentials in ZooKeeper, for C{twlog users}: add (or replace), delete, list."""

    def __init__(self, zk: IZooKeeper) -> None:
        self._zk = zk

    async def add(self, user: str, credentials: Mapping[str, ScramCredential]) -> bool:
        """Store C{credentials} as C{user}'s (replacing any it had); whether the user existed before."""
        existed = await self._zk.exists(user_path(user)) is not None
        await set_or_create(self._zk, user_path(user), user_config(dict(credentials)))
        return existed

    async def delete(self, user: str) -> bool:
        """Delete C{user}; whether it existed."""
        try:
            await self._zk.delete(user_path(user))
        except NoNodeError:
            return False
        return True

    async def list(self) -> list[tuple[str, tuple[str, ...] | None]]:
        """Every user, in name order, with the mechanisms it has credentials for (None: a record not in Kafka's
        format)."""
        try:
            names = sorted(await self._zk.children(USERS))
        except NoNodeError:
            return []
        users: list[tuple[str, tuple[str, ...] | None]] = []
        for name in names:
            try:
                value, _ = await self._zk.get(user_path(name))
            except NoNodeError:
                continue  # deleted meanwhile
            try:
                users.append((name, tuple(sorted(parse_user_config(value)))))
            except InvalidCredential:
                users.append((name, None))
        return users


class UserCache:
    """The broker's copy of the users' credentials, kept current with ZooKeeper watches (L{lookup} is synchronous:
    an authentication never waits for ZooKeeper).

    A record not in Kafka's format is left out (that user cannot authenticate) and logged.  After a lost session
    (its watches gone), the next connection reads everything again.
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper) -> None:
        self._zk = zk
        #: Each user's credentials by mechanism.
        self.users: dict[str, dict[str, ScramCredential]] = {}
        # One function each (the adapter registers a function once per node, however often it is read).
        self._children_watch = self._children_changed
        self._user_watch = self._user_changed
        self._stopped = False

    def lookup(self, user: str) -> Mapping[str, ScramCredential] | None:
        """C{user}'s credentials by mechanism, or None when there is no such user (a
        L{twlog.security.sasl.UserLookup})."""
        return self.users.get(user)

    async def start(self) -> None:
        """Read every user (creating C{/config/users} if missing) and watch for changes."""
        self._zk.add_state_listener(self._state)
        await self._zk.ensure_path(USERS)
        await self._load_all()

    def stop(self) -> None:
        """Stop following changes."""
        self._stopped = True
        self._zk.remove_state_listener(self._state)

    async def _load_all(self) -> None:
        names = await self._load_names()
        for name in names:
            await self._load_user(name)

    async def _load_names(self) -> list[str]:
        """The users' names (watched); users gone are dropped at once; the new ones' names returned."""
        try:
            names = set(await self._zk.children(USERS, watch=self._children_watch))
        except NoNodeError:
            names = set()
        for gone in set(self.users) - names:
            del self.users[gone]
        return sorted(names)

    async def _load_user(self, name: str) -> None:
        try:
            value, _ = await self._zk.get(user_path(name), watch=self._user_watch)
        except NoNodeError:
            self.users.pop(name, None)
            return
        try:
            self.users[name] = parse_user_config(value)
        except InvalidCredential as e:
            self.users.pop(name, None)
            self._log.warn("user {user} cannot authenticate: {path} is not in Kafka's format: {error}",
                           user=name, path=user_path(name), error=e)

    def _children_changed(self, event: WatchedEvent) -> None:
        if self._stopped or event.type == EventType.NONE:
            return  # (a lost connection: everything is read again once it is back)
        self._run(self._new_names())

    async def _new_names(self) -> None:
        known = set(self.users)
        for name in await self._load_names():
            if name not in known:
                await self._load_user(name)

    def _user_changed(self, event: WatchedEvent) -> None:
        if self._stopped or event.type == EventType.NONE or not event.path:
            return
        name = event.path.rsplit("/", 1)[-1]
        if event.type == EventType.DELETED:
            self.users.pop(name, None)
        else:
            self._run(self._load_user(name))

    def _state(self, state: str) -> None:
        if state == CONNECTED and not self._stopped:
            self._run(self._load_all())

    def _run(self, coroutine) -> None:
        d = Deferred.fromCoroutine(coroutine)
        d.addErrback(lambda failure: self._log.warn("cannot read the users in ZooKeeper ({path}): {error}",
                                                    path=USERS, error=failure.getErrorMessage()))
