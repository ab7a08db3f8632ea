# -*- test-case-name: tests.producer.test_failover,tests.producer.test_producer -*-
"""What the static brokers' CLUSTER_METADATA answers say of one topic, for the producer's router
(L{twlog.producer.router.Router}; pure: no I/O).

The answers come best view first (one that follows ZooKeeper describes the whole cluster).  A replicated
topic is read from the best CLUSTER_METADATA_V2 answer that describes it (L{replicated_answer}); a 0.7
topic from every answer, each broker that does not follow ZooKeeper saying what it holds itself
(L{read_answers}).  L{with_topic} keeps what the router learnt of the other topics when one is asked again.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from twlog.coord.layout import ClusterLayout
from twlog.errors import raise_for
from twlog.partition import TopicPartition
from twlog.protocol.replication_codec import ClusterMetadataV2Response, ReplicatedLayout
from twlog.protocol.responses import VIEW_CURRENT, VIEW_STALE, ClusterMetadataResponse

__all__ = ["read_answers", "replicated_answer", "with_topic"]


def with_topic(layout: ClusterLayout, known: ClusterLayout, topic: str) -> ClusterLayout:
    """C{layout}'s brokers, with C{topic}'s partitions and leaders from C{layout} and the other topics' from
    C{known} (what the router learnt of them before)."""
    partitions = {t: tps for t, tps in known.partitions.items() if t != topic}
    leaders = {tp: leader for tp, leader in known.leaders.items() if tp.topic != topic}
    if topic in layout.partitions:
        partitions[topic] = layout.partitions[topic]
        leaders.update((tp, leader) for tp, leader in layout.leaders.items() if tp.topic == topic)
    return attrs.evolve(layout, partitions=partitions, leaders=leaders)


def replicated_answer(cluster: list[ClusterMetadataResponse | ClusterMetadataV2Response], topic: str,
                       read: Callable[..., ClusterLayout]) -> ClusterLayout | None:
    """The layout of the best answer (first) that describes C{topic} as a replicated topic, or None."""
    for answer in cluster:
        if isinstance(answer, ClusterMetadataV2Response) and isinstance(answer.layout(topic), ReplicatedLayout):
            described = answer.layout(topic)
            if described.error:
                raise_for(described.error, f"broker {answer.broker_id} refuses topic {topic!r}")
            layout = read(ClusterLayout.from_metadata(answer))
            return layout if topic in layout.partitions else None
    return None


def read_answers(cluster: list[ClusterMetadataResponse], topic: str, read: Callable[..., ClusterLayout]
                  ) -> tuple[dict[int, tuple[str, int]], set[tuple[int, int]], set[TopicPartition]]:
    """What static brokers' CLUSTER_METADATA answers (best view first) say of C{topic}: the live brokers, the
    registered C{(broker id, partition)} and the offline partitions.  One broker that follows ZooKeeper describes
    everything; each other one that answered is live and says what it holds itself (a view may lag behind a
    broker that has just registered).  C{read} turns a reading into its layout, logging its problems.

    @raise BrokerError: a broker refuses the topic (InvalidTopic).
    """
    live: dict[int, tuple[str, int]] = {}
    registered: set[tuple[int, int]] = set()
    offline: set[TopicPartition] = set()
    for n, answer in enumerate(cluster):
        whole = n == 0 or cluster[0].view not in (VIEW_CURRENT, VIEW_STALE)
        refused = answer.layout(topic)
        if refused is not None:
            raise_for(refused.error, f"broker {answer.broker_id} refuses topic {topic!r}")
        layout = read(ClusterLayout.from_metadata(answer))
        registered.update((tp.fixed_leader, tp.number) for tp in layout.topic_partitions(topic)
                          if whole or tp.fixed_leader == answer.broker_id)
        if whole:
            offline.update(layout.offline_partitions(topic))
        for broker_id, address in layout.brokers.items():
            if whole or broker_id == answer.broker_id:
                live.setdefault(broker_id, address)
    return live, registered, offline
