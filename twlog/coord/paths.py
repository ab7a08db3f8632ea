# -*- test-case-name: tests.coord.test_zk -*-
"""The ZooKeeper layout, Kafka 0.7's paths (shared/DESIGN.md, "ZooKeeper layout")."""

from __future__ import annotations

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
#: Persistent: which brokers have held which 0.7 topics, kept after a broker's registration goes (twlog only).
HELD = "/twlog/held"
#: Ephemeral: the elected controller, C{{"version":1,"brokerid":B,"timestamp":"<ms>"}} (replication).
CONTROLLER = "/twlog/controller"
#: Persistent: the controller epoch, an integer incremented by compare-and-set at each election.
CONTROLLER_EPOCH = "/twlog/controller_epoch"
#: Persistent: the replicated topics (Kafka 0.8's shapes, kept away from 0.7 clients' C{/brokers/topics}).
REPLICATED_TOPICS = "/twlog/topics"
#: Replicated topics being deleted: C{<topic>} (persistent, empty), with a child C{<broker id>} for each replica
#: broker that has deleted its replicas (Kafka's C{/admin/delete_topics}).
DELETE_TOPICS = "/twlog/delete_topics"
#: Ephemeral, one per live broker: its listeners by security protocol (twlog only; L{twlog.coord.endpoints}).
BROKER_ENDPOINTS = "/twlog/brokers/endpoints"
#: Persistent, readable by the cluster alone: C{<user>} = the user's ZooKeeper digest identity (secured clusters).
ZOOKEEPER_DIGESTS = "/twlog/zookeeper-digests"


def broker_id_path(broker_id: int) -> str:
    """C{/brokers/ids/<id>}: ephemeral, the broker's C{host:port}."""
    return f"{BROKER_IDS}/{broker_id}"


def broker_endpoints_path(broker_id: int) -> str:
    """C{/twlog/brokers/endpoints/<id>}: ephemeral, the broker's listeners (C{PLAINTEXT://host:port}, C{SSL://...})."""
    return f"{BROKER_ENDPOINTS}/{broker_id}"


def broker_topic_path(topic: str, broker_id: int | None = None) -> str:
    """C{/brokers/topics/<topic>[/<id>]}: ephemeral per broker, its partition count of the topic."""
    path = f"{BROKER_TOPICS}/{topic}"
    return path if broker_id is None else f"{path}/{broker_id}"


def held_path(topic: str | None = None, broker_id: int | None = None) -> str:
    """C{/twlog/held[/<topic>[/<id>]]}: persistent, the partition count broker C{id} last registered for C{topic}.

    Written by the broker with its ephemeral C{/brokers/topics/<topic>/<id>}, and kept when that goes (the
    broker died, or stopped): so readers know the partitions exist, and say that their broker is down,
    rather than leave them out in silence.  Removed by C{twlog topics delete} and C{twlog brokers forget}.
    """
    if topic is None:
        return HELD
    path = f"{HELD}/{topic}"
    return path if broker_id is None else f"{path}/{broker_id}"


def replicated_topic_path(topic: str | None = None) -> str:
    """C{/twlog/topics[/<topic>]}: persistent, a replicated topic's assignment and config (JSON)."""
    return REPLICATED_TOPICS if topic is None else f"{REPLICATED_TOPICS}/{topic}"


def delete_topic_path(topic: str | None = None, broker_id: int | None = None) -> str:
    """C{/twlog/delete_topics[/<topic>[/<broker id>]]}: a replicated topic being deleted, and each broker done."""
    path = DELETE_TOPICS if topic is None else f"{DELETE_TOPICS}/{topic}"
    return path if broker_id is None else f"{path}/{broker_id}"


def partition_state_path(topic: str, partition: int | None = None) -> str:
    """C{/twlog/topics/<topic>/partitions[/<p>/state]}: persistent, a replicated partition's leader, leader
    epoch, controller epoch and ISR (JSON), written only by compare-and-set on its znode version."""
    path = f"{REPLICATED_TOPICS}/{topic}/partitions"
    return path if partition is None else f"{path}/{int(partition)}/state"


def group_path(group: str) -> str:
    """C{/consumers/<group>}."""
    return f"{CONSUMERS}/{group}"


def consumer_ids_path(group: str, consumer_id: str | None = None) -> str:
    """C{/consumers/<group>/ids[/<consumer id>]}: ephemeral, the subscription (topic -> streams)."""
    path = f"{CONSUMERS}/{group}/ids"
    return path if consumer_id is None else f"{path}/{consumer_id}"


def owner_path(group: str, topic: str, partition: str | None = None) -> str:
    """C{/consumers/<group>/owners/<topic>[/<broker id>-<partition>]}: ephemeral, the owning stream."""
    path = f"{CONSUMERS}/{group}/owners/{topic}"
    return path if partition is None else f"{path}/{partition}"


def offset_path(group: str, topic: str, partition: str | None = None) -> str:
    """C{/consumers/<group>/offsets/<topic>[/<broker id>-<partition>]}: persistent, the next offset."""
    path = f"{CONSUMERS}/{group}/offsets/{topic}"
    return path if partition is None else f"{path}/{partition}"


def partition_name(broker_id: int, partition: int) -> str:
    """A partition's cluster-wide name: C{<broker id>-<partition>}."""
    return f"{broker_id}-{partition}"


def parse_partition_name(name: str) -> tuple[int, int]:
    """C{"3-7"} as C{(3, 7)}."""
    broker, _, partition = name.partition("-")
    return int(broker), int(partition)
