# -*- test-case-name: tests.integration.test_replication_failover -*-
"""A broker's replicas, with ZooKeeper: the replica manager installed on its protocol, and its roles kept in
step with the controller's partition states (L{BrokerReplicas}).

Each follower fetches from its leader on a connection of its own (L{BrokerConnection}, reconnecting with
backoff), to the address the leader registered under C{/brokers/ids}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from twlog.client.connection import BrokerConnection
from twlog.config import BrokerConfig
from twlog.coord.cluster import ClusterView
from twlog.coord.zk import IZooKeeper
from twlog.errors import LeaderNotAvailable
from twlog.protocol.server import Broker
from twlog.replica.manager import ReplicaManager
from twlog.replica.roles import ReplicaRoles
from twlog.storage.manager import LogManager

__all__ = ["BrokerReplicas"]


class BrokerReplicas:
    """Broker C{config.broker_id}'s leaders and followers, as the states in C{view} say."""

    def __init__(self, config: BrokerConfig, broker: Broker, logs: LogManager, zk: IZooKeeper, view: ClusterView,
                 reactor: Any) -> None:
        self._view, self._reactor = view, reactor
        self.manager = ReplicaManager(config.broker_id, logs, zk, reactor, connect=self._connect,
                                      lag_time_ms=config.replica_lag_time_ms,
                                      max_fetch_wait_ms=config.max_fetch_wait_ms)
        self.manager.install(broker)
        self.roles = ReplicaRoles(config.broker_id, self.manager, view, logs, zk, reactor,
                                  default_min_isr=config.min_insync_replicas)

    def start(self) -> None:
        self.roles.start()

    def stop(self) -> Deferred[Any]:
        """Stop leading and following (held C{ack=all} sets get NotLeader); fires once the followers stopped."""
        return self.roles.stop()

    def _connect(self, broker_id: int) -> BrokerConnection:
        address = self._view.brokers.get(broker_id)
        if address is None:
            raise LeaderNotAvailable(f"broker {broker_id} is not registered: no address to follow it at")
        return BrokerConnection(*address, reactor=self._reactor)
