# -*- test-case-name: tests.broker.test_authorization,tests.integration.test_acls -*-
"""A broker's C{--acls}: the request guard (L{twlog.protocol.authorization}) fed by the ACL cache in ZooKeeper."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.config import BrokerConfig
from twlog.coord.acls import AclCache
from twlog.coord.zk import IZooKeeper
from twlog.protocol.authorization import RequestGuard
from twlog.protocol.server import Broker
from twlog.security.acls import Authorizer
from twlog.storage.manager import LogManager

__all__ = ["authorization_guard", "follow_acls"]


def authorization_guard(broker: Broker, logs: LogManager, clock) -> RequestGuard:
    """The guard of a broker started with C{--acls}: until L{follow_acls} gives it the ACLs, it allows only the
    super users (fail closed)."""
    config = broker.config

    def existing(topic: str) -> bool:
        cluster = broker.cluster
        return topic in logs.topics() or (cluster is not None and topic in cluster.topics())

    return RequestGuard(Authorizer((), config.super_users), clock, broker.count_error, existing,
                        config.log.partitions_for)


def follow_acls(zk: IZooKeeper, guard: RequestGuard, config: BrokerConfig, log: Logger) -> AclCache:
    """Read the ACLs from ZooKeeper into a cache the guard asks from now on, and follow their changes."""
    cache = AclCache(zk, config.super_users)
    guard.acls = cache
    Deferred.fromCoroutine(cache.start()).addErrback(
        lambda f: log.warn("broker {id}: reading the ACLs from ZooKeeper failed ({error}); requests are refused "
                           "until the session reconnects", id=config.broker_id,
                           error=f.getErrorMessage() or f.type.__name__))
    return cache
