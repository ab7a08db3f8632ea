# -*- test-case-name: tests.coord.test_acls,tests.integration.test_acls -*-
"""ACLs in ZooKeeper, in Kafka's layout: the store (L{read_acls}, L{change_acls}) and the broker's L{AclCache}.

Each resource pattern is one node holding its entries (L{twlog.security.acls.encode_acls}):

  - literal: C{/kafka-acl/<ResourceType>/<name>} (C{/kafka-acl/Topic/clicks}, C{/kafka-acl/Topic/*},
    C{/kafka-acl/Cluster/kafka-cluster});
  - prefixed (KIP-290): C{/kafka-acl-extended/prefixed/<ResourceType>/<prefix>}.

A change is a compare-and-set on the node's version, tried again when another writer got there first, so
two C{twlog acls add} at once lose nothing; a pattern left with no entry has its node deleted, as Kafka
does.  Each change also writes Kafka's change notification (L{notify_change}: C{/kafka-acl-changes} for a
literal pattern, C{/kafka-acl-extended-changes} for a prefixed one), so that a Kafka broker would see it
too, and deletes those older than Kafka's 15 minutes (Kafka's brokers do that; twlog's follow the pattern
nodes themselves, by watches, and do not read them).

L{AclCache} is a broker's copy, read at start and kept current by watches on every pattern node and on
their parents, so a change applies without a restart.  Until it has read everything once it refuses every
principal but the super users (fail closed); when the session is lost it keeps what it read, and reads
everything again on reconnecting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.coord.paths import CONSUMERS
from twlog.coord.zk import (
    CONNECTED,
    LOST,
    SUSPENDED,
    BadVersionError,
    EventType,
    IZooKeeper,
    NodeExistsError,
    NoNodeError,
)
from twlog.coord.zksecure import set_group_acl
from twlog.errors import TwlogError
from twlog.security.acls import (
    WILDCARD,
    AccessControlEntry,
    AclError,
    Authorizer,
    Operation,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
    group_read_principals,
)

__all__ = ["LITERAL_ROOT", "PREFIXED_ROOT", "AclCache", "change_acls", "change_notification", "notify_change",
           "pattern_path", "read_acls", "secure_group_nodes"]

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
#: Kafka's change notifications: sequential C{acl_changes_<n>} nodes, literal patterns' and the others'.
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
#: Notifications older than this are deleted (Kafka's C{ZkNodeChangeNotificationListener} expiry).
CHANGE_EXPIRY_MS = 15 * 60 * 1000
#: How many times a change is tried against writers that change the same node meanwhile.
MAX_ATTEMPTS = 50


def _directory(resource_type: ResourceType, pattern_type: PatternType) -> str:
    root = LITERAL_ROOT if pattern_type is PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{resource_type.value}"


def pattern_path(pattern: ResourcePattern) -> str:
    """The node of C{pattern}'s entries.

    @raise AclError: its name cannot be a node's name (C{/}, C{.}, C{..}).
    """
    if "/" in pattern.name or pattern.name in (".", ".."):
        raise AclError(f"{pattern.resource_type.value} name {pattern.name!r} cannot be stored in ZooKeeper "
                       "(no '/', '.' or '..')")
    return f"{_directory(pattern.resource_type, pattern.pattern_type)}/{pattern.name}"


_DIRECTORIES = [(t, p) for p in PatternType for t in ResourceType]


async def read_acls(zk: IZooKeeper) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """Every pattern with its entries, as ZooKeeper holds them now.

    @raise AclError: a node's value is not Kafka's layout.
    """
    found: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for resource_type, pattern_type in _DIRECTORIES:
        try:
            names = await zk.children(_directory(resource_type, pattern_type))
        except NoNodeError:
            continue
        for name in sorted(names):
            pattern = ResourcePattern(resource_type, name, pattern_type)
            try:
                value, _ = await zk.get(pattern_path(pattern))
            except NoNodeError:
                continue  # removed meanwhile
            try:
                entries = decode_acls(value)
            except AclError as e:
                raise AclError(f"{pattern_path(pattern)}: {e}") from None
            if entries:
                found[pattern] = entries
    return found


async def secure_group_nodes(zk: IZooKeeper, changed: Iterable[ResourcePattern]) -> list[tuple[str, list[str], int]]:
    """In a secured ZooKeeper (C{zk} has the cluster's credentials): give the nodes of each group whose Group ACLs
    changed the ZooKeeper ACL their Read ACLs make (L{set_group_acl}: the cluster and the principals with Read on
    the group may write them).  A literal name is that group (its root made if missing); a prefixed pattern or
    C{*}, the groups it covers that exist now (a group made later needs C{acls add --group NAME}).

    @return: per group secured, its name, the principals that may write its nodes, and how many nodes were set.
    """
    patterns = [p for p in changed if p.resource_type is ResourceType.GROUP]
    if zk.credentials is None or not patterns:
        return []
    acls = await read_acls(zk)
    try:
        existing = await zk.children(CONSUMERS)
    except NoNodeError:
        existing = []
    groups = {p.name for p in patterns if p.pattern_type is PatternType.LITERAL and p.name != WILDCARD}
    groups.update(g for g in existing for p in patterns if p.matches(ResourceType.GROUP, g))
    secured = []
    for group in sorted(groups):
        principals = sorted(group_read_principals(acls, group))
        secured.append((group, principals, await set_group_acl(zk, group, principals)))
    return secured


def change_notification(pattern: ResourcePattern) -> tuple[str, bytes]:
    """Where Kafka notifies a change of C{pattern}'s ACLs, and the notification's value."""
    if pattern.pattern_type is PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.value}:{pattern.name}".encode()
    return EXTENDED_CHANGES, json.dumps(
        {"version": 1, "resourceType": pattern.resource_type.value, "name": pattern.name,
         "patternType": pattern.pattern_type.value}, separators=(",", ":")).encode()


async def notify_change(zk: IZooKeeper, pattern: ResourcePattern, now_ms: float | None = None) -> None:
    """Write Kafka's notification of a change of C{pattern}'s ACLs, and delete the notifications of its kind older
    than L{CHANGE_EXPIRY_MS} (so they do not pile up: nobody else deletes them in a twlog cluster)."""
    parent, value = change_notification(pattern)
    await zk.create(f"{parent}/{CHANGE_PREFIX}", value, sequence=True, makepath=True)
    oldest = (time.time() * 1000 if now_ms is None else now_ms) - CHANGE_EXPIRY_MS
    for name in await zk.children(parent):
        path = f"{parent}/{name}"
        stat = await zk.exists(path)
        if name.startswith(CHANGE_PREFIX) and stat is not None and stat.ctime < oldest:
            try:
                await zk.delete(path)
            except NoNodeError:
                pass  # (another writer deleted it)


async def change_acls(zk: IZooKeeper, pattern: ResourcePattern, add: Iterable[AccessControlEntry] = (),
                      remove: Iterable[AccessControlEntry] = (), now_ms: float | None = None
                      ) -> frozenset[AccessControlEntry]:
    """Add C{add} to C{pattern}'s entries and take C{remove} out, by compare-and-set; its entries after.  A change
    is notified as Kafka does (L{notify_change}, with the time now, or C{now_ms}).

    @raise TwlogError: other writers changed the node L{MAX_ATTEMPTS} times in a row.
    """
    entries, changed = await _change(zk, pattern, frozenset(add), frozenset(remove))
    if changed:
        await notify_change(zk, pattern, now_ms)
    return entries


async def _change(zk: IZooKeeper, pattern: ResourcePattern, add: frozenset[AccessControlEntry],
                  remove: frozenset[AccessControlEntry]) -> tuple[frozenset[AccessControlEntry], bool]:
    """The compare-and-set loop of L{change_acls}: the entries after it, and whether it changed them."""
    path = pattern_path(pattern)
    for _ in range(MAX_ATTEMPTS):
        try:
            value, stat = await zk.get(path)
        except NoNodeError:
            if not add:
                return frozenset(), False
            try:
                await zk.create(path, encode_acls(add), makepath=True)
                return add, True
            except NodeExistsError:
                continue  # created meanwhile: change that one
        entries = decode_acls(value)
        wanted = (entries | add) - remove
        try:
            if wanted == entries:
                return entries, False
            if wanted:
                await zk.set(path, encode_acls(wanted), version=stat.version)
            else:
                await zk.delete(path, version=stat.version)
            return wanted, True
        except (BadVersionError, NoNodeError):
            continue  # changed (or removed) meanwhile: read it again
    raise TwlogError(f"could not change {path}: it changed under {MAX_ATTEMPTS} attempts in a row")


class AclCache:
    """A broker's copy of the ACLs in ZooKeeper, kept current by watches; it answers the authorizer's question."""

    _log = Logger()

    def __init__(self, zk: IZooKeeper, super_users: Iterable[str] = ()) -> None:
        self._zk = zk
        self.super_users = frozenset(super_users)
        self._entries: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        #: The decision over what was read last (rebuilt at each change).
        self.authorizer = Authorizer((), self.super_users)
        #: Whether every ACL has been read once since L{start}: until then only super users are allowed.
        self.ready = False
        self._generation = 0
        self._started = False
        self._session_lost = False
        self._watchers: dict[tuple[object, int], Callable[[Any], None]] = {}
        self._bad: set[str] = set()
        #: Told after each change that was read (for tests and logs).
        self.listeners: list[Callable[[], Any]] = []

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """The decision (L{Authorizer.authorize}); before the first read, only a super user is allowed."""
        if not self.ready:
            return principal in self.super_users
        return self.authorizer.authorize(principal, host, operation, resource_type, name)

    async def start(self) -> None:
        """Read every ACL and start watching them."""
        self._zk.add_state_listener(self._session_changed)
        self._started = True
        await self._refresh()

    def stop(self) -> None:
        """Stop following ZooKeeper (a watch that fires later is ignored)."""
        self._started = False
        self._generation += 1
        self._zk.remove_state_listener(self._session_changed)

    async def _refresh(self) -> None:
        self._generation += 1
        generation = self._generation
        self._watchers = {k: w for k, w in self._watchers.items() if k[1] == generation}
        for resource_type, pattern_type in _DIRECTORIES:
            await self._read_directory(resource_type, pattern_type, generation, every=True)
        if self._started and generation == self._generation and not self.ready:
            self.ready = True
            self._log.info("read {count} ACL pattern(s) from ZooKeeper; authorizing requests",
                           count=len(self._entries))
            self._changed()

    async def _read_directory(self, resource_type: ResourceType, pattern_type: PatternType, generation: int,
                              every: bool = False) -> None:
        """Follow a directory's patterns: those new since the last read (C{every}: all, with new watches)."""
        directory = _directory(resource_type, pattern_type)
        await self._zk.ensure_path(directory)
        watch = self._watcher(lambda g: self._read_directory(resource_type, pattern_type, g), generation,
                              ("directory", directory))
        names = set(await self._zk.children(directory, watch=watch))
        if generation != self._generation:
            return
        known = {p for p in self._entries if p.resource_type is resource_type and p.pattern_type is pattern_type}
        for pattern in known:
            if pattern.name not in names:
                del self._entries[pattern]
        for name in sorted(names if every else names - {p.name for p in known}):
            await self._read_node(ResourcePattern(resource_type, name, pattern_type), generation)
        self._changed()

    async def _read_node(self, pattern: ResourcePattern, generation: int) -> None:
        path = pattern_path(pattern)
        watch = self._watcher(lambda g: self._read_node(pattern, g), generation, ("node", path))
        try:
            value, _ = await self._zk.get(path, watch=watch)
        except NoNodeError:
            if generation == self._generation:
                self._entries.pop(pattern, None)
                self._changed()
            return
        if generation != self._generation:
            return
        try:
            self._entries[pattern] = decode_acls(value)
            self._bad.discard(path)
        except AclError as e:  # keep what it held before, if anything: a bad write must not drop a Deny
            if path not in self._bad:
                self._bad.add(path)
                self._log.warn("ignoring the ACL node {path} (kept what it held before): {error}", path=path,
                               error=e)
        self._changed()

    def _changed(self) -> None:
        if self._started and self.ready:
            self.authorizer = Authorizer(self._entries, self.super_users)
            for listener in list(self.listeners):
                listener()

    def _watcher(self, read: Callable[[int], Any], generation: int, key: object) -> Callable[[Any], None]:
        """One watch function per node and generation (a node read twice gets one callback, as ZooKeeper keeps one
        per function)."""
        found = self._watchers.get((key, generation))
        if found is None:
            def watch(event) -> None:
                if event.type == EventType.NONE or not self._started or generation != self._generation:
                    return  # (session events: _session_changed reads everything again)
                Deferred.fromCoroutine(read(generation)).addErrback(self._read_failed)

            found = self._watchers[key, generation] = watch
        return found

    def _read_failed(self, failure) -> None:
        if self._started and not self._session_lost:
            self._log.warn("reading ACLs from ZooKeeper failed: {error}",
                           error=failure.getErrorMessage() or failure.type.__name__)

    def _session_changed(self, state: str) -> None:
        if state in (LOST, SUSPENDED):
            self._session_lost = True
        elif state == CONNECTED and self._session_lost and self._started:
            self._session_lost = False  # the old session's watches may be gone: read everything again
            Deferred.fromCoroutine(self._refresh()).addErrback(self._read_failed)
