# -*- test-case-name: tests.broker.test_authorization,tests.integration.test_acls -*-
"""A broker's C{--acls}: its request guard (L{twlog.protocol.authorization}) fed by the ACLs in ZooKeeper."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.coord.acls import AclCache
from twlog.coord.zk import IZooKeeper
from twlog.protocol.server import Broker

__all__ = ["follow_acls"]


def follow_acls(zk: IZooKeeper, broker: Broker, log: Logger) -> AclCache | None:
    """With C{--acls} (a guard on C{broker}): read the ACLs from ZooKeeper into a cache the guard asks from now on,
    and follow their changes (requests are refused, but the super users', until they are read)."""
    guard = broker.guard
    if guard is None:
        return None
    config = broker.config
    cache = guard.acls = AclCache(zk, config.super_users)
    Deferred.fromCoroutine(cache.start()).addErrback(
        lambda f: log.warn("broker {id}: reading the ACLs from ZooKeeper failed ({error}); requests are refused "
                           "until the session reconnects", id=config.broker_id,
                           error=f.getErrorMessage() or f.type.__name__))
    return cache
