# -*- test-case-name: tests.producer.test_producer,tests.producer.test_failover -*-
"""The producer's router with a static broker list (L{StaticBrokers}, a part of L{twlog.producer.router.Router}):
a topic's partitions and leaders from the brokers' CLUSTER_METADATA_V2 answers (CLUSTER_METADATA from an older
broker), read by the pure L{twlog.producer.answers}."""

from __future__ import annotations

from twisted.internet.defer import Deferred, DeferredList

from twlog.client.bootstrap import OLDER_BROKER
from twlog.coord.layout import ClusterLayout
from twlog.errors import ConnectionFailed
from twlog.partition import TopicPartition
from twlog.producer.answers import read_answers, replicated_answer, with_topic
from twlog.protocol.codec import ClusterMetadataRequest
from twlog.protocol.replication_codec import ClusterMetadataV2Request, ClusterMetadataV2Response
from twlog.protocol.responses import (
    VIEW_CURRENT,
    VIEW_STALE,
    VIEW_STANDALONE,
    VIEW_STARTING,
    VIEWS,
    ClusterMetadataResponse,
)

__all__ = ["PROVISIONAL_S", "REPLICATED_MAX_AGE_S", "StaticBrokers"]

#: Which CLUSTER_METADATA answers the producer prefers: one that follows ZooKeeper describes the whole cluster.
_PREFERENCE = [VIEW_CURRENT, VIEW_STALE, VIEW_STANDALONE, VIEW_STARTING]

#: Static mode: how long partitions including bootstrap ones (a broker not holding the topic yet) are kept.
PROVISIONAL_S = 1.0

#: Static mode: how long a replicated topic's leaders are used before the brokers are asked again (a leader
#: change is learnt sooner from the delivery that meets it; with ack="none" nothing meets it).
REPLICATED_MAX_AGE_S = 10.0


class StaticBrokers:
    """The static-broker half of the router's discovery (its state is the router's: C{_pool}, C{_reactor},
    C{_static_layout}, C{_static_offline}, C{_provisional}, C{_older}, C{_read}, C{_log})."""

    async def _static_partitions(self, topic: str) -> list[TopicPartition]:
        """Ask the static brokers for the cluster (CLUSTER_METADATA): one that follows ZooKeeper describes it
        all; brokers without ZooKeeper describe themselves."""
        connections = self._pool.static
        answers = await DeferredList([Deferred.fromCoroutine(self._ask_cluster(c, topic)) for c in connections],
                                     consumeErrors=True)
        cluster: list[ClusterMetadataResponse | ClusterMetadataV2Response] = []
        problems = []
        for connection, (ok, value) in zip(connections, answers):
            if not ok:
                problems.append(f"{connection.address}: {value.getErrorMessage()}")
                continue
            self._pool.learned(value.broker_id, connection)
            if value.view in _PREFERENCE:
                cluster.append(value)
            else:
                problems.append(f"{connection.address}: its view of the cluster is {VIEWS.get(value.view, value.view)}")
        # A broker still reading ZooKeeper describes itself, as one without ZooKeeper does: use what it says.
        cluster.sort(key=lambda answer: _PREFERENCE.index(answer.view))
        if problems and cluster and cluster[0].view not in (VIEW_CURRENT, VIEW_STALE):
            self._log.warn("producing to topic {topic} without the partitions of {problems}", topic=topic,
                           problems="; ".join(problems))
        replicated = replicated_answer(cluster, topic, self._read)
        if replicated is not None:
            return self._static_replicated(topic, replicated)
        live, registered, offline = read_answers(cluster, topic, self._read)
        if not live:
            raise ConnectionFailed(f"no broker gave partitions for topic {topic!r}: " + "; ".join(problems))
        self._pool.add(live)
        self._static_layout = with_topic(ClusterLayout(live), self._static_layout, topic)
        self._static_offline[topic] = sorted(tp for tp in offline if tp.fixed_leader not in live)
        # Every live broker is a target: one that does not hold the topic yet gets partition 0 (it creates
        # the log on the first write), as Kafka 0.7's producer bootstraps a new topic.
        holders = {b for b, _ in registered}
        pending = {(b, 0) for b in live if b not in holders}
        if pending:
            self._provisional[topic] = self._reactor.seconds() + PROVISIONAL_S
        else:
            self._provisional.pop(topic, None)
        return [TopicPartition.on_broker(topic, b, p) for b, p in sorted(registered | pending)]

    async def _ask_cluster(self, connection, topic: str) -> ClusterMetadataResponse | ClusterMetadataV2Response:
        """C{connection}'s CLUSTER_METADATA_V2 answer for C{topic}; an older broker's CLUSTER_METADATA answer (it
        closes the connection on type 14, which reconnects: it is asked type 8 from then on)."""
        if id(connection) not in self._older:
            try:
                return await connection.request(ClusterMetadataV2Request((topic,)))
            except OLDER_BROKER:
                self._older.add(id(connection))
        return await connection.request(ClusterMetadataRequest((topic,)))

    def _static_replicated(self, topic: str, layout: ClusterLayout) -> list[TopicPartition]:
        """C{topic}, a replicated topic in the best answer's C{layout}: its partitions with a live leader (the
        offline ones are numbered too), kept for L{REPLICATED_MAX_AGE_S}."""
        self._pool.add(layout.brokers)
        self._static_layout = with_topic(layout, self._static_layout, topic)
        self._static_offline[topic] = layout.offline_partitions(topic)
        self._provisional[topic] = self._reactor.seconds() + REPLICATED_MAX_AGE_S
        return layout.topic_partitions(topic)
