# -*- test-case-name: tests.integration.test_replication_failover -*-
"""A broker's replicas, with ZooKeeper: the replica manager installed on its protocol, and its roles kept in
step with the controller's partition states (L{BrokerReplicas}).

Each follower fetches from its leader on a connection of its own (L{BrokerConnection}, reconnecting with
backoff), to the address the leader registered under C{/brokers/ids}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.broker.users import inter_broker_options
from twlog.client.connection import BrokerConnection
from twlog.client.topics import create_replicated
from twlog.config import BrokerConfig
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.replication.store import ReplicatedTopicExists
from twlog.coord.zk import CONNECTED, IZooKeeper, NodeExistsError, NoNodeError
from twlog.errors import LeaderNotAvailable
from twlog.protocol.server import Broker
from twlog.replica.manager import ReplicaManager
from twlog.replica.roles import ReplicaRoles
from twlog.storage.manager import LogManager
from twlog.storage.topics import MAX_PARTITIONS

__all__ = ["BrokerReplicas"]

#: How many tenths of a second a deleted topic's name waits for the view to forget it (L{_finish_deletion}).
FINISH_TRIES = 50


class BrokerReplicas:
    """Broker C{config.broker_id}'s leaders and followers, as the states in C{view} say; with a default
    replication factor, it creates a topic first written to replicated (Kafka's auto-creation)."""

    _log = Logger()

    def __init__(self, config: BrokerConfig, broker: Broker, logs: LogManager, zk: IZooKeeper, view: ClusterView,
                 reactor: Any) -> None:
        self._view, self._reactor = view, reactor
        #: The followers' connection options: authenticated with --inter-broker-user (docs/security.md).
        self._options = inter_broker_options(config)
        self.manager = ReplicaManager(config.broker_id, logs, zk, reactor, connect=self._connect,
                                      lag_time_ms=config.replica_lag_time_ms,
                                      max_fetch_wait_ms=config.max_fetch_wait_ms)
        self.manager.install(broker)
        self.roles = ReplicaRoles(config.broker_id, self.manager, view, logs, zk, reactor,
                                  default_min_isr=config.min_insync_replicas)
        self._config, self._zk, self._logs = config, zk, logs
        #: Topics being created replicated (C{--default-replication-factor}), and why the last try failed, if it did.
        self._creating: set[str] = set()
        self._stopped = False
        self._deletion_watch = self._watch_deletions  # (one watch function: set once however often it is read)
        self.auto_create_failures: dict[str, str] = {}
        if config.default_replication_factor > 1:
            self.manager.auto_create = self._auto_create

    def start(self) -> None:
        self.roles.start()
        self._zk.add_state_listener(self._session_changed)
        self._watch_deletions()

    # -- deleting replicated topics (twlog topics delete) --------------------------------

    def _watch_deletions(self, event: object = None) -> None:
        if not self._stopped:
            Deferred.fromCoroutine(self._read_deletions()).addErrback(
                lambda f: self._log.warn("broker {id}: reading the topics being deleted failed ({error}); read "
                                         "again at the next change", id=self._config.broker_id,
                                         error=f.getErrorMessage() or f.type.__name__))

    async def _read_deletions(self) -> None:
        await self._zk.ensure_path(paths.DELETE_TOPICS)
        marked = set(await self._zk.children(paths.DELETE_TOPICS, watch=self._deletion_watch))
        for topic in sorted(self.roles.deleting - marked):  # done: the topic's name is free again
            self._finish_deletion(topic, FINISH_TRIES)
        for topic in sorted(marked - self.roles.deleting):
            self.roles.deleting.add(topic)
            Deferred.fromCoroutine(self._delete_here(topic)).addErrback(
                lambda f, topic=topic: self._log.failure("broker {id}: deleting the replicas of {topic} failed", f,
                                                         id=self._config.broker_id, topic=topic))

    def _finish_deletion(self, topic: str, tries: int) -> None:
        """Its deletion done, give C{topic}'s name back, once the view no longer holds the deleted topic's state
        (else a role could start on it again); a topic made again at once under the name is taken after
        C{FINISH_TRIES} tenths of a second."""
        if self._stopped or topic not in self.roles.deleting:
            return
        if self._view.replica_states(topic) is not None and tries > 0:
            self._reactor.callLater(0.1, self._finish_deletion, topic, tries - 1)
            return
        self.roles.deleting.discard(topic)
        self.roles.update()

    async def _delete_here(self, topic: str) -> None:
        """Stop leading and following C{topic}, delete its logs here, then say so under its deletion mark."""
        self.roles.update()
        count = await self._logs.delete_topic(topic) if topic in self._logs.topics() else 0
        self._log.info("broker {id}: deleted the {count} replica logs of replicated topic {topic}",
                       id=self._config.broker_id, count=count, topic=topic)
        try:
            await self._zk.create(paths.delete_topic_path(topic, self._config.broker_id))
        except (NodeExistsError, NoNodeError):
            pass  # (said before, or the deletion already finished)

    def shut_down(self) -> None:
        """The broker is stopping: follow nothing more (L{ReplicaRoles.shut_down}); lead until moved away."""
        self.roles.shut_down()

    def stop(self) -> Deferred[Any]:
        """Stop leading and following (held C{ack=all} sets get NotLeader); fires once the followers stopped."""
        self._stopped = True
        self._zk.remove_state_listener(self._session_changed)
        return self.roles.stop()

    def _session_changed(self, state: str) -> None:
        if state == CONNECTED:  # (a new session has no watches: read the marks again)
            self._watch_deletions()

    def _auto_create(self, topic: str) -> bool:
        """Create C{topic} replicated (once at a time), unless the cluster holds it as a 0.7 topic."""
        if self._view.holders(topic) or self._view.offline_holders(topic):
            return False
        failure = self.auto_create_failures.get(topic)
        if failure is not None and topic not in self._creating:
            del self.auto_create_failures[topic]  # (tried again below; this produce is told why the last failed)
        if topic not in self._creating:
            self._creating.add(topic)
            d = Deferred.fromCoroutine(self._create(topic))
            d.addBoth(lambda result: (self._creating.discard(topic), result)[1])
        if failure is not None:
            raise LeaderNotAvailable(f"creating {topic} replicated failed: {failure}")
        return True

    async def _create(self, topic: str) -> None:
        config = self._config
        live = max(len(self._view.brokers), 1)
        partitions = min(config.log.partitions_for(topic) * live, MAX_PARTITIONS)
        try:
            created = await create_replicated(self._zk, topic, partitions, config.default_replication_factor,
                                              clock=self._reactor, wait_s=0)
        except ReplicatedTopicExists:
            return  # another broker created it meanwhile (or it is a 0.7 topic now): the view says which
        except Exception as e:
            self.auto_create_failures[topic] = str(e) or type(e).__name__
            self._log.warn("broker {id}: creating topic {topic} replicated failed: {error}", id=config.broker_id,
                           topic=topic, error=self.auto_create_failures[topic])
            return
        self._log.info("broker {id}: created topic {topic} on first write: {count} partitions, each on {factor} "
                       "brokers", id=config.broker_id, topic=topic, count=len(created.assignment.partitions),
                       factor=config.default_replication_factor)

    def _connect(self, broker_id: int) -> BrokerConnection:
        address = self._view.brokers.get(broker_id)
        if address is None:
            raise LeaderNotAvailable(f"broker {broker_id} is not registered: no address to follow it at")
        return BrokerConnection(*address, reactor=self._reactor, options=self._options)
